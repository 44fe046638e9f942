"""Egress accounting in bounded memory against the whole table in memory, in the same run.

``gropcap analyze CAPTURE --egress ... --format json`` ran in memory until egress was
counted batch by batch (``egress.EgressCounts``, ``run.stream.RowCodes``). The
reference is that path, still there as ``--no-stream``: each round runs both, one after
the other, and takes the least wall time and the peak RSS (``ru_maxrss`` of the child)
of each. Checks that the two JSON summaries are identical (``bench_bounded.compare``).

    python benchmarks/bench_egress.py /work/data/c5m.pcap --rounds 2
    python benchmarks/bench_egress.py CAP --egress decap --egress-mtu 1400

Writes ``benchmarks/results/egress-<short sha>.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse

from bench_bounded import compare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--egress", default="encap", choices=("encap", "decap"))
    ap.add_argument("--egress-features", default=None)
    ap.add_argument("--egress-mtu", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    options = ["--egress", a.egress]
    if a.egress_features:
        options += ["--egress-features", a.egress_features]
    if a.egress_mtu:
        options += ["--egress-mtu", str(a.egress_mtu)]
    compare(a.capture, options, a.rounds, a.out, name="egress",
            extra=lambda summary: {"egress": summary.get("egress")})


if __name__ == "__main__":
    main()
