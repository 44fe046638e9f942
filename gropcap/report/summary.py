"""Summaries of an Analysis: the JSON object of `gropcap analyze --format json` and the
terminal text."""

from __future__ import annotations

import io

import numpy as np

from gropcap import __version__
from gropcap.decode.schema import STATUS_NAMES
from gropcap.gro.reasons import REASONS, reason_name
from gropcap.report.tables import count_by_name


def model_summary(result) -> dict:
    """Counts for one model: packets in, super-packets out, ratio, reason histograms."""
    n_in = result.num_packets
    n_out = result.num_superpackets
    return {
        "packets_in": n_in,
        "superpackets_out": n_out,
        "aggregation_ratio": round(n_in / n_out, 4) if n_out else 0.0,
        "merged_packets": int(np.count_nonzero(result.reason == 0)),
        "largest_superpacket": int(result.seg_count.max()) if n_out else 0,
        "reasons": count_by_name(result.reason),
        "end_reasons": count_by_name(result.seg_end_reason),
    }


def summary_dict(analysis) -> dict:
    """The JSON summary: ``{"kernel", "models": {model: {...}}, ...}``."""
    packets = analysis.packets
    status = packets.column("status").to_numpy() if packets.num_rows else np.zeros(0, np.uint8)
    statuses = {STATUS_NAMES.get(int(s), str(int(s))): int(c)
                for s, c in zip(*np.unique(status, return_counts=True))}
    return {
        "gropcap": __version__,
        "kernel": analysis.config.kernel.name,
        "files": [{"path": i.path, "records": i.records, "sha256": i.sha256,
                   "warnings": list(i.warnings)} for i in analysis.infos],
        "packets": packets.num_rows,
        "wire_bytes": int(packets.column("wire_len").to_numpy().sum()) if packets.num_rows else 0,
        "status": statuses,
        "models": {m: model_summary(r) for m, r in analysis.results.items()},
    }


def render_text(analysis, *, top_flows: int = 5, width: int = 80, color: bool = False) -> str:
    """The terminal report as text (rich tables, no colour unless asked)."""
    from rich.console import Console
    from rich.table import Table

    s = summary_dict(analysis)
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="auto" if color else None,
                      force_terminal=color, highlight=False)
    files = ", ".join(f["path"] for f in s["files"])
    console.print(f"gropcap {__version__}: kernel {s['kernel']}, {s['packets']} packets, "
                  f"{s['wire_bytes']} bytes on the wire ({files})")
    for f in s["files"]:
        for w in f["warnings"]:
            console.print(f"warning: {w}")
    bad = {k: v for k, v in s["status"].items() if k != "OK"}
    if bad:
        console.print("decode status: " + ", ".join(f"{k} {v}" for k, v in bad.items()))

    t = Table(title="Aggregation", title_justify="left")
    t.add_column("model")
    t.add_column("packets in", justify="right")
    t.add_column("super-packets out", justify="right")
    t.add_column("ratio", justify="right")
    t.add_column("largest", justify="right")
    for m, ms in s["models"].items():
        t.add_row(m, str(ms["packets_in"]), str(ms["superpackets_out"]),
                  f"{ms['aggregation_ratio']:.2f}", str(ms["largest_superpacket"]))
    console.print(t)

    primary = analysis.primary_model
    ms = s["models"][primary]
    t = Table(title=f"Why super-packets ended ({primary})", title_justify="left")
    t.add_column("reason")
    t.add_column("count", justify="right")
    t.add_column("meaning")
    codes = {r.name: r for r in REASONS.values()}
    for name, count in ms["end_reasons"].items():
        t.add_row(name, str(count), codes[name].text if name in codes else "")
    console.print(t)

    flows = analysis.flows
    if flows.num_rows:
        ratio = flows.column(f"{primary}_ratio").to_numpy()
        pk = flows.column("packets").to_numpy()
        # flows that lose most: most super-packets beyond the ideal of one per 45 segments
        loss = flows.column(f"{primary}_superpackets").to_numpy()
        order = np.lexsort((np.arange(len(pk)), -loss))[:top_flows]
        t = Table(title=f"Flows with the most super-packets ({primary})", title_justify="left")
        for col in ("flow", "endpoints", "pkts", "ratio", "top end reason"):
            t.add_column(col, justify="right" if col in ("flow", "pkts", "ratio") else "left")
        src = flows.column("src").to_pylist()
        dst = flows.column("dst").to_pylist()
        sp = flows.column("sport").to_pylist()
        dp = flows.column("dport").to_pylist()
        top = flows.column(f"{primary}_top_reason").to_pylist()
        for i in order.tolist():
            ends = f"{src[i]}:{sp[i]} > {dst[i]}:{dp[i]}" if src[i] else "(not IP)"
            t.add_row(str(i), ends, str(int(pk[i])), f"{ratio[i]:.2f}", top[i])
        console.print(t)
    return buf.getvalue()


__all__ = ["summary_dict", "render_text", "model_summary", "reason_name"]
