"""A first run on a cold numba cache compiles the decoder's kernels in its own process and
the GRO and counting kernels in a helper process at the same time (``run.warm``); the
results are those of a warm run, and the helper never outlives the run.

The cold-cache test runs in a fresh NUMBA_CACHE_DIR (compiles everything: tens of
seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gropcap.run import warm
from gropcap.run.threads import default_threads

from where import ROOT, SAMPLES

SAMPLE = os.path.join(SAMPLES, "real_ipv4_p4.pcap")

# a script without a ``__name__`` guard: it runs the command line in process and prints,
# after it, the gropcap kernels this very process compiled (numba's compile event fires on
# a cache miss only); each time it runs it appends a line to the file named by $RUNS
_DRIVER = """
import json, os, sys
with open(os.environ["RUNS"], "a") as f:
    f.write("ran\\n")
from numba.core import event
compiled = []
class Listener(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        compiled.append(f.__module__ + "." + f.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Listener())
sys.argv = ["gropcap", "analyze", *sys.argv[1:]]
from gropcap.__main__ import main
import atexit          # main ends the process: its atexit callbacks run (interrupt.exit_now)
atexit.register(lambda: print("COMPILED " + json.dumps(compiled), file=sys.stderr))
main()
"""


def _cli(tmp_path, cache, *args, helper=True):
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = dict(os.environ, PYTHONPATH=ROOT, RUNS=str(tmp_path / "runs"),
               **{warm.HELPER_ENV: "1" if helper else "0"})
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    p = subprocess.run([sys.executable, str(driver), *args], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [x for x in p.stderr.splitlines() if x.startswith("COMPILED ")][-1]
    every = json.loads(line[len("COMPILED "):])
    return p.stdout, {f for f in every if f.startswith("gropcap.")}, every


@pytest.mark.slow
@pytest.mark.skipif(default_threads() < 2,
                    reason="the helper runs only with two CPUs or more")
def test_a_cold_first_run_leaves_the_gro_kernels_to_a_helper(tmp_path):
    """On a cold cache the run compiles the decoder (and the capture counts) here and
    loads the GRO kernels the helper compiled at the same time: the run's own process
    compiles no GRO kernel, and its output is the warm run's. The script that ran the
    command line has no ``__name__`` guard and still ran once: the helper does not
    import it."""
    warm_json, _, _ = _cli(tmp_path, None, SAMPLE, "--engine", "fast", "--format", "json")
    (tmp_path / "runs").unlink()
    cold_json, compiled, every = _cli(tmp_path, tmp_path / "cache", SAMPLE, "--engine",
                                      "fast", "--format", "json")
    assert (tmp_path / "runs").read_text() == "ran\n"
    assert json.loads(cold_json) == json.loads(warm_json)
    # its own part: the decoder's kernels, then the capture counts' while it waits
    assert {"gropcap.decode._fast_kernels.decode_kernel",
            "gropcap.gro._batch_kernels.capture_batch"} <= compiled
    for kernel in ("gropcap.gro.fast.napi.run", "gropcap.gro.fast.dev._receive",
                   "gropcap.gro.fast.keys.classify", "gropcap.gro.fast.bypass.pre_and_flush",
                   "gropcap.gro._batch_kernels.first_rows"):
        assert kernel not in compiled, sorted(compiled)
    assert any(os.scandir(tmp_path / "cache"))
    # no kernel pulls in numba's string formatting (a slice copied from an array compiles
    # its shape-error message: 1.9 s of the decoder's 13 s compile)
    strings = [f for f in every if "unicode" in f or "shape_context" in f]
    assert not strings, strings


def test_no_helper_on_a_warm_cache_one_cpu_a_fifo_or_when_switched_off(monkeypatch,
                                                                      tmp_path):
    """The conditions of ``wanted``: the test session's cache is warm (conftest), so no
    helper; with a cold cache none either for one CPU, a FIFO or the switch off."""
    assert not warm.wanted([SAMPLE])                 # the kernels are cached
    import gropcap.gro.engine as E
    monkeypatch.setattr(E, "kernels_cached", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert warm.wanted([SAMPLE])
    monkeypatch.setenv(warm.HELPER_ENV, "0")
    assert not warm.wanted([SAMPLE])
    monkeypatch.delenv(warm.HELPER_ENV)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not warm.wanted([SAMPLE])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert not warm.wanted([SAMPLE, str(fifo)])
    assert not warm.wanted([])
    assert warm.compile_alongside([str(tmp_path / "missing.pcap")], None, (), None) is False


def test_the_helper_is_killed_and_its_files_removed_when_the_run_stops(monkeypatch):
    """An interrupt (or any error) while this process compiles kills the helper and
    removes the helper's capture: nothing outlives the run."""
    monkeypatch.setattr(warm, "wanted", lambda files: True)
    import multiprocessing.context as mpc
    started = []
    real_start = mpc.SpawnProcess.start

    def start(self):
        started.append(self)
        return real_start(self)
    monkeypatch.setattr(mpc.SpawnProcess, "start", start)
    made = []
    real_mkdtemp = warm.tempfile.mkdtemp
    monkeypatch.setattr(warm.tempfile, "mkdtemp",
                        lambda **k: made.append(real_mkdtemp(**k)) or made[-1])

    def interrupted():
        raise KeyboardInterrupt
    import gropcap.decode.fast as F
    monkeypatch.setattr(F, "warm_up", interrupted)
    from gropcap.gro.config import GroConfig
    with pytest.raises(KeyboardInterrupt):
        warm.compile_alongside([SAMPLE], GroConfig(), ("napi",), None)
    assert len(started) == 1 and not started[0].is_alive()        # killed, reaped
    assert started[0].exitcode is not None
    assert made and not os.path.exists(made[0])


@pytest.mark.parametrize("name", ["real_ipv4_p4.pcap", "crafted_two_ifaces.pcapng"])
def test_the_helper_reads_the_first_records_of_the_input(tmp_path, name):
    """The helper's capture: the first HELPER_RECORDS records of the input, bytes, times
    and lengths as they are, every link type kept; a pcap input gives a pcap file (the
    scan kernel the run has compiled already)."""
    from gropcap.capture.scan import iter_scan_batches
    path = os.path.join(SAMPLES, name)
    out = warm._prefix_capture(path, str(tmp_path / "first"))
    assert warm._is_pcap(out) == name.endswith(".pcap")
    (_, want), = [x for x in iter_scan_batches(path, batch_records=warm.HELPER_RECORDS,
                                                digest=False)][:1]
    (_, got), = list(iter_scan_batches(out, digest=False))
    assert len(got) == min(len(want), warm.HELPER_RECORDS) > 0
    assert [got.frame(i) for i in range(len(got))] == \
        [want.frame(i) for i in range(len(got))]
    assert list(got.ts_ns) == list(want.ts_ns[:len(got)])
    assert list(got.wire_len) == list(want.wire_len[:len(got)])
    assert list(got.linktype) == list(want.linktype[:len(got)])
