"""runner.analyze_distributed on a 2-worker LocalCluster equals pipeline.analyze.

Compares decoded tables, every model's GroResult, the three output tables, the summary and
the Parquet files written from both, on the bundled samples and on a generated multi-flow,
multi-queue capture split over several files; then failure reporting (a damaged file, a
worker that dies) and a scheduler started as separate processes.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap import constants as C  # noqa: E402
from gropcap.capture.writer import write_pcap, write_pcapng  # noqa: E402
from gropcap.gro import engine  # noqa: E402
from gropcap.gro.config import GroConfig, KernelProfile  # noqa: E402
from gropcap.io.parquet import write_analysis  # noqa: E402
from gropcap.run.memory import analyze  # noqa: E402
from gropcap.run.distributed import analyze_distributed, decode_file_task  # noqa: E402
from tests.craft import eth, ipv4, ipv6, tcp, udp  # noqa: E402

from where import TESTS

SAMPLES = sorted(glob.glob(os.path.join(TESTS, "..", "sample_pcaps",
                                        "*.pcap*")))


# how long a test waits for a Dask worker process to start (or a killed one to come back)
WORKER_START_S = 300


@contextlib.contextmanager
def _cluster():
    """A client of a LocalCluster of two worker processes on which a lost task fails at
    once instead of being retried on the other worker."""
    import dask
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                           processes=True, dashboard_address=None)
        c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture
def own_client():
    """A cluster for one test that kills workers: the module's shared ``client`` never
    depends on a nanny bringing a killed worker back (under load a restart has taken
    over 60 s, and once none came back: every later test of the module failed or waited
    for ever)."""
    with _cluster() as c:
        c.wait_for_workers(2, timeout=WORKER_START_S)
        yield c


def _bounded(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, failing the test after WORKER_START_S instead of waiting
    for ever (a task whose workers all died waits for one to come back)."""
    import concurrent.futures
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args, **kwargs).result(timeout=WORKER_START_S)
    finally:
        pool.shutdown(wait=False)


@pytest.fixture(scope="module")
def client():
    with _cluster() as c:
        yield c


def multi_flow_frames(seed: int, n: int = 3000, flows: int = 40):
    """Interleaved TCP flows (IPv4 and IPv6, PSH, reordering, gaps) plus some UDP, with
    bursty timestamps so NAPI polls and queues matter."""
    rng = random.Random(seed)
    state = []
    for f in range(flows):
        v6 = f % 3 == 0
        state.append({"v6": v6, "sport": 1000 + f, "dport": 5201 + f % 2,
                      "src": f"fd00::{f + 1}" if v6 else f"10.0.{f // 200}.{f % 200 + 1}",
                      "dst": "fd00::ffff" if v6 else "10.1.0.1", "seq": rng.randrange(1 << 31),
                      "id": rng.randrange(1 << 16)})
    frames, ts = [], []
    t = 1_700_000_000_000_000_000
    for _ in range(n):
        t += rng.choice((800, 1000, 1200, 3000, 60_000, 2_000_000))
        if rng.random() < 0.05:
            p = udp(rng.randrange(1024, 65535), 53, bytes(rng.randrange(1, 200)))
            frames.append(eth(ipv4("10.9.9.9", "10.1.0.1", C.IPPROTO_UDP, p)))
            ts.append(t)
            continue
        s = state[min(int(rng.expovariate(0.15)), flows - 1)]
        size = rng.choice((1448, 1448, 1448, 1448, 700, 0))
        seq = s["seq"] + (size if rng.random() < 0.03 else 0)   # now and then a gap
        flags = C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if rng.random() < 0.1 else 0)
        seg = tcp(s["sport"], s["dport"], seq=seq, ack=1, flags=flags, payload=bytes(size))
        if s["v6"]:
            frames.append(eth(ipv6(s["src"], s["dst"], C.IPPROTO_TCP, seg),
                              etype=C.ETH_P_IPV6))
        else:
            frames.append(eth(ipv4(s["src"], s["dst"], C.IPPROTO_TCP, seg, ident=s["id"])))
            s["id"] = (s["id"] + 1) & 0xFFFF
        s["seq"] = (seq + size) & 0xFFFFFFFF
        ts.append(t)
    return frames, ts


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Three captures (two pcap, one pcapng) of the same multi-flow workload, one after
    the other (each starts 1 ms after the one before ends: one receiver run under
    --captures auto, the flows continuing from file to file)."""
    d = tmp_path_factory.mktemp("gen")
    paths = []
    end = 0
    for i in range(3):
        frames, ts = multi_flow_frames(seed=i)
        shift = max(0, end + 1_000_000 - ts[0])
        ts = [t + shift for t in ts]
        end = ts[-1]
        p = str(d / f"part{i}.{'pcapng' if i == 2 else 'pcap'}")
        (write_pcapng if i == 2 else write_pcap)(p, frames, ts)
        paths.append(p)
    return paths


def assert_same(one, dist, tmp_path):
    assert one.decoded.equals(dist.decoded)
    assert list(one.results) == list(dist.results)
    for m in one.results:
        assert one.results[m].equals(dist.results[m]), m
    assert one.packets.equals(dist.packets)
    assert one.superpackets.equals(dist.superpackets)
    assert one.flows.equals(dist.flows)
    assert one.summary() == dist.summary()
    assert dist.failures == []
    a, b = tmp_path / "one", tmp_path / "dist"
    write_analysis(one, str(a))
    write_analysis(dist, str(b))
    for name in ("packets.parquet", "superpackets.parquet", "flows.parquet"):
        ta, tb = pq.read_table(a / name), pq.read_table(b / name)
        assert ta.equals(tb) and ta.schema.metadata == tb.schema.metadata, name


def test_local_workers_exchange_through_scratch_files(client, monkeypatch, tmp_path):
    """A cluster of local workers exchanges decoded pieces as files in a scratch
    directory (removed afterwards); ``scratch=False`` keeps Dask's transfers."""
    import cloudpickle

    from gropcap.run import distributed as runner
    assert runner._workers_local(client)
    log = tmp_path / "stored.log"
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(runner, "store_task", functools.partial(_logged_store, log=str(log)))
    d = tmp_path / "scratch"
    d.mkdir()
    one = analyze(SAMPLES[:3])
    dist = analyze_distributed(SAMPLES[:3], client=client, scratch=str(d))
    seen = log.read_text().split()
    assert len(seen) == 3 and all(p.startswith(str(d)) for p in seen)
    assert list(d.iterdir()) == []          # removed, the analysis still readable
    assert one.decoded.equals(dist.decoded) and one.summary() == dist.summary()
    log.write_text("")
    analyze_distributed(SAMPLES[:3], client=client, scratch=False)
    assert log.read_text() == ""


def _logged_store(fn, args, path, splits=(), *, log):
    """runner.store_task, noting each scratch file it writes (runs on a worker, where
    ``gropcap.run.distributed.store_task`` is the real one)."""
    from gropcap.run.distributed import store_task
    with open(log, "a") as f:
        f.write(path + "\n")
    return store_task(fn, args, path, splits)


@pytest.mark.parametrize("scratch", [None, False], ids=["files", "transfers"])
@pytest.mark.parametrize("queues", [1, 4])
def test_samples_equal_one_process(client, tmp_path, queues, scratch):
    assert len(SAMPLES) > 20
    cfg = GroConfig(queues=queues)
    assert_same(analyze(SAMPLES, cfg),
                analyze_distributed(SAMPLES, cfg, client=client, scratch=scratch), tmp_path)


@pytest.mark.parametrize("scratch", [None, False], ids=["files", "transfers"])
@pytest.mark.parametrize("cfg", [GroConfig(queues=4), GroConfig(queues=8, budget=16),
                                 GroConfig(queues=3, kernel=KernelProfile.parse("5.10"))],
                         ids=["q4", "q8-budget16", "q3-5.10"])
def test_generated_multi_flow_equal_one_process(client, generated, tmp_path, cfg, scratch):
    one = analyze(generated, cfg)
    napi = one.results["napi"]
    # the capture really spreads over queues and aggregates
    assert len(set(napi.rx_queue.tolist())) == cfg.queues
    assert napi.num_superpackets < napi.num_packets
    assert_same(one, analyze_distributed(generated, cfg, client=client, scratch=scratch),
                tmp_path)


@pytest.mark.parametrize("scratch", [None, False], ids=["files", "transfers"])
@pytest.mark.parametrize("cfg", [
    GroConfig(), GroConfig(gro_flush_timeout_ns=200_000, napi_defer_hard_irqs=2),
    GroConfig(hz=1000)], ids=["default", "flush-timeout", "hz1000"])
def test_one_rx_queue_cut_in_time_equal_one_process(client, generated, tmp_path,
                                                    monkeypatch, cfg, scratch):
    """One RX queue on two workers: the napi model is cut in two at an idle gap
    (``engine.time_cuts``), each piece replayed on a worker from a fresh receiver, and
    the result equals one process's; at HZ 1000 it is not cut."""
    from gropcap.gro import engine
    seen, real = [], engine.time_cuts

    def spy(ts, config, pieces):
        out = real(ts, config, pieces)
        seen.append((config.model, pieces, len(out)))
        return out
    monkeypatch.setattr(engine, "time_cuts", spy)
    from gropcap.run.progress import Progress
    one = analyze(generated, cfg)
    notes = []
    with Progress(False, quiet=False) as p:
        monkeypatch.setattr(p, "note", lambda text, **_: notes.append(text))
        dist = analyze_distributed(generated, cfg, client=client, scratch=scratch,
                                   progress=p)
    assert seen == ([] if cfg.hz >= 1000 else [("napi", 2, 1)])
    assert notes == ([] if cfg.hz >= 1000 else [
        f"napi model: cut in time at 1 idle gap(s) longer than "
        f"{engine.quiet_gap_ns(cfg.replace(model='napi')) / 1000:g} us, 2 pieces per "
        "RX-queue partition"])
    assert_same(one, dist, tmp_path)


def test_four_workers_two_queues_cut_in_time_or_not(generated, tmp_path, monkeypatch):
    """Four workers, two RX queues: each queue partition is cut in two at idle gaps;
    where the capture has none that long (a 1 s flush timeout), the queue partitions
    run as they are (their rows found from the decode tasks' partition files). Both
    equal one process."""
    from gropcap.gro import engine
    seen, real = [], engine.time_cuts
    monkeypatch.setattr(engine, "time_cuts", lambda *a: seen.append(real(*a)) or seen[-1])
    for cfg, cuts in ((GroConfig(queues=2), 1), (GroConfig(
            queues=2, gro_flush_timeout_ns=10**9, napi_defer_hard_irqs=1), 0)):
        assert_same(analyze(generated, cfg), analyze_distributed(generated, cfg, jobs=4),
                    tmp_path / str(cfg.gro_flush_timeout_ns))
        assert len(seen.pop()) == cuts and not seen


def test_gro_cells_stage_equal(client, tmp_path):
    files = [p for p in SAMPLES if "gre" in os.path.basename(p) or "dsa" in p]
    cfg = GroConfig(queues=2, tunnel_gro=True)
    assert_same(analyze(files, cfg), analyze_distributed(files, cfg, client=client),
                tmp_path)


def test_damaged_file_reported_rest_completes(client, generated, tmp_path):
    bad = tmp_path / "bad.pcap"
    # a pcap header whose first record claims more bytes than any snap length allows
    bad.write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00"
                    + b"\x01\x00\x00\x00" + bytes(8) + b"\xff" * 8 + bytes(64))
    inputs = [generated[0], str(bad), generated[1]]
    dist = analyze_distributed(inputs, GroConfig(queues=4), client=client)
    assert [f.path for f in dist.failures] == [str(bad)]
    assert dist.failures[0].start == 0 and dist.failures[0].end is None
    assert dist.failures[0].error
    s = dist.summary()
    assert [f["path"] for f in s["failed_inputs"]] == [str(bad)]
    # the rest equals a run over the good files alone
    good = analyze([generated[0], generated[1]], GroConfig(queues=4))
    assert good.decoded.equals(dist.decoded)
    for m in good.results:
        assert good.results[m].equals(dist.results[m])
    s.pop("failed_inputs")
    assert s == good.summary()


def _scheduler_keys(c) -> set:
    return set(c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks)))


@pytest.mark.parametrize("scratch", [None, False])
def test_a_run_with_a_failed_input_leaves_no_task(client, generated, tmp_path, scratch):
    """A failed task's traceback holds the run's futures, and the client holds the failed
    task: unless the run cancels its tasks, they stay on the scheduler, to be recomputed
    when a worker dies later (against scratch files the run removed)."""
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00"
                    + b"\x01\x00\x00\x00" + bytes(8) + b"\xff" * 8 + bytes(64))
    before = _scheduler_keys(client)
    dist = analyze_distributed([generated[0], str(bad)], GroConfig(queues=2), client=client,
                               scratch=scratch)
    assert [f.path for f in dist.failures] == [str(bad)]
    assert dist.results["napi"].flow_id.size
    deadline = time.monotonic() + 30
    while _scheduler_keys(client) - before and time.monotonic() < deadline:
        time.sleep(0.1)           # the cancellation reaches the scheduler
    assert _scheduler_keys(client) - before == set()


def _dies_on_part1(path, file_index, options, decoder="fast"):
    if path.endswith("part1.pcap"):
        os._exit(3)   # the worker process dies mid-task
    return decode_file_task(path, file_index, options, decoder)


def test_dead_worker_reported(own_client, generated, monkeypatch):
    import cloudpickle

    from gropcap.run import distributed as runner
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(runner, "decode_file_task", _dies_on_part1)
    dist = _bounded(analyze_distributed, generated, GroConfig(), client=own_client)
    assert [f.path for f in dist.failures] == [generated[1]]
    assert "KilledWorker" in dist.failures[0].error or "died" in dist.failures[0].error
    assert [i.path for i in dist.infos] == [generated[0], generated[2]]
    good = analyze([generated[0], generated[2]])
    assert good.decoded.equals(dist.decoded)


@contextlib.contextmanager
def scheduler_processes(tmp_path):
    """A Dask scheduler and one worker started as separate processes; yields the
    scheduler's ``tcp://`` address."""
    sf = tmp_path / "scheduler.json"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                              "--scheduler-file", str(sf), "--port", "0",
                              "--dashboard-address", ":0", "--no-show"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        for _ in range(300):
            if sf.exists() and sf.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(sf.read_text())["address"]
        assert address.startswith("tcp://")
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                   address, "--nthreads", "1", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with distributed.Client(address) as c:
            c.wait_for_workers(1, timeout=WORKER_START_S)
        yield address
    finally:
        for p in (worker, sched):
            if p is not None:
                p.terminate()
                p.wait(timeout=30)


def test_external_scheduler(generated, tmp_path):
    """A scheduler and a worker started as separate processes (``dask scheduler``)."""
    cfg = GroConfig(queues=2)
    with scheduler_processes(tmp_path) as address:
        dist = analyze_distributed(generated[:2], cfg, scheduler=address)
    one = analyze(generated[:2], cfg)
    assert one.summary() == dist.summary()
    for m in one.results:
        assert one.results[m].equals(dist.results[m])


def test_byte_ranges_equal_one_process(client, generated, tmp_path):
    """Large files split into byte ranges of whole scan batches decode to the same rows."""
    from gropcap.run.distributed import plan_ranges_task
    size = os.path.getsize(generated[0])
    ranges, info = plan_ranges_task(generated[0], size // 5, 256)
    assert len(ranges) >= 4
    # contiguous, covering the file, cut where the scan found record starts
    assert ranges[0][2] == 0 and ranges[-1][3] == size
    assert all(a[1] == b[0] and a[3] == b[2] for a, b in zip(ranges, ranges[1:]))
    assert info.records == 3000
    cfg = GroConfig(queues=4)
    dist = analyze_distributed(generated, cfg, client=client, split_bytes=size // 5,
                               batch_records=256)
    assert_same(analyze(generated, cfg), dist, tmp_path)


def test_damaged_large_file_reported_by_its_scan(client, generated, tmp_path):
    # a good file whose last record is cut short: the scan finds the damage at the end
    data = open(generated[0], "rb").read()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:24] + b"\xff" * 16 + data[24:])
    dist = analyze_distributed([cut, generated[1]], GroConfig(), client=client,
                               split_bytes=len(data) // 4, batch_records=256)
    assert [f.path for f in dist.failures] == [str(cut)]
    assert dist.failures[0].error
    assert [i.path for i in dist.infos] == [generated[1]]
    assert analyze(generated[1]).summary() == \
        {k: v for k, v in dist.summary().items() if k != "failed_inputs"}


def _dies_on_range(path, file_index, b0, b1, options, batch_records, *, kill):
    from gropcap.run.distributed import decode_range_task
    if path.endswith("part1.pcap") and b0 == kill:
        os._exit(3)
    return decode_range_task(path, file_index, b0, b1, options, batch_records)


def test_dead_worker_in_a_range_reported_with_its_bytes(own_client, generated, monkeypatch):
    import cloudpickle

    from gropcap.run import distributed as runner
    size = os.path.getsize(generated[1])
    ranges, _ = runner.plan_ranges_task(generated[1], size // 3, 256)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(runner, "decode_range_task",
                        functools.partial(_dies_on_range, kill=ranges[1][0]))
    dist = _bounded(analyze_distributed, generated, GroConfig(), client=own_client,
                    split_bytes=size // 3, batch_records=256)
    assert [(f.path, f.start, f.end) for f in dist.failures] == \
        [(generated[1], ranges[1][2], ranges[1][3])]
    assert [i.path for i in dist.infos] == [generated[0], generated[2]]
    assert analyze([generated[0], generated[2]]).decoded.equals(dist.decoded)


def _bench_capture(tmp_path) -> str:
    """The benchmark generator's capture, 20 000 packets of 200 flows (VXLAN frames of
    1550 IP bytes among them)."""
    p = str(tmp_path / "bench.pcap")
    subprocess.run([sys.executable, os.path.join(TESTS, "..",
                                                 "benchmarks", "make_bench_capture.py"),
                    p, "--packets", "20000", "--flows", "200"], check=True,
                   stdout=subprocess.DEVNULL)
    return p


def test_coalesced_input_split_by_queue(client, tmp_path):
    """Frames captured after TSO/GRO arrive as GSO packets in every queue partition."""
    p = _bench_capture(tmp_path)
    # its VXLAN frames are 1550 IP bytes (the SYNs imply a 1550-byte underlay): above a
    # 1500-byte MTU, stated here, they are coalesced input
    cfg = GroConfig(queues=4, mtu=1500)
    one = analyze(p, cfg)
    assert one.coalesced is not None and one.coalesced.num_coalesced > 100
    dist = analyze_distributed(p, cfg, client=client)
    assert dist.coalesced is not None
    assert (dist.coalesced.segs == one.coalesced.segs).all()
    assert dist.mtu == one.mtu and one.mtu.source == "option"
    assert_same(one, dist, tmp_path)
    inferred = analyze_distributed(p, GroConfig(queues=4), client=client)
    assert (inferred.mtu.mtu, inferred.mtu.source) == (1550, "inferred")
    assert inferred.coalesced is None


def test_progress_counts_every_stage(client, generated):
    """The distributed run reports each stage's tasks as they finish."""
    from gropcap.run.progress import Progress
    with Progress(True) as p:
        analyze_distributed(generated, GroConfig(queues=4), client=client, progress=p)
        # done-callbacks run on the client's event loop thread: give them a moment
        for _ in range(100):
            if all(t.completed == t.total for t in p._bar.tasks):
                break
            time.sleep(0.05)
        tasks = {t.description: t for t in p._bar.tasks}
        assert set(tasks) == {"decode", "GRO ideal", "GRO napi"}
        # the decode line counts input bytes (its rate is MB/s)
        size = sum(os.path.getsize(f) for f in generated)
        d = tasks.pop("decode")
        assert d.fields["unit"] == "bytes" and d.total == d.completed == size
        assert d.fields["detail"] == f"{size / 1e6:.1f}/{size / 1e6:.1f} MB"
        assert tasks["GRO napi"].total == 2      # one partition per worker
        for t in tasks.values():
            assert t.completed == t.total and t.fields["detail"] == f"{t.total}/{t.total} tasks"


# ---- the bounded-memory core per partition (run.dask_core), what --jobs runs ----

PACKET_ORDER = [("file_index", "ascending"), ("record", "ascending")]
SEG_ORDER = [("model", "ascending"), ("seg_id", "ascending")]


def _no_fallback(client, why):
    pytest.fail(f"fell back to the in-memory merge: {why}")


def read_output(directory, name: str):
    """``DIR/name.parquet`` (one process) or the ``DIR/name/`` dataset (its parts as one
    table), sorted into the one-process order, and the metadata of each file."""
    import pyarrow.dataset as ds
    path = os.path.join(directory, name + ".parquet")
    if os.path.isfile(path):
        files, table = [path], pq.read_table(path)
    else:
        files = sorted(glob.glob(os.path.join(directory, name, "part-*.parquet")))
        table = ds.dataset(os.path.join(directory, name), format="parquet").to_table()
    table = table.sort_by(PACKET_ORDER if name == "packets" else SEG_ORDER)
    return table, [pq.read_schema(f).metadata for f in files]


def assert_same_rows(one_dir, dist_dir):
    """Same rows (by value: ``encap`` dictionaries are per batch) and the same provenance
    metadata on every file; ``flows.parquet`` equal."""
    for name in ("packets", "superpackets"):
        (a, meta_a), (b, meta_b) = read_output(one_dir, name), read_output(dist_dir, name)
        assert a.num_rows > 0 and a.schema.remove_metadata() == b.schema.remove_metadata()
        assert all(m == meta_a[0] for m in meta_b), name
        for col in a.column_names:
            assert a.column(col).to_pylist() == b.column(col).to_pylist(), (name, col)
    a, b = pq.read_table(one_dir / "flows.parquet"), pq.read_table(dist_dir / "flows.parquet")
    assert a.equals(b) and a.schema.metadata == b.schema.metadata


@pytest.mark.parametrize("cfg", [GroConfig(queues=4), GroConfig(queues=8, budget=16),
                                 GroConfig(queues=3, kernel=KernelProfile.parse("5.10"))],
                         ids=["q4", "q8-budget16", "q3-5.10"])
def test_core_per_partition_equals_one_process(client, generated, tmp_path, cfg):
    """Each partition runs the bounded-memory core and writes its own parts; the client
    merges accumulators: summary, flows, flow causes and the rows equal one process."""
    from gropcap.io.load import load
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    one = stream_analyze(generated, cfg, out_dir=str(tmp_path / "one"))
    dist = analyze_partitioned(generated, cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback)
    assert dist.summary == one.summary == analyze(generated, cfg).summary()
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    assert dist.failures == []
    # 2 partitions on 2 local workers: the fused exchange, one task per partition
    assert dist.exchange == "fused" and len(dist.task_timings) == 2
    assert "fused" in dist.timings and all(t["cpu"] > 0 for t in dist.task_timings)
    # two partitions, each wrote its own part of each dataset
    for name in ("packets", "superpackets"):
        assert len(glob.glob(str(tmp_path / "dist" / name / "part-*.parquet"))) == 2
    assert sorted(os.listdir(tmp_path / "dist")) == ["flows.parquet", "packets",
                                                     "superpackets"]
    assert_same_rows(tmp_path / "one", tmp_path / "dist")
    a, b = load(tmp_path / "one"), load(tmp_path / "dist")
    for x, y in ((a.packets, b.packets), (a.superpackets, b.superpackets)):
        # by value: the encap dictionaries are per row group
        assert x.to_pydict() == y.to_pydict()
    assert all(a.results[m].equals(b.results[m]) for m in a.results)
    assert a.summary() == b.summary()


@pytest.mark.parametrize("queues", [1, 2])
def test_core_per_partition_samples(client, tmp_path, queues):
    """Every bundled sample (VXLAN and Geneve ones give the UDP tunnel hint)."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    cfg = GroConfig(queues=queues)
    files = SAMPLES if queues == 1 else [p for p in SAMPLES if "real_" in p]
    one = stream_analyze(files, cfg, out_dir=str(tmp_path / "one"))
    dist = analyze_partitioned(files, cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback)
    assert dist.summary == one.summary
    assert dist.udp_tunnel_hint == one.udp_tunnel_hint
    assert one.udp_tunnel_hint is not None      # crafted_vxlan_gpe, real_vxlan
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


def _notes(monkeypatch):
    from gropcap.run.progress import Progress
    notes = []
    p = Progress(False, quiet=False)
    monkeypatch.setattr(p, "note", lambda text, **_: notes.append(text))
    return p, notes


@pytest.mark.parametrize("out", [True, False], ids=["out", "summary"])
@pytest.mark.parametrize("name,cfg,split", [
    ("real_ipv4_p4.pcap", GroConfig(), None),
    ("real_ipv4_p4.pcap", GroConfig(), 150_000),
    ("real_vxlan.pcap", GroConfig(gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=2),
     None)], ids=["p4", "p4-byte-ranges", "vxlan-timers"])
def test_core_per_partition_cuts_one_rx_queue_in_time(client, tmp_path, monkeypatch,
                                                      name, cfg, split, out):
    """One RX queue on two workers: the core per partition cuts the receiver run in two
    at an idle gap longer than every napi timer where neither model holds anything (the
    real captures' flows end their bursts with PSH), each time piece a partition of its
    own; flows that span the cut are one flow (rows summed, the first piece's keys, the
    end reasons summed before the most frequent is taken), and the summary, flows,
    flow causes and rows equal one process. ``split``: the file decoded in byte ranges
    too, whose pieces the time pieces cut across."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.spill import LKEYS, read_array
    from gropcap.run.stream import stream_analyze
    path = os.path.join(TESTS, "..", "sample_pcaps", name)
    one = stream_analyze(path, cfg, out_dir=str(tmp_path / "one") if out else None)
    p, notes = _notes(monkeypatch)
    seen, pieces = [], []
    from gropcap.run import dask_core, distributed as runner
    if split:
        # scan batches of 256 records: byte ranges of whole batches, several per file
        monkeypatch.setattr(runner, "BATCH_RECORDS", 256)
    timed = dask_core._core_time_cuts
    monkeypatch.setattr(dask_core, "_core_time_cuts", lambda decoded, *a: pieces.append(
        sum(len(d.pieces) for d in decoded)) or timed(decoded, *a))
    real = dask_core._add_flows_merged
    monkeypatch.setattr(dask_core, "_add_flows_merged", lambda tot, works, models: seen.append(
        [set(np.asarray(read_array(os.path.join(w, LKEYS))).tolist()) for w in works])
        or real(tot, works, models))
    with p:
        dist = analyze_partitioned(path, cfg, client=client, progress=p,
                                   out_dir=str(tmp_path / "dist") if out else None,
                                   split_bytes=split, fallback=_no_fallback)
    gap = engine.quiet_gap_ns(cfg.replace(model="napi")) / 1000
    assert notes == [f"napi model: cut in time at 1 idle gap(s) longer than {gap:g} us, "
                     "2 pieces per RX-queue partition"]
    assert dist.exchange == "exchange"
    assert pieces == [3 if split else 1]        # decoded pieces the time pieces cut
    # two time pieces, and flows in both (what the merge per flow is for)
    assert len(seen) == 1 and len(seen[0]) == 2 and seen[0][0] & seen[0][1]
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    if out:
        for d in ("packets", "superpackets"):
            assert len(glob.glob(str(tmp_path / "dist" / d / "part-*.parquet"))) == 2
        assert_same_rows(tmp_path / "one", tmp_path / "dist")


def test_core_per_partition_replays_uncut_more_flows_than_it_merges(client, tmp_path,
                                                                    monkeypatch):
    """The client merges a cut run's flows in memory, so above ``CUT_FLOWS_MAX`` flow
    rows over the pieces the run is replayed uncut (its flows then taken a slice at a
    time), with a note; equal to one process either way."""
    from gropcap.run import dask_core
    from gropcap.run.stream import stream_analyze
    path = os.path.join(TESTS, "..", "sample_pcaps", "real_ipv4.pcap")
    one = stream_analyze(path, GroConfig())
    nflows = one.flows.num_rows
    monkeypatch.setattr(dask_core, "CUT_FLOWS_MAX", nflows)     # both pieces hold some
    p, notes = _notes(monkeypatch)
    with p:
        dist = dask_core.analyze_partitioned(path, GroConfig(), client=client, progress=p,
                                             fallback=_no_fallback)
    assert len(notes) == 2 and notes[1].startswith("the time pieces hold ")
    assert notes[1].endswith(f"flow rows, more than the {nflows} the client merges in "
                             "memory: replayed without time cuts")
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes


@pytest.mark.parametrize("cfg,cut", [(GroConfig(), True), (GroConfig(hz=1000), False)],
                         ids=["default", "hz1000"])
def test_core_per_partition_replays_uncut_what_is_held_across_a_cut(
        client, generated, tmp_path, monkeypatch, cfg, cut):
    """The generated workload has idle gaps, but its flows do not end every burst with
    PSH: the ideal model still holds a super-packet at the cut (``END_CAPTURE`` at the
    end of the first piece), so the run is replayed without time cuts, and equals one
    process. At HZ 1000 the napi model is not cut at all."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    one = stream_analyze(generated, cfg, out_dir=str(tmp_path / "one"))
    p, notes = _notes(monkeypatch)
    with p:
        dist = analyze_partitioned(generated, cfg, client=client, progress=p,
                                   out_dir=str(tmp_path / "dist"), fallback=_no_fallback)
    assert notes == (["napi model: cut in time at 1 idle gap(s) longer than 50 us, 2 "
                      "pieces per RX-queue partition",
                      "a super-packet was held across a time cut (the ideal model holds "
                      "a flow's last one across any gap): replayed without time cuts"]
                     if cut else [])
    assert dist.exchange == ("exchange" if cut else "fused")
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


@pytest.mark.parametrize("queues", [1, 4])
def test_core_per_partition_fused_summary_only(client, generated, tmp_path, queues):
    """Without --out the fused tasks count the output pass themselves (no write
    tasks): the summary, flows, flow causes and tunnel hint of one process; the
    samples with the VXLAN/Geneve hint as well."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    cfg = GroConfig(queues=queues)
    for files in (generated, [p for p in SAMPLES if "real_" in p]):
        one = stream_analyze(files, cfg)
        dist = analyze_partitioned(files, cfg, client=client, fallback=_no_fallback)
        # the samples overlap in time: separate receivers, a task per receiver run
        one_run = max(one.summary["inputs"]["run_of_file"]) == 0
        assert one_run == (files is generated)
        # one RX queue on two workers: the exchange, cut in time (the generated
        # workload leaves segments held at its gap: replayed uncut, one partition)
        assert dist.exchange == ("runs" if not one_run else
                                 "exchange" if queues == 1 else "fused")
        assert len(dist.task_timings) == (2 if one_run and queues > 1 else 0)
        assert dist.summary == one.summary
        assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
        assert dist.udp_tunnel_hint == one.udp_tunnel_hint
        assert dist.metadata == one.metadata     # the digest the client computed
    assert one.udp_tunnel_hint is not None


def _many_flows(path: str, flows: int, per_flow: int) -> str:
    """``flows`` TCP flows of ``per_flow`` full segments each, round-robin."""
    seq = [1000 * f for f in range(flows)]
    frames, ts, t = [], [], 1_700_000_000_000_000_000
    for _ in range(per_flow):
        for f in range(flows):
            seg = tcp(1000 + f, 5201, seq=seq[f], ack=1, flags=C.TCP_FLAG_ACK,
                      payload=bytes(1448))
            frames.append(eth(ipv4(f"10.{f // 250 % 250}.{f % 250 + 1}.1", "10.250.0.1",
                                   C.IPPROTO_TCP, seg)))
            seq[f] += 1448
            t += 1000
            ts.append(t)
    write_pcap(path, frames, ts)
    return path


@pytest.mark.parametrize("out", [False, True], ids=["summary", "out"])
@pytest.mark.parametrize("how", ["fused", "exchange"])
def test_the_client_gets_nothing_per_flow(client, tmp_path, monkeypatch, how, out):
    """One receiver run cut by RX queue (the fused exchange, the exchange): the GRO and
    write tasks keep their partition's flows and coalesced-input statistics on disk and
    return no per-flow counters, so what reaches the client is the same size for 2 400
    flows as for 16 carrying as many packets; the flows table and flow causes still
    equal one process, read from a file the client maps."""
    import gropcap.run.dask_core as dc
    cfg = GroConfig(queues=4)
    got, size = [], {}
    real = dc._results

    def results(c, tasks, fn):
        r = real(c, tasks, fn)
        got.extend(r)
        return r
    monkeypatch.setattr(dc, "_results", results)
    # the tasks' coalesced-input statistics (per TCP direction) stay in their files
    # however few the directions: on the workers too (their own processes)
    import gropcap.gro.coalesced as co
    real_min = co.SPILL_MIN
    monkeypatch.setattr(co, "SPILL_MIN", 1)
    client.run(_set_spill_min, 1)
    try:
        _client_sizes(client, tmp_path, cfg, how, out, got, size)
    finally:
        client.run(_set_spill_min, real_min)
    # before: 24-34 bytes a flow pickled (keys, first rows, counters, key rows), and
    # about 80 bytes a flow of coalesced-input statistics
    assert size[2400] - size[16] < 2400 * 4, size


def _set_spill_min(n: int) -> None:
    import gropcap.gro.coalesced as co
    co.SPILL_MIN = n


def _client_sizes(client, tmp_path, cfg, how, out, got, size) -> None:
    """What reaches the client (pickled) for 2 400 flows and for 16 flows of as many
    packets, into ``size``; the results equal one process."""
    import pickle

    import gropcap.run.dask_core as dc
    from gropcap.arrays import is_mapped
    from gropcap.run.spill import CauseTexts
    from gropcap.run.stream import stream_analyze
    for flows, per_flow in ((2400, 2), (16, 300)):
        cap = _many_flows(str(tmp_path / f"f{flows}.pcap"), flows, per_flow)
        got.clear()
        one = stream_analyze([cap], cfg)
        dist = dc.analyze_partitioned(
            [cap], cfg, client=client, exchange=how, fallback=_no_fallback,
            out_dir=str(tmp_path / f"out{flows}") if out else None)
        assert dist.exchange == how
        assert dist.summary == one.summary and dist.flows.num_rows == flows
        assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
        assert is_mapped(dist.flows) and isinstance(dist.flow_causes, CauseTexts)
        assert dist.totals.flows.n_flows == 0
        assert all(len(mc.flow_segs) == len(mc.top_keys) == 0
                   for mc in dist.totals.models.values())
        size[flows] = sum(len(pickle.dumps(d)) for d in got)


@pytest.mark.parametrize("out", [False, True], ids=["summary", "out"])
def test_core_per_partition_exchange_path(client, generated, tmp_path, out):
    """The exchange through scratch files (decode tasks, what a remote scheduler or more
    partitions than FUSED_MAX_PARTS run) still equals one process."""
    from gropcap.run.dask_core import analyze_partitioned, exchange_rule
    from gropcap.run.stream import stream_analyze
    cfg = GroConfig(queues=4)
    one = stream_analyze(generated, cfg, out_dir=str(tmp_path / "one") if out else None)
    dist = analyze_partitioned(generated, cfg, client=client, exchange="exchange",
                               out_dir=str(tmp_path / "dist") if out else None,
                               fallback=_no_fallback)
    assert dist.exchange == "exchange" and dist.task_timings == []
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    if out:
        assert_same_rows(tmp_path / "one", tmp_path / "dist")
    # the rule: fused on local workers with a worker per partition, up to the limit
    assert exchange_rule("auto", 2, 2, True) == "fused"
    assert exchange_rule("auto", 2, 2, False) == "exchange"
    assert exchange_rule("auto", 3, 2, True) == "exchange"
    assert exchange_rule("auto", 4, 4, True) == "fused"
    assert exchange_rule("auto", 8, 8, True) == "exchange"
    assert exchange_rule("fused", 8, 2, False) == "fused"
    # files that may be separate receivers: a task per receiver run
    assert exchange_rule("auto", 1, 2, True, separate=True) == "runs"
    assert exchange_rule("auto", 4, 2, False, separate=True) == "runs"


@pytest.mark.parametrize("exchange", ["auto", "runs"])
def test_core_per_partition_coalesced_input(client, tmp_path, exchange):
    """Frames captured already coalesced: the merged statistics infer each partition's
    segments; the counts and rows equal one process (and the VXLAN tunnel hint). The
    runs exchange (one run here, in RX-queue partitions) has the statistics from its
    scan before any GRO."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    p = _bench_capture(tmp_path)
    cfg = GroConfig(queues=4, mtu=1500)
    one = stream_analyze(p, cfg, out_dir=str(tmp_path / "one"))
    dist = analyze_partitioned(p, cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback, exchange=exchange)
    assert one.totals.coalesced is not None and one.totals.coalesced.num > 100
    # fused: ran again with the merged statistics
    assert dist.exchange == ("fused" if exchange == "auto" else "runs")
    assert dist.summary == one.summary and dist.udp_tunnel_hint == one.udp_tunnel_hint
    assert dist.udp_tunnel_hint is not None
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


@pytest.mark.parametrize("exchange", ["auto", "runs"])
def test_core_per_partition_coalesced_inferred_mtu(client, tmp_path, exchange):
    """Frames above the MTU the SYNs imply (1500, inferred: no option, no mark): the
    fused tasks find them only once their statistics are merged, and run again with
    them; the summary and rows equal one process."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    mss = b"\x02\x04\x05\xb4"               # MSS 1460: a 1500-byte MTU
    frames, ts = [], []
    t = 1_700_000_000_000_000_000
    for f in range(12):
        a, b = f"10.0.0.{f + 1}", "10.1.0.1"
        for src, dst, sp, dp in ((a, b, 1000 + f, 80), (b, a, 80, 1000 + f)):
            frames.append(eth(ipv4(src, dst, C.IPPROTO_TCP,
                                   tcp(sp, dp, seq=1, flags=C.TCP_FLAG_SYN, options=mss))))
            t += 1000
            ts.append(t)
    for i in range(600):
        f = i % 12
        size = 2920 if i % 7 == 0 else 1460     # every 7th: two segments already merged
        frames.append(eth(ipv4(f"10.0.0.{f + 1}", "10.1.0.1", C.IPPROTO_TCP,
                               tcp(1000 + f, 80, seq=2 + 1460 * (i // 12) * 2, ack=1,
                                   payload=bytes(size)))))
        t += 3000
        ts.append(t)
    p = str(tmp_path / "gso.pcap")
    write_pcap(p, frames, ts)
    cfg = GroConfig(queues=4)
    one = stream_analyze(p, cfg, out_dir=str(tmp_path / "one"))
    assert one.totals.coalesced is not None and one.totals.coalesced.num > 50
    assert one.summary["mtu"]["source"] != "option"
    dist = analyze_partitioned(p, cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback, exchange=exchange)
    assert dist.exchange == ("fused" if exchange == "auto" else "runs")
    assert dist.summary == one.summary
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


@pytest.mark.parametrize("exchange", ["auto", "runs"])
def test_core_per_partition_falls_back(client, tmp_path, exchange):
    """One inner TCP flow in VXLAN whose outer UDP source port changes: RSS (which hashes
    the outer ports) spreads it over both queues, while the ideal model's same-flow class
    (no RSS hash, no outer ports) is one. Both models cannot run on one cut: the
    caller's in-memory merge runs instead, and ``analyze_run`` gives the one-process
    summary that way."""
    from gropcap.run.core import analyze_run
    from gropcap.run.dask_core import analyze_partitioned
    from tests.craft import vxlan
    frames, ts = [], []
    for i in range(200):
        inner = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP,
                         tcp(1000, 80, seq=1 + 1000 * i, ack=1, payload=bytes(1000))))
        frames.append(eth(ipv4("192.168.0.1", "192.168.0.2", C.IPPROTO_UDP,
                               udp(40000 + i % 16, 4789, vxlan(inner, 42)))))
        ts.append(1_700_000_000_000_000_000 + 1000 * i)
    p = str(tmp_path / "vxlan.pcap")
    write_pcap(p, frames, ts)
    cfg = GroConfig(queues=2, udp_tunnels=(("vxlan", 4789),))
    napi = analyze(p, cfg)
    assert len(set(napi.results["napi"].rx_queue.tolist())) == 2
    why = []
    got = analyze_partitioned(p, cfg, client=client, out_dir=str(tmp_path / "dist"),
                              fallback=lambda c, reason: why.append(reason) or "merged",
                              exchange=exchange)
    assert got == "merged" and why and "same-flow class" in why[0]
    assert not os.path.exists(tmp_path / "dist")
    merged = analyze_run(p, cfg, jobs=2)
    assert merged.summary() == napi.summary()
    assert type(merged).__name__ == "DistributedAnalysis"


@pytest.mark.parametrize("files, exchange, runs", [
    ((0, 1, 2), "runs", [0, 0, 0]),         # one run of three files, in RX-queue partitions
    ((0, 1, 2, 0), "auto", [0, 0, 0, 1]),   # a copy of the first file after the run
    ((0, 0, 1), "auto", [0, 1, 1]),         # the second run holds two files
], ids=["one-run", "run-and-copy", "two-file-run"])
def test_core_per_receiver_run_equals_one_process(client, generated, tmp_path, files,
                                                  exchange, runs):
    """The runs exchange: a scan of every file first (counts, statistics, provenance),
    then a task per receiver run (its files numbered from 0 within the run), each run's
    parts written with the rows, flows, super-packets and polls of the runs before it as
    bases, its scratch removed once written. Summary, flows, flow causes, every row and
    the provenance on every part equal one process."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    paths = [generated[i] for i in files]
    cfg = GroConfig(queues=4)
    one = stream_analyze(paths, cfg, out_dir=str(tmp_path / "one"))
    assert one.summary["inputs"]["run_of_file"] == runs
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    dist = analyze_partitioned(paths, cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback, exchange=exchange, scratch=str(scratch))
    assert dist.exchange == "runs"
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows) and dist.flow_causes == one.flow_causes
    assert_same_rows(tmp_path / "one", tmp_path / "dist")
    assert not os.listdir(scratch), "scratch left behind"
    # summary only: the tasks count their output pass themselves
    quiet = analyze_partitioned(paths, cfg, client=client, fallback=_no_fallback,
                                exchange=exchange)
    assert quiet.summary == one.summary and quiet.flow_causes == one.flow_causes


def test_runs_exchange_keeps_scratch_bounded(client, generated, tmp_path, monkeypatch):
    """Eight copies of a file (eight receiver runs) on two workers: a run's scratch goes
    once its parts are written, and GRO runs at most as many runs ahead as there are
    workers, so the scratch never holds more than a few runs (the 100 GB
    run of issue 15 rests on it: the runs' scratch together would fill the disk)."""
    import gropcap.run.dask_core as dc
    from gropcap.run.stream import stream_analyze
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seen = []
    real = dc._results

    def results(c, tasks, fn):
        seen.append(len(glob.glob(str(scratch / "*" / "run-*"))))
        return real(c, tasks, fn)
    monkeypatch.setattr(dc, "_results", results)
    paths = [generated[0]] * 8
    dist = dc.analyze_partitioned(paths, GroConfig(), client=client,
                                  out_dir=str(tmp_path / "dist"), fallback=_no_fallback,
                                  scratch=str(scratch))
    assert dist.exchange == "runs" and dist.summary["inputs"]["receiver_runs"] == 8
    one = stream_analyze(paths, GroConfig())
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows)
    # the client sealed each run as it came: its flows-table rows to a file on disk,
    # mapped at the end, no per-flow accumulators (they held the 100 GB run's client
    # above 1 GB); the flow causes read from disk on access too
    from gropcap.run.spill import CauseTexts
    assert dist.totals.sealed_flows == dist.flows.num_rows == 8 * one.flows.num_rows // 8
    assert dist.totals.flows.n_flows == 0 and dist.flows.column("packets").num_chunks == 8
    assert isinstance(dist.flow_causes, CauseTexts) and dist.flow_causes == one.flow_causes
    assert all(len(mc.top_keys) == 0 == len(mc.flow_segs)
               for mc in dist.totals.models.values())
    assert max(seen) >= 2, seen          # runs did overlap
    # runs in flight (one a worker) and runs waiting for their write: never all 8
    assert max(seen) <= 2 * 2, seen


def test_runs_exchange_progress_counts_packets(client, generated, tmp_path):
    """The runs exchange draws a line per stage: the scan in files, decode+GRO and the
    packets pass in packets (the scan counted them), so each line's rate is packets/s;
    every line ends complete."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.progress import Progress
    paths = [generated[0], generated[1], generated[0]]
    with Progress(True) as p:
        r = analyze_partitioned(paths, GroConfig(), client=client, progress=p,
                                out_dir=str(tmp_path / "out"), fallback=_no_fallback)
        for _ in range(100):
            if all(t.completed == t.total for t in p._bar.tasks):
                break
            time.sleep(0.05)
        tasks = {t.description: t for t in p._bar.tasks}
    assert r.exchange == "runs"
    assert set(tasks) == {"scan", "decode+GRO ideal+napi", "packets.parquet"}
    assert tasks["scan"].total == 3 and tasks["scan"].fields["unit"] == "tasks"
    for name in ("decode+GRO ideal+napi", "packets.parquet"):
        t = tasks[name]
        assert t.fields["unit"] == "packets" and t.total == r.summary["packets"]
        assert t.completed == t.total, (name, t.completed, t.total)
        assert t.fields["detail"] == f"{t.total}/{t.total} packets"


@pytest.mark.parametrize("exchange", ["fused", "exchange"])
def test_core_progress_lines_have_rates(client, generated, tmp_path, exchange):
    """The fused exchange and the exchange count their lines in input bytes (decode;
    every fused task decodes every input) and packets (GRO, the packets pass), so each
    line's rate is MB/s or packets/s; every line ends complete."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.progress import Progress
    with Progress(True) as p:
        r = analyze_partitioned(generated, GroConfig(queues=4), client=client, progress=p,
                                out_dir=str(tmp_path / "out"), fallback=_no_fallback,
                                exchange=exchange, captures="continuous")
        for _ in range(100):
            if all(t.completed == t.total for t in p._bar.tasks):
                break
            time.sleep(0.05)
        tasks = {t.description: t for t in p._bar.tasks}
    assert r.exchange == exchange
    size = sum(os.path.getsize(f) for f in generated)
    units = {"decode": "bytes", "decode+GRO ideal+napi": "bytes",
             "GRO ideal+napi": "packets", "packets.parquet": "packets"}
    want = {"fused": {"decode+GRO ideal+napi", "packets.parquet"},
            "exchange": {"decode", "GRO ideal+napi", "packets.parquet"}}[exchange]
    assert set(tasks) == want
    for name, t in tasks.items():
        assert t.fields["unit"] == units[name]
        assert t.total == (size if units[name] == "bytes" else r.summary["packets"])
        assert t.completed == t.total, (name, t.completed, t.total)


def test_runs_exchange_ships_tunnel_rows_only_for_a_hint_that_uses_them(client, monkeypatch):
    """UDP tunnels on ports without a socket: the GRO tasks of the runs exchange return
    their rows only when the tunnel hint runs a model on them (at most
    ``HINT_MAX_ROWS`` in the whole input). Regression: each of 40 runs shipped its share
    up to the limit, and the client of the 100 GB run peaked at 5 GB."""
    import gropcap.run.dask_core as dc
    import gropcap.run.hints as hints
    from gropcap.run.stream import stream_analyze
    vx = [p for p in SAMPLES if p.endswith("real_vxlan.pcap")][0]
    shipped = []
    real = dc._results

    def results(c, tasks, fn):
        got = real(c, tasks, fn)
        shipped.extend(d.get("tunnels") for d in got if isinstance(d, dict) and "nflows" in d)
        return got
    monkeypatch.setattr(dc, "_results", results)
    for limit, collected in ((hints.HINT_MAX_ROWS, True), (10, False)):
        monkeypatch.setattr(hints, "HINT_MAX_ROWS", limit)
        shipped.clear()
        one = stream_analyze([vx, vx], GroConfig())
        dist = dc.analyze_partitioned([vx, vx], GroConfig(), client=client,
                                      fallback=_no_fallback)
        assert dist.exchange == "runs" and len(shipped) == 2
        assert dist.summary == one.summary and dist.udp_tunnel_hint == one.udp_tunnel_hint
        assert one.udp_tunnel_hint is not None
        assert all((s is not None and sum(t.num_rows for t in s[0]) > 0) == collected
                   for s in shipped), (limit, shipped)


@pytest.mark.parametrize("exchange, files", [
    ("fused", (0,)), ("exchange", (0, 1, 2)), ("runs", (0, 1, 2, 0))])
def test_egress_counted_per_partition_equals_one_process(client, generated, tmp_path,
                                                         exchange, files):
    """``--egress`` on the core per partition: each GRO task counts its super-packets'
    egress from its own rows (``run.stream.RowCodes``), the client adds the totals. The
    summary equals the bounded one-process run's and the in-memory run's, for a
    scenario with hardware segmentation and one with an MTU that drops; nothing of the
    in-memory merge runs (``_no_fallback``)."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.options import EgressOptions
    from gropcap.run.stream import stream_analyze
    paths = [generated[i] for i in files]
    cfg = GroConfig(queues=4)
    for spec in (("encap", "tso,tx-tcp6-segmentation", None), ("decap", "tso", 1400)):
        opts = EgressOptions(*spec)
        one = stream_analyze(paths, cfg, egress=opts)
        assert one.summary == analyze(paths, cfg, egress=opts).summary()
        dist = analyze_partitioned(paths, cfg, client=client, fallback=_no_fallback,
                                   exchange=exchange, egress=opts,
                                   out_dir=str(tmp_path / spec[0]))
        assert dist.exchange == exchange
        assert dist.summary == one.summary, spec
        e = dist.summary["egress"]["napi"]
        assert e["superpackets"] > 0
        assert e["hardware_segments"] > 0 if spec[2] is None else e["dropped"] > 0


@pytest.mark.parametrize("exchange,names,config,captures", [
    ("fused", ["real_ipv4.pcap"], GroConfig(queues=2), "continuous"),
    ("exchange", ["crafted_gre_key.pcap", "crafted_two_ifaces.pcapng"], GroConfig(queues=2),
     "continuous"),
    ("runs", ["real_ipv6.pcap", "real_ipv4.pcap"], GroConfig(poll_acks=True), "separate"),
], ids=["fused", "exchange-pcapng", "runs-acks"])
def test_reference_decoder_per_partition(tmp_path, monkeypatch, reference_decodes, exchange,
                                         names, config, captures):
    """``--decoder reference`` on the core per partition (issue 15: every feature in
    distributed mode): every task that decodes (fused, decode, scan, ACK) uses the
    plain-Python reader and decoder; the summary and the rows equal the one-process run
    with the fast decoder (workers as threads of this process: the decoder is seen
    where it runs)."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    paths = [os.path.join(TESTS, os.pardir, "sample_pcaps", n) for n in names]
    calls = reference_decodes
    one = stream_analyze(paths, config, captures=captures, out_dir=str(tmp_path / "one"))
    assert not calls
    (tmp_path / "scratch").mkdir()
    import gropcap.run.inputs as inputs
    asked = []                      # the decoder of every file decoded (any task)
    real_file = inputs.decode_file

    def decode_file(*args, **kw):
        asked.append(kw.get("decoder", "fast"))
        return real_file(*args, **kw)
    monkeypatch.setattr(inputs, "decode_file", decode_file)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        dist = analyze_partitioned(paths, config, client=c, exchange=exchange,
                                   decoder="reference", fallback=_no_fallback,
                                   captures=captures, out_dir=str(tmp_path / "dist"),
                                   scratch=str(tmp_path / "scratch"))
    assert dist.exchange == exchange and calls
    assert set(asked) == {"reference"}
    assert dist.summary == one.summary
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


def _distributed_log_level() -> int:
    import logging
    return logging.getLogger("distributed").getEffectiveLevel()


def test_local_workers_log_warnings_only(monkeypatch):
    """The workers --jobs starts log the ``distributed`` logger at WARNING from their
    start (run.distributed.worker_environ): no INFO line of theirs reaches the user's
    terminal, before or after "gropcap: interrupted"; an environment that sets the
    level keeps its own."""
    import logging

    from gropcap.run.distributed import _local_cluster, worker_environ
    cluster, c = _local_cluster(1)
    try:
        assert set(c.run(_distributed_log_level).values()) == {logging.WARNING}
    finally:
        c.close()
        cluster.close()
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "debug")
    assert "DASK_LOGGING__DISTRIBUTED" not in worker_environ()
