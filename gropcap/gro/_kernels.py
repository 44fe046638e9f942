"""numba kernels of the GRO engine (private: arrays in, arrays out; see engine.py).

Layer: per-packet numpy arrays prepared by ``engine.py`` -> per-packet verdicts and
super-packet rows. Nothing here raises for data: every packet ends in a super-packet with a
reason code. The rules mirror the kernel functions named next to them (net/core/gro.c,
include/net/gro.h, net/ipv4/af_inet.c, net/ipv6/ip6_offload.c, net/ipv4/tcp_offload.c);
the batch models follow docs/gro-model.md.

State arrays are indexed by *GRO key* (an exact same-flow class computed by engine.py: at
most one held entry per key exists at any time, because a packet that finds its key held
either merges into it or completes it first).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from gropcap.constants import (
    TCP_FLAG_CWR, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG,
)
from gropcap.gro.reasons import (
    END_BUCKET_FULL, END_CAPTURE, END_FIN, END_POLL, END_POLL_OLD, END_PSH,
    END_SHORT_SEGMENT, END_URG, FLUSH_CWR, FLUSH_DF, FLUSH_ECN, FLUSH_HOP_LIMIT_FLOW,
    FLUSH_FLAGS_FINAL, FLUSH_IP_ID, FLUSH_IP_RF, FLUSH_LENGTH, FLUSH_OUTER_DF,
    FLUSH_OUTER_ECN, FLUSH_OUTER_IP_ID,
    FLUSH_OUTER_TOS, FLUSH_OUTER_TTL, FLUSH_PAYLOAD_LARGER, FLUSH_SEQ, FLUSH_SIZE_LIMIT,
    FLUSH_TCP_ACK, FLUSH_TCP_DOFF, FLUSH_TCP_FLAGS, FLUSH_TCP_OPTIONS, FLUSH_TCP_TS,
    FLUSH_TCP_WINDOW, FLUSH_TOS, FLUSH_TTL, FLUSH_ZERO_PAYLOAD, MERGED, NO_HELD_PACKET,
    NOT_HELD_FIN, NOT_HELD_IP_RF, NOT_HELD_PSH, NOT_HELD_RST, NOT_HELD_SYN, NOT_HELD_URG,
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
    """Per-packet inputs, all length n (prepared and validated by engine.py)."""
    key: np.ndarray        # int64 exact same-flow class (-1: bypass packet)
    loose: np.ndarray      # int64 class without the IPv6 hop limit (pre-5.18 reason only)
    queue: np.ndarray      # int32 RX queue
    bucket: np.ndarray     # int32 GRO hash bucket
    ts: np.ndarray         # int64 arrival ns
    pre: np.ndarray        # uint8 BYPASS_* code, 0 when the packet enters TCP GRO
    sfl_out: np.ndarray    # uint8 skb flush set by the outer IP layer (NOT_HELD_*), 0 none
    sfl_in: np.ndarray     # uint8 skb flush set by the inner / only IP layer
    payload: np.ndarray    # int64 TCP payload bytes (column payload_len: accounting)
    tlen: np.ndarray       # int64 skb_gro_len at TCP: payload plus padding / trailer
    plen: np.ndarray       # int64 p->len if held: outer IP length + in-band VLAN tags
    limit: np.ndarray      # int64 size limit if this packet heads a super-packet
    seq: np.ndarray        # int64
    ack: np.ndarray        # int64
    flags: np.ndarray      # int32 9 TCP flag bits
    doff: np.ndarray       # int32
    window: np.ndarray     # int32
    opt: np.ndarray        # int64 class of the option bytes
    optnots: np.ndarray    # int64 class of the option bytes with TSval/TSecr zeroed
    in_v: np.ndarray       # int32 inner (only) IP version
    in_ttl: np.ndarray     # int32
    in_tos: np.ndarray     # int32
    in_df: np.ndarray      # int32
    in_id: np.ndarray      # int32
    out_v: np.ndarray      # int32 outer IP version, 0 when not encapsulated
    out_ttl: np.ndarray
    out_tos: np.ndarray
    out_df: np.ndarray
    out_id: np.ndarray
    poll_win: np.ndarray   # int64 explicit poll window per packet (MODEL_WINDOWS)


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


class State(NamedTuple):
    """Held-entry table (indexed by GRO key) plus per-packet chains; crosses batches."""
    e_first: np.ndarray    # int64 first packet row, -1 when nothing held
    e_last: np.ndarray     # int64
    e_count: np.ndarray    # int64 segments
    e_payload: np.ndarray  # int64 sum of payload_len (accounting)
    e_grolen: np.ndarray   # int64 skb_gro_len(p): sum of TCP lengths merged
    e_len: np.ndarray      # int64 p->len
    e_mss: np.ndarray      # int64 gso_size
    e_fixed: np.ndarray    # int64 ip_fixedid bits (6.10+) / is_atomic (4.7-6.9)
    e_age: np.ndarray      # int64 jiffy of the poll that held it
    e_order: np.ndarray    # int64 hold serial (oldest first in the ideal model flush)
    loose_held: np.ndarray  # int64 held entries per loose key
    tbl: np.ndarray        # int64 [queues, buckets, 8] keys, oldest first
    tcnt: np.ndarray       # int64 [queues, buckets]
    nxt: np.ndarray        # int64 per packet: next packet of its super-packet, -1 last
    serial: np.ndarray     # int64 [1] hold counter


class Out(NamedTuple):
    """Outputs: per packet, then super-packets in queue-local delivery order."""
    reason: np.ndarray     # uint8 per packet
    role: np.ndarray       # uint8 per packet
    seg_of: np.ndarray     # int64 per packet: local super-packet row
    ppoll: np.ndarray      # int64 per packet: local poll index
    s_first: np.ndarray    # int64 [n] super-packet rows
    s_last: np.ndarray
    s_count: np.ndarray
    s_payload: np.ndarray
    s_gso: np.ndarray
    s_end: np.ndarray
    s_queue: np.ndarray
    s_poll: np.ndarray
    s_fixed: np.ndarray    # int64 ip_fixedid / is_atomic state at completion
    nseg: np.ndarray       # int64 [1]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _emit(out, first, last, count, payload, gso, end, queue, poll):
    s = out.nseg[0]
    out.s_first[s] = first
    out.s_last[s] = last
    out.s_count[s] = count
    out.s_payload[s] = payload
    out.s_gso[s] = gso
    out.s_end[s] = end
    out.s_queue[s] = queue
    out.s_poll[s] = poll
    out.nseg[0] = s + 1
    return s


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _deliver(i, reason, c, out, poll):
    """A packet goes up alone at once (GRO_NORMAL)."""
    s = _emit(out, i, i, 1, c.payload[i], 0, reason, c.queue[i], poll)
    out.seg_of[i] = s
    out.role[i] = ROLE_ALONE


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _complete(k, end, c, st, out, poll):
    """gro_complete: the held entry of key k goes up (count == 1 -> gso_size 0)."""
    first = st.e_first[k]
    count = st.e_count[k]
    gso = st.e_mss[k] if count > 1 else 0
    s = _emit(out, first, st.e_last[k], count, st.e_payload[k], gso, end, c.queue[first],
              poll)
    out.s_fixed[s] = st.e_fixed[k]
    j = first
    while j >= 0:
        out.seg_of[j] = s
        out.role[j] = ROLE_ALONE if count == 1 else (ROLE_HEAD if j == first else ROLE_MERGED)
        nj = st.nxt[j]
        st.nxt[j] = -1
        j = nj
    st.e_first[k] = -1
    st.loose_held[c.loose[first]] -= 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _unlink(st, q, b, k):
    n = st.tcnt[q, b]
    pos = -1
    for x in range(n):
        if st.tbl[q, b, x] == k:
            pos = x
            break
    if pos < 0:
        return
    for x in range(pos, n - 1):
        st.tbl[q, b, x] = st.tbl[q, b, x + 1]
    st.tbl[q, b, n - 1] = -1
    st.tcnt[q, b] = n - 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
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


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _pair_checks(i, k, c, cfg, st):
    """tcp_gro_receive flush items for packet i against held entry k, in kernel order.

    Returns the reason code of the first item that holds (0: the merge may proceed to
    skb_gro_receive). Mutates the entry's fixed-ID state exactly as the kernel does, even
    when another item flushes (the kernel ORs every item).
    """
    p = st.e_first[k]
    count = st.e_count[k]
    reason = 0
    # --- 4.7-6.9 and older: p->flush was filled in the L3 loop (inet_gro_receive /
    # ipv6_gro_receive) and is the first term of tcp_gro_receive's flush.
    if cfg.era <= ERA_FLUSH_ID:
        if c.out_v[i] != 0:
            reason = _ip_pair(c.out_v[i], c.out_ttl[i], c.out_tos[i], c.out_df[i],
                              c.out_ttl[p], c.out_tos[p], c.out_df[p], cfg.hop_flush,
                              FLUSH_OUTER_TTL, FLUSH_OUTER_TOS, FLUSH_OUTER_ECN,
                              FLUSH_OUTER_DF)
            if reason == 0 and c.sfl_out[i] != 0:
                # inet_gro_receive: NAPI_GRO_CB(p)->flush |= flush (N's length / RF)
                reason = FLUSH_IP_RF if c.sfl_out[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
        if reason == 0:
            reason = _ip_pair(c.in_v[i], c.in_ttl[i], c.in_tos[i], c.in_df[i],
                              c.in_ttl[p], c.in_tos[p], c.in_df[p], cfg.hop_flush,
                              FLUSH_TTL, FLUSH_TOS, FLUSH_ECN, FLUSH_DF)
            if reason == 0 and c.sfl_in[i] != 0:
                reason = FLUSH_IP_RF if c.sfl_in[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
    # --- tcp_gro_receive: CWR, flag word, ack, options
    fl = c.flags[i]
    if reason == 0 and (fl & TCP_FLAG_CWR) != 0:
        reason = FLUSH_CWR
    if reason == 0:
        diff = (fl ^ c.flags[p]) & ~cfg.flag_mask
        if (diff & (TCP_FLAG_SYN | TCP_FLAG_RST | TCP_FLAG_URG)) != 0:
            reason = FLUSH_FLAGS_FINAL     # never equal: a held p has none of them
        elif diff != 0:
            reason = FLUSH_TCP_FLAGS
        elif c.doff[i] != c.doff[p]:
            reason = FLUSH_TCP_DOFF
        elif c.window[i] != c.window[p]:
            reason = FLUSH_TCP_WINDOW
    if reason == 0 and c.ack[i] != c.ack[p]:
        reason = FLUSH_TCP_ACK
    if reason == 0 and c.opt[i] != c.opt[p]:
        reason = FLUSH_TCP_TS if c.optnots[i] == c.optnots[p] else FLUSH_TCP_OPTIONS
    # --- IP ID (and, from 6.10, all L3 pair checks): gro_receive_network_flush
    r_id = 0
    if cfg.era == ERA_INNER_ID:
        # < 4.7: only the innermost IPv4 ID is checked, it must be p.id + count
        if c.in_v[i] == 4 and ((c.in_id[p] + count) & 0xFFFF) != c.in_id[i]:
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
                pid = c.out_id[p]
                ndf = c.out_df[i]
            else:
                v = c.in_v[i]
                nid = c.in_id[i]
                pid = c.in_id[p]
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
                r = _ip_pair(v, c.out_ttl[i], c.out_tos[i], c.out_df[i], c.out_ttl[p],
                             c.out_tos[p], c.out_df[p], cfg.hop_flush, FLUSH_OUTER_TTL,
                             FLUSH_OUTER_TOS, FLUSH_OUTER_ECN, FLUSH_OUTER_DF)
                nid = c.out_id[i]
                pid = c.out_id[p]
                ndf = c.out_df[i]
                outer = True
                bit = 1
                rid = FLUSH_OUTER_IP_ID
            else:
                v = c.in_v[i]
                r = _ip_pair(v, c.in_ttl[i], c.in_tos[i], c.in_df[i], c.in_ttl[p],
                             c.in_tos[p], c.in_df[p], cfg.hop_flush, FLUSH_TTL, FLUSH_TOS,
                             FLUSH_ECN, FLUSH_DF)
                nid = c.in_id[i]
                pid = c.in_id[p]
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
    if reason == 0:
        reason = r_id
    if reason != 0:
        return reason
    # --- size of the new segment vs gso_size: (len - 1) >= mss, unsigned
    ln = c.tlen[i]
    if ln == 0:
        return FLUSH_ZERO_PAYLOAD
    if ln > st.e_mss[k]:
        return FLUSH_PAYLOAD_LARGER
    # --- sequence continuity: th2->seq + skb_gro_len(p) == th->seq
    if ((c.seq[p] + st.e_grolen[k]) & 0xFFFFFFFF) != c.seq[i]:
        return FLUSH_SEQ
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
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


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
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


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _receive(i, c, cfg, st, out, poll, age):
    """dev_gro_receive for packet i: bypass, merge, complete pp, hold or deliver."""
    out.ppoll[i] = poll
    pre = c.pre[i]
    if pre != 0:
        # a layer bailed before L4: delivered now, the flow's held entry untouched
        out.reason[i] = pre
        _deliver(i, pre, c, out, poll)
        return
    k = c.key[i]
    ln = c.tlen[i]
    fl = c.flags[i]
    sfl = c.sfl_out[i] if c.sfl_out[i] != 0 else c.sfl_in[i]
    if st.e_first[k] < 0:
        # tcp_gro_receive, no p: out_check_final with mss = 1
        r = sfl if sfl != 0 else _not_held_reason(fl, ln)
        if r != 0:
            out.reason[i] = r
            _deliver(i, r, c, out, poll)
            return
        if st.loose_held[c.loose[i]] > 0:
            # before 5.18 the IPv6 hop limit was a flow key: the held entry of this flow
            # stays, the packet starts a parallel one (ipv6_gro_receive, 6fc2f3832d36)
            _hold(i, k, FLUSH_HOP_LIMIT_FLOW, c, cfg, st, out, poll, age)
        else:
            _hold(i, k, NO_HELD_PACKET, c, cfg, st, out, poll, age)
        return
    flush_reason = _pair_checks(i, k, c, cfg, st)
    if flush_reason == 0:
        # skb_gro_receive: -E2BIG when p->len + len >= gro_max_size or skb flush
        if st.e_len[k] + ln >= c.limit[st.e_first[k]]:
            flush_reason = FLUSH_SIZE_LIMIT
        elif sfl != 0:
            flush_reason = FLUSH_IP_RF if sfl == NOT_HELD_IP_RF else FLUSH_LENGTH
    q = c.queue[i]
    if flush_reason == 0:
        st.nxt[st.e_last[k]] = i
        st.e_last[k] = i
        st.e_count[k] += 1
        st.e_payload[k] += c.payload[i]
        st.e_grolen[k] += ln
        st.e_len[k] += ln
        out.reason[i] = MERGED
        end = _end_reason(fl, ln, st.e_mss[k])
        if end != 0:
            if cfg.model != MODEL_IDEAL:
                _unlink(st, q, c.bucket[i], k)
            _complete(k, end, c, st, out, poll)
        return
    # not merged: pp = p is completed before the packet is delivered or held
    if cfg.model != MODEL_IDEAL:
        _unlink(st, q, c.bucket[i], k)
    _complete(k, flush_reason, c, st, out, poll)
    if sfl != 0 or ln < 1 or (fl & (TCP_FLAG_URG | TCP_FLAG_PSH | TCP_FLAG_RST |
                                    TCP_FLAG_SYN | TCP_FLAG_FIN)) != 0:
        out.reason[i] = flush_reason
        _deliver(i, flush_reason, c, out, poll)
        return
    _hold(i, k, flush_reason, c, cfg, st, out, poll, age)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _hold(i, k, reason, c, cfg, st, out, poll, age):
    """dev_gro_receive tail: hold packet i as a new entry (evict the oldest if full)."""
    out.reason[i] = reason
    if cfg.model != MODEL_IDEAL:
        q = c.queue[i]
        b = c.bucket[i]
        if st.tcnt[q, b] >= MAX_GRO_SKBS:
            # gro_flush_oldest: the tail (oldest) entry of the bucket goes up first
            old = st.tbl[q, b, 0]
            _unlink(st, q, b, old)
            _complete(old, END_BUCKET_FULL, c, st, out, poll)
        st.tbl[q, b, st.tcnt[q, b]] = k
        st.tcnt[q, b] += 1
    ln = c.tlen[i]
    st.e_first[k] = i
    st.e_last[k] = i
    st.e_count[k] = 1
    st.e_payload[k] = c.payload[i]
    st.e_grolen[k] = ln
    st.e_len[k] = c.plen[i]
    st.e_mss[k] = ln            # dev_gro_receive: gso_size = skb_gro_len(skb)
    # is_atomic (4.7-6.9): DF of the innermost IPv4 header (IPv6: 1); 6.10+: bits cleared
    if cfg.era == ERA_FLUSH_ID:
        st.e_fixed[k] = c.in_df[i] if c.in_v[i] == 4 else 1
    else:
        st.e_fixed[k] = 0
    st.e_age[k] = age
    st.e_order[k] = st.serial[0]
    st.serial[0] += 1
    st.loose_held[c.loose[i]] += 1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _flush_queue(q, c, st, out, poll, old_only, jiffy, end_all, end_old):
    """__gro_flush: buckets in index order, oldest entry first; a partial flush stops a
    bucket's walk at the first entry held in the current jiffy."""
    for b in range(st.tcnt.shape[1]):
        while st.tcnt[q, b] > 0:
            k = st.tbl[q, b, 0]
            if old_only and st.e_age[k] == jiffy:
                break
            _unlink(st, q, b, k)
            _complete(k, end_old if old_only else end_all, c, st, out, poll)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _held_any(q, st):
    for b in range(st.tcnt.shape[1]):
        if st.tcnt[q, b] > 0:
            return True
    return False


@numba.njit(cache=True, nogil=True, _nrt=False)
def run_ideal(c, cfg, st, out):
    """Ideal model: every packet in row order, one unlimited table, no polls.

    The end-of-capture flush is :func:`flush_ideal` (separate: it allocates)."""
    n = c.key.shape[0]
    for i in range(n):
        _receive(i, c, cfg, st, out, -1, 0)


@numba.njit(cache=True, nogil=True)
def flush_ideal(c, st, out):
    """End of capture in the ideal model: held entries oldest first (END_CAPTURE)."""
    nk = st.e_first.shape[0]
    cnt = 0
    for k in range(nk):
        if st.e_first[k] >= 0:
            cnt += 1
    keys = np.empty(cnt, np.int64)
    orders = np.empty(cnt, np.int64)
    x = 0
    for k in range(nk):
        if st.e_first[k] >= 0:
            keys[x] = k
            orders[x] = st.e_order[k]
            x += 1
    idx = np.argsort(orders)
    for x in range(cnt):
        _complete(keys[idx[x]], END_CAPTURE, c, st, out, -1)


@numba.njit(cache=True, nogil=True, _nrt=False)
def run_windows(c, cfg, st, out):
    """napi model with explicit GRO windows (kernel replay): each run of equal
    ``poll_win`` values is one window; its end flushes all queues (END_POLL)."""
    n = c.key.shape[0]
    poll = -1
    i = 0
    while i < n:
        w = c.poll_win[i]
        poll += 1
        while i < n and c.poll_win[i] == w:
            _receive(i, c, cfg, st, out, poll, 0)
            i += 1
        for q in range(cfg.queues):
            _flush_queue(q, c, st, out, poll, False, 0, END_POLL, END_POLL)


@numba.njit(cache=True, nogil=True)
def _jiffy(t, hz):
    return (t * hz) // 1000000000


@numba.njit(cache=True, nogil=True)
def _take_gap(arr, j, hi, start, budget, gap):
    """Packets from j on: each joins while it arrives within ``gap`` of the previous one
    (or of the poll start, for packets already waiting), up to ``budget``."""
    cnt = 1
    while cnt < budget and j + cnt < hi and \
            arr[j + cnt] <= max(arr[j + cnt - 1], start) + gap:
        cnt += 1
    return cnt


@numba.njit(cache=True, nogil=True)
def _take_until(arr, j, hi, until, budget):
    """Packets from j on that arrived by ``until``, at most ``budget``."""
    cnt = 0
    while cnt < budget and j + cnt < hi and arr[j + cnt] <= until:
        cnt += 1
    return cnt


@numba.njit(cache=True, nogil=True, _nrt=False)
def run_napi(c, cfg, st, out, rows, qstart, arr, p_time, p_queue):
    """napi model, polls inferred from arrival times (docs/gro-model.md "NAPI polls").

    ``rows[qstart[q]:qstart[q+1]]`` are queue q's packets in row order and ``arr`` their
    arrival times (running maximum of ts_ns within the queue). Mirrors ``__napi_poll``
    (full budget: flush all if HZ < 1000, else old entries; poll again at once) and
    ``napi_complete_done`` (gro_flush_timeout / napi_defer_hard_irqs). Polls get local
    numbers in simulation order and their time and queue go to ``p_time``/``p_queue`` so
    the caller can number them by (time, queue, order). Returns the number of polls, or
    -1 when ``p_time`` is too small (the caller retries with more room; no allocation
    here keeps the kernel free of reference counting).
    """
    npoll = 0
    cap = p_time.shape[0]
    budget = cfg.budget
    gap = cfg.gap_ns
    T = cfg.timeout_ns
    for q in range(cfg.queues):
        lo = qstart[q]
        hi = qstart[q + 1]
        j = lo
        timer = -1            # pending hrtimer, -1 none
        has_timer = False
        masked = False        # interrupt masked: arrivals wait for the timer
        defer = 0             # napi->defer_hard_irqs_count
        cont = 0              # after a full-budget poll: 1 gap-rule, 2 timer continuation
        cont_t = 0
        last_poll = -1
        last_time = 0
        while True:
            was_timer = False
            if cont != 0:
                kind = cont
                cont = 0
                if j >= hi:
                    break
                if kind == 2 and arr[j] <= cont_t:
                    cnt = _take_until(arr, j, hi, cont_t, budget)
                    now = cont_t
                    was_timer = True
                else:
                    start = max(arr[j], cont_t)
                    cnt = _take_gap(arr, j, hi, start, budget, gap)
                    now = max(start, arr[j + cnt - 1])
            elif has_timer and (masked or j >= hi or arr[j] >= timer):
                now = timer
                has_timer = False
                cnt = _take_until(arr, j, hi, now, budget)
                was_timer = True
                if cnt == 0:
                    # timer poll without work: no reload of the defer counter
                    poll = npoll
                    npoll += 1
                    if poll >= cap:
                        return -1
                    p_time[poll] = now
                    p_queue[poll] = q
                    last_poll = poll
                    last_time = now
                    jf = _jiffy(now, cfg.hz)
                    if defer > 0:
                        defer -= 1
                        _flush_queue(q, c, st, out, poll, True, jf, END_POLL, END_POLL_OLD)
                        timer = now + T
                        has_timer = True
                    else:
                        _flush_queue(q, c, st, out, poll, False, jf, END_POLL, END_POLL)
                        masked = False
                    continue
            else:
                if j >= hi:
                    break
                has_timer = False    # an interrupt-driven poll replaces the pending timer
                cnt = _take_gap(arr, j, hi, arr[j], budget, gap)
                now = arr[j + cnt - 1]
            poll = npoll
            npoll += 1
            if poll >= cap:
                return -1
            p_time[poll] = now
            p_queue[poll] = q
            last_poll = poll
            last_time = now
            jf = _jiffy(now, cfg.hz)
            for x in range(j, j + cnt):
                _receive(rows[x], c, cfg, st, out, poll, jf)
            j += cnt
            if cnt == budget:
                # __napi_poll: "Flush too old packets. If HZ < 1000, flush all packets."
                if cfg.hz < 1000:
                    _flush_queue(q, c, st, out, poll, False, jf, END_POLL, END_POLL)
                else:
                    _flush_queue(q, c, st, out, poll, True, jf, END_POLL, END_POLL_OLD)
                cont = 2 if was_timer else 1
                cont_t = now
                continue
            # napi_complete_done(work > 0)
            timeout = T if _held_any(q, st) else 0
            defer = cfg.defer
            if defer > 0:
                defer -= 1
                timeout = T
                masked = timeout != 0
            else:
                masked = False
            _flush_queue(q, c, st, out, poll, timeout != 0, jf, END_POLL, END_POLL_OLD)
            if timeout != 0:
                timer = now + timeout
                has_timer = True
            else:
                has_timer = False
        # end of capture: anything still held goes up in the queue's last poll
        if last_poll >= 0 and _held_any(q, st):
            _flush_queue(q, c, st, out, last_poll, False, _jiffy(last_time, cfg.hz),
                         END_POLL, END_POLL)
    return npoll


# --- column preparation helpers ---------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def _row_hash(mat, r):
    h = np.uint64(14695981039346656037)
    for x in range(mat.shape[1]):
        h = (h ^ np.uint64(mat[r, x])) * np.uint64(1099511628211)
    return h


@numba.njit(cache=True, nogil=True)
def dedup_rows(mat, use):
    """Exact equivalence classes of the rows of a uint8 matrix (rows with ``use``).

    Returns int64 ids numbered by first appearance (-1 where ``use`` is False): an open
    addressing table on an FNV-1a row hash, every hit confirmed byte by byte.
    """
    n = mat.shape[0]
    w = mat.shape[1]
    ids = np.full(n, -1, np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    slots = np.full(size, -1, np.int64)      # representative row
    mask = np.uint64(size - 1)
    nid = 0
    for r in range(n):
        if not use[r]:
            continue
        pos = _row_hash(mat, r) & mask
        while True:
            rep = slots[pos]
            if rep < 0:
                slots[pos] = r
                ids[r] = nid
                nid += 1
                break
            same = True
            for x in range(w):
                if mat[rep, x] != mat[r, x]:
                    same = False
                    break
            if same:
                ids[r] = ids[rep]
                break
            pos = (pos + np.uint64(1)) & mask
    return ids


@numba.njit(cache=True, nogil=True)
def zero_timestamps(opts, opt_len):
    """Copy of the TCP option bytes with the TSval/TSecr of the first timestamp option
    zeroed: two option areas that differ only there differ "only in TSval/TSecr"
    (FLUSH_TCP_TS), as docs/gro-model.md pins it."""
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
