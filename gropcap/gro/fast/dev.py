"""dev_gro_receive and the GRO flush in the numba GRO engine (net/core/gro.c): per
packet, bypass or merge or complete p or hold (evicting the oldest entry of a full
bucket); ``__gro_flush`` of a queue's buckets; the ideal model's end-of-capture flush.

Layer: gro/fast, above ``state`` and the protocol rules (``tcp``, ``udp``); the poll loop
(``napi.py``) calls :func:`_receive` once per poll and :func:`_flush_queue` where the
kernel flushes.
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.constants import (
    TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG,
)
from gropcap.gro.fast.state import (
    ERA_FLUSH_ID, FLIST_MAX_LEN, MAX_GRO_SKBS, MODEL_IDEAL, OPT_AREA, OPT_WORDS,
    TCP_FLIST_MAX_SEGS, _complete, _deliver, _sfl_flush, _unlink,
)
from gropcap.gro.fast.tcp import _end_reason, _gso_short, _not_held_reason, _pair_checks
from gropcap.gro.fast.udp import _udp_receive
from gropcap.gro.reasons import (
    END_BUCKET_FULL, END_CAPTURE, END_POLL, END_POLL_OLD, END_SHORT_SEGMENT,
    FLUSH_HOP_LIMIT_FLOW, FLUSH_MAX_SEGS, FLUSH_SIZE_LIMIT, FLUSH_TCP_FLAGS, MERGED,
    NO_HELD_PACKET,
)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _receive(rows, lo, hi, c, cfg, st, out, poll, age, udp):
    """dev_gro_receive for packets ``rows[lo:hi]`` of one poll (or window, or the whole
    batch in the ideal model): bypass, merge, complete pp, hold or deliver.
    ``udp``: see :func:`napi.run`.

    Decides first, then acts at one site each (complete pp, deliver, hold): the helpers
    are inlined, and every extra call site would be compiled again. A function of its own
    (not inlined into ``napi.run``) that loops over the poll's packets: numba-level
    inlining of the whole rule set into ``run`` cost 3.3 s of a first run (numba copies a
    callee's IR block by block, blocks x variables), and its arguments (~90 arrays) are
    passed once per poll, not once per packet."""
    for x in range(lo, hi):
        # unsigned row and key: numba wraps a signed index around (``i < 0``: ``i + len``)
        # at every access, a few instructions and two stack loads for each of the ~100
        # array reads of a packet; these are never negative (``k`` is -1 only for a
        # bypass packet, which indexes nothing by it)
        i = np.uint64(rows[np.uint64(x)])
        out.ppoll[i] = poll
        out.cur[0] = c.row[i]
        deliver = -1                   # reason when the packet goes up alone now
        hold = -1                      # reason when it becomes a held entry
        end = 0                        # end reason of the held entry pp completed now
        k = np.uint64(c.key[i])
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
        elif st.ent[k].e_first < 0:
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
                if fl != st.ent[k].e_flags:
                    flush_reason = FLUSH_TCP_FLAGS
                elif st.ent[k].e_count >= TCP_FLIST_MAX_SEGS:
                    flush_reason = FLUSH_MAX_SEGS
                elif st.ent[k].e_len + c.plen[i] >= FLIST_MAX_LEN:
                    flush_reason = FLUSH_SIZE_LIMIT
            elif flush_reason == 0:
                # skb_gro_receive: -E2BIG when p->len + len >= gro_max_size or skb flush
                if st.ent[k].e_len + ln >= st.ent[k].e_limit:
                    flush_reason = FLUSH_SIZE_LIMIT
                elif sfl != 0:
                    flush_reason = _sfl_flush(sfl)
            if flush_reason == 0:
                st.ent[k].e_last = c.row[i]
                st.ent[k].e_count += segs
                st.ent[k].e_payload += c.payload[i]
                st.ent[k].e_grolen += ln
                st.ent[k].e_len += ln
                out.reason[i] = MERGED
                out.inst[i] = st.ent[k].e_inst
                end = _end_reason(fl, ln, st.ent[k].e_mss)
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
                _unlink(st.tbl, st.tcnt, np.int64(c.queue[i]), np.int64(c.bucket[i]),
                        np.int64(k))
            _complete(k, end, st, out, poll)
        if deliver >= 0:
            out.reason[i] = deliver
            _deliver(i, deliver, c, st, out, poll)
        elif hold >= 0:
            _hold(i, k, hold, c, cfg, st, out, poll, age)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _hold(i, k, reason, c, cfg, st, out, poll, age):
    """dev_gro_receive tail: hold packet i as a new entry (evict the oldest if full)."""
    held = st.ent[k]
    out.reason[i] = reason
    if cfg.model != MODEL_IDEAL:
        q = np.uint64(c.queue[i])
        b = np.uint64(c.bucket[i])
        if st.tcnt[q, b] >= MAX_GRO_SKBS:
            # gro_flush_oldest: the tail (oldest) entry of the bucket goes up first
            old = st.tbl[q, b, 0]
            _unlink(st.tbl, st.tcnt, np.int64(q), np.int64(b), old)
            _complete(old, END_BUCKET_FULL, st, out, poll)
        st.tbl[q, b, np.uint64(st.tcnt[q, b])] = np.int64(k)
        st.tcnt[q, b] += 1
    ln = c.tlen[i]
    inst = st.ctr[1]
    st.ctr[1] = inst + 1
    out.inst[i] = inst
    held.e_inst = inst
    held.e_first = c.row[i]
    held.e_last = c.row[i]
    held.e_count = c.segs[i]
    held.e_payload = c.payload[i]
    held.e_grolen = ln
    held.e_len = c.plen[i]
    # dev_gro_receive: a plain skb's gso_size becomes skb_gro_len(skb); a GSO skb keeps its own
    held.e_mss = c.gsz[i] if c.gsz[i] != 0 else ln
    # is_atomic (4.7-6.9): DF of the innermost IPv4 header (IPv6: 1); 6.10+: bits cleared
    if cfg.era == ERA_FLUSH_ID:
        held.e_fixed = c.in_df[i] if c.in_v[i] == 4 else 1
    else:
        held.e_fixed = 0
    held.e_age = age
    held.e_order = st.ctr[0]
    st.ctr[0] += 1
    held.e_queue = c.queue[i]
    held.e_limit = c.limit[i]
    held.e_loose = c.loose[i]
    held.e_gcode = c.gcode[i]
    held.e_flow = c.flow[i]
    # p's headers: the first packet's (tcp_gro_receive compares against them)
    held.e_seq = c.seq[i]
    held.e_ack = c.ack[i]
    held.e_flags = c.flags[i]
    held.e_doff = c.doff[i]
    held.e_window = c.window[i]
    for w in range(OPT_WORDS):
        held.e_opt[w] = c.opt[i, w]
    olen = np.int64(c.opt_len[i])
    held.e_opt[OPT_WORDS] = np.uint64((olen & 0xFF) | (min(olen, OPT_AREA) << 8))
    held.e_in_ttl = c.in_ttl[i]
    held.e_in_tos = c.in_tos[i]
    held.e_in_df = c.in_df[i]
    held.e_in_id = c.in_id[i]
    held.e_out_ttl = c.out_ttl[i]
    held.e_out_tos = c.out_tos[i]
    held.e_out_df = c.out_df[i]
    held.e_out_id = c.out_id[i]
    st.loose_held[c.loose[i]] += 1


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
            if old_only and st.ent[k].e_age == jiffy:
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

    :func:`state._complete` for each of them (``out.cur`` -1: a flush), in numpy: the order
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
