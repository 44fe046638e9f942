"""Arrow tables built from an Analysis: packets with verdicts, super-packets, flows."""

from __future__ import annotations

import ipaddress

import numpy as np
import pyarrow as pa

from gropcap.gro.reasons import reason_name
from gropcap.io.columns import readable


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


def addr_text(raw: bytes, version: int) -> str:
    """16-byte column value -> printable address."""
    if version == 4:
        return str(ipaddress.IPv4Address(raw[12:16]))
    if version == 6:
        return str(ipaddress.IPv6Address(raw))
    return ""


def flow_key_columns(keys: pa.Table) -> dict:
    """The key columns of the flows table from each flow's first packet (one row a flow)."""
    ver = keys.column("ip_version").to_numpy()
    src = keys.column("ip_src").to_pylist()
    dst = keys.column("ip_dst").to_pylist()
    return {
        "flow_id": np.arange(keys.num_rows, dtype=np.int64),
        "encap": keys.column("encap").cast(pa.string()),
        "ip_version": keys.column("ip_version"),
        "src": pa.array([addr_text(s, v) for s, v in zip(src, ver)], pa.string()),
        "dst": pa.array([addr_text(d, v) for d, v in zip(dst, ver)], pa.string()),
        **{name: keys.column(name) for name in ("l4_proto", "sport", "dport", "tun_type",
                                                "tun_key", "vlan_tci0", "dsa_port")},
    }


def flows_table(analysis) -> pa.Table:
    """One row per flow: keys, packets, super-packets and ratio per model, top reason."""
    packets = analysis.decoded
    first_result = next(iter(analysis.results.values()))
    flow_id = first_result.flow_id
    n_flows = int(flow_id.max()) + 1 if len(flow_id) else 0
    first = np.full(n_flows, -1, dtype=np.int64)
    # first packet of each flow: flows are numbered by first appearance
    order = np.arange(len(flow_id))[::-1]
    first[flow_id[order]] = order
    take = pa.array(first)
    keys = packets.take(take) if n_flows else packets.slice(0, 0)
    cols = {
        **flow_key_columns(keys),
        "packets": np.bincount(flow_id, minlength=n_flows).astype(np.int64),
        "payload_bytes": np.bincount(flow_id, weights=packets.column("payload_len")
                                     .to_numpy().astype(np.float64),
                                     minlength=n_flows).astype(np.int64),
    }
    for model, result in analysis.results.items():
        segs = np.bincount(result.seg_flow_id, minlength=n_flows).astype(np.int64)
        cols[f"{model}_superpackets"] = segs
        with np.errstate(divide="ignore", invalid="ignore"):
            cols[f"{model}_ratio"] = np.where(segs > 0, cols["packets"] / np.maximum(segs, 1), 0.0)
        cols[f"{model}_top_reason"] = pa.array(_top_reasons(result, n_flows), pa.string())
    return pa.table(cols)


def _top_reasons(result, n_flows: int) -> list[str]:
    """Most frequent non-MERGED end reason per flow (what most often ends its super-packets)."""
    out = [""] * n_flows
    if not len(result.seg_flow_id):
        return out
    key = result.seg_flow_id.astype(np.int64) * 256 + result.seg_end_reason.astype(np.int64)
    uniq, counts = np.unique(key, return_counts=True)
    best: dict[int, tuple[int, int]] = {}
    for k, c in zip(uniq.tolist(), counts.tolist()):
        f, r = divmod(k, 256)
        if f not in best or c > best[f][0]:
            best[f] = (c, r)
    for f, (_, r) in best.items():
        out[f] = reason_name(r)
    return out


def count_by_name(codes: np.ndarray) -> dict[str, int]:
    """Histogram of reason codes keyed by reason name, most frequent first."""
    if not len(codes):
        return {}
    uniq, counts = np.unique(codes, return_counts=True)
    pairs = sorted(zip(counts.tolist(), uniq.tolist()), key=lambda p: (-p[0], p[1]))
    return {reason_name(c): n for n, c in pairs}


__all__ = ["packets_table", "superpackets_table", "flows_table", "count_by_name", "addr_text"]
