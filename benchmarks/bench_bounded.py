"""A bounded-memory run against the whole table in memory, in the same run.

``gropcap analyze CAPTURE --format json OPTIONS`` both ways: the in-memory path
(``--no-stream``, the reference) and the default bounded-memory core. Each round runs
both, one after the other; the least wall time and the peak RSS (``ru_maxrss`` of the
child) of each are kept, and the two JSON summaries must be identical. For an option
that ran in memory until the core ran it batch by batch (``--poll-acks``, ``--plot``,
``--egress``: ``bench_egress.py``).

    python benchmarks/bench_bounded.py /work/data/c2m.pcap --rounds 2 -- --poll-acks

Writes ``benchmarks/results/bounded-<short sha>.json`` (or ``--out``) and prints a table.
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


def compare(capture: str, options: list[str], rounds: int, out: str | None,
            name: str = "bounded", extra=None) -> dict:
    """Run both ways ``rounds`` times; write and print the result; exit 1 when the JSON
    differs. ``extra(summary)``: more fields for the result."""
    run_out = f"/tmp/bench-{name}-{os.getpid()}.json"
    base = [sys.executable, "-m", "gropcap", "analyze", capture, "--format", "json",
            *options]
    ways = {"in memory (--no-stream, the reference)": base + ["--no-stream"],
            "bounded (default)": base}
    got: dict = {k: {"wall_s": [], "peak_rss_kib": []} for k in ways}
    outs = {}
    for _ in range(rounds):
        for way, cmd in ways.items():
            r = run(cmd, run_out, 0.2)
            got[way]["wall_s"].append(r["wall_s"])
            got[way]["peak_rss_kib"].append(r["peak_rss_kib"])
            with open(run_out, "rb") as f:
                outs[way] = f.read()
    same = len(set(outs.values())) == 1
    summary = json.loads(next(iter(outs.values())))
    ref, new = (got[k] for k in ways)
    res = {"benchmark": name, **provenance.commit(), "capture": capture,
           "capture_bytes": os.path.getsize(capture), "options": options,
           "packets": summary["packets"], **(extra(summary) if extra else {}),
           "runs": got, "identical_json": same,
           "wall_ratio": round(min(ref["wall_s"]) / min(new["wall_s"]), 2),
           "rss_ratio": round(max(ref["peak_rss_kib"]) / max(new["peak_rss_kib"]), 2),
           "loadavg_after": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.unlink(run_out)
    path = out or os.path.join(HERE, "results", f"{name}-{res['commit']}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    for way, g in got.items():
        print(f"{way:40s} wall {min(g['wall_s']):7.2f} s (all {g['wall_s']})  "
              f"peak RSS {max(g['peak_rss_kib']) // 1024:6d} MiB")
    print(f"JSON identical: {same}; in memory / bounded: wall {res['wall_ratio']}x, "
          f"peak RSS {res['rss_ratio']}x; wrote {path}")
    if not same:
        sys.exit(1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])       # after --: `gropcap analyze` options, both ways
    compare(a.capture, argv[cut + 1:], a.rounds, a.out)


if __name__ == "__main__":
    main()
