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
              "--out", tmp_path / "two", "--jobs", "2", "--parallel", "workers")
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
              "--jobs", "2", "--parallel", "workers")
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    assert one.stdout == two.stdout and "napi" in two.stdout
    parts = sorted(os.listdir(tmp_path / "two" / "packets"))
    assert parts == ["part-00000.parquet", "part-00001.parquet"]
    assert ds.dataset(tmp_path / "two" / "packets").count_rows() == 9000
    # the workers write the parts with the one process's options (io.parquet):
    # the 64-bit columns delta-encoded
    import pyarrow.parquet as pq
    for stage, col in (("packets", "ts_ns"), ("superpackets", "seg_id")):
        md = pq.ParquetFile(tmp_path / "two" / stage / parts[0]).metadata
        rg = md.row_group(0)
        i = md.schema.to_arrow_schema().get_field_index(col)
        assert "DELTA_BINARY_PACKED" in rg.column(i).encodings, (stage, col)
        # and the one process's schema: never-null columns REQUIRED (io.parquet.required)
        for part in parts:
            got = pq.read_schema(tmp_path / "two" / stage / part)
            want = pq.read_schema(tmp_path / "one" / f"{stage}.parquet")
            assert [f.nullable for f in got] == [f.nullable for f in want], (stage, part)
            assert not got.field(col).nullable, (stage, part)
    assert_same_rows(tmp_path / "one", tmp_path / "two")
    assert load(tmp_path / "two").summary() == load(tmp_path / "one").summary()
    again = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one",
                "--jobs", "2", "--parallel", "workers")
    assert again.exit_code != 0 and "output exists" in again.output
    again = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "one",
                "--jobs", "2", "--parallel", "workers", "--force")
    assert again.exit_code == 0
    assert sorted(os.listdir(tmp_path / "one")) == ["flows.parquet", "packets",
                                                    "superpackets"]
    cols = run("analyze", *generated, "--queues", "4", "-q", "--out", tmp_path / "cols",
               "--jobs", "2", "--parallel", "workers", "--packet-columns", "ts_ns,sport")
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
    two = run("analyze", generated[0], "-q", "--jobs", "1", "--parallel", "workers")
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
    res = run("analyze", generated[0], bad, "--format", "json", "--jobs", "1", "--parallel", "workers")
    assert res.exit_code == 1
    assert f"{bad} (bytes 0-end) left out" in res.stderr
    summary = json.loads(res.stdout)
    assert [f["path"] for f in summary["failed_inputs"]] == [str(bad)]
    assert [f["path"] for f in summary["files"]] == [generated[0]]


def test_stream_with_jobs_refused(generated):  # noqa: F811
    res = run("analyze", generated[0], "--stream", "--jobs", "2", "--parallel", "workers")
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


@pytest.mark.parametrize("case", ["one_queue", "queues", "files"])
def test_jobs_picks_workers_or_threads_and_says_why(tmp_path, case, monkeypatch):
    """``--jobs 2`` (``--parallel auto``) runs Dask workers when one receiver run cuts
    into RX-queue partitions or several files may be separate receivers (a task per
    run, even with one RX queue), else threads in one process; one stderr line says
    which, the results are those of one process either way, and the output layout is
    the one of what ran (a dataset from workers, files from one process)."""
    import gropcap.run.core as core
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)      # the samples are small
    sample = SAMPLES[0]
    inputs = {"one_queue": [sample], "queues": [sample], "files": [sample, sample]}[case]
    queues = "4" if case == "queues" else "1"
    args = ["analyze", *inputs, "--format", "json", "--queues", queues]
    res = CliRunner().invoke(main, [str(a) for a in args + ["--jobs", "2", "--out",
                                                             tmp_path / "j"]])
    ref = run(*args, "-q")
    assert res.exit_code == 0 and ref.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads(ref.stdout)
    note = [line for line in res.stderr.splitlines() if line.startswith("gropcap: --jobs 2:")]
    assert len(note) == 1, res.stderr
    if case == "one_queue":
        assert "threads in one process" in note[0] and "one RX queue" in note[0], note
        assert (tmp_path / "j" / "packets.parquet").is_file() and "2 threads" in res.stderr
    else:
        why = "2 partitions" if case == "queues" else "one receiver run per task"
        assert "Dask worker processes" in note[0] and why in note[0], note
        assert (tmp_path / "j" / "packets").is_dir() and "2 workers" in res.stderr


def test_small_inputs_run_threads_whatever_they_cut_into(tmp_path, monkeypatch):
    # below WORKERS_MIN_BYTES, Dask's start-up costs more than workers save: threads,
    # and the line says why; --parallel workers still runs them
    import gropcap.run.core as core
    from gropcap.gro.config import GroConfig
    four = GroConfig(queues=4)
    size = os.path.getsize(SAMPLES[0])
    for paths in ([SAMPLES[0]], SAMPLES[:1] * 2):
        way, why = core.jobs_way(paths, four, ("ideal", "napi"), 2)
        assert way == "threads" and "MiB of input" in why and "--parallel workers" in why
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 2 * size)
    assert core.jobs_way(SAMPLES[:1] * 2, four, ("ideal", "napi"), 2)[0] == "workers"
    assert core.jobs_way([SAMPLES[0]], four, ("ideal", "napi"), 2)[0] == "threads"
    assert core.jobs_way([SAMPLES[0]], four, ("ideal", "napi"), 2, "workers")[0] == "workers"
    res = CliRunner().invoke(main, ["analyze", SAMPLES[0], "--queues", "4", "--jobs", "2",
                                    "--format", "json"])
    assert res.exit_code == 0 and "threads in one process" in res.stderr, res.stderr
    # a compressed capture's size says too little about its work: the other rules decide
    import gzip
    gz = tmp_path / "sample.pcap.gz"
    gz.write_bytes(gzip.compress(open(SAMPLES[0], "rb").read()))
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 1 << 30)
    assert core.jobs_way([str(gz)], four, ("ideal", "napi"), 2)[0] == "workers"


def test_parallel_needs_jobs_and_forces_the_way(monkeypatch):
    import gropcap.run.core as core
    from gropcap.gro.config import GroConfig
    from gropcap.run.core import jobs_way
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)      # the samples are small
    res = run("analyze", SAMPLES[0], "--parallel", "threads")
    assert res.exit_code == 2 and "give --jobs" in res.output
    one = GroConfig()
    assert jobs_way([SAMPLES[0]], one, ("ideal", "napi"), 2)[0] == "threads"
    assert jobs_way([SAMPLES[0]], one, ("ideal",), 2)[0] == "workers"   # class partitions
    assert jobs_way([SAMPLES[0]], one, ("ideal", "napi"), 2, "workers")[0] == "workers"
    four = GroConfig(queues=4)
    assert jobs_way([SAMPLES[0]], four, ("ideal", "napi"), 2, "threads")[0] == "threads"
    assert jobs_way(SAMPLES[:1] * 2, four, ("napi",), 2, captures="continuous")[0] == \
        "workers"
    assert jobs_way(SAMPLES[:1] * 2, four, ("napi",), 2)[0] == "workers"      # copies
    assert jobs_way(SAMPLES[:1] * 2, one, ("napi",), 2)[0] == "workers"       # a run each
    assert jobs_way([SAMPLES[0]], four, ("ideal", "napi"), 1) == \
        ("threads", "one thread in one process")
    with pytest.raises(Exception, match="unknown --parallel"):
        jobs_way([SAMPLES[0]], one, ("napi",), 2, "cores")


def test_summary_only_runs_threads_up_to_two_jobs(monkeypatch):
    """Without --out, --jobs 2 runs threads whatever the input cuts into (one process
    decodes once and counts in the same pass: measured faster, docs/scale.md); with
    --out, or more jobs than threads use, the partition rules decide."""
    import gropcap.run.core as core
    from gropcap.gro.config import GroConfig
    from gropcap.run.threads import MAX_USEFUL_THREADS
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)      # the samples are small
    four = GroConfig(queues=4)
    for paths in ([SAMPLES[0]], SAMPLES[:1] * 2):
        way, why = core.jobs_way(paths, four, ("ideal", "napi"), 2, summary_only=True)
        assert way == "threads" and "summary only" in why and "--parallel workers" in why
        assert core.jobs_way(paths, four, ("ideal", "napi"), 2)[0] == "workers"
        more = MAX_USEFUL_THREADS + 1
        assert core.jobs_way(paths, four, ("ideal", "napi"), more,
                             summary_only=True)[0] == "workers"
        assert core.jobs_way(paths, four, ("ideal", "napi"), 2, "workers",
                             summary_only=True)[0] == "workers"
    # the CLI tells it: json without --out
    res = CliRunner().invoke(main, ["analyze", SAMPLES[0], "--queues", "4", "--jobs", "2",
                                    "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert "threads in one process: summary only" in res.stderr, res.stderr


def test_no_stream_jobs_cut_one_rx_queue_in_time(generated, tmp_path):  # noqa: F811
    """``--jobs 2 --no-stream`` (the in-memory merge on Dask workers) with one RX queue:
    the napi model is cut in time at an idle gap so both workers replay it (one line
    says so), and the summary and the files equal one process's."""
    one = run("analyze", generated[0], "--format", "json", "-q", "--out", tmp_path / "one",
              "--no-stream")
    res = CliRunner().invoke(main, [str(a) for a in (
        "analyze", generated[0], "--format", "json", "--out", tmp_path / "two",
        "--no-stream", "--jobs", "2")])
    assert one.exit_code == 0 and res.exit_code == 0, res.output
    assert json.loads(one.stdout) == json.loads(res.stdout)
    assert "gropcap: napi model: cut in time at 1 idle gap(s) longer than 50 us, 2 " \
        "pieces per RX-queue partition" in res.stderr.splitlines(), res.stderr
    assert "2 workers" in res.stderr
    assert_same_rows(tmp_path / "one", tmp_path / "two")
