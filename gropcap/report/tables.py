"""Arrow tables built from an Analysis: packets with verdicts, super-packets, flows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gropcap.gro.reasons import reason_name
from gropcap.io.columns import readable
from gropcap.run.accumulators import addr_text  # noqa: F401 (the name report used)


def _model_columns(result, prefix: str) -> dict[str, np.ndarray]:
    return {prefix + k: v for k, v in result.packet_columns().items()}


def packets_table(analysis) -> pa.Table:
    """Decoded packets plus GRO verdicts, with the readable columns of
    :func:`gropcap.io.columns.readable` (``reason_name``, ``ip_src_text``, ``ts_ns`` as a
    timestamp, ...).

    The primary model (napi when it ran) fills ``flow_id``, ``gro_seg``, ``gro_role``,
    ``reason``, ``rx_queue``, ``poll_id``; every other model adds the same columns prefixed
    with its name (``ideal_gro_seg``, ...).
    """
    table = analysis.decoded
    primary = analysis.primary_model
    cols = _model_columns(analysis.results[primary], "")
    for model, result in analysis.results.items():
        if model != primary:
            cols.update({k: v for k, v in _model_columns(result, model + "_").items()
                         if k != model + "_flow_id"})
    for name, arr in cols.items():
        table = table.append_column(name, pa.array(arr))
    return readable(table)


def superpackets_table(analysis) -> pa.Table:
    """All models' super-packets, a ``model`` column telling them apart, with the readable
    columns of :func:`gropcap.io.columns.readable` (``end_reason_name``)."""
    parts = []
    for model, result in analysis.results.items():
        t = result.superpackets_table()
        t = t.append_column("model", pa.array([model] * t.num_rows, pa.string()))
        parts.append(t)
    return readable(pa.concat_tables(parts))


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


__all__ = ["packets_table", "superpackets_table", "flows_table", "count_by_name", "addr_text"]
