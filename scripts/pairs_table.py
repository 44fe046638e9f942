"""Print, for each recorded pair, the kernel's packet count next to the models'.

    python scripts/pairs_table.py [DIR]        # default: sample_pcaps/pairs

Columns: pair, frames of the wire view, frames of the post-GRO view (the kernel's count),
then the ideal model and the napi model with its defaults (the pair's receiver settings:
queues, HZ, gro_flush_timeout, napi_defer_hard_irqs, UDP sockets), each with its
difference from the kernel. Where every pair carries the kernel's poll sequence
(``kernel_polls.work_sequence``, e.g. sample_pcaps/pairs/set2), a last column gives the napi
model polling exactly as the kernel did (``count_pair(..., kernel_polls=True)``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gropcap.replay.pairs import count_pair, find_pairs, format_table


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / \
        "sample_pcaps" / "pairs"
    pairs = find_pairs(directory)
    rows = [count_pair(p, {"ideal": p.config(model="ideal"), "napi": p.config(model="napi")})
            for p in pairs]
    if pairs and all(p.meta.get("kernel_polls", {}).get("work_sequence") for p in pairs):
        for r, p in zip(rows, pairs):
            r.models["kernel's polls"] = count_pair(
                p, {"k": p.config(model="napi", poll_gap_ns=0)}, kernel_polls=True).models["k"]
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
