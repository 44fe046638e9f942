"""Issue 14's end-to-end speed targets, measured in one run on one capture, as a user runs
the CLI: each figure next to its target.

What is timed (each command in a fresh child process; CPU time from ``wait4``, so the
figure is the one-core rate even on a shared machine; best of ``--rounds``):

- ``analyze CAPTURE --format json`` (both models, summary only) and ``analyze CAPTURE
  --out DIR`` (all three Parquet files), on the whole capture and on a prefix of it (its
  first ``--prefix`` records, cut at a record boundary). The **marginal** rate is
  ``(records - prefix) / (cpu(whole) - cpu(prefix))``: start-up, imports and the numba
  cache load cancel out, what remains is the cost per packet.
- the reference decode (``bench.py``'s ``reference_decode`` stage, the dpkt-path
  decoder) in the same run, for the ratio target (>= 50x).
- peak RSS of each child (``ru_maxrss``).

Targets (issue 14): ``--format json`` >= 5 M packets/s marginal and >= 50x the reference
decode; ``--out`` >= 2 M packets/s. The decode, engine, thread and start-up targets have
their own benchmarks (``bench.py --stages fast_decode,gro_engine``, ``bench_startup.py``).

    python benchmarks/bench_targets.py /tmp/real3m.pcap           # --rounds 3
    python benchmarks/bench_targets.py CAPTURE --prefix 300000 --out results.json

Writes ``benchmarks/results/targets-<short sha>.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TARGETS = {"json_marginal_pps": 5e6, "json_vs_reference": 50.0, "out_marginal_pps": 2e6}


def _git(*a) -> str:
    try:
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


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


def best_of(rounds: int, make_args) -> dict:
    """The run with the least CPU time of ``rounds`` (``make_args(k)`` -> CLI args)."""
    runs = [_spawn(make_args(k)) for k in range(rounds)]
    bad = [r for r in runs if r["exit_code"]]
    if bad:
        raise SystemExit(f"bench_targets: gropcap failed: {bad[0].get('stderr', '')}")
    best = min(runs, key=lambda r: r["cpu_seconds"])
    return dict(best, rounds=[round(r["cpu_seconds"], 3) for r in runs])


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
    ap.add_argument("--out", help="result JSON (default results/targets-<sha>.json)")
    args = ap.parse_args(argv)
    path = os.path.abspath(args.capture)
    records = count_records(path)
    tmp = tempfile.mkdtemp(prefix="gropcap-targets-", dir=args.tmp_dir)
    try:
        small = os.path.join(tmp, "prefix" + os.path.splitext(path)[1])
        k = write_prefix(path, args.prefix or max(1, records // 10), small)
        res = {"records": records, "prefix_records": k}
        for name, extra in (("json", ["--format", "json"]), ("out", None)):
            for label, p, n in (("whole", path, records), ("prefix", small, k)):
                def make(r, p=p, label=label, name=name, extra=extra):
                    if extra is not None:
                        return ["analyze", p, *extra, "-q"]
                    d = os.path.join(tmp, f"out-{label}-{r}")
                    return ["analyze", p, "--out", d, "--format", "json", "-q"]
                print(f"[targets] {name} {label} ({n} records) ...", file=sys.stderr,
                      flush=True)
                res[f"{name}_{label}"] = best_of(args.rounds, make)
                for r in range(args.rounds):
                    shutil.rmtree(os.path.join(tmp, f"out-{label}-{r}"), ignore_errors=True)
            dcpu = res[f"{name}_whole"]["cpu_seconds"] - res[f"{name}_prefix"]["cpu_seconds"]
            res[f"{name}_marginal_pps"] = (records - k) / dcpu if dcpu > 0 else None
            res[f"{name}_whole_pps_cpu"] = records / res[f"{name}_whole"]["cpu_seconds"]
        print("[targets] reference decode ...", file=sys.stderr, flush=True)
        ref = reference_decode(path, args.reference_packets)
        res["reference_decode"] = ref
        res["json_vs_reference"] = (res["json_marginal_pps"] / ref["pps_cpu"]
                                    if res["json_marginal_pps"] else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    met = {key: (res[key] is not None and res[key] >= goal) for key, goal in TARGETS.items()}
    sha = _git("rev-parse", "--short", "HEAD") or "unknown"
    doc = {"benchmark": "targets", "commit": sha, "commit_full": _git("rev-parse", "HEAD"),
           "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                       "platform": platform.platform(), "loadavg": os.getloadavg()},
           "capture": {"path": path, "bytes": os.path.getsize(path), "records": records},
           "results": res, "targets": TARGETS, "met": met}
    out = args.out or os.path.join(HERE, "results", f"targets-{sha}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    rows = [("analyze --format json, marginal", res["json_marginal_pps"], "5 M/s"),
            ("analyze --format json, whole run", res["json_whole_pps_cpu"], ""),
            ("analyze --out DIR, marginal", res["out_marginal_pps"], "2 M/s"),
            ("analyze --out DIR, whole run", res["out_whole_pps_cpu"], ""),
            ("reference decode", ref["pps_cpu"], "")]
    for label, pps, goal in rows:
        shown = f"{pps / 1e6:7.2f} M packets/s" if pps else "      n/a"
        print(f"{label:34} {shown}   target {goal or '-'}")
    ratio = res["json_vs_reference"]
    print(f"{'--format json vs reference decode':34} {ratio:7.1f}x" if ratio else "n/a",
          "             target 50x")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
