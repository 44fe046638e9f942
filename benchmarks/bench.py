"""Measure gropcap's throughput on one capture, in one run, and keep the result per commit.

Stages (each in its own process, so each has its own peak RSS and a warm JIT cache):

- ``reference_decode``: reference record scan + reference (struct/dpkt-path) decoder on the
  first ``--reference-packets`` records (it is slow; packets/s extrapolate).
- ``fast_decode``: windowed mmap scan (``capture.scan``) + numba decoder over the whole
  file; also the decoder alone, and the main thread alone (scan + decode; the scan's
  worker thread hashes the file (``capture.fingerprint``) and maps in the next batch's
  pages). Best of ``--repeat`` passes by CPU time. Invariant: one row per record, and
  the fast table equals the reference table on the reference subset.
- ``gro_engine``: the numba GRO engine alone (``gro.engine.simulate``) on the decoded
  table, ideal and napi models, each the first run of its model in the process (and, with
  ``--repeat N``, the least CPU of N runs: ``steady_pps_cpu``, and the thread time per
  packet of the main kernels in those runs, ``kernel_ns``); then ``both``: the two models from one preparation per batch (``engine.simulate_models``).
  Invariant: every packet accounted for, counts in = out, same super-packets.
- ``analyze_fast``: decode + both GRO models through the library with the fast decoder
  (``pipeline.analyze(decoder="fast")`` when the pipeline offers it, else the same
  composition by hand). Invariant: packets out = records.
- ``analyze_cli``: ``gropcap analyze FILE --format json`` end to end, as a user runs it
  (whatever decoder the CLI defaults to). Invariant: exit 0, packet count = records.
- ``analyze_stream``: ``stream.stream_analyze`` writing the three Parquet files (bounded
  memory: the decoded table and the verdicts go through temporary files next to the
  output). Peak RSS is the child's ``ru_maxrss`` (resident pages, mapped file pages
  included). Invariant: packets in the summary and rows in packets.parquet = records,
  super-packet rows = superpackets_out of each model. ``--profile`` adds the top functions
  of a cProfile run by own time and the phase timings.
- ``warm_start``: a fresh interpreter importing and warming the fast kernels from the
  on-disk numba cache (start-up cost of a second run).

JIT compilation happens before timing in every stage (warm-up on a small batch). Ratios
are against the reference decode measured in the same run. Every stage reports wall-clock
(``pps``) and CPU-time (``pps_cpu``) rates: on a shared machine the CPU-time rate is the
one-core figure, the wall-clock one shows contention. ``--malloc cli`` runs the stage
processes with glibc malloc as ``gropcap`` sets it for its own run (``tune_malloc``: the
per-batch arrays come back from the heap instead of fresh pages); the default is glibc's
own settings, what a library caller (a notebook) has. Each stage records which in
``malloc``.

    python benchmarks/bench.py /tmp/bench.pcap              # writes results/<sha>.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import page_cache
import provenance
from child import in_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# measure this checkout, not whatever gropcap an editable install points at
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
STAGES = ("reference_decode", "fast_decode", "gro_engine", "analyze_fast", "analyze_stream",
          "analyze_cli", "warm_start")


def _decoders() -> tuple:
    """The decoders this tree offers (``run.options.DECODERS``; none listed before it)."""
    try:
        from gropcap.run.options import DECODERS
    except ImportError:
        return ()
    return DECODERS


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _fast_table(path, keep=True):
    """(table or None, records, timings) via windowed scan + fast decode, streaming."""
    import pyarrow as pa

    from gropcap.capture.scan import iter_scan_batches
    from gropcap.decode import fast
    from gropcap.decode.schema import PACKET_SCHEMA

    t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
    dec = cdec = 0.0
    parts, n = [], 0
    for _info, batch in iter_scan_batches(path):
        t1, c1 = time.perf_counter(), time.thread_time()
        out = fast.decode_batch(batch)
        dec += time.perf_counter() - t1
        cdec += time.thread_time() - c1
        if keep:
            parts.append(out)
        n += len(batch)
        del out, batch
    total, ctotal = time.perf_counter() - t0, time.process_time() - c0
    mtotal = time.thread_time() - m0
    table = pa.Table.from_batches(parts, schema=PACKET_SCHEMA) if keep else None
    return table, n, {"seconds": total, "cpu_seconds": ctotal, "decode_seconds": dec,
                      "decode_cpu_seconds": cdec, "main_thread_cpu_seconds": mtotal}


def stage_reference_decode(path, args):
    from gropcap.capture import read_capture
    from gropcap.decode import reference

    t0, c0 = time.perf_counter(), time.process_time()
    info, batch = read_capture(path, max_records=args.reference_packets, engine="reference")
    t1, c1 = time.perf_counter(), time.process_time()
    table = reference.decode_batch(batch)
    t2, c2 = time.perf_counter(), time.process_time()
    n = len(batch)
    assert table.num_rows == n
    nbytes = int(batch.cap_len.sum()) + 16 * n
    return {"packets": n, "seconds": t2 - t0, "pps": n / (t2 - t0),
            "cpu_seconds": c2 - c0, "pps_cpu": n / (c2 - c0),
            "mb_per_s": nbytes / (t2 - t0) / 1e6, "scan_seconds": t1 - t0,
            "decode_pps": n / (t2 - t1), "decode_pps_cpu": n / (c2 - c1),
            "peak_rss_mb": _peak_rss_mb()}


def stage_fast_decode(path, args):
    from gropcap.capture import read_capture
    from gropcap.decode import fast, reference

    fast.warm_up()
    runs = [_fast_table(path, keep=False)[1:] for _ in range(max(1, args.repeat))]
    n, tm = min(runs, key=lambda r: r[1]["cpu_seconds"])   # streaming: batches dropped
    rss = _peak_rss_mb()
    size = os.path.getsize(path)
    # correctness (after the RSS reading: the reference reader maps the whole file):
    # fast == reference on the reference subset, one row per record
    _i, sub = read_capture(path, max_records=min(args.reference_packets, 50_000))
    assert fast.decode_batch(sub).equals(reference.decode_batch(sub)), "fast != reference"
    assert n == _count_records(path)
    return {"packets": n, "seconds": tm["seconds"], "pps": n / tm["seconds"],
            "cpu_seconds": tm["cpu_seconds"], "pps_cpu": n / tm["cpu_seconds"],
            "mb_per_s": size / tm["seconds"] / 1e6,
            "decode_only_pps": n / tm["decode_seconds"],
            "decode_only_pps_cpu": n / tm["decode_cpu_seconds"],
            "main_thread_cpu_seconds": tm["main_thread_cpu_seconds"],
            "main_thread_pps_cpu": n / tm["main_thread_cpu_seconds"],
            "worker_cpu_seconds": tm["cpu_seconds"] - tm["main_thread_cpu_seconds"],
            "runs": len(runs), "runs_cpu_seconds": [r[1]["cpu_seconds"] for r in runs],
            "peak_rss_mb": rss}


def stage_gro_engine(path, args):
    import numpy as np

    from gropcap.gro import engine
    from gropcap.gro.config import GroConfig

    table, n, _tm = _fast_table(path)
    small = table.slice(0, 2000)
    out = {"packets": n}
    payload = table.column("payload_len").to_numpy().astype(np.int64)
    for model in ("ideal", "napi"):
        cfg = GroConfig().replace(model=model)
        engine.simulate(small, cfg)                      # warm the JIT
        t0, c0 = time.perf_counter(), time.process_time()
        res = engine.simulate(table, cfg)
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        res.check_invariants(payload)                    # every packet accounted for
        assert res.num_packets == n
        out[model] = {"seconds": dt, "pps": n / dt, "cpu_seconds": ct, "pps_cpu": n / ct,
                      "superpackets": res.num_superpackets,
                      "aggregation_ratio": n / max(res.num_superpackets, 1)}
        # --repeat: more runs in the same process; the first call above pays for the
        # fresh pages of every per-batch array, the steady figure is the least CPU
        cpus = [ct]
        kernels: dict = {}
        for _ in range(args.repeat - 1):
            c0 = time.process_time()
            with _kernel_clock(kernels):
                again = engine.simulate(table, cfg)
            cpus.append(time.process_time() - c0)
            assert again.num_superpackets == res.num_superpackets
        out[model]["steady_cpu_seconds"] = min(cpus)
        out[model]["steady_pps_cpu"] = n / min(cpus)
        if kernels:     # thread time per packet of each kernel, the least over the runs
            out[model]["kernel_ns"] = {k: round(min(v) / n * 1e9, 2)
                                       for k, v in kernels.items()}
    if hasattr(engine, "simulate_models"):
        # both models from one preparation per piece (what the bounded-memory core runs)
        cfgs = [GroConfig(), GroConfig(model="napi")]
        engine.simulate_models(small, cfgs)
        t0, c0 = time.perf_counter(), time.process_time()
        both = engine.simulate_models(table, cfgs)
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        for r, cfg in zip(both, cfgs):
            assert r.num_superpackets == out[cfg.model]["superpackets"]
        out["both"] = {"seconds": dt, "cpu_seconds": ct, "pps": n / dt, "pps_cpu": n / ct,
                       "pps_per_model": 2 * n / dt, "pps_cpu_per_model": 2 * n / ct}
    out["flows"] = int(len(np.unique(res.flow_id)))
    out["pps"] = min(out["ideal"]["pps"], out["napi"]["pps"])
    out["pps_cpu"] = min(out["ideal"]["pps_cpu"], out["napi"]["pps_cpu"])
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


_TIMED_KERNELS = ("run", "classify", "pre_and_flush", "key_classes")


class _kernel_clock:
    """Within the block, each of ``_TIMED_KERNELS`` of ``gropcap.gro.fast`` (called by
    the engine as ``K.name``) is timed in thread time; at exit each one's total of the
    run is appended to ``into[name]``."""

    def __init__(self, into):
        self.into = into

    def __enter__(self):
        from gropcap.gro import fast as K
        self.K, self.saved, self.tot = K, {}, {}
        for name in _TIMED_KERNELS:
            fn = getattr(K, name, None)
            if fn is None:
                continue
            self.saved[name] = fn
            self.tot[name] = 0.0

            def timed(*a, _fn=fn, _name=name):
                t = time.thread_time()
                try:
                    return _fn(*a)
                finally:
                    self.tot[_name] += time.thread_time() - t
            setattr(K, name, timed)
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.K, name, fn)
            self.into.setdefault(name, []).append(self.tot[name])
        return False


def stage_analyze_fast(path, args):
    from gropcap.run import memory as pipeline
    from gropcap.gro.config import MODELS, GroConfig

    size = os.path.getsize(path)
    if "fast" in _decoders():
        pipeline.analyze(path, decoder="fast")                # warm (tiny cost vs run)
        t0, c0 = time.perf_counter(), time.process_time()
        a = pipeline.analyze(path, decoder="fast")
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        n = a.packets.num_rows
        how = "pipeline.analyze(decoder='fast')"
    else:
        from gropcap.decode import fast
        fast.warm_up()
        from gropcap.gro import engine
        from gropcap.run.engines import simulate
        with_small = _fast_table_small(path)
        for m in MODELS:
            engine.simulate(with_small, GroConfig().replace(model=m))    # warm the JIT
        t0, c0 = time.perf_counter(), time.process_time()
        table, n, _tm = _fast_table(path)
        results = {m: simulate(table, GroConfig().replace(model=m)) for m in MODELS}
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        assert all(r.num_packets == n for r in results.values())
        how = "scan.iter_scan_batches + fast.decode_batch + pipeline.simulate (both models)"
    return {"packets": n, "seconds": dt, "pps": n / dt, "cpu_seconds": ct, "pps_cpu": n / ct,
            "mb_per_s": size / dt / 1e6, "how": how, "peak_rss_mb": _peak_rss_mb()}


def stage_analyze_stream(path, args):
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    from gropcap.run.stream import stream_analyze

    size = os.path.getsize(path)
    out = tempfile.mkdtemp(prefix="gropcap-bench-", dir=args.tmp_dir)
    try:
        stream_analyze(os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"),
                       out_dir=os.path.join(out, "warm"))        # warm the JIT
        prof = None
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        r = stream_analyze(path, out_dir=os.path.join(out, "run"))
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        if prof is not None:
            prof.disable()
        rss = _peak_rss_mb()
        n = r.summary["packets"]
        assert pq.ParquetFile(r.paths[0]).metadata.num_rows == n
        sp = pq.read_table(r.paths[1], columns=["model"]).column(0).to_pylist()
        for m, ms in r.summary["models"].items():
            assert sp.count(m) == ms["superpackets_out"], m
        res = {"packets": n, "seconds": dt, "pps": n / dt, "cpu_seconds": ct,
               "pps_cpu": n / ct, "mb_per_s": size / dt / 1e6, "peak_rss_mb": rss,
               "peak_temp_mb": r.peak_spill_bytes / 1e6,
               "output_mb": sum(os.path.getsize(p) for p in r.paths) / 1e6,
               "phases_seconds": r.timings,
               "aggregation_ratio": {m: ms["aggregation_ratio"]
                                     for m, ms in r.summary["models"].items()}}
        if prof is not None:
            import pstats
            st = pstats.Stats(prof)
            rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:25]
            res["profile_top_tottime"] = [
                {"function": f"{os.path.relpath(k[0], ROOT) if k[0].startswith(ROOT) else k[0]}"
                             f":{k[1]}({k[2]})", "calls": v[1], "tottime": round(v[2], 3),
                 "cumtime": round(v[3], 3)} for k, v in rows]
        return res
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _fast_table_small(path, n=2000):
    from gropcap.capture import read_capture
    from gropcap.decode import fast
    import pyarrow as pa
    _i, b = read_capture(path, max_records=n)
    return pa.Table.from_batches([fast.decode_batch(b)])


def run_cli(path, records):
    """``gropcap analyze --format json`` in a child; wall time and that child's peak RSS."""
    cmd = [sys.executable, "-m", "gropcap.cli", "analyze", path, "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    out, err = proc.stdout.read(), proc.stderr.read()
    _pid, status, ru = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    cpu = ru.ru_utime + ru.ru_stime
    res = {"seconds": dt, "cpu_seconds": cpu, "exit_code": code,
           "peak_rss_mb": ru.ru_maxrss / 1024.0}
    if code == 0:
        summary = json.loads(out)
        res["summary_packets"] = _find_packets(summary)
        res["invariant_ok"] = res["summary_packets"] == records
        res["pps"] = records / dt
        res["pps_cpu"] = records / cpu
        res["mb_per_s"] = os.path.getsize(path) / dt / 1e6
    else:
        res["stderr"] = err.decode(errors="replace")[-500:]
    return res


def _find_packets(summary):
    """The packet count in the JSON summary (its top-level ``packets`` or ``input``)."""
    for key in ("packets", "records", "frames"):
        v = summary.get(key)
        if isinstance(v, int):
            return v
        if isinstance(v, dict):
            for k2 in ("total", "count", "packets"):
                if isinstance(v.get(k2), int):
                    return v[k2]
    return None


def stage_warm_start(path, args):
    code = ("import time; t=time.perf_counter(); from gropcap.decode import fast; "
            "fast.warm_up(); from gropcap.capture.scan import iter_scan_batches; "
            "print(time.perf_counter()-t)")
    secs = []
    for _ in range(2):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=ROOT, check=True)
        secs.append({"process_seconds": time.perf_counter() - t0,
                     "import_and_warm_seconds": float(out.stdout.strip())})
    return {"second_run": secs[-1], "first_run": secs[0]}


def _child(stage, path, args):
    fn = globals()["stage_" + stage]
    tuned = args.malloc == "cli" and _tune_malloc()
    res = fn(path, args)
    if isinstance(res, dict):
        res["malloc"] = "cli" if tuned else "default"
    print(json.dumps(res))


def _tune_malloc() -> bool:
    """``--malloc cli``: glibc malloc as the command line sets it in its own process
    (``gropcap.__main__.tune_malloc``: blocks from the heap, no trimming), before the
    stage allocates anything; a tree without it runs with glibc's defaults."""
    try:
        from gropcap.__main__ import tune_malloc
    except ImportError:
        return False
    return tune_malloc()



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--reference-packets", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=1,
                    help="fast_decode: passes over the file, the best by CPU time is kept; "
                         "gro_engine: runs of each model, the first and the best kept")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--out", help="result JSON (default benchmarks/results/<sha>.json)")
    ap.add_argument("--cli-limit", type=int, default=300_000,
                    help="skip analyze_cli above this many records while the CLI has no "
                         "fast decoder")
    ap.add_argument("--force-cli", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="analyze_stream: add a cProfile top list (slower)")
    ap.add_argument("--tmp-dir", default=None,
                    help="analyze_stream: where its output and temporary files go")
    ap.add_argument("--malloc", choices=["default", "cli"], default="default",
                    help="glibc malloc of the stage processes: glibc's defaults (what a "
                         "library caller has), or as `gropcap` sets it for its own run")
    ap.add_argument("--page-cache", choices=page_cache.MODES, default="reread",
                    help="the capture's page cache before the stages: as it is (a capture "
                         "tcpdump has just written maps in 4 KiB pages), or dropped and "
                         "read once, as a capture read from disk (benchmarks/page_cache.py)")
    ap.add_argument("--stage", help=argparse.SUPPRESS)     # internal: run one stage here
    args = ap.parse_args(argv)
    path = os.path.abspath(args.capture)
    if args.stage:
        _child(args.stage, path, args)
        return 0
    # (in a child: this process's peak would floor every stage's, child.py)
    records = in_child("bench", "_count_records", path)
    cache = page_cache.settle(path, args.page_cache)
    stages = [s for s in args.stages.split(",") if s]
    res = {}
    for stage in stages:
        print(f"[bench] {stage} ...", file=sys.stderr, flush=True)
        if stage == "analyze_cli":
            if ("fast" not in _decoders() and records > args.cli_limit
                    and not args.force_cli):
                res[stage] = {"skipped": f"the CLI still decodes with the reference path; "
                              f"{records} records would take many minutes (see "
                              f"analyze_fast; --force-cli runs it anyway)"}
            else:
                res[stage] = run_cli(path, records)
        else:
            cmd = [sys.executable, os.path.abspath(__file__), path, "--stage", stage,
                   "--reference-packets", str(args.reference_packets),
                   "--repeat", str(args.repeat), "--malloc", args.malloc]
            cmd += ["--profile"] if args.profile else []
            cmd += ["--tmp-dir", args.tmp_dir] if args.tmp_dir else []
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if p.returncode:
                res[stage] = {"error": p.stderr[-2000:]}
            else:
                res[stage] = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"[bench] {stage}: {json.dumps(res[stage])[:300]}", file=sys.stderr, flush=True)
    ref_pps = res.get("reference_decode", {}).get("pps")
    ref_cpu = res.get("reference_decode", {}).get("pps_cpu")
    ratios = {}
    for stage in ("fast_decode", "analyze_fast", "analyze_stream", "analyze_cli"):
        st = res.get(stage, {})
        if ref_pps and st.get("pps"):
            ratios[f"{stage}_vs_reference_decode"] = st["pps"] / ref_pps
        if ref_cpu and st.get("pps_cpu"):
            ratios[f"{stage}_vs_reference_decode_cpu"] = st["pps_cpu"] / ref_cpu
    prov = provenance.commit()
    doc = {
        **prov,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor()},
        "capture": {"path": path, "bytes": os.path.getsize(path), "records": records,
                    "page_cache": cache},
        "stages": res, "ratios": ratios,
    }
    out = args.out or os.path.join(HERE, "results", f"{prov['commit']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    print(out)
    return 0


def _count_records(path):
    from gropcap.capture.scan import iter_scan_batches
    return sum(len(b) for _i, b in iter_scan_batches(path))


if __name__ == "__main__":
    sys.exit(main())
