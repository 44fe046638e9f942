"""The numba GRO engine (fast path): packet columns (Arrow) -> GroResult.

Layer: ``decode/schema.py`` packet table -> :class:`gropcap.gro.result.GroResult`, the
contract in ``gropcap/gro/__init__.py``. Same verdicts as the plain-Python reference
(``gro/reference.py``), bit for bit; the batch models are those of ``docs/gro-model.md``.

This module is the validating wrapper: it extracts the columns the kernel rules read,
decides per packet what depends on that packet alone (which layer bails before L4, which
sets an skb flush, the exact same-flow class), and hands plain arrays to the kernels in
``_kernels.py`` (``@njit(cache=True, nogil=True)``), which run the per-pair rules, the
8x8 table and the NAPI poll model. Results are packed into a GroResult.

Public API::

    simulate(packets, config, *, polls=None) -> GroResult
    prepare(packets, config, *, polls=None) -> PreparedBatch   # columns only (benchmarks)
    run_prepared(batch, config) -> GroResult
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gropcap.constants import (
    ETH_P_QINQ1, GRE_CSUM, GRE_KEY, IP6_EXT_FRAGMENT, IP6_EXT_OTHER, IPPROTO_GRE,
    IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, TCP_FLAG_CWR, TCP_FLAG_FIN,
    TCP_FLAG_PSH, TUN_GENEVE, TUN_GRE, TUN_GRE_TEB, TUN_IP4IP6, TUN_IP6IP6, TUN_IPIP,
    TUN_SIT, TUN_VXLAN, TUN_VXLAN_GPE,
)
from gropcap.decode.schema import (
    CSUM_BAD, CSUM_PARTIAL, PACKET_SCHEMA, STATUS_BAD_L4_HEADER, STATUS_BAD_TUNNEL_HEADER,
    STATUS_ENCAP_TOO_DEEP, STATUS_NOT_IP, STATUS_OK, STATUS_UNSUPPORTED_ENCAP,
    STATUS_UNSUPPORTED_LINKTYPE,
)
from gropcap.errors import ConfigError
from gropcap.gro import _kernels as K
from gropcap.gro.config import GroConfig
from gropcap.gro.flows import assign_flow_ids
from gropcap.gro.reasons import (
    BYPASS_DECODE, BYPASS_GRO_DISABLED, BYPASS_IP_CSUM, BYPASS_IP_FRAGMENT, BYPASS_IP_OPTIONS,
    BYPASS_IPV6_EXTHDR, BYPASS_L4_CSUM, BYPASS_NO_L4_OFFLOAD, BYPASS_NOT_IP,
    BYPASS_TCP_HEADER, BYPASS_TUNNEL, BYPASS_UDP_NO_GRO, NOT_HELD_IP_RF, NOT_HELD_LENGTH,
)
from gropcap.gro.result import GroResult
from gropcap.gso import gso_type_for
from gropcap.gro.rss import column_bytes, column_numpy, gro_bucket, rss_hash, rx_queue

GRO_LEGACY_MAX_SIZE = 65536   # include/net/gro.h: limit without BIG TCP

# inet_offloads[] with a gro_receive (net/ipv4/af_inet.c, gre_offload.c, udp_offload.c);
# inet6_offloads[] register the same protocols (ip6_offload.c): TCP, UDP, GRE, IPIP, IPv6.
_L3_HANDLERS = (IPPROTO_TCP, IPPROTO_UDP, IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6)
# Tunnels aggregated natively on the receiving device; UDP tunnels need a local tunnel
# socket, which this model does not have (plain UDP, no UDP GRO)
_NATIVE_TUNNELS = (TUN_GRE, TUN_GRE_TEB, TUN_IPIP, TUN_SIT, TUN_IP6IP6, TUN_IP4IP6)
_UDP_TUNNELS = (TUN_VXLAN, TUN_VXLAN_GPE, TUN_GENEVE)


def _u8(a: np.ndarray) -> np.ndarray:
    """A fixed-width numpy column as an (n, itemsize) uint8 matrix for the key."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    return a.view(np.uint8).reshape(len(a), a.dtype.itemsize)


def _era(config: GroConfig) -> int:
    kp = config.kernel
    if not kp.fixed_id_support:
        return K.ERA_INNER_ID
    if kp.flush_id_era:
        return K.ERA_FLUSH_ID
    if kp.two_bit_fixedid:
        return K.ERA_TWO_BIT
    return K.ERA_ONE_BIT


@dataclass
class PreparedBatch:
    """Arrays the kernels read, extracted from one packet table (see ``prepare``)."""

    cols: K.Cols
    flow_id: np.ndarray
    tun_type: np.ndarray
    n: int


def _pre_and_flush(t: pa.Table, config: GroConfig):
    """Per-packet decisions that need no held packet, in the kernel's evaluation order
    (precedence pinned in docs/gro-model.md, "Bypass precedence").

    Returns ``(pre, sfl_out, sfl_in)``: ``pre`` the BYPASS_* code of the first layer that
    bails before L4 (0 = reaches tcp_gro_receive), ``sfl_*`` the skb flush the outer /
    inner IP header sets (NOT_HELD_LENGTH for a length/padding mismatch, NOT_HELD_IP_RF
    for the reserved bit).
    """
    n = t.num_rows
    g = lambda name, dt=np.int64: column_numpy(t, name, dt)  # noqa: E731
    status = g("status", np.uint8)
    pre = np.zeros(n, np.uint8)

    def bail(mask, code):
        pre[(pre == 0) & mask] = code

    wire = g("wire_len")
    if not config.kernel.dsa_gro:
        # before e131a5634830 (v5.8) DSA user ports delivered with netif_receive_skb
        bail(g("dsa_tag", np.uint8) != 0, BYPASS_GRO_DISABLED)
    # dev_gro_receive: no packet_offload for skb->protocol; decode status
    bail((status == STATUS_NOT_IP) | (status == STATUS_UNSUPPORTED_LINKTYPE), BYPASS_NOT_IP)
    l4 = g("l4_proto", np.uint8)
    bail((status == STATUS_BAD_L4_HEADER) & (l4 == IPPROTO_TCP), BYPASS_TCP_HEADER)
    bail(np.isin(status, (STATUS_UNSUPPORTED_ENCAP, STATUS_BAD_TUNNEL_HEADER,
                          STATUS_ENCAP_TOO_DEEP)), BYPASS_TUNNEL)
    bail(status != STATUS_OK, BYPASS_DECODE)
    # vlan_gro_receive: TPID 0x9100 has no packet_offload
    depth = g("vlan_depth", np.uint8)
    bad_tpid = ((g("eth_type", np.uint16) == ETH_P_QINQ1)
                | ((depth >= 1) & (g("vlan_tpid0", np.uint16) == ETH_P_QINQ1))
                | ((depth >= 2) & (g("vlan_tpid1", np.uint16) == ETH_P_QINQ1)))
    bail(bad_tpid, BYPASS_NOT_IP)
    in_v = g("ip_version", np.uint8)
    out_v = g("outer_ip_version", np.uint8)
    bail((in_v == 0) & (out_v == 0), BYPASS_NOT_IP)
    sfl_out = np.zeros(n, np.uint8)
    sfl_in = np.zeros(n, np.uint8)

    def ip_layer(prefix, present, sfl):
        v = g(prefix + "version", np.uint8)
        proto = g(prefix + "proto", np.uint8)
        ext = g(prefix + "ext_mask", np.uint8)
        v4 = present & (v == 4)
        v6 = present & (v == 6)
        # ipv6_gro_receive: only HBH/Routing/DstOpts are skipped; a Fragment header (or
        # AH, ...) leaves a next header without gro_receive
        bail(v6 & ((ext & (IP6_EXT_FRAGMENT | IP6_EXT_OTHER)) != 0), BYPASS_IPV6_EXTHDR)
        # inet_gro_receive / ipv6_gro_receive: no gro_receive for the protocol
        bail(present & ~np.isin(proto, _L3_HANDLERS), BYPASS_NO_L4_OFFLOAD)
        # inet_gro_receive: *(u8 *)iph != 0x45, ip_is_fragment, ip_fast_csum
        bail(v4 & (g(prefix + "hdr_len") != 20), BYPASS_IP_OPTIONS)
        frag = g(prefix + "mf", np.bool_) | (g(prefix + "frag_off") != 0)
        bail(v4 & frag, BYPASS_IP_FRAGMENT)
        bail(v4 & ~g(prefix + "csum_ok", np.bool_), BYPASS_IP_CSUM)
        # skb flush: IP length != bytes from this header to the end of the frame
        # (padding, trailer, FCS): inet_gro_receive (u16 compare) / ipv6_gro_receive;
        # else the IPv4 reserved bit
        tot = g(prefix + "tot_len")
        got = wire - g(prefix + "offset")
        bad_len = np.where(v == 4, ((tot ^ got) & 0xFFFF) != 0, tot != got)
        sfl[(sfl == 0) & present & bad_len] = NOT_HELD_LENGTH
        sfl[(sfl == 0) & v4 & g(prefix + "rf", np.bool_)] = NOT_HELD_IP_RF

    enc = out_v != 0
    # layer 0: the outer header of a tunnel, else the only one
    ip_layer("outer_ip_", enc, sfl_out)
    ip_layer("ip_", ~enc & (in_v != 0), sfl_in)
    # tunnel layer, right after the outer header (gre/ipip/sit/udp gro_receive)
    tun = g("tun_type", np.uint8)
    tflags = g("tun_flags", np.uint32)
    has_tun = tun != 0
    bail(has_tun & np.isin(tun, _UDP_TUNNELS), BYPASS_UDP_NO_GRO)   # no tunnel socket
    bail(has_tun & ~np.isin(tun, _NATIVE_TUNNELS), BYPASS_TUNNEL)    # ERSPAN, FOU, GUE
    # "tunnels: Do not apply GRO to multiple layers of encapsulation" (encap_mark)
    bail(has_tun & ((g("encap_depth", np.uint8) > 1) | ~enc | (in_v == 0)), BYPASS_TUNNEL)
    gre = (tun == TUN_GRE) | (tun == TUN_GRE_TEB)
    # gre_gro_receive: only K and C flags, version 0; a bad GRE checksum
    bail(gre & ((tflags & (0xFFFF ^ (GRE_KEY | GRE_CSUM))) != 0), BYPASS_TUNNEL)
    bail(gre & ((tflags & GRE_CSUM) != 0) & ~g("tun_csum_ok", np.bool_), BYPASS_TUNNEL)
    # layer 1: the inner header of a native tunnel
    ip_layer("ip_", enc & (in_v != 0), sfl_in)
    bail(l4 == IPPROTO_UDP, BYPASS_UDP_NO_GRO)     # udp4/6_gro_receive: no UDP GRO mode
    bail(l4 != IPPROTO_TCP, BYPASS_NO_L4_OFFLOAD)
    if config.verify_checksums:
        # tcp4/6_gro_receive: skb_gro_checksum_validate, skipped when already flushing
        cs = g("l4_csum_state", np.uint8)
        bail(((cs == CSUM_BAD) | (cs == CSUM_PARTIAL)) & (sfl_out == 0) & (sfl_in == 0),
             BYPASS_L4_CSUM)
    bail(g("tcp_doff", np.uint8) < 5, BYPASS_TCP_HEADER)   # tcp_gro_pull_header
    return pre, sfl_out, sfl_in


def _same_flow_keys(t: pa.Table, config: GroConfig, hash_: np.ndarray, use: np.ndarray):
    """Exact same-flow classes: every field some layer compares for ``same_flow``.

    gro_list_prepare (hash, dev, MAC header; DSA port), vlan_gro_receive (tags),
    inet/ipv6_gro_receive (protocol, addresses; IPv6 flow label and extension bytes; hop
    limit before 5.18), gre_gro_receive (flags, protocol, key when K), eth_gro_receive
    (inner MACs of GRE-TEB), TCP ports (tcp_gro_lookup). Returns ``(key, loose)``;
    ``loose`` omits the pre-5.18 hop limit.
    """
    g = lambda name, dt: column_numpy(t, name, dt)  # noqa: E731
    parts = [_u8(hash_)]
    for name, dt in (("iface", np.uint16), ("dsa_port", np.int16), ("eth_dst", np.uint64),
                     ("eth_src", np.uint64), ("eth_type", np.uint16),
                     ("vlan_depth", np.uint8), ("vlan_tpid0", np.uint16),
                     ("vlan_tci0", np.uint16), ("vlan_tpid1", np.uint16),
                     ("vlan_tci1", np.uint16)):
        parts.append(_u8(g(name, dt)))
    hops = []
    for p in ("outer_ip_", "ip_"):
        v = g(p + "version", np.uint8)
        is6 = v == 6
        parts.append(_u8(v))
        parts.append(_u8(g(p + "proto", np.uint8)))
        for name, dt in (("flow_label", np.uint32), ("ext_mask", np.uint8),
                         ("ext_len", np.uint16), ("ext_digest", np.uint64)):
            parts.append(_u8(np.where(is6, g(p + name, dt), 0).astype(dt)))
        parts.append(column_bytes(t, p + "src"))
        parts.append(column_bytes(t, p + "dst"))
        hops.append(np.where(is6, g(p + "ttl", np.uint8), 0).astype(np.uint8))
    tun = g("tun_type", np.uint8)
    tflags = g("tun_flags", np.uint32)
    gre = (tun == TUN_GRE) | (tun == TUN_GRE_TEB)
    teb = tun == TUN_GRE_TEB
    parts.append(_u8(tun))
    parts.append(_u8(np.where(gre, tflags, 0).astype(np.uint32)))
    parts.append(_u8(np.where(gre, g("tun_proto", np.uint16), 0).astype(np.uint16)))
    parts.append(_u8(np.where(gre & ((tflags & GRE_KEY) != 0), g("tun_key", np.uint32),
                              0).astype(np.uint32)))
    for name, dt in (("inner_eth_dst", np.uint64), ("inner_eth_src", np.uint64),
                     ("inner_eth_type", np.uint16)):
        parts.append(_u8(np.where(teb, g(name, dt), 0).astype(dt)))
    parts.append(_u8(g("sport", np.uint16)))
    parts.append(_u8(g("dport", np.uint16)))
    loose_mat = np.ascontiguousarray(np.concatenate(parts, axis=1))
    loose = K.dedup_rows(loose_mat, use)
    if config.kernel.ipv6_hop_limit_flush:
        return loose, loose
    key_mat = np.ascontiguousarray(np.concatenate([loose_mat] + [h[:, None] for h in hops],
                                                  axis=1))
    return K.dedup_rows(key_mat, use), loose


def _size_limit(t: pa.Table, config: GroConfig) -> np.ndarray:
    """skb_gro_receive limit for a super-packet headed by each packet.

    netif_get_gro_max_size by the outermost IP version (``config.max_size``); no
    per-device knob before 5.16 (64 KB); above 64 KB only IPv6 from 5.19 and IPv4 from
    6.3 (BIG TCP, GRO_LEGACY_MAX_SIZE check).
    """
    out_v = column_numpy(t, "outer_ip_version", np.uint8)
    in_v = column_numpy(t, "ip_version", np.uint8)
    v = np.where(out_v != 0, out_v, in_v)
    kp = config.kernel
    if kp.version < (5, 16):
        return np.full(t.num_rows, GRO_LEGACY_MAX_SIZE, np.int64)
    lim6 = config.max_size(6)
    lim4 = config.max_size(4)
    if lim6 > GRO_LEGACY_MAX_SIZE and kp.version < (5, 19):
        lim6 = GRO_LEGACY_MAX_SIZE
    if lim4 > GRO_LEGACY_MAX_SIZE and not kp.big_tcp_ipv4:
        lim4 = GRO_LEGACY_MAX_SIZE
    return np.where(v == 6, lim6, lim4).astype(np.int64)


def _check_table(packets: pa.Table) -> None:
    missing = [f.name for f in PACKET_SCHEMA if f.name not in packets.column_names]
    if missing:
        raise ConfigError(f"packet table lacks columns {missing[:5]}",
                          hint="pass a table with decode.schema.PACKET_SCHEMA")


def prepare(packets: pa.Table, config: GroConfig, *, polls=None) -> PreparedBatch:
    """Extract and derive the kernel input arrays from a packet table.

    Parameters:
        packets: PACKET_SCHEMA table, rows in capture order.
        config: the GroConfig (kernel profile decides keys and eras).
        polls: optional int64 per-packet GRO window numbers (non-decreasing).

    Returns a :class:`PreparedBatch` for :func:`run_prepared`.
    """
    _check_table(packets)
    t = packets
    n = t.num_rows
    g = lambda name, dt=np.int64: column_numpy(t, name, dt)  # noqa: E731
    napi = config.model == "napi"
    # the ideal model has no RSS: hash 0, one list
    hash_ = rss_hash(t, config.rss_key, enabled=napi and config.rss == "toeplitz")
    if napi:
        queue = rx_queue(hash_, config.queues).astype(np.int32)
        bucket = gro_bucket(hash_, config.kernel.hash_buckets).astype(np.int32)
    else:
        queue = np.zeros(n, np.int32)
        bucket = np.zeros(n, np.int32)
    pre, sfl_out, sfl_in = _pre_and_flush(t, config)
    use = pre == 0
    key, loose = _same_flow_keys(t, config, hash_, use)
    opts = column_bytes(t, "tcp_options")
    opt_len = g("tcp_opt_len", np.int64)
    opt_mat = np.ascontiguousarray(np.concatenate([opts, _u8(opt_len.astype(np.uint8))],
                                                  axis=1))
    opt = K.dedup_rows(opt_mat, use)
    optnots = K.dedup_rows(np.ascontiguousarray(K.zero_timestamps(opt_mat, opt_len)), use)
    out_v = g("outer_ip_version", np.int32)
    in_v = g("ip_version", np.int32)
    wire = g("wire_len")
    # p->len: bytes after the outermost IP header's offset (eth_type_trans pulled the
    # MAC header; in-band VLAN tags stay in skb->data and count)
    outermost_off = np.where(out_v != 0, g("outer_ip_offset"), g("ip_offset"))
    plen = wire - outermost_off + 4 * g("vlan_depth")
    # skb_gro_len at TCP: bytes after the innermost IP and TCP headers, padding included
    payload = g("payload_len")
    tlen = np.maximum(wire - g("ip_offset") - g("ip_hdr_len") - 4 * g("tcp_doff"), payload)
    if polls is None:
        poll_win = np.zeros(n, np.int64)
    else:
        poll_win = np.ascontiguousarray(np.asarray(polls, dtype=np.int64))
        if poll_win.shape != (n,):
            raise ConfigError(f"polls has shape {poll_win.shape}, expected ({n},)",
                              hint="give one poll/window number per packet")
        if n > 1 and np.any(np.diff(poll_win) < 0):
            raise ConfigError("polls must be non-decreasing",
                              hint="number GRO windows in capture order")
    i32 = lambda name: g(name, np.int32)  # noqa: E731
    cols = K.Cols(
        key=key, loose=np.where(loose < 0, 0, loose), queue=queue, bucket=bucket,
        ts=g("ts_ns"), pre=pre, sfl_out=sfl_out, sfl_in=sfl_in, payload=payload, tlen=tlen,
        plen=plen.astype(np.int64), limit=_size_limit(t, config), seq=g("tcp_seq"),
        ack=g("tcp_ack"), flags=i32("tcp_flags"), doff=i32("tcp_doff"),
        window=i32("tcp_window"), opt=opt, optnots=optnots,
        in_v=in_v, in_ttl=i32("ip_ttl"), in_tos=i32("ip_tos"), in_df=i32("ip_df"),
        in_id=i32("ip_id"), out_v=out_v, out_ttl=i32("outer_ip_ttl"),
        out_tos=i32("outer_ip_tos"), out_df=i32("outer_ip_df"), out_id=i32("outer_ip_id"),
        poll_win=poll_win,
    )
    return PreparedBatch(cols=cols, flow_id=assign_flow_ids(t),
                         tun_type=g("tun_type", np.uint8), n=n)


def _cfg(config: GroConfig, model: int) -> K.Cfg:
    kp = config.kernel
    mask = TCP_FLAG_FIN | TCP_FLAG_PSH
    if not kp.cwr_in_flag_word:
        mask |= TCP_FLAG_CWR
    return K.Cfg(model=model, era=_era(config), hop_flush=kp.ipv6_hop_limit_flush,
                 flag_mask=mask, queues=config.queues, buckets=kp.hash_buckets,
                 budget=config.budget, gap_ns=config.poll_gap_ns, hz=config.hz,
                 timeout_ns=config.gro_flush_timeout_ns, defer=config.napi_defer_hard_irqs)


def new_state(nkeys: int, nloose: int, n: int, queues: int, buckets: int) -> K.State:
    """Empty held-entry table for ``nkeys`` GRO keys and ``n`` packets."""
    nk = max(nkeys, 1)
    z = lambda m: np.zeros(m, np.int64)  # noqa: E731
    return K.State(
        e_first=np.full(nk, -1, np.int64), e_last=z(nk), e_count=z(nk), e_payload=z(nk),
        e_grolen=z(nk),
        e_len=z(nk), e_mss=z(nk), e_fixed=z(nk), e_age=z(nk), e_order=z(nk),
        loose_held=z(max(nloose, 1)), tbl=np.full((queues, buckets, K.MAX_GRO_SKBS), -1,
                                                   np.int64),
        tcnt=np.zeros((queues, buckets), np.int64), nxt=np.full(n, -1, np.int64),
        serial=z(1),
    )


def _new_out(n: int) -> K.Out:
    z = lambda: np.zeros(n, np.int64)  # noqa: E731
    return K.Out(reason=np.zeros(n, np.uint8), role=np.zeros(n, np.uint8), seg_of=z(),
                 ppoll=z(), s_first=z(), s_last=z(), s_count=z(), s_payload=z(), s_gso=z(),
                 s_end=z(), s_queue=z(), s_poll=z(), s_fixed=z(), nseg=np.zeros(1, np.int64))


def run_prepared(batch: PreparedBatch, config: GroConfig, *, explicit_polls=False) -> GroResult:
    """Run the kernels over a prepared batch (one batch, flushed at the end)."""
    c = batch.cols
    n = batch.n
    if config.model == "ideal":
        model = K.MODEL_IDEAL
    elif explicit_polls:
        model = K.MODEL_WINDOWS
    else:
        model = K.MODEL_NAPI
    cfg = _cfg(config, model)
    nkeys = int(c.key.max()) + 1 if n else 0
    nloose = int(c.loose.max()) + 1 if n else 0
    st = new_state(nkeys, nloose, n, config.queues, cfg.buckets)
    out = _new_out(n)
    if model == K.MODEL_IDEAL:
        K.run_ideal(c, cfg, st, out)
        K.flush_ideal(c, st, out)
    elif model == K.MODEL_WINDOWS:
        K.run_windows(c, cfg, st, out)
    else:
        rows = np.argsort(c.queue, kind="stable").astype(np.int64)
        qstart = np.searchsorted(c.queue[rows], np.arange(config.queues + 1)).astype(np.int64)
        # arrival = running maximum of ts_ns within a queue (backwards stamps keep order)
        arr = c.ts[rows].copy()
        for q in range(config.queues):
            seg = arr[qstart[q]:qstart[q + 1]]
            np.maximum.accumulate(seg, out=seg)
        # polls: one per packet at most with work, plus timer polls without work
        cap = 2 * n + 16
        while True:
            p_time = np.empty(cap, np.int64)
            p_queue = np.empty(cap, np.int64)
            npoll = K.run_napi(c, cfg, st, out, rows, qstart, arr, p_time, p_queue)
            if npoll >= 0:
                break
            cap *= 2 + config.napi_defer_hard_irqs
            st = new_state(nkeys, nloose, n, config.queues, cfg.buckets)
            out = _new_out(n)
        p_time = p_time[:npoll]
        p_queue = p_queue[:npoll]
        # polls of all queues in time order (ties: lower queue, then simulation order)
        order = np.lexsort((np.arange(len(p_time)), p_queue, p_time))
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        ns = int(out.nseg[0])
        s_rank = rank[out.s_poll[:ns]]
        seg_order = np.argsort(s_rank, kind="stable")
        new_id = np.empty(ns, np.int64)
        new_id[seg_order] = np.arange(ns)
        return _pack(batch, config, out, seg_order, new_id[out.seg_of], s_rank[seg_order],
                     rank[out.ppoll], c.queue)
    ns = int(out.nseg[0])
    ident = np.arange(ns)
    if model == K.MODEL_IDEAL:
        return _pack(batch, config, out, ident, out.seg_of, np.full(ns, -1, np.int64),
                     np.full(n, -1, np.int64), np.zeros(n, np.int32))
    return _pack(batch, config, out, ident, out.seg_of, out.s_poll[:ns], out.ppoll, c.queue)


def _gso_types(batch, config, first, count, fixed) -> np.ndarray:
    """gso_type of each super-packet (gso.gso_type_for; 0 for a single packet).

    gso_type_for depends on (innermost IP version, fixed-ID bits, CWR, tunnel type) only:
    evaluated once per combination through a small table.
    """
    out = np.zeros(len(first), np.uint32)
    multi = np.nonzero(count > 1)[0]
    if not len(multi):
        return out
    c = batch.cols
    f = first[multi]
    v6 = (c.in_v[f] == 6).astype(np.int64)
    fx = fixed[multi].astype(np.int64) & 3
    cwr = ((c.flags[f] & TCP_FLAG_CWR) != 0).astype(np.int64)
    tun = batch.tun_type[f].astype(np.int64) & 15
    code = ((v6 * 4 + fx) * 2 + cwr) * 16 + tun
    table = np.empty(2 * 4 * 2 * 16, np.uint32)
    for v in range(2):
        for x in range(4):
            for cw in range(2):
                for tt in range(16):
                    table[((v * 4 + x) * 2 + cw) * 16 + tt] = gso_type_for(
                        config.kernel.version, 6 if v else 4,
                        ip_fixedid=0 if v else x, cwr=bool(cw), tun_type=tt)
    out[multi] = table[code]
    return out


def _pack(batch, config, out, seg_order, gro_seg, seg_poll, pkt_poll, pkt_queue) -> GroResult:
    ns = int(out.nseg[0])
    sel = lambda a: a[:ns][seg_order]  # noqa: E731
    first = sel(out.s_first)
    count = sel(out.s_count)
    flow = batch.flow_id
    return GroResult(
        flow_id=flow, gro_seg=gro_seg, gro_role=out.role, reason=out.reason,
        rx_queue=pkt_queue, poll_id=pkt_poll,
        seg_flow_id=flow[first] if ns else np.zeros(0, np.int64),
        seg_first_packet=first, seg_last_packet=sel(out.s_last), seg_count=count,
        seg_payload_len=sel(out.s_payload), seg_gso_size=sel(out.s_gso),
        seg_gso_type=_gso_types(batch, config, first, count, sel(out.s_fixed)),
        seg_end_reason=sel(out.s_end),
        seg_rx_queue=sel(out.s_queue) if batch.cols.queue.size else np.zeros(0),
        seg_poll_id=seg_poll,
    )


def simulate(packets: pa.Table, config: GroConfig, *, polls=None) -> GroResult:
    """Replay Linux GRO over a packet table; the numba twin of ``reference.simulate``.

    Parameters:
        packets: table with ``decode.schema.PACKET_SCHEMA`` (rows in capture order).
        config: kernel profile and receive model (``GroConfig``).
        polls: optional int64 array, one non-decreasing GRO window number per packet
            (``napi`` model only): each window is one poll flushed at its end
            (docs/gro-model.md, "Explicit batches").

    Returns a :class:`GroResult` (per-packet verdicts, super-packets in delivery order).

    >>> # res = simulate(table, GroConfig(model="napi", queues=4)); res.seg_count.sum()
    """
    if polls is not None and config.model != "napi":
        raise ConfigError("polls= needs the napi model",
                          hint="use GroConfig(model='napi') with explicit polls")
    batch = prepare(packets, config, polls=polls)
    return run_prepared(batch, config, explicit_polls=polls is not None)
