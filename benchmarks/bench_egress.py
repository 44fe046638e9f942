"""Egress accounting in bounded memory against the whole table in memory, in the same run.

``gropcap analyze CAPTURE --egress ... --format json`` ran in memory until egress was
counted batch by batch (``egress.EgressCounts``, ``run.stream.RowCodes``). The
reference is that path, still there as ``--no-stream``: each round runs both, one after
the other, and takes the least wall time and the peak RSS (``ru_maxrss`` of the child)
of each. Checks that the two JSON summaries are identical.

    python benchmarks/bench_egress.py /work/data/c5m.pcap --rounds 2
    python benchmarks/bench_egress.py CAP --egress decap --egress-mtu 1400

Writes ``benchmarks/results/egress-<short sha>.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import provenance
from child import run

HERE = os.path.dirname(os.path.abspath(__file__))


RUN_OUT = f"/tmp/bench-egress-{os.getpid()}.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--egress", default="encap", choices=("encap", "decap"))
    ap.add_argument("--egress-features", default=None)
    ap.add_argument("--egress-mtu", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = [sys.executable, "-m", "gropcap", "analyze", a.capture, "--format", "json",
            "--egress", a.egress]
    if a.egress_features:
        base += ["--egress-features", a.egress_features]
    if a.egress_mtu:
        base += ["--egress-mtu", str(a.egress_mtu)]
    ways = {"in memory (--no-stream, the reference)": base + ["--no-stream"],
            "bounded (default)": base}
    got: dict = {k: {"wall_s": [], "peak_rss_kib": []} for k in ways}
    outs = {}
    for _ in range(a.rounds):
        for name, cmd in ways.items():
            r = run(cmd, RUN_OUT, 0.2)
            got[name]["wall_s"].append(r["wall_s"])
            got[name]["peak_rss_kib"].append(r["peak_rss_kib"])
            with open(RUN_OUT, "rb") as f:
                outs[name] = f.read()
    same = len(set(outs.values())) == 1
    summary = json.loads(next(iter(outs.values())))
    ref, new = (got[k] for k in ways)
    res = {"benchmark": "egress", **provenance.commit(), "capture": a.capture,
           "capture_bytes": os.path.getsize(a.capture), "packets": summary["packets"],
           "egress": summary.get("egress"), "runs": got, "identical_json": same,
           "wall_ratio": round(min(ref["wall_s"]) / min(new["wall_s"]), 2),
           "rss_ratio": round(max(ref["peak_rss_kib"]) / max(new["peak_rss_kib"]), 2),
           "loadavg_after": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.unlink(RUN_OUT)
    path = a.out or os.path.join(HERE, "results", f"egress-{res['commit']}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    for name, g in got.items():
        print(f"{name:40s} wall {min(g['wall_s']):7.2f} s (all {g['wall_s']})  "
              f"peak RSS {max(g['peak_rss_kib']) // 1024:6d} MiB")
    print(f"JSON identical: {same}; in memory / bounded: wall {res['wall_ratio']}x, "
          f"peak RSS {res['rss_ratio']}x; wrote {path}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
