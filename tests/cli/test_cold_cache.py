"""A first run on a cold numba cache, from the command line (issue 14), on one fresh
NUMBA_CACHE_DIR so that the kernels compile once for every check here (a cold compile is
about a minute of CPU: three tests with a cache each were 210 s of the suite's time).

- A small capture on a cold cache runs on the reference decoder and engine (a first run
  in seconds, same results and files), says so, compiles nothing (the counting, RSS
  and address-text kernels it still calls run as Python: ``numba_cache.as_python``)
  and leaves the cache cold.
- ``--engine fast`` then compiles, saying so on stderr once ("compiling GRO kernels,
  first run only"): the decoder's kernels in the run's own process and, with two CPUs,
  the GRO and counting kernels in a helper process at the same time (``run.warm``). The
  script that ran the command line has no ``__name__`` guard and still ran once: the
  helper does not import it.
- The kernels that run compiled are what ``gro.engine.kernels_cached`` looks for, and a
  TCP-only run compiled no UDP rules (``fast.udp._udp_receive`` has nothing cached).
- Later runs load everything from the cache: no note, nothing compiled, the same JSON,
  by default and with ``--engine fast``.

Regression: a first run sat silent for minutes (the bar at 100% with no label).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gropcap.run import cold, warm
from gropcap.run.cold import REFERENCE_PATH_KERNELS
from gropcap.run.progress import COMPILE_NOTE
from gropcap.run.threads import default_threads

from where import ROOT, SAMPLES

SAMPLE = os.path.join(SAMPLES, "real_ipv4_p4.pcap")

# the start of a child script: `compiled` lists every function numba compiles in it
# (numba's compile event fires on a cache miss only)
_LISTEN = """
import json, os, sys
from numba.core import event
compiled = []
class Listener(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        compiled.append(f.__module__ + "." + f.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Listener())
"""

# a script without a ``__name__`` guard: it runs the command line in process and prints,
# after it, the gropcap kernels this very process compiled; each time it runs it appends
# a line to the file named by $RUNS
_DRIVER = _LISTEN + """
with open(os.environ["RUNS"], "a") as f:
    f.write("ran\\n")
sys.argv = ["gropcap", "analyze", *sys.argv[1:]]
from gropcap.__main__ import main
import atexit          # main ends the process: its atexit callbacks run (interrupt.exit_now)
atexit.register(lambda: print("COMPILED " + json.dumps(compiled), file=sys.stderr))
main()
"""

# what the cache holds, read by a child on it (this process has other kernels loaded)
_CACHED = r"""
import json
from gropcap.gro import engine
from gropcap.gro.fast import udp
print(json.dumps({"cached": engine.kernels_cached(),
                  "udp_receive": len(udp._udp_receive._cache._cache_file._load_index())}))
"""


class Run:
    """One command line through the driver: its JSON summary, its stderr lines (the
    driver's own line taken out) and the kernels it compiled."""

    def __init__(self, tmp_path, cache, *args, capture=SAMPLE):
        driver = tmp_path / "driver.py"
        driver.write_text(_DRIVER)
        self.env = dict(os.environ, PYTHONPATH=ROOT, RUNS=str(tmp_path / "runs"))
        self.env.pop(warm.HELPER_ENV, None)
        if cache is not None:
            self.env["NUMBA_CACHE_DIR"] = str(cache)
        p = subprocess.run([sys.executable, str(driver), capture, "--format", "json", *args],
                           capture_output=True, text=True, cwd=ROOT, env=self.env,
                           timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        lines = p.stderr.splitlines()
        driver_line = [x for x in lines if x.startswith("COMPILED ")][-1]
        self.stderr = [x for x in lines if not x.startswith("COMPILED ")]
        self.every = json.loads(driver_line[len("COMPILED "):])
        self.compiled = {f for f in self.every if f.startswith("gropcap.")}
        self.summary = json.loads(p.stdout)
        self.out_dir = next((Path(b) for a, b in zip(args, args[1:]) if a == "--out"), None)

    def cache_state(self) -> dict:
        p = subprocess.run([sys.executable, "-c", _CACHED], capture_output=True, text=True,
                           cwd=ROOT, env=self.env, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.splitlines()[-1])


def _same_parquet(got_dir, warm: Run) -> None:
    want_dir = warm.out_dir
    for name in ("packets.parquet", "superpackets.parquet", "flows.parquet"):
        got, want = pq.read_table(got_dir / name), pq.read_table(want_dir / name)
        assert got.num_rows > 0 and got.equals(want), name


def _one_summary_line(run: Run) -> bool:
    return len(run.stderr) == 1 and run.stderr[0].startswith("gropcap: ") and \
        " packets in " in run.stderr[0]


@pytest.mark.slow
def test_a_first_run_on_a_cold_cache(tmp_path):
    warm_run = Run(tmp_path, None)              # the session's cache (conftest): warm
    assert warm_run.compiled == set() and _one_summary_line(warm_run), warm_run.stderr
    (tmp_path / "runs").unlink()
    cache = tmp_path / "numba-cache"

    # 1. the small sample on a cold cache: the reference path, its own note, nothing
    # compiled, and the cache still cold
    ref = Run(tmp_path, cache)
    assert ref.stderr[0] == f"gropcap: {cold.note()}", ref.stderr
    assert len(ref.stderr) == 2 and " packets in " in ref.stderr[1], ref.stderr
    assert ref.summary == warm_run.summary
    # nor the counting, RSS and address-text kernels it calls (run as Python there:
    # compiling them was 8.6 s of this run's 10 s)
    assert ref.compiled == set(), sorted(ref.compiled)
    assert ref.cache_state() == {"cached": False, "udp_receive": 0}
    out = Run(tmp_path, cache, "--out", str(tmp_path / "cold-out"))
    assert out.compiled == set() and out.summary == warm_run.summary, sorted(out.compiled)
    _same_parquet(tmp_path / "cold-out", Run(tmp_path, None, "--out",
                                               str(tmp_path / "warm-out")))
    # a VXLAN capture without a tunnel socket: its hint runs the models again, on the
    # reference engine too (it compiled the numba engine for the hint: 48 s)
    vxlan = os.path.join(SAMPLES, "real_vxlan.pcap")
    vx = Run(tmp_path, cache, capture=vxlan)
    assert vx.compiled == set(), sorted(vx.compiled)
    assert vx.summary == Run(tmp_path, None, capture=vxlan).summary
    assert set(vx.summary["udp_tunnel_hint"]["models"]) == {"ideal", "napi"}

    # 2. --engine fast compiles, saying so once
    (tmp_path / "runs").unlink()
    fast = Run(tmp_path, cache, "--engine", "fast")
    assert (tmp_path / "runs").read_text() == "ran\n"        # the helper did not import it
    assert fast.summary == warm_run.summary
    assert fast.stderr[0] == f"gropcap: {COMPILE_NOTE}", fast.stderr
    assert fast.stderr.count(f"gropcap: {COMPILE_NOTE}") == 1
    # this process compiles the decoder's kernels (the counting kernels were cached by
    # the first run); the helper the GRO kernels at the same time (one CPU: no helper)
    assert "gropcap.decode._fast_kernels.decode_kernel" in fast.compiled
    gro_kernels = {"gropcap.gro.fast.napi.run", "gropcap.gro.fast.dev._receive",
                   "gropcap.gro.fast.keys.classify", "gropcap.gro.fast.bypass.pre_and_flush",
                   "gropcap.gro._batch_kernels.first_rows"}
    if default_threads() >= 2:
        assert not gro_kernels & fast.compiled, sorted(fast.compiled)
    else:
        assert gro_kernels <= fast.compiled, sorted(fast.compiled)
    # no kernel pulls in numba's string formatting (a slice copied from an array compiles
    # its shape-error message: 1.9 s of the decoder's 13 s compile)
    strings = [f for f in fast.every if "unicode" in f or "shape_context" in f]
    assert not strings, strings
    # what it compiled is what kernels_cached looks for; no UDP rules for a TCP capture
    assert fast.cache_state() == {"cached": True, "udp_receive": 0}

    # 3. later runs load it all: no note, nothing compiled, the same results
    again = Run(tmp_path, cache, "--engine", "fast")
    assert again.summary == warm_run.summary and again.compiled == set()
    assert _one_summary_line(again), again.stderr
    default = Run(tmp_path, cache)
    assert default.summary == warm_run.summary and default.compiled == set()
    assert _one_summary_line(default), default.stderr


def test_as_python_swaps_the_kernels_and_puts_them_back():
    """Inside the block the modules' kernels, and a module's own name for one
    (``from ... import``), are Python functions; a call compiles nothing (a signature
    numba never saw stays unseen); afterwards the dispatchers are back, also in a module
    imported inside the block."""
    import types

    import numpy as np

    import gropcap.gro._batch_kernels as K
    import gropcap.gro.rss as rss
    import gropcap.run.stream as stream
    from gropcap.numba_cache import as_python
    kernels = (K.add_keys, K._slot, K.first_rows, stream.first_rows,
               rss._rss_select_kernel)
    signatures = [len(d.signatures) for d in kernels[:3]]
    with as_python(REFERENCE_PATH_KERNELS):
        assert not any(hasattr(f, "signatures") for f in (
            K.add_keys, K._slot, K.first_rows, stream.first_rows, rss._rss_select_kernel))
        # int32 keys: a signature numba never compiled; add_keys calls _slot (a global
        # read when called: the Python function too)
        keys = np.array([5, 5, 9, 5, 1 << 30], np.int32)
        table, counts = np.full(16, -1, np.int64), np.zeros(16, np.int64)
        assert K.add_keys(keys, keys, True, table, counts, 0, 0) == (5, 3)
        got = {int(k): int(c) for k, c in zip(table, counts) if k >= 0}
        assert got == {5: 3, 9: 1, 1 << 30: 1}
        # a module imported inside the block takes what it finds: the Python function
        probe = types.ModuleType("gropcap._probe")
        sys.modules[probe.__name__] = probe
        probe.add_keys = K.add_keys
    try:
        assert probe.add_keys is kernels[0]      # ... and gets the dispatcher back
    finally:
        del sys.modules[probe.__name__]
    assert [len(d.signatures) for d in kernels[:3]] == signatures
    assert (K.add_keys, K._slot, K.first_rows, stream.first_rows,
            rss._rss_select_kernel) == kernels


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(SAMPLES)
                                        if n.endswith((".pcap", ".pcapng"))))
def test_the_cold_path_gives_what_the_numba_kernels_give(name, tmp_path, monkeypatch):
    """Every sample through the cold path (the reference decoder and engine, the kernels
    as Python) and through the reference decoder and engine with the numba kernels:
    the same summary and the same three Parquet files."""
    import gropcap.cli.app as app
    from gropcap.cli import main

    def run(out, *extra):
        r = CliRunner().invoke(main, ["analyze", os.path.join(SAMPLES, name), "--format",
                                      "json", "-q", "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)
    want = run(tmp_path / "numba", "--engine", "reference", "--decoder", "reference")
    monkeypatch.setattr(app, "_cold_start", lambda files, engine, decoder: True)
    got = run(tmp_path / "python")
    assert got == want
    for f in ("packets.parquet", "superpackets.parquet", "flows.parquet"):
        assert pq.read_table(tmp_path / "python" / f).equals(
            pq.read_table(tmp_path / "numba" / f)), f


# (capture, options): the cold path with each feature a first run may use
_COLD_RUNS = [
    ("real_ipv4.pcap", ()),
    ("real_ipv4.pcap", ("--out", "{tmp}/out", "--plot", "{tmp}/plot.png")),
    ("real_ipv4.pcap", ("--egress", "decap", "--egress-mtu", "1400")),
    ("real_ipv4.pcap", ("--model", "napi", "--kernel", "5.10", "--queues", "4")),
    ("real_ipv4.pcap", ("--udp-gro", "forward", "--poll-acks")),
    ("real_ipv6.pcap", ("--out", "{tmp}/out6")),
    ("real_vxlan.pcap", ()),
    ("real_vxlan.pcap", ("--tunnel-gro", "--egress", "encap")),
    ("crafted_geneve.pcap", ("--tunnel-gro",)),
    ("crafted_gre.pcap", ("--udp-gro", "fraglist")),
    ("crafted_dsa_edsa.pcap", ()),
    ("crafted_two_ifaces.pcapng", ()),
]


def test_the_cold_path_calls_no_other_kernel(tmp_path, monkeypatch):
    """On the cold path the only numba kernels called are REFERENCE_PATH_KERNELS' (run as
    Python there): every other gropcap dispatcher is replaced by a function that records
    its call, and a run with each feature calls none. A kernel missing from the list
    would compile on a new user's first run (the list is kept by hand)."""
    import importlib
    import pkgutil
    import sys

    import gropcap
    import gropcap.cli.app as app
    from gropcap.cli import main
    from gropcap.numba_cache import dispatchers_of

    modules = [importlib.import_module(m.name)
               for m in pkgutil.walk_packages(gropcap.__path__, "gropcap.")
               if not m.name.endswith("__main__")]
    allowed = {id(d) for d in dispatchers_of(*map(importlib.import_module,
                                                   REFERENCE_PATH_KERNELS))}
    others = {id(d): d for d in dispatchers_of(*modules) if id(d) not in allowed}
    assert len(others) > 50 and allowed, (len(others), len(allowed))
    called = []

    def poisoned(name):
        def call(*args, **kwargs):
            called.append(name)
            raise AssertionError(f"{name} called on the cold path")
        return call
    for name, mod in list(sys.modules.items()):
        if name == "gropcap" or name.startswith("gropcap."):
            for attr, obj in list(vars(mod).items()):
                if id(obj) in others and others[id(obj)] is obj:
                    monkeypatch.setattr(mod, attr, poisoned(
                        f"{obj.py_func.__module__}.{obj.py_func.__qualname__}"))
    monkeypatch.setattr(app, "_cold_start", lambda files, engine, decoder: True)
    for capture, options in _COLD_RUNS:
        args = [a.format(tmp=tmp_path) for a in options]
        r = CliRunner().invoke(main, ["analyze", os.path.join(SAMPLES, capture), "-q",
                                      "--format", "json", *args])
        assert not called, (capture, options, called)
        assert r.exit_code == 0, (capture, options, r.output)
        assert json.loads(r.stdout)["models"], (capture, options)


# the notebook API's first call on a cold cache, in a child on an empty NUMBA_CACHE_DIR
_API_DRIVER = _LISTEN + """
import gropcap
from gropcap.report.summary import report_dict
a = gropcap.analyze(sys.argv[1], kernel="6.1")
a.summary(), a.packets.to_pandas(), a.flows.to_pandas(), a.superpackets.to_pandas()
summary = report_dict(a)       # the json summary: its top flows' probable causes too
notebook = list(compiled)      # what the notebook's calls compiled
# a kernel left as its Python function in a module after the call (one imported during
# it: ``from module import kernel``) would run as Python in every later call
import types
from gropcap.numba_cache import dispatchers_of
kernels = {id(d.py_func) for d in dispatchers_of(*[m for n, m in list(sys.modules.items())
                                                  if n.startswith("gropcap") and m])}
left = sorted(f"{n}.{k}" for n, m in list(sys.modules.items()) if n.startswith("gropcap")
              and m for k, v in vars(m).items() if isinstance(v, types.FunctionType)
              and id(getattr(v, "__wrapped__", None)) in kernels)
print(json.dumps({"engine": a.engine, "compiled": notebook, "left": left,
                  "summary": summary}))
"""


def test_the_api_takes_the_cold_path_too(tmp_path, monkeypatch):
    """``gropcap.analyze`` on a cold cache and a small capture: the reference decoder and
    engine, nothing compiled, the results of the numba kernels (a notebook's first call
    compiled for a minute); nor do the Analysis' summary and tables afterwards (they
    compiled the counting and address-text kernels: 3.4 s), nor its json summary (the
    flows' probable causes); a caller who names the engine or the decoder gets it."""
    import gropcap
    from gropcap.report.summary import report_dict

    env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop(warm.HELPER_ENV, None)
    p = subprocess.run([sys.executable, "-c", _API_DRIVER, SAMPLE], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    # the command line's note on stderr, once (a notebook shows it)
    cold_note = f"gropcap: {cold.note()}"
    assert p.stderr.splitlines().count(cold_note) == 1, p.stderr[-3000:]
    assert got["engine"] == "reference"
    assert [f for f in got["compiled"] if f.startswith("gropcap.")] == []
    assert got["left"] == []
    want = gropcap.analyze(SAMPLE, kernel="6.1")        # this session's cache: warm
    assert want.engine == "fast"
    assert got["summary"] == json.loads(json.dumps(report_dict(want)))

    monkeypatch.setattr(cold, "takes_reference_path", lambda paths: True)
    assert gropcap.analyze(SAMPLE, kernel="6.1").engine == "reference"
    assert gropcap.analyze(SAMPLE, engine="fast").engine == "fast"
    assert gropcap.analyze(SAMPLE, decoder="fast").engine == "fast"
    # off the cold path, with no progress of the caller's: the compile note is watched
    import gropcap.run.core as core
    from gropcap.run.progress import Progress
    seen, run = [], core.analyze_run

    def spy(*args, progress=None, **kwargs):
        seen.append((type(progress), progress.quiet, progress.compile_note,
                     progress._listener is not None))
        return run(*args, progress=progress, **kwargs)
    monkeypatch.setattr(core, "analyze_run", spy)
    gropcap.analyze(SAMPLE, engine="fast")
    assert seen == [(Progress, False, True, True)]
