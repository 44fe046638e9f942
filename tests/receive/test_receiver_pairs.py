"""The issue-12 generalisation test: a receiver profile fitted on one real pair (wire view +
the live kernel's post-GRO view, sample_pcaps/pairs/, recorded by make_pairs.py) gives the
kernel's packet count within 3% on every other pair recorded on the same host.

The kernel's count is the number of frames in the post-GRO view (tcpdump on the receiving
veth: one frame per skb GRO built). Options a pair's description states for its receiver
(``gropcap_options``: UDP GRO sockets, tunnel sockets) are given as options, as a user
would, and win over the profile.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner


import gropcap  # noqa: E402
from gropcap.cli import main  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.run.memory import decode_files  # noqa: E402
from gropcap.calibrate import FIT_KEYS  # noqa: E402
from gropcap.receive.profile import load_profile, read_profile  # noqa: E402

from where import TESTS

PAIRS = Path(TESTS).parent / "sample_pcaps" / "pairs"
TRAIN = "bulk"              # fitted on the plain one-stream recording
DETERMINES = "mss536"       # its polls end super-packets (pushes longer than the budget)
TOLERANCE = 0.03            # issue 12: "each within 3%"


def describe(name: str) -> dict:
    return json.loads((PAIRS / f"{name}.json").read_text())


def pair_names() -> list[str]:
    return sorted(p.name[:-len(".wire.pcap")] for p in PAIRS.glob("*.wire.pcap"))


def same_host(name: str) -> bool:
    a, b = describe(TRAIN), describe(name)
    return (a.get("kernel"), a.get("hz")) == (b.get("kernel"), b.get("hz"))


def kernel_count(name: str) -> int:
    table, _ = decode_files(PAIRS / f"{name}.postgro.pcap")
    return table.num_rows


def fit_profile(directory: Path, path: Path) -> Path:
    """``gropcap calibrate`` on the TRAIN pair of ``directory``, profile written to ``path``."""
    r = CliRunner().invoke(main, ["calibrate", str(directory / f"{TRAIN}.wire.pcap"),
                                  str(directory / f"{TRAIN}.postgro.pcap"), "-o", str(path)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "remaining difference" in r.output
    return path


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return fit_profile(PAIRS, tmp_path_factory.mktemp("receiver") / "host.toml")


def test_pairs_are_there():
    names = pair_names()
    assert TRAIN in names and len(names) >= 5, names
    for n in names:
        assert (PAIRS / f"{n}.postgro.pcap").exists() and (PAIRS / f"{n}.json").exists()


def test_calibrate_writes_a_profile_of_the_pair(profile):
    doc = read_profile(profile)
    assert set(FIT_KEYS) <= set(doc["receiver"])
    fit = doc["fit"]
    assert fit["kernel_release"] == describe(TRAIN)["kernel"]
    assert fit["kernel_packets"] == kernel_count(TRAIN)
    assert fit["wire"].endswith(f"{TRAIN}.wire.pcap")
    assert sum(f["kernel"] for f in fit["flows"]) == fit["kernel_packets"]
    assert sum(f["model"] for f in fit["flows"]) == fit["napi_packets"]
    # fitting is at least as good as the defaults on the pair it was fitted on
    assert abs(fit["total_difference"]) <= abs(fit["napi_default_packets"]
                                               - fit["kernel_packets"])


@pytest.mark.parametrize("name", [n for n in pair_names() if n != TRAIN])
def test_profile_fitted_on_one_pair_holds_on_the_others(profile, name):
    if not same_host(name):
        pytest.skip(f"{name} was recorded on another host than {TRAIN}")
    kernel = kernel_count(name)
    config = GroConfig(**describe(name).get("gropcap_options", {}))
    if "mtu" in {f.name for f in dataclasses.fields(GroConfig)}:
        # the device MTU of this pair's receiver, stated as --mtu would (mtu9000)
        config = config.replace(mtu=describe(name)["receiver"]["mtu"])
    a = gropcap.analyze(PAIRS / f"{name}.wire.pcap", config, models=("napi",),
                        receiver=str(profile))
    napi = a.summary()["models"]["napi"]["superpackets_out"]
    assert abs(napi - kernel) <= TOLERANCE * kernel, \
        f"{name}: kernel {kernel}, napi with the {TRAIN} profile {napi} " \
        f"({(napi - kernel) / kernel:+.1%}); profile {load_profile(profile)}"



SET2 = PAIRS / "set2"
# A second recording session of the same kinds (same host, an hour later): the bulk
# profile keeps the default gap (bulk only bounds it), and on this session's MSS 536
# recording that gap splits the pushes where the kernel's polls did not (the kernel's own
# polls give its count exactly: test_pairs.py). This is timing only: these wire views hold
# no ACKs. Recordings that also hold the receiver's ACKs (sample_pcaps/pairs/acks1..3)
# pass the same test with --poll-acks (tests/receive/test_ack_polls.py; docs/gro-model.md, "Poll
# ends from the receiver's ACKs").
SET2_KNOWN = {"mss536": "kernel 51, napi with the bulk profile 48 (-5.9%): poll gap "
                        "inference (exact with the kernel's polls)"}


@pytest.fixture(scope="module")
def profile2(tmp_path_factory):
    return fit_profile(SET2, tmp_path_factory.mktemp("receiver2") / "host.toml")


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=SET2_KNOWN[n]))
    if n in SET2_KNOWN else n
    for n in sorted(p.name[:-len(".wire.pcap")] for p in SET2.glob("*.wire.pcap"))
    if n != TRAIN])
def test_profile_fitted_on_one_pair_holds_on_a_second_session(profile2, name):
    meta = json.loads((SET2 / f"{name}.json").read_text())
    config = GroConfig(**meta.get("gropcap_options", {})).replace(mtu=meta["receiver"]["mtu"])
    kernel = decode_files(SET2 / f"{name}.postgro.pcap")[0].num_rows
    a = gropcap.analyze(SET2 / f"{name}.wire.pcap", config, models=("napi",),
                        receiver=str(profile2))
    napi = a.summary()["models"]["napi"]["superpackets_out"]
    assert abs(napi - kernel) <= TOLERANCE * kernel, \
        f"set2/{name}: kernel {kernel}, napi with the {TRAIN} profile {napi}"


def _calibrate(tmp_path, name):
    path = tmp_path / f"{name}.toml"
    r = CliRunner().invoke(main, ["calibrate", str(PAIRS / f"{name}.wire.pcap"),
                                  str(PAIRS / f"{name}.postgro.pcap"), "-o", str(path)])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.output, read_profile(path)["fit"]


def test_calibrate_says_when_a_pair_only_bounds_the_polls(tmp_path):
    """On the one-stream recording every poll ended at a push boundary, where the
    super-packet ended anyway (ideal model = kernel): the fit says the poll gap is only
    bounded there, and gives the range that fits as well. The MSS 536 recording
    determines it (its ideal count is not the kernel's) and gets no such note."""
    out, fit = _calibrate(tmp_path, TRAIN)
    assert fit["ideal_packets"] == fit["kernel_packets"]
    assert "only bounds the poll parameters" in out
    lo, hi = fit["poll_gap_us_range"]
    assert lo <= read_profile(tmp_path / f"{TRAIN}.toml")["receiver"]["poll_gap_us"] <= hi
    assert f"any of {lo:g}-{hi:g} us fits as well" in out
    out, fit = _calibrate(tmp_path, DETERMINES)
    assert fit["ideal_packets"] != fit["kernel_packets"]
    assert "only bounds" not in out


def test_calibrate_holds_given_options_and_records_stated_ones(tmp_path):
    path = tmp_path / "host.toml"
    r = CliRunner().invoke(main, ["calibrate", str(PAIRS / f"{TRAIN}.wire.pcap"),
                                  str(PAIRS / f"{TRAIN}.postgro.pcap"), "-o", str(path),
                                  "--budget", "300", "--gro-max-size", "65536"])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "budget                 300          option" in r.output
    doc = read_profile(path)
    assert doc["receiver"]["budget"] == 300 and doc["receiver"]["gro_max_size"] == 65536
    assert doc["fit"]["fixed"] == ["budget"]


def test_calibrate_fits_several_pairs_together(tmp_path):
    path = tmp_path / "host.toml"
    names = ("p8", "nots")
    args = [str(PAIRS / f"{n}.{v}.pcap") for n in names for v in ("wire", "postgro")]
    r = CliRunner().invoke(main, ["calibrate", *args, "-o", str(path)])
    assert r.exit_code == 0, (r.output, r.exception)
    fit = read_profile(path)["fit"]
    assert [os.path.basename(w) for w in fit["wire"]] == [f"{n}.wire.pcap" for n in names]
    assert fit["kernel_packets"] == sum(kernel_count(n) for n in names)
    assert {f["flow"].split(":")[0] for f in fit["flows"]} == \
        {f"{n}.wire.pcap" for n in names}
    assert sum(f["model"] for f in fit["flows"]) == fit["napi_packets"]
    odd = CliRunner().invoke(main, ["calibrate", *args[:3], "-o", str(tmp_path / "x")])
    assert odd.exit_code == 2 and "in pairs" in odd.output
