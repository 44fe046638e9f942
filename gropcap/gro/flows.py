"""Flow identity for reports: which packets belong to one flow (per direction).

A flow is what a user would call one connection direction inside its encapsulation: the
innermost addresses, protocol and ports, plus the encapsulation identity around them (outer
addresses, tunnel key/VNI, VLAN tags, DSA port). This is a reporting key; the GRO engines
decide "same flow" themselves with the kernel's per-layer rules, which are stricter (e.g.
the whole Ethernet header, IPv6 flow label).

``flow_id`` numbers flows in order of first appearance, so it is stable for a given table
and identical between the reference and the fast engine.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

FLOW_KEY_COLUMNS = (
    "ip_version", "ip_src", "ip_dst", "l4_proto", "sport", "dport",
    "outer_ip_version", "outer_ip_src", "outer_ip_dst", "outer_sport", "outer_dport",
    "tun_type", "tun_key", "vlan_tci0", "vlan_tci1", "dsa_port", "iface",
    # frames without IP: told apart by their L2 identity
    "eth_type", "eth_src", "eth_dst",
)


def _column_bytes(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Fixed-width column -> (n, width) uint8 matrix of its values."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_fixed_size_binary(col.type):
        width = col.type.byte_width
        buf = col.buffers()[1]
        data = np.frombuffer(buf, dtype=np.uint8)[col.offset * width:(col.offset + len(col)) * width]
        return data.reshape(len(col), width)
    arr = col.to_numpy(zero_copy_only=False)
    arr = np.ascontiguousarray(arr)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.uint8)
    return arr.view(np.uint8).reshape(len(arr), arr.dtype.itemsize)


def flow_key_matrix(packets: pa.Table) -> np.ndarray:
    """One row of bytes per packet holding its flow key (see FLOW_KEY_COLUMNS)."""
    n = packets.num_rows
    if n == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    parts = [_column_bytes(packets.column(name)) for name in FLOW_KEY_COLUMNS]
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def assign_flow_ids(packets: pa.Table) -> np.ndarray:
    """``flow_id`` (int64) per packet, flows numbered in order of first appearance.

    >>> # ids = assign_flow_ids(table); ids[0] == 0 for any non-empty table
    """
    n = packets.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    keys = flow_key_matrix(packets)
    view = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    # unique ids are in sorted-key order; renumber by first appearance
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.ravel()].astype(np.int64)
