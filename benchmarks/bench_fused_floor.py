"""The single pass (``gropcap/gro/fused.py``) measured: issue 14's 5 M packets/s floor.

``docs/performance.md`` ("What 5 M packets/s would take", session 34) argues that 5 M
packets/s needs one numba pass per batch that reads only what GRO needs and runs both
models record by record, instead of today's dozen passes over materialised columns with
Python between them. Session 35 measured a skeleton of that pass here; session 36 made
it ``gropcap.gro.fused``, which gives both models' whole ``GroResult`` (every verdict,
every super-packet), equal to the engine's field for field on what it covers (pcap files
of Ethernet / IPv4 / TCP, a 6.18 receive context with one RX queue; the tests in
``tests/gro/test_fused.py``). Nothing in a run uses it yet.

The benchmark runs the pass over a capture (its calls only: the per-record verdicts and
super-packets written, not gathered into a ``GroResult``) and reports ns a record, next
to ``gropcap analyze --format json`` measured in the same run (a warm process, the same
capture), and checks that both models' super-packet counts equal the engine's. It also
times the capture's digest over the mapped file, which a complete pass pays too.

    python benchmarks/bench_fused_floor.py /tmp/real3m.pcap --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def run_fused(path: str) -> dict:
    """The single pass over ``path``'s batches of records from the capture scan (as a
    run hands them over): records, super-packets per model, flows, CPU seconds of the
    pass's calls and of the whole loop (the scan's included)."""
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.gro import fused
    from gropcap.gro.config import GroConfig
    body = fused.pcap_body(path)            # (a pcap file of Ethernet frames)
    if isinstance(body, str):
        raise SystemExit(f"{path}: {body}")
    del body
    run = fused.FusedRun(GroConfig())
    records, segs, cpu = 0, [0, 0], 0.0
    c0 = time.process_time()
    for _, b in iter_scan_batches(path, batch_records=run.batch, digest=False):
        c1 = time.process_time()
        n, got, _ = run.take(b.buf, b.offset, b.cap_len, b.wire_len, b.ts_ns)
        cpu += time.process_time() - c1
        if run.status != fused.DONE:
            raise SystemExit(f"{path}: {fused.STOPPED[run.status]} at byte "
                             f"{int(b.file_offset[int(run.ctr[fused.C_AT])])}")
        records += n
        segs[0] += len(got[0])
        segs[1] += len(got[1])
    c1 = time.process_time()
    for m, s in enumerate(run.finish()):
        segs[m] += len(s)
    cpu += time.process_time() - c1
    return {"records": records, "ideal_superpackets": segs[0],
            "napi_superpackets": segs[1], "flows": int(run.ctr[fused.C_FLOWS]),
            "cpu_seconds": cpu, "with_scan_cpu_seconds": time.process_time() - c0}


def run_digest(path: str) -> float:
    """CPU seconds of the capture's digest over the mapped file (``capture.fingerprint``,
    what every run computes on a helper thread, from the scan's mapped windows): a
    complete single pass would pay it too."""
    from gropcap.capture import fingerprint
    buf = np.memmap(path, np.uint8, mode="r")
    c0 = time.process_time()
    h = fingerprint.new()
    for lo in range(0, len(buf), 1 << 24):
        h.update(memoryview(buf[lo:lo + (1 << 24)]))
    cpu = time.process_time() - c0
    del buf
    return cpu


def run_engine(path: str, engine: str = "fast") -> dict:
    """``gropcap analyze --format json --threads 1`` in this (warm) process: super-packets
    per model and CPU seconds. ``engine="reference"``: the plain-Python decoder and
    models (the same counts; nothing to compile)."""
    from gropcap.gro.config import GroConfig
    from gropcap.report.summary import report_dict
    from gropcap.run.core import analyze_run
    c0 = time.process_time()
    r = analyze_run([path], GroConfig(), threads=1, engine=engine, decoder=engine)
    doc = report_dict(r)
    cpu = time.process_time() - c0
    return {"ideal_superpackets": doc["models"]["ideal"]["superpackets_out"],
            "napi_superpackets": doc["models"]["napi"]["superpackets_out"],
            "records": doc["models"]["napi"]["packets_in"], "cpu_seconds": cpu}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="result JSON (default: print only)")
    args = ap.parse_args(argv)
    from gropcap.__main__ import arrow_pool, tune_malloc
    tune_malloc()
    arrow_pool()
    fused, engine, digest = [], [], []
    for r in range(args.rounds + 1):            # the first round warms both up
        f, g, d = run_fused(args.capture), run_engine(args.capture), run_digest(args.capture)
        if r:
            fused.append(f)
            engine.append(g)
            digest.append(d)
    f, g = fused[0], engine[0]
    same = all(f[k] == g[k] for k in ("records", "ideal_superpackets", "napi_superpackets"))
    fcpu = min(x["cpu_seconds"] for x in fused)
    gcpu = min(x["cpu_seconds"] for x in engine)
    res = {"capture": os.path.abspath(args.capture), "records": f["records"],
           "fused": f, "engine": g, "same_superpackets": same,
           "fused_ns_per_record": fcpu / f["records"] * 1e9,
           "fused_with_scan_ns_per_record": min(x["with_scan_cpu_seconds"] for x in fused)
           / f["records"] * 1e9,
           "engine_ns_per_record": gcpu / f["records"] * 1e9,
           "fused_pps": f["records"] / fcpu, "engine_pps": f["records"] / gcpu,
           "fused_cpu": [round(x["cpu_seconds"], 4) for x in fused],
           "engine_cpu": [round(x["cpu_seconds"], 4) for x in engine],
           "digest_ns_per_record": min(digest) / f["records"] * 1e9,
           "digest_cpu": [round(x, 4) for x in digest]}
    print(f"fused pass: {res['fused_ns_per_record']:6.1f} ns a record "
          f"({res['fused_pps'] / 1e6:.2f} M packets/s), both models; "
          f"{res['fused_with_scan_ns_per_record']:.1f} with the capture scan")
    print(f"digest:     {res['digest_ns_per_record']:6.1f} ns a record "
          f"(XXH3-128 of the file, on a helper thread in a run)")
    print(f"engine:     {res['engine_ns_per_record']:6.1f} ns a record "
          f"({res['engine_pps'] / 1e6:.2f} M packets/s), analyze --format json, warm "
          f"(one thread)")
    print(f"super-packets: ideal {f['ideal_superpackets']} / {g['ideal_superpackets']}, "
          f"napi {f['napi_superpackets']} / {g['napi_superpackets']} (fused / engine): "
          + ("equal" if same else "DIFFERENT"))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
