"""The JSON summary of a run, computed from its finished accumulators
(``run.accumulators.Totals``): what ``gropcap analyze --format json`` prints (without
``top_flows``), ``Analysis.summary()`` returns and ``report/`` renders as text. How the
totals were computed (in memory, batch by batch, on Dask) does not show.
"""

from __future__ import annotations

import numpy as np

from gropcap import __version__
from gropcap.decode.schema import STATUS_NAMES


def data_counts(data_segments: int, data_superpackets: int) -> dict:
    """The data-direction part of a model summary: segments that carry payload, the
    super-packets that carry payload, and their ratio. Pure ACKs are never aggregated
    (NOT_HELD_ZERO_PAYLOAD), so they pull the all-packets ratio towards 1."""
    return {"data_segments_in": data_segments, "data_superpackets_out": data_superpackets,
            "data_ratio": round(data_segments / data_superpackets, 4)
            if data_superpackets else 0.0}


def model_dict(mc, packets_in: int, segments_in: int,
               data_segments_in: int | None = None) -> dict:
    """Counts for one model from its finished ``run.accumulators.ModelCounts``: packets
    in, segments in, super-packets out, ratio, the same for the segments that carry
    payload (``data_ratio``; left out when ``data_segments_in`` is None), reason
    histograms."""
    from gropcap.run.accumulators import hist_by_name
    n_out = mc.nseg
    data = {} if data_segments_in is None else data_counts(data_segments_in, mc.data_segs)
    return {
        "packets_in": packets_in,
        "segments_in": segments_in,
        "superpackets_out": n_out,
        "aggregation_ratio": round(segments_in / n_out, 4) if n_out else 0.0,
        **data,
        "merged_packets": int(mc.reason_hist[0]),
        "largest_superpacket": mc.largest if n_out else 0,
        "reasons": hist_by_name(mc.reason_hist),
        "end_reasons": hist_by_name(mc.end_hist),
    }


def model_summary(result, segments=None, payload_len=None) -> dict:
    """:func:`model_dict` of one ``GroResult``.

    ``segments``: wire segments per row when frames were captured already coalesced
    (``gso.CoalescedInput.segs``); then ``segments_in`` exceeds ``packets_in`` (the row
    count) and the aggregation ratio is ``segments_in / superpackets_out``: how many wire
    segments the stack receives per packet, the same measure as for plain captures.
    ``payload_len``: per row, for the data-direction counts (omitted: not reported).
    """
    from gropcap.run.accumulators import ModelCounts
    mc = ModelCounts("")
    mc.add_reasons(result.reason)
    mc.add_segs(count=result.seg_count, end=result.seg_end_reason,
                payload=result.seg_payload_len, flow=result.seg_flow_id,
                file=np.zeros(result.num_superpackets, np.int64))
    seg = np.asarray(segments, np.int64) if segments is not None else None
    seg_in = int(seg.sum()) if seg is not None else result.num_packets
    data = None
    if payload_len is not None:
        has = np.asarray(payload_len) > 0
        data = int(seg[has].sum()) if seg is not None else int(has.sum())
    return model_dict(mc, result.num_packets, seg_in, data)


def mtu_of(analysis):
    """The analysis' :class:`gropcap.gro.mtu.MtuInference` (worked out from its decoded table
    when the analysis was made without one)."""
    if getattr(analysis, "mtu", None) is None:
        from gropcap.gro.coalesced import CoalescedStats
        stats = CoalescedStats(analysis.config.mtu)
        stats.add(analysis.decoded)
        analysis.mtu = stats.mtu_inference()
    return analysis.mtu


def warnings_of(tot, mtu, flows) -> list[str]:
    """Plain-English warnings about the capture that change how to read the results,
    from a run's finished totals (``run.accumulators.Totals``), its MTU inference and its
    flows table.

    Conflicting MTU evidence (:mod:`gropcap.gro.mtu`), pre-coalesced input (frames with more
    IP bytes than the receiving device's MTU, IPv4 total length 0, or the pcapng
    TCP-segmentation-offload flag), offload-partial checksums
    (``l4_csum_state == CSUM_PARTIAL``), headers cut by the snap length, checksums that
    cannot be verified under ``--verify-checksums``, and TCP flows seen in one direction
    only.
    """
    from gropcap.constants import IPPROTO_TCP
    c = tot.capture
    out: list[str] = []
    if not c.packets:
        return out
    if mtu.conflict:
        out.append(mtu.conflict)
    pre, largest = c.above_mtu(mtu.mtu)
    if pre:
        text = (f"{pre} frames are already coalesced (more IP bytes than the "
                f"{mtu.mtu}-byte MTU, IPv4 total length 0 or the pcapng TSO flag; "
                f"largest {largest} bytes): captured after GRO/TSO or on a jumbo MTU, "
                f"so the capture does not show the segments on the wire")
        co = tot.coalesced
        if co is not None and co.num:
            sizes = sorted(co.sizes_seen)
            shown = ", ".join(str(int(x)) for x in sizes[:4]) + (", ..." if len(sizes) > 4
                                                                 else "")
            text += (f"; {co.num} TCP frames are treated as arriving GSO packets "
                     f"of {co.gso_segs} segments with the gso_size "
                     f"inferred from their flow ({shown} bytes: SYN MSS, else the most "
                     f"common full segment)")
        out.append(text)
    if c.partial:
        out.append(f"{c.partial} TCP/UDP checksums hold only the pseudo-header sum "
                   f"(offload partial: captured on the sending host)")
    if c.cut:
        out.append(f"{c.cut} frames are cut by the snap length inside their "
                   f"headers: GRO cannot compare them (BYPASS_DECODE); capture with a "
                   f"larger snap length (tcpdump -s)")
    if c.verify and c.short:
        out.append(f"{c.short} frames are cut by the snap length: their "
                   f"TCP/UDP checksums cannot be verified")
    if flows.num_rows:
        from gropcap.arrays import batch_column as col
        from gropcap.run.accumulators import reverse_count

        def tcp(b):
            # TCP flows with ports (a header cut before the ports leaves them 0)
            return (col(b, "l4_proto") == IPPROTO_TCP) & ((col(b, "sport") != 0)
                                                          | (col(b, "dport") != 0))
        n_tcp, two_way, i = reverse_count(flows, tcp, tcp)
        if n_tcp > two_way:
            a, ap, b, bp = (flows.column(n)[i].as_py() for n in ("src", "sport", "dst",
                                                                  "dport"))
            out.append(f"{n_tcp - two_way} of {n_tcp} TCP flows are seen in one "
                       f"direction only (e.g. flow {i}, {a}:{ap} > {b}:{bp}): a "
                       f"filtered, mirrored or asymmetric capture")
    return out


def capture_warnings(analysis) -> list[str]:
    """:func:`warnings_of` an :class:`Analysis`."""
    return warnings_of(analysis.totals, mtu_of(analysis), analysis.flows)


def encap_dict(tot) -> dict[str, dict]:
    """Per encapsulation (``encap`` string), most packets first: packets, and
    super-packets and ratio per model (a super-packet counts under the encapsulation of
    its first packet)."""
    c = tot.capture
    out: dict[str, dict] = {}
    for name in sorted(c.encap, key=lambda k: (-c.encap[k], k)):
        row: dict = {"packets": c.encap[name]}
        for m, mc in tot.models.items():
            sp = mc.encap.get(name, 0)
            row[m] = {"superpackets": sp,
                      "aggregation_ratio": round(c.encap[name] / sp, 4) if sp else 0.0}
        out[name or "(none)"] = row
    return out


def encap_summary(analysis) -> dict[str, dict]:
    """:func:`encap_dict` of an :class:`Analysis`."""
    return encap_dict(analysis.totals)


def files_list(tot, infos) -> list[dict]:
    """Per input file, in input order: path, records, digest, warnings, packets, wire
    bytes and, per model, super-packets (counted under the file of their first packet),
    ratio and data ratio."""
    c, co = tot.capture, tot.coalesced
    files = [{"path": i.path, "records": i.records, "digest": i.digest,
              "warnings": list(i.warnings)} for i in infos]
    for k, f in enumerate(files):
        get = lambda a: int(a[k]) if k < len(a) else 0  # noqa: E731
        f.update(packets=get(c.file_packets), wire_bytes=get(c.file_bytes), models={})
        segs = get(co.file_segs) if co else f["packets"]
        data = get(co.file_data_segs) if co else get(c.file_data)
        for m, mc in tot.models.items():
            sp = get(mc.file_segs)
            f["models"][m] = {
                "superpackets_out": sp,
                "aggregation_ratio": round(segs / sp, 4) if sp else 0.0,
                **data_counts(data, get(mc.file_data_segs))}
    return files


def file_summaries(analysis) -> list[dict]:
    """The per-file part of :func:`files_list` of an :class:`Analysis` (one dict per
    ``analysis.infos`` entry: packets, wire bytes, models)."""
    return [{k: f[k] for k in ("packets", "wire_bytes", "models")}
            for f in files_list(analysis.totals, analysis.infos)]


def _segments(analysis):
    """Segments per row when the pipeline found coalesced frames, else None."""
    co = getattr(analysis, "coalesced", None)
    return co.segs if co is not None and co.num_coalesced else None


def inputs_of(capture, infos, captures: str = "auto") -> dict:
    """The summary's ``inputs`` section (``run.receivers.inputs_dict``): the files and
    their receiver runs under ``captures`` (``--captures``), from each file's first and
    latest timestamp (``capture``: the run's ``run.accumulators.CaptureCounts``)."""
    from gropcap.run.receivers import NO_TS, inputs_dict
    c, n = capture, len(infos)
    pad = lambda a: np.concatenate([a[:n], np.full(max(0, n - len(a)), NO_TS,  # noqa: E731
                                                   np.int64)])
    return inputs_dict(captures, pad(c.file_first_ts), pad(c.file_max_ts))


def render_summary(tot, *, infos, config, mtu, receive, extra: dict | None = None,
                   captures: str = "auto") -> dict:
    """The JSON summary from a run's finished totals (``run.accumulators.Totals``): how
    they were computed (in memory, batch by batch, on Dask) does not show.

    ``mtu``: the run's :class:`gropcap.gro.mtu.MtuInference`; ``receive``: its
    :class:`gropcap.receive.context.ReceiveContext` (without the MTU); ``extra``: ``stages`` and
    ``egress`` when they were modelled; ``captures``: ``--captures`` (the ``inputs``
    section: :func:`inputs_of`)."""
    from gropcap.run.hints import acks_hint, napi_dependence
    c, co = tot.capture, tot.coalesced
    flows = tot.flows_table()
    statuses = {STATUS_NAMES.get(int(s), str(int(s))): int(c.status[s])
                for s in np.nonzero(c.status)[0]}
    seg_in = co.segs_total if co else c.packets
    data_in = co.data_segs if co else c.data_packets
    out = {
        "gropcap": __version__,
        "kernel": config.kernel.name,
        "files": files_list(tot, infos),
        "inputs": inputs_of(c, infos, captures),
        "packets": c.packets,
        "wire_bytes": c.wire_bytes,
        "status": statuses,
        "models": {m: model_dict(mc, c.packets, seg_in, data_in)
                   for m, mc in tot.models.items()},
        "encapsulations": encap_dict(tot),
        "warnings": warnings_of(tot, mtu, flows),
        "mtu": mtu.as_dict(),
        **(extra or {}),
        "receive": receive.with_mtu(mtu).as_dict(),
    }
    out["napi_dependence"] = napi_dependence(out["models"])
    out["poll_acks_hint"] = (acks_hint(flows, config) if "napi" in out["models"]
                             else None)
    return out


def summary_dict(analysis) -> dict:
    """The JSON summary of an :class:`Analysis`: ``{"kernel", "models": {model: {...}},
    ...}`` (:func:`render_summary` of its totals)."""
    from gropcap.receive.context import ReceiveContext
    mtu = mtu_of(analysis)
    receive = getattr(analysis, "receive", None) or ReceiveContext.from_config(analysis.config)
    return render_summary(analysis.totals, infos=analysis.infos, config=analysis.config,
                          mtu=mtu, receive=receive, extra=_stage_and_egress(analysis),
                          captures=getattr(analysis, "captures", "auto"))


def _stage_and_egress(analysis) -> dict:
    """``stages`` (per model, when the gro_cells stage is modelled) and ``egress``."""
    out = {}
    if getattr(analysis, "stages", None):
        from gropcap.gro.stages import stages_summary
        out["stages"] = {m: stages_summary(st) for m, st in analysis.stages.items()}
    if getattr(analysis, "egress_options", None) is not None:
        out["egress"] = analysis.egress()
    return out
