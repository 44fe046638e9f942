"""One pass over a pcap file's bytes: the frame's headers read and both GRO models run
record by record (issue 14's single pass), for the traffic and receive context it covers.

The engine (``gro/engine.py``) runs over decoded columns: the decoder materialises about
180 bytes a record, then a dozen passes (classification, bypass checks, lengths, RSS,
each model) read them back with Python between the passes. This module reads the
fields GRO needs straight from the mapped capture and runs the ideal and the napi model
on each record while its headers are in registers, writing only the verdicts: the
``GroResult`` of each model, equal to the engine's field for field
(``tests/gro/test_fused.py`` holds it to the engine on the samples and on generated
traffic). It is the single pass of ``docs/performance.md``: a summary-only run of a
capture it covers hands it each batch of records from the capture scan in the decoder's
place (``run.single.SinglePass``), and it gives, besides both models' results, the
decoder's columns of each TCP record that the run's accumulators read (``NARROW_*``);
``benchmarks/bench_fused_floor.py`` measures it alone.

What it covers (:func:`uncovered` for the context, :func:`uncovered_at` for the records,
before a run starts; :func:`run_file` says why not), else the decoder and the engine run:

- the records of a capture scan (:func:`run_file`: a pcap file, either byte order,
  micro- or nanosecond times, link type Ethernet; ``run.single``: any capture of
  Ethernet frames on one interface);
- every frame Ethernet / IPv4 without options, not a fragment, a valid header
  checksum, no reserved bit, or Ethernet / IPv6 without extension headers, a payload
  length that is not 0, either behind one 802.1Q tag or none (vlan_gro_receive: the
  TCI in the flow key, the IPv4 size limit for a tagged IPv6 flow); TCP with its whole
  header captured, the IP length within
  the frame and at most the MTU (``config.mtu``; when not given, the MTU the run would
  infer: a longer frame was captured coalesced, whose segments need the whole capture's
  statistics); or a frame GRO passes by: IPv4 or IPv6 of a protocol without a
  gro_receive (ICMP, ICMPv6, ...) and frames that are not IP (ARP, LLDP, 802.3 / LLC
  frames: any EtherType but the VLAN tags, also behind an 802.1Q tag), delivered
  alone (BYPASS_NO_L4_OFFLOAD, BYPASS_NOT_IP);
- an IPv6 flow keeps its flow label: ipv6_gro_receive tells labels apart, the flows
  the pass numbers (gro/flows.py's) do not, so a label that changes stops the pass
  (``LABEL``);
- the receive context of a 6.18 kernel's profile (the two fixed-ID bits of
  ``inet_gro_flush``), one RX queue, no gro_flush_timeout or napi_defer_hard_irqs, no
  ``--poll-acks``, TCP checksums not verified, no TCP fraglist GRO; budget, poll gap, HZ,
  ``gro_ipv4_max_size`` and the RSS key as configured;

Each step names the kernel function it mirrors; the rules shared with the engine are the
engine's own functions (``fast.tcp._not_held_reason`` / ``_end_reason`` /
``_options_differ``, ``fast.ip._ip_pair``, ``fast.state._sfl_flush``).
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.capture.fast import _be16, _be32, _byte, _le64, _u32
from gropcap.decode._fast_kernels import _NOP_NOP_TS, _csum_state, _tcp_options
from gropcap.constants import (
    TCP_FLAG_CWR, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG,
)
from gropcap.gro.config import GroConfig
from gropcap.gro.fast.ip import _ip_pair
from gropcap.gro.fast.napi import _jiffy
from gropcap.gro.fast.state import (
    GCODE_DELIVERED, MAX_GRO_SKBS, OPT_AREA, OPT_WORDS, _sfl_flush, _unlink,
)
from gropcap.gro.fast.tcp import _end_reason, _not_held_reason, _options_differ
from gropcap.gro.reasons import (
    BYPASS_NOT_IP, BYPASS_NO_L4_OFFLOAD, END_BUCKET_FULL, END_CAPTURE, END_POLL,
    END_POLL_OLD, FLUSH_CWR, FLUSH_DF, FLUSH_ECN, FLUSH_FLAGS_FINAL, FLUSH_IP_ID,
    FLUSH_PAYLOAD_LARGER, FLUSH_SEQ, FLUSH_SIZE_LIMIT, FLUSH_TCP_ACK, FLUSH_TCP_DOFF,
    FLUSH_TCP_FLAGS, FLUSH_TCP_OPTIONS, FLUSH_TCP_TS, FLUSH_TCP_WINDOW, FLUSH_TOS,
    FLUSH_TTL, FLUSH_ZERO_PAYLOAD, MERGED, NOT_HELD_LENGTH, NO_HELD_PACKET, ROLE_ALONE,
    ROLE_HEAD, ROLE_MERGED,
)

FLOWS = 1 << 12             # flows a run's tables hold at first (doubled as they fill)
BATCH = 1 << 17             # records a call's buffers hold (a larger batch grows them)

# the held entry of a flow in a model: p's headers and what gro_complete reports
(E_FIRST, E_LAST, E_COUNT, E_PAYLOAD, E_GROLEN, E_LEN, E_MSS, E_LIMIT, E_SEQ, E_ACK,
 E_FLAGS, E_DOFF, E_WINDOW, E_TTL, E_TOS, E_DF, E_ID, E_FIXED, E_INST, E_ORDER, E_POLL,
 E_AGE, E_GCODE, E_N) = range(24)
# a super-packet as it goes up (delivery order)
(S_FIRST, S_LAST, S_COUNT, S_PAYLOAD, S_GSO, S_END, S_POLL, S_FIXED, S_INST, S_GCODE,
 S_FLOW, S_TRIG, S_N) = range(13)
# their names in the engine's BatchResult.segs
SEG_FIELDS = ("first", "last", "count", "payload", "gso", "end", "poll", "fixed", "inst",
              "gcode", "flow", "trig")
# the pass's counters and its state between calls
(C_FLOWS, C_POLLN, C_LAST, C_ARR, C_POLL, C_INST, C_ORDER, C_NSEG, C_STATUS, C_AT,
 C_ROW, C_NEW, C_NPT, C_N) = (0, 1, 2, 3, 4, 5, 7, 9, 11, 12, 13, 14, 15, 16)
# C_NPT: the napi polls that ended in the call (their times in ``pt``, in order);
# C_NEW: the records of the call that started a flow (``r_new``)
# per model: C_INST + m, C_ORDER + m, C_NSEG + m
# the parameters
P_BUDGET, P_GAP, P_HZ, P_MASK, P_LIMIT, P_MTU, P_BUCKETS, P_RSS, P_LIMIT6, P_N = range(10)
# C_STATUS: why the pass stopped before the end of its input (FULL: the flow tables
# are full, FusedRun grows them and goes on; NEED_V6: an IPv6 frame met by the variant
# compiled without IPv6, FusedRun goes on with the other)
DONE, UNCOVERED, FULL, LABEL, NEED_V6 = range(5)
STOPPED = {UNCOVERED: "a frame the single pass does not cover",
           LABEL: "an IPv6 flow label that changed within a flow"}
# the flow table's columns: the key (MAC addresses, IP addresses, EtherType, protocol
# and ports: 7 words) and the flow id with its GRO bucket (id << 8 | bucket), one
# 64-byte row a slot; per flow (``fx``): its IPv6 flow label
K_FLOW, K_N = 7, 8
X_LABEL, X_N = 0, 1
# the decoder's columns the pass gives for each TCP record (rows of c32, c16, c8)
NARROW_U32 = ("payload_len", "ip_tot_len", "tcp_seq", "tcp_ack")
NARROW_U16 = ("tcp_flags", "tcp_mss")
NARROW_U8 = ("l4_csum_state", "tcp_doff")
IDEAL, NAPI = 0, 1
_FINAL = TCP_FLAG_URG | TCP_FLAG_PSH | TCP_FLAG_RST | TCP_FLAG_SYN | TCP_FLAG_FIN


def uncovered(config: GroConfig) -> str | None:
    """Why the single pass does not cover runs of ``config`` (None: it does)."""
    kp = config.kernel
    if not kp.two_bit_fixedid or kp.flush_id_era or not kp.fixed_id_support:
        return f"kernel {'.'.join(map(str, kp.version))}: the pass has 6.18's rules only"
    for why, bad in (("several RX queues", config.queues != 1),
                     ("gro_flush_timeout", config.gro_flush_timeout_ns != 0),
                     ("napi_defer_hard_irqs", config.napi_defer_hard_irqs != 0),
                     ("--poll-acks", config.poll_acks),
                     ("--verify-checksums", config.verify_checksums),
                     ("TCP fraglist GRO", config.tcp_fraglist),
                     ("GRO off on the device", not config.native_gro),
                     ("a hash bucket count other than 8", kp.hash_buckets != 8),
                     ("no VLAN GRO (vlan_gro off)", not config.vlan_gro)):
        if bad:
            return why
    return None


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _cover6(buf, ip, l2, incl, wire, mtu):
    """:func:`_cover` of an IPv6 packet at ``ip``, ``l2`` bytes into the frame (the
    frame's first ``incl`` bytes captured, ``wire`` on the wire)."""
    if incl < l2 + 40 or (_be32(buf, ip) >> 28) != 6:
        return -1
    plen = _be16(buf, ip + 4)
    nh = np.int64(_byte(buf, ip + 6))
    if plen == 0 or l2 + 40 + plen > wire or 40 + plen > mtu:
        return -1
    if nh != 6:
        # UDP, GRE, IPIP and IPv6 have gro_receive handlers (or are tunnels); the
        # extension headers (hop-by-hop, routing, fragment, destination options) and
        # what stops the decoder's walk (AH, mobility, HIP, shim6) are left too
        if nh == 17 or nh == 47 or nh == 4 or nh == 41 or nh == 0 or nh == 43 or \
                nh == 44 or nh == 60 or nh == 51 or nh == 135 or nh == 139 or nh == 140:
            return -1
        return BYPASS_NO_L4_OFFLOAD
    if incl < l2 + 60:
        return -1
    hl = np.int64(_byte(buf, ip + 52) >> 4) * 4
    if hl < 20 or l2 + 40 + hl > incl or plen < hl:
        return -1
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _cover(buf, p, incl, wire, mtu):
    """What the pass does with the frame of ``incl`` captured bytes at ``p``: 0 TCP GRO,
    the BYPASS_* code of a frame GRO passes by, -1 a frame it does not cover. Covered:
    frames the decoder reads whole (STATUS_OK): Ethernet / IPv4 without options / TCP,
    not a fragment, the header checksum valid, no RF bit, the IP length within the
    frame and at most ``mtu``; IPv4 of a protocol without a gro_receive
    (inet_gro_receive: BYPASS_NO_L4_OFFLOAD) and frames of an EtherType without a
    packet_offload that the decoder does not read on (ARP, LLDP, 802.3 frames, ...;
    dev_gro_receive: BYPASS_NOT_IP). IPv6 the same way: no extension header, the
    payload length within the frame and not 0 (a jumbogram, BIG TCP), the packet at
    most ``mtu``; a next header without a gro_receive (ICMPv6, ...: ipv6_gro_receive's
    BYPASS_NO_L4_OFFLOAD) goes by. Either behind one 802.1Q tag (vlan_gro_receive;
    not 802.1ad or 0x9100, not two tags)."""
    if incl < 14:
        return -1
    et = _be16(buf, p + 12)
    l2 = 14
    if et == 0x8100:
        if incl < 18:
            return -1
        et = _be16(buf, p + 16)
        l2 = 18
        if et == 0x8100:
            return -1
    if et == 0x86DD:
        return _cover6(buf, p + l2, l2, incl, wire, mtu)
    if et != 0x0800:
        # the decoder's STATUS_NOT_IP (ARP, LLDP, 802.3 / LLC frames, ...): every
        # EtherType but the VLAN tags, which it reads further
        if et == 0x8100 or et == 0x88A8 or et == 0x9100:
            return -1
        return BYPASS_NOT_IP
    ip = p + l2
    if incl < l2 + 20 or _byte(buf, ip) != 0x45:
        return -1
    proto = np.int64(_byte(buf, ip + 9))
    tot = _be16(buf, ip + 2)
    if (_be16(buf, ip + 6) & 0xBFFF) != 0 or tot < 20 or l2 + tot > wire or tot > mtu:
        return -1
    if proto != 6:
        # UDP, GRE, IPIP and SIT have gro_receive handlers (or are tunnels)
        if proto == 17 or proto == 47 or proto == 4 or proto == 41:
            return -1
        return BYPASS_NO_L4_OFFLOAD
    if incl < l2 + 40:
        return -1
    hl = np.int64(_byte(buf, ip + 32) >> 4) * 4
    if hl < 20 or l2 + 20 + hl > incl or tot < 20 + hl:
        return -1
    s = np.int64(0)
    for w in range(5):
        s += _be32(buf, ip + 4 * w)
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return 0 if s == 0xFFFF else -1


@numba.njit(cache=True, nogil=True, _nrt=False)
def probe(buf, pos, end, be, mtu, upto):
    """The records of the pcap body ``buf[pos:end]`` that start before ``upto``, read
    for what the pass covers: ``(position, True)`` after the last of them (``end`` when
    the body is done), or ``(position, False)`` of the first it does not cover (a frame
    :func:`_cover` refuses, a record cut by the end of the file)."""
    while pos < upto and end - pos >= 16:
        incl = _u32(buf, pos + 8, be)
        p = pos + 16
        if p + incl > end or _cover(buf, p, incl, max(_u32(buf, pos + 12, be), incl),
                                    mtu) < 0:
            return pos, False
        pos = p + incl
    return pos, pos >= upto or pos == end


def uncovered_at(buf, be: bool, mtu: int, window: int = 1 << 26,
                 limit: int | None = None) -> int:
    """The byte position of the first record of a mapped pcap file (``buf``) the pass
    does not cover, -1 when it covers them all (``limit``: all that start before that
    byte): what a run asks before it starts. The file is read ``window`` bytes at a
    time, its pages dropped after each (a probe of a large capture does not keep it
    resident)."""
    from gropcap.arrays import drop_pages
    pos = 24
    end = len(buf) if limit is None else min(len(buf), limit)
    while True:
        pos, ok = probe(buf, pos, len(buf), be, mtu, min(pos + window, end))
        drop_pages(buf)
        if not ok:
            return int(pos)
        if pos >= end:
            return -1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _slot(k0, k1, k2, k3, k4, k5, k6, slots):
    """A flow key's first slot in an open-addressing table of ``slots`` (a power of 2)."""
    h = np.uint64(k0 ^ k1 * 31 ^ k2 * 1000003 ^ k3 * 0x9E3779B1 ^ k4 * 0x85EBCA77
                  ^ k5 * 0xC2B2AE3D ^ k6 * 0x27D4EB2F)
    h ^= h >> np.uint64(29)
    return np.int64(h & np.uint64(slots - 1))


@numba.njit(cache=True, nogil=True)
def _rehash(old, new):
    """The flows of key table ``old`` into the larger ``new``."""
    slots = new.shape[0]
    for x in range(old.shape[0]):
        if old[x, 0] != -1:
            slot = _slot(old[x, 0], old[x, 1], old[x, 2], old[x, 3], old[x, 4],
                         old[x, 5], old[x, 6], slots)
            while new[slot, 0] != -1:
                slot = (slot + 1) & (slots - 1)
            for w in range(old.shape[1]):       # (no slice copy: numba would compile
                new[slot, w] = old[x, w]        # its shape-error message)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _emit(seg, ctr, m, first, last, count, payload, gso, end, poll, fixed, inst, gcode,
          flow, trig):
    s = ctr[C_NSEG + m]
    seg[m, s, S_FIRST] = first
    seg[m, s, S_LAST] = last
    seg[m, s, S_COUNT] = count
    seg[m, s, S_PAYLOAD] = payload
    seg[m, s, S_GSO] = gso
    seg[m, s, S_END] = end
    seg[m, s, S_POLL] = poll
    seg[m, s, S_FIXED] = fixed
    seg[m, s, S_INST] = inst
    seg[m, s, S_GCODE] = gcode
    seg[m, s, S_FLOW] = flow
    seg[m, s, S_TRIG] = trig        # the row whose receive sent it up, -1: a flush
    ctr[C_NSEG + m] = s + 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _complete(ent, seg, ctr, m, k, end, poll, trig):
    """gro_complete: the held entry of flow k goes up (count 1: gso_size 0)."""
    count = ent[m, k, E_COUNT]
    _emit(seg, ctr, m, ent[m, k, E_FIRST], ent[m, k, E_LAST], count, ent[m, k, E_PAYLOAD],
          ent[m, k, E_MSS] if count > 1 else 0, end, poll, ent[m, k, E_FIXED],
          ent[m, k, E_INST], ent[m, k, E_GCODE], k, trig)
    ent[m, k, E_FIRST] = -1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _flush(ent, seg, ctr, tbl, tcnt, old_only, jf):
    """__gro_flush of the napi model's buckets in index order, oldest entry first; a
    partial flush (napi_gro_flush(napi, true)) stops a bucket's walk at its first entry
    held in the current jiffy (END_POLL_OLD, else END_POLL)."""
    end = END_POLL_OLD if old_only else END_POLL
    poll = ctr[C_POLL]
    for b in range(tcnt.shape[1]):
        while tcnt[0, b] > 0:
            k = tbl[0, b, 0]
            if old_only and ent[NAPI, k, E_AGE] == jf:
                break
            _unlink(tbl, tcnt, 0, b, k)
            _complete(ent, seg, ctr, NAPI, k, end, poll, -1)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _poll_end(ent, seg, ctr, tbl, tcnt, P, pt):
    """The end of the napi model's current poll (its time, the last arrival, to
    ``pt``). A full budget: __napi_poll flushes (everything when HZ < 1000, else what
    was held before this jiffy) and polls again at once; fewer packets:
    napi_complete_done with no gro_flush_timeout flushes all."""
    pt[ctr[C_NPT]] = ctr[C_LAST]
    ctr[C_NPT] += 1
    if ctr[C_POLLN] < P[P_BUDGET]:
        _flush(ent, seg, ctr, tbl, tcnt, False, 0)
        return
    jf = _jiffy(ctr[C_LAST], P[P_HZ])
    if P[P_HZ] < 1000:
        _flush(ent, seg, ctr, tbl, tcnt, False, jf)
        return
    # the poll's own entries were held in its jiffy (dev_gro_receive: p->age = jiffies)
    for b in range(tcnt.shape[1]):
        for x in range(tcnt[0, b]):
            k = tbl[0, b, x]
            if ent[NAPI, k, E_POLL] == ctr[C_POLL]:
                ent[NAPI, k, E_AGE] = jf
    _flush(ent, seg, ctr, tbl, tcnt, True, jf)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _pair(ent, eopt, m, k, fl, doff, win, ack, popt, polen, ipv6, ttl, tos, df, ipid, tlen,
          seq, mask):
    """tcp_gro_receive's flush items for a packet against the held entry of flow k in
    model m, in kernel order (fast.tcp._pair_checks for one IP header, 6.18): the
    reason of the first that holds, 0 when the merge may go on to skb_gro_receive.
    Updates the entry's fixed-ID bit as the kernel does whatever else flushes (IPv4)."""
    count = ent[m, k, E_COUNT]
    reason = 0
    if (fl & TCP_FLAG_CWR) != 0:
        reason = FLUSH_CWR
    if reason == 0:
        diff = (fl ^ ent[m, k, E_FLAGS]) & ~mask
        if (diff & (TCP_FLAG_SYN | TCP_FLAG_RST | TCP_FLAG_URG)) != 0:
            reason = FLUSH_FLAGS_FINAL
        elif diff != 0:
            reason = FLUSH_TCP_FLAGS
        elif doff != ent[m, k, E_DOFF]:
            reason = FLUSH_TCP_DOFF
        elif win != ent[m, k, E_WINDOW]:
            reason = FLUSH_TCP_WINDOW
    if reason == 0 and ack != ent[m, k, E_ACK]:
        reason = FLUSH_TCP_ACK
    if reason == 0:
        same = (polen[0] & 0xFF) == np.int64(eopt[m, k, OPT_WORDS] & np.uint64(0xFF))
        for w in range(OPT_WORDS):
            same = same and popt[0, w] == eopt[m, k, w]
        if not same:
            reason = FLUSH_TCP_OPTIONS if _options_differ(0, k, popt, polen, eopt[m]) \
                else FLUSH_TCP_TS
    # gro_receive_network_flush -> inet_gro_flush (6.18): TTL, TOS, DF, then the ID,
    # incrementing by count unless the flow's fixed-ID bit is set (at its second frame);
    # ipv6_gro_flush: traffic class, hop limit
    r_id = _ip_pair(6 if ipv6 else 4, ttl, tos, df, ent[m, k, E_TTL], ent[m, k, E_TOS],
                    ent[m, k, E_DF], True, FLUSH_TTL, FLUSH_TOS, FLUSH_ECN, FLUSH_DF)
    if r_id == 0 and not ipv6:
        off = (ipid - ent[m, k, E_ID]) & 0xFFFF
        if count == 1 and off == 0:
            ent[m, k, E_FIXED] |= 1
        if off != ((count * (1 - (ent[m, k, E_FIXED] & 1))) & 0xFFFF):
            r_id = FLUSH_IP_ID
    if reason == 0:
        reason = r_id
    if reason != 0:
        return reason
    # tcp_gro_receive: (len - 1) >= mss, unsigned, then th2->seq + skb_gro_len(p)
    if tlen == 0:
        return FLUSH_ZERO_PAYLOAD
    if tlen > ent[m, k, E_MSS]:
        return FLUSH_PAYLOAD_LARGER
    if ((ent[m, k, E_SEQ] + ent[m, k, E_GROLEN]) & 0xFFFFFFFF) != seq:
        return FLUSH_SEQ
    return 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _record(V6, buf, p, incl, wire, ts, bypass, n, row0, P, rss, keys, fx, ent, eopt, tbl,
            tcnt, ctr, r_flow, r_reason, r_inst, r_poll, seg, popt, polen, pt, c32, c16, c8,
            r_new):
    """One covered record (``bypass``: :func:`_cover`'s code) through both models, its
    verdicts and columns at index ``n``: DONE, or the status the pass stops at it with
    (FULL, LABEL). ``V6``: a constant, the record an IPv6 one: :func:`fused_pass`
    inlines this twice, so that the IPv4 records' code holds nothing of IPv6's (one copy
    for both ran 12% more instructions a record, spilled registers among them). (At most
    30 arguments: CPython compiles a call of more as ``f(*args)``, which numba does not
    inline.)"""
    mask = P[P_MASK]
    budget = P[P_BUDGET]
    gap = P[P_GAP]
    nb = P[P_BUCKETS] - 1
    slots = keys.shape[0]
    end = len(buf)
    # vlan_gro_receive: one 802.1Q tag (_cover), its TCI part of the flow key
    et = _be16(buf, p + 12)
    tagged = et == 0x8100
    tci = np.int64(0)
    l3 = et
    l2 = 14
    if tagged:
        tci = _be16(buf, p + 14)
        l3 = _be16(buf, p + 16)
        l2 = 18
    ip = p + l2
    ipv4 = l3 == 0x0800
    ipv6 = V6
    ihl = 40 if ipv6 else 20
    th = ip + ihl
    tot = _be16(buf, ip + 2) if ipv4 else \
        40 + _be16(buf, ip + 4) if ipv6 else np.int64(0)
    proto = np.int64(_byte(buf, ip + 9)) if ipv4 else \
        np.int64(_byte(buf, ip + 6)) if ipv6 else np.int64(0)
    hl = np.int64(_byte(buf, th + 12) >> 4) * 4 if bypass == 0 else np.int64(0)
    # --- the flow: MAC header (dev_gro_receive's same_flow), addresses
    # (inet/ipv6_gro_receive), ports (tcp_gro_lookup), the EtherType and IP
    # protocol (the flow key of gro/flows.py): an open-addressing table
    k0 = (_be32(buf, p) << 16) | _be16(buf, p + 4)
    k1 = (_be32(buf, p + 6) << 16) | _be16(buf, p + 10)
    k3et = et
    if tagged:
        # (gro/flows.py: the outer EtherType and the TCI; the IP version from the
        # inner type, no other inner type)
        k0 |= np.int64(0x8100) << 48
        k1 |= tci << 48
        k3et = l3 if ipv4 or ipv6 else 0
    k4 = k5 = k6 = np.int64(0)
    if ipv6:
        k2 = (_be32(buf, ip + 8) << 32) | _be32(buf, ip + 12)
        k4 = (_be32(buf, ip + 16) << 32) | _be32(buf, ip + 20)
        k5 = (_be32(buf, ip + 24) << 32) | _be32(buf, ip + 28)
        k6 = (_be32(buf, ip + 32) << 32) | _be32(buf, ip + 36)
    else:
        k2 = (_be32(buf, ip + 12) << 32) | _be32(buf, ip + 16) if ipv4 \
            else np.int64(0)
    k3 = (k3et << 40) | (proto << 32) | (_be32(buf, th) if bypass == 0 else 0)
    slot = _slot(k0, k1, k2, k3, k4, k5, k6, slots)
    # (k3 holds the EtherType: the three words past it differ only between IPv6
    # keys, and are 0 in every other)
    while keys[slot, 0] != -1 and (keys[slot, 0] != k0 or keys[slot, 1] != k1 or
                                   keys[slot, 2] != k2 or keys[slot, 3] != k3 or
                                   (ipv6 and (keys[slot, 4] != k4 or
                                              keys[slot, 5] != k5 or
                                              keys[slot, 6] != k6))):
        slot = (slot + 1) & (slots - 1)
    # ipv6_gro_receive: a packet of another flow label is not the same flow; the
    # flows of gro/flows.py (one row each here) have no label: such a flow stops
    # the pass, the engine tells them apart
    label = _be32(buf, ip) & 0xFFFFF if ipv6 and bypass == 0 else np.int64(0)
    if keys[slot, 0] == -1:
        if ctr[C_FLOWS] == ent.shape[1]:
            return FULL
        r_new[ctr[C_NEW]] = n
        ctr[C_NEW] += 1
        keys[slot, 0] = k0
        keys[slot, 1] = k1
        keys[slot, 2] = k2
        keys[slot, 3] = k3
        keys[slot, 4] = k4
        keys[slot, 5] = k5
        keys[slot, 6] = k6
        # the driver's RSS hash (Toeplitz over the addresses and ports, by byte
        # tables): the GRO bucket, skb_get_hash_raw & (GRO_HASH_BUCKETS - 1)
        hv = np.uint32(0)
        if P[P_RSS] and bypass == 0:
            if ipv6:
                for j in range(36):
                    hv ^= rss[j, _byte(buf, ip + 8 + j if j < 32 else th + j - 32)]
            else:
                for j in range(12):
                    hv ^= rss[j, _byte(buf, ip + 12 + j if j < 8 else th + j - 8)]
        k = ctr[C_FLOWS]
        keys[slot, K_FLOW] = (k << 8) | (np.int64(hv) & nb)
        fx[k, X_LABEL] = label
        ctr[C_FLOWS] += 1
    kb = keys[slot, K_FLOW]
    k = kb >> 8
    b = kb & 0xFF
    if ipv6 and fx[k, X_LABEL] != label:
        return LABEL
    row = row0 + n
    # --- the napi model's poll: a packet joins the current one while it arrives
    # within the gap of the one before and the budget is not spent (__napi_poll)
    arr = max(ctr[C_ARR], ts)
    ctr[C_ARR] = arr
    if ctr[C_POLLN] == 0 or ctr[C_POLLN] >= budget or arr > ctr[C_LAST] + gap:
        if ctr[C_POLLN] > 0:
            _poll_end(ent, seg, ctr, tbl, tcnt, P, pt)
        ctr[C_POLL] += 1
        ctr[C_POLLN] = 0
    ctr[C_POLLN] += 1
    ctr[C_LAST] = arr
    r_flow[n] = k
    r_poll[n] = ctr[C_POLL]
    if bypass != 0:
        # GRO_NORMAL at once in both models, held entries untouched
        payload = tot - ihl if ipv4 or ipv6 else 0
        c32[1, n] = tot                     # (the rest: run/single.py decodes it)
        for m in range(2):
            poll = ctr[C_POLL] if m == NAPI else -1
            r_reason[m, n] = bypass
            inst = ctr[C_INST + m]
            ctr[C_INST + m] = inst + 1
            r_inst[m, n] = inst
            _emit(seg, ctr, m, row, row, 1, payload, 0, bypass, poll, 0, inst,
                  GCODE_DELIVERED, k, row)
        return DONE
    # --- the headers GRO reads (IPv6: traffic class, hop limit; no ID, no DF)
    if ipv6:
        tos = np.int64((_be32(buf, ip) >> 20) & 0xFF)
        ipid = np.int64(0)
        df = np.int64(0)
        ttl = np.int64(_byte(buf, ip + 7))
    else:
        tos = np.int64(_byte(buf, ip + 1))
        ipid = _be16(buf, ip + 4)
        df = (_be16(buf, ip + 6) >> 14) & 1
        ttl = np.int64(_byte(buf, ip + 8))
    seq = _be32(buf, th + 4)
    ack = _be32(buf, th + 8)
    fl = _be16(buf, th + 12) & 0x1FF
    doff = hl >> 2
    win = _be16(buf, th + 14)
    olen = hl - 20
    for w in range(OPT_WORDS):
        # the option area as engine.Cols.opt holds it: little-endian words, zeros
        # past the options (one load a word where 8 bytes can be read)
        x = 8 * w
        v = np.uint64(0)
        if x < olen:
            q = th + 20 + x
            if q + 8 <= end:
                v = np.uint64(_le64(buf, q))
                if olen - x < 8:
                    v &= (np.uint64(1) << np.uint64(8 * (olen - x))) - np.uint64(1)
            else:
                for j in range(min(8, olen - x)):
                    v |= np.uint64(_byte(buf, q + j)) << np.uint64(8 * j)
        popt[0, w] = v
    polen[0] = olen
    payload = tot - ihl - hl
    tlen = max(wire - l2 - ihl - hl, payload)   # skb_gro_len at TCP, padding included
    # p->len: after the 14-byte MAC header (a VLAN tag stays in skb->data)
    plen = wire - 14
    # inet_gro_receive: IP length != bytes received (u16) is the skb's own flush;
    # ipv6_gro_receive: payload length != bytes received after the header
    gl = wire - l2
    sfl = NOT_HELD_LENGTH if (tot != gl if ipv6 else ((tot ^ gl) & 0xFFFF) != 0) \
        else 0
    # gso.gso_type_for's row: IPv6, CWR
    gcode = (32 if ipv6 else 0) + (16 if (fl & TCP_FLAG_CWR) != 0 else 0)
    # the record's columns as decode._fast_kernels gives them: tcp_mss from options
    # other than the usual NOP NOP TS, l4_csum_state over the whole segment
    c32[0, n] = payload
    c32[1, n] = tot
    c32[2, n] = seq
    c32[3, n] = ack
    c16[0, n] = fl
    c16[1, n] = _tcp_options(buf, th, 20, hl)[0] if hl > 20 and not (
        hl == 32 and _be32(buf, th + 20) == _NOP_NOP_TS) else 0
    if ipv6:
        pseudo = np.int64(6)
        for w in range(8):
            pseudo += _be32(buf, ip + 8 + 4 * w)
    else:
        pseudo = _be32(buf, ip + 12) + _be32(buf, ip + 16) + 6
    c8[0, n] = _csum_state(buf, p, incl, _be16(buf, th + 16), l2 + ihl, tot - ihl,
                           pseudo)
    c8[1, n] = doff
    for m in range(2):
        poll = ctr[C_POLL] if m == NAPI else -1
        deliver = -1
        hold = -1
        end_ = 0
        if ent[m, k, E_FIRST] < 0:
            # tcp_gro_receive with no p: out_check_final with mss 1
            r = sfl if sfl != 0 else _not_held_reason(fl, tlen)
            if r != 0:
                deliver = r
            else:
                hold = NO_HELD_PACKET
        else:
            reason = _pair(ent, eopt, m, k, fl, doff, win, ack, popt, polen, ipv6,
                           ttl, tos, df, ipid, tlen, seq, mask)
            if reason == 0:
                # skb_gro_receive: -E2BIG at gro_ipv4_max_size, or the skb's flush
                if ent[m, k, E_LEN] + tlen >= ent[m, k, E_LIMIT]:
                    reason = FLUSH_SIZE_LIMIT
                elif sfl != 0:
                    reason = _sfl_flush(sfl)
            if reason == 0:
                ent[m, k, E_LAST] = row
                ent[m, k, E_COUNT] += 1
                ent[m, k, E_PAYLOAD] += payload
                ent[m, k, E_GROLEN] += tlen
                ent[m, k, E_LEN] += tlen
                r_reason[m, n] = MERGED
                r_inst[m, n] = ent[m, k, E_INST]
                # out_check_final: FIN, PSH, URG or len < gso_size push p up now
                end_ = _end_reason(fl, tlen, ent[m, k, E_MSS])
            else:
                # not merged: p is completed, the packet delivered or held after it
                end_ = reason
                if sfl != 0 or tlen < 1 or (fl & _FINAL) != 0:
                    deliver = reason
                else:
                    hold = reason
        if end_ != 0:
            if m == NAPI:
                _unlink(tbl, tcnt, 0, b, k)
            _complete(ent, seg, ctr, m, k, end_, poll, row)
        if deliver >= 0:
            # GRO_NORMAL: the packet goes up alone
            r_reason[m, n] = deliver
            inst = ctr[C_INST + m]
            ctr[C_INST + m] = inst + 1
            r_inst[m, n] = inst
            _emit(seg, ctr, m, row, row, 1, payload, 0, deliver, poll, 0, inst,
                  gcode + GCODE_DELIVERED, k, row)
        elif hold >= 0:
            # dev_gro_receive's tail: a new entry, the oldest of a full bucket
            # completed first (gro_flush_oldest)
            r_reason[m, n] = hold
            if m == NAPI:
                if tcnt[0, b] >= MAX_GRO_SKBS:
                    old = tbl[0, b, 0]
                    _unlink(tbl, tcnt, 0, b, old)
                    _complete(ent, seg, ctr, NAPI, old, END_BUCKET_FULL, poll, row)
                tbl[0, b, tcnt[0, b]] = k
                tcnt[0, b] += 1
            inst = ctr[C_INST + m]
            ctr[C_INST + m] = inst + 1
            r_inst[m, n] = inst
            ent[m, k, E_INST] = inst
            ent[m, k, E_FIRST] = row
            ent[m, k, E_LAST] = row
            ent[m, k, E_COUNT] = 1
            ent[m, k, E_PAYLOAD] = payload
            ent[m, k, E_GROLEN] = tlen
            ent[m, k, E_LEN] = plen
            ent[m, k, E_MSS] = tlen
            # netif_get_gro_max_size: p->protocol IPv6, not 0x8100
            ent[m, k, E_LIMIT] = P[P_LIMIT6] if ipv6 and not tagged else P[P_LIMIT]
            ent[m, k, E_SEQ] = seq
            ent[m, k, E_ACK] = ack
            ent[m, k, E_FLAGS] = fl
            ent[m, k, E_DOFF] = doff
            ent[m, k, E_WINDOW] = win
            ent[m, k, E_TTL] = ttl
            ent[m, k, E_TOS] = tos
            ent[m, k, E_DF] = df
            ent[m, k, E_ID] = ipid
            ent[m, k, E_FIXED] = 0
            ent[m, k, E_ORDER] = ctr[C_ORDER + m]
            ctr[C_ORDER + m] += 1
            ent[m, k, E_POLL] = poll
            ent[m, k, E_GCODE] = gcode
            for w in range(OPT_WORDS):
                eopt[m, k, w] = popt[0, w]
            eopt[m, k, OPT_WORDS] = np.uint64((olen & 0xFF) | (min(olen, OPT_AREA) << 8))
    return DONE


# (without numba's reference counting, as the engine's kernels: the decoder's checksum
# and option functions, _unlink, _flush and _options_differ take arrays, and every such
# call counted references with two atomic calls into the runtime, 24% of the pass's time
# under perf; 74-79 ns a record before, 57-59 after)
@numba.njit(cache=True, nogil=True, _nrt=False)
def fused_pass(buf, r_off, r_cap, r_wire, r_ts, at, P, rss, keys, fx, ent, eopt, tbl,
               tcnt, ctr, r_flow, r_reason, r_inst, r_poll, seg, popt, polen, pt, c32, c16,
               c8, r_new, v6):
    """The records of a batch from ``at`` on (``buf[r_off[i]:][:r_cap[i]]``, wire length
    and time: a ``capture.records.RecordBatch``'s arrays) through both models.
    ``ctr[C_STATUS]`` says why it stopped early (``ctr[C_AT]``: the record's index),
    else DONE; ``r_*``: each record's flow, reason, super-packet instance (per model) and
    napi poll; ``seg[m, :ctr[C_NSEG + m]]``: the super-packets that went up, in delivery
    order (the caller takes them and sets the count back to 0). ``c32``, ``c16``, ``c8``:
    each TCP record's columns as the decoder gives them (the ``NARROW_*`` rows; other
    records' are left as they were); ``r_new[:ctr[C_NEW]]``: the records that started a
    flow.

    ``v6``: ``None`` or ``np.bool_(True)``, two compiled variants chosen by its type:
    numba prunes ``v6 is None`` before typing, so the ``None`` variant (what a capture
    without IPv6 compiles) holds no IPv6 code, and stops at an IPv6 frame (NEED_V6).
    The IPv6 copy of :func:`_record` doubled the pass's compile time (11-15 s to
    29-30 s, fresh cache)."""
    n = at                              # the record's index in the r_* outputs
    row0 = ctr[C_ROW] - at
    ctr[C_STATUS] = DONE
    nmax = len(r_off)
    while n < nmax:
        ts = r_ts[n]
        incl = np.int64(r_cap[n])
        wire = max(np.int64(r_wire[n]), incl)
        p = r_off[n]
        bypass = _cover(buf, p, incl, wire, P[P_MTU])
        if bypass < 0:
            ctr[C_STATUS] = UNCOVERED
            ctr[C_AT] = n
            break
        l3 = _be16(buf, p + 12)
        if l3 == 0x8100:
            l3 = _be16(buf, p + 16)
        if l3 == 0x86DD:
            if v6 is None:
                stop = NEED_V6
            else:
                stop = _record(True, buf, p, incl, wire, ts, bypass, n, row0, P, rss,
                               keys, fx, ent, eopt, tbl, tcnt, ctr, r_flow, r_reason,
                               r_inst, r_poll, seg, popt, polen, pt, c32, c16, c8, r_new)
        else:
            stop = _record(False, buf, p, incl, wire, ts, bypass, n, row0, P, rss, keys,
                           fx, ent, eopt, tbl, tcnt, ctr, r_flow, r_reason, r_inst, r_poll,
                           seg, popt, polen, pt, c32, c16, c8, r_new)
        if stop != DONE:
            ctr[C_STATUS] = stop
            ctr[C_AT] = n
            break
        n += 1
    ctr[C_ROW] = row0 + n
    return n


@numba.njit(cache=True, nogil=True)
def finish(ent, seg, ctr, tbl, tcnt, P, pt):
    """The end of the capture: the napi model's last poll ends (and, after a partial
    flush, napi_finish's END_POLL in that poll); the ideal model's held entries go up
    oldest first (END_CAPTURE)."""
    if ctr[C_POLLN] > 0:
        _poll_end(ent, seg, ctr, tbl, tcnt, P, pt)
        _flush(ent, seg, ctr, tbl, tcnt, False, 0)
        ctr[C_POLLN] = 0
    nf = ctr[C_FLOWS]
    order = np.empty(nf, np.int64)
    keys = np.empty(nf, np.int64)
    h = 0
    for k in range(nf):
        if ent[IDEAL, k, E_FIRST] >= 0:
            order[h] = ent[IDEAL, k, E_ORDER]
            keys[h] = k
            h += 1
    for x in np.argsort(order[:h]):
        _complete(ent, seg, ctr, IDEAL, keys[x], END_CAPTURE, -1, -1)


class FusedRun:
    """The pass's state across calls (one receiver run): flow table, held entries,
    counters, and the outputs of the call in progress."""

    def __init__(self, config: GroConfig, batch: int = BATCH, flows: int | None = None):
        from gropcap.gro.rss import toeplitz_table
        kp = config.kernel
        mask = TCP_FLAG_FIN | TCP_FLAG_PSH
        if not kp.cwr_in_flag_word:
            mask |= TCP_FLAG_CWR
        self.P = np.zeros(P_N, np.int64)
        self.P[P_BUDGET] = config.budget
        self.P[P_GAP] = config.poll_gap_ns
        self.P[P_HZ] = config.hz
        self.P[P_MASK] = mask
        self.P[P_LIMIT] = config.max_size(4)
        self.P[P_LIMIT6] = config.max_size(6)
        self.P[P_MTU] = config.mtu or 0xFFFF
        self.P[P_BUCKETS] = kp.hash_buckets
        self.P[P_RSS] = config.rss == "toeplitz"
        self.rss = toeplitz_table(bytes(config.rss_key).ljust(40, b"\0"))
        flows = flows or FLOWS
        self.keys = np.full((2 * flows, K_N), -1, np.int64)
        self.fx = np.zeros((flows, X_N), np.int64)
        self.ent = np.full((2, flows, E_N), -1, np.int64)
        self.eopt = np.zeros((2, flows, OPT_WORDS + 1), np.uint64)
        # the napi model's buckets as the engine's State holds them, one RX queue
        self.tbl = np.full((1, kp.hash_buckets, MAX_GRO_SKBS), -1, np.int64)
        self.tcnt = np.zeros((1, kp.hash_buckets), np.int64)
        self.ctr = np.zeros(C_N, np.int64)
        self.ctr[C_POLL] = -1
        self.batch = batch
        self._outputs(batch)
        # a call's super-packets: at most one per record and model, plus what was held
        self.seg = np.empty((2, batch + flows, S_N), np.int64)
        self.popt = np.zeros((1, OPT_WORDS), np.uint64)
        self.polen = np.zeros(1, np.int64)
        self.v6 = None                  # (fused_pass's variant: np.bool_(True) with IPv6)

    def _outputs(self, batch: int) -> None:
        self.r_flow = np.empty(batch, np.int64)
        self.r_reason = np.empty((2, batch), np.uint8)
        self.r_inst = np.empty((2, batch), np.int64)
        self.r_poll = np.empty(batch, np.int64)
        self.r_new = np.empty(batch, np.int64)
        self.pt = np.empty(batch + 2, np.int64)     # at most one poll ends per record

    def take(self, buf, off, cap, wire, ts):
        """One call over the records of a batch (``buf``, and per record its offset in
        it, captured and wire length, time: a ``capture.records.RecordBatch``'s arrays):
        ``(records, super-packets per model, (c32, c16, c8))``; the arrays but the
        columns are this run's buffers, valid until the next call (``pt[:ctr[C_NPT]]``:
        the times of the napi polls that ended in it; ``r_new[:ctr[C_NEW]]``: the
        records that started a flow); the columns (``NARROW_*``) are the call's own."""
        n = len(off)
        if n > self.batch:
            self.batch = n
            self._outputs(n)
            seg = np.empty((2, n + self.ent.shape[1], S_N), np.int64)
            seg[:, :self.seg.shape[1]] = self.seg
            self.seg = seg
        self.ctr[C_NSEG:C_NSEG + 2] = 0
        self.ctr[C_NPT] = 0
        self.ctr[C_NEW] = 0
        row0 = int(self.ctr[C_ROW])
        cols = (np.empty((len(NARROW_U32), n), np.uint32),
                np.empty((len(NARROW_U16), n), np.uint16),
                np.empty((len(NARROW_U8), n), np.uint8))
        got = 0
        while True:
            fused_pass(buf, off, cap, wire, ts, got, self.P, self.rss, self.keys, self.fx,
                       self.ent, self.eopt, self.tbl, self.tcnt, self.ctr, self.r_flow,
                       self.r_reason, self.r_inst, self.r_poll, self.seg, self.popt,
                       self.polen, self.pt, *cols, self.r_new, self.v6)
            got = int(self.ctr[C_ROW]) - row0
            if self.status == NEED_V6:
                self.v6 = np.bool_(True)        # (from here on: IPv6 is in the capture)
                continue
            if self.status != FULL:
                break
            self._grow()
        return got, [self.seg[m, :self.ctr[C_NSEG + m]] for m in range(2)], cols

    def _grow(self) -> None:
        """Twice the flows: the key table rehashed, the held entries and the call's
        super-packet buffer (which holds at most one per record and held entry) kept."""
        flows = 2 * self.ent.shape[1]
        keys = np.full((2 * flows, K_N), -1, np.int64)
        _rehash(self.keys, keys)
        self.keys = keys
        self.fx = np.concatenate([self.fx, np.zeros_like(self.fx)])
        self.ent = np.concatenate([self.ent, np.full_like(self.ent, -1)], axis=1)
        self.eopt = np.concatenate([self.eopt, np.zeros_like(self.eopt)], axis=1)
        seg = np.empty((2, self.batch + flows, S_N), np.int64)
        seg[:, :self.seg.shape[1]] = self.seg
        self.seg = seg

    def next_run(self) -> None:
        """Fresh receivers for the next receiver run, after :meth:`finish`
        (``engine.next_run``): nothing held, empty flow and GRO tables, no arrival time
        yet; the numbering of rows, flows, super-packets and polls goes on (a flow of
        the new run gets a new id even where an earlier run had its key)."""
        self.keys[:] = -1
        self.fx[:] = 0
        self.ent[:] = -1
        self.eopt[:] = 0
        self.tbl[:] = -1
        self.tcnt[:] = 0
        self.ctr[C_POLLN] = 0
        self.ctr[C_LAST] = 0
        self.ctr[C_ARR] = 0

    def finish(self):
        """The super-packets still held at the end of the capture, per model."""
        self.ctr[C_NSEG:C_NSEG + 2] = 0
        self.ctr[C_NPT] = 0
        finish(self.ent, self.seg, self.ctr, self.tbl, self.tcnt, self.P, self.pt)
        return [self.seg[m, :self.ctr[C_NSEG + m]] for m in range(2)]

    @property
    def status(self) -> int:
        return int(self.ctr[C_STATUS])


_LE = (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")      # pcap magic, little-endian (us, ns)
_BE = (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")


def pcap_head(head: bytes):
    """(big-endian, ns per fraction unit, link type) of a pcap file header, else None."""
    magic = head[:4]
    if len(head) < 24 or magic not in _LE + _BE:
        return None
    le = magic in _LE
    nano = magic in (_LE[1], _BE[1])
    return not le, 1 if nano else 1000, \
        int.from_bytes(head[20:24], "little" if le else "big") & 0x0FFFFFFF


def pcap_body(path: str):
    """(mapped bytes, big-endian, ns per fraction unit) of a pcap file of Ethernet
    frames, or a string saying why the pass does not read it."""
    with open(path, "rb") as fh:
        got = pcap_head(fh.read(24))
    if got is None:
        return "not a pcap file"
    if got[2] != 1:
        return f"link type {got[2]}, not Ethernet"
    return np.memmap(path, np.uint8, mode="r"), got[0], got[1]


def run_file(path: str, config: GroConfig | None = None, batch: int = BATCH):
    """Both models over one pcap file: ``{"ideal": GroResult, "napi": GroResult}``, or
    a string saying why the pass does not cover the file (the engine's work then);
    ``batch`` records a call."""
    from gropcap.gro.gso import gso_type_for
    from gropcap.gro.result import GroResult
    config = config or GroConfig()
    why = uncovered(config)
    if why:
        return why
    body = pcap_body(path)
    if isinstance(body, str):
        return body
    from gropcap.capture.scan import iter_scan_batches
    run = FusedRun(config, batch)
    rec: dict[str, list] = {"flow": [], "poll": [], "reason0": [], "reason1": [],
                            "inst0": [], "inst1": []}
    segs: list[list] = [[], []]
    syn_mtu = max_tot = 0
    for _, b in iter_scan_batches(path, batch_records=batch, digest=False):
        n, got, (c32, c16, _) = run.take(b.buf, b.offset, b.cap_len, b.wire_len, b.ts_ns)
        if run.status != DONE:
            at = int(b.file_offset[int(run.ctr[C_AT])])
            return f"{STOPPED[run.status]} at byte {at}"
        rec["flow"].append(run.r_flow[:n].copy())
        rec["poll"].append(run.r_poll[:n].copy())
        for m in range(2):
            rec[f"reason{m}"].append(run.r_reason[m, :n].copy())
            rec[f"inst{m}"].append(run.r_inst[m, :n].copy())
            segs[m].append(got[m].copy())
        # what the MTU inference reads (gro/mtu.py): the largest IP length, SYNs' MSS
        tcp = run.r_reason[0, :n] != BYPASS_NOT_IP
        tcp &= run.r_reason[0, :n] != BYPASS_NO_L4_OFFLOAD
        if n:
            max_tot = max(max_tot, int(c32[1, :n].max()))
        syn = tcp & ((c16[0, :n] & TCP_FLAG_SYN) != 0) & (c16[1, :n] > 0)
        if syn.any():
            # (IPv6: the EtherType's first byte 0x86)
            v6 = b.buf[b.offset[:n][syn] + 12] == 0x86
            syn_mtu = max(syn_mtu, int((c16[1, :n][syn] + np.where(v6, 60, 40)).max()))
    if config.mtu is None:
        # the MTU a run infers (gro/mtu.py) from these frames: SYNs' MSS + 40 (IPv4) or
        # + 60 (IPv6), else the Ethernet default (no jumbo or loopback rule applies to
        # frames of 1500 or less)
        mtu = syn_mtu if syn_mtu else 1500
        if max_tot > mtu:
            return (f"a frame of {max_tot} IP bytes above the inferred "
                    f"MTU ({mtu}): captured coalesced")
    for m, s in enumerate(run.finish()):
        segs[m].append(s.copy())
    # the gso_type of a TCP super-packet by its IP version and CWR code and its
    # fixed-ID bits (engine._gso_table's rows of this traffic)
    gtable = np.zeros((GCODE_DELIVERED, 4), np.uint32)
    for v6 in (0, 32):
        for cwr in (0, 16):
            for fx in range(4):
                gtable[v6 + cwr, fx] = gso_type_for(config.kernel.version, 6 if v6 else 4,
                                                    ip_fixedid=fx, cwr=bool(cwr))
    out = {}
    flow = np.concatenate(rec["flow"])
    for m, model in enumerate(("ideal", "napi")):
        s = np.concatenate(segs[m])
        inst = np.concatenate(rec[f"inst{m}"])
        seg_of_inst = np.empty(len(s), np.int64)
        seg_of_inst[s[:, S_INST]] = np.arange(len(s))
        gro_seg = seg_of_inst[inst]
        count = s[:, S_COUNT]
        role = np.full(len(inst), ROLE_MERGED, np.uint8)
        role[s[count > 1, S_FIRST]] = ROLE_HEAD
        role[s[count == 1, S_FIRST]] = ROLE_ALONE
        gso_type = np.zeros(len(s), np.uint32)
        multi = count > 1
        gso_type[multi] = gtable[s[multi, S_GCODE], s[multi, S_FIXED] & 3]
        poll = np.concatenate(rec["poll"]) if m == NAPI else np.full(len(inst), -1)
        out[model] = GroResult(
            flow_id=flow, gro_seg=gro_seg, gro_role=role,
            reason=np.concatenate(rec[f"reason{m}"]), rx_queue=np.zeros(len(inst)),
            poll_id=poll, seg_flow_id=s[:, S_FLOW], seg_first_packet=s[:, S_FIRST],
            seg_last_packet=s[:, S_LAST], seg_count=count, seg_payload_len=s[:, S_PAYLOAD],
            seg_gso_size=s[:, S_GSO], seg_gso_type=gso_type, seg_end_reason=s[:, S_END],
            seg_rx_queue=np.zeros(len(s)), seg_poll_id=s[:, S_POLL])
    return out


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the pass's kernels on a batch of two
    records (a TCP segment and an ARP frame) with the argument types of a run (a
    read-only buffer, a RecordBatch's arrays): the call, a growth of the flow tables,
    the end, the probe (over the same bytes as a pcap body)."""
    import struct
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0x4000, 64, 6, 0,
                               bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])))
    s = sum(struct.unpack("!10H", bytes(ip)))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    ip[10:12] = struct.pack("!H", 0xFFFF - s)
    tcp = struct.pack("!HHIIBBHHH", 1000, 80, 1, 1, 0x50, 0x10, 512, 0, 0)
    frames = [bytes(12) + b"\x08\x00" + bytes(ip) + tcp, bytes(12) + b"\x08\x06" + bytes(28)]
    body = b"".join(struct.pack("<IIII", 0, 0, len(f), len(f)) + f for f in frames)
    buf = np.frombuffer(body, np.uint8)          # read-only, as a mapped capture is
    # a scan batch's arrays (capture.records.RecordBatch's types)
    cap = np.array([len(f) for f in frames], np.uint32)
    off = np.array([16, 32 + cap[0]], np.int64)
    run = FusedRun(GroConfig(), 4, 1)
    run.take(buf, off, cap, cap.copy(), np.zeros(2, np.int64))
    run.finish()
    probe(buf, 0, len(buf), False, 0xFFFF, len(buf))


# --- on-disk cache freshness: numba keys a cached kernel on this file only, but the pass
# inlines the engine's rule functions and the readers of other modules, with their
# constants: when one of those changed, the cached machine code is dropped
# (gropcap.numba_cache)
def stamp_modules() -> tuple:
    """Every module whose source the pass's cached machine code depends on."""
    from gropcap.capture import fast as capture_fast
    from gropcap.decode import _fast_kernels, options
    from gropcap.gro import config, fast
    return tuple(fast.STAMP_MODULES) + (capture_fast, _fast_kernels, options, config)


def _refresh_cache() -> None:
    import sys
    from gropcap import numba_cache
    mods = stamp_modules()
    here = numba_cache.dispatchers_of(sys.modules[__name__])
    numba_cache.refresh(here, "gro_fused.deps", numba_cache.stamp(
        [m.__file__ for m in mods], " ".join(m.__name__ for m in mods)))
    numba_cache.light_loads(here)


_refresh_cache()
