"""Summaries of an Analysis: the JSON object of `gropcap analyze --format json` and the
terminal text."""

from __future__ import annotations

import io
import textwrap

import numpy as np
import pyarrow as pa

from gropcap import __version__
from gropcap.decode.schema import STATUS_NAMES
from gropcap.gro.reasons import REASONS, reason_name
from gropcap.report.tables import count_by_name


def model_summary(result, segments=None) -> dict:
    """Counts for one model: packets in, segments in, super-packets out, ratio, reason
    histograms.

    ``segments``: wire segments per row when frames were captured already coalesced
    (``gso.CoalescedInput.segs``); then ``segments_in`` exceeds ``packets_in`` (the row
    count) and the aggregation ratio is ``segments_in / superpackets_out``: how many wire
    segments the stack receives per packet, the same measure as for plain captures.
    """
    n_in = result.num_packets
    n_out = result.num_superpackets
    seg_in = int(np.asarray(segments, np.int64).sum()) if segments is not None else n_in
    return {
        "packets_in": n_in,
        "segments_in": seg_in,
        "superpackets_out": n_out,
        "aggregation_ratio": round(seg_in / n_out, 4) if n_out else 0.0,
        "merged_packets": int(np.count_nonzero(result.reason == 0)),
        "largest_superpacket": int(result.seg_count.max()) if n_out else 0,
        "reasons": count_by_name(result.reason),
        "end_reasons": count_by_name(result.seg_end_reason),
    }


def mtu_of(analysis):
    """The analysis' :class:`gropcap.mtu.MtuInference` (worked out from its decoded table
    when the analysis was made without one)."""
    if getattr(analysis, "mtu", None) is None:
        from gropcap.gso import CoalescedStats
        stats = CoalescedStats(analysis.config.mtu)
        stats.add(analysis.decoded)
        analysis.mtu = stats.mtu_inference()
    return analysis.mtu


def capture_warnings(analysis) -> list[str]:
    """Plain-English warnings about the capture that change how to read the results.

    Conflicting MTU evidence (:mod:`gropcap.mtu`), pre-coalesced input (frames with more
    IP bytes than the receiving device's MTU, IPv4 total length 0, or the pcapng
    TCP-segmentation-offload flag), offload-partial checksums
    (``l4_csum_state == CSUM_PARTIAL``), headers cut by the snap length, checksums that
    cannot be verified under ``--verify-checksums``, and TCP flows seen in one direction
    only.
    """
    from gropcap.constants import EPB_FLAG_TCP_SEG_OFFLOAD, IPPROTO_TCP
    from gropcap.decode.schema import CSUM_PARTIAL, STATUS_TRUNCATED

    t = analysis.decoded
    out: list[str] = []
    if not t.num_rows:
        return out
    mtu = mtu_of(analysis)
    if mtu.conflict:
        out.append(mtu.conflict)

    def col(name):
        return t.column(name).to_numpy()

    outer = col("outer_ip_version") != 0
    ver = np.where(outer, col("outer_ip_version"), col("ip_version"))
    tot = np.where(outer, col("outer_ip_tot_len"), col("ip_tot_len")).astype(np.int64)
    big = (ver != 0) & (tot > mtu.mtu)
    zero_len = (ver == 4) & (tot == 0)
    tso = (col("epb_flags") & EPB_FLAG_TCP_SEG_OFFLOAD) != 0
    pre = big | zero_len | tso
    co = getattr(analysis, "coalesced", None)
    if pre.any():
        largest = int(col("wire_len")[pre].max())
        text = (f"{int(pre.sum())} frames are already coalesced (more IP bytes than the "
                f"{mtu.mtu}-byte MTU, IPv4 total length 0 or the pcapng TSO flag; "
                f"largest {largest} bytes): captured after GRO/TSO or on a jumbo MTU, "
                f"so the capture does not show the segments on the wire")
        if co is not None and co.num_coalesced:
            sizes = np.unique(co.gso_size[co.is_gso])
            shown = ", ".join(str(int(x)) for x in sizes[:4]) + (", ..." if len(sizes) > 4
                                                                 else "")
            text += (f"; {co.num_coalesced} TCP frames are treated as arriving GSO packets "
                     f"of {int(co.segs[co.is_gso].sum())} segments with the gso_size "
                     f"inferred from their flow ({shown} bytes: SYN MSS, else the most "
                     f"common full segment)")
        out.append(text)
    partial = col("l4_csum_state") == CSUM_PARTIAL
    if partial.any():
        out.append(f"{int(partial.sum())} TCP/UDP checksums hold only the pseudo-header sum "
                   f"(offload partial: captured on the sending host)")
    cut = col("status") == STATUS_TRUNCATED
    if cut.any():
        out.append(f"{int(cut.sum())} frames are cut by the snap length inside their "
                   f"headers: GRO cannot compare them (BYPASS_DECODE); capture with a "
                   f"larger snap length (tcpdump -s)")
    if analysis.config.verify_checksums:
        short = (col("cap_len") < col("wire_len")) & (col("l4_proto") != 0)
        if short.any():
            out.append(f"{int(short.sum())} frames are cut by the snap length: their "
                       f"TCP/UDP checksums cannot be verified")
    flows = analysis.flows
    if flows.num_rows:
        proto = flows.column("l4_proto").to_pylist()
        keys = list(zip(flows.column("src").to_pylist(), flows.column("sport").to_pylist(),
                        flows.column("dst").to_pylist(), flows.column("dport").to_pylist()))
        # TCP flows with ports (a header cut before the ports leaves them 0)
        tcp = [bool(p == IPPROTO_TCP and (k[1] or k[3])) for k, p in zip(keys, proto)]
        present = {k for k, t in zip(keys, tcp) if t}
        one_way = [i for i, (k, t) in enumerate(zip(keys, tcp))
                   if t and (k[2], k[3], k[0], k[1]) not in present]
        if one_way:
            n_tcp = sum(tcp)
            a, ap, b, bp = keys[one_way[0]]
            out.append(f"{len(one_way)} of {n_tcp} TCP flows are seen in one direction only "
                       f"(e.g. flow {one_way[0]}, {a}:{ap} > {b}:{bp}): a filtered, mirrored "
                       f"or asymmetric capture")
    return out


def encap_summary(analysis) -> dict[str, dict]:
    """Per encapsulation (``encap`` string): packets, and super-packets and ratio per model.

    A super-packet counts under the encapsulation of its first packet.
    """
    t = analysis.decoded
    if not t.num_rows:
        return {}
    enc = t.column("encap").cast(pa.string()).combine_chunks().dictionary_encode()
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = enc.dictionary.to_pylist()
    pk = np.bincount(idx, minlength=len(names))
    per_model = {m: np.bincount(idx[r.seg_first_packet], minlength=len(names))
                 for m, r in analysis.results.items()}
    out: dict[str, dict] = {}
    for k in sorted(range(len(names)), key=lambda k: (-int(pk[k]), names[k])):
        row: dict = {"packets": int(pk[k])}
        for m, sp in per_model.items():
            row[m] = {"superpackets": int(sp[k]),
                      "aggregation_ratio": round(int(pk[k]) / int(sp[k]), 4) if sp[k] else 0.0}
        out[names[k] or "(none)"] = row
    return out


def _segments(analysis):
    """Segments per row when the pipeline found coalesced frames, else None."""
    co = getattr(analysis, "coalesced", None)
    return co.segs if co is not None and co.num_coalesced else None


def summary_dict(analysis) -> dict:
    """The JSON summary: ``{"kernel", "models": {model: {...}}, ...}``."""
    packets = analysis.decoded
    status = packets.column("status").to_numpy() if packets.num_rows else np.zeros(0, np.uint8)
    statuses = {STATUS_NAMES.get(int(s), str(int(s))): int(c)
                for s, c in zip(*np.unique(status, return_counts=True))}
    out = {
        "gropcap": __version__,
        "kernel": analysis.config.kernel.name,
        "files": [{"path": i.path, "records": i.records, "sha256": i.sha256,
                   "warnings": list(i.warnings)} for i in analysis.infos],
        "packets": packets.num_rows,
        "wire_bytes": int(packets.column("wire_len").to_numpy().sum()) if packets.num_rows else 0,
        "status": statuses,
        "models": {m: model_summary(r, _segments(analysis))
                   for m, r in analysis.results.items()},
        "encapsulations": encap_summary(analysis),
        "warnings": capture_warnings(analysis),
        "mtu": mtu_of(analysis).as_dict(),
        **_stage_and_egress(analysis),
    }
    from gropcap.report.receive import napi_dependence, receive_of
    out["receive"] = receive_of(analysis, mtu_of(analysis)).as_dict()
    out["napi_dependence"] = napi_dependence(out["models"])
    return out


def _stage_and_egress(analysis) -> dict:
    """``stages`` (per model, when the gro_cells stage is modelled) and ``egress``."""
    out = {}
    if getattr(analysis, "stages", None):
        from gropcap.gro.stages import stages_summary
        out["stages"] = {m: stages_summary(st) for m, st in analysis.stages.items()}
    if getattr(analysis, "egress_options", None) is not None:
        out["egress"] = analysis.egress()
    return out


def _ep(addr: str, port: int) -> str:
    """``a.b.c.d:port`` or ``[v6]:port``."""
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def render_text(analysis, *, top_flows: int = 5, width: int = 80, color: bool = False) -> str:
    """The terminal report as text (rich tables, no colour unless asked)."""
    from functools import partial

    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable

    # light rules, no heavy borders: readable at 80 columns and when piped
    Table = partial(RichTable, box=box.SIMPLE_HEAD, title_justify="left", title_style=None,
                    header_style="bold" if color else None, pad_edge=False,
                    show_edge=False)

    s = summary_dict(analysis)
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="auto" if color else None,
                      force_terminal=color, highlight=False, markup=False)
    files = ", ".join(f["path"] for f in s["files"])
    console.print(f"gropcap {__version__}: kernel {s['kernel']}, {s['packets']} packets, "
                  f"{s['wire_bytes']} bytes on the wire")
    console.print(f"capture: {files}")
    from gropcap.report import receive
    for line in receive.receive_lines(s, width):
        console.print(line)
    for f in s["files"]:
        for w in f["warnings"]:
            console.print(f"warning: {w}")
    bad = {k: v for k, v in s["status"].items() if k != "OK"}
    if bad:
        console.print("decode status: " + ", ".join(f"{k} {v}" for k, v in bad.items()))
    for w in s["warnings"]:
        console.print(f"warning: {w}")

    t = Table(title="Aggregation")
    t.add_column("model")
    t.add_column("packets in", justify="right")
    t.add_column("super-packets out", justify="right")
    t.add_column("ratio", justify="right")
    t.add_column("largest", justify="right")
    for m, ms in s["models"].items():
        t.add_row(m, str(ms["packets_in"]), str(ms["superpackets_out"]),
                  f"{ms['aggregation_ratio']:.2f}", str(ms["largest_superpacket"]))
    console.print()
    console.print(t)
    for line in (receive.dependence_lines(s, width)
                 + receive.tunnel_lines(receive.tunnel_hint(analysis), width)):
        console.print(line)

    if "stages" in s:
        t = Table(title="GRO stages (segments in, super-packets out)")
        for col in ("model", "stage", "rows in", "segments in", "out", "ratio"):
            t.add_column(col, justify="left" if col in ("model", "stage") else "right")
        for m, st in s["stages"].items():
            for name, row in st["stages"].items():
                t.add_row(m, name, str(row["packets_in"]), str(row["segments_in"]),
                          str(row["superpackets_out"]), f"{row['ratio']:.2f}")
            t.add_row(m, "to the stack", "", str(s["packets"]), str(st["delivered"]),
                      f"{st['overall_ratio']:.2f}")
        console.print()
        console.print(t)

    if "egress" in s:
        t = Table(title="Egress segmentation")
        for col in ("model", "scenario", "super-packets", "segments", "hardware", "software",
                    "dropped"):
            t.add_column(col, justify="left" if col in ("model", "scenario") else "right")
        for m, e in s["egress"].items():
            t.add_row(m, e["scenario"], str(e["superpackets"]), str(e["segments"]),
                      str(e["hardware_segments"]), str(e["software_segments"]),
                      str(e["dropped"]))
        console.print()
        console.print(t)

    if len(s["encapsulations"]) > 0:
        t = Table(title="Per encapsulation")
        t.add_column("encapsulation")
        t.add_column("packets", justify="right")
        for m in s["models"]:
            t.add_column(f"{m} ratio", justify="right")
        for name, row in s["encapsulations"].items():
            t.add_row(name, str(row["packets"]),
                      *[f"{row[m]['aggregation_ratio']:.2f}" for m in s["models"]])
        console.print()
        console.print(t)

    primary = analysis.primary_model
    ms = s["models"][primary]
    t = Table(title=f"Why super-packets ended ({primary})")
    t.add_column("reason")
    t.add_column("count", justify="right")
    t.add_column("share", justify="right")
    total = sum(ms["end_reasons"].values()) or 1
    for name, count in ms["end_reasons"].items():
        t.add_row(name, str(count), f"{100 * count / total:.1f}%")
    console.print()
    console.print(t)
    codes = {r.name: r for r in REASONS.values()}
    for name in ms["end_reasons"]:
        if name in codes:
            for line in textwrap.wrap(f"{name}: {codes[name].text}", width=width - 2,
                                      initial_indent="  ", subsequent_indent="      ",
                                      break_on_hyphens=False):
                console.print(line)

    flows = analysis.flows
    if flows.num_rows:
        ratio = flows.column(f"{primary}_ratio").to_numpy()
        pk = flows.column("packets").to_numpy()
        # flows that lose most: most super-packets beyond the ideal of one per 45 segments
        loss = flows.column(f"{primary}_superpackets").to_numpy()
        order = np.lexsort((np.arange(len(pk)), -loss))[:top_flows]
        t = Table(title=f"Flows with the most super-packets ({primary})")
        for col in ("flow", "endpoints", "pkts", "ratio", "top end reason"):
            t.add_column(col, justify="right" if col in ("flow", "pkts", "ratio") else "left")
        src = flows.column("src").to_pylist()
        dst = flows.column("dst").to_pylist()
        sp = flows.column("sport").to_pylist()
        dp = flows.column("dport").to_pylist()
        top = flows.column(f"{primary}_top_reason").to_pylist()
        for i in order.tolist():
            ends = f"{_ep(src[i], sp[i])} > {_ep(dst[i], dp[i])}" if src[i] else "(not IP)"
            t.add_row(str(i), ends, str(int(pk[i])), f"{ratio[i]:.2f}", top[i])
        console.print()
        console.print(t)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["summary_dict", "render_text", "model_summary", "reason_name", "capture_warnings",
           "encap_summary"]
