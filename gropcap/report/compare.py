"""Two analyses side by side: two captures, or one capture under two configurations.

Layer: two :class:`Analysis` objects -> a dict (`gropcap compare --format json`) and text.
Rows: per model the aggregation numbers, then the end reasons of the super-packets, each
with both values and the change. The configuration lines name only what differs.
"""

from __future__ import annotations

import io
import os

from gropcap.capture.fingerprint import matches
from gropcap.report.baseline import analysis_metrics

_ROWS = (("packets_in", "packets in"), ("superpackets", "super-packets out"),
         ("aggregation_ratio", "aggregation ratio"), ("largest_superpacket", "largest"),
         ("merged_packets", "merged packets"))


def _describe(analysis) -> dict:
    return {"files": [os.path.basename(i.path) for i in analysis.infos],
            "digests": [i.digest for i in analysis.infos],
            "config": analysis.config.to_dict()}


def same_bytes(a, b) -> bool | None:
    """Whether two analyses read the same capture bytes, file by file
    (``capture.fingerprint.matches``: a result of an earlier release, whose digest is a
    sha256, is checked by hashing ``b``'s file again); None when that cannot be told."""
    if len(a.infos) != len(b.infos):
        return False
    verdicts = [matches(x.digest, y.digest, y.path) for x, y in zip(a.infos, b.infos)]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _stages(analysis, model: str) -> dict | None:
    """Per-stage numbers when the configuration models the gro_cells stage
    (``tunnel_gro`` set): the stages ``run.memory.analyze`` ran (same engine, coalesced input
    taken into account)."""
    stages = getattr(analysis, "stages", {}).get(model)
    if not stages:
        return None
    from gropcap.gro.stages import stages_summary

    d = stages_summary(stages)
    cells = d["stages"].get("gro_cells", {})
    return {"native_out": d["stages"]["native"]["superpackets_out"],
            "gro_cells_in": cells.get("packets_in"), "gro_cells_out": cells.get("superpackets_out"),
            "delivered": d["delivered"], "overall_ratio": d["overall_ratio"]}


def compare_dict(a, b) -> dict:
    """``{"a": {...}, "b": {...}, "same_bytes": bool | None, "config_diff": {key: [a, b]},
    "metrics": {model: {...}}}`` (``same_bytes``: :func:`same_bytes`).

    ``metrics[model][name] = [a_value, b_value]`` for the aggregation numbers, and
    ``metrics[model]["end_reasons"][reason] = [a_count, b_count]``. Models run on one side
    only are listed with ``None`` on the other.
    """
    da, db = _describe(a), _describe(b)
    ca, cb = dict(da["config"]), dict(db["config"])
    ca.pop("model", None)
    cb.pop("model", None)
    diff = {k: [ca.get(k), cb.get(k)] for k in sorted(set(ca) | set(cb))
            if ca.get(k) != cb.get(k)}
    ma, mb = analysis_metrics(a), analysis_metrics(b)
    metrics = {}
    for model in list(dict.fromkeys(list(ma) + list(mb))):
        xa, xb = ma.get(model, {}), mb.get(model, {})
        row = {k: [xa.get(k), xb.get(k)] for k, _ in _ROWS}
        ra, rb = xa.get("end_reasons", {}), xb.get("end_reasons", {})
        names = sorted(set(ra) | set(rb), key=lambda r: (-max(ra.get(r, 0), rb.get(r, 0)), r))
        row["end_reasons"] = {r: [ra.get(r, 0), rb.get(r, 0)] for r in names}
        sa, sb = _stages(a, model), _stages(b, model)
        if sa or sb:
            row["stages"] = {k: [(sa or {}).get(k), (sb or {}).get(k)]
                             for k in ("native_out", "gro_cells_in", "gro_cells_out",
                                       "delivered", "overall_ratio")}
        metrics[model] = row
    return {"a": da, "b": db, "same_bytes": same_bytes(a, b), "config_diff": diff,
            "metrics": metrics}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _change(x, y) -> str:
    if x is None or y is None:
        return ""
    if x == y:
        return "="
    if not x:
        return "new"
    return f"{(y - x) / x * 100:+.1f}%"


def render_compare(a, b, *, labels=("A", "B"), width: int = 80, color: bool = False) -> str:
    """The comparison as text tables (what `gropcap compare` prints)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    d = compare_dict(a, b)
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="auto" if color else None,
                      force_terminal=color, highlight=False, markup=False)
    la, lb = labels
    for lab, side in ((la, d["a"]), (lb, d["b"])):
        console.print(f"{lab}: {', '.join(side['files'])} (kernel {side['config']['kernel']})")
    if d["config_diff"]:
        console.print("configuration differs: " + ", ".join(
            f"{k} {_fmt(x)} -> {_fmt(y)}" for k, (x, y) in d["config_diff"].items()))
    console.print({True: "same capture bytes", False: "different captures",
                   None: "capture bytes not compared (a digest is missing)"}[d["same_bytes"]])
    for model, row in d["metrics"].items():
        t = Table(title=f"{model}", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  title_justify="left", title_style=None)
        t.add_column("")
        t.add_column(la, justify="right")
        t.add_column(lb, justify="right")
        t.add_column("change", justify="right")
        for key, name in _ROWS:
            x, y = row[key]
            t.add_row(name, _fmt(x), _fmt(y), _change(x, y))
        for key, (x, y) in row.get("stages", {}).items():
            t.add_row(f"stage: {key.replace('_', ' ')}", _fmt(x), _fmt(y), _change(x, y))
        for r, (x, y) in row["end_reasons"].items():
            t.add_row(f"ended by {r}", str(x), str(y), _change(x, y))
        console.print()
        console.print(t)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["compare_dict", "render_compare"]
