"""Start-up cost of ``gropcap analyze``: the first run on a fresh install (cold numba
cache: every kernel compiles) and a later run (warm cache), each in a fresh process.

What is timed (wall clock and the child's CPU time, ``RUSAGE_CHILDREN``):

- ``cold``: ``gropcap analyze CAPTURE --format json`` with ``NUMBA_CACHE_DIR`` set to a
  new empty directory (what a new user and every CI job without a cache sees);
- ``warm``: the same command again with that cache directory (best and median of
  ``--rounds``; with ``--against``, the two trees' warm runs alternate);
- ``reference``: ``python -c "import dpkt, numpy"`` in the same run, the start-up floor
  of any Python tool in this field; the warm run is reported as a ratio to it;
- ``cold_reference``: the command with no ``--engine``/``--decoder`` on another empty
  cache, what a new user's first run on a small capture is: the command line takes the
  reference decoder and engine there by itself (its note says so), with the counting
  kernels as Python (nothing compiles); it must print the same JSON.

The cold and warm runs name ``--engine fast --decoder fast``: they measure the compiled
path even where the CLI would take the reference one by itself.

Invariants checked on every run: exit status 0, stdout is one JSON document, every run
prints the same JSON; the cold run prints the compile note ("gropcap: compiling GRO
kernels, first run only") and leaves files in the cache directory, the warm runs do not
print it.

``--compiles`` adds one more cold run in a driver process that listens to numba's
``numba:compile`` events and records, per compiled function and signature, its CPU
time excluding the functions it compiled in turn (where the cold seconds go); and, from
each compiled signature's ``metadata["pipeline_times"]``, numba's seconds per compiler
pass (inlining, type inference, lowering, ...) plus the time spent in LLVM
(``numba:llvm_lock`` events): ``compile_stages`` in the JSON.

``--against DIR`` also measures another checkout (``git archive REV gropcap | tar -x -C
DIR``) with the same commands (``PYTHONPATH=DIR``), alternating with this one, for a
same-run before/after.

    python benchmarks/bench_startup.py                      # sample_pcaps/real_ipv4.pcap
    python benchmarks/bench_startup.py --against /tmp/old --compiles

Writes ``benchmarks/results/startup-<short sha>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import provenance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOTE = "gropcap: compiling GRO kernels, first run only"

# the compile listener of --compiles: runs the CLI in process, writes {function: seconds}
_DRIVER = r"""
import json, re, sys, time
from numba.core import event
stack, rows = [], []
class Listener(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        name = d.py_func.__module__ + "." + d.py_func.__qualname__
        args = re.sub(r"(\w+)\(array.*?\)\)", r"\1(..)", str(ev.data.get("args")))
        stack.append([name, args, time.process_time(), 0.0])
    def on_end(self, ev):
        name, args, t, inner = stack.pop()
        dt = time.process_time() - t
        if stack:
            stack[-1][3] += dt
        rows.append({"function": name, "args": args[:300], "self_s": round(dt - inner, 3),
                     "total_s": round(dt, 3)})
event.register("numba:compile", Listener())
llvm = [0.0, []]
class LlvmListener(event.Listener):
    def on_start(self, ev):
        llvm[1].append(time.process_time())
    def on_end(self, ev):
        llvm[0] += time.process_time() - llvm[1].pop()
event.register("numba:llvm_lock", LlvmListener())
from gropcap.cli import main
try:
    main(sys.argv[2:], standalone_mode=False)
finally:
    # per compiled signature, numba's own per-pass times (a pass's time includes the
    # functions compiled while it ran, e.g. callees typed by nopython_type_inference)
    import gc
    from numba.core.registry import CPUDispatcher
    passes, per_function = {}, []
    for d in gc.get_objects():
        if not (isinstance(d, CPUDispatcher) and d.py_func.__module__.startswith("gropcap")):
            continue
        for cres in d.overloads.values():
            for pipeline in (cres.metadata or {}).get("pipeline_times", {}).values():
                mine = {}
                for key, t in pipeline.items():
                    name = key.split("_", 1)[1]
                    passes[name] = round(passes.get(name, 0.0) + t.run, 3)
                    if t.run >= 0.05:
                        mine[name] = round(t.run, 3)
                per_function.append({"function": d.py_func.__qualname__,
                                     "passes_s": mine})
    with open(sys.argv[1], "w") as fh:
        json.dump({"compiles": sorted(rows, key=lambda r: -r["self_s"]),
                   "passes_s": dict(sorted(passes.items(), key=lambda kv: -kv[1])),
                   "llvm_lock_s": round(llvm[0], 3),
                   "per_function_passes": sorted(
                       per_function, key=lambda r: -sum(r["passes_s"].values()))}, fh)
"""


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(argv: list[str], env: dict, cwd: str) -> dict:
    """One child process: wall and CPU seconds, stdout, stderr lines."""
    cpu0 = _child_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    cpu = _child_cpu() - cpu0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "stdout": p.stdout,
            "stderr": p.stderr.splitlines()}


def _env(tree: str, cache: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    env.pop("NUMBA_CACHE_DIR", None)
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    return env


def _check_tree(tree: str) -> None:
    """The child must import gropcap from ``tree`` (not from another checkout)."""
    out = subprocess.run([sys.executable, "-c", "import gropcap; print(gropcap.__file__)"],
                         env=_env(tree, None), cwd=tree, capture_output=True, text=True)
    path = out.stdout.strip()
    if not os.path.realpath(path).startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit(f"PYTHONPATH={tree} imports gropcap from {path!r}")


def _analyze(tree: str, capture: str, cache: str, engine: str | None = "fast") -> dict:
    # the engine and decoder named explicitly: a CLI that picks the reference path for
    # a small capture on a cold cache by itself still compiles here (None: not named)
    argv = [sys.executable, "-m", "gropcap", "analyze", capture, "--format", "json"]
    if engine is not None:
        argv += ["--engine", engine, "--decoder", engine]
    r = _run(argv, _env(tree, cache), tree)     # cwd: `python -m` puts it first on sys.path
    r["summary"] = json.loads(r.pop("stdout"))        # invariant: one JSON document
    return r


def _cold_reference(m: dict, capture: str, scratch: str) -> None:
    """The command as a new user types it, on an empty cache: a small capture takes the
    reference decoder and engine (instead of compiling), a larger one compiles; must
    print the same JSON as the compiled path."""
    cache = tempfile.mkdtemp(prefix="numba-cache-", dir=scratch)
    r = _analyze(m["tree"], capture, cache, engine=None)
    if r.pop("summary") != m["summary"]:
        raise SystemExit(f"{m['tree']}: the reference path printed another summary")
    from gropcap.run.cold import note
    r["took_reference_path"] = f"gropcap: {note()}" in r["stderr"]
    # nothing compiled: numba saved no machine code (``.nbc``) in the run's cache (the
    # index files, ``.nbi``, are written empty when gropcap's kernels are imported:
    # numba_cache.refresh)
    r["kernels_saved"] = sum(n.endswith(".nbc") for _, _, names in os.walk(cache)
                             for n in names)
    m["cold_reference"] = r


def _cold(tree: str, capture: str, scratch: str) -> dict:
    cache = tempfile.mkdtemp(prefix="numba-cache-", dir=scratch)
    cold = _analyze(tree, capture, cache)
    if not cold["stderr"] or cold["stderr"][0] != NOTE:
        raise SystemExit(f"{tree}: the cold run did not print the compile note first: "
                         f"{cold['stderr'][:3]}")
    if not any(os.scandir(cache)):
        raise SystemExit(f"{tree}: the cold run left nothing in {cache}")
    return {"tree": tree, "cache": cache, "cold": cold, "warm_runs": []}


def _warm(m: dict, capture: str) -> None:
    w = _analyze(m["tree"], capture, m["cache"])
    if NOTE in w["stderr"]:
        raise SystemExit(f"{m['tree']}: a warm run compiled again: {w['stderr']}")
    if w.pop("summary") != m["cold"]["summary"]:
        raise SystemExit(f"{m['tree']}: a warm run printed another summary than the cold one")
    m["warm_runs"].append(w)


def _finish(m: dict) -> None:
    warm = m["warm_runs"]
    m["summary"] = m["cold"].pop("summary")
    del m["cache"]
    m["warm_best_wall_s"] = min(w["wall_s"] for w in warm)
    m["warm_median_wall_s"] = statistics.median(w["wall_s"] for w in warm)
    m["warm_best_cpu_s"] = min(w["cpu_s"] for w in warm)


def _compiles(tree: str, capture: str, scratch: str) -> dict:
    cache = tempfile.mkdtemp(prefix="numba-cache-", dir=scratch)
    out = os.path.join(scratch, "compiles.json")
    # the compiled path named, as in _analyze: on a cold cache the CLI would take the
    # reference one for a small capture and compile nothing
    _run([sys.executable, "-c", _DRIVER, out, "analyze", capture, "--format", "json",
          "--engine", "fast", "--decoder", "fast"], _env(tree, cache), tree)
    with open(out) as fh:
        return json.load(fh)


def _reference(rounds: int) -> dict:
    runs = [_run([sys.executable, "-c", "import dpkt, numpy"], dict(os.environ), ROOT)
            for _ in range(rounds)]
    return {"command": 'python -c "import dpkt, numpy"',
            "best_wall_s": min(r["wall_s"] for r in runs),
            "best_cpu_s": min(r["cpu_s"] for r in runs)}



def _line(label: str, m: dict, ref: dict) -> str:
    c, r = m["cold"], m["cold_reference"]
    path = "reference path" if r.get("took_reference_path") else "compiled"
    if "kernels_saved" in r:
        path += f", {r['kernels_saved']} kernels compiled"
    return (f"{label:>8}: cold {c['wall_s']:6.1f} s wall, {c['cpu_s']:6.1f} s CPU | "
            f"warm best {m['warm_best_wall_s']:.2f} s wall (median "
            f"{m['warm_median_wall_s']:.2f}), {m['warm_best_cpu_s']:.2f} s CPU = "
            f"{m['warm_best_wall_s'] / ref['best_wall_s']:.1f}x the reference | "
            f"first run as typed ({path}) {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", nargs="?",
                    default=os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"))
    ap.add_argument("--rounds", type=int, default=3, help="warm runs per tree (default 3)")
    ap.add_argument("--against", metavar="DIR", help="another checkout to measure too")
    ap.add_argument("--compiles", action="store_true",
                    help="one more cold run recording numba compile time per function")
    ap.add_argument("--out", help="result JSON (default results/startup-<sha>.json)")
    args = ap.parse_args()
    args.capture = os.path.abspath(args.capture)

    trees = {"this": ROOT}
    if args.against:
        trees = {"against": os.path.abspath(args.against), "this": ROOT}
    for tree in trees.values():
        _check_tree(tree)
    scratch = tempfile.mkdtemp(prefix="gropcap-startup-")
    try:
        ref = _reference(max(args.rounds, 3))
        results = {label: _cold(tree, args.capture, scratch) for label, tree in trees.items()}
        for _ in range(args.rounds):           # warm runs alternate between the trees
            for m in results.values():
                _warm(m, args.capture)
        for m in results.values():
            _finish(m)
            _cold_reference(m, args.capture, scratch)
        if args.against and results["this"]["summary"] != results["against"]["summary"]:
            raise SystemExit("the two trees printed different summaries")
        compiles = _compiles(ROOT, args.capture, scratch) if args.compiles else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"reference: {ref['command']}: {ref['best_wall_s']:.2f} s wall")
    for label, m in results.items():
        print(_line(label, m, ref))
        m["warm_over_reference"] = round(m["warm_best_wall_s"] / ref["best_wall_s"], 2)
        del m["summary"]
    stages = None
    if compiles is not None:
        stages = {k: compiles[k] for k in ("passes_s", "llvm_lock_s", "per_function_passes")}
        compiles = compiles["compiles"]
        total = sum(r["self_s"] for r in compiles)
        print(f"compiles: {len(compiles)} functions/signatures, {total:.1f} s CPU; top:")
        for r in compiles[:12]:
            print(f"  {r['self_s']:6.2f} s  {r['function']}")
        print(f"numba passes (s, callees included where they compiled): LLVM "
              f"{stages['llvm_lock_s']:.1f}; " + ", ".join(
                  f"{k} {v:.1f}" for k, v in list(stages["passes_s"].items())[:6]))
    prov = provenance.commit()
    doc = {
        "benchmark": "startup", **prov,
        "capture": os.path.relpath(args.capture, ROOT), "python": platform.python_version(),
        "cpus": os.cpu_count(), "loadavg_after": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reference": ref, "results": results, "compiles": compiles,
        "compile_stages": stages,
    }
    out = args.out or os.path.join(HERE, "results", f"startup-{prov['commit']}.json")
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
