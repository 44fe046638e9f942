"""The progress bar: shown on a terminal, silent otherwise, and it counts what was read."""

from __future__ import annotations

import os

from click.testing import CliRunner

from gropcap.capture import read_capture
from gropcap.cli import main
from gropcap.pipeline import decode_files
from gropcap.report.progress import Progress

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "sample_pcaps", "real_ipv4.pcap")


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
    assert r.output == q.output          # no bar, no stray text off a terminal
