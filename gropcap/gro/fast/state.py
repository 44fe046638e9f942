"""The arrays the numba GRO engine runs on, and how a packet or a held entry goes up.

Layer: gro/fast, the bottom of the package (imports none of its modules). Per-packet
inputs (:class:`Cols`), switches (:class:`Cfg`), the held-entry table (:class:`State`)
and the outputs (:class:`Out`), all plain arrays prepared by ``engine.py``; the rule
modules (``ip``, ``tcp``, ``udp``, ``dev``) and the poll loop (``napi``) read and write
them.

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

from gropcap.gro.reasons import (
    FLUSH_FRAG_LIST, FLUSH_IP_RF, FLUSH_LENGTH, NOT_HELD_FRAG_LIST, NOT_HELD_IP_RF,
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
    ent: np.ndarray        # the ENTRY record array the e_* arrays are views of, what
    #                        the kernels read and write (see ENTRY)


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


# A held entry's fields (State's e_*) in their widths: the header copy in its
# PACKET_SCHEMA column's width (the values come from those columns), bounded codes in
# bytes; rows, counters, byte sums and ids int64.
ENTRY_DTYPES = {
    "e_fixed": np.uint8, "e_queue": np.int32, "e_limit": np.int32, "e_gcode": np.uint16,
    "e_seq": np.uint32, "e_ack": np.uint32, "e_flags": np.uint16, "e_doff": np.uint8,
    "e_window": np.uint16, "e_in_ttl": np.uint8, "e_in_tos": np.uint8, "e_in_df": np.uint8,
    "e_in_id": np.uint16, "e_out_ttl": np.uint8, "e_out_tos": np.uint8,
    "e_out_df": np.uint8, "e_out_id": np.uint16, "e_udp_len": np.uint16,
}
ENTRY_FIELDS = tuple(f for f in State._fields if f.startswith("e_"))


def _entry_dtype() -> np.dtype:
    fields = [(f, np.uint64, (OPT_WORDS + 1,)) if f == "e_opt"
              else (f, ENTRY_DTYPES.get(f, np.int64)) for f in ENTRY_FIELDS]
    fields.sort(key=lambda f: -np.dtype(f[1]).itemsize)     # widest first: no padding
    return np.dtype(fields, align=True)


# The held-entry table is one record array, a record (184 bytes) per key: State's e_*
# arrays are strided views of its fields, so one key's fields share 3 cache lines
# instead of lying in 31 arrays. With thousands of interleaved flows the table is far
# larger than the CPU's caches and every field read was a miss of its own
# (docs/performance.md, "The held-entry table as records"). The kernels go through the
# records themselves (``held = st.ent[k]``, ``held.e_seq``): a field is then one load
# at a constant offset, where a view's element costs its own base and a multiply by its
# stride, both reloaded from the spilled arguments (docs/performance.md, "Session 27").
ENTRY = _entry_dtype()


def entry_arrays(nk: int) -> dict:
    """State's e_* arrays for ``nk`` keys, views of one fresh ENTRY record array (the
    ``.base`` of each), ``e_first`` -1: nothing held."""
    rec = np.zeros(nk, ENTRY)
    rec["e_first"] = -1
    return {**{f: rec[f] for f in ENTRY_FIELDS}, "ent": rec}


def entries(st: "State"):
    """``st.ent``, the ENTRY record array every e_* array of ``st`` is a view of, or
    None (arrays of their own: a state unpickled, where each view and the record array
    travelled as copies)."""
    rec = st.ent
    if not isinstance(rec, np.ndarray) or rec.dtype != ENTRY or rec.ndim != 1:
        return None
    return rec if all(getattr(st, f).base is rec for f in ENTRY_FIELDS) else None


UDP_SEGMENT = 1           # Cols.udp: udp_gro_receive_segment, skb_gro_receive
UDP_FRAGLIST = 2          # Cols.udp: NAPI_GRO_CB(skb)->is_flist, skb_gro_receive_list


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
    held = st.ent[k]                # p, the held entry: a record of State.ent
    count = held.e_count
    gso = held.e_mss if count > 1 else 0
    _emit(out, held.e_first, held.e_last, count, held.e_payload, gso, end, held.e_queue,
          poll, held.e_fixed, held.e_inst, held.e_gcode, held.e_flow)
    held.e_first = -1
    st.loose_held[held.e_loose] -= 1


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
def _sfl_flush(sfl):
    """skb_gro_receive refusing p because the skb carries a flush of its own."""
    if sfl == NOT_HELD_IP_RF:
        return FLUSH_IP_RF
    if sfl == NOT_HELD_FRAG_LIST:
        return FLUSH_FRAG_LIST
    return FLUSH_LENGTH
