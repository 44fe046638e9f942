"""`gropcap analyze --stream`: the same JSON and text as the in-memory path, Parquet files
written, options only the in-memory path models refused with exit 2, automatic streaming
above the size threshold."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
from click.testing import CliRunner

import gropcap.stream as streaming
from gropcap.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")


def _run(*args):
    return CliRunner().invoke(main, ["analyze", SAMPLE, *args])


def test_stream_json_and_text_equal_in_memory(tmp_path):
    for fmt in ("json", "text"):
        mem = _run("--no-stream", "--format", fmt, "--kernel", "6.6")
        st = _run("--stream", "--format", fmt, "--kernel", "6.6", "--out", str(tmp_path / fmt))
        assert mem.exit_code == 0 and st.exit_code == 0, st.stderr
        assert st.stdout == mem.stdout
    summary = json.loads(mem.stdout) if fmt == "json" else json.loads(
        _run("--no-stream", "--format", "json", "--kernel", "6.6").stdout)
    pk = pq.read_table(tmp_path / "text" / "packets.parquet")
    assert pk.num_rows == summary["packets"]
    sp = pq.read_table(tmp_path / "text" / "superpackets.parquet", columns=["model"])
    assert sp.column(0).to_pylist().count("napi") == summary["models"]["napi"]["superpackets_out"]


def test_stream_refuses_plot_and_egress(tmp_path):
    r = _run("--stream", "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 2 and "--plot" in r.stderr
    r = _run("--stream", "--egress", "decap")
    assert r.exit_code == 2 and "egress" in r.stderr


def test_auto_stream_above_threshold(monkeypatch):
    monkeypatch.setattr(streaming, "STREAM_AUTO_BYTES", 1000)
    r = _run("--format", "json")
    assert r.exit_code == 0
    assert "streaming in bounded memory" in r.stderr
    assert json.loads(r.stdout) == json.loads(_run("--no-stream", "--format", "json").stdout)
    # an option streaming does not model keeps the in-memory path, silently
    r = _run("--format", "json", "--egress", "decap")
    assert r.exit_code == 0 and "streaming" not in r.stderr
