"""tcp_gro_receive's rules in the numba GRO engine (net/ipv4/tcp_offload.c): the flush
items of a packet against the held entry of its key, in kernel order, the option-area
compare, and out_check_final (why a packet is not held, why a merged one ends p).

Layer: gro/fast, above ``state`` and ``ip`` (the L3 items tcp_gro_receive ORs in).
``dev.py`` calls these from dev_gro_receive.
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.constants import (
    TCP_FLAG_CWR, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG,
)
from gropcap.gro.fast.ip import _ip_id_checks, _ip_pair
from gropcap.gro.fast.state import ERA_FLUSH_ID, OPT_AREA, OPT_BYTES, OPT_WORDS
from gropcap.gro.reasons import (
    END_FIN, END_PSH, END_SHORT_SEGMENT, END_URG, FLUSH_CWR, FLUSH_DF, FLUSH_ECN,
    FLUSH_FLAGS_FINAL, FLUSH_GSO_SIZE, FLUSH_IP_RF, FLUSH_LENGTH, FLUSH_OUTER_DF,
    FLUSH_OUTER_ECN, FLUSH_OUTER_TOS, FLUSH_OUTER_TTL, FLUSH_PAYLOAD_LARGER, FLUSH_SEQ,
    FLUSH_TCP_ACK, FLUSH_TCP_DOFF, FLUSH_TCP_FLAGS, FLUSH_TCP_OPTIONS, FLUSH_TCP_TS,
    FLUSH_TCP_WINDOW, FLUSH_TOS, FLUSH_TTL, FLUSH_ZERO_PAYLOAD, NOT_HELD_FIN,
    NOT_HELD_GSO_SHORT, NOT_HELD_IP_RF, NOT_HELD_PSH, NOT_HELD_RST, NOT_HELD_SYN,
    NOT_HELD_URG, NOT_HELD_ZERO_PAYLOAD,
)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _same_options(i, k, c, st):
    held = st.ent[k]
    if (np.int64(c.opt_len[i]) & 0xFF) != np.int64(held.e_opt[OPT_WORDS] & np.uint64(0xFF)):
        return False
    for w in range(OPT_WORDS):
        if c.opt[i, w] != held.e_opt[w]:
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
    held = st.ent[k]
    count = held.e_count
    reason = 0
    # --- 4.7-6.9 and older: p->flush was filled in the L3 loop (inet_gro_receive /
    # ipv6_gro_receive) and is the first term of tcp_gro_receive's flush.
    if cfg.era <= ERA_FLUSH_ID:
        if c.out_v[i] != 0:
            reason = _ip_pair(c.out_v[i], c.out_ttl[i], c.out_tos[i], c.out_df[i],
                              held.e_out_ttl, held.e_out_tos, held.e_out_df, cfg.hop_flush,
                              FLUSH_OUTER_TTL, FLUSH_OUTER_TOS, FLUSH_OUTER_ECN,
                              FLUSH_OUTER_DF)
            if reason == 0 and c.sfl_out[i] != 0:
                # inet_gro_receive: NAPI_GRO_CB(p)->flush |= flush (N's length / RF)
                reason = FLUSH_IP_RF if c.sfl_out[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
        if reason == 0:
            reason = _ip_pair(c.in_v[i], c.in_ttl[i], c.in_tos[i], c.in_df[i],
                              held.e_in_ttl, held.e_in_tos, held.e_in_df, cfg.hop_flush,
                              FLUSH_TTL, FLUSH_TOS, FLUSH_ECN, FLUSH_DF)
            if reason == 0 and c.sfl_in[i] != 0:
                reason = FLUSH_IP_RF if c.sfl_in[i] == NOT_HELD_IP_RF else FLUSH_LENGTH
    # --- tcp_gro_receive: CWR, flag word, ack, options
    fl = c.flags[i]
    if reason == 0 and (fl & TCP_FLAG_CWR) != 0:
        reason = FLUSH_CWR
    if reason == 0:
        diff = (fl ^ held.e_flags) & ~cfg.flag_mask
        if (diff & (TCP_FLAG_SYN | TCP_FLAG_RST | TCP_FLAG_URG)) != 0:
            reason = FLUSH_FLAGS_FINAL     # never equal: a held p has none of them
        elif diff != 0:
            reason = FLUSH_TCP_FLAGS
        elif c.doff[i] != held.e_doff:
            reason = FLUSH_TCP_DOFF
        elif c.window[i] != held.e_window:
            reason = FLUSH_TCP_WINDOW
    if reason == 0 and c.ack[i] != held.e_ack:
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
        if c.gsz[i] != held.e_mss:
            return FLUSH_GSO_SIZE
    elif ln == 0:
        return FLUSH_ZERO_PAYLOAD
    elif ln > held.e_mss:
        return FLUSH_PAYLOAD_LARGER
    # --- sequence continuity: th2->seq + skb_gro_len(p) == th->seq
    if ((held.e_seq + held.e_grolen) & 0xFFFFFFFF) != c.seq[i]:
        return FLUSH_SEQ
    return 0


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
