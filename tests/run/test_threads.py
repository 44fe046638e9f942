"""--threads: the bounded-memory run as a pipeline of threads (run/threads.py) gives the
results of the run on one thread, and its workers stop with the run."""

from __future__ import annotations

import os
import sys
import threading

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
            if t.name.startswith(("gropcap-decode", "gropcap-spill"))]


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
