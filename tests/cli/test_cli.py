"""The command line: exit codes, one-line errors, Parquet output and its metadata."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import xxhash
from click.testing import CliRunner

from gropcap.capture import write_pcap
from gropcap.cli import main

from where import TESTS

HERE = TESTS
SAMPLES = os.path.join(HERE, "..", "sample_pcaps")
REAL = os.path.join(SAMPLES, "real_ipv4.pcap")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def xxh(path):
    """The capture digest (``capture.fingerprint``), computed here with xxhash itself."""
    with open(path, "rb") as f:
        return "xxh3-128:" + xxhash.xxh3_128(f.read()).hexdigest()


def test_decode_writes_one_row_per_record_with_provenance(tmp_path):
    out = tmp_path / "p.parquet"
    r = run("decode", REAL, "-o", out)
    assert r.exit_code == 0, r.output
    table = pq.read_table(out)
    n_records = sum(1 for _ in __import__("dpkt").pcap.Reader(open(REAL, "rb")))
    assert table.num_rows == n_records
    assert f"{n_records} packets from 1 file(s)" in r.output
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["gropcap.version"] == __import__("gropcap").__version__
    src = json.loads(meta["gropcap.sources"])
    assert src[0]["path"].endswith("real_ipv4.pcap")
    assert src[0]["digest"] == xxh(REAL)
    assert json.loads(meta["gropcap.linktypes"]) == [1]


def test_decode_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "p.parquet"
    assert run("decode", REAL, "-o", out).exit_code == 0
    before = out.read_bytes()
    r = CliRunner().invoke(main, ["decode", REAL, "-o", str(out)])
    assert r.exit_code == 1
    assert "output exists" in r.output and "--force" in r.output
    assert out.read_bytes() == before
    assert run("decode", REAL, "-o", out, "--force").exit_code == 0


def test_bad_magic_is_one_line_exit_1(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is not a capture at all" * 4)
    p = subprocess.run([sys.executable, "-m", "gropcap.cli", "decode", str(bad), "-o",
                        str(tmp_path / "x.parquet")], capture_output=True, text=True)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(bad) in lines[0] and "offset 0" in lines[0]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_file_cut_mid_record_names_offset_and_record(tmp_path):
    frames = [bytes(60)] * 3
    path = tmp_path / "cut.pcap"
    write_pcap(str(path), frames, [1, 2, 3])
    data = path.read_bytes()
    # cut the third record in the middle of its packet bytes
    path.write_bytes(data[:-30])
    r = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    # a capture still being written: complete records are used, with a warning
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["packets"] == 2
    warning = " ".join(summary["files"][0]["warnings"])
    assert "record 2" in warning and "offset" in warning


def test_missing_file_is_exit_1():
    r = CliRunner().invoke(main, ["analyze", "/nonexistent/x.pcap"])
    assert r.exit_code == 1
    assert "/nonexistent/x.pcap" in r.output


def test_bad_option_is_exit_2():
    r = CliRunner().invoke(main, ["analyze", REAL, "--kernel", "banana"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["analyze", REAL, "--model", "sideways"])
    assert r.exit_code == 2


def test_analyze_json_shape_and_accounting():
    r = run("analyze", REAL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["kernel"] == "6.18"
    assert set(s["models"]) == {"ideal", "napi"}
    for m in s["models"].values():
        assert m["packets_in"] == s["packets"]
        assert 0 < m["superpackets_out"] <= m["packets_in"]
        assert m["aggregation_ratio"] == pytest.approx(m["packets_in"] / m["superpackets_out"],
                                                       abs=1e-3)
        assert sum(m["reasons"].values()) == m["packets_in"]
        assert sum(m["end_reasons"].values()) == m["superpackets_out"]
    # the ideal model is the upper bound of the napi model
    assert s["models"]["ideal"]["superpackets_out"] <= s["models"]["napi"]["superpackets_out"]
    one = json.loads(run("analyze", REAL, "--format", "json", "--model", "ideal").stdout)
    assert set(one["models"]) == {"ideal"}
    assert one["models"]["ideal"] == s["models"]["ideal"]


def test_analyze_out_dir_parquet_roundtrip(tmp_path):
    out = tmp_path / "res"
    r = run("analyze", REAL, "--out", out, "--kernel", "6.6", "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    packets = pq.read_table(out / "packets.parquet")
    sp = pq.read_table(out / "superpackets.parquet")
    flows = pq.read_table(out / "flows.parquet")
    assert packets.num_rows == s["packets"]
    for col in ("gro_seg", "gro_role", "reason", "rx_queue", "poll_id", "ideal_gro_seg"):
        assert col in packets.column_names
    napi = sp.filter(sp.column("model").to_numpy(zero_copy_only=False) == "napi")
    assert napi.num_rows == s["models"]["napi"]["superpackets_out"]
    assert sum(napi.column("count").to_pylist()) == packets.num_rows
    assert sum(flows.column("packets").to_pylist()) == packets.num_rows
    meta = {k.decode(): v.decode() for k, v in sp.schema.metadata.items()}
    assert json.loads(meta["gropcap.config"])["kernel"] == "6.6"
    # refuses to overwrite
    r = CliRunner().invoke(main, ["analyze", REAL, "--out", str(out)])
    assert r.exit_code == 1 and "--force" in r.output


def test_text_report_is_plain_when_not_a_terminal():
    r = run("analyze", REAL)
    assert r.exit_code == 0, r.output
    assert "\x1b[" not in r.output
    assert "Aggregation" in r.output and "napi" in r.output and "ideal" in r.output
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_directory_input(tmp_path):
    d = tmp_path / "caps"
    d.mkdir()
    shutil.copy(REAL, d / "a.pcap")
    shutil.copy(REAL, d / "b.pcap")
    s = json.loads(run("analyze", d, "--format", "json", "--model", "ideal").stdout)
    single = json.loads(run("analyze", REAL, "--format", "json", "--model", "ideal").stdout)
    assert s["packets"] == 2 * single["packets"]
    assert [os.path.basename(f["path"]) for f in s["files"]] == ["a.pcap", "b.pcap"]


@pytest.mark.parametrize("name", ["real_ipv4.pcap", "crafted_gre_key.pcap",
                                  "crafted_two_ifaces.pcapng"])
def test_fast_and_reference_decoders_give_the_same_analysis(name):
    path = os.path.join(SAMPLES, name)
    fast = json.loads(run("analyze", path, "--format", "json").stdout)
    ref = json.loads(run("analyze", path, "--format", "json", "--decoder", "reference").stdout)
    assert fast == ref
    assert fast["packets"] > 0


def test_tunnel_gro_stage_and_egress_in_json():
    """ERSPAN: native GRO refuses the sequence flag, the gro_cells stage aggregates."""
    path = os.path.join(SAMPLES, "crafted_erspan2.pcap")
    s = json.loads(run("analyze", path, "--format", "json", "--model", "napi",
                       "--tunnel-gro", "--egress", "decap", "--egress-features", "tso").stdout)
    native = s["models"]["napi"]
    assert native["superpackets_out"] == native["packets_in"]       # nothing merged natively
    st = s["stages"]["napi"]
    assert st["stages"]["native"]["superpackets_out"] == s["packets"]
    cells = st["stages"]["gro_cells"]
    assert cells["segments_in"] == s["packets"]
    assert cells["superpackets_out"] < cells["packets_in"]
    assert st["delivered"] == cells["superpackets_out"]
    e = s["egress"]["napi"]
    # every super-packet becomes as many segments as it was built from
    assert e["segments"] == s["packets"]
    assert e["superpackets"] == st["delivered"]
    assert e["hardware_segments"] + e["software_segments"] <= e["segments"]
    off = json.loads(run("analyze", path, "--format", "json", "--model", "napi",
                         "--no-tunnel-gro").stdout)
    assert off["stages"]["napi"]["delivered"] == s["packets"]


def test_udp_tunnel_socket_option_changes_vxlan_aggregation():
    path = os.path.join(SAMPLES, "real_vxlan.pcap")
    plain = json.loads(run("analyze", path, "--format", "json", "--model", "ideal").stdout)
    sock = json.loads(run("analyze", path, "--format", "json", "--model", "ideal",
                          "--udp-tunnel", "vxlan:4789").stdout)
    assert plain["models"]["ideal"]["merged_packets"] == 0     # plain UDP: no GRO
    assert sock["models"]["ideal"]["merged_packets"] > 0
    assert "BYPASS_UDP_NO_GRO" in plain["models"]["ideal"]["reasons"]
    r = CliRunner().invoke(main, ["analyze", path, "--udp-tunnel", "bogus:1"])
    assert r.exit_code == 2
