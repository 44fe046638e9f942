"""The simulator against what Debian kernels delivered live (no qemu needed).

tests/live_results/<X.Y>.json hold the super-packets that 5.10, 6.1 and 6.12, booted under
qemu, built from the selftest catalogue and the sample captures
(``scripts/guest_replay.py IMAGE --write tests/live_results``, ``gropcap.replay.guest``).
Each job is simulated here with ``--kernel X.Y`` and must give exactly the same units;
the job's frame digest says whether the stored results still belong to the frames the
cases and samples produce today.
"""

from __future__ import annotations

import functools
import glob
import os

import pytest

from gropcap import selftest_cases as ST
from gropcap.replay import guest as G

from where import TESTS

HERE = TESTS
RESULT_FILES = sorted(glob.glob(os.path.join(HERE, "live_results", "*.json")))
_JOBS: dict = {}


def _jobs() -> dict:
    if not _JOBS:
        for j in G.selftest_jobs() + G.sample_jobs() + G.cells_jobs() + \
            G.selftest_jobs(["ipv4", "ipv6"], gro_list=True):
            _JOBS[j.name] = j
    return _JOBS


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
    return G.load_results(path)


def _stored():
    out = []
    for path in RESULT_FILES:
        res = _load(path)
        for name in sorted(res["jobs"]):
            out.append(pytest.param(path, name, id=f"{res['kernel']}:{name}"))
    return out


# differences between a live kernel and the simulator that are known and owned by the GRO
# rules (issue 13); strict: once the rule is fixed the mark must go
KNOWN: dict[tuple[str, str], str] = {
    # (empty: the last ones, 5.10.223's ip6gretap / ip6erspan cells, are modelled by
    # KernelProfile.ip6gre_tap_hard_header_len, tests/gro/test_gro_ip6gretap_hard_header_len.py)
}


@pytest.mark.parametrize("path,name", _stored())
def test_simulator_matches_guest_kernel(path, name, request):
    res = _load(path)
    why = KNOWN.get((res["kernel"], name))
    if why:
        request.applymarker(pytest.mark.xfail(strict=True, reason=why))
    job = _jobs().get(name)
    assert job is not None, f"{name} is no longer a job: regenerate {path}"
    r = res["jobs"][name]
    if "error" in r:
        # the guest could not inject it (e.g. a frame above the XDP MTU cap on 5.10)
        assert r["error"], name
        pytest.skip(f"not replayable on {res['release']}: {r['error']}")
    (o,) = G.compare_results([job], res)
    assert o.status == "agree", "\n".join([o.detail] + o.lines[:20])
    assert r["lost"] == [] and r.get("unmatched", []) == []


@pytest.mark.parametrize("path,name", [p for p in _stored()
                                       if p.values[1].startswith("selftest/")])
def test_case_table_matches_guest_kernel(path, name):
    """The case table's expected sizes for X.Y are what the X.Y kernel delivered."""
    res = _load(path)
    r = res["jobs"][name]
    if "error" in r:
        pytest.skip(f"not replayable on {res['release']}: {r['error']}")
    _set, proto, case = name.split("/")
    kernel = tuple(int(x) for x in res["kernel"].split("."))
    assert r["sizes"] == ST.CASES[case].expected(proto, kernel)


def test_results_cover_the_releases():
    kernels = {_load(p)["kernel"] for p in RESULT_FILES}
    assert kernels >= {"6.1"}, kernels


def test_runs_round_trip():
    idx = (0, 1, 2, 5, 7, 8)
    assert G._runs(idx) == [[0, 2], [5, 5], [7, 8]]
    assert G._unruns(G._runs(idx)) == idx


def test_job_round_trip_and_digest():
    (j,) = G.selftest_jobs(["ipv6"], ["flags_psh"])
    k = G.Job.from_dict(j.to_dict())
    assert k.frames == j.frames and k.bursts == j.bursts and k.digest() == j.digest()
    k.frames[0] = k.frames[0][:-1] + b"\x01"
    assert k.digest() != j.digest()


def test_upstream_version_of_the_guests():
    """Debian's ABI release names carry no stable number; the kept results are simulated
    with the upstream X.Y.Z (KernelProfile.stable), the others with X.Y."""
    assert G.upstream_version({"release": "5.10.0-32-amd64", "kernel": "5.10"}) == "5.10.223"
    assert G.upstream_version({"release": "6.1.0-57-amd64", "kernel": "6.1"}) == "6.1.192"
    assert G.upstream_version({"release": "6.12.117+deb12-amd64",
                               "kernel": "6.12"}) == "6.12.117"
    assert G.upstream_version({"release": "6.2.0-1-amd64", "kernel": "6.2"}) == "6.2"


def test_release_names():
    assert G.image_release("/boot/vmlinuz-6.12.117+deb12-amd64") == "6.12.117+deb12-amd64"
    assert G.kernel_of_release("6.12.117+deb12-amd64") == "6.12"
    assert G.kernel_of_release("5.10.0-32-amd64") == "5.10"
    with pytest.raises(Exception, match="release"):
        G.image_release("/boot/bzImage")


@pytest.mark.parametrize("release,name,other", [
    # IPv6 hop limit joined the flow compare in 5.18 (ipv6_gro_receive)
    ("5.10", "selftest/ipv6/ip_hoplimit6", "6.1"),
    # CWR leaves the flushing flag set in 6.15; outer fixed IDs in 6.18
    ("6.1", "selftest/ipip/flags_cwr", "6.18"),
    ("6.1", "selftest/ipip/ip_id_df0_fixed", "6.18"),
    # stable backports the upstream version carries (guest.upstream_version): without
    # 4b3e33fcc38f ("ip6_tunnel: Fix broken GRO", 5.10.225 / 6.1.107) gro_list_prepare
    # compares the ip6tnl device's hard_header_len bytes: 5.10.223 leaves the last short
    # segment out, mainline 6.1 would merge nothing; b0b672c4d095 (GPE GRO) is in 6.1.43
    ("5.10", "cells/crafted_ip6ip6.pcap/native-off", "5.10.225"),
    ("6.1", "cells/crafted_ip6ip6.pcap/native-off", "6.1"),
    ("6.1", "cells/crafted_ip4ip6.pcap/native-off", "6.1.106"),
    ("6.1", "sockets/crafted_vxlan_gpe.pcap", "6.1.42"),
])
def test_stored_results_tell_releases_apart(release, name, other):
    """What a release delivered disagrees with another release's rules where a rule
    changed in between: the stored runs pin the profile switches, not just one answer."""
    path = os.path.join(HERE, "live_results", f"{release}.json")
    if not os.path.exists(path):
        pytest.skip(f"no stored {release} results")
    res = _load(path)
    job = _jobs()[name]
    (same,) = G.compare_results([job], res)
    (later,) = G.compare_results([job], res, kernel=other)
    assert same.status == "agree" and later.status == "differ", (same.detail, later.detail)
