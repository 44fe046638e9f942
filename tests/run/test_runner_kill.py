"""A worker killed mid-run on the core per partition (``run.dask_core``, what
``gropcap analyze --jobs N`` runs): the task it was running is retried, the output equals
an undisturbed run, no partial or temporary file is left in ``--out`` and the scratch
directory is removed.

Each way rows reach their partition is covered: the exchange (decode, GRO and write
tasks), the fused exchange and the runs exchange (their decode+GRO and write tasks).

The kill is deterministic: the first attempt of the chosen stage's task stops at a point
where it has written files (a decode task after its piece, before the piece's partition
numbers; a GRO task after its first delivery table, its spills written; a write task
after the first row group of its packets part, its superpackets part already renamed
into place), tells the test its process id, and waits; the test
kills that worker process with SIGKILL. Every task attempt is logged (stage, partition,
process) so the test also sees which tasks ran again.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time

import pytest

distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap.gro.config import GroConfig  # noqa: E402
from tests.run.test_runner import _bench_capture, _no_fallback, assert_same_rows  # noqa: E402

# coalesced input (the VXLAN frames are above this MTU): the merged gso_size statistics
# go to the GRO tasks as scattered data, which a re-run task needs again
CFG = GroConfig(queues=4, mtu=1500)
BATCH = 2048       # several row groups per part: the write task dies with one written


@pytest.fixture(params=[None, 0], ids=["scheduler-retry", "client-retry"])
def client(request):
    """Two single-threaded worker processes under nannies, a cluster per test: a nanny
    that did not restart its killed worker in time (CI, on a loaded machine) cannot
    leave the next test one worker short.
    With Dask's default ``allowed-failures`` (3) the scheduler reschedules the task whose
    worker died; with 0 the client gets ``KilledWorker`` and submits the task again
    (``run.distributed._result_or_retry``)."""
    import dask
    if request.param is None:
        assert dask.config.get("distributed.scheduler.allowed-failures") >= 1
    with dask.config.set({} if request.param is None else
                         {"distributed.scheduler.allowed-failures": request.param}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                           processes=True, dashboard_address=":0")
        c = distributed.Client(cluster)
    c.test_client_retries = request.param == 0
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    return _bench_capture(tmp_path_factory.mktemp("kill"))


@pytest.fixture(scope="module")
def undisturbed(capture, tmp_path_factory):
    from gropcap.run.dask_core import analyze_partitioned
    out = tmp_path_factory.mktemp("undisturbed") / "out"
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with distributed.Client(cluster) as c:
        r = analyze_partitioned(capture, CFG, client=c, out_dir=str(out),
                                batch_records=BATCH, fallback=_no_fallback)
    cluster.close()
    return r, out


# ---- run on the workers (this module is pickled by value) ----

def _log(log: str, stage: str, k: int) -> None:
    with open(log, "a") as f:      # one short O_APPEND write: whole lines
        f.write(f"{stage} {k} {os.getpid()}\n")


def _attempts(log: str) -> list[tuple[str, int, int]]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [(s, int(k), int(p)) for s, k, p in (line.split() for line in f)]


def _first(marker: str) -> bool:
    """True for the one attempt that creates ``marker``."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _hold(ready: str) -> None:
    """Tell the test this process is mid-task, then wait to be killed."""
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(ready + ".tmp", ready)
    end = time.monotonic() + 300
    while time.monotonic() < end:
        time.sleep(0.05)
    raise RuntimeError("the test did not kill this worker")


def _store(fn, args, path, splits=(), *, d: str, stage: str):
    from gropcap.run import distributed as runner
    _log(os.path.join(d, "log"), "decode", 0)
    if stage == "decode" and _first(os.path.join(d, "victim")):
        write = runner._write_ipc

        def write_then_hold(*a, **kw):
            write(*a, **kw)
            _hold(os.path.join(d, "ready"))
        runner._write_ipc = write_then_hold
    return runner.store_task(fn, args, path, splits)


def _gro_attempt(k: int, d: str, stage: str) -> None:
    """Log a GRO attempt of partition ``k``; the first one of the ``gro`` stage holds
    once it has written its spills and a delivery table."""
    from gropcap.run import dask_tasks
    _log(os.path.join(d, "log"), "gro", k)
    if stage == "gro" and _first(os.path.join(d, "victim")):
        save = dask_tasks._save_ints

        def save_then_hold(prefix, table):
            save(prefix, table)
            _hold(os.path.join(d, "ready"))
        dask_tasks._save_ints = save_then_hold


def _gro(*args, d: str, stage: str):
    from gropcap.run import dask_tasks
    _gro_attempt(args[5], d, stage)
    return dask_tasks.gro_partition_task(*args)


def _fused(*args, d: str, stage: str):
    """The fused exchange's decode+GRO task (``fused_partition_task``: ``k`` is its 7th
    argument), held as :func:`_gro` holds the GRO task."""
    from gropcap.run import dask_tasks
    _gro_attempt(args[6], d, stage)
    return dask_tasks.fused_partition_task(*args)


def _write(*args, d: str, stage: str):
    from gropcap.io import parquet
    from gropcap.run import dask_tasks
    k = args[5]
    log = os.path.join(d, "log")
    # a process that ran a GRO task: were its results kept there, losing it would
    # recompute them
    ran_gro = any(s == "gro" and p == os.getpid() for s, _, p in _attempts(log))
    _log(log, "write", k)
    if stage == "write" and ran_gro and _first(os.path.join(d, "victim")):
        class Holding(parquet.TableWriter):
            def write_table(self, table):
                super().write_table(table)
                if "gro_role" in table.column_names:     # the packets part
                    _hold(os.path.join(d, "ready"))
        parquet.TableWriter = Holding        # (the write task imports it when it runs)
    return dask_tasks.write_partition_task(*args)


# ---- the tests ----

def _hook(monkeypatch, d: str, stage: str) -> None:
    """Every task of the run through the wrappers above (``d``: their directory)."""
    import cloudpickle

    from gropcap.run import dask_core
    from gropcap.run import distributed as runner
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(runner, "store_task",
                        lambda *a, **kw: _store(*a, **kw, d=d, stage=stage))
    monkeypatch.setattr(dask_core, "gro_partition_task",
                        lambda *a: _gro(*a, d=d, stage=stage))
    monkeypatch.setattr(dask_core, "write_partition_task",
                        lambda *a: _write(*a, d=d, stage=stage))

    def fused(*a):
        return _fused(*a, d=d, stage=stage)
    fused.k_at = 6          # where its partition number is (the others: 5)
    # the client's dask_tasks (run.dask_core imports it when the stage starts); the
    # worker calls its own, unpatched
    from gropcap.run import dask_tasks
    monkeypatch.setattr(dask_tasks, "fused_partition_task", fused)


@contextlib.contextmanager
def _killing(d: str, pids, before=lambda: None):
    """A thread that waits until the held attempt reports its process id, calls
    ``before()``, and kills that process with SIGKILL if it is one of ``pids()`` (worker
    processes); yields the list of the killed process ids."""
    killed, stop = [], threading.Event()

    def killer():
        ready = os.path.join(d, "ready")
        while not os.path.exists(ready):
            if stop.is_set():
                return
            time.sleep(0.01)
        with open(ready) as f:
            pid = int(f.read())
        before()
        if pid in pids():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        yield killed
    finally:
        stop.set()
        t.join(timeout=30)


def _tree(root, dirs: bool = True) -> list[str]:
    """Every path under ``root`` (directories too, unless ``dirs`` is false)."""
    out = []
    for dirpath, subdirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out += [os.path.normpath(os.path.join(rel, n))
                for n in (subdirs if dirs else []) + files]
    return sorted(out)


# every (exchange, stage) pair once, and each way of retrying (the scheduler's, the
# client's: the ``client`` fixture's parameter) with every stage and every exchange way:
# 8 runs of about 10 s, not the 14 of every combination
@pytest.mark.parametrize("client,exchange,stage", [
    (None, "exchange", "decode"), (None, "exchange", "write"), (None, "fused", "gro"),
    (None, "runs", "write"), (0, "exchange", "gro"), (0, "fused", "write"),
    (0, "runs", "gro"), (0, "exchange", "decode")],
    ids=["scheduler-retry-exchange-decode", "scheduler-retry-exchange-write",
         "scheduler-retry-fused-gro", "scheduler-retry-runs-write",
         "client-retry-exchange-gro", "client-retry-fused-write", "client-retry-runs-gro",
         "client-retry-exchange-decode"], indirect=["client"])
def test_killed_worker_retried_output_identical(client, capture, undisturbed, tmp_path,
                                                monkeypatch, exchange, stage):
    from gropcap.io.load import load
    from gropcap.run import dask_core
    from gropcap.run import distributed as runner
    ref, ref_out = undisturbed
    d = str(tmp_path / "ctl")
    os.mkdir(d)
    _hook(monkeypatch, d, stage)
    resubmitted, result_or_retry = [], runner._result_or_retry

    def counted(c, fut, fn, *args):
        got, last = result_or_retry(c, fut, fn, *args)
        if last is not fut:
            resubmitted.append(args[getattr(fn, "k_at", 5)])
        return got, last
    monkeypatch.setattr(runner, "_result_or_retry", counted)
    client.wait_for_workers(2, timeout=300)
    pids = set(client.run(os.getpid).values())
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    seen = {}

    def snapshot():
        # what the dying attempt left: its files under --out and the scratch directory
        seen["out"], seen["scratch"] = _tree(out, False), _tree(scratch, False)
    with _killing(d, lambda: pids, snapshot) as killed:
        r = dask_core.analyze_partitioned(capture, CFG, client=client, out_dir=str(out),
                                          scratch=str(scratch), batch_records=BATCH,
                                          fallback=_no_fallback, exchange=exchange)
    assert len(killed) == 1, "no task reached the kill point in a worker process"
    assert r.exchange == exchange
    # the dead attempt had written files
    if stage == "decode":
        # its decoded piece
        assert any(p.endswith(".arrow") for p in seen["scratch"])
    elif stage == "gro":
        # its spills and a delivery table
        assert any(p.endswith(".order.names") for p in seen["scratch"])
    else:
        # its superpackets part renamed into place, its packets part being written
        assert any(re.search(r"/superpackets/part-\d+\.parquet$", p) for p in seen["out"])
        assert any(not re.fullmatch(r"part-\d+\.parquet", os.path.basename(p))
                   for p in seen["out"])
    # the run completed with the undisturbed run's summary and rows
    assert r.failures == []
    assert r.summary == ref.summary
    assert r.flows.equals(ref.flows) and r.flow_causes == ref.flow_causes
    assert r.udp_tunnel_hint == ref.udp_tunnel_hint
    assert_same_rows(ref_out, out)
    a, b = load(ref_out), load(out)
    for x, y in ((a.packets, b.packets), (a.superpackets, b.superpackets)):
        assert x.to_pydict() == y.to_pydict()
    # the same files as the undisturbed run and nothing else: no hidden stage, no
    # temporary or partial part; the scratch directory removed
    assert _tree(out) == _tree(ref_out)
    assert not any(os.path.basename(p).startswith(".") for p in _tree(out))
    assert os.listdir(scratch) == []
    # which tasks ran: the killed one once more than the other partition's task of its
    # stage (the fused tasks run a second round on coalesced input: both partitions);
    # in the write stage no GRO task again (its result was not kept on the worker, so
    # losing the worker recomputed nothing)
    runs = _attempts(os.path.join(d, "log"))
    nparts = len({k for s, k, _ in runs if s == "gro"})
    assert nparts == 2
    victim = [(s, k) for s, k, p in runs if p == killed[0] and s == stage]
    assert len(victim) == 1
    tally = [(s, k) for s, k, _ in runs]
    rounds = 1 if stage == "decode" else tally.count((stage, 1 - victim[0][1]))
    assert rounds >= 1 and tally.count(victim[0]) == rounds + 1
    if stage == "write":
        gro = [k for s, k, _ in runs if s == "gro"]
        assert gro.count(0) == gro.count(1) >= 1
    # by the scheduler (allowed-failures left at its default), or by the client after
    # KilledWorker (allowed-failures 0; a decode task: by run.distributed._decode_all).
    # With allowed-failures 0 every task the scheduler had assigned to the dead worker
    # fails with KilledWorker, the held one and any queued behind it: each is submitted
    # again, once
    if stage != "decode" and client.test_client_retries:
        assert victim[0][1] in resubmitted, (resubmitted, runs)
        assert len(set(resubmitted)) == len(resubmitted), (resubmitted, runs)
    elif stage != "decode":
        assert resubmitted == [], (resubmitted, runs)


def test_cli_jobs_killed_worker_same_output(capture, tmp_path, monkeypatch):
    """``gropcap analyze --jobs 2 --out DIR`` (its own LocalCluster, Dask's default
    retries): a worker killed in the write stage changes neither the report nor a row,
    and leaves nothing else in DIR or in ``--scratch``."""
    import json

    import psutil
    from click.testing import CliRunner

    from gropcap.cli import main

    def run(out, *extra):
        return CliRunner().invoke(main, ["analyze", capture, "--queues", "4", "--mtu",
                                         "1500", "--format", "json", "-q", "--out",
                                         str(out), "--jobs", "2", "--parallel", "workers", *extra],
                                  catch_exceptions=False)
    ref = run(tmp_path / "ref")
    assert ref.exit_code == 0, ref.output
    d = str(tmp_path / "ctl")
    os.mkdir(d)
    _hook(monkeypatch, d, "write")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # a worker process of this run's cluster: a child of this process (its nannies
    # run here)
    with _killing(d, lambda: {p.pid for p in psutil.Process().children(recursive=True)}) \
            as killed:
        got = run(tmp_path / "out", "--scratch", str(scratch))
    assert len(killed) == 1
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout) == json.loads(ref.stdout)
    assert_same_rows(tmp_path / "ref", tmp_path / "out")
    assert _tree(tmp_path / "out") == _tree(tmp_path / "ref")
    assert os.listdir(scratch) == []
    runs = _attempts(os.path.join(d, "log"))
    writes = [k for s, k, _ in runs if s == "write"]
    assert len(writes) == 3 and set(writes) == {0, 1}    # the killed one twice


def test_shared_value_survives_its_workers_death():
    """``run.distributed.shared``: the worker holding the value is killed and a task
    submitted after it still gets the value (recomputed from the task graph). A
    scattered value lost that way cancels its dependents ("lost dependencies"),
    broadcast or not: the scheduler's active memory manager keeps one copy once no task
    waits for it elsewhere."""
    import types

    from gropcap.run.distributed import shared
    value = types.SimpleNamespace(syn_mss={bytes([i]) * 12: 1460 - i for i in range(50)})
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=300)
        fut = shared(c, value)
        distributed.wait(fut)
        deadline = time.monotonic() + 60
        # on one worker (a broadcast scatter: once the memory manager dropped a copy)
        while len(holders := c.who_has(fut)[fut.key]) != 1:
            assert time.monotonic() < deadline, f"held by {holders}"
            time.sleep(0.1)
        pid = c.run(os.getpid, workers=list(holders))[holders[0]]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while holders[0] in c.scheduler_info()["workers"]:
            assert time.monotonic() < deadline, "the scheduler did not see the worker die"
            time.sleep(0.05)
        got = c.submit(getattr, fut, "syn_mss", pure=False).result(timeout=120)
        assert got == value.syn_mss
    cluster.close()
