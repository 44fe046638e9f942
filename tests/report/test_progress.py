"""The progress bar: shown on a terminal, silent otherwise, and it counts what was read."""

from __future__ import annotations

import json
import os
import re

from click.testing import CliRunner

from gropcap.capture import read_capture
from gropcap.cli import main
from gropcap.run.memory import decode_files
from gropcap.run.progress import Progress

from where import TESTS

SAMPLE = os.path.join(TESTS, "..", "sample_pcaps", "real_ipv4.pcap")


def test_progress_counts_every_record_and_reaches_the_file_size():
    with Progress(True) as p:
        table, _ = decode_files(SAMPLE, progress=p)
        task = p._bar.tasks[0]
        assert task.fields["records"] == table.num_rows == len(read_capture(SAMPLE)[1])
        assert task.total == os.path.getsize(SAMPLE)
        assert task.completed == os.path.getsize(SAMPLE)


def test_disabled_progress_draws_nothing():
    with Progress(False) as p:
        decode_files(SAMPLE, progress=p)
        assert p._bar is None


def test_cli_output_has_no_progress_when_not_a_terminal():
    r = CliRunner().invoke(main, ["analyze", SAMPLE, "--format", "json", "--model", "ideal"])
    q = CliRunner().invoke(main, ["analyze", SAMPLE, "--format", "json", "--model", "ideal",
                                  "--quiet"])
    assert r.exit_code == 0 and q.exit_code == 0
    assert r.stdout == q.stdout          # no bar, no stray text in the JSON
    json.loads(r.stdout)
    assert q.stderr == ""
    # off a terminal, stderr holds the closing line only
    n = json.loads(r.stdout)["packets"]
    assert re.fullmatch(rf"gropcap: {n} packets in \d+\.\d s \(\d+(\.\d+ [kM])? packets/s(, \d+ threads?)?\), "
                        r"nothing written\n", r.stderr), r.stderr


def _finished_phases(p):
    return {t.description: (t.completed, t.total, t.fields["detail"]) for t in p._bar.tasks}


def test_every_phase_has_a_labelled_line_in_memory():
    from gropcap.run.memory import analyze
    with Progress(True) as p:
        a = analyze(SAMPLE, progress=p)
        tasks = _finished_phases(p)
    n = a.decoded.num_rows
    assert set(tasks) == {"decode real_ipv4.pcap", "GRO ideal", "GRO napi"}
    for model in ("ideal", "napi"):
        assert tasks[f"GRO {model}"] == (n, n, f"done, {n} packets")


def test_every_phase_has_a_labelled_line_streaming(tmp_path):
    from gropcap.run.stream import stream_analyze
    with Progress(True) as p:
        res = stream_analyze(SAMPLE, out_dir=str(tmp_path), progress=p)
        tasks = _finished_phases(p)
    n = res.summary["packets"]
    assert set(tasks) == {"decode real_ipv4.pcap", "GRO ideal+napi", "super-packets",
                          "packets.parquet"}
    assert tasks["GRO ideal+napi"] == (n, n, f"done, {n} packets")
    assert tasks["packets.parquet"] == (n, n, f"done, {n} packets")
    assert tasks["super-packets"][2].startswith("done, ")


def test_quiet_progress_prints_no_note(capsys):
    with Progress(None, quiet=True) as p:
        p.note("compiling GRO kernels, first run only")
    with Progress(False, quiet=False) as p:
        p.note("x")
        p.note("x")                              # once
    assert capsys.readouterr().err == "gropcap: x\n"


def test_closing_line_rates():
    """Regression: a first run (numba compiling) gave '0.0 k packets/s'."""
    from gropcap.cli.app import _done_line
    assert _done_line({"packets": 2373}, 62.7, []) == \
        "gropcap: 2373 packets in 62.7 s (38 packets/s), nothing written"
    assert _done_line({"packets": 2373}, 0.5, ["o/p.parquet"]) == \
        "gropcap: 2373 packets in 0.5 s (4.7 k packets/s), wrote o/p.parquet"
    assert "(2.00 M packets/s)" in _done_line({"packets": 2_000_000}, 1.0, [])
