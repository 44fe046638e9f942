"""`gropcap analyze --jobs N` / `--scheduler tcp://...`: same output as one process."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap.cli import main  # noqa: E402
from tests.run.test_runner import (SAMPLES, assert_same_rows, generated,  # noqa: E402,F401
                                   scheduler_processes)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("queues", ["1", "4"])
def test_jobs_same_summary_and_parquet(generated, tmp_path, queues):  # noqa: F811
    """--jobs gives the summary of the in-memory run (--no-stream) and of the default
    bounded-memory run, and the same rows (the core per partition: a dataset of parts),
    compared by value after sorting (``encap`` dictionaries are per batch)."""
    inputs = [*generated, *SAMPLES[:5]]
    one = run("analyze", *inputs, "--format", "json", "--queues", queues, "-q",
              "--out", tmp_path / "one", "--no-stream")
    two = run("analyze", *inputs, "--format", "json", "--queues", queues, "-q",
              "--out", tmp_path / "two", "--jobs", "2")
    bounded = run("analyze", *inputs, "--format", "json", "--queues", queues, "-q",
                  "--out", tmp_path / "bounded")
    assert one.exit_code == 0 and two.exit_code == 0 and bounded.exit_code == 0, two.output
    assert json.loads(one.stdout) == json.loads(two.stdout) == json.loads(bounded.stdout)
    assert (tmp_path / "two" / "packets").is_dir()
    assert_same_rows(tmp_path / "one", tmp_path / "two")
    assert_same_rows(tmp_path / "bounded", tmp_path / "two")


def test_jobs_writes_a_dataset(generated, tmp_path):  # noqa: F811
    """--jobs 2 --out DIR: each partition's parts, one table for pyarrow.dataset and
    gropcap.load; the text report equals one process's; a run over an existing DIR
    needs --force and replaces the other layout's files."""
    import pyarrow.dataset as ds

    from gropcap.io.load import load
    one = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one")
    two = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "two",
              "--jobs", "2")
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    assert one.stdout == two.stdout and "napi" in two.stdout
    parts = sorted(os.listdir(tmp_path / "two" / "packets"))
    assert parts == ["part-00000.parquet", "part-00001.parquet"]
    assert ds.dataset(tmp_path / "two" / "packets").count_rows() == 9000
    assert_same_rows(tmp_path / "one", tmp_path / "two")
    assert load(tmp_path / "two").summary() == load(tmp_path / "one").summary()
    again = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one",
                "--jobs", "2")
    assert again.exit_code != 0 and "output exists" in again.output
    again = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one",
                "--jobs", "2", "--force")
    assert again.exit_code == 0
    assert sorted(os.listdir(tmp_path / "one")) == ["flows.parquet", "packets",
                                                    "superpackets"]
    cols = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "cols",
               "--jobs", "2", "--packet-columns", "ts_ns,sport")
    assert cols.exit_code == 0
    names = ds.dataset(tmp_path / "cols" / "packets").schema.names
    assert {"ts_ns", "sport", "file_index", "record"} <= set(names)   # + the sort key
    assert "dport" not in names
    assert load(tmp_path / "cols").summary() == load(tmp_path / "two").summary()
    back = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one",
               "--force")
    assert back.exit_code == 0
    assert sorted(os.listdir(tmp_path / "one")) == ["flows.parquet", "packets.parquet",
                                                    "superpackets.parquet"]


def test_jobs_text_summary_same(generated):  # noqa: F811
    one = run("analyze", generated[0], "-q")
    two = run("analyze", generated[0], "-q", "--jobs", "1")
    assert one.exit_code == 0 and two.exit_code == 0
    assert "napi" in one.stdout and one.stdout == two.stdout


def test_scheduler_option(generated, tmp_path):  # noqa: F811
    with scheduler_processes(tmp_path) as address:
        two = run("analyze", *generated[:2], "--format", "json", "--queues", "2",
                  "--scheduler", address)
    one = run("analyze", *generated[:2], "--format", "json", "--queues", "2")
    assert two.exit_code == 0, two.output
    assert json.loads(one.stdout) == json.loads(two.stdout)


def test_failed_input_named_and_exit_status(generated, tmp_path):  # noqa: F811
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"garbage, not a capture" * 4)
    res = run("analyze", generated[0], bad, "--format", "json", "--jobs", "1")
    assert res.exit_code == 1
    assert f"{bad} (bytes 0-end) left out" in res.stderr
    summary = json.loads(res.stdout)
    assert [f["path"] for f in summary["failed_inputs"]] == [str(bad)]
    assert [f["path"] for f in summary["files"]] == [generated[0]]


def test_stream_with_jobs_refused(generated):  # noqa: F811
    res = run("analyze", generated[0], "--stream", "--jobs", "2")
    assert res.exit_code == 2 and "--stream runs in one process" in res.output
    res = run("analyze", generated[0], "--jobs", "2", "--scheduler", "tcp://127.0.0.1:1")
    assert res.exit_code == 2 and "give one of them" in res.output


def test_scheduler_with_scratch_directory(generated, tmp_path):  # noqa: F811
    """--scratch: decoded pieces go through a directory the workers share; it is left
    empty afterwards."""
    d = tmp_path / "shared"
    d.mkdir()
    with scheduler_processes(tmp_path) as address:
        two = run("analyze", *generated[:2], "--format", "json", "--queues", "2",
                  "--scheduler", address, "--scratch", d)
    one = run("analyze", *generated[:2], "--format", "json", "--queues", "2")
    assert two.exit_code == 0, two.output
    assert json.loads(one.stdout) == json.loads(two.stdout)
    assert list(d.iterdir()) == []


def test_scratch_needs_a_distributed_run(generated, tmp_path):  # noqa: F811
    res = run("analyze", generated[0], "--scratch", tmp_path)
    assert res.exit_code == 2 and "--scratch is for --jobs/--scheduler" in res.output
