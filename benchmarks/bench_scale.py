"""Issue 15's 100 GB run: a directory of ``--copies`` links to one capture, analysed with
``gropcap analyze DIR --jobs N --out OUT`` as a user runs it.

1. builds the capture once if it is missing (``make_bench_capture.py``; 20 M packets at
   snaplen 128 is about 2.5 GB, 40 links to it 100 GB);
2. the one-copy run: ``gropcap analyze CAPTURE --format json --out ONE`` (one process);
3. the many-copy run: ``gropcap analyze LINKS/ --jobs N --format json --out MANY``, its
   client's and each worker's peak RSS as each process writes its own VmHWM at exit
   (``peaks.py``: exact), next to the process tree sampled every ``--sample`` seconds
   (the figures before 2026-12-04, which can miss a peak in a process's last interval);
4. checks: the run completed, every count of the summary is ``copies`` times the one-copy
   count (per model: packets, super-packets, reasons; status, encapsulations), every file
   entry equals the one-copy file entry but for its path, the flows table holds
   ``copies`` times the one-copy rows, and the packets/superpackets datasets hold
   ``copies`` times the rows.

Writes ``benchmarks/results/scale-<short sha>.json`` (wall time, packets/s, peaks, checks)
and prints a table. The disk needs room for the output (about 10-20 bytes a packet) and
the workers' scratch; ``--keep`` leaves OUT in place.

    nice python benchmarks/bench_scale.py --capture /data/cap20m.pcap --copies 40 --jobs 2
    python benchmarks/bench_scale.py --packets 200000 --copies 4 --dir /tmp/scale   # a try
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import peaks
import provenance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COUNT_KEYS = ("packets_in", "segments_in", "superpackets_out", "data_segments_in",
              "data_superpackets_out", "merged_packets")


def _status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (``/proc/PID/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def run_sampled(cmd: list[str], out_json: str, sample: float) -> dict:
    """Run ``cmd`` (``python -m gropcap ...``) with stdout to ``out_json``: the wall time,
    the client's and every worker's peak RSS as each process writes it at its exit
    (``peaks.py``: VmHWM, exact) and as sampled every ``sample`` seconds (VmHWM; one
    process: its ``ru_maxrss`` at exit), and the client's peak anonymous RSS (RssAnon:
    not the pages of mapped files, which the kernel may drop and read again; sampled)."""
    t0 = time.perf_counter()
    disk = os.path.dirname(os.path.abspath(out_json))
    free0 = _free(disk)
    used = 0
    peaks_dir = out_json + ".peaks"
    shutil.rmtree(peaks_dir, ignore_errors=True)
    os.makedirs(peaks_dir)
    assert cmd[1:3] == ["-m", "gropcap"], cmd
    wrapped = [cmd[0], os.path.join(HERE, "peaks.py"), peaks_dir, *cmd[1:]]
    with open(out_json, "w") as out, open(out_json + ".err", "w") as err:
        p = subprocess.Popen(wrapped, stdout=out, stderr=err, cwd=ROOT,
                             env=dict(os.environ, **peaks.worker_env(peaks_dir)))
        client, anon, workers = 0, 0, {}
        while True:
            done, status, usage = os.wait4(p.pid, os.WNOHANG)
            if done:
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            used = max(used, free0 - _free(disk))
            v = _status_kib(p.pid, "VmHWM")
            client = max(client, v or 0)
            anon = max(anon, _status_kib(p.pid, "RssAnon") or 0)
            for c in _children(p.pid):
                w = _status_kib(c, "VmHWM")
                if w:
                    workers[c] = max(workers.get(c, 0), w)
            time.sleep(sample)
    wall = time.perf_counter() - t0
    with open(out_json + ".err") as f:
        stderr = f.read()
    big = {pid: kib for pid, kib in workers.items() if kib > 150 * 1024}   # not helpers
    if not big:
        # one process: its own peak from the kernel (ru_maxrss; with workers it would be
        # theirs, the largest reaped descendant's): a sample misses a peak in the last
        # interval before the exit, where the flows table is built
        client = max(client, usage.ru_maxrss)
    exact = peaks.read(peaks_dir)
    shutil.rmtree(peaks_dir, ignore_errors=True)
    return {"cmd": cmd, "exit": p.returncode, "wall_s": wall, "stderr_tail": stderr[-2000:],
            "client_peak_exact_mib": exact["client"][0] / 1024 if exact["client"] else None,
            "worker_peaks_exact_mib": [kib / 1024 for kib in exact["worker"]],
            "disk_peak_gb": used / 1e9,
            "output_gb": _du(cmd[cmd.index("--out") + 1]) / 1e9 if "--out" in cmd else 0,
            "client_peak_mib": client / 1024, "client_anon_peak_mib": anon / 1024,
            "worker_peaks_mib": sorted((kib / 1024 for kib in big.values()), reverse=True)}


def _free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _du(path: str) -> int:
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(d, n))
            except OSError:
                pass
    return total


def _dataset_rows(path: str) -> int:
    import pyarrow.parquet as pq
    if os.path.isfile(path + ".parquet"):
        return pq.ParquetFile(path + ".parquet").metadata.num_rows
    return sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows
               for f in os.listdir(path) if f.endswith(".parquet"))


def check(one: dict, many: dict, copies: int, one_dir: str, many_dir: str) -> dict:
    """Every count of ``many`` is ``copies`` times ``one``'s; a list of what differs."""
    bad = []

    def same(what, a, b):
        if a != b:
            bad.append(f"{what}: {b} != {a}")

    same("packets", copies * one["packets"], many["packets"])
    same("wire_bytes", copies * one["wire_bytes"], many["wire_bytes"])
    for k, v in one["status"].items():
        same(f"status {k}", copies * v, many["status"].get(k))
    for m, mo in one["models"].items():
        mm = many["models"][m]
        for k in COUNT_KEYS:
            same(f"{m} {k}", copies * mo[k], mm[k])
        for part in ("reasons", "end_reasons"):
            for k, v in mo[part].items():
                same(f"{m} {part} {k}", copies * v, mm[part].get(k))
        same(f"{m} largest_superpacket", mo["largest_superpacket"], mm["largest_superpacket"])
    for e, eo in one["encapsulations"].items():
        same(f"encap {e} packets", copies * eo["packets"], many["encapsulations"][e]["packets"])
    same("files", copies, len(many["files"]))
    ref = {k: v for k, v in one["files"][0].items() if k != "path"}
    for i, f in enumerate(many["files"]):
        same(f"file {i}", ref, {k: v for k, v in f.items() if k != "path"})
    rows = {}
    for name in ("flows", "packets", "superpackets"):
        a, b = _dataset_rows(os.path.join(one_dir, name)), \
            _dataset_rows(os.path.join(many_dir, name))
        rows[name] = {"one": a, "many": b}
        same(f"{name} rows", copies * a, b)
    # the flows: each copy's are the one copy's but for their ids and file index
    import pyarrow.parquet as pq
    f1 = pq.read_table(os.path.join(one_dir, "flows.parquet"))
    fn = pq.read_table(os.path.join(many_dir, "flows.parquet"))
    n = f1.num_rows
    if fn.num_rows == copies * n:
        ref = f1.drop(["flow_id", "file_index"])
        for k in range(copies):
            part = fn.slice(k * n, n)
            if not part.drop(["flow_id", "file_index"]).equals(ref):
                bad.append(f"flows of copy {k} differ")
            if set(part.column("file_index").to_pylist()) != {k}:
                bad.append(f"flows of copy {k}: file index not {k}")
    return {"equal": not bad, "differences": bad[:50], "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", help="the capture to link (built if missing)")
    ap.add_argument("--packets", type=int, default=20_000_000,
                    help="packets of a built capture (20 M: about 2.5 GB)")
    ap.add_argument("--flows", type=int, default=8000)
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/gropcap_scale", help="links and outputs")
    ap.add_argument("--sample", type=float, default=0.5, help="RSS sampling period (s)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more `gropcap analyze` options for both runs (e.g. --queues 4)")
    ap.add_argument("--keep", action="store_true", help="keep the output directories")
    ap.add_argument("--out", help="result JSON (default results/scale-<sha>.json)")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    cap = args.capture or os.path.join(args.dir, f"cap{args.packets}.pcap")
    if not os.path.exists(cap):
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_capture.py"), cap,
                        "--packets", str(args.packets), "--flows", str(args.flows)],
                       check=True)
    links = os.path.join(args.dir, "links")
    shutil.rmtree(links, ignore_errors=True)
    os.makedirs(links)
    for i in range(args.copies):
        os.symlink(os.path.abspath(cap), os.path.join(links, f"copy{i:03d}.pcap"))
    one_dir, many_dir = os.path.join(args.dir, "one"), os.path.join(args.dir, "many")
    gp = [sys.executable, "-m", "gropcap", "analyze", "--format", "json", "-q", "--force"]
    one = run_sampled(gp + [cap, "--out", one_dir] + args.extra,
                      os.path.join(args.dir, "one.json"), args.sample)
    # --parallel workers: the Dask path under test even for a small --capture (below
    # run.core.WORKERS_MIN_BYTES, --jobs alone would run threads)
    many = run_sampled(gp + [links, "--jobs", str(args.jobs), "--parallel", "workers",
                             "--out", many_dir] + args.extra,
                       os.path.join(args.dir, "many.json"), args.sample)
    res = {"benchmark": "scale", **provenance.commit(), "capture": cap,
           "capture_bytes": os.path.getsize(cap), "copies": args.copies, "jobs": args.jobs,
           "input_bytes": args.copies * os.path.getsize(cap), "one": one, "many": many,
           "loadavg_after": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if one["exit"] == 0 and many["exit"] == 0:
        with open(os.path.join(args.dir, "one.json")) as f:
            s1 = json.load(f)
        with open(os.path.join(args.dir, "many.json")) as f:
            sn = json.load(f)
        res["check"] = check(s1, sn, args.copies, one_dir, many_dir)
        res["packets"] = sn["packets"]
        res["many"]["packets_per_s"] = sn["packets"] / many["wall_s"]
        res["one"]["packets_per_s"] = s1["packets"] / one["wall_s"]
    out = args.out or os.path.join(HERE, "results", f"scale-{res['commit']}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    if not args.keep:
        shutil.rmtree(one_dir, ignore_errors=True)
        shutil.rmtree(many_dir, ignore_errors=True)
    print(f"input {res['input_bytes'] / 1e9:.1f} GB ({args.copies} x {cap})")
    for k in ("one", "many"):
        r = res[k]
        print(f"{k:5s} exit {r['exit']}  wall {r['wall_s']:8.1f} s  "
              f"{r.get('packets_per_s', 0) / 1e6:6.2f} M packets/s  client peak "
              f"{r['client_peak_exact_mib'] or 0:7.0f} MiB (sampled "
              f"{r['client_peak_mib']:.0f}, anonymous {r['client_anon_peak_mib']:.0f})"
              "  workers "
              + ", ".join(f"{w:.0f}" for w in r["worker_peaks_exact_mib"]) + " MiB (sampled "
              + ", ".join(f"{w:.0f}" for w in r["worker_peaks_mib"]) + ")  disk peak "
              f"{r['disk_peak_gb']:.1f} GB (output {r['output_gb']:.1f} GB)")
    if "check" in res:
        c = res["check"]
        print("counts x%d: %s" % (args.copies, "equal" if c["equal"] else
                                   "DIFFER: " + "; ".join(c["differences"][:5])))
    print("wrote", out)
    return 0 if res.get("check", {}).get("equal") else 1


if __name__ == "__main__":
    sys.exit(main())
