"""The report of a run: the JSON object of ``gropcap analyze --format json`` (the summary
of ``run/summary.py`` plus ``top_flows``) and the terminal text, one function per section."""

from __future__ import annotations

import io
import os
import textwrap

import numpy as np
import pyarrow as pa

from gropcap.arrays import batch_column, slices
from gropcap.gro.reasons import REASONS


def top_flows(flows, model: str, n: int) -> dict:
    """The ``n`` flows with the most super-packets in ``model``: ``{"total": flows,
    "shown": k, "flows": [{"flow_id", "src", "sport", "dst", "dport", "l4_proto",
    "packets", "payload_bytes", "superpackets", "aggregation_ratio", "top_end_reason"}]}``,
    ties in flow order. Works on any flows table (in memory, streamed or loaded)."""
    total, n = flows.num_rows, max(n, 0)
    if not total:
        return {"total": 0, "shown": 0, "flows": []}
    # the top n of each slice, then of those: a table of any size in bounded memory
    ids, segs = [], []
    for off, batch in slices(flows):
        s = batch_column(batch, f"{model}_superpackets")
        best = np.lexsort((np.arange(len(s)), -s))[:n]
        ids.append(best + off)
        segs.append(s[best])
    ids, segs = np.concatenate(ids), np.concatenate(segs)
    order = np.lexsort((ids, -segs))[:n]
    ids, segs = ids[order], segs[order]
    # row by row: a take over a chunked table concatenates its chunks (every page of a
    # table mapped from disk, and a copy)
    picked = pa.concat_tables([flows.slice(i, 1) for i in ids.tolist()]) \
        if len(ids) else flows.slice(0, 0)
    cols = {k: picked.column(k).to_pylist() for k in
            ("src", "sport", "dst", "dport", "l4_proto", "packets", "payload_bytes",
             f"{model}_ratio", f"{model}_top_reason")}
    rows = [{"flow_id": int(i), "src": cols["src"][j], "sport": cols["sport"][j],
             "dst": cols["dst"][j], "dport": cols["dport"][j],
             "l4_proto": cols["l4_proto"][j], "packets": cols["packets"][j],
             "payload_bytes": cols["payload_bytes"][j], "superpackets": int(segs[j]),
             "aggregation_ratio": round(cols[f"{model}_ratio"][j], 4),
             "top_end_reason": cols[f"{model}_top_reason"][j]}
            for j, i in enumerate(ids.tolist())]
    return {"total": total, "shown": len(rows), "flows": rows}


def report_dict(analysis, *, top: int = 5) -> dict:
    """What `gropcap analyze --format json` prints: the summary plus ``top_flows`` (the
    ``top`` flows with the most super-packets in the primary model, with their probable
    cause when the packet columns are at hand). ``analysis``: an :class:`Analysis` or a
    streamed result (anything with ``summary()`` or ``summary``, ``flows`` and
    ``primary_model``)."""
    s = _summary_of(analysis)
    tf = top_flows(analysis.flows, analysis.primary_model, top)
    # per flow, the probable cause of its breaks: a streamed run's, or the one an
    # in-memory analysis keeps (Analysis.flow_causes; None without GRO results)
    causes = getattr(analysis, "flow_causes", None)
    for row in tf["flows"]:
        row["probable_cause"] = causes[row["flow_id"]] if causes else None
    return {**s, "top_flows": {"model": analysis.primary_model, **tf}}


def _summary_of(analysis) -> dict:
    """The summary of an :class:`Analysis` (``summary()``) or of a streamed result (its
    ``summary`` dict, already rendered from its totals)."""
    return analysis.summary() if callable(getattr(analysis, "summary", None)) \
        else dict(analysis.summary)


def _ep(addr: str, port: int) -> str:
    """``a.b.c.d:port`` or ``[v6]:port``."""
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def human_bytes(n: int) -> str:
    """Byte count in SI units, 3 significant digits.

    >>> human_bytes(999), human_bytes(2855269), human_bytes(1_500_000_000)
    ('999 B', '2.86 MB', '1.50 GB')
    """
    n = int(n)
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if v >= 100 else f"{v:.2f} {unit}" if v < 10 \
                else f"{v:.1f} {unit}"
    return f"{n} B"


# --- the text report: one function per section, in the order render_text prints them ----
# Each takes the summary dict ``s`` (and what else it needs) and prints to ``out``, a
# _Out; a section with nothing to show prints nothing.

class _Out:
    """A rich console plus the table style of the report."""

    def __init__(self, width: int, color: bool):
        from functools import partial

        from rich import box
        from rich.console import Console
        from rich.table import Table as RichTable

        self.buf = io.StringIO()
        self.width = width
        self.console = Console(file=self.buf, width=width,
                               color_system="auto" if color else None, force_terminal=color,
                               highlight=False, markup=False)
        # light rules, no heavy borders: readable at 80 columns and when piped
        self.Table = partial(RichTable, box=box.SIMPLE_HEAD, title_justify="left",
                             title_style=None, header_style="bold" if color else None,
                             pad_edge=False, show_edge=False)

    def print(self, *args, **kw):
        self.console.print(*args, **kw)

    def table(self, t):
        """A blank line, the title on its own line (never wrapped to the table's
        width), the table."""
        self.console.print()
        if t.title:
            self.console.print(t.title, soft_wrap=True)
            t.title = None
        self.console.print(t)

    def note(self, text: str):
        """An indented, wrapped explanation under a table."""
        for line in textwrap.wrap(text, width=self.width - 2, initial_indent="  ",
                                  subsequent_indent="    ", break_on_hyphens=False):
            self.console.print(line)

    def text(self) -> str:
        return "".join(line.rstrip() + "\n" for line in self.buf.getvalue().splitlines())


def _section_header(out: _Out, s: dict) -> None:
    paths = [f["path"] for f in s["files"]]
    dirs = {os.path.dirname(p) for p in paths}
    if len(paths) > 1 and len(dirs) == 1:
        # the per-file table names each one
        files = f"{len(paths)} files in {dirs.pop() or '.'}"
    else:
        files = ", ".join(paths)
    out.print(f"gropcap {s['gropcap']}: kernel {s['kernel']}, {s['packets']} packets, "
              f"{human_bytes(s['wire_bytes'])} on the wire")
    out.print(f"capture: {files}", soft_wrap=True)
    inputs = s.get("inputs")
    if inputs and inputs["files"] > 1:
        # several files: one receiver's timeline or separate receivers (--captures)
        import textwrap
        for line in textwrap.wrap(f"inputs: {inputs['text']}", out.width,
                                  subsequent_indent="  ", break_on_hyphens=False):
            out.print(line)


def _section_receive(out: _Out, s: dict) -> None:
    """The receive context: the MTU and its evidence, each parameter's source."""
    from gropcap.report import receive
    for line in receive.receive_lines(s, out.width):
        out.print(line)
    for f in s["files"]:
        for w in f["warnings"]:
            out.print(f"warning: {w}")
    bad = {k: v for k, v in s["status"].items() if k != "OK"}
    if bad:
        out.print("decode status: " + ", ".join(f"{k} {v}" for k, v in bad.items()))
    for w in s["warnings"]:
        out.print(f"warning: {w}")


def _section_headline(out: _Out, s: dict, primary: str) -> None:
    """The data-direction ratio first: pure ACKs are never aggregated and would hide it."""
    ms = s["models"][primary]
    if "data_ratio" not in ms:
        return
    others = ", ".join(f"{m} {v['data_ratio']:.2f}" for m, v in s["models"].items()
                       if m != primary)
    out.print()
    out.print(f"data direction: {ms['data_ratio']:.2f} segments per super-packet "
              f"({primary}{'; ' + others if others else ''}); all packets including pure "
              f"ACKs: {ms['aggregation_ratio']:.2f}")


def _section_aggregation(out: _Out, s: dict) -> None:
    data = all("data_ratio" in ms for ms in s["models"].values())
    t = out.Table(title="Aggregation")
    t.add_column("model")
    if data:
        t.add_column("data ratio", justify="right")
    t.add_column("ratio", justify="right")
    t.add_column("packets in", justify="right")
    t.add_column("super-packets out", justify="right")
    t.add_column("largest", justify="right")
    for m, ms in s["models"].items():
        t.add_row(m, *([f"{ms['data_ratio']:.2f}"] if data else []),
                  f"{ms['aggregation_ratio']:.2f}", str(ms["packets_in"]),
                  str(ms["superpackets_out"]), str(ms["largest_superpacket"]))
    out.table(t)
    out.note(("data ratio: segments carrying payload per super-packet carrying payload; "
              if data else "") +
             "ratio: every packet in (pure ACKs included) per super-packet out; largest: "
             "segments in the largest super-packet")


def _section_context_dependence(out: _Out, s: dict, analysis) -> None:
    """How much of the napi answer the receive context decides, and UDP tunnels that met
    no tunnel socket (with what the matching --udp-tunnel gives)."""
    from gropcap.report import receive
    from gropcap.run.hints import tunnel_hint
    for line in (receive.dependence_lines(s, out.width)
                 + receive.tunnel_lines(tunnel_hint(analysis), out.width)):
        out.print(line)


def _section_files(out: _Out, s: dict) -> None:
    """One row per input file when there are several (a directory argument)."""
    files = s["files"]
    if len(files) < 2 or not all("models" in f for f in files):
        return
    models = list(s["models"])
    t = out.Table(title=f"Per file ({len(files)} files)")
    t.add_column("file", overflow="fold")
    t.add_column("packets", justify="right")
    t.add_column("bytes", justify="right")
    for m in models:
        t.add_column(f"{m} data / all", justify="right")
    for f in files:
        cells = [f"{f['models'][m]['data_ratio']:.2f} / "
                 f"{f['models'][m]['aggregation_ratio']:.2f}" for m in models]
        t.add_row(os.path.basename(f["path"]), str(f["packets"]),
                  human_bytes(f["wire_bytes"]), *cells)
    out.table(t)
    out.note("data / all: the data ratio and the ratio of every packet, as above; a "
             "super-packet counts for the file of its first packet")


_ENDS_WIDTH = 36   # the endpoints column: IPv4 endpoints fit on one line at 80 columns


def _section_flows(out: _Out, flows, primary: str, top: int, causes) -> None:
    """The flows with the most super-packets; under each flow's endpoints, its most
    frequent end reason and (packet columns at hand) the probable cause of its breaks."""
    tf = top_flows(flows, primary, top)
    if not tf["shown"]:
        return
    more = "; --top N shows more" if tf["shown"] < tf["total"] else ""
    t = out.Table(title=f"Flows with the most super-packets ({primary}): "
                        f"{tf['shown']} of {tf['total']}{more}")
    for col in ("flow", "endpoints / top end reason", "pkts in", "super-pkts", "ratio"):
        t.add_column(col, justify="left" if col.startswith("endpoints") else "right")
    for r in tf["flows"]:
        ends = (f"{_ep(r['src'], r['sport'])} > {_ep(r['dst'], r['dport'])}" if r["src"]
                else "(not IP)")
        why = r["top_end_reason"]
        if causes and causes[r["flow_id"]]:
            why += f"; {causes[r['flow_id']]}"
        # IPv6 endpoints: destination under the source; the reason indented under them,
        # wrapped to the column's width (rich would not indent)
        if len(ends) > _ENDS_WIDTH:
            ends = ends.replace(" > ", " >\n", 1)
        width = max(_ENDS_WIDTH, *(len(x) for x in ends.splitlines()))
        why = "\n".join(textwrap.wrap(why, width=width, initial_indent="  ",
                                      subsequent_indent="  ", break_on_hyphens=False))
        t.add_row(str(r["flow_id"]), f"{ends}\n{why}", str(r["packets"]),
                  str(r["superpackets"]), f"{r['aggregation_ratio']:.2f}")
    out.table(t)


def _section_reasons(out: _Out, s: dict, primary: str) -> None:
    ms = s["models"][primary]
    t = out.Table(title=f"Why super-packets ended ({primary})")
    t.add_column("reason")
    t.add_column("count", justify="right")
    t.add_column("share", justify="right")
    total = sum(ms["end_reasons"].values()) or 1
    for name, count in ms["end_reasons"].items():
        t.add_row(name, str(count), f"{100 * count / total:.1f}%")
    out.table(t)
    codes = {r.name: r for r in REASONS.values()}
    for name in ms["end_reasons"]:
        if name in codes:
            out.note(f"{name}: {codes[name].text}")


def _section_encapsulations(out: _Out, s: dict) -> None:
    if not len(s["encapsulations"]):
        return
    t = out.Table(title="Per encapsulation")
    t.add_column("encapsulation")
    t.add_column("packets", justify="right")
    for m in s["models"]:
        t.add_column(f"{m} ratio", justify="right")
    for name, row in s["encapsulations"].items():
        t.add_row(name, str(row["packets"]),
                  *[f"{row[m]['aggregation_ratio']:.2f}" for m in s["models"]])
    out.table(t)


def _section_stages(out: _Out, s: dict) -> None:
    if "stages" not in s:
        return
    t = out.Table(title="GRO stages (segments in, super-packets out)")
    for col in ("model", "stage", "rows in", "segments in", "out", "ratio"):
        t.add_column(col, justify="left" if col in ("model", "stage") else "right")
    for m, st in s["stages"].items():
        for name, row in st["stages"].items():
            t.add_row(m, name, str(row["packets_in"]), str(row["segments_in"]),
                      str(row["superpackets_out"]), f"{row['ratio']:.2f}")
        t.add_row(m, "to the stack", "", str(s["packets"]), str(st["delivered"]),
                  f"{st['overall_ratio']:.2f}")
    out.table(t)


def _section_egress(out: _Out, s: dict) -> None:
    """Segments out = hardware + software + as is; dropped super-packets send none."""
    if "egress" not in s:
        return
    t = out.Table(title="Egress segmentation")
    for col in ("model", "scenario", "super-pkts", "segments", "hardware", "software",
                "as is", "dropped"):
        t.add_column(col, justify="left" if col in ("model", "scenario") else "right")
    for m, e in s["egress"].items():
        t.add_row(m, e["scenario"], str(e["superpackets"]), str(e["segments"]),
                  str(e["hardware_segments"]), str(e["software_segments"]),
                  str(e["unsegmented"]), str(e["dropped"]))
    out.table(t)
    out.note("segments = hardware (TSO/USO) + software (GSO) + as is (super-packets of one "
             "packet, sent unchanged); dropped counts super-packets above the egress MTU "
             "with DF (or IPv6), which put no segment on the wire")


def render_text(analysis, *, top_flows: int = 5, width: int = 80, color: bool = False) -> str:
    """The terminal report as text (rich tables, no colour unless asked) of an
    :class:`Analysis` or a streamed result (anything :func:`report_dict` takes).

    Sections, in order: capture and warnings; the receive context (MTU, where each
    parameter came from); the data-direction ratio; aggregation per model, how much of
    the napi answer the receive context decides and UDP tunnels without a socket; per file (several inputs); the ``top_flows`` flows with the most super-packets;
    why super-packets ended; per encapsulation; GRO stages; egress.
    """
    s = _summary_of(analysis)
    primary = analysis.primary_model
    out = _Out(width, color)
    _section_header(out, s)
    _section_receive(out, s)
    _section_headline(out, s, primary)
    _section_aggregation(out, s)
    _section_context_dependence(out, s, analysis)
    _section_files(out, s)
    _section_flows(out, analysis.flows, primary, top_flows,
                   getattr(analysis, "flow_causes", None))
    _section_reasons(out, s, primary)
    _section_encapsulations(out, s)
    _section_stages(out, s)
    _section_egress(out, s)
    return out.text()


__all__ = ["render_text", "report_dict", "top_flows", "human_bytes"]
