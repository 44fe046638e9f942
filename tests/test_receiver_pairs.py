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
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, os.path.dirname(__file__))

import gropcap  # noqa: E402
from gropcap.cli import main  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.pipeline import decode_files  # noqa: E402
from gropcap.calibrate import FIT_KEYS  # noqa: E402
from gropcap.receiver import load_profile, read_profile  # noqa: E402

PAIRS = Path(__file__).resolve().parent.parent / "sample_pcaps" / "pairs"
TRAIN = "bulk"              # fitted on the plain one-stream recording
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


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("receiver") / "host.toml"
    r = CliRunner().invoke(main, ["calibrate", str(PAIRS / f"{TRAIN}.wire.pcap"),
                                  str(PAIRS / f"{TRAIN}.postgro.pcap"), "-o", str(path)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "remaining difference" in r.output
    return path


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
