"""`gropcap analyze`: bounded memory by default (--stream, kept as a no-op), the same JSON
and text as the in-memory run (--no-stream), Parquet files written; options only the
whole-table models run (the reference engine, --tunnel-gro) are held in memory by the
core instead of being refused; --plot and --egress run batch by batch."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
from click.testing import CliRunner

from gropcap.cli import main

from where import ROOT

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


def test_stream_runs_plot_and_egress(tmp_path):
    """--stream is the default and refuses nothing: --plot is drawn from a bounded-memory
    run (tests/run/test_plotdata.py), what only the whole-table models run is held in
    memory by the core, with the results of --no-stream."""
    r = _run("--stream", "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "p.png").stat().st_size > 0
    for extra in (("--egress", "decap"), ("--engine", "reference")):
        st = _run("--stream", "--format", "json", "-q", *extra)
        mem = _run("--no-stream", "--format", "json", "-q", *extra)
        assert st.exit_code == 0 and mem.exit_code == 0, st.stderr
        assert st.stdout == mem.stdout
    assert "egress" in json.loads(st.stdout) or extra[0] == "--engine"


def test_bounded_memory_is_the_default(stream_calls):
    calls = stream_calls
    r = _run("--format", "json")
    assert r.exit_code == 0, r.stderr
    assert len(calls) == 1
    assert json.loads(r.stdout) == json.loads(_run("--no-stream", "--format", "json").stdout)
    assert len(calls) == 1                     # --no-stream holds the run in memory
    # an option only the whole-table models run is held in memory, silently
    r = _run("--format", "json", "--engine", "reference")
    assert r.exit_code == 0 and "models" in json.loads(r.stdout)
    assert len(calls) == 1
    # the gro_cells stage runs batch by batch (run.cells), the same as in memory
    r = _run("--format", "json", "--tunnel-gro")
    assert r.exit_code == 0 and "stages" in json.loads(r.stdout)
    assert len(calls) == 2
    assert json.loads(r.stdout) == json.loads(
        _run("--no-stream", "--format", "json", "--tunnel-gro").stdout)
    # egress is counted batch by batch (run.stream.RowCodes), the same as in memory
    r = _run("--format", "json", "--egress", "decap")
    assert r.exit_code == 0 and "egress" in json.loads(r.stdout)
    assert len(calls) == 3
    assert json.loads(r.stdout) == json.loads(
        _run("--no-stream", "--format", "json", "--egress", "decap").stdout)
