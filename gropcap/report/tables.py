"""Tables the reports build from an Analysis: flows, reason histograms (the packets and
super-packets views are ``analysis.py``'s)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gropcap.gro.reasons import reason_name
from gropcap.run.accumulators import addr_text  # noqa: F401 (the name report used)


def flows_table(analysis) -> pa.Table:
    """One row per flow: keys, packets, super-packets and ratio per model, top end reason
    (``run.accumulators.FlowCounts.table`` of the analysis' totals)."""
    return analysis.totals.flows_table()


def count_by_name(codes: np.ndarray) -> dict[str, int]:
    """Histogram of reason codes keyed by reason name, most frequent first."""
    if not len(codes):
        return {}
    uniq, counts = np.unique(codes, return_counts=True)
    pairs = sorted(zip(counts.tolist(), uniq.tolist()), key=lambda p: (-p[0], p[1]))
    return {reason_name(c): n for n, c in pairs}


__all__ = ["flows_table", "count_by_name", "addr_text"]
