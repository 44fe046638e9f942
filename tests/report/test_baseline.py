"""Regression baselines: `gropcap baseline save/check`, and the bundled baselines in
benchmarks/baselines/ checked against the bundled samples.

When a GRO rule changes on purpose, re-record the bundled baselines (and review the diff)::

    python -m gropcap.cli baseline save <files> -o benchmarks/baselines/<name> --force <opts>

with the files and options listed in BUNDLED below.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from click.testing import CliRunner

from tests.report.test_explain import GRE, SAMPLES  # noqa: E402

from gropcap.cli import main  # noqa: E402
from gropcap.errors import ConfigError  # noqa: E402
from gropcap.report.baseline import (BaselineError, load_baseline,  # noqa: E402
                                     parse_tolerance)
from gropcap.cli.report import register  # noqa: E402

from where import TESTS

register(main)
BASELINES = os.path.join(TESTS, "..", "benchmarks", "baselines")
NON_DSA = sorted(f for f in glob.glob(os.path.join(SAMPLES, "*.pcap*"))
                 if "crafted_dsa_" not in f)
BUNDLED = {
    "samples.json": (NON_DSA, []),
    **{f"dsa-{t}.json": ([os.path.join(SAMPLES, f"crafted_dsa_{t.replace('-', '_')}.pcap")],
                         ["--dsa-tag", t]) for t in ("dsa", "edsa", "brcm", "brcm-prepend")},
    "real-ipv4-p4-queues4-kernel6.6.json": ([os.path.join(SAMPLES, "real_ipv4_p4.pcap")],
                                            ["--queues", "4", "--kernel", "6.6"]),
}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def gre_base(tmp_path):
    path = tmp_path / "base.json"
    r = run("baseline", "save", GRE, "-o", path)
    assert r.exit_code == 0, r.output
    assert r.output == f"baseline of 1 capture(s), models ideal, napi, kernel 6.18 -> {path}\n"
    return path


def test_every_bundled_baseline_is_checked_here():
    assert sorted(os.listdir(BASELINES)) == sorted(BUNDLED)


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_baseline_passes(name):
    files, opts = BUNDLED[name]
    r = run("baseline", "check", *files, "--against", os.path.join(BASELINES, name), *opts)
    assert r.exit_code == 0, r.output + "\n(re-record as described in the module docstring " \
                                        "if the GRO rules changed on purpose)"
    n_models = len(load_baseline(os.path.join(BASELINES, name))["models"])
    assert r.output == f"baseline ok: {len(files) * n_models} capture/model results within 2%\n"


def test_recorded_metrics_of_crafted_gre(gre_base):
    b = json.loads(gre_base.read_text())
    m = b["captures"]["crafted_gre.pcap"]["metrics"]["ideal"]
    # 32 data segments in bursts of 8, 6, 2, 5, 3, 8 plus 3 pure ACKs (test_explain.py)
    assert (m["packets_in"], m["superpackets"], m["segments"], m["largest_superpacket"]) == \
        (35, 9, 35, 8)
    assert m["aggregation_ratio"] == round(35 / 9, 4)
    assert m["end_reasons"] == {"NOT_HELD_ZERO_PAYLOAD": 3, "FLUSH_TCP_TS": 3, "END_PSH": 2,
                                "FLUSH_SEQ": 1}
    assert b["config"]["kernel"] == "6.18" and "model" not in b["config"]
    import xxhash
    assert b["captures"]["crafted_gre.pcap"]["digest"] == \
        "xxh3-128:" + xxhash.xxh3_128(open(GRE, "rb").read()).hexdigest()


def test_changed_configuration_is_compared_and_said(gre_base):
    """Another kernel: the metrics are compared anyway (6.1 aggregates this capture as 6.18
    does) and one line says what differs."""
    r = run("baseline", "check", GRE, "--against", gre_base, "--kernel", "6.1")
    assert (r.exit_code, r.output) == (
        0, "baseline ok: 2 capture/model results within 2%\n"
           "differs from the baseline: configuration kernel '6.18' -> '6.1'\n")


def test_recorded_configuration_passes(gre_base):
    r = run("baseline", "check", GRE, "--against", gre_base)
    assert (r.exit_code, r.output) == (0, "baseline ok: 2 capture/model results within 2%\n")


def test_changed_capture_bytes_are_compared_and_said(gre_base, tmp_path):
    """A new recording of the same workload (other bytes, same packets) is compared."""
    other = tmp_path / "crafted_gre.pcap"
    data = bytearray(open(GRE, "rb").read())
    data[24 + 4] ^= 1                     # first record's microseconds: same packets
    other.write_bytes(bytes(data))
    r = run("baseline", "check", other, "--against", gre_base)
    import xxhash
    new, old = (xxhash.xxh3_128(d).hexdigest()[:12] for d in (bytes(data),
                                                              open(GRE, "rb").read()))
    assert (r.exit_code, r.output) == (
        0, "baseline ok: 2 capture/model results within 2%\n"
           f"differs from the baseline: capture crafted_gre.pcap xxh3-128:{new}... "
           f"(baseline xxh3-128:{old}...)\n")


@pytest.mark.parametrize("same", [True, False])
def test_baseline_of_an_earlier_release_checks_its_sha256(gre_base, tmp_path, same):
    """A baseline written before the digest was XXH3-128 names each capture by a bare
    sha256: the capture is hashed again with sha256, the same bytes pass silently and
    other bytes are said."""
    import hashlib
    b = json.load(open(gre_base))
    cap = b["captures"]["crafted_gre.pcap"]
    data = open(GRE, "rb").read()
    cap["sha256"] = hashlib.sha256(data if same else data + b"x").hexdigest()
    del cap["digest"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(b))
    r = run("baseline", "check", GRE, "--against", old)
    said = "" if same else (f"differs from the baseline: capture crafted_gre.pcap "
                            f"xxh3-128:{xxhash_of(data)[:12]}... "
                            f"(baseline sha256:{cap['sha256'][:12]}...)\n")
    assert (r.exit_code, r.output) == (
        0, "baseline ok: 2 capture/model results within 2%\n" + said)


def xxhash_of(data: bytes) -> str:
    import xxhash
    return xxhash.xxh3_128(data).hexdigest()


def test_new_recording_under_another_name_is_paired(gre_base, tmp_path):
    renamed = tmp_path / "gre-today.pcap"
    renamed.write_bytes(open(GRE, "rb").read())
    r = run("baseline", "check", renamed, "--against", gre_base)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1] == ("differs from the baseline: capture gre-today.pcap "
                                        "compared with the baseline's crafted_gre.pcap")


def test_extra_capture_is_said_and_the_rest_compared(gre_base):
    r = run("baseline", "check", GRE, os.path.join(SAMPLES, "crafted_ipip.pcap"),
            "--against", gre_base)
    assert (r.exit_code, r.output) == (
        0, "baseline ok: 2 capture/model results within 2%\n"
           "differs from the baseline: capture crafted_ipip.pcap not in the baseline\n")


def test_nothing_compared_is_exit_4(gre_base):
    r = run("baseline", "check", os.path.join(SAMPLES, "crafted_ipip.pcap"),
            os.path.join(SAMPLES, "crafted_sit.pcap"), "--against", gre_base)
    assert r.exit_code == 4, r.output
    assert r.output.splitlines()[0] == ("baseline check: nothing compared: no capture pairs "
                                        "with the baseline's")


def test_unreadable_capture_is_exit_5(gre_base, tmp_path):
    bad = tmp_path / "crafted_gre.pcap"
    bad.write_bytes(b"not a capture at all, not even close")
    r = run("baseline", "check", bad, "--against", gre_base)
    assert r.exit_code == 5, r.output
    assert r.output.startswith(f"gropcap: error: {bad}")


def test_exit_codes_are_distinct_and_documented():
    from gropcap.report.baseline import EXIT_CODES
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4, 5]
    r = run("baseline", "check", "--help")
    text = " ".join(r.output.split())
    for code, meaning in EXIT_CODES.items():
        assert f"{code} " in text
    for line in ("0 every compared metric is within the tolerance",
                 "1 a metric moved by more than the tolerance",
                 "3 the baseline file is missing, unreadable or not a baseline",
                 "4 nothing compared: no capture pairs with the baseline's",
                 "5 a capture could not be read or decoded"):
        assert line in text
    readme = " ".join(open(os.path.join(TESTS, "..", "README.md"))
                      .read().split())
    for code in EXIT_CODES:
        assert f"`{code}`" in readme[readme.index("baseline check` exit codes"):][:600]


def _tamper(path, fn):
    b = json.loads(path.read_text())
    fn(b["captures"]["crafted_gre.pcap"]["metrics"]["napi"])
    path.write_text(json.dumps(b))


def test_moved_metrics_are_exit_1_with_a_table(gre_base):
    def worse(m):
        m["superpackets"] = 12             # the run now gives 9: -25%
        m["end_reasons"]["FLUSH_SEQ"] = 4  # 4 -> 1 of 12 super-packets: 25 points
    _tamper(gre_base, worse)
    r = run("baseline", "check", GRE, "--against", gre_base)
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert lines[0] == "baseline check failed: 2 metrics moved by more than 2%"
    assert not any(line.startswith("differs") for line in lines)
    rows = [line.split() for line in lines[3:]]
    assert ["crafted_gre.pcap", "napi", "superpackets", "12", "9", "-25.0%"] in rows
    assert ["crafted_gre.pcap", "napi", "end", "reason", "FLUSH_SEQ", "4", "1", "-25.0%"] \
        in rows


def test_tolerance_decides(gre_base):
    def nudge(m):
        m["aggregation_ratio"] = round(m["aggregation_ratio"] * 1.01, 4)   # 1% off
    _tamper(gre_base, nudge)
    assert run("baseline", "check", GRE, "--against", gre_base).exit_code == 0
    r = run("baseline", "check", GRE, "--against", gre_base, "--tolerance", "0.5%")
    assert r.exit_code == 1 and "aggregation_ratio" in r.output
    r = run("baseline", "check", GRE, "--against", gre_base, "--tolerance", "lots")
    assert r.exit_code == 2 and "--tolerance" in r.output


def test_bad_baseline_file_is_one_line_exit_3(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text("{not json")
    r = run("baseline", "check", GRE, "--against", bad)
    assert r.exit_code == 3
    assert r.output.strip().splitlines() == [f"gropcap: error: {bad}: not JSON: Expecting "
                                             f"property name enclosed in double quotes at "
                                             f"line 1"]
    assert run("baseline", "check", GRE, "--against", tmp_path / "none.json").exit_code == 3
    bad.write_text(json.dumps({"format": 99}))
    with pytest.raises(BaselineError, match="not a gropcap baseline"):
        load_baseline(bad)


def test_save_refuses_to_overwrite(gre_base):
    before = gre_base.read_text()
    r = run("baseline", "save", GRE, "-o", gre_base, "--kernel", "6.1")
    assert r.exit_code == 1 and "--force" in r.output
    assert gre_base.read_text() == before


@pytest.mark.parametrize("text, value", [("2%", 0.02), ("0.5%", 0.005), ("0.1", 0.1),
                                         (0.03, 0.03)])
def test_parse_tolerance(text, value):
    assert parse_tolerance(text) == pytest.approx(value)


def test_parse_tolerance_rejects():
    for text in ("-1%", "x", "2000%"):
        with pytest.raises(ConfigError):
            parse_tolerance(text)


def test_gro_cells_stage_recorded_and_checked(tmp_path):
    """With the gro_cells stage modelled, the baseline records it and what reaches the
    stack. Native GRO off, tunnel GRO on: the GRE device (gro_cells) aggregates the 35
    decapsulated segments of crafted_gre into 9 (docs/seed-cases.md, "native off / tunnel
    on, GRE")."""
    path = tmp_path / "cells.json"
    opts = ["--no-native-gro", "--tunnel-gro", "--model", "ideal"]
    r = run("baseline", "save", GRE, "-o", path, *opts)
    assert r.exit_code == 0, r.output
    m = json.loads(path.read_text())["captures"]["crafted_gre.pcap"]["metrics"]
    assert (m["ideal"]["packets_in"], m["ideal"]["superpackets"]) == (35, 35)
    cells = m["ideal/gro_cells"]
    assert (cells["packets_in"], cells["superpackets"], cells["segments"]) == (35, 9, 35)
    assert m["ideal/delivered"] == {"packets_in": 35, "segments": 35, "superpackets": 9,
                                    "aggregation_ratio": round(35 / 9, 4)}
    check = opts[:2]           # check takes the models from the baseline
    r = run("baseline", "check", GRE, "--against", path, *check)
    assert r.exit_code == 0, r.output
    b = json.loads(path.read_text())
    b["captures"]["crafted_gre.pcap"]["metrics"]["ideal/gro_cells"]["superpackets"] = 12
    path.write_text(json.dumps(b))
    r = run("baseline", "check", GRE, "--against", path, *check)
    assert r.exit_code == 1, r.output
    assert ["crafted_gre.pcap", "ideal/gro_cells", "superpackets", "12", "9", "-25.0%"] in \
        [line.split() for line in r.output.splitlines()]


def test_inputs_the_configuration_refuses_are_usage_exit_2(gre_base, tmp_path):
    """Two captures with one file name cannot be keyed in a baseline: bad usage, not a
    capture error (5) nor a moved metric (1)."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "crafted_gre.pcap").write_bytes(open(GRE, "rb").read())
    r = run("baseline", "check", tmp_path / "a" / "crafted_gre.pcap",
            tmp_path / "b" / "crafted_gre.pcap", "--against", gre_base)
    assert r.exit_code == 2, r.output
    assert "two captures named 'crafted_gre.pcap'" in r.output
