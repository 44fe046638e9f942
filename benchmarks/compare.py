"""Compare two benchmark results (benchmarks/results/<sha>.json): throughput and memory.

Prints one line per metric: old, new, new/old. With ``--fail-below R`` the exit status is 1
when any packets/s metric fell below ``R`` times its old value (a CI regression gate);
peak RSS growing by more than 1/R is a failure too. Results from different captures are
compared only with ``--force`` (packets/s depends on the traffic).

    python benchmarks/compare.py benchmarks/results/abc1234.json benchmarks/results/def5678.json
"""

from __future__ import annotations

import argparse
import json
import sys

# (label, path in the result document, higher is better)
METRICS = [
    ("reference decode pkt/s", ("stages", "reference_decode", "pps"), True),
    ("fast scan+decode pkt/s", ("stages", "fast_decode", "pps"), True),
    ("fast decode only pkt/s", ("stages", "fast_decode", "decode_only_pps"), True),
    ("fast scan+decode MB/s", ("stages", "fast_decode", "mb_per_s"), True),
    ("GRO ideal pkt/s", ("stages", "gro_engine", "ideal", "pps"), True),
    ("GRO napi pkt/s", ("stages", "gro_engine", "napi", "pps"), True),
    ("analyze (fast lib) pkt/s", ("stages", "analyze_fast", "pps"), True),
    ("analyze (CLI) pkt/s", ("stages", "analyze_cli", "pps"), True),
    ("fast decode peak RSS MB", ("stages", "fast_decode", "peak_rss_mb"), False),
    ("GRO peak RSS MB", ("stages", "gro_engine", "peak_rss_mb"), False),
    ("analyze (fast lib) RSS MB", ("stages", "analyze_fast", "peak_rss_mb"), False),
    ("analyze (CLI) peak RSS MB", ("stages", "analyze_cli", "peak_rss_mb"), False),
    ("warm start s", ("stages", "warm_start", "second_run", "process_seconds"), False),
]


def get(doc, path):
    """Value at ``path`` in nested dicts, or None."""
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc if isinstance(doc, (int, float)) else None


def compare(old: dict, new: dict, fail_below: float | None = None) -> tuple[list[str], bool]:
    """Report lines and whether a regression beyond ``fail_below`` was found."""
    lines = [f"{'metric':28} {'old':>14} {'new':>14} {'new/old':>8}",
             f"{'':28} {old.get('commit', '?'):>14} {new.get('commit', '?'):>14}"]
    bad = False
    for label, path, higher in METRICS:
        a, b = get(old, path), get(new, path)
        if a is None or b is None:
            lines.append(f"{label:28} {_fmt(a):>14} {_fmt(b):>14} {'-':>8}")
            continue
        r = b / a if a else float("inf")
        flag = ""
        if fail_below is not None:
            worse = r < fail_below if higher else (a > 0 and a / b < fail_below if b else False)
            if worse:
                bad, flag = True, "  REGRESSION"
        lines.append(f"{label:28} {_fmt(a):>14} {_fmt(b):>14} {r:8.2f}{flag}")
    return lines, bad


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--fail-below", type=float, default=None,
                    help="exit 1 if a packets/s metric drops below this ratio (e.g. 0.9)")
    ap.add_argument("--force", action="store_true", help="compare different captures")
    a = ap.parse_args(argv)
    with open(a.old) as fh:
        old = json.load(fh)
    with open(a.new) as fh:
        new = json.load(fh)
    co, cn = old.get("capture", {}), new.get("capture", {})
    if (co.get("records"), co.get("bytes")) != (cn.get("records"), cn.get("bytes")):
        msg = (f"captures differ: {co.get('records')} records/{co.get('bytes')} bytes vs "
               f"{cn.get('records')}/{cn.get('bytes')}")
        if not a.force:
            print(msg + " (use --force to compare anyway)", file=sys.stderr)
            return 2
        print("warning: " + msg, file=sys.stderr)
    lines, bad = compare(old, new, a.fail_below)
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
