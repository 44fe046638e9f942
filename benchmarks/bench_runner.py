"""Measure the Dask runs on 1 and 2 local workers against one process.

Builds (once, deterministic) ``--files`` captures with ``make_bench_capture.py``, then:

- ``one_process``: ``pipeline.analyze`` over all files (JIT warm), wall and CPU time;
- ``workers=N``: a LocalCluster of N single-threaded worker processes (start-up timed
  apart; each worker warms its kernels from the on-disk numba cache on a sample first),
  then ``analyze_distributed`` over the same files: wall time, speed-up against one process
  and against 1 worker, peak RSS of every worker (``VmHWM``) and of the client.
  Invariant: the summary and every GroResult equal the one-process run.
- each worker count runs per ``--exchange``: the in-memory merge with decoded pieces
  exchanged through scratch files (``files``) or through Dask transfers (``transfers``,
  ``scratch=False``), and ``core``: what ``gropcap analyze --jobs N`` runs,
  ``run.dask_core.analyze_partitioned`` (the bounded-memory core per partition, workers
  writing their own Parquet parts with ``--write``, the client merging accumulators).
  Its invariant: the summary equals the one-process bounded-memory run
  (``run.stream.stream_analyze``, timed too when ``core`` is asked for, with the same
  ``--write`` setting).
- ``--reference none`` skips the one-process runs (then nothing is compared): the client
  then measures its own peak RSS, not one left over from a one-process run before.
- ``--alternate`` (issue 15's figure): the one-process bounded run with ``--threads`` 1
  and 2 and ``--jobs N`` (``--exchange fused`` and/or ``core``) on the cluster
  ``gropcap analyze --jobs N`` starts, alternated ``--repeat`` times, wall and CPU
  (this process plus the partition tasks'), the fused tasks' own timings, optionally
  waiting for the machine to be ``--quiet`` idle before each run; ``--capture`` a
  given file (e.g. ``make_bench_capture.py --packets 20000000 --flows 32000``).

The machine is shared: run it under ``nice`` and read the CPU-time column with the wall one.

    nice python benchmarks/bench_runner.py --dir /tmp/bench_runner --files 4 \\
        --packets 1000000 --workers 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)



def _peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM: ru_maxrss would carry the parent's peak
    over fork+exec into the worker processes)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak_rss() -> None:
    """Start a new VmHWM period (Linux: writing 5 to clear_refs resets the peak), so the
    client's peak is that of the run being measured, not of the one-process run before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def make_inputs(d: str, files: int, packets: int, flows: int) -> list[str]:
    os.makedirs(d, exist_ok=True)
    paths = []
    for i in range(files):
        p = os.path.join(d, f"bench{i}-{packets}.pcap")
        if not os.path.exists(p):
            subprocess.run([sys.executable, os.path.join(HERE, "make_bench_capture.py"), p,
                            "--packets", str(packets), "--flows", str(flows),
                            "--seed", str(20261130 + i)], check=True,
                           stdout=subprocess.DEVNULL)
        paths.append(p)
    return paths


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/bench_runner")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--flows", type=int, default=4000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--exchange", nargs="+", default=["files", "transfers"],
                    choices=["files", "transfers", "core", "fused"],
                    help="the in-memory merge with pieces through scratch files (files) "
                         "or Dask transfers (transfers); the core per partition with "
                         "decoded rows exchanged through scratch files (core) or fused "
                         "(fused: each partition task decodes every input)")
    ap.add_argument("--alternate", action="store_true",
                    help="the core per partition against the one-process bounded run "
                         "with --threads 1 and 2: one cluster of --workers[-1] workers "
                         "(start-up timed), the configurations alternated --repeat times, "
                         "the least of each kept, per-task timings of the fused runs")
    ap.add_argument("--quiet", type=float, default=None, metavar="SHARE",
                    help="--alternate: before each timed run wait until the machine is "
                         "this idle (0-1, over 2 s; at most --quiet-timeout seconds)")
    ap.add_argument("--quiet-timeout", type=float, default=120)
    ap.add_argument("--capture", default=None,
                    help="use this capture instead of generated ones")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed runs of each configuration; the best wall time is used "
                         "(the machine is shared: page-fault and scheduling noise only "
                         "ever adds time)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--write", default=None, metavar="DIR",
                    help="core and its one-process reference: write the Parquet output "
                         "there (replaced on each run)")
    ap.add_argument("--reference", choices=["yes", "none"], default="yes",
                    help="none: no one-process runs (the client's peak RSS is its own)")
    args = ap.parse_args(argv)

    from dask.distributed import Client, LocalCluster

    from gropcap.gro.config import GroConfig
    from gropcap.run.memory import analyze
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.distributed import analyze_distributed
    from gropcap.run.stream import stream_analyze

    paths = [args.capture] if args.capture else \
        make_inputs(args.dir, args.files, args.packets, args.flows)
    cfg = GroConfig(queues=args.queues)
    if args.alternate:
        return alternate(args, paths, cfg)
    total_bytes = sum(os.path.getsize(p) for p in paths)
    report = {"files": len(paths), "bytes": total_bytes, "packets": None,
              "cpus": os.cpu_count(), "queues": args.queues, "runs": {}}

    # JIT warm-up on a small capture of the same kind (coalesced frames, tunnels, both IP
    # versions), so every numba specialisation the timed runs use is compiled or loaded
    # from the cache before timing
    warm = make_inputs(args.dir, 1, 20_000, 200)[0]
    analyze(warm, cfg)
    walls = []
    one_summary = one_results = stream_summary = None
    base = base_stream = None
    for _ in range(args.repeat if args.reference == "yes" else 0):
        one = None
        t0, c0 = time.perf_counter(), time.process_time()
        one = analyze(paths, cfg)
        walls.append(time.perf_counter() - t0)
        cpu = time.process_time() - c0
    if walls:
        wall = min(walls)
        report["packets"] = one.decoded.num_rows
        report["runs"]["one_process"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                         "all_wall_s": [round(w, 2) for w in walls],
                                         "peak_rss_mib": round(_peak_rss_mib(), 1)}
        one_summary = one.summary()
        one_results = one.results
        base = wall
        print(f"one process: {wall:.2f} s wall, {cpu:.2f} s CPU, "
              f"{report['packets']} packets, {total_bytes / 2**20:.0f} MiB", flush=True)
        del one
    if {"core", "fused"} & set(args.exchange) and args.reference == "yes":
        walls = []
        stream_analyze(warm, cfg)
        for _ in range(args.repeat):
            _reset_peak_rss()
            t0, c0 = time.perf_counter(), time.process_time()
            st = stream_analyze(paths, cfg, out_dir=args.write, force=True)
            walls.append(time.perf_counter() - t0)
            cpu = time.process_time() - c0
        base_stream = min(walls)
        stream_summary = st.summary
        assert stream_summary == one_summary, "bounded-memory summary differs"
        report["runs"]["one_process_stream"] = {
            "wall_s": round(base_stream, 3), "cpu_s": round(cpu, 3),
            "all_wall_s": [round(w, 2) for w in walls], "write": bool(args.write),
            "peak_rss_mib": round(_peak_rss_mib(), 1)}
        print(json.dumps(report["runs"]["one_process_stream"]), flush=True)

    first = {}
    for exchange in args.exchange:
        for n in args.workers:
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
            start = time.perf_counter() - t0
            scratch = None if exchange != "transfers" else False

            def fail(_client, why):
                raise AssertionError(f"the core per partition fell back: {why}")

            def go(p, write=None):
                if exchange in ("core", "fused"):
                    return analyze_partitioned(
                        p, cfg, client=client, out_dir=write, force=True, fallback=fail,
                        exchange="exchange" if exchange == "core" else "fused")
                return analyze_distributed(p, cfg, client=client, scratch=scratch)
            go(warm)       # workers load the numba cache
            walls = []
            for _ in range(args.repeat):
                dist = None
                _reset_peak_rss()
                client.run(_reset_peak_rss)
                t0 = time.perf_counter()
                dist = go(paths, args.write)
                walls.append(time.perf_counter() - t0)
            wall = min(walls)
            if exchange in ("core", "fused"):
                report["packets"] = dist.summary["packets"]
                if stream_summary is not None:
                    assert dist.summary == stream_summary, "core summary differs"
            elif one_summary is not None:
                assert dist.summary() == one_summary, "distributed summary differs"
                for m in dist.results:
                    assert dist.results[m].equals(one_results[m]), m
            rss = client.run(_peak_rss_mib)
            first.setdefault(exchange, wall)
            ref = base_stream if exchange in ("core", "fused") else base
            run = {"workers": n, "exchange": exchange, "cluster_start_s": round(start, 2),
                   "wall_s": round(wall, 3), "all_wall_s": [round(w, 2) for w in walls],
                   "speedup_vs_one_process": round(ref / wall, 2) if ref else None,
                   "one_process": "stream_analyze" if exchange in ("core", "fused")
                   else "analyze",
                   "write": bool(args.write) if exchange in ("core", "fused") else False,
                   "speedup_vs_1_worker": round(first[exchange] / wall, 2),
                   "worker_peak_rss_mib": sorted(round(v, 1) for v in rss.values()),
                   "client_peak_rss_mib": round(_peak_rss_mib(), 1)}
            report["runs"][f"workers={n},{exchange}"] = run
            print(json.dumps(run), flush=True)
            del dist
            client.close()
            cluster.close()
    return _emit(report, args.out)


def _load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def _idle(seconds: float = 2.0) -> float:
    """Share of the machine's CPU time idle over the next ``seconds`` (/proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    i0, t0 = sample()
    time.sleep(seconds)
    i1, t1 = sample()
    return (i1 - i0) / max(1, t1 - t0)


def _wait_quiet(threshold: float, timeout: float) -> float:
    """Wait until the machine is at least ``threshold`` idle (other users' runs: this
    machine is shared, and Linux's autogroup scheduling gives each session an equal
    share, so a run's worker processes get no more CPU than one process while other
    sessions are busy), at most ``timeout`` seconds; the last idle share."""
    end = time.monotonic() + timeout
    while True:
        idle = _idle()
        if idle >= threshold or time.monotonic() > end:
            return round(idle, 2)


def alternate(args, paths, cfg) -> dict:
    """``--alternate``: the one-process bounded run (``--threads`` 1 and 2) and the core
    per partition (each ``--exchange`` of core and fused) on one cluster, alternated;
    every summary asserted equal to the first one-process run's."""
    from gropcap.run.dask_core import analyze_partitioned
    from gropcap.run.stream import stream_analyze
    n = args.workers[-1]
    warm = make_inputs(args.dir, 1, 20_000, 200)[0]
    report = {"capture": paths, "bytes": sum(os.path.getsize(p) for p in paths),
              "cpus": os.cpu_count(), "queues": args.queues, "workers": n,
              "write": bool(args.write), "load_before": _load(), "runs": {}}
    t0 = time.perf_counter()
    # the cluster `gropcap analyze --jobs N` starts (run.distributed._local_cluster)
    from gropcap.run.distributed import _local_cluster
    cluster, client = _local_cluster(n)
    report["cluster_start_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    client.run(lambda: __import__("gropcap.run.dask_tasks"))
    report["worker_import_s"] = round(time.perf_counter() - t0, 2)

    def fail(_client, why):
        raise AssertionError(f"the core per partition fell back: {why}")
    configs = {"one_process_threads_1": lambda p: stream_analyze(
                   p, cfg, out_dir=args.write, force=True, threads=1),
               "one_process_threads_2": lambda p: stream_analyze(
                   p, cfg, out_dir=args.write, force=True, threads=2)}
    for ex in args.exchange:
        if ex in ("core", "fused"):
            configs[f"jobs_{n}_{ex}"] = (lambda ex: lambda p: analyze_partitioned(
                p, cfg, client=client, out_dir=args.write, force=True, fallback=fail,
                exchange="exchange" if ex == "core" else "fused"))(ex)
    for fn in configs.values():
        fn(warm)            # JIT, numba cache, imports
    walls = {k: [] for k in configs}
    summary = None
    timings = {}
    idle = {k: [] for k in configs}
    cpu = {k: [] for k in configs}
    for i in range(args.repeat):
        for name, fn in configs.items():
            if args.quiet:
                idle[name].append(_wait_quiet(args.quiet, args.quiet_timeout))
            t0, c0 = time.perf_counter(), time.process_time()
            r = fn(paths)
            walls[name].append(round(time.perf_counter() - t0, 2))
            # CPU seconds: this process (both threads of a one-process run; the
            # client of a Dask run) plus the partition tasks
            cpu[name].append(round(time.process_time() - c0 + sum(
                t.get("cpu", 0) for t in getattr(r, "task_timings", None) or []), 2))
            if summary is None:
                summary = r.summary
                report["packets"] = summary["packets"]
            assert r.summary == summary, f"{name}: the summary differs"
            if getattr(r, "timings", None):
                timings.setdefault(name, []).append(
                    {**{k: round(v, 2) for k, v in r.timings.items()},
                     **({"tasks": [{k: round(v, 2) for k, v in t.items()}
                                   for t in r.task_timings]}
                        if getattr(r, "task_timings", None) else {})})
            print(name, walls[name][-1], "load", _load(), "idle before",
                  idle[name][-1] if idle[name] else None, "cpu", cpu[name][-1], flush=True)
    base = {t: min(walls[f"one_process_threads_{t}"]) for t in (1, 2)}
    for name, w in walls.items():
        report["runs"][name] = {
            "wall_s": min(w), "all_wall_s": w, "cpu_s": cpu[name],
            "idle_before": idle[name], "timings": timings.get(name),
            "vs_threads_1": round(base[1] / min(w), 2),
            "vs_threads_2": round(base[2] / min(w), 2)}
    report["load_after"] = _load()
    # peaks over the whole session (VmHWM): the client's includes the one-process runs
    report["worker_peak_rss_mib"] = sorted(round(v, 1) for v in
                                           client.run(_peak_rss_mib).values())
    report["client_peak_rss_mib"] = round(_peak_rss_mib(), 1)
    client.close()
    cluster.close()
    return _emit(report, args.out)



def _emit(report: dict, out: str | None) -> dict:
    """Print the report (JSON) and write it to ``out`` when given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return report

if __name__ == "__main__":
    main()
