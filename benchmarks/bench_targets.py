"""Issue 14's end-to-end speed targets, measured in one run on one capture, as a user runs
the CLI: each figure next to its target.

What is timed (each command in a fresh child process; CPU time from ``wait4``, so the
figure is the one-core rate even on a shared machine; best of ``--rounds``):

- ``analyze CAPTURE --format json`` (both models, summary only) and ``analyze CAPTURE
  --out DIR`` (all three Parquet files), on the whole capture and on a prefix of it (its
  first ``--prefix`` records, cut at a record boundary), the two alternating round by
  round (a busy minute on a shared machine weighs on both). The **marginal** rate is
  ``(records - prefix) / (cpu(whole) - cpu(prefix))``: start-up, imports and the numba
  cache load cancel out, what remains is the cost per packet. ``*_marginal_pps`` takes
  the least CPU of each side; ``*_marginal_pps_paired`` the median over the rounds of
  each round's difference (:func:`paired_marginal`), which one lucky or unlucky run does
  not move.
- the reference decode (``bench.py``'s ``reference_decode`` stage, the dpkt-path
  decoder) in the same run, for the ratio target (>= 50x).
- peak RSS of each child (``ru_maxrss``).
- **two threads against one** (``--threads 1`` against ``--threads 2``, both commands,
  whole capture and prefix): the runs alternate, ``--thread-rounds`` of each, and the
  least *wall* time of each is kept (threads save wall time, not CPU time). The ratios:
  ``threads_<cmd>_ratio`` = wall(1 thread) / wall(2 threads) of the whole run, and
  ``threads_<cmd>_marginal_ratio`` the same of (whole - prefix). On a machine shared with
  other work the ratio is low whenever the second core is busy elsewhere: the load
  average before and after is recorded next to it.
- **contention** (``--only contention``): one ``--threads 1`` json run alone against two
  side by side, as separate processes: the CPU a run needs more when the other core is
  busy too (shared caches, memory, clocks), and from it the ceiling of the two-thread
  ratio on this machine; and the run beside a process that streams memory or one that
  only computes: how much of the run's CPU time is waiting on memory bandwidth
  (:func:`contention`).

Targets (issue 14): ``--format json`` >= 5 M packets/s marginal and >= 50x the reference
decode; ``--out`` >= 2 M packets/s (the CPU-time runs use ``--threads 1``); two threads
>= 1.7x one. The decode, engine and start-up targets have their own benchmarks
(``bench.py --stages fast_decode,gro_engine``, ``bench_startup.py``).

    python benchmarks/bench_targets.py /tmp/real3m.pcap           # --rounds 3
    python benchmarks/bench_targets.py CAPTURE --prefix 300000 --out results.json
    python benchmarks/bench_targets.py CAPTURE --only threads --thread-rounds 5
    python benchmarks/bench_targets.py CAPTURE --only contention --thread-rounds 3

Writes ``benchmarks/results/targets-<short sha>.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import page_cache
import provenance
from child import in_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TARGETS = {"json_marginal_pps": 5e6, "json_vs_reference": 50.0, "out_marginal_pps": 2e6,
           "threads_json_ratio": 1.7}



def write_prefix(path: str, records: int, dest: str) -> int:
    """The first ``records`` records of the pcap/pcapng file ``path`` copied byte for byte
    to ``dest`` (cut at the byte offset of record ``records``); returns the records
    written."""
    from gropcap.capture.scan import iter_scan_batches
    cut = None
    seen = 0
    for _info, batch in iter_scan_batches(path):
        n = len(batch)
        if seen + n > records:
            cut = int(batch.file_offset[records - seen])
            break
        seen += n
    if cut is None:
        shutil.copyfile(path, dest)
        return seen
    with open(path, "rb") as src, open(dest, "wb") as out:
        left = cut
        while left:
            chunk = src.read(min(left, 1 << 24))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
    return records


def count_records(path: str) -> int:
    from gropcap.capture.scan import iter_scan_batches
    return sum(len(b) for _i, b in iter_scan_batches(path))


def _spawn(args: list[str]) -> dict:
    """One ``gropcap`` command in a child, reaped with ``wait4`` so its own rusage is read:
    wall and CPU seconds, peak RSS, exit code (stderr kept on failure)."""
    cmd = [sys.executable, "-m", "gropcap", *args]
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null, tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(cmd, stdout=null, stderr=errf, cwd=ROOT)
        _pid, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        errf.seek(0)
        err = errf.read()
    res = {"seconds": time.perf_counter() - t0, "cpu_seconds": ru.ru_utime + ru.ru_stime,
           "exit_code": proc.returncode, "peak_rss_mb": ru.ru_maxrss / 1024.0}
    if proc.returncode:
        res["stderr"] = err.decode(errors="replace")[-800:]
    return res


def paired_marginal(records: int, whole: list[float], prefix: list[float]):
    """``records`` over the median of the rounds' CPU differences (round ``r``:
    ``whole[r] - prefix[r]``); None when that median is not positive.

    >>> paired_marginal(1000, [1.0, 1.5, 5.0], [0.5, 1.0, 0.5])
    2000.0
    """
    diffs = [w - p for w, p in zip(whole, prefix)]
    med = statistics.median(diffs) if diffs else 0.0
    return records / med if med > 0 else None


def best_of(rounds: int, make_args) -> dict:
    """The run with the least CPU time of ``rounds`` (``make_args(k)`` -> CLI args)."""
    runs = [_spawn(make_args(k)) for k in range(rounds)]
    bad = [r for r in runs if r["exit_code"]]
    if bad:
        raise SystemExit(f"bench_targets: gropcap failed: {bad[0].get('stderr', '')}")
    best = min(runs, key=lambda r: r["cpu_seconds"])
    return dict(best, rounds=[round(r["cpu_seconds"], 3) for r in runs])


def thread_ratios(path: str, small: str, tmp: str, rounds: int) -> dict:
    """``--threads 1`` against ``--threads 2`` for both commands on the whole capture and
    the prefix, alternating (1, 2, 1, 2, ...), the least wall time of each kept."""
    res: dict = {"loadavg_before": os.getloadavg()}
    for name in ("json", "out"):
        walls: dict = {}
        for r in range(rounds):
            for label, p in (("whole", path), ("prefix", small)):
                for th in (1, 2):
                    args = ["analyze", p, "--format", "json", "-q", "--threads", str(th)]
                    d = os.path.join(tmp, f"threads-{name}-{label}-{th}-{r}")
                    if name == "out":
                        args += ["--out", d]
                    run = _spawn(args)
                    shutil.rmtree(d, ignore_errors=True)
                    if run["exit_code"]:
                        raise SystemExit(f"bench_targets: gropcap failed: {run.get('stderr')}")
                    walls.setdefault((label, th), []).append(run)
        for (label, th), runs in walls.items():
            best = min(runs, key=lambda x: x["seconds"])
            res[f"{name}_{label}_{th}"] = dict(best, rounds_wall=[round(x["seconds"], 3)
                                                               for x in runs])
        w = {k: min(x["seconds"] for x in v) for k, v in walls.items()}
        res[f"threads_{name}_ratio"] = w[("whole", 1)] / w[("whole", 2)]
        m1 = w[("whole", 1)] - w[("prefix", 1)]
        m2 = w[("whole", 2)] - w[("prefix", 2)]
        res[f"threads_{name}_marginal_ratio"] = m1 / m2 if m2 > 0 else None
    res["loadavg_after"] = os.getloadavg()
    return res


# The neighbours of ``contention``: a child that keeps the other core busy for as long as
# it lives, either streaming memory (a 256 MiB array, larger than any cache here, read
# and written over and over) or computing in registers (a Python loop over small ints).
NEIGHBOURS = {
    "memory": "import numpy as np\na = np.zeros(1 << 25, np.int64)\nwhile True: a += 1\n",
    "compute": "x = 1\nwhile True: x = (x * 5 + 1) & 0xFFFF\n",
}


def _beside(kind: str, args: list[str]) -> dict:
    """One ``gropcap`` run while a :data:`NEIGHBOURS` child runs on the other core."""
    nb = subprocess.Popen([sys.executable, "-c", NEIGHBOURS[kind]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)                  # the neighbour's imports and first pages
        return _spawn(args)
    finally:
        nb.kill()
        nb.wait()


def contention(path: str, rounds: int) -> dict:
    """What two busy cores cost each other on this machine, without threads: one
    ``--threads 1`` json run alone against two of the same run side by side (separate
    processes, nothing shared but the machine), and against the run beside a neighbour
    process that streams memory or only computes (:data:`NEIGHBOURS`), alternating,
    ``rounds`` of each.

    ``pair_cpu_inflation``: the pair's CPU seconds per run over the lone run's (least of
    each); ``beside_memory_cpu_inflation`` / ``beside_compute_cpu_inflation`` the same
    beside each neighbour: how much of a run waits on memory that the other core also
    uses. ``two_thread_ceiling``: the lone run's wall over the least wall any two-core
    split of its CPU can have, ``cpu * inflation / 2``: a ``--threads 2`` ratio above it
    would need less work than one thread does."""
    args = ["analyze", path, "--format", "json", "-q", "--threads", "1"]
    alone, pair = [], []
    beside = {kind: [] for kind in NEIGHBOURS}
    for _ in range(rounds):
        alone.append(_spawn(args))
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            pair.extend(ex.map(_spawn, [args, args]))
        for kind, runs in beside.items():
            runs.append(_beside(kind, args))
    bad = [r for r in alone + pair + sum(beside.values(), []) if r["exit_code"]]
    if bad:
        raise SystemExit(f"bench_targets: gropcap failed: {bad[0].get('stderr', '')}")
    cpu1 = min(r["cpu_seconds"] for r in alone)
    wall1 = min(r["seconds"] for r in alone)
    cpu2 = min(r["cpu_seconds"] for r in pair)
    inflation = cpu2 / cpu1
    res = {"alone_cpu": [round(r["cpu_seconds"], 3) for r in alone],
           "alone_wall": [round(r["seconds"], 3) for r in alone],
           "pair_cpu": [round(r["cpu_seconds"], 3) for r in pair],
           "pair_wall": [round(r["seconds"], 3) for r in pair],
           "pair_cpu_inflation": inflation,
           "two_thread_ceiling": wall1 / (cpu1 * inflation / 2)}
    for kind, runs in beside.items():
        res[f"beside_{kind}_cpu"] = [round(r["cpu_seconds"], 3) for r in runs]
        res[f"beside_{kind}_cpu_inflation"] = min(r["cpu_seconds"] for r in runs) / cpu1
    return res


def reference_decode(path: str, packets: int) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), path, "--stage",
           "reference_decode", "--reference-packets", str(packets)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--prefix", type=int, default=None,
                    help="records in the prefix capture (default: a tenth of the file)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reference-packets", type=int, default=100_000)
    ap.add_argument("--tmp-dir", default=None)
    ap.add_argument("--thread-rounds", type=int, default=3,
                    help="alternating rounds of --threads 1 / --threads 2 (0: skip)")
    ap.add_argument("--only", choices=["targets", "threads", "contention"], default=None,
                    help="run only the CPU-time targets, only the thread comparison, or "
                         "only what two busy cores cost each other (contention)")
    ap.add_argument("--page-cache", choices=page_cache.MODES, default="reread",
                    help="the capture's and the prefix's page cache before the runs: as it "
                         "is (a file just written maps in 4 KiB pages), or dropped and read "
                         "once, as a file read from disk (benchmarks/page_cache.py)")
    ap.add_argument("--out", help="result JSON (default results/targets-<sha>.json)")
    args = ap.parse_args(argv)
    # what runs: everything but the contention pairs, or the one part asked for
    targets, threads = args.only in (None, "targets"), args.only in (None, "threads")
    contend = args.only == "contention"
    path = os.path.abspath(args.capture)
    # (in a child: this process's peak would floor every child's, child.py)
    records = in_child("bench_targets", "count_records", path)
    tmp = tempfile.mkdtemp(prefix="gropcap-targets-", dir=args.tmp_dir)
    try:
        small = os.path.join(tmp, "prefix" + os.path.splitext(path)[1])
        k = in_child("bench_targets", "write_prefix", path,
                     args.prefix or max(1, records // 10), small)
        # both files in one state: the prefix, just written, would map in small pages
        cache = {"capture": page_cache.settle(path, args.page_cache),
                 "prefix": page_cache.settle(small, args.page_cache)}
        res = {"records": records, "prefix_records": k, "page_cache": cache}
        if contend:
            print("[targets] one run alone against two side by side ...", file=sys.stderr,
                  flush=True)
            res["contention"] = contention(path, args.thread_rounds or 1)
        if targets:
            _cpu_targets(args, res, path, small, records, k, tmp)
        if threads and args.thread_rounds:
            print("[targets] --threads 1 against --threads 2 ...", file=sys.stderr, flush=True)
            res["threads"] = thread_ratios(path, small, tmp, args.thread_rounds)
            for name in ("json", "out"):
                for key in (f"threads_{name}_ratio", f"threads_{name}_marginal_ratio"):
                    res[key] = res["threads"][key]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    met = {key: (res.get(key) is not None and res[key] >= goal)
           for key, goal in TARGETS.items() if key in res}
    prov = provenance.commit()
    doc = {"benchmark": "targets", **prov,
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                       "platform": platform.platform(), "loadavg": os.getloadavg()},
           "capture": {"path": path, "bytes": os.path.getsize(path), "records": records},
           "results": res, "targets": TARGETS, "met": met}
    out = args.out or os.path.join(HERE, "results", f"targets-{prov['commit']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    rows = []
    if targets:
        rows += [("analyze --format json, marginal", res["json_marginal_pps"], "5 M/s"),
                 ("  the rounds' median", res["json_marginal_pps_paired"], ""),
                 ("analyze --format json, whole run", res["json_whole_pps_cpu"], ""),
                 ("analyze --out DIR, marginal", res["out_marginal_pps"], "2 M/s"),
                 ("  the rounds' median", res["out_marginal_pps_paired"], ""),
                 ("analyze --out DIR, whole run", res["out_whole_pps_cpu"], ""),
                 ("reference decode", res["reference_decode"]["pps_cpu"], "")]
    for label, pps, goal in rows:
        shown = f"{pps / 1e6:7.2f} M packets/s" if pps else "      n/a"
        print(f"{label:34} {shown}   target {goal or '-'}")
    ratio = res.get("json_vs_reference")
    if targets:
        print(f"{'--format json vs reference decode':34} {ratio:7.1f}x" if ratio else "n/a",
              "             target 50x")
    for name in ("json", "out"):
        for key, what in ((f"threads_{name}_ratio", "whole run"),
                          (f"threads_{name}_marginal_ratio", "marginal")):
            if res.get(key):
                print(f"{'2 threads / 1, ' + name + ', ' + what:34} {res[key]:7.2f}x   "
                      f"target {'1.7x' if key == 'threads_json_ratio' else '-'}")
    if "contention" in res:
        c = res["contention"]
        print(f"{'CPU of a run beside another / alone':34} {c['pair_cpu_inflation']:7.2f}x")
        print(f"{'two-thread ceiling on this machine':34} {c['two_thread_ceiling']:7.2f}x")
        for kind in NEIGHBOURS:
            print(f"{'CPU beside a ' + kind + ' loop / alone':34} "
                  f"{c[f'beside_{kind}_cpu_inflation']:7.2f}x")
    if "threads" in res:
        print(f"load average before/after: {res['threads']['loadavg_before']} / "
              f"{res['threads']['loadavg_after']}")
    print(out)
    return 0


def _cpu_targets(args, res, path, small, records, k, tmp) -> None:
    """The CPU-time runs (one core: ``--threads 1``) and the reference decode, into
    ``res``."""
    for name, extra in (("json", ["--format", "json"]), ("out", None)):
        # the whole capture and the prefix alternate, round by round: on a shared
        # machine a busy minute then weighs on both, not on one side of the difference
        runs: dict = {"whole": [], "prefix": []}
        print(f"[targets] {name}: whole ({records} records) and prefix ({k}), "
              f"{args.rounds} rounds ...", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            for label, p in (("whole", path), ("prefix", small)):
                if extra is not None:
                    cmd = ["analyze", p, *extra, "-q", "--threads", "1"]
                else:
                    d = os.path.join(tmp, f"out-{label}-{r}")
                    cmd = ["analyze", p, "--out", d, "--format", "json", "-q",
                           "--threads", "1"]
                runs[label].append(best_of(1, lambda _r, cmd=cmd: cmd))
                if extra is None:
                    shutil.rmtree(d, ignore_errors=True)
        for label, got in runs.items():
            best = min(got, key=lambda x: x["cpu_seconds"])
            res[f"{name}_{label}"] = dict(best, rounds=[x["rounds"][0] for x in got])
        dcpu = res[f"{name}_whole"]["cpu_seconds"] - res[f"{name}_prefix"]["cpu_seconds"]
        res[f"{name}_marginal_pps"] = (records - k) / dcpu if dcpu > 0 else None
        res[f"{name}_whole_pps_cpu"] = records / res[f"{name}_whole"]["cpu_seconds"]
        # the same from each round's pair (whole and prefix ran back to back), the
        # median of the rounds: one lucky or unlucky run moves the best-of figure, not
        # this one
        res[f"{name}_marginal_pps_paired"] = paired_marginal(
            records - k, [x["cpu_seconds"] for x in runs["whole"]],
            [x["cpu_seconds"] for x in runs["prefix"]])
    print("[targets] reference decode ...", file=sys.stderr, flush=True)
    ref = reference_decode(path, args.reference_packets)
    res["reference_decode"] = ref
    res["json_vs_reference"] = (res["json_marginal_pps"] / ref["pps_cpu"]
                                if res["json_marginal_pps"] else None)


if __name__ == "__main__":
    sys.exit(main())
