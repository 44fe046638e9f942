"""numba kernels of the GRO engine (private: arrays in, arrays out; see engine.py).

Layer: per-packet numpy arrays prepared by ``engine.py`` -> per-packet verdicts and
super-packet rows. Nothing here raises for data: every packet ends in a super-packet with a
reason code. The rules mirror the kernel functions named next to them (net/core/gro.c,
include/net/gro.h, net/ipv4/af_inet.c, net/ipv6/ip6_offload.c, net/ipv4/tcp_offload.c);
the batch models follow docs/gro-model.md.

State arrays are indexed by *GRO key* (an exact same-flow class computed by engine.py: at
most one held entry per key exists at any time, because a packet that finds its key held
either merges into it or completes it first). A held entry keeps a copy of the header
fields of its first packet (p's headers), so the state never refers back to an earlier
batch: it crosses batch and process boundaries as plain arrays.

Every packet gets an *instance* number: the super-packet it belongs to (a held entry's
instance, or a fresh one when delivered alone). engine.py maps instances to seg_ids once
the delivery order is known. Hot helpers are ``inline="always"`` and ``_nrt=False``:
passing a few dozen arrays through nested calls (and reference counting them) would cost
more than the GRO rules themselves.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from gropcap.constants import (
    ETH_P_8021AD, ETH_P_8021Q, ETH_P_QINQ1, GRE_CSUM, GRE_KEY, IP6_EXT_FRAGMENT,
    IP6_EXT_OTHER, IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP,
    TUN_GENEVE, TUN_GRE, TUN_GRE_TEB, TUN_IP4IP6, TUN_IP6IP6, TUN_IPIP, TUN_SIT, TUN_VXLAN,
    TUN_VXLAN_GPE,
    TCP_FLAG_CWR, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG,
)
from gropcap.decode.schema import (
    CSUM_BAD, CSUM_PARTIAL, STATUS_BAD_L4_HEADER, STATUS_BAD_TUNNEL_HEADER,
    STATUS_ENCAP_TOO_DEEP, STATUS_NOT_IP, STATUS_OK, STATUS_UNSUPPORTED_ENCAP,
    STATUS_UNSUPPORTED_LINKTYPE,
)
from gropcap.gro.reasons import (
    BYPASS_DECODE, BYPASS_GRO_DISABLED, BYPASS_IP_CSUM, BYPASS_IP_FRAGMENT, BYPASS_IP_OPTIONS,
    BYPASS_IPV6_EXTHDR, BYPASS_L4_CSUM, BYPASS_NO_L4_OFFLOAD, BYPASS_NO_VLAN_GRO,
    BYPASS_NOT_IP, BYPASS_TCP_HEADER, BYPASS_TUNNEL, BYPASS_UDP_NO_GRO, NOT_HELD_LENGTH,
    END_UDP_MAX_SEGS, FLUSH_UDP_LARGER,
    END_BUCKET_FULL, END_CAPTURE, END_FIN, END_POLL, END_POLL_OLD, END_PSH,
    END_SHORT_SEGMENT, END_URG, FLUSH_CWR, FLUSH_DF, FLUSH_ECN, FLUSH_HOP_LIMIT_FLOW,
    FLUSH_FLAGS_FINAL, FLUSH_IP_ID, FLUSH_IP_RF, FLUSH_LENGTH, FLUSH_OUTER_DF,
    FLUSH_OUTER_ECN, FLUSH_OUTER_IP_ID,
    FLUSH_FRAG_LIST, FLUSH_GSO_SIZE, FLUSH_MAX_SEGS,
    FLUSH_OUTER_TOS, FLUSH_OUTER_TTL, FLUSH_PAYLOAD_LARGER, FLUSH_SEQ, FLUSH_SIZE_LIMIT,
    FLUSH_TCP_ACK, FLUSH_TCP_DOFF, FLUSH_TCP_FLAGS, FLUSH_TCP_OPTIONS, FLUSH_TCP_TS,
    FLUSH_TCP_WINDOW, FLUSH_TOS, FLUSH_TTL, FLUSH_ZERO_PAYLOAD, MERGED, NO_HELD_PACKET,
    NOT_HELD_FIN, NOT_HELD_FRAG_LIST, NOT_HELD_GSO_SHORT, NOT_HELD_IP_RF, NOT_HELD_PSH,
    NOT_HELD_RST, NOT_HELD_SYN, NOT_HELD_URG,
    NOT_HELD_ZERO_PAYLOAD, ROLE_ALONE, ROLE_HEAD, ROLE_MERGED,
)

MAX_GRO_SKBS = 8          # net/core/gro.c: held entries per bucket

# IP ID eras (KernelProfile): which inet_gro_receive / inet_gro_flush logic applies
ERA_INNER_ID = 0          # < 4.7: innermost ID must be p.id + count, no fixed IDs
ERA_FLUSH_ID = 1          # 4.7 - 6.9: flush_id / is_atomic in the L3 loop
ERA_ONE_BIT = 2           # 6.10 - 6.17: inet_gro_flush, one shared ip_fixedid bit
ERA_TWO_BIT = 3           # 6.18+: two ip_fixedid bits (outer / inner), no DF needed

MODEL_IDEAL = 0
MODEL_NAPI = 1
MODEL_WINDOWS = 2         # napi with explicit polls= windows


class Cols(NamedTuple):
    """Per-packet inputs of one batch, all length n (prepared by engine.py)."""
    row: np.ndarray        # int64 global packet row
    key: np.ndarray        # int64 exact same-flow class (-1: bypass packet)
    loose: np.ndarray      # int64 class without the IPv6 hop limit (pre-5.18 reason only)
    queue: np.ndarray      # int32 RX queue
    bucket: np.ndarray     # int32 GRO hash bucket
    pre: np.ndarray        # uint8 BYPASS_* code, 0 when the packet enters TCP GRO
    sfl_out: np.ndarray    # uint8 skb flush set by the outer IP layer (NOT_HELD_*), 0 none
    sfl_in: np.ndarray     # uint8 skb flush set by the inner / only IP layer
    payload: np.ndarray    # uint32 TCP payload bytes (column payload_len: accounting)
    tlen: np.ndarray       # int64 skb_gro_len at TCP: payload plus padding / trailer
    plen: np.ndarray       # int64 p->len if held: bytes after the outer IP offset + tags
    limit: np.ndarray      # int64 size limit if this packet heads a super-packet
    # header fields that the rules only compare are the columns themselves (schema
    # dtypes, no copies); fields used in arithmetic are int32
    seq: np.ndarray        # uint32
    ack: np.ndarray        # uint32
    flags: np.ndarray      # int32 9 TCP flag bits
    doff: np.ndarray       # uint8
    window: np.ndarray     # uint16
    opt: np.ndarray        # uint64 [n, 5] TCP option bytes (read-only view of the column)
    opt_len: np.ndarray    # tcp_opt_len (column dtype)
    in_v: np.ndarray       # uint8 inner (only) IP version
    in_ttl: np.ndarray     # uint8
    in_tos: np.ndarray     # uint8
    in_df: np.ndarray      # int32
    in_id: np.ndarray      # int32
    out_v: np.ndarray      # uint8 outer IP version, 0 when not encapsulated
    out_ttl: np.ndarray
    out_tos: np.ndarray
    out_df: np.ndarray
    out_id: np.ndarray
    gcode: np.ndarray      # int64 (innermost v6, CWR, tun_type) code for gso_type
    flow: np.ndarray       # int64 flow_id
    poll_win: np.ndarray   # int64 explicit poll window per packet (MODEL_WINDOWS)
    segs: np.ndarray       # int64 NAPI_GRO_CB(skb)->count on arrival: gso_segs of a frame
    #                        that arrives as a GSO packet (captured coalesced, gro_cells), 1
    gsz: np.ndarray        # int64 skb_shinfo(skb)->gso_size of such a frame, 0 otherwise
    sfl_fl: np.ndarray     # uint8 NOT_HELD_FRAG_LIST when it carries a frag_list, else 0
    udp: np.ndarray        # uint8 UDP_SEGMENT / UDP_FRAGLIST: the packet enters
    #                        udp_gro_receive_segment (gro/_udp_prepare.py), 0: TCP
    udp_len: np.ndarray    # uint16 uh->len of such a packet


class Cfg(NamedTuple):
    """Scalar switches (from GroConfig / KernelProfile)."""
    model: int
    era: int
    hop_flush: bool        # >= 5.18: IPv6 hop limit is a flush check
    flag_mask: int         # flag-word bits ignored: FIN|PSH (+CWR before 6.15)
    queues: int
    buckets: int
    budget: int
    gap_ns: int
    hz: int
    timeout_ns: int
    defer: int
    tcp_flist: bool        # GroConfig.tcp_fraglist: is_flist on every TCP flow (v6.10)
    timer_flush_old: bool  # >= 4.20 (605108acfe62): napi_complete_done flushes old entries
                           # when it arms the gro_flush_timeout timer; before: nothing
    watchdog_empty: bool   # >= 5.7 (6f8b12d661d0): napi_watchdog polls with nothing held
    udp_l3: bool           # >= 6.9: udp_gro_receive_segment runs the L3 pair checks


class State(NamedTuple):
    """Held-entry table indexed by GRO key (p's counters and header copy) and counters.

    ``e_first`` is -1 for a key with nothing held. Grows with the number of keys; never
    with the number of packets.
    """
    e_first: np.ndarray    # int64 first packet row (global), -1 when nothing held
    e_last: np.ndarray     # int64
    e_count: np.ndarray    # int64 segments
    e_payload: np.ndarray  # int64 sum of payload_len (accounting)
    e_grolen: np.ndarray   # int64 skb_gro_len(p): sum of TCP lengths merged
    e_len: np.ndarray      # int64 p->len
    e_mss: np.ndarray      # int64 gso_size
    e_fixed: np.ndarray    # uint8 ip_fixedid bits (6.10+) / is_atomic (4.7-6.9)
    e_age: np.ndarray      # int64 jiffy of the poll that held it
    e_order: np.ndarray    # int64 hold serial (oldest first in the ideal model flush)
    e_inst: np.ndarray     # int64 instance (super-packet) number
    e_queue: np.ndarray    # int32 (Cols.queue)
    e_limit: np.ndarray    # int32 (GroConfig caps gro_max_size at 512 KiB)
    e_loose: np.ndarray    # int64
    e_gcode: np.ndarray    # uint8 (< 64)
    e_flow: np.ndarray     # int64
    # p's header copy from here on, each in its PACKET_SCHEMA column's width
    e_seq: np.ndarray      # uint32
    e_ack: np.ndarray      # uint32
    e_flags: np.ndarray    # uint16
    e_doff: np.ndarray     # uint8
    e_window: np.ndarray   # uint16
    e_opt: np.ndarray      # uint64 [nkeys, 6]: 40 option bytes, then length & 0xFF and
    #                        min(length, 48) << 8
    e_in_ttl: np.ndarray   # uint8
    e_in_tos: np.ndarray   # uint8
    e_in_df: np.ndarray    # uint8
    e_in_id: np.ndarray    # uint16
    e_out_ttl: np.ndarray
    e_out_tos: np.ndarray
    e_out_df: np.ndarray
    e_out_id: np.ndarray
    e_udp_len: np.ndarray  # uint16 uh->len of p's first datagram (UDP GRO)
    loose_held: np.ndarray  # int32 held entries per loose key
    tbl: np.ndarray        # int64 [queues, buckets, 8] keys, oldest first
    tcnt: np.ndarray       # int64 [queues, buckets]
    ctr: np.ndarray        # int64 [4]: hold serial, next instance, next poll, spare
    qs: np.ndarray         # int64 [queues, QS_N] NAPI scheduler state per queue
    win: np.ndarray        # int64 [3] explicit windows: current value, open, ordinal


# gcode offset of a packet delivered alone (no gro_complete: no fraglist completion bits)
GCODE_DELIVERED = 64
TCP_FLIST_MAX_SEGS = 64   # tcp_gro_receive, is_flist: NAPI_GRO_CB(p)->count >= 64 flushes
FLIST_MAX_LEN = 65536     # skb_gro_receive_list: p->len + skb->len >= 65536 -> -E2BIG

# per-queue NAPI scheduler state (State.qs columns)
QS_TIMER = 0        # pending hrtimer time
QS_HAS_TIMER = 1
QS_MASKED = 2       # interrupt masked: arrivals wait for the timer
QS_DEFER = 3        # napi->defer_hard_irqs_count
QS_CONT = 4         # after a full-budget poll: 1 gap-rule, 2 timer continuation
QS_CONT_T = 5
QS_LAST_POLL = 6    # global number of the queue's last poll, -1 none
QS_LAST_TIME = 7
QS_NEXT = 8         # out: first unprocessed position in the queue's rows
QS_N = 9


class Out(NamedTuple):
    """Outputs of one call: per packet of the batch, then super-packets in emission order."""
    reason: np.ndarray     # uint8 per packet
    inst: np.ndarray       # int64 per packet: instance (super-packet) number
    ppoll: np.ndarray      # int64 per packet: poll number (-1 ideal, -2 not processed)
    s_first: np.ndarray    # int64 super-packets (global rows)
    s_last: np.ndarray
    s_count: np.ndarray
    s_payload: np.ndarray
    s_gso: np.ndarray
    s_end: np.ndarray
    s_queue: np.ndarray
    s_poll: np.ndarray
    s_fixed: np.ndarray    # int64 ip_fixedid / is_atomic state at completion
    s_inst: np.ndarray
    s_gcode: np.ndarray
    s_flow: np.ndarray
    s_trig: np.ndarray     # int64 row being received when it went up (-1: a flush)
    nseg: np.ndarray       # int64 [1]
    cur: np.ndarray        # int64 [1]: the row _receive is on (-1 in a flush)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _emit(out, first, last, count, payload, gso, end, queue, poll, fixed, inst, gcode, flow):
    s = out.nseg[0]
    out.s_first[s] = first
    out.s_last[s] = last
    out.s_count[s] = count
    out.s_payload[s] = payload
    out.s_gso[s] = gso
    out.s_end[s] = end
    out.s_queue[s] = queue
    out.s_poll[s] = poll
    out.s_fixed[s] = fixed
    out.s_inst[s] = inst
    out.s_gcode[s] = gcode
    out.s_flow[s] = flow
    out.s_trig[s] = out.cur[0]
    out.nseg[0] = s + 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _deliver(i, reason, c, st, out, poll):
    """A packet goes up alone at once (GRO_NORMAL); a frame that arrived as a GSO packet
    goes up as the TCP GSO packet it is (count = its segments, its gso_size)."""
    inst = st.ctr[1]
    st.ctr[1] = inst + 1
    out.inst[i] = inst
    segs = c.segs[i]
    _emit(out, c.row[i], c.row[i], segs, c.payload[i], c.gsz[i] if segs > 1 else 0, reason,
          c.queue[i], poll, 0, inst, c.gcode[i] + GCODE_DELIVERED, c.flow[i])


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _complete(k, end, st, out, poll):
    """gro_complete: the held entry of key k goes up (count == 1 -> gso_size 0)."""
    count = st.e_count[k]
    gso = st.e_mss[k] if count > 1 else 0
    _emit(out, st.e_first[k], st.e_last[k], count, st.e_payload[k], gso, end, st.e_queue[k],
          poll, st.e_fixed[k], st.e_inst[k], st.e_gcode[k], st.e_flow[k])
    st.e_first[k] = -1
    st.loose_held[st.e_loose[k]] -= 1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _unlink(tbl, tcnt, q, b, k):
    """Remove key k from bucket (q, b), keeping the others oldest first."""
    n = tcnt[q, b]
    pos = -1
    for x in range(n):
        if tbl[q, b, x] == k:
            pos = x
            break
    if pos < 0:
        return
    for x in range(pos, n - 1):
        tbl[q, b, x] = tbl[q, b, x + 1]
    tbl[q, b, n - 1] = -1
    tcnt[q, b] = n - 1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _ip_pair(v, ttl, tos, df, ttl2, tos2, df2, hop_flush, r_ttl, r_tos, r_ecn, r_df):
    """inet_gro_flush / ipv6_gro_flush, the part shared by every era: TTL, TOS, DF.

    Returns the reason of the first differing field (kernel OR order), 0 when equal.
    IPv6: traffic class first, then hop limit (ipv6_gro_flush; hop limit only >= 5.18).
    """
    if v == 6:
        if tos != tos2:
            return r_ecn if ((tos ^ tos2) & 0xFC) == 0 else r_tos
        if hop_flush and ttl != ttl2:
            return r_ttl
        return 0
    if ttl != ttl2:
        return r_ttl
    if tos != tos2:
        return r_ecn if ((tos ^ tos2) & 0xFC) == 0 else r_tos
    if df != df2:
        return r_df
    return 0


# The option area tcp_gro_receive compares (memcmp of th + 1 over the option length) is
# modelled as 48 bytes: the 40 option bytes, the length byte, zeros. FLUSH_TCP_TS means
# the areas differ only in the TSval/TSecr of their first timestamp option
# (docs/gro-model.md). Option bytes are compared as 5 native uint64 words; a held entry
# keeps them plus the length byte and the walk bound min(length, 48) (State.e_opt), and
# the zeroed copies are never materialised: the timestamp position is found only when
# two areas differ.
OPT_BYTES = 40
OPT_WORDS = 5
OPT_AREA = 48


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _same_options(i, k, c, st):
    if (np.int64(c.opt_len[i]) & 0xFF) != np.int64(st.e_opt[k, OPT_WORDS] & np.uint64(0xFF)):
        return False
    for w in range(OPT_WORDS):
        if c.opt[i, w] != st.e_opt[k, w]:
            return False
    return True


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _area_byte(a, row, lenbyte, b):
    """Byte b of a 48-byte option area (a[row] holds the 40 option bytes as native
    little-endian uint64 words), then the length byte, then zeros."""
    if b < OPT_BYTES:
        return np.int64((a[row, b >> 3] >> np.uint64((b & 7) * 8)) & np.uint64(0xFF))
    if b == OPT_BYTES:
        return lenbyte
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ts_at(a, row, lenbyte, end):
    """Start of the first timestamp option (kind 8, length 10) of an option area walked
    up to ``end``, -1 if none (the walk of :func:`zero_timestamps`)."""
    x = 0
    while x < end:
        kind = _area_byte(a, row, lenbyte, x)
        if kind == 0:
            break
        if kind == 1:
            x += 1
            continue
        if x + 1 >= end:
            break
        ol = _area_byte(a, row, lenbyte, x + 1)
        if ol < 2 or x + ol > end:
            break
        if kind == 8 and ol == 10:
            return x
        x += ol
    return -1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _options_differ(i, k, opt, opt_len, e_opt):
    """True when the two option areas (packet i's ``Cols.opt``/``opt_len``, entry k's
    ``State.e_opt``) still differ with the TSval/TSecr of their first timestamp option
    zeroed (FLUSH_TCP_OPTIONS rather than FLUSH_TCP_TS). Takes the three arrays, not
    the ~90-array tuples: a smaller signature to compile and pass."""
    ln = np.int64(opt_len[i])
    lb_i = ln & 0xFF
    ts_i = _ts_at(opt, i, lb_i, min(ln, OPT_AREA))
    lb_k = np.int64(e_opt[k, OPT_WORDS] & np.uint64(0xFF))
    ts_k = _ts_at(e_opt, k, lb_k, np.int64(e_opt[k, OPT_WORDS] >> np.uint64(8)))
    for b in range(OPT_AREA):
        vi = 0 if ts_i >= 0 and ts_i + 2 <= b < ts_i + 10 else _area_byte(opt, i, lb_i, b)
        vk = 0 if ts_k >= 0 and ts_k + 2 <= b < ts_k + 10 else \
            _area_byte(e_opt, k, lb_k, b)
        if vi != vk:
            return True
    return False


@numba.njit(cache=True, nogil=True, _nrt=False)
def _options_differ_beyond_ts(i, k, c, st):
    """:func:`_options_differ` on packet i of ``c`` and entry k of ``st`` (tests call it
    with the tuples; the kernels call :func:`_options_differ`, so a run compiles only
    that one)."""
    return _options_differ(i, k, c.opt, c.opt_len, st.e_opt)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _pair_checks(i, k, c, cfg, st):
    """tcp_gro_receive flush items for packet i against held entry k, in kernel order.

    Returns the reason code of the first item that holds (0: the merge may proceed to
    skb_gro_receive). Mutates the entry's fixed-ID state exactly as the kernel does, even
    when another item flushes (the kernel ORs every item).
    """
    count = st.e_count[k]
    reason = 0
    # --- 4.7-6.9 and older: p->flush was filled in the L3 loop (inet_gro_receive /
    # ipv6_gro_receive) and is the first term of tcp_gro_receive's flush.
    if cfg.era <= ERA_FLUSH_ID:
        if c.out_v[i] != 0:
            reason = _ip_pair(c.out_v[i], c.out_ttl[i], c.out_tos[i], c.out_df[i],
                              st.e_out_ttl[k], st.e_out_tos[k], st.e_out_df[k], cfg.hop_flush,
                              FLUSH_OUTER_TTL, FLUSH_OUTER_TOS, FLUSH_OUTER_ECN,
                              FLUSH_OUTER_DF)
            if reason == 0 and c.sfl_out[i] != 0:
                # inet_gro_receive: NAPI_GRO_CB(p)->flush |= flush (N's length / RF)
                reason = FLUSH_IP_RF if c.sfl_out[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
        if reason == 0:
            reason = _ip_pair(c.in_v[i], c.in_ttl[i], c.in_tos[i], c.in_df[i],
                              st.e_in_ttl[k], st.e_in_tos[k], st.e_in_df[k], cfg.hop_flush,
                              FLUSH_TTL, FLUSH_TOS, FLUSH_ECN, FLUSH_DF)
            if reason == 0 and c.sfl_in[i] != 0:
                reason = FLUSH_IP_RF if c.sfl_in[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
    # --- tcp_gro_receive: CWR, flag word, ack, options
    fl = c.flags[i]
    if reason == 0 and (fl & TCP_FLAG_CWR) != 0:
        reason = FLUSH_CWR
    if reason == 0:
        diff = (fl ^ st.e_flags[k]) & ~cfg.flag_mask
        if (diff & (TCP_FLAG_SYN | TCP_FLAG_RST | TCP_FLAG_URG)) != 0:
            reason = FLUSH_FLAGS_FINAL     # never equal: a held p has none of them
        elif diff != 0:
            reason = FLUSH_TCP_FLAGS
        elif c.doff[i] != st.e_doff[k]:
            reason = FLUSH_TCP_DOFF
        elif c.window[i] != st.e_window[k]:
            reason = FLUSH_TCP_WINDOW
    if reason == 0 and c.ack[i] != st.e_ack[k]:
        reason = FLUSH_TCP_ACK
    if reason == 0 and not _same_options(i, k, c, st):
        reason = FLUSH_TCP_OPTIONS if _options_differ(i, k, c.opt, c.opt_len, st.e_opt) \
            else FLUSH_TCP_TS
    # --- IP ID (and, from 6.10, all L3 pair checks): gro_receive_network_flush
    r_id = _ip_id_checks(i, k, c, cfg, st, count)
    if reason == 0:
        reason = r_id
    if reason != 0:
        return reason
    # --- size of the new segment vs gso_size: (len - 1) >= mss, unsigned; an arriving
    # GSO skb must instead carry p's gso_size (tcp_gro_receive: skb_is_gso branch)
    ln = c.tlen[i]
    if c.gsz[i] != 0:
        if c.gsz[i] != st.e_mss[k]:
            return FLUSH_GSO_SIZE
    elif ln == 0:
        return FLUSH_ZERO_PAYLOAD
    elif ln > st.e_mss[k]:
        return FLUSH_PAYLOAD_LARGER
    # --- sequence continuity: th2->seq + skb_gro_len(p) == th->seq
    if ((st.e_seq[k] + st.e_grolen[k]) & 0xFFFFFFFF) != c.seq[i]:
        return FLUSH_SEQ
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ip_id_checks(i, k, c, cfg, st, count):
    """The IP ID rule of packet i against held entry k (``count``: p's segments), and
    from 6.10 every L3 pair check (inet_gro_flush / ipv6_gro_flush per header, outer
    first: gro_receive_network_flush): the reason of the first item that holds, 0 none.
    Shared by tcp_gro_receive (:func:`_pair_checks`) and udp_gro_receive_segment
    (:func:`_udp_l3_checks`); mutates the entry's fixed-ID state as the kernel does."""
    r_id = 0
    if cfg.era == ERA_INNER_ID:
        # < 4.7: only the innermost IPv4 ID is checked, it must be p.id + count
        if c.in_v[i] == 4 and ((st.e_in_id[k] + count) & 0xFFFF) != c.in_id[i]:
            r_id = FLUSH_IP_ID
    elif cfg.era == ERA_FLUSH_ID:
        # inet_gro_receive (v4.7-v6.9) computes flush_id per IPv4 header, outer first;
        # N.is_atomic starts at 1 and becomes the DF of each IPv4 header (1 after IPv6).
        # A header below one with DF overwrites flush_id, else it is OR-ed in.
        n_atomic = 1
        flush_id = 0
        src = -1                       # layer whose ID made flush_id non-zero
        for layer in range(2):
            if layer == 0:
                v = c.out_v[i]
                if v == 0:
                    continue
                nid = c.out_id[i]
                pid = st.e_out_id[k]
                ndf = c.out_df[i]
            else:
                v = c.in_v[i]
                nid = c.in_id[i]
                pid = st.e_in_id[k]
                ndf = c.in_df[i]
            if v == 6:
                if n_atomic:
                    flush_id = 0       # ipv6_gro_receive: if is_atomic, flush_id = 0
                    src = -1
                n_atomic = 1
                continue
            fid = (nid - pid) & 0xFFFF
            if st.e_fixed[k] == 0 or ndf == 0:
                fid = 0 if fid == count else 0xFFFF
            if n_atomic:
                flush_id = fid
                src = layer if fid != 0 else -1
            else:
                if flush_id == 0 and fid != 0:
                    src = layer
                flush_id |= fid
            n_atomic = ndf
        # tcp_gro_receive: at the second frame a fixed-ID flow may turn incrementing
        if flush_id == 1 and count == 1 and st.e_fixed[k] != 0:
            st.e_fixed[k] = 0
        elif flush_id != 0:
            r_id = FLUSH_OUTER_IP_ID if src == 0 else FLUSH_IP_ID
    else:
        # v6.10+: inet_gro_flush / ipv6_gro_flush against the matched p, outer header
        # first (network_offsets[0]), then the inner one when encap_mark is set.
        for layer in range(2):
            if layer == 0:
                v = c.out_v[i]
                if v == 0:
                    continue
                r = _ip_pair(v, c.out_ttl[i], c.out_tos[i], c.out_df[i], st.e_out_ttl[k],
                             st.e_out_tos[k], st.e_out_df[k], cfg.hop_flush, FLUSH_OUTER_TTL,
                             FLUSH_OUTER_TOS, FLUSH_OUTER_ECN, FLUSH_OUTER_DF)
                nid = c.out_id[i]
                pid = st.e_out_id[k]
                ndf = c.out_df[i]
                outer = True
                bit = 1
                rid = FLUSH_OUTER_IP_ID
            else:
                v = c.in_v[i]
                r = _ip_pair(v, c.in_ttl[i], c.in_tos[i], c.in_df[i], st.e_in_ttl[k],
                             st.e_in_tos[k], st.e_in_df[k], cfg.hop_flush, FLUSH_TTL, FLUSH_TOS,
                             FLUSH_ECN, FLUSH_DF)
                nid = c.in_id[i]
                pid = st.e_in_id[k]
                ndf = c.in_df[i]
                outer = False
                bit = 2 if c.out_v[i] != 0 else 1
                rid = FLUSH_IP_ID
            if r != 0:
                if r_id == 0:
                    r_id = r
                continue
            if v != 4:
                continue
            off = (nid - pid) & 0xFFFF
            if cfg.era == ERA_ONE_BIT:
                if outer and ndf != 0:
                    continue              # outer header with DF: ID ignored (6.10-6.17)
                if count == 1 and ndf != 0 and off == 0:
                    st.e_fixed[k] = 1
                bad = off != ((count * (1 - st.e_fixed[k])) & 0xFFFF)
            else:
                if count == 1 and off == 0:
                    st.e_fixed[k] |= bit
                fixed = 1 if (st.e_fixed[k] & bit) != 0 else 0
                bad = off != ((count * (1 - fixed)) & 0xFFFF)
            if bad and r_id == 0:
                r_id = rid
    return r_id


@numba.njit(cache=True, nogil=True, _nrt=False)
def _not_held_reason(fl, ln):
    """out_check_final with mss = 1 (nothing merged): why the packet is not held.

    Precedence pinned in docs/gro-model.md: SYN, RST, URG, FIN, PSH, then zero payload.
    """
    if fl & TCP_FLAG_SYN:
        return NOT_HELD_SYN
    if fl & TCP_FLAG_RST:
        return NOT_HELD_RST
    if fl & TCP_FLAG_URG:
        return NOT_HELD_URG
    if fl & TCP_FLAG_FIN:
        return NOT_HELD_FIN
    if fl & TCP_FLAG_PSH:
        return NOT_HELD_PSH
    if ln < 1:
        return NOT_HELD_ZERO_PAYLOAD
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False)
def _end_reason(fl, ln, mss):
    """out_check_final after a merge: FIN, PSH, URG, then len < gso_size."""
    if fl & TCP_FLAG_FIN:
        return END_FIN
    if fl & TCP_FLAG_PSH:
        return END_PSH
    if fl & TCP_FLAG_URG:
        return END_URG
    if ln < mss:
        return END_SHORT_SEGMENT
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False)
def _gso_short(ln, segs, gsz):
    """out_check_final for an arriving GSO skb: ``len != count * gso_size`` flushes."""
    if gsz != 0 and ln != segs * gsz:
        return NOT_HELD_GSO_SHORT
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False)
def _sfl_flush(sfl):
    """skb_gro_receive refusing p because the skb carries a flush of its own."""
    if sfl == NOT_HELD_IP_RF:
        return FLUSH_IP_RF
    if sfl == NOT_HELD_FRAG_LIST:
        return FLUSH_FRAG_LIST
    return FLUSH_LENGTH


@numba.njit(cache=True, nogil=True, _nrt=False)
def _receive(rows, lo, hi, c, cfg, st, out, poll, age, udp):
    """dev_gro_receive for packets ``rows[lo:hi]`` of one poll (or window, or the whole
    batch in the ideal model): bypass, merge, complete pp, hold or deliver.
    ``udp``: see :func:`run`.

    Decides first, then acts at one site each (complete pp, deliver, hold): the helpers
    are inlined, and every extra call site would be compiled again. A function of its own
    (not inlined into ``run``) that loops over the poll's packets: numba-level inlining of
    the whole rule set into ``run`` cost 3.3 s of a first run (numba copies a callee's IR
    block by block, blocks x variables), and its arguments (~90 arrays) are passed once
    per poll, not once per packet."""
    for x in range(lo, hi):
        i = rows[x]
        out.ppoll[i] = poll
        out.cur[0] = c.row[i]
        deliver = -1                   # reason when the packet goes up alone now
        hold = -1                      # reason when it becomes a held entry
        end = 0                        # end reason of the held entry pp completed now
        k = c.key[i]
        ln = c.tlen[i]
        segs = c.segs[i]
        gsz = c.gsz[i]
        pre = c.pre[i]
        if pre != 0:
            # a layer bailed before L4: delivered now, the flow's held entry untouched
            deliver = pre
        elif c.udp[i] != 0:
            if udp is not None:
                # numba prunes this branch before typing when ``udp`` is None (see run)
                deliver, hold, end = _udp_receive(i, k, c, cfg, st, out)
        elif st.e_first[k] < 0:
            fl = c.flags[i]
            sfl = c.sfl_out[i] if c.sfl_out[i] != 0 else c.sfl_in[i]
            if sfl == 0:
                sfl = c.sfl_fl[i]      # dev_gro_receive: flush = skb_has_frag_list(skb)
            # tcp_gro_receive, no p: out_check_final with mss = 1 (GSO skb: len vs count*size)
            r = sfl if sfl != 0 else _not_held_reason(fl, ln)
            if r == 0:
                r = _gso_short(ln, segs, gsz)
            if r != 0:
                deliver = r
            elif st.loose_held[c.loose[i]] > 0:
                # before 5.18 the IPv6 hop limit was a flow key: the held entry of this flow
                # stays, the packet starts a parallel one (ipv6_gro_receive, 6fc2f3832d36)
                hold = FLUSH_HOP_LIMIT_FLOW
            else:
                hold = NO_HELD_PACKET
        else:
            fl = c.flags[i]
            sfl = c.sfl_out[i] if c.sfl_out[i] != 0 else c.sfl_in[i]
            if sfl == 0:
                sfl = c.sfl_fl[i]
            flush_reason = _pair_checks(i, k, c, cfg, st)
            if flush_reason == 0 and cfg.tcp_flist:
                # tcp_gro_receive, is_flist (v6.10): the whole flag word, count >= 64, then
                # skb_gro_receive_list (65536 on whole lengths, no check of the skb's flush)
                if fl != st.e_flags[k]:
                    flush_reason = FLUSH_TCP_FLAGS
                elif st.e_count[k] >= TCP_FLIST_MAX_SEGS:
                    flush_reason = FLUSH_MAX_SEGS
                elif st.e_len[k] + c.plen[i] >= FLIST_MAX_LEN:
                    flush_reason = FLUSH_SIZE_LIMIT
            elif flush_reason == 0:
                # skb_gro_receive: -E2BIG when p->len + len >= gro_max_size or skb flush
                if st.e_len[k] + ln >= st.e_limit[k]:
                    flush_reason = FLUSH_SIZE_LIMIT
                elif sfl != 0:
                    flush_reason = _sfl_flush(sfl)
            if flush_reason == 0:
                st.e_last[k] = c.row[i]
                st.e_count[k] += segs
                st.e_payload[k] += c.payload[i]
                st.e_grolen[k] += ln
                st.e_len[k] += ln
                out.reason[i] = MERGED
                out.inst[i] = st.e_inst[k]
                end = _end_reason(fl, ln, st.e_mss[k])
                if end == 0 and _gso_short(ln, segs, gsz) != 0:
                    end = END_SHORT_SEGMENT
            else:
                # not merged: pp = p is completed before the packet is delivered or held
                end = flush_reason
                short = _gso_short(ln, segs, gsz) != 0 if gsz != 0 else ln < 1
                if sfl != 0 or short or (fl & (TCP_FLAG_URG | TCP_FLAG_PSH | TCP_FLAG_RST |
                                                TCP_FLAG_SYN | TCP_FLAG_FIN)) != 0:
                    deliver = flush_reason
                else:
                    hold = flush_reason
        if end != 0:
            if cfg.model != MODEL_IDEAL:
                _unlink(st.tbl, st.tcnt, np.int64(c.queue[i]), np.int64(c.bucket[i]), k)
            _complete(k, end, st, out, poll)
        if deliver >= 0:
            out.reason[i] = deliver
            _deliver(i, deliver, c, st, out, poll)
        elif hold >= 0:
            _hold(i, k, hold, c, cfg, st, out, poll, age)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _hold(i, k, reason, c, cfg, st, out, poll, age):
    """dev_gro_receive tail: hold packet i as a new entry (evict the oldest if full)."""
    out.reason[i] = reason
    if cfg.model != MODEL_IDEAL:
        q = np.int64(c.queue[i])
        b = np.int64(c.bucket[i])
        if st.tcnt[q, b] >= MAX_GRO_SKBS:
            # gro_flush_oldest: the tail (oldest) entry of the bucket goes up first
            old = st.tbl[q, b, 0]
            _unlink(st.tbl, st.tcnt, q, b, old)
            _complete(old, END_BUCKET_FULL, st, out, poll)
        st.tbl[q, b, st.tcnt[q, b]] = k
        st.tcnt[q, b] += 1
    ln = c.tlen[i]
    inst = st.ctr[1]
    st.ctr[1] = inst + 1
    out.inst[i] = inst
    st.e_inst[k] = inst
    st.e_first[k] = c.row[i]
    st.e_last[k] = c.row[i]
    st.e_count[k] = c.segs[i]
    st.e_payload[k] = c.payload[i]
    st.e_grolen[k] = ln
    st.e_len[k] = c.plen[i]
    # dev_gro_receive: a plain skb's gso_size becomes skb_gro_len(skb); a GSO skb keeps its own
    st.e_mss[k] = c.gsz[i] if c.gsz[i] != 0 else ln
    # is_atomic (4.7-6.9): DF of the innermost IPv4 header (IPv6: 1); 6.10+: bits cleared
    if cfg.era == ERA_FLUSH_ID:
        st.e_fixed[k] = c.in_df[i] if c.in_v[i] == 4 else 1
    else:
        st.e_fixed[k] = 0
    st.e_age[k] = age
    st.e_order[k] = st.ctr[0]
    st.ctr[0] += 1
    st.e_queue[k] = c.queue[i]
    st.e_limit[k] = c.limit[i]
    st.e_loose[k] = c.loose[i]
    st.e_gcode[k] = c.gcode[i]
    st.e_flow[k] = c.flow[i]
    # p's headers: the first packet's (tcp_gro_receive compares against them)
    st.e_seq[k] = c.seq[i]
    st.e_ack[k] = c.ack[i]
    st.e_flags[k] = c.flags[i]
    st.e_doff[k] = c.doff[i]
    st.e_window[k] = c.window[i]
    for w in range(OPT_WORDS):
        st.e_opt[k, w] = c.opt[i, w]
    olen = np.int64(c.opt_len[i])
    st.e_opt[k, OPT_WORDS] = np.uint64((olen & 0xFF) | (min(olen, OPT_AREA) << 8))
    st.e_in_ttl[k] = c.in_ttl[i]
    st.e_in_tos[k] = c.in_tos[i]
    st.e_in_df[k] = c.in_df[i]
    st.e_in_id[k] = c.in_id[i]
    st.e_out_ttl[k] = c.out_ttl[i]
    st.e_out_tos[k] = c.out_tos[i]
    st.e_out_df[k] = c.out_df[i]
    st.e_out_id[k] = c.out_id[i]
    st.loose_held[c.loose[i]] += 1


# --- UDP GRO: udp_gro_receive_segment (net/ipv4/udp_offload.c) ------------------------
# Which packets get here (socket UDP_GRO, rx-udp-gro-forwarding, fraglist; the outer UDP
# datagram of a UDP tunnel that has no tunnel socket), and their lengths, keys and
# gso_type codes, is decided per packet by gro/_udp_prepare.py; the reference is
# reference.GroNode.udp_gro_receive_segment. UDP tunnels with a socket (vxlan, geneve,
# fou, gue gro_receive) reach tcp_gro_receive like a native tunnel. These functions live
# here, not in a module of their own, because numba's cache is per source file: a
# ``run`` cached from this file would not see a change in another one. _udp_receive is
# a call, not inlined: ``run``'s one inlined body (and its compile time) stays the TCP
# one; the call costs nothing measurable next to the preparation (benchmarks/bench_udp.py).

UDP_SEGMENT = 1           # Cols.udp: udp_gro_receive_segment, skb_gro_receive
UDP_FRAGLIST = 2          # Cols.udp: NAPI_GRO_CB(skb)->is_flist, skb_gro_receive_list
UDP_GRO_CNT_MAX = 64      # include/net/udp.h: segments per UDP GRO packet


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _udp_l3_checks(i, k, c, cfg, st):
    """gro_receive_network_flush as udp_gro_receive_segment runs it (v6.9+): before
    v6.10 the IP loop's ``NAPI_GRO_CB(p)->flush`` (TTL/TOS/DF, IPv6 TC / hop limit), then
    the flush_id rule; from v6.10 inet_gro_flush / ipv6_gro_flush per header. First
    reason or 0 (reference.GroNode._l3_pair_flush)."""
    if cfg.era <= ERA_FLUSH_ID:
        if c.out_v[i] != 0:
            r = _ip_pair(c.out_v[i], c.out_ttl[i], c.out_tos[i], c.out_df[i],
                         st.e_out_ttl[k], st.e_out_tos[k], st.e_out_df[k], cfg.hop_flush,
                         FLUSH_OUTER_TTL, FLUSH_OUTER_TOS, FLUSH_OUTER_ECN, FLUSH_OUTER_DF)
            if r != 0:
                return r
        r = _ip_pair(c.in_v[i], c.in_ttl[i], c.in_tos[i], c.in_df[i], st.e_in_ttl[k],
                     st.e_in_tos[k], st.e_in_df[k], cfg.hop_flush, FLUSH_TTL, FLUSH_TOS,
                     FLUSH_ECN, FLUSH_DF)
        if r != 0:
            return r
    return _ip_id_checks(i, k, c, cfg, st, st.e_count[k])


@numba.njit(cache=True, nogil=True, _nrt=False)
def _udp_receive(i, k, c, cfg, st, out):
    """udp_gro_receive_segment for packet i (UDP checksum and length already passed:
    a zero checksum or ``uh->len`` != the bytes received was a bypass code). Returns
    ``(deliver, hold, end)`` as :func:`_receive` acts on them; a merge is done here.

    No p: held (or delivered with a lower layer's flush). With p: the L3 checks (v6.9+),
    then a datagram longer than p's first completes p and starts a new head; otherwise
    skb_gro_receive (gro_max_size, the skb's own flush) or, fraglist,
    skb_gro_receive_list (p->len + skb->len >= 65536, whole lengths); after a merge p
    completes when this datagram was shorter than the first or p reached
    UDP_GRO_CNT_MAX segments."""
    deliver = -1
    hold = -1
    end = 0
    sfl = c.sfl_out[i] if c.sfl_out[i] != 0 else c.sfl_in[i]
    if sfl == 0:
        sfl = c.sfl_fl[i]
    ulen = np.int64(c.udp_len[i])
    if st.e_first[k] < 0:
        if sfl != 0:
            deliver = np.int64(sfl)
        else:
            hold = NO_HELD_PACKET
            st.e_udp_len[k] = ulen
        return deliver, hold, end
    flush = _udp_l3_checks(i, k, c, cfg, st) if cfg.udp_l3 else 0
    r = 0
    merge_refused = False          # skb_gro_receive / skb_gro_receive_list said -E2BIG
    if ulen > np.int64(st.e_udp_len[k]):
        r = FLUSH_UDP_LARGER
    elif flush != 0:
        r = flush
    else:
        merge_refused = True
        if c.udp[i] == UDP_FRAGLIST:
            if st.e_len[k] + c.plen[i] >= FLIST_MAX_LEN:
                r = FLUSH_SIZE_LIMIT
        elif st.e_len[k] + c.tlen[i] >= st.e_limit[k]:
            r = FLUSH_SIZE_LIMIT
        elif sfl != 0:
            r = _sfl_flush(sfl)
    if r != 0:
        # pp = p goes up; after a refused merge the datagram is delivered when it
        # carries a flush of its own, else it is the new head
        end = r
        if merge_refused and sfl != 0:
            deliver = r
        else:
            hold = r
            st.e_udp_len[k] = ulen
        return deliver, hold, end
    ln = c.tlen[i]
    st.e_last[k] = c.row[i]
    st.e_count[k] += 1
    st.e_payload[k] += c.payload[i]
    st.e_grolen[k] += ln
    st.e_len[k] += ln
    out.reason[i] = MERGED
    out.inst[i] = st.e_inst[k]
    if ulen != np.int64(st.e_udp_len[k]):
        end = END_SHORT_SEGMENT
    elif st.e_count[k] >= UDP_GRO_CNT_MAX:
        end = END_UDP_MAX_SEGS
    return deliver, hold, end


@numba.njit(cache=True, nogil=True, _nrt=False)
def _flush_queue(q, st, out, poll, old_only, jiffy):
    """__gro_flush: buckets in index order, oldest entry first; a partial flush stops a
    bucket's walk at the first entry held in the current jiffy (END_POLL_OLD, else
    END_POLL). Callers wrap constant arguments in ``np.bool_``/``np.int64``: a literal
    argument would compile one more specialisation of this function per call site."""
    end = END_POLL_OLD if old_only else END_POLL
    out.cur[0] = -1
    for b in range(st.tcnt.shape[1]):
        while st.tcnt[q, b] > 0:
            k = st.tbl[q, b, 0]
            if old_only and st.e_age[k] == jiffy:
                break
            _unlink(st.tbl, st.tcnt, q, b, k)
            _complete(k, end, st, out, poll)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _held_any(q, st):
    for b in range(st.tcnt.shape[1]):
        if st.tcnt[q, b] > 0:
            return True
    return False


def flush_ideal(st, out):
    """End of capture in the ideal model: held entries oldest first (END_CAPTURE).

    :func:`_complete` for each of them (``out.cur`` -1: a flush), in numpy: the order
    is a numpy argsort (hold serials are unique), and the completions are field copies,
    so nothing here compiles (a numba loop calling ``_complete`` was 0.5-1.2 s of a
    first run, an argsort ~1 s)."""
    keys = np.flatnonzero(st.e_first >= 0)
    keys = keys[np.argsort(st.e_order[keys])]
    s = int(out.nseg[0])
    m = len(keys)
    if s + m > len(out.s_first):
        raise AssertionError("super-packet buffer overrun")
    at = slice(s, s + m)
    count = st.e_count[keys]
    out.s_first[at] = st.e_first[keys]
    out.s_last[at] = st.e_last[keys]
    out.s_count[at] = count
    out.s_payload[at] = st.e_payload[keys]
    out.s_gso[at] = np.where(count > 1, st.e_mss[keys], 0)
    out.s_end[at] = END_CAPTURE
    out.s_queue[at] = st.e_queue[keys]
    out.s_poll[at] = -1
    out.s_fixed[at] = st.e_fixed[keys]
    out.s_inst[at] = st.e_inst[keys]
    out.s_gcode[at] = st.e_gcode[keys]
    out.s_flow[at] = st.e_flow[keys]
    out.s_trig[at] = -1
    out.cur[0] = -1
    out.nseg[0] = s + m
    st.e_first[keys] = -1
    np.subtract.at(st.loose_held, st.e_loose[keys], 1)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _jiffy(t, hz):
    # t * hz // 1e9 without the int64 overflow of t * hz (epoch nanoseconds times HZ
    # passes 2**63): floor division splits exactly, as the reference's Python ints
    return (t // 1000000000) * hz + ((t % 1000000000) * hz) // 1000000000


@numba.njit(cache=True, nogil=True, _nrt=False)
def _take_gap(arr, j, hi, start, budget, gap):
    """Packets from j on: each joins while it arrives within ``gap`` of the previous one
    (or of the poll start, for packets already waiting), up to ``budget``."""
    cnt = 1
    while cnt < budget and j + cnt < hi and \
            arr[j + cnt] <= max(arr[j + cnt - 1], start) + gap:
        cnt += 1
    return cnt


@numba.njit(cache=True, nogil=True, _nrt=False)
def _take_until(arr, j, hi, until, budget):
    """Packets from j on that arrived by ``until``, at most ``budget``."""
    cnt = 0
    while cnt < budget and j + cnt < hi and arr[j + cnt] <= until:
        cnt += 1
    return cnt


@numba.njit(cache=True, nogil=True, _nrt=False)
def run(c, cfg, st, out, rows, qstart, arr, p_time, p_queue, final, udp):
    """Run GRO over one batch in the configured batch model (one ``_receive`` site, so
    the rule code is compiled once).

    ``rows[qstart[q]:qstart[q+1]]``: packets of queue q in row order (ideal and explicit
    windows: one "queue" holding every packet in row order); ``arr``: their arrival
    times (running maximum of ts_ns within the queue).

    * ideal: every packet in row order, one unlimited table, no polls (the end-of-capture
      flush is :func:`flush_ideal`).
    * explicit windows (kernel replay): each run of equal ``poll_win`` values is one
      window; its end flushes all queues (END_POLL). A window still open at the end of a
      non-final batch stays open (``st.win``).
    * napi, polls inferred (docs/gro-model.md "NAPI polls"): mirrors ``__napi_poll``
      (full budget: flush all if HZ < 1000, else old entries; poll again at once) and
      ``napi_complete_done`` (gro_flush_timeout / napi_defer_hard_irqs; before v4.20 no
      flush when the timer is armed) and ``napi_watchdog`` (before v5.7 no poll when
      nothing is held). Streaming:
      unless ``final``, a queue stops before any decision that depends on packets not
      given yet (a poll that could still grow, a timer racing the next arrival) and
      records in ``st.qs[q, QS_NEXT]`` the first position it did not process; the caller
      passes those packets again with the next batch. A queue also stops when ``p_time``
      is nearly full. Polls are numbered globally (``st.ctr[2]``); their time and queue
      go to ``p_time``/``p_queue`` (index = number - first number of this call).

    ``udp``: ``None`` when no packet of ``c`` enters UDP GRO (``c.udp`` all 0), else
    ``np.bool_(True)``. Two compiled variants, chosen by the argument's type: numba
    prunes ``if udp is not None`` in :func:`_receive` before typing, so the ``None``
    variant (what a TCP-only configuration compiles on a first run) has no UDP rules in
    it (:func:`_udp_receive` was 2.8 s of the first run's 42 s CPU).

    Returns the number of polls recorded (napi), else 0.
    """
    base = st.ctr[2]
    cap = p_time.shape[0]
    budget = cfg.budget
    gap = cfg.gap_ns
    T = cfg.timeout_ns
    napi = cfg.model == MODEL_NAPI
    nq = cfg.queues if napi else 1
    qs = st.qs
    for q in range(nq):
        lo = qstart[q]
        hi = qstart[q + 1]
        j = lo
        while True:
            # --- the next run of packets [j, j + cnt) to receive, and its poll
            was_timer = False
            poll = -1
            jf = 0
            cnt = 0
            now = 0
            if cfg.model == MODEL_IDEAL:
                if j >= hi:
                    break
                cnt = hi - j
            elif cfg.model == MODEL_WINDOWS:
                if j >= hi:
                    break
                w = c.poll_win[rows[j]]
                if st.win[1] != 0 and w != st.win[0]:
                    for fq in range(cfg.queues):
                        _flush_queue(fq, st, out, st.win[2], np.bool_(False), np.int64(0))
                    st.win[2] += 1
                    st.win[1] = 0
                st.win[0] = w
                st.win[1] = 1
                cnt = 1
                while j + cnt < hi and c.poll_win[rows[j + cnt]] == w:
                    cnt += 1
                poll = st.win[2]
            else:
                if st.ctr[2] - base + 2 > cap:
                    break                   # poll buffer full: resume in the next call
                cont = qs[q, QS_CONT]
                if cont != 0:
                    if j >= hi:
                        if final:
                            qs[q, QS_CONT] = 0
                        break
                    cont_t = qs[q, QS_CONT_T]
                    if cont == 2 and arr[j] <= cont_t:
                        cnt = _take_until(arr, j, hi, cont_t, budget)
                        if cnt < budget and j + cnt >= hi and not final:
                            break           # more packets may have arrived by cont_t
                        now = cont_t
                        was_timer = True
                    else:
                        start = max(arr[j], cont_t)
                        cnt = _take_gap(arr, j, hi, start, budget, gap)
                        if cnt < budget and j + cnt >= hi and not final:
                            break           # the poll could still grow
                        now = max(start, arr[j + cnt - 1])
                    qs[q, QS_CONT] = 0
                elif qs[q, QS_HAS_TIMER] != 0 and (qs[q, QS_MASKED] != 0 or j >= hi
                                                   or arr[j] >= qs[q, QS_TIMER]):
                    if j >= hi and not final:
                        break               # the next arrival may come before the timer
                    now = qs[q, QS_TIMER]
                    cnt = _take_until(arr, j, hi, now, budget)
                    if cnt < budget and j + cnt >= hi and not final:
                        break               # more packets may have arrived by the timer
                    qs[q, QS_HAS_TIMER] = 0
                    was_timer = True
                    if cnt == 0:
                        if not cfg.watchdog_empty and not _held_any(q, st):
                            # napi_watchdog before v5.7: `if (napi->gro_bitmask && ...)`
                            qs[q, QS_MASKED] = 0
                            continue
                        # timer poll without work: no reload of the defer counter
                        poll = st.ctr[2]
                        st.ctr[2] += 1
                        p_time[poll - base] = now
                        p_queue[poll - base] = q
                        qs[q, QS_LAST_POLL] = poll
                        qs[q, QS_LAST_TIME] = now
                        jf = _jiffy(now, cfg.hz)
                        if qs[q, QS_DEFER] > 0:
                            qs[q, QS_DEFER] -= 1
                            _flush_queue(q, st, out, poll, np.bool_(True), jf)
                            qs[q, QS_TIMER] = now + T
                            qs[q, QS_HAS_TIMER] = 1
                        else:
                            _flush_queue(q, st, out, poll, np.bool_(False), jf)
                            qs[q, QS_MASKED] = 0
                        continue
                else:
                    if j >= hi:
                        break
                    cnt = _take_gap(arr, j, hi, arr[j], budget, gap)
                    if cnt < budget and j + cnt >= hi and not final:
                        break               # the poll could still grow
                    qs[q, QS_HAS_TIMER] = 0  # an interrupt-driven poll replaces the timer
                    now = arr[j + cnt - 1]
                poll = st.ctr[2]
                st.ctr[2] += 1
                p_time[poll - base] = now
                p_queue[poll - base] = q
                qs[q, QS_LAST_POLL] = poll
                qs[q, QS_LAST_TIME] = now
                jf = _jiffy(now, cfg.hz)
            # --- dev_gro_receive for each packet of the run
            _receive(rows, j, j + cnt, c, cfg, st, out, poll, jf, udp)
            j += cnt
            if not napi:
                continue
            if cnt == budget:
                # __napi_poll: "Flush too old packets. If HZ < 1000, flush all packets."
                if cfg.hz < 1000:
                    _flush_queue(q, st, out, poll, np.bool_(False), jf)
                else:
                    _flush_queue(q, st, out, poll, np.bool_(True), jf)
                qs[q, QS_CONT] = 2 if was_timer else 1
                qs[q, QS_CONT_T] = now
                continue
            # napi_complete_done(work > 0)
            timeout = T if _held_any(q, st) else 0
            defer = cfg.defer
            if defer > 0:
                defer -= 1
                timeout = T
                qs[q, QS_MASKED] = 1 if timeout != 0 else 0
            else:
                qs[q, QS_MASKED] = 0
            qs[q, QS_DEFER] = defer
            if timeout == 0 or cfg.timer_flush_old:
                # napi_gro_flush(n, !!timeout) (v4.20); before 605108acfe62 a poll that
                # armed the timer flushed nothing
                _flush_queue(q, st, out, poll, timeout != 0, jf)
            if timeout != 0:
                qs[q, QS_TIMER] = now + timeout
                qs[q, QS_HAS_TIMER] = 1
            else:
                qs[q, QS_HAS_TIMER] = 0
        qs[q, QS_NEXT] = j
    if cfg.model == MODEL_WINDOWS and final and st.win[1] != 0:
        for fq in range(cfg.queues):
            _flush_queue(fq, st, out, st.win[2], np.bool_(False), np.int64(0))
        st.win[1] = 0
        st.win[2] += 1
    return st.ctr[2] - base


def napi_finish(st, out):
    """End of capture (after a final napi-model run): what is still held goes up with
    END_POLL in its queue's last poll. A Python loop over the queues calling the
    ``_flush_queue`` that ``run`` compiled (same argument types): nothing more to compile."""
    for q in range(st.qs.shape[0]):
        poll = st.qs[q, QS_LAST_POLL]
        if poll >= 0 and np.any(st.tcnt[q] > 0):
            _flush_queue(np.int64(q), st, out, np.int64(poll), np.bool_(False), np.int64(0))


# --- column preparation helpers ---------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def zero_timestamps(opts, opt_len):
    """Copy of the TCP option bytes with the TSval/TSecr of the first timestamp option
    zeroed: two option areas that differ only there differ "only in TSval/TSecr"
    (FLUSH_TCP_TS), as docs/gro-model.md pins it. The engine no longer builds these copies
    (:func:`_options_differ_beyond_ts` finds the timestamp only when two areas differ);
    this is the definition the tests hold it to."""
    out = opts.copy()
    for r in range(opts.shape[0]):
        x = 0
        end = min(opt_len[r], opts.shape[1])
        while x < end:
            kind = opts[r, x]
            if kind == 0:
                break
            if kind == 1:
                x += 1
                continue
            if x + 1 >= end:
                break
            ln = opts[r, x + 1]
            if ln < 2 or x + ln > end:
                break
            if kind == 8 and ln == 10:
                for y in range(x + 2, x + 10):
                    out[r, y] = 0
                break            # the first timestamp option only
            x += ln
    return out


# --- key packing (engine._classes) -------------------------------------------------------
# The key words of a chunk of rows written straight into a preallocated buffer: the numpy
# version built ~25 full-size temporaries and np.stack-ed them, which cost more than the
# GRO kernel itself (fresh pages faulted in on every batch).

class SameFlowIn(NamedTuple):
    """Columns of the exact same-flow key, native dtypes (addresses as (n, 2) uint64)."""
    hash: np.ndarray
    iface: np.ndarray
    dsa_port: np.ndarray
    eth_dst: np.ndarray
    eth_type: np.ndarray
    eth_src: np.ndarray
    vlan_depth: np.ndarray
    vlan_tpid0: np.ndarray
    vlan_tci0: np.ndarray
    vlan_tpid1: np.ndarray
    vlan_tci1: np.ndarray
    o_version: np.ndarray
    o_proto: np.ndarray
    o_ext_mask: np.ndarray
    o_ext_len: np.ndarray
    o_flow_label: np.ndarray
    o_ext_digest: np.ndarray
    o_src: np.ndarray
    o_dst: np.ndarray
    o_ttl: np.ndarray
    i_version: np.ndarray
    i_proto: np.ndarray
    i_ext_mask: np.ndarray
    i_ext_len: np.ndarray
    i_flow_label: np.ndarray
    i_ext_digest: np.ndarray
    i_src: np.ndarray
    i_dst: np.ndarray
    i_ttl: np.ndarray
    tun_type: np.ndarray
    tun_flags: np.ndarray
    tun_proto: np.ndarray
    tun_key: np.ndarray
    ieth_dst: np.ndarray
    ieth_type: np.ndarray
    ieth_src: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    ivlan_depth: np.ndarray
    ivlan_tci0: np.ndarray
    ivlan_tpid1: np.ndarray
    ivlan_tci1: np.ndarray


SAME_FLOW_WORDS = 24      # + 1 with the pre-5.18 IPv6 hop limit word
FLOW_WORDS = 13


@numba.njit(cache=True, nogil=True, _nrt=False)
def _u(x):
    return np.uint64(x)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _ip_words(out, at, j, r, version, proto, ext_mask, ext_len, flow_label, ext_digest,
              src, dst, ttl):
    """One IP header's 7 same-flow words of row r into ``out[at:at + 7, j]``; returns its
    hop-limit word part (IPv6 hop limit, 0 for IPv4)."""
    z = np.uint64(0)
    v = _u(version[r])
    is6 = v == 6
    out[at, j] = v | (_u(proto[r]) << np.uint64(8)) \
        | ((_u(ext_mask[r]) if is6 else z) << np.uint64(16)) \
        | ((_u(ext_len[r]) if is6 else z) << np.uint64(24))
    out[at + 1, j] = _u(flow_label[r]) if is6 else z
    out[at + 2, j] = _u(ext_digest[r]) if is6 else z
    out[at + 3, j] = src[r, 0]
    out[at + 4, j] = src[r, 1]
    out[at + 5, j] = dst[r, 0]
    out[at + 6, j] = dst[r, 1]
    return _u(ttl[r]) if is6 else z


@numba.njit(cache=True, nogil=True, _nrt=False)
def _same_flow_rows(k, lo, hi, gre_a, gre_b, gre_key, hops, out):
    """Same-flow key words of rows lo..hi-1 into ``out[:, 0:hi - lo]`` (24 or 25 words per
    column); layout in ``engine._classes``; every field at its full width
    (injective).

    The row loop is in here, not in the callers: ``k`` (42 arrays) is read directly. A
    per-row function taking ``k``, even inlined, copied the whole tuple on every row
    (about 0.7 us per row, 80x the packing itself, measured on a real capture)."""
    s8 = np.uint64(8)
    s16 = np.uint64(16)
    s32 = np.uint64(32)
    s48 = np.uint64(48)
    z = np.uint64(0)
    for r in range(lo, hi):
        j = r - lo
        out[0, j] = _u(k.hash[r]) | (_u(k.iface[r]) << s32) \
            | (_u(np.int64(k.dsa_port[r]) & 0xFFFF) << s48)
        out[1, j] = _u(k.eth_dst[r]) | (_u(k.eth_type[r]) << s48)
        out[2, j] = _u(k.eth_src[r]) | (_u(k.vlan_depth[r]) << s48)
        out[3, j] = _u(k.vlan_tpid0[r]) | (_u(k.vlan_tci0[r]) << s16) \
            | (_u(k.vlan_tpid1[r]) << s32) | (_u(k.vlan_tci1[r]) << s48)
        # outer IP header (inet/ipv6_gro_receive fields), then the inner / only one
        hop0 = _ip_words(out, np.int64(4), j, r, k.o_version, k.o_proto, k.o_ext_mask,
                         k.o_ext_len, k.o_flow_label, k.o_ext_digest, k.o_src, k.o_dst,
                         k.o_ttl)
        hop1 = _ip_words(out, np.int64(11), j, r, k.i_version, k.i_proto, k.i_ext_mask,
                         k.i_ext_len, k.i_flow_label, k.i_ext_digest, k.i_src, k.i_dst,
                         k.i_ttl)
        # gre_gro_receive: flags, protocol, key when K; eth_gro_receive for GRE-TEB
        tun = _u(k.tun_type[r])
        gre = tun == gre_a or tun == gre_b
        teb = tun == gre_b
        tfl = _u(k.tun_flags[r])
        out[18, j] = tun | ((tfl if gre else z) << s8)
        out[19, j] = (_u(k.tun_proto[r]) if gre else z) \
            | ((_u(k.tun_key[r]) if gre and (tfl & gre_key) != z else z) << s16)
        out[20, j] = (_u(k.ieth_dst[r]) if teb else z) \
            | ((_u(k.ieth_type[r]) if teb else z) << s48)
        out[21, j] = _u(k.ieth_src[r]) if teb else z
        out[22, j] = _u(k.sport[r]) | (_u(k.dport[r]) << s16)
        # vlan_gro_receive on the inner tags of GRE-TEB (compare_vlan_header: whole TCI
        # and encapsulated type; the first TPID is the inner EtherType of word 20)
        out[23, j] = (_u(k.ivlan_depth[r]) | (_u(k.ivlan_tci0[r]) << s8)
                      | (_u(k.ivlan_tpid1[r]) << np.uint64(24))
                      | (_u(k.ivlan_tci1[r]) << np.uint64(40))) if teb else z
        if hops:
            out[SAME_FLOW_WORDS, j] = hop0 | (hop1 << s8)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _hash_words(buf, w):
    """Slot hash of a key: four independent multiply lanes (a short dependency chain;
    only the probe position depends on it, every hit is confirmed word by word)."""
    m = np.uint64(0x9E3779B97F4A7C15)
    a = np.uint64(0x243F6A8885A308D3)
    b = np.uint64(0x13198A2E03707344)
    c = np.uint64(0xA4093822299F31D0)
    d = np.uint64(0x082EFA98EC4E6C89)
    x = 0
    while x + 4 <= w:
        a = (a ^ buf[x]) * m
        b = (b ^ buf[x + 1]) * m
        c = (c ^ buf[x + 2]) * m
        d = (d ^ buf[x + 3]) * m
        x += 4
    while x < w:
        a = (a ^ buf[x]) * m
        x += 1
    h = a ^ (b >> np.uint64(17)) ^ (b << np.uint64(47)) ^ (c >> np.uint64(31)) \
        ^ (c << np.uint64(33)) ^ (d >> np.uint64(43)) ^ (d << np.uint64(21))
    h ^= h >> np.uint64(32)
    h *= m
    h ^= h >> np.uint64(29)
    return h


class FlowIn(NamedTuple):
    """Columns of flows.FLOW_KEY_COLUMNS, native dtypes (addresses as (n, 2) uint64)."""
    ip_version: np.ndarray
    l4_proto: np.ndarray
    outer_ip_version: np.ndarray
    tun_type: np.ndarray
    tun_key: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    outer_sport: np.ndarray
    outer_dport: np.ndarray
    vlan_tci0: np.ndarray
    vlan_tci1: np.ndarray
    dsa_port: np.ndarray
    iface: np.ndarray
    eth_src: np.ndarray
    eth_type: np.ndarray
    eth_dst: np.ndarray
    ip_src: np.ndarray
    ip_dst: np.ndarray
    outer_ip_src: np.ndarray
    outer_ip_dst: np.ndarray


@numba.njit(cache=True, nogil=True, _nrt=False)
def _flow_row(f, r, out):
    """flows.FLOW_KEY_COLUMNS of row r as 13 uint64 words into ``out`` (layout in
    ``engine._flow_input``)."""
    s8 = np.uint64(8)
    s16 = np.uint64(16)
    s24 = np.uint64(24)
    s32 = np.uint64(32)
    s48 = np.uint64(48)
    out[0] = _u(f.ip_version[r]) | (_u(f.l4_proto[r]) << s8) \
        | (_u(f.outer_ip_version[r]) << s16) | (_u(f.tun_type[r]) << s24) \
        | (_u(f.tun_key[r]) << s32)
    out[1] = _u(f.sport[r]) | (_u(f.dport[r]) << s16) \
        | (_u(f.outer_sport[r]) << s32) | (_u(f.outer_dport[r]) << s48)
    out[2] = _u(f.vlan_tci0[r]) | (_u(f.vlan_tci1[r]) << s16) \
        | (_u(np.int64(f.dsa_port[r]) & 0xFFFF) << s32) | (_u(f.iface[r]) << s48)
    out[3] = _u(f.eth_src[r]) | (_u(f.eth_type[r]) << s48)
    out[4] = _u(f.eth_dst[r])
    out[5] = f.ip_src[r, 0]
    out[6] = f.ip_src[r, 1]
    out[7] = f.ip_dst[r, 0]
    out[8] = f.ip_dst[r, 1]
    out[9] = f.outer_ip_src[r, 0]
    out[10] = f.outer_ip_src[r, 1]
    out[11] = f.outer_ip_dst[r, 0]
    out[12] = f.outer_ip_dst[r, 1]


# --- persistent key tables and the one-pass classification (engine._classes) -----------
# The exact classes of a batch in one pass over its rows: a row's *union key* (every field
# of the same-flow key, the hop limits, and the flow-key fields the same-flow key leaves
# out) is looked up in an open-addressing table that lives in the EngineState (it grows
# with flows, not packets); the same-flow key, loose key and flow key of a union class
# are functions of it, interned once per class in their own tables. Ids are numbered by
# first appearance (keys: among rows with ``use``), across batches.

UNION_WORDS = SAME_FLOW_WORDS + 3   # + hop limits; L4 proto and outer ports; tunnel key
UNION_CHUNK = 256                  # rows packed per _same_flow_rows call in classify


@numba.njit(cache=True, nogil=True, _nrt=False)
def _tab_find(buf, slots, keys, cnt):
    """Id of the key ``buf[:w]`` (w = ``keys.shape[1]``) in the table ``(slots, keys,
    cnt[0] keys)``; a new key is appended. The caller guarantees room for it (see
    ``engine.InternTable.reserve``), so nothing here allocates."""
    w = keys.shape[1]
    mask = np.uint64(slots.shape[0] - 1)
    pos = _hash_words(buf, w) & mask
    while True:
        c = slots[pos]
        if c < 0:
            break
        same = True
        for x in range(w):
            if keys[c, x] != buf[x]:
                same = False
                break
        if same:
            return c
        pos = (pos + np.uint64(1)) & mask
    nid = cnt[0]
    for x in range(w):
        keys[nid, x] = buf[x]
    slots[pos] = nid
    cnt[0] = nid + 1
    return nid


@numba.njit(cache=True, nogil=True, _nrt=False)
def rehash(keys, nid, slots, buf):
    """Slots of the first ``nid`` keys in a fresh (all -1) ``slots`` array (a table that
    grew: ``engine.InternTable.reserve``)."""
    w = keys.shape[1]
    mask = np.uint64(slots.shape[0] - 1)
    for y in range(nid):
        for x in range(w):
            buf[x] = keys[y, x]
        pos = _hash_words(buf, w) & mask
        while slots[pos] >= 0:
            pos = (pos + np.uint64(1)) & mask
        slots[pos] = y


@numba.njit(cache=True, nogil=True, _nrt=False)
def intern_rows(rows, slots, keys, cnt, buf, ids):
    """:func:`_tab_find` of every row of ``rows`` ((m, w) uint64) into ``ids`` (the
    table has room for m new keys)."""
    for r in range(rows.shape[0]):
        for x in range(rows.shape[1]):
            buf[x] = rows[r, x]
        ids[r] = _tab_find(buf, slots, keys, cnt)


@numba.njit(cache=True, nogil=True, _nrt=False)
def classify(k, l4, o_sport, o_dport, tun_key, gre_a, gre_b, gre_key, u_slots, u_keys, u_cnt,
             u_rep, uid, lo, chunk, buf):
    """Union class of rows lo.. (``uid``) in one pass over the union-key table
    ``(u_slots, u_keys, u_cnt)``; ``u_rep[u]``: the row where a class new in this call
    first appeared (the caller derives its flow id from that row). Returns the first
    row not done: ``n``, or the start of a chunk for which the table has no room for
    a chunk of new keys (the caller grows it, ``engine.InternTable.reserve``, and calls
    again). Nothing here allocates or reassigns an array (an array reassigned inside a
    loop is reference-counted on every row: ~100 ns per row, measured).

    ``chunk``: (UNION_CHUNK, UNION_WORDS) scratch, one row's words contiguous, written
    through the transposed view as _same_flow_rows writes out[word, row]. (A (words,
    rows) buffer puts a row's words 2 KiB apart, all in two L1 sets: a conflict miss
    per word.) ``buf``: scratch for one union key."""
    n = uid.shape[0]
    wu = UNION_WORDS
    s8 = np.uint64(8)
    s24 = np.uint64(24)
    last = np.int64(-1)
    for clo in range(lo, n, UNION_CHUNK):
        chi = min(n, clo + UNION_CHUNK)
        if u_cnt[0] + (chi - clo) > u_keys.shape[0]:
            return clo
        _same_flow_rows(k, clo, chi, gre_a, gre_b, gre_key, True, chunk.T)
        for r in range(clo, chi):
            j = r - clo
            chunk[j, SAME_FLOW_WORDS + 1] = _u(l4[r]) | (_u(o_sport[r]) << s8) \
                | (_u(o_dport[r]) << s24)
            chunk[j, SAME_FLOW_WORDS + 2] = _u(tun_key[r])
            u = np.int64(-1)
            if last >= 0:      # a burst of one class: the previous row's, no hashing
                same = True
                for x in range(wu):
                    if u_keys[last, x] != chunk[j, x]:
                        same = False
                        break
                if same:
                    u = last
            if u < 0:
                for x in range(wu):
                    buf[x] = chunk[j, x]
                old = u_cnt[0]
                u = _tab_find(buf, u_slots, u_keys, u_cnt)
                if u_cnt[0] > old:                 # a new union class: its first row
                    u_rep[u] = r
                last = u
            uid[r] = u
    return n


@numba.njit(cache=True, nogil=True, _nrt=False)
def flow_ids_of(f, rows, f_slots, f_keys, f_cnt, buf, ids):
    """Flow ids (``_flow_row`` keys interned in ``(f_slots, f_keys, f_cnt)``, which has
    room for them) of the given rows, into ``ids``."""
    for x in range(rows.shape[0]):
        _flow_row(f, rows[x], buf)
        ids[x] = _tab_find(buf, f_slots, f_keys, f_cnt)


@numba.njit(cache=True, nogil=True, _nrt=False)
def key_classes(uid, use, u_keys, no_hash, hops, ukey, k_slots, k_keys, k_cnt, l_slots,
                l_keys, l_cnt, key, loose, buf):
    """One model's same-flow key and loose key ids from the union classes ``uid`` of
    :func:`classify`: ``key`` -1 and ``loose`` 0 where ``use`` is False; a union
    class's keys are interned (in first-appearance order among rows with ``use``) the
    first time one of its rows has ``use`` and kept in ``ukey[2u]`` (key id) and
    ``ukey[2u + 1]`` (loose id). ``no_hash``: the model ignores the RSS hash in word 0
    (ideal). The caller gives the tables room for a key per union class without one."""
    low = np.uint64(0xFFFFFFFF)
    for r in range(uid.shape[0]):
        if not use[r]:
            key[r] = -1
            loose[r] = 0
            continue
        u = uid[r]
        if ukey[2 * u] < 0:                 # the class's first row with use
            for x in range(UNION_WORDS):
                buf[x] = u_keys[u, x]
            if no_hash:
                buf[0] &= ~low
            c = _tab_find(buf, k_slots, k_keys, k_cnt)
            ukey[2 * u] = c
            if hops:
                c = _tab_find(buf, l_slots, l_keys, l_cnt)
            ukey[2 * u + 1] = c
        key[r] = ukey[2 * u]
        loose[r] = ukey[2 * u + 1]


@numba.njit(cache=True, nogil=True, _nrt=False)
def assemble_rows(inst, seg_of_inst, s_count, s_first, rank, poll, gro_seg, role):
    """engine.assemble per packet: its super-packet (``seg_of_inst[inst]``), its role
    (alone when the super-packet has one segment, head when it is its first packet,
    else merged) and, when ``rank`` is given (napi, inferred polls), its poll number
    mapped to delivery order in place (-1 indexes from the end, as numpy would)."""
    nr = rank.shape[0]
    for r in range(inst.shape[0]):
        g = seg_of_inst[inst[r]]
        gro_seg[r] = g
        if s_count[g] == 1:
            role[r] = ROLE_ALONE
        elif s_first[g] == r:
            role[r] = ROLE_HEAD
        else:
            role[r] = ROLE_MERGED
        if nr:
            p = poll[r]
            poll[r] = rank[p + nr if p < 0 else p]


@numba.njit(cache=True, nogil=True)
def derive_lengths(wire, out_v, out_off, in_off, vlan_depth, in_hdr, doff, payload, in_v,
                   flags, tun, cwr, plen, tlen, gcode):
    """Per-packet lengths and the gso_type code in one pass (int64 arithmetic):

    * ``plen``: p->len if held, bytes after the outermost IP header's offset
      (eth_type_trans pulled the MAC header; in-band VLAN tags stay in skb->data);
    * ``tlen``: skb_gro_len at TCP, bytes after the innermost IP and TCP headers (padding
      included), at least ``payload_len``;
    * ``gcode``: (innermost IPv6, CWR, tunnel type) for ``gso.gso_type_for``.
    """
    for r in range(plen.shape[0]):
        w = np.int64(wire[r])
        outer = np.int64(out_off[r]) if out_v[r] != 0 else np.int64(in_off[r])
        plen[r] = w - outer + 4 * np.int64(vlan_depth[r])
        t = w - np.int64(in_off[r]) - np.int64(in_hdr[r]) - 4 * np.int64(doff[r])
        p = np.int64(payload[r])
        tlen[r] = t if t > p else p
        gcode[r] = ((2 if in_v[r] == 6 else 0) + (1 if (np.int64(flags[r]) & cwr) != 0 else 0)) \
            * 16 + (np.int64(tun[r]) & 15)


@numba.njit(cache=True, nogil=True)
def dedup_reps(mat, use):
    """Exact equivalence classes of the columns of a (words, n) uint64 matrix (column r
    is packet r's key; only packets with ``use``): an open addressing table on a 64-bit
    multiplicative hash of the words, every hit confirmed word by word.

    Returns ``(ids, reps)``: int64 ids by first appearance (-1 where ``use`` is False)
    and ``reps[id]`` the first row of class ``id``.
    """
    w = mat.shape[0]
    n = mat.shape[1]
    ids = np.full(n, -1, np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    slots = np.full(size, -1, np.int64)
    reps = np.empty(n, np.int64)
    mask = np.uint64(size - 1)
    nid = np.int64(0)
    for r in range(n):
        if not use[r]:
            continue
        h = np.uint64(14695981039346656037)
        for x in range(w):
            h = (h ^ mat[x, r]) * np.uint64(1099511628211)
            h ^= h >> np.uint64(29)
        pos = h & mask
        while True:
            rep = slots[pos]
            if rep < 0:
                slots[pos] = r
                ids[r] = nid
                reps[nid] = r
                nid += 1
                break
            same = True
            for x in range(w):
                if mat[x, rep] != mat[x, r]:
                    same = False
                    break
            if same:
                ids[r] = ids[rep]
                break
            pos = (pos + np.uint64(1)) & mask
    return ids, reps[:nid].copy()


@numba.njit(cache=True, nogil=True)
def gather_rows(mat, cols):
    """Columns ``cols`` of a (words, n) matrix as a C-ordered (len(cols), words) one."""
    w = mat.shape[0]
    out = np.empty((cols.shape[0], w), mat.dtype)
    for j in range(cols.shape[0]):
        c = cols[j]
        for x in range(w):
            out[j, x] = mat[x, c]
    return out



# --- bypass codes and skb flushes (engine._pre_and_flush) ---------------------------------
# One pass per row instead of ~30 numpy passes over byte masks; the checks run in the
# kernel's evaluation order and the first that holds gives the BYPASS_* code
# (docs/gro-model.md, "Bypass precedence").

class PreIn(NamedTuple):
    """Columns read by the bypass checks, schema dtypes; ``o_*`` outer, ``i_*`` inner."""
    status: np.ndarray
    dsa_tag: np.ndarray
    eth_type: np.ndarray
    vlan_depth: np.ndarray
    vlan_tpid0: np.ndarray
    vlan_tpid1: np.ndarray
    wire: np.ndarray
    l4_proto: np.ndarray
    tun_type: np.ndarray
    tun_flags: np.ndarray
    tun_csum_ok: np.ndarray
    encap_depth: np.ndarray
    l4_csum_state: np.ndarray
    tcp_doff: np.ndarray
    o_version: np.ndarray
    o_proto: np.ndarray
    o_ext_mask: np.ndarray
    o_hdr_len: np.ndarray
    o_mf: np.ndarray
    o_frag_off: np.ndarray
    o_csum_ok: np.ndarray
    o_tot_len: np.ndarray
    o_offset: np.ndarray
    o_rf: np.ndarray
    i_version: np.ndarray
    i_proto: np.ndarray
    i_ext_mask: np.ndarray
    i_hdr_len: np.ndarray
    i_mf: np.ndarray
    i_frag_off: np.ndarray
    i_csum_ok: np.ndarray
    i_tot_len: np.ndarray
    i_offset: np.ndarray
    i_rf: np.ndarray
    inner_eth_type: np.ndarray
    inner_vlan_depth: np.ndarray
    inner_vlan_tpid1: np.ndarray


class PreCfg(NamedTuple):
    """Switches of the bypass checks (GroConfig / KernelProfile)."""
    native_gro: bool
    gro_cells: bool        # tunnel_gro stage modelled: DSA conduit frames are not IP
    dsa_gro: bool
    vlan_gro: bool
    verify_checksums: bool
    ip6_tunnel_gro: bool   # KernelProfile.ip6_tunnel_gro: ip6ip6 / ip4ip6 offloads (v4.7)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _l3_handler(proto):
    # inet_offloads[] with a gro_receive (net/ipv4/af_inet.c, gre_offload.c,
    # udp_offload.c); inet6_offloads[] register the same (ip6_offload.c): TCP, UDP, GRE,
    # IPIP, IPv6
    return proto == IPPROTO_TCP or proto == IPPROTO_UDP or proto == IPPROTO_GRE \
        or proto == IPPROTO_IPIP or proto == IPPROTO_IPV6


@numba.njit(cache=True, nogil=True, _nrt=False)
def _ip_layer(p, sfl, v, proto, ext, hdr_len, mf, frag_off, csum_ok, tot, offset, rf, wire,
              ip6_tun):
    """inet_gro_receive / ipv6_gro_receive checks of one present IP header: the bypass
    code ``p`` (kept if already set) and the skb flush ``sfl`` (kept if already set).
    ``ip6_tun``: inet6_offloads has IPIP / IPv6 handlers (ip6ip6 / ip4ip6 GRO, v4.7)."""
    v4 = v == 4
    if p == 0 and v == 6 and (ext & (IP6_EXT_FRAGMENT | IP6_EXT_OTHER)) != 0:
        p = BYPASS_IPV6_EXTHDR          # ipv6_gro_receive: Fragment header, AH, ...
    if p == 0 and not _l3_handler(proto):
        p = BYPASS_NO_L4_OFFLOAD
    if p == 0 and v == 6 and not ip6_tun and (proto == IPPROTO_IPIP or proto == IPPROTO_IPV6):
        p = BYPASS_NO_L4_OFFLOAD        # before v4.7: no ip6ip6 / ip4ip6 gro_receive
    if p == 0 and v4 and hdr_len != 20:
        p = BYPASS_IP_OPTIONS           # inet_gro_receive: *(u8 *)iph != 0x45
    if p == 0 and v4 and (mf or frag_off != 0):
        p = BYPASS_IP_FRAGMENT          # ip_is_fragment
    if p == 0 and v4 and not csum_ok:
        p = BYPASS_IP_CSUM              # ip_fast_csum
    # skb flush: IP length != bytes from this header to the end of the frame (u16
    # compare in inet_gro_receive), else the IPv4 reserved bit
    got = wire - offset
    bad_len = ((tot ^ got) & 0xFFFF) != 0 if v4 else tot != got
    if sfl == 0 and bad_len:
        sfl = NOT_HELD_LENGTH
    if sfl == 0 and v4 and rf:
        sfl = NOT_HELD_IP_RF
    return p, sfl


@numba.njit(cache=True, nogil=True)
def pre_and_flush(x, cfg, no_gro, sfl_fl, pre, sfl_out, sfl_in):
    """Bypass code and outer / inner skb flush of every row (see engine._pre_and_flush);
    ``no_gro``/``sfl_fl``: per row, or empty when not given."""
    has_no_gro = no_gro.shape[0] > 0
    has_fl = sfl_fl.shape[0] > 0
    for r in range(pre.shape[0]):
        p = 0
        # dev_gro_receive: netif_elide_gro (GRO off on the receiving device)
        if not cfg.native_gro or (has_no_gro and no_gro[r]):
            p = BYPASS_GRO_DISABLED
        dsa = x.dsa_tag[r] != 0
        if p == 0 and cfg.gro_cells and dsa:
            p = BYPASS_NOT_IP           # ETH_P_XDSA on the conduit: no packet_offload
        if p == 0 and not cfg.dsa_gro and dsa:
            p = BYPASS_GRO_DISABLED     # before v5.8 DSA user ports had no GRO
        et = np.int64(x.eth_type[r])
        if p == 0 and not cfg.vlan_gro and (et == ETH_P_8021Q or et == ETH_P_8021AD):
            p = BYPASS_NO_VLAN_GRO      # no vlan packet_offload without CONFIG_VLAN_8021Q
        st = np.int64(x.status[r])
        l4 = np.int64(x.l4_proto[r])
        if p == 0 and (st == STATUS_NOT_IP or st == STATUS_UNSUPPORTED_LINKTYPE):
            p = BYPASS_NOT_IP
        if p == 0 and st == STATUS_BAD_L4_HEADER and l4 == IPPROTO_TCP:
            p = BYPASS_TCP_HEADER
        if p == 0 and (st == STATUS_UNSUPPORTED_ENCAP or st == STATUS_BAD_TUNNEL_HEADER
                       or st == STATUS_ENCAP_TOO_DEEP):
            p = BYPASS_TUNNEL
        if p == 0 and st != STATUS_OK:
            p = BYPASS_DECODE
        depth = np.int64(x.vlan_depth[r])
        if p == 0 and (et == ETH_P_QINQ1 or (depth >= 1 and x.vlan_tpid0[r] == ETH_P_QINQ1)
                       or (depth >= 2 and x.vlan_tpid1[r] == ETH_P_QINQ1)):
            p = BYPASS_NOT_IP           # vlan_gro_receive: TPID 0x9100 has no offload
        in_v = np.int64(x.i_version[r])
        out_v = np.int64(x.o_version[r])
        if p == 0 and in_v == 0 and out_v == 0:
            p = BYPASS_NOT_IP
        enc = out_v != 0
        wire = np.int64(x.wire[r])
        so = np.int64(0)            # not literals: one _ip_layer signature
        si = np.int64(0)
        if enc:
            # layer 0: the outer header of a tunnel
            p, so = _ip_layer(p, so, out_v, np.int64(x.o_proto[r]), np.int64(x.o_ext_mask[r]),
                              np.int64(x.o_hdr_len[r]), x.o_mf[r], np.int64(x.o_frag_off[r]),
                              x.o_csum_ok[r], np.int64(x.o_tot_len[r]),
                              np.int64(x.o_offset[r]), x.o_rf[r], wire, cfg.ip6_tunnel_gro)
        elif in_v != 0:
            # layer 0: the only header
            p, si = _ip_layer(p, si, in_v, np.int64(x.i_proto[r]), np.int64(x.i_ext_mask[r]),
                              np.int64(x.i_hdr_len[r]), x.i_mf[r], np.int64(x.i_frag_off[r]),
                              x.i_csum_ok[r], np.int64(x.i_tot_len[r]),
                              np.int64(x.i_offset[r]), x.i_rf[r], wire, cfg.ip6_tunnel_gro)
        # tunnel layer, right after the outer header (gre/ipip/sit/udp gro_receive)
        tun = np.int64(x.tun_type[r])
        tfl = np.int64(x.tun_flags[r])
        if tun != 0:
            udp_tun = tun == TUN_VXLAN or tun == TUN_VXLAN_GPE or tun == TUN_GENEVE
            native = tun == TUN_GRE or tun == TUN_GRE_TEB or tun == TUN_IPIP \
                or tun == TUN_SIT or tun == TUN_IP6IP6 or tun == TUN_IP4IP6
            # native tunnels are aggregated on the receiving device; UDP tunnels need a
            # local tunnel socket, which this model does not have (plain UDP, no UDP GRO)
            if p == 0 and udp_tun:
                p = BYPASS_UDP_NO_GRO
            if p == 0 and not native:
                p = BYPASS_TUNNEL       # ERSPAN, FOU, GUE
            # "tunnels: Do not apply GRO to multiple layers of encapsulation"
            if p == 0 and (x.encap_depth[r] > 1 or not enc or in_v == 0):
                p = BYPASS_TUNNEL
            if tun == TUN_GRE or tun == TUN_GRE_TEB:
                # gre_gro_receive: only K and C flags, version 0; a bad GRE checksum
                if p == 0 and (tfl & (0xFFFF ^ (GRE_KEY | GRE_CSUM))) != 0:
                    p = BYPASS_TUNNEL
                if p == 0 and (tfl & GRE_CSUM) != 0 and not x.tun_csum_ok[r]:
                    p = BYPASS_TUNNEL
            # eth_gro_receive on an inner Ethernet header (GRE-TEB), vlan_gro_receive on
            # its tags: a type without a packet_offload (0x9100; 0x8100 / 0x88A8 without
            # CONFIG_VLAN_8021Q) -> flush
            if p == 0 and tun == TUN_GRE_TEB:
                ie = np.int64(x.inner_eth_type[r])
                if ie == ETH_P_QINQ1 or (x.inner_vlan_depth[r] >= 2
                                         and x.inner_vlan_tpid1[r] == ETH_P_QINQ1):
                    p = BYPASS_NOT_IP
                elif not cfg.vlan_gro and (ie == ETH_P_8021Q or ie == ETH_P_8021AD):
                    p = BYPASS_NO_VLAN_GRO
        if enc and in_v != 0:
            # layer 1: the inner header of a native tunnel
            p, si = _ip_layer(p, si, in_v, np.int64(x.i_proto[r]), np.int64(x.i_ext_mask[r]),
                              np.int64(x.i_hdr_len[r]), x.i_mf[r], np.int64(x.i_frag_off[r]),
                              x.i_csum_ok[r], np.int64(x.i_tot_len[r]),
                              np.int64(x.i_offset[r]), x.i_rf[r], wire, cfg.ip6_tunnel_gro)
        if p == 0 and l4 == IPPROTO_UDP:
            p = BYPASS_UDP_NO_GRO       # udp4/6_gro_receive: no UDP GRO mode
        if p == 0 and l4 != IPPROTO_TCP:
            p = BYPASS_NO_L4_OFFLOAD
        if p == 0 and cfg.verify_checksums:
            # tcp4/6_gro_receive: skb_gro_checksum_validate, skipped when already flushing
            cs = np.int64(x.l4_csum_state[r])
            flushing = so != 0 or si != 0 or (has_fl and sfl_fl[r] != 0)
            if (cs == CSUM_BAD or cs == CSUM_PARTIAL) and not flushing:
                p = BYPASS_L4_CSUM
        if p == 0 and x.tcp_doff[r] < 5:
            p = BYPASS_TCP_HEADER       # tcp_gro_pull_header
        pre[r] = p
        sfl_out[r] = so
        sfl_in[r] = si
