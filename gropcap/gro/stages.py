"""The gro_cells second stage: GRO again on the device that decapsulates.

Layer: packet columns + the first stage's :class:`GroResult` -> a derived packet table ->
the same ``simulate()`` -> one :class:`StageResult` per stage.

The kernel (docs/kernel-gro-spec.md section 5): native GRO runs on the receiving device's
NAPI (``gro/reference.py``). After that, a tunnel driver strips the outer headers and hands
the inner packet to its own per-CPU gro_cells NAPI (``gro_cells_receive``): ``ip_tunnel_rcv``
(gre, gretap, ipip, sit, erspan), ``__ip6_tnl_rcv`` (ip6gre, ip6gretap, ip6erspan, ip6tnl),
vxlan and geneve; a DSA conduit hands each untagged frame to the user port's gro_cells
(``dsa_switch_rcv``, v5.8). So the second stage is GRO over a *derived* table: one row per
first-stage super-packet that a tunnel/DSA device receives, with the inner headers in the
outer position, arriving as a TCP GSO packet (``count`` = gso_segs, ``gso_size``) when the
first stage merged it, the tunnel GSO bits stripped (``iptunnel_pull_offloads``).

Model of that NAPI (``gro_cell_poll``, weight 64): every inner packet the lower device
produced in one of its polls is GRO'd together and flushed at the end (the lower poll ids
become explicit windows); ``skb->hash`` is cleared on decapsulation unless it was an L4
hash (``skb_clear_hash_if_not_l4``): GRE/IPIP/DSA rows land in bucket 0, UDP tunnels keep
the outer Toeplitz hash. A first-stage packet of more than ``MAX_SKB_FRAGS`` segments
carries a frag_list and is never merged again (``dev_gro_receive``: ``flush =
skb_has_frag_list``). Devices without cells (ip6gre family before v4.17, DSA before v5.8,
``tunnel_gro=False``) deliver with ``netif_rx``: their rows skip GRO. An ip6tnl device's
``hard_header_len`` (until 4b3e33fcc38f, v6.11 and stable) makes gro_list_prepare compare
more than the Ethernet header: :func:`_ip6tnl_mac_compare`; so does an ip6gretap /
ip6erspan device's (832ba596494b, v5.10, until 505b6d296c48, stable 5.10.270, 6.1.188,
6.12.109): :func:`_ip6gre_tap_mac_compare`.

Both stages run on the engine the caller names (``engine="fast"``: the numba engine,
which implements GSO input, ``hashes=`` and ``no_gro=`` bit for bit with the reference;
configurations only the reference implements fall back to it, see
:func:`gropcap.gro.reference.needs_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gropcap import constants as C
from gropcap.decode import schema as S
from gropcap.gro.config import GroConfig
from gropcap.gro.result import GroResult

__all__ = ["StageResult", "StageCounts", "Units", "CellsIds", "simulate_stages",
           "gro_cells_input", "gro_cells_rows", "native_units", "stage_config",
           "stages_summary", "MAX_SKB_FRAGS", "DECAP_TUNNELS"]

MAX_SKB_FRAGS = 17        # include/linux/skbuff.h (CONFIG_MAX_SKB_FRAGS default)

# Tunnels whose device decapsulates through gro_cells (ip_tunnel_rcv, __ip6_tnl_rcv,
# vxlan_rcv, geneve_rx). VXLAN/Geneve only with a tunnel socket (a vxlan/geneve device).
DECAP_TUNNELS = (C.TUN_GRE, C.TUN_GRE_TEB, C.TUN_ERSPAN2, C.TUN_ERSPAN3, C.TUN_IPIP,
                 C.TUN_SIT, C.TUN_IP6IP6, C.TUN_IP4IP6, C.TUN_VXLAN, C.TUN_VXLAN_GPE,
                 C.TUN_GENEVE)
_UDP_KIND = {C.TUN_VXLAN: "vxlan", C.TUN_VXLAN_GPE: "vxlan-gpe", C.TUN_GENEVE: "geneve"}
# the ip6_gre.c devices: gro_cells only from "net: ipv6/gre: Add GRO support" (v4.17)
_IP6GRE_FAMILY = (C.TUN_GRE, C.TUN_GRE_TEB, C.TUN_ERSPAN2, C.TUN_ERSPAN3)
# devices without gro_cells on every release: a SIT (6in4, 6rd, ISATAP) device's
# ipip6_rcv ends in netif_rx(skb) (net/ipv6/sit.c), so its packets skip GRO
_NO_CELLS = (C.TUN_SIT,)
# ECN field (RFC 3168) values
_NOT_ECT, _ECT_1, _ECT_0, _CE = 0, 1, 2, 3
# inner Ethernet header after decapsulation (ARPHRD_ETHER devices; Geneve with protocol
# 0x6558, see gro_cells_input)
_INNER_ETH = (C.TUN_GRE_TEB, C.TUN_ERSPAN2, C.TUN_ERSPAN3, C.TUN_VXLAN)
_VLAN_COLS = ("vlan_depth", "vlan_tpid0", "vlan_tci0", "vlan_tpid1", "vlan_tci1")
_DEVICE_BASE = 0x8000     # iface numbers of the modelled gro_cells devices

_TUN_COLS = ("tun_type", "tun_offset", "tun_flags", "tun_proto", "tun_key", "tun_seq",
             "tun_opt_len", "tun_opt_digest", "erspan_ver", "erspan_session",
             "inner_eth_dst", "inner_eth_src", "inner_eth_type", "outer_l4_proto",
             "outer_sport", "outer_dport", "outer_udp_len", "outer_udp_csum", "encap_depth",
             *_VLAN_COLS, *["inner_" + c for c in _VLAN_COLS])


@dataclass
class StageResult:
    """One GRO stage.

    Attributes (besides those below, ``dropped``: ``gro_cells`` only, the native
    super-packets the tunnel driver dropped before its gro_cells, see
    :func:`ecn_decapsulate`):
        name: ``"native"`` (the receiving device) or ``"gro_cells"`` (tunnel / ERSPAN /
            DSA user devices after decapsulation).
        table: the rows this stage received (PACKET_SCHEMA): the capture for ``native``,
            the derived table for ``gro_cells``.
        result: the stage's :class:`GroResult` over ``table``.
        segments: wire segments each input row stands for (1 for the capture).
        source_seg: ``gro_cells`` only: the native super-packet each row is.
        device: ``gro_cells`` only: the device number (``iface``) of each row.
        gro: ``gro_cells`` only: the row's device runs GRO (False: netif_rx).
    """

    name: str
    table: pa.Table
    result: GroResult
    segments: np.ndarray
    source_seg: np.ndarray | None = None
    device: np.ndarray | None = None
    gro: np.ndarray | None = None
    dropped: np.ndarray | None = None

    @property
    def packets_in(self) -> int:
        return self.table.num_rows

    @property
    def superpackets_out(self) -> int:
        return self.result.num_superpackets

    def check_invariants(self) -> None:
        """:meth:`GroResult.check_invariants` with this stage's input segments."""
        self.result.check_invariants(self.table.column("payload_len").to_numpy(),
                                     segments=self.segments)


def _decap_kinds(heads: pa.Table, config: GroConfig) -> np.ndarray:
    """Per row, the tunnel type a gro_cells device decapsulates, -1 for DSA, 0 none: a
    decoded row (status OK) with a DSA tag (``dsa_switch_rcv``), or one tunnel layer of a
    decapsulating kind around an IP packet (``ip_tunnel_rcv``, ``__ip6_tnl_rcv``); a
    VXLAN/Geneve one only with a socket on its port (``vxlan_rcv``, ``geneve_rx`` run from
    the socket's ``encap_rcv``; no vxlan/geneve device: plain UDP for the stack)."""
    from gropcap.arrays import numpy_of
    col = lambda name: numpy_of(heads.column(name))  # noqa: E731
    kinds = np.zeros(heads.num_rows, np.int16)
    ok = col("status") == S.STATUS_OK
    dsa = ok & (col("dsa_tag") != 0)
    t = col("tun_type").astype(np.int16)
    tun = ok & ~dsa & np.isin(t, DECAP_TUNNELS) & (col("encap_depth") == 1) & \
        (col("ip_version") != 0)
    udp = tun & np.isin(t, list(_UDP_KIND))
    if udp.any():
        port = col("outer_dport").astype(np.int64)
        sock = np.zeros(len(t), bool)
        for code, name in _UDP_KIND.items():
            for kind, p in config.udp_tunnels:
                if kind == name:
                    sock |= (t == code) & (port == p)
        tun &= ~udp | sock
    kinds[dsa] = -1
    kinds[tun] = t[tun]
    return kinds


def _device_ids(tab: pa.Table, kind: np.ndarray, devices: dict) -> np.ndarray:
    """Per row of ``tab`` (rows a gro_cells device receives, ``kind`` as
    :func:`_decap_kinds`), its device's number in ``devices`` (identity -> number, in
    order of first appearance; filled in): one tunnel device per (type, outer addresses,
    key), a DSA user port per (conduit, port)."""
    from gropcap.arrays import numpy_of
    n = tab.num_rows
    if not n:
        return np.zeros(0, np.uint16)
    key = np.zeros(n, dtype=[("k", "<i2"), ("a", "S16"), ("b", "S16"), ("x", "<i8")])
    key["k"] = kind
    dsa = kind == -1
    for part, name in (("a", "outer_ip_src"), ("b", "outer_ip_dst")):
        vals = tab.column(name).to_pylist()
        key[part] = np.array([v or b"" for v in vals], "S16")
    key["x"] = numpy_of(tab.column("tun_key")).astype(np.int64)
    if dsa.any():
        key["a"][dsa] = key["b"][dsa] = b""
        key["x"][dsa] = (numpy_of(tab.column("iface")).astype(np.int64)[dsa] << 16) | \
            (numpy_of(tab.column("dsa_port")).astype(np.int64)[dsa] & 0xFFFF)
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    number = np.zeros(len(uniq), np.uint16)
    for u in np.argsort(first, kind="stable"):     # in order of first appearance
        number[u] = devices.setdefault(uniq[u].tobytes(), len(devices))
    return number[inv.ravel()]


def ecn_decapsulate(outer_tos: np.ndarray, inner_tos: np.ndarray,
                    ect1: bool) -> tuple[np.ndarray, np.ndarray]:
    """INET_ECN_decapsulate (include/net/inet_ecn.h), called by ip_tunnel_rcv (gre,
    gretap, ipip, erspan), ipip6_rcv (sit), __ip6_tnl_rcv (ip6gre family, ip6tnl),
    vxlan_rcv and geneve_rx through IP_ECN_decapsulate / IP6_ECN_decapsulate.

    Returns ``(inner_tos_after, drop)``: outer CE over a Not-ECT inner packet is dropped
    (return value 2: ``goto drop``); outer CE over an ECT inner packet sets the inner CE
    (INET_ECN_set_ce); outer ECT(1) over an inner ECT(0) sets ECT(1) when ``ect1``
    ("tunnel: Propagate ECT(1) when decapsulating as recommended by RFC6040", v5.7).

    >>> ecn_decapsulate(np.array([3, 3, 1]), np.array([0, 2, 2]), True)
    (array([0, 3, 1]), array([ True, False, False]))
    """
    o = np.asarray(outer_tos, np.int64) & 3
    i_tos = np.asarray(inner_tos, np.int64)
    i = i_tos & 3
    drop = (i == _NOT_ECT) & (o == _CE)
    out = np.where((i != _NOT_ECT) & (o == _CE), i_tos | _CE, i_tos)
    if ect1:
        out = np.where((o == _ECT_1) & (i == _ECT_0), (i_tos & ~3) | _ECT_1, out)
    return out, drop


@dataclass
class Units:
    """What the gro_cells stage reads of native super-packets (first-stage units), in
    delivery order: each one's first packet's decoded row and its totals. From a whole
    table (:func:`native_units`) or gathered batch by batch (``run/cells.py``)."""

    heads: pa.Table              # each unit's first packet (PACKET_SCHEMA)
    count: np.ndarray            # segments merged
    payload: np.ndarray          # payload bytes
    gso_size: np.ndarray
    gso_type: np.ndarray         # the first stage's gso_type
    end_reason: np.ndarray
    poll_id: np.ndarray          # the lower device's poll (napi model)
    last_ts: np.ndarray          # its last packet's ts_ns
    or_flags: np.ndarray         # FIN | PSH of its packets, ORed (tcp_gro_receive)

    def __len__(self) -> int:
        return self.heads.num_rows


def native_units(packets: pa.Table, native: GroResult) -> Units:
    """:class:`Units` of every super-packet of ``native`` (a first-stage result over
    ``packets``)."""
    from gropcap.arrays import numpy_of, take_rows
    first = native.seg_first_packet
    flags = numpy_of(packets.column("tcp_flags")).astype(np.int64)
    or_flags = np.zeros(native.num_superpackets, dtype=np.int64)
    np.bitwise_or.at(or_flags, native.gro_seg, flags & (C.TCP_FLAG_FIN | C.TCP_FLAG_PSH))
    ts = numpy_of(packets.column("ts_ns"))
    return Units(heads=take_rows(packets, first), count=native.seg_count,
                 payload=native.seg_payload_len, gso_size=native.seg_gso_size,
                 gso_type=native.seg_gso_type, end_reason=native.seg_end_reason,
                 poll_id=native.seg_poll_id, last_ts=ts[native.seg_last_packet],
                 or_flags=or_flags)


@dataclass
class CellsIds:
    """What numbers the gro_cells rows of one receiver's stage, carried across the pieces
    a run cuts its units into (``run/cells.py``): the devices by identity (numbered in
    order of first appearance), and the L2 source addresses that stand for the MAC header
    bytes gro_list_prepare compares on ip6tnl / ip6gretap devices
    (:func:`_ip6tnl_mac_compare`): equal keys get equal ids, a row that matches no other
    gets an id of its own."""

    devices: dict = field(default_factory=dict)
    macs: dict = field(default_factory=dict)
    next_mac: int = 1

    def mac(self, key=None) -> int:
        """The id of ``key`` (None: a new id, equal to no other)."""
        if key is not None and key in self.macs:
            return self.macs[key]
        got, self.next_mac = self.next_mac, self.next_mac + 1
        if key is not None:
            self.macs[key] = got
        return got


def gro_cells_input(packets: pa.Table, native: GroResult, config: GroConfig, *,
                    frag_list_segs: int = MAX_SKB_FRAGS, split_end_flush: bool = False):
    """The derived table the gro_cells devices receive: :func:`gro_cells_rows` of every
    native super-packet (``sel`` and ``dropped`` are native super-packet ids)."""
    return gro_cells_rows(native_units(packets, native), config, ids=CellsIds(),
                          frag_list_segs=frag_list_segs, split_end_flush=split_end_flush)


def gro_cells_rows(units: Units, config: GroConfig, *, ids: CellsIds,
                   frag_list_segs: int = MAX_SKB_FRAGS, split_end_flush: bool = False):
    """The rows the gro_cells devices receive from ``units`` (native super-packets in
    delivery order).

    ``ids``: the :class:`CellsIds` of this stage (filled in: a run that gathers units in
    pieces passes the same one to every piece).
    ``frag_list_segs``: a native super-packet of more segments carries a frag_list
    (MAX_SKB_FRAGS for drivers whose skbs hold one page fragment per segment; 1 for skbs
    with a kmalloc'd linear head, e.g. veth fed by a packet socket, where
    skb_gro_receive chains every merged skb on the frag_list). ``split_end_flush``: the
    units still held at the end of an explicit window (END_POLL) reach the cell in a
    later poll (the deferred timer flush of the live replay), so in a window of their own.

    Returns ``(table, segments, source_seg, device, gro, coalesced, hashes, polls,
    dropped)``; ``table`` is empty when nothing is decapsulated; ``source_seg`` and
    ``dropped`` index ``units``. ``coalesced`` is the
    :class:`gropcap.gro.coalesced.CoalescedInput` describing rows that arrive as GSO packets (with
    ``frag_list`` and ``gso_type`` arrays: the first stage's type with the tunnel bits
    cleared by iptunnel_pull_offloads from v4.6), ``hashes`` the skb->hash left after
    decapsulation, ``polls`` the lower device's poll of each row (napi model),
    ``dropped`` the native super-packets :func:`ecn_decapsulate` drops.
    """
    from gropcap.arrays import numpy_of, take_rows
    from gropcap.gro.coalesced import CoalescedInput

    heads = units.heads
    kinds = _decap_kinds(heads, config)
    # IP_ECN_decapsulate on each unit's headers (a unit's TOS bytes are equal: GRO
    # flushes on any TOS difference) before gro_cells_receive
    outer_tos = numpy_of(heads.column("outer_ip_tos"))
    inner_tos = numpy_of(heads.column("ip_tos"))
    new_tos, ecn_drop = ecn_decapsulate(outer_tos, inner_tos, config.kernel.ecn_decap_ect1)
    ecn_drop &= kinds > 0
    dropped = np.flatnonzero(ecn_drop).astype(np.int64)
    sel = np.flatnonzero((kinds != 0) & ~ecn_drop)
    tab = take_rows(heads, sel)
    n = len(sel)
    count = np.asarray(units.count)[sel].astype(np.int64)
    payload = np.asarray(units.payload)[sel].astype(np.int64)
    kind = kinds[sel]

    # device identity: one tunnel device per (type, outer addresses, key); a user port per
    # (conduit, port). Numbered in order of first appearance.
    device = _DEVICE_BASE + _device_ids(tab, kind, ids.devices)
    prof = config.kernel
    dsa = kind == -1
    has_cells = np.where(
        dsa, bool(prof.dsa_gro),                # e131a5634830 (v5.8)
        ~(np.isin(kind, _IP6GRE_FAMILY) & (numpy_of(tab.column("outer_ip_version")) == 6)
          & (not prof.ip6gre_gro_cells)) & ~np.isin(kind, _NO_CELLS))
    gro = bool(config.tunnel_gro) & has_cells

    last_ts = np.asarray(units.last_ts, np.int64)[sel]

    def col(name):
        return tab.column(name).to_numpy(zero_copy_only=False).copy()

    tunnelled = kind > 0
    # geneve_rx: an Ethernet payload (protocol 0x6558) goes through eth_type_trans
    eth_inner = np.isin(kind, _INNER_ETH) | ((kind == C.TUN_GENEVE)
                                             & (col("tun_proto") == C.ETH_P_TEB))
    ip_version = col("ip_version")
    ip_off_old = col("ip_offset").astype(np.int64)
    # the inner frame's in-band VLAN tags stay in skb->data after eth_type_trans (the
    # tunnel device's dev_gro_receive hands them to vlan_gro_receive): they become the
    # derived row's vlan_* columns, and its IP header follows them
    inner_tags = col("inner_vlan_depth").astype(np.int64)
    ip_off = np.where(tunnelled, np.where(eth_inner, 14 + 4 * inner_tags, 0), ip_off_old)
    shift = ip_off_old - ip_off
    hdr = col("ip_hdr_len").astype(np.int64)
    doff = col("tcp_doff").astype(np.int64)
    is_udp = col("l4_proto") == C.IPPROTO_UDP
    l4_hdr = np.where(is_udp, 8, doff * 4)
    gso_unit = count > 1
    tot_len = np.where(gso_unit, hdr + l4_hdr + payload, col("ip_tot_len").astype(np.int64))
    # single packets: ip_rcv trimmed the outer packet to its IP length before the tunnel
    # driver ran, so only bytes inside the outer packet reach the device
    outer_end = col("outer_ip_offset").astype(np.int64) + col("outer_ip_tot_len")
    wire = col("wire_len").astype(np.int64)
    inner_bytes = np.where(tunnelled, np.minimum(outer_end, wire) - ip_off_old,
                           wire - ip_off_old)
    inner_bytes = np.where(gso_unit, tot_len, inner_bytes)
    new_wire = ip_off + inner_bytes
    new_cap = np.minimum(np.maximum(col("cap_len").astype(np.int64) - shift, 0), new_wire)

    changes: dict[str, np.ndarray] = {
        "iface": device, "ts_ns": last_ts.astype(np.int64),
        "wire_len": new_wire, "cap_len": new_cap,
        "ip_offset": ip_off, "l4_offset": col("l4_offset").astype(np.int64) - shift,
        "ip_tot_len": tot_len, "payload_len": payload,
        # PSH/FIN of merged segments were ORed into the head (tcp_gro_receive)
        "tcp_flags": col("tcp_flags").astype(np.int64)
        | np.asarray(units.or_flags, np.int64)[sel],
        "dsa_tag": np.zeros(n), "dsa_port": np.full(n, -1),
        "ip_csum_ok": np.where(gso_unit, True, col("ip_csum_ok")),
        "ip_tos": np.where(tunnelled, new_tos[sel], col("ip_tos")),
        "l4_csum_state": np.where(gso_unit, S.CSUM_GOOD, col("l4_csum_state")),
    }
    for name in ("eth_dst", "eth_src", "eth_type"):
        inner = col("inner_" + name)
        if name == "eth_type":
            plain = np.where(ip_version == 6, C.ETH_P_IPV6, C.ETH_P_IP)
        else:
            plain = np.zeros(n, dtype=np.uint64)
        changes[name] = np.where(tunnelled, np.where(eth_inner, inner, plain), col(name))
    for name in _TUN_COLS:
        base = col(name)
        changes[name] = np.where(tunnelled, np.zeros_like(base), base)
    for name in _VLAN_COLS:
        changes[name] = np.where(tunnelled & eth_inner, col("inner_" + name), changes[name])
    for f in S.PACKET_FIELDS:
        if f.name.startswith("outer_ip_") and f.type == S.ADDR:
            vals = tab.column(f.name).to_pylist()
            changes[f.name] = pa.array([bytes(16) if t else v
                                        for t, v in zip(tunnelled, vals)], S.ADDR)
        elif f.name.startswith("outer_ip_"):
            base = col(f.name)
            changes[f.name] = np.where(tunnelled, np.zeros_like(base), base)
    if prof.ip6_tnl_hard_header_len and n:
        changes["eth_src"] = _ip6tnl_mac_compare(
            ids, kind, device, changes["eth_src"], col, prof.ip6_tnl_mac_header_reset,
            np.where(gso_unit, (ip_off_old - col("outer_ip_offset")) + tot_len,
                     col("outer_ip_tot_len")))
    if prof.ip6gre_tap_hard_header_len and n:
        changes["eth_src"] = _ip6gre_tap_mac_compare(
            ids, kind, col("outer_ip_version"), col("tun_flags"), ip_off, hdr, changes, col)
    arrays = []
    for f in S.PACKET_FIELDS:
        if isinstance(changes.get(f.name), pa.Array):
            arrays.append(changes[f.name])
        elif f.name in changes:
            arrays.append(pa.array(np.asarray(changes[f.name]).astype(
                f.type.to_pandas_dtype()), f.type))
        else:
            arrays.append(tab.column(f.name).combine_chunks() if n
                          else pa.array([], f.type))
    derived = pa.Table.from_arrays(arrays, schema=S.PACKET_SCHEMA)

    gso_size = np.asarray(units.gso_size)[sel].astype(np.int32)
    co = CoalescedInput(is_gso=gso_unit, gso_size=np.where(gso_unit, gso_size, 0),
                        segs=count.astype(np.int32), source=np.zeros(n, np.uint8))
    co.frag_list = count > frag_list_segs
    # iptunnel_pull_offloads clears only NETIF_F_GSO_ENCAP_ALL (from v4.6, b311341e0bd9;
    # before it nothing): the other bits of the first stage (TCPV4/6, ECN, FIXEDID) stay,
    # and tcp4/6_gro_complete ORs into them when the unit is held again
    from gropcap.gro.gso import decap_gso_type
    stage1 = np.asarray(units.gso_type)[sel].astype(np.uint32)
    co.gso_type = np.where(gso_unit, np.where(
        tunnelled, decap_gso_type(stage1, (4, 6) if prof.strip_tunnel_gso_on_decap
                                  else (4, 5)), stage1), 0).astype(np.uint32)
    # skb_clear_hash_if_not_l4: the NIC's hash of a UDP tunnel is an L4 (outer 4-tuple)
    # hash and survives; GRE/IPIP hashes are L3 and DSA conduits set none -> bucket 0
    hashes = np.zeros(n, dtype=np.uint32)
    udp = np.isin(kind, list(_UDP_KIND))
    if udp.any() and config.rss == "toeplitz":
        from gropcap.gro.rss import rss_hash
        hashes[udp] = rss_hash(tab, config.rss_key, True)[udp]
    polls = np.asarray(units.poll_id)[sel].astype(np.int64)
    if split_end_flush:
        from gropcap.gro import reasons as R
        polls = polls * 2 + (np.asarray(units.end_reason)[sel] == R.END_POLL)
    return derived, count, sel.astype(np.int64), device, gro, co, hashes, polls, dropped


def _ip6tnl_mac_compare(ids: CellsIds, kind, device, eth_src, col, reset: bool,
                        outer_len) -> np.ndarray:
    """gro_list_prepare's MAC-header check on an ip6tnl (ip6ip6 / ip4ip6) device whose
    ``hard_header_len`` is not 0 (:attr:`KernelProfile.ip6_tnl_hard_header_len`): not
    ETH_HLEN, so ``memcmp(skb_mac_header(p), skb_mac_header(skb), maclen)`` with maclen =
    the lower device's 14 + 40 (ip6_tnl_link_config with a route to the remote, as a
    configured point-to-point tunnel has; without one LL_MAX_HEADER + 40, which compares
    the inner headers too). Modelled by giving the derived rows of such a device an L2
    source address that is equal exactly when those bytes are (the engines compare it with
    the rest of the MAC header):

    * before da5a2e49f064 (v5.14) the MAC header is still the lower device's: the 54
      bytes are the outer Ethernet header and the fixed outer IPv6 header as the cell
      receives it (version, traffic class, flow label, payload length -- a first-stage
      unit's as ipv6_gro_complete rewrote it --, next header, hop limit, addresses): a
      segment of another length is another flow (5.10: the flow's last, short segment);
    * from it skb_reset_mac_header points at the inner IP header: the bytes are the inner
      IP header and the start of the L4 header (TCP sequence number, UDP length and
      checksum), different for every segment: no two rows are the same flow (a
      byte-identical duplicate would be, the model does not look for one).

    Other rows keep ``eth_src``. The ids come from ``ids`` (:meth:`CellsIds.mac`)."""
    ip6tnl = np.isin(kind, (C.TUN_IP6IP6, C.TUN_IP4IP6))
    out = np.asarray(eth_src, dtype=np.uint64).copy()
    if not ip6tnl.any():
        return out
    if reset:
        for j in np.flatnonzero(ip6tnl):
            out[j] = ids.mac()
        return out
    parts = [device, col("eth_dst"), col("eth_src"), col("eth_type"), col("vlan_depth"),
             col("vlan_tci0"), col("outer_ip_tos"), col("outer_ip_flow_label"),
             col("outer_ip_ttl"), col("outer_ip_ext_mask"), np.asarray(outer_len)]
    for j in np.flatnonzero(ip6tnl):
        out[j] = ids.mac(("ip6tnl",) + tuple(int(p[j]) for p in parts))
    return out


# gro_list_prepare's memcmp on an ip6gretap / ip6erspan device: the compared inner bytes
# [start, end) of each header field a row carries (IP header fields from the IP offset,
# L4 fields from the L4 offset); the TCP sequence number ends the list (different for
# every segment)
_IPV4_FIELDS = ((1, "ip_tos"), (2, "ip_tot_len"), (4, "ip_id"), (6, "ip_df"), (6, "ip_mf"),
                (6, "ip_frag_off"), (8, "ip_ttl"), (9, "ip_proto"), (12, "ip_src"),
                (16, "ip_dst"))
_IPV6_FIELDS = ((0, "ip_tos"), (1, "ip_flow_label"), (4, "ip_tot_len"), (6, "ip_proto"),
                (7, "ip_ttl"), (8, "ip_src"), (24, "ip_dst"), (40, "ip_ext_digest"))
_L4_FIELDS = ((0, "sport"), (2, "dport"), (4, "udp_len"), (6, "l4_csum"))


def _ip6gre_tap_mac_compare(ids: CellsIds, kind, outer_version, tun_flags, ip_off, ip_hdr,
                            changes, col) -> np.ndarray:
    """gro_list_prepare's MAC-header check on an ip6gretap / ip6erspan device
    (:attr:`KernelProfile.ip6gre_tap_hard_header_len`): ``maclen = hard_header_len`` is
    not ETH_HLEN, so ``memcmp(skb_mac_header(p), skb_mac_header(skb), maclen)`` over the
    inner frame from its Ethernet header (eth_type_trans reset the MAC header there).
    maclen = ip6gre_tnl_link_config_route's lower Ethernet 14 + IPv6 40 + t_hlen's tunnel
    header: GRE ``gre_calc_hlen(o_flags)`` for ip6gretap (4, + 4 with a key: the device is
    assumed to send with the key it receives, no checksum or sequence number, as the live
    replay configures it), ip6erspan_calc_hlen's 8 + erspan_hdr_len (type II 8, type III
    12). That is 58 bytes or more: with a route to the remote, as a configured tunnel has
    (without one LL_MAX_HEADER + t_hlen, which compares more of the same headers).

    Modelled like :func:`_ip6tnl_mac_compare`: the derived rows of such a device get an L2
    source address equal exactly when the compared bytes are. When they reach a TCP
    sequence number (any of its bytes; an inner IPv4 frame: 14 + 20 + 4) every segment is its own
    flow (a byte-identical duplicate would not be; the model does not look for one);
    otherwise (inner IPv6 behind ip6gretap: the 58 bytes end at the ports) the Ethernet,
    VLAN, IP header and L4 fields that start inside them are the key, so full segments of
    one flow merge and a segment of another length does not. Other rows keep ``eth_src``."""
    eth_src = np.asarray(changes["eth_src"], dtype=np.uint64).copy()
    rows = np.flatnonzero(np.isin(kind, (C.TUN_GRE_TEB, C.TUN_ERSPAN2, C.TUN_ERSPAN3))
                          & (outer_version == 6))
    if not len(rows):
        return eth_src
    tunnel = np.where(kind == C.TUN_ERSPAN2, 8 + 8, np.where(
        kind == C.TUN_ERSPAN3, 8 + 12, 4 + 4 * ((tun_flags & C.GRE_KEY) != 0)))
    maclen = C.ETH_HLEN + 40 + tunnel
    l4_off = ip_off + ip_hdr
    tcp = col("l4_proto") == C.IPPROTO_TCP
    seq_covered = tcp & (maclen > l4_off + 4)
    vals = {name: col(name) for _, name in _IPV4_FIELDS + _IPV6_FIELDS + _L4_FIELDS}
    vals["ip_tot_len"] = np.asarray(changes["ip_tot_len"])
    vals["ip_tos"] = np.asarray(changes["ip_tos"])
    v6 = col("ip_version") == 6
    for j in rows:
        j = int(j)
        if seq_covered[j]:
            key: tuple | None = None            # a flow of its own
        else:
            key = ("ip6gretap",) + \
                tuple(int(changes[c][j]) for c in ("iface", "eth_dst", "eth_type")) + \
                (int(eth_src[j]),) + tuple(int(changes[c][j]) for c in _VLAN_COLS)
            fields = _IPV6_FIELDS if v6[j] else _IPV4_FIELDS
            key += tuple(_as_key(vals[c][j]) for at, c in fields
                         if ip_off[j] + at < maclen[j])
            key += tuple(_as_key(vals[c][j]) for at, c in _L4_FIELDS
                         if l4_off[j] + at < maclen[j] and (at < 4 or not tcp[j]))
        eth_src[j] = ids.mac(key)
    return eth_src


def _as_key(v):
    return bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else \
        (v if isinstance(v, (str, type(None))) else int(v))


def _keep_arriving_gso_type(res: GroResult, arriving: np.ndarray) -> None:
    """A super-packet's gso_type is its head skb's: the type the head arrived with (a
    first-stage unit) ORed with what gro_complete adds (tcp4_gro_complete ``|=``); a unit
    delivered alone keeps its arriving type."""
    if not res.num_superpackets or not len(arriving):
        return
    head = arriving[res.seg_first_packet].astype(np.uint32)
    res.seg_gso_type = np.where(res.seg_count > 1, res.seg_gso_type | head,
                                res.seg_gso_type).astype(res.seg_gso_type.dtype)


def _engine_for(engine: str, config: GroConfig):
    """The simulate() of ``engine`` (``"fast"`` / ``"reference"``) able to run ``config``."""
    from gropcap.errors import ConfigError
    from gropcap.gro.config import needs_reference

    if engine not in ("fast", "reference"):
        raise ConfigError(f"unknown engine {engine!r}", hint="use fast or reference")
    if engine == "reference" or needs_reference(config):
        from gropcap.gro.reference import simulate
    else:
        from gropcap.gro.engine import simulate
    return simulate


def stage_config(config: GroConfig) -> GroConfig:
    """The gro_cells stage's configuration after a native stage under ``config``."""
    # gro_cells NAPI: one cell per CPU (queue 0 here: each lower poll is its own window)
    # and the tunnel device's own gro_max_size: the default (netif_set_gro_max_size is per
    # device; the physical device's setting does not carry over)
    return config.replace(native_gro=True, tunnel_gro=None, udp_tunnels=(), queues=1,
                          gro_max_size=65536, gro_ipv4_max_size=65536)


def simulate_stages(packets: pa.Table, config: GroConfig, *,
                    native: GroResult | None = None, frag_list_segs: int = MAX_SKB_FRAGS,
                    split_end_flush: bool = False, engine: str = "reference",
                    coalesced=None, runs=None) -> list[StageResult]:
    """Native GRO, then (when ``config.tunnel_gro`` is not None) the gro_cells stage.

    Parameters:
        packets: PACKET_SCHEMA table in capture order.
        config: :class:`GroConfig`; ``tunnel_gro`` None runs the native stage only.
        native: a first-stage result already computed for ``config`` (any engine that
            implements the config, see :func:`gropcap.gro.reference.needs_reference`);
            computed with ``engine`` when None.
        frag_list_segs, split_end_flush: see :func:`gro_cells_input` (receiver details
            the live veth replay needs).
        engine: ``"reference"`` (default, the oracle) or ``"fast"`` (numba) for both
            stages; a configuration only the reference implements runs there.
        coalesced: a :class:`gropcap.gro.coalesced.CoalescedInput` for the capture (frames captured
            already coalesced): the native stage's input segments; None: plain segments.
        runs: the receiver run of each row (``engine.simulate``; None: one run); a
            gro_cells row belongs to the run of the native super-packet it comes from.

    Returns:
        ``[native]`` or ``[native, gro_cells]`` :class:`StageResult` objects.

    Example::

        >>> from gropcap.decode.schema import empty_packet_table
        >>> [s.name for s in simulate_stages(empty_packet_table(), GroConfig(tunnel_gro=True))]
        ['native', 'gro_cells']
    """
    more = {} if runs is None else {"runs": runs}
    if native is None:
        native = _engine_for(engine, config)(packets, config, coalesced=coalesced, **more)
    segs_in = (np.asarray(coalesced.segs, np.int64) if coalesced is not None
               else np.ones(packets.num_rows, np.int64))
    out = [StageResult("native", packets, native, segs_in)]
    if config.tunnel_gro is None:
        return out
    derived, segs, src, device, gro, co, hashes, polls, dropped = gro_cells_input(
        packets, native, config, frag_list_segs=frag_list_segs,
        split_end_flush=split_end_flush)
    cfg2 = stage_config(config)
    napi = config.model == "napi"
    if runs is not None and len(src):
        more = {"runs": np.asarray(runs, np.int64)[native.seg_first_packet[src]]}
    res = _engine_for(engine, cfg2)(derived, cfg2, coalesced=co, no_gro=~gro,
                                    polls=polls if napi else None,
                                    hashes=hashes if napi else None, **more)
    _keep_arriving_gso_type(res, co.gso_type)
    out.append(StageResult("gro_cells", derived, res, segs, source_seg=src, device=device,
                           gro=gro, dropped=dropped))
    return out


@dataclass
class StageCounts:
    """What :func:`stages_summary` reports of one stage: rows in, the wire segments they
    stand for, super-packets out, the largest; for ``gro_cells`` the native
    super-packets dropped (ECN), the devices and the rows whose device has no GRO."""

    name: str
    packets_in: int
    segments_in: int
    superpackets_out: int
    largest: int
    dropped: int = 0
    devices: int = 0
    rows_without_gro: int = 0

    @classmethod
    def of(cls, s: StageResult) -> "StageCounts":
        out = s.superpackets_out
        more = {}
        if s.name == "gro_cells":
            more = {"dropped": 0 if s.dropped is None else int(len(s.dropped)),
                    "devices": int(len(np.unique(s.device))),
                    "rows_without_gro": int((~s.gro).sum())}
        return cls(s.name, s.packets_in, int(np.asarray(s.segments).sum()), out,
                   int(s.result.seg_count.max()) if out else 0, **more)


def stages_summary(stages: list) -> dict:
    """Per stage: rows in, segments in, super-packets out, ratio; and what the stack gets.
    ``stages``: :class:`StageResult` or :class:`StageCounts` objects, native first.

    ``delivered`` counts what reaches the stack: native super-packets that no gro_cells
    device took, plus the gro_cells super-packets.

    >>> from gropcap.decode.schema import empty_packet_table
    >>> stages_summary(simulate_stages(empty_packet_table(), GroConfig()))["delivered"]
    0
    """
    stages = [s if isinstance(s, StageCounts) else StageCounts.of(s) for s in stages]
    d: dict = {"stages": {}}
    for s in stages:
        segs, out = s.segments_in, s.superpackets_out
        d["stages"][s.name] = {
            "packets_in": s.packets_in, "segments_in": segs, "superpackets_out": out,
            "ratio": round(segs / out, 4) if out else 0.0, "largest": s.largest}
    delivered = stages[0].superpackets_out
    if len(stages) > 1:
        cells = stages[1]
        delivered += cells.superpackets_out - cells.packets_in - cells.dropped
        if cells.dropped:
            d["stages"]["gro_cells"]["ecn_dropped"] = cells.dropped
        d["stages"]["gro_cells"]["devices"] = cells.devices
        d["stages"]["gro_cells"]["rows_without_gro"] = cells.rows_without_gro
    # wire segments: rows, or more when frames were captured already coalesced
    wire = stages[0].segments_in
    d["delivered"] = int(delivered)
    d["overall_ratio"] = round(wire / delivered, 4) if delivered else 0.0
    return d
