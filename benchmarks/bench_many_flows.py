"""One process on a capture with many flows: the engine retiring idle flows
(``gro/retire.py``) against the same tree with retirement off, in the same run.

Each round runs ``gropcap analyze CAPTURE --format json --threads 1`` (plus ``--extra``)
twice, alternating: as installed, and with ``gro.retire.RETIRE_MIN`` set out of reach
in the child (the reference: every flow's tables kept until the end, as before). Each
child's wall time, peak RSS (``ru_maxrss``, which counts the capture's mapped pages) and
peak anonymous RSS (``RssAnon`` of ``/proc/PID/status``, sampled every ``--sample``
seconds) are recorded; the JSON summaries must be identical.

    python benchmarks/make_bench_capture.py --packets 3000000 --flows 600000 --out cap.pcap
    python benchmarks/bench_many_flows.py cap.pcap --rounds 2

Writes ``benchmarks/results/many-flows-<short sha>.json`` (or ``--out``), prints a table.
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
OFF = ("import sys; from gropcap.gro import retire; retire.RETIRE_MIN = 1 << 62; "
       "from gropcap.__main__ import main; sys.argv[0] = 'gropcap'; main()")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sample", type=float, default=0.2, help="RssAnon sampling (s)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more analyze options (last on the line)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    args = ["analyze", a.capture, "--format", "json", "--threads", "1", *a.extra]
    ways = {"retirement off (the reference)": [sys.executable, "-c", OFF, *args],
            "retiring idle flows (default)": [sys.executable, "-m", "gropcap", *args]}
    got: dict = {k: [] for k in ways}
    outs = {}
    for _ in range(a.rounds):
        for x, (name, cmd) in enumerate(ways.items()):
            path = f"/tmp/bench-many-flows-{os.getpid()}-{x}.json"
            got[name].append(run(cmd, path, a.sample))
            with open(path, "rb") as f:
                outs[name] = f.read()
            os.unlink(path)
    same = len(set(outs.values())) == 1
    summary = json.loads(next(iter(outs.values())))
    ref, new = (got[k] for k in ways)
    best = lambda runs, k: min(r[k] for r in runs)   # noqa: E731
    peak = lambda runs, k: max(r[k] for r in runs)   # noqa: E731
    res = {"benchmark": "many-flows", **provenance.commit(), "capture": a.capture,
           "capture_bytes": os.path.getsize(a.capture), "packets": summary["packets"],
           "command": args, "runs": got, "identical_json": same,
           "wall_ratio": round(best(ref, "wall_s") / best(new, "wall_s"), 2),
           "rss_ratio": round(peak(ref, "peak_rss_kib") / peak(new, "peak_rss_kib"), 2),
           "anon_ratio": round(peak(ref, "peak_anon_kib") / max(1, peak(new, "peak_anon_kib")),
                               2),
           "loadavg_after": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = a.out or os.path.join(HERE, "results", f"many-flows-{res['commit']}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    for name, runs in got.items():
        print(f"{name:34s} wall {best(runs, 'wall_s'):7.2f} s "
              f"(all {[r['wall_s'] for r in runs]})  peak RSS "
              f"{peak(runs, 'peak_rss_kib') // 1024:6d} MiB  RssAnon "
              f"{peak(runs, 'peak_anon_kib') // 1024:6d} MiB")
    print(f"JSON identical: {same}; reference / retiring: wall {res['wall_ratio']}x, "
          f"peak RSS {res['rss_ratio']}x, RssAnon {res['anon_ratio']}x; wrote {path}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
