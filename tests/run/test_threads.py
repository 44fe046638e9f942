"""--threads: the bounded-memory run as a pipeline of threads (run/threads.py) gives the
results of the run on one thread, and its workers stop with the run."""

from __future__ import annotations

import os
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from gropcap.errors import ConfigError
from gropcap.gro.config import GroConfig
from gropcap.run.stream import OUT_NAMES, stream_analyze
from gropcap.run.threads import Ahead, Sidecar, default_threads, resolve_threads

from test_stream import bench_capture  # noqa: F401  (the generated capture)
from where import ROOT


def _plain(table):
    return {name: table.column(name).to_pylist() for name in table.column_names}


@pytest.fixture(scope="module")
def capture(bench_capture):
    return bench_capture


def _workers() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("gropcap-decode", "gropcap-spill", "gropcap-model",
                                  "gropcap-spwrite", "gropcap-read", "gropcap-write"))]


@pytest.mark.parametrize("path,config", [
    (None, GroConfig(queues=2, budget=8)),
    # captured coalesced above a 1000-byte MTU: the fused try stops and starts over
    (os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"), GroConfig(mtu=1000)),
    # a VXLAN port without a tunnel socket: the same
    (os.path.join(ROOT, "sample_pcaps", "real_vxlan.pcap"), GroConfig()),
], ids=["generated", "coalesced", "tunnel-hint"])
@pytest.mark.parametrize("out", [True, False], ids=["out", "summary"])
def test_two_threads_equal_one(capture, tmp_path, path, config, out):
    path = path or capture
    runs = {}
    for th in (1, 2):
        d = str(tmp_path / f"t{th}") if out else None
        runs[th] = stream_analyze(path, config, out_dir=d, batch_records=97, threads=th)
        assert runs[th].threads == th
    one, two = runs[1], runs[2]
    assert two.summary == one.summary
    assert two.flow_causes == one.flow_causes
    assert two.udp_tunnel_hint == one.udp_tunnel_hint
    assert _plain(two.flows) == _plain(one.flows)
    if out:
        for n in OUT_NAMES:
            a, b = pq.read_table(tmp_path / "t1" / n), pq.read_table(tmp_path / "t2" / n)
            assert a.schema.equals(b.schema) and _plain(a) == _plain(b), n
        assert sorted(os.listdir(tmp_path / "t2")) == sorted(OUT_NAMES)
    assert not _workers()


def test_threads_option_checked():
    assert resolve_threads(1) == 1
    assert resolve_threads(8) == 2          # more than the pipeline's stages use
    assert resolve_threads(None) == default_threads()
    assert 1 <= default_threads() <= 2
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError):
            resolve_threads(bad)


def test_a_failing_run_stops_its_workers(capture, tmp_path, monkeypatch):
    """An error in the GRO thread (here: the engine) ends the run with that error, the
    decode and spill threads stopped and the temporary files gone."""
    from gropcap.run import engines
    calls = []
    real = engines.BatchGroModels.feed

    def feed(self, table, **kw):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt       # as a Ctrl-C in the main thread
        return real(self, table, **kw)
    monkeypatch.setattr(engines.BatchGroModels, "feed", feed)
    switch = sys.getswitchinterval()
    with pytest.raises(KeyboardInterrupt):
        stream_analyze(capture, out_dir=str(tmp_path / "o"), tmp_dir=str(tmp_path),
                       batch_records=50, threads=2)
    assert not _workers()
    assert sys.getswitchinterval() == switch      # restored
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".gropcap-stream")]
    assert not os.path.exists(tmp_path / "o" / "packets.parquet")


@pytest.mark.parametrize("where", ["superpackets", "packets", "writer"])
def test_a_failure_in_the_output_passes_stops_their_workers(capture, tmp_path, monkeypatch,
                                                            where):
    """An interrupt while a super-packets table (built in the super-packets writer's
    thread, run.stream._SegWriter) or a packets table (the calling thread) is built, or
    a write error in a sidecar, ends the run with it: every worker stopped, nothing left
    in the temporary directory or --out."""
    import pyarrow.parquet as pq_mod

    from gropcap.run import stream
    calls = []
    real_readable, real_write = stream.readable, pq_mod.ParquetWriter.write_table

    def readable(t, *a, **kw):
        calls.append("model" in t.column_names)        # a super-packets table
        if where != "writer" and calls[-1] == (where == "superpackets") and \
                calls.count(calls[-1]) == 3:
            raise KeyboardInterrupt
        return real_readable(t, *a, **kw)

    def write_table(self, t, *a, **kw):
        if "gro_role" in t.column_names:                # packets.parquet's third group
            calls.append("written")
            if calls.count("written") == 3:
                raise OSError(28, "No space left on device")
        return real_write(self, t, *a, **kw)
    monkeypatch.setattr(stream, "readable", readable)
    if where == "writer":
        from gropcap.io import parquet
        monkeypatch.setattr(pq_mod.ParquetWriter, "write_table", write_table)
        # a row group a batch (io.parquet.TableWriter gathers small batches): the third
        # is written by the sidecar while the run goes on
        monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 1)
    with pytest.raises((KeyboardInterrupt, Exception)) as got:
        stream_analyze(capture, out_dir=str(tmp_path / "o"), tmp_dir=str(tmp_path),
                       batch_records=50, threads=2)
    if where == "writer":
        assert "cannot write" in str(got.value)
    else:
        assert got.type is KeyboardInterrupt
    assert not _workers()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".gropcap-stream")]
    assert not os.path.exists(tmp_path / "o" / "packets.parquet")


def test_ahead_yields_in_order_and_returns_the_value():
    def gen():
        for i in range(50):
            yield i
        return "done"
    for threaded in (True, False):
        a = Ahead(gen(), threaded=threaded)
        assert list(a) == list(range(50)) and a.value == "done"
        a.close()


def test_ahead_raises_the_generators_error_at_its_item():
    def gen():
        yield 1
        raise ValueError("bad record")
    a = Ahead(gen())
    assert next(a) == 1
    with pytest.raises(ValueError, match="bad record"):
        next(a)
    a.close()


def test_ahead_close_stops_the_worker_and_closes_the_generator():
    closed = threading.Event()

    def gen():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()
    a = Ahead(gen(), depth=2)
    assert next(a) == 0
    a.close()
    assert closed.is_set() and not a._thread.is_alive()


def test_sidecar_runs_in_order_and_raises():
    seen = []
    s = Sidecar(depth=2)
    for i in range(20):
        s.submit(seen.append, i)
    s.drain()
    assert seen == list(range(20))

    def boom():
        raise OSError("disk full")
    s.submit(boom)
    with pytest.raises(OSError, match="disk full"):
        s.drain()
    s.close()
    inline = Sidecar(threaded=False)
    inline.submit(seen.append, 99)
    assert seen[-1] == 99


def test_cli_threads_option_same_json_and_named_in_the_last_line():
    import json
    import re

    from click.testing import CliRunner

    from gropcap.cli import main
    sample = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    got = {}
    for th in ("1", "2"):
        r = CliRunner().invoke(main, ["analyze", sample, "--format", "json", "--threads", th])
        assert r.exit_code == 0, r.output
        got[th] = json.loads(r.stdout)
        word = "thread" if th == "1" else "threads"
        assert re.search(rf"packets/s, {th} {word}\), nothing written$", r.stderr.strip()), \
            r.stderr
    assert got["1"] == got["2"]
    bad = CliRunner().invoke(main, ["analyze", sample, "--threads", "0"])
    assert bad.exit_code == 2 and "--threads" in bad.output


def test_the_second_model_runs_in_a_thread_of_its_own(capture, monkeypatch):
    """With two threads the napi model's kernels run in the models' thread while the
    calling thread runs the ideal model's (the results: test_two_threads_equal_one);
    with one thread both run in the caller."""
    from gropcap.gro import engine
    real_run, real_models = engine._run_batch, engine.simulate_batch_models
    seen: dict = {}
    inside = []

    def run_batch(cols, ts, config, state, final):
        if inside:              # the batch pipeline's calls (not the tunnel hint's)
            seen.setdefault(config.model, set()).add(threading.current_thread().name)
        return real_run(cols, ts, config, state, final)

    def models(*a, **kw):
        inside.append(1)
        try:
            return real_models(*a, **kw)
        finally:
            inside.pop()
    monkeypatch.setattr(engine, "_run_batch", run_batch)
    monkeypatch.setattr(engine, "simulate_batch_models", models)
    for th in (1, 2):
        seen.clear()
        stream_analyze(capture, batch_records=200, threads=th)
        if th == 1:
            assert seen == {"ideal": {"MainThread"}, "napi": {"MainThread"}}
        else:
            assert seen["ideal"] == {"MainThread"}
            assert len(seen["napi"]) == 1 and next(iter(seen["napi"])).startswith(
                "gropcap-model")
    assert not _workers()


def test_models_in_a_pool_equal_in_line_and_raise_a_later_models_error(capture):
    """engine.simulate_batch_models with a pool: bit for bit the parts and states of
    the run in line, batch after batch; an error of a model in the pool is raised by
    the call, after every model returned."""
    from concurrent.futures import ThreadPoolExecutor

    from gropcap.gro import engine
    from gropcap.run.memory import decode_files
    t = decode_files([capture])[0].slice(0, 3000)
    base = GroConfig(queues=2, budget=8)
    configs = [base.replace(model="ideal"), base.replace(model="napi")]
    pool = ThreadPoolExecutor(1)
    submitted = []
    submit = pool.submit
    pool.submit = lambda *a, **kw: submitted.append(1) or submit(*a, **kw)
    a = b = None
    for lo in range(0, t.num_rows, 700):
        piece = t.slice(lo, 700)
        final = lo + 700 >= t.num_rows
        pa_, a = engine.simulate_batch_models(piece, configs, a, final=final)
        pb, b = engine.simulate_batch_models(piece, configs, b, final=final, pool=pool)
        for x, y in zip(pa_, pb):
            assert x.row_start == y.row_start and x.poll_base == y.poll_base
            for f in ("flow_id", "rx_queue", "p_row", "p_reason", "p_inst", "p_poll",
                      "poll_time", "poll_queue"):
                assert (getattr(x, f) == getattr(y, f)).all(), f
            assert x.segs.keys() == y.segs.keys()
            for k in x.segs:
                assert (x.segs[k] == y.segs[k]).all(), k
    for x, y in zip(a, b):
        assert (x.kernel.ctr == y.kernel.ctr).all() and x.row_base == y.row_base
    assert len(submitted) == -(-t.num_rows // 700)        # the napi model, each batch
    real = engine._run_batch
    done = []

    def run_batch(cols, ts, config, state, final):
        if config.model == "napi":
            raise ValueError("napi failed")
        part = real(cols, ts, config, state, final)
        done.append(config.model)
        return part
    try:
        engine._run_batch = run_batch
        with pytest.raises(ValueError, match="napi failed"):
            engine.simulate_batch_models(t.slice(0, 500), configs, None, pool=pool)
    finally:
        engine._run_batch = real
    assert done == ["ideal"]
    done.clear()

    def first_fails(cols, ts, config, state, final):
        if config.model == "ideal":
            raise ValueError("ideal failed")
        time.sleep(0.2)
        done.append(config.model)
        return real(cols, ts, config, state, final)
    try:
        engine._run_batch = first_fails
        with pytest.raises(ValueError, match="ideal failed"):
            engine.simulate_batch_models(t.slice(0, 500), configs, None, pool=pool)
        assert done == ["napi"]           # the call waited for it before raising
    finally:
        engine._run_batch = real
    pool.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="threads have a priority of their own on Linux only")
def test_helper_threads_run_below_the_calling_thread(tmp_path):
    """The decode-ahead and spill threads run gropcap.priority.HELPER nice steps below
    the caller (a decode-ahead thread asked to: at the caller's), the file's digest at
    the lowest priority (gropcap.priority)."""
    from gropcap.capture.scan import _Hasher
    from gropcap.priority import BACKGROUND, HELPER

    def nice():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    if base + HELPER > 19:
        pytest.skip(f"the process already runs at nice {base}: no room below it")

    def gen():
        yield nice()
    a = Ahead(gen())
    assert list(a) == [min(19, base + HELPER)]
    a.close()
    a = Ahead(gen(), nice=0)            # (a thread that is the critical path itself)
    assert list(a) == [base]
    a.close()
    s = Sidecar()
    got = []
    s.submit(lambda: got.append(nice()))
    s.drain()
    s.close()
    assert got == [min(19, base + HELPER)]
    h = _Hasher()
    assert h.pool.submit(nice).result() == min(19, base + BACKGROUND)
    h.pool.shutdown()
    assert nice() == base                 # the caller's own priority is untouched


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="threads have a priority of their own on Linux only")
def test_lower_this_thread_only_lowers_and_caps():
    from gropcap.priority import lower_this_thread
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    out = {}

    def work():
        out["first"] = lower_this_thread(3)
        out["again"] = lower_this_thread(1)      # already lower: left as it is
        out["far"] = lower_this_thread(100)      # capped
        out["none"] = lower_this_thread(0)
    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert out == {"first": min(19, base + 3), "again": min(19, base + 3), "far": 19,
                   "none": None}


def test_seg_spill_narrows_what_fits_and_reads_back_int64(tmp_path):
    """run.stream.SegSpill: the narrow fields stored as int32 when every value fits (a
    smaller temporary file), as int64 when one does not; read back equal, as int64."""
    import numpy as np

    from gropcap.gro.engine import _SEG_FIELDS
    from gropcap.run.stream import _SEG_NARROW, SegSpill
    rng = np.random.default_rng(3)
    small = {f: rng.integers(-2 ** 31, 2 ** 31, 500, dtype=np.int64) for f in _SEG_FIELDS}
    big = {f: v.copy() for f, v in small.items()}
    big["payload"][7] = 2 ** 31                 # does not fit: stays int64
    wide = {f: v.copy() for f, v in small.items()}
    sizes = []
    for s in (small, big, wide):
        sp = SegSpill(str(tmp_path / f"s{len(sizes)}"))
        if s is wide:
            sp.put(*[s[f] for f in _SEG_FIELDS])        # what a plain spill writes
        else:
            sp.put_segs(s)
        sp.rewind()
        got = sp.get_segs()
        sizes.append(sp.size())
        sp.close()
        for f in _SEG_FIELDS:
            assert got[f].dtype == np.int64 and (got[f] == s[f]).all(), f
    assert sizes[0] == sizes[2] - 4 * 500 * len(_SEG_NARROW)
    assert sizes[1] == sizes[0] + 4 * 500


def test_seg_writer_close_stops_its_sweeps_and_closes_every_spill(tmp_path):
    """run.stream._SegWriter: ``close`` during a sweep stops it after the part it is in,
    cancels the sweeps not started and closes every spill they opened (nothing left
    open on the run's temporary directory); ``drain`` raises a sweep's error."""
    import numpy as np

    from gropcap.gro.engine import _SEG_FIELDS
    from gropcap.run.stream import SegSpill, _SegWriter

    class Order:
        def positions(self, polls):
            return np.arange(len(polls))

        def poll_ids(self, polls):
            return polls

    class Rows:
        def add(self, s, pos, poll_ids, last):
            return len(pos)

    paths = []
    for k in range(2):
        sp = SegSpill(str(tmp_path / f"m{k}.segs"))
        for _ in range(3):
            sp.put_segs({f: np.zeros(4, np.int64) for f in _SEG_FIELDS})
        sp.rewind()
        sp.close()
        paths.append(sp.path)
    started, written = threading.Event(), []

    def slow(n):
        started.set()
        time.sleep(0.2)
        written.append(n)
    w = _SegWriter(slow, threaded=True)
    for p in paths:
        w.sweep(p, 3, Order(), Rows())
    assert started.wait(10)
    w.close()
    assert len(written) == 1                     # the first part of the first sweep
    assert all(sp.f.closed for sp in w._spills) and len(w._spills) == 2
    assert not _workers()

    def fail(n):
        raise OSError(28, "No space left on device")
    w = _SegWriter(fail, threaded=True)
    w.sweep(paths[0], 3, Order(), Rows())
    with pytest.raises(OSError):
        w.drain()
    w.close()
