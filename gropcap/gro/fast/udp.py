"""udp_gro_receive_segment in the numba GRO engine (net/ipv4/udp_offload.c).

Layer: gro/fast, above ``state`` and ``ip``; ``dev.py`` calls :func:`_udp_receive` for a
packet whose ``Cols.udp`` is set.

Which packets get here (socket UDP_GRO, rx-udp-gro-forwarding, fraglist; the outer UDP
datagram of a UDP tunnel that has no tunnel socket), and their lengths, keys and
gso_type codes, is decided per packet by gro/_udp_prepare.py; the reference is
reference.GroNode.udp_gro_receive_segment. UDP tunnels with a socket (vxlan, geneve,
fou, gue gro_receive) reach tcp_gro_receive like a native tunnel.

:func:`_udp_receive` is a call, not inlined: ``napi.run``'s one inlined body (and its
compile time) stays the TCP one; the call costs nothing measurable next to the
preparation (benchmarks/bench_udp.py).
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.gro.fast.ip import _ip_id_checks, _ip_pair
from gropcap.gro.fast.state import ERA_FLUSH_ID, FLIST_MAX_LEN, UDP_FRAGLIST, _sfl_flush
from gropcap.gro.reasons import (
    END_SHORT_SEGMENT, END_UDP_MAX_SEGS, FLUSH_DF, FLUSH_ECN, FLUSH_OUTER_DF,
    FLUSH_OUTER_ECN, FLUSH_OUTER_TOS, FLUSH_OUTER_TTL, FLUSH_SIZE_LIMIT, FLUSH_TOS,
    FLUSH_TTL, FLUSH_UDP_LARGER, MERGED, NO_HELD_PACKET,
)


UDP_GRO_CNT_MAX = 64      # include/net/udp.h: segments per UDP GRO packet


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _udp_l3_checks(i, k, c, cfg, st):
    """gro_receive_network_flush as udp_gro_receive_segment runs it (v6.9+): before
    v6.10 the IP loop's ``NAPI_GRO_CB(p)->flush`` (TTL/TOS/DF, IPv6 TC / hop limit), then
    the flush_id rule; from v6.10 inet_gro_flush / ipv6_gro_flush per header. First
    reason or 0 (reference.GroNode._l3_pair_flush)."""
    held = st.ent[k]
    if cfg.era <= ERA_FLUSH_ID:
        if c.out_v[i] != 0:
            r = _ip_pair(c.out_v[i], c.out_ttl[i], c.out_tos[i], c.out_df[i],
                         held.e_out_ttl, held.e_out_tos, held.e_out_df, cfg.hop_flush,
                         FLUSH_OUTER_TTL, FLUSH_OUTER_TOS, FLUSH_OUTER_ECN, FLUSH_OUTER_DF)
            if r != 0:
                return r
        r = _ip_pair(c.in_v[i], c.in_ttl[i], c.in_tos[i], c.in_df[i], held.e_in_ttl,
                     held.e_in_tos, held.e_in_df, cfg.hop_flush, FLUSH_TTL, FLUSH_TOS,
                     FLUSH_ECN, FLUSH_DF)
        if r != 0:
            return r
    return _ip_id_checks(i, k, c, cfg, st, held.e_count)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _udp_receive(i, k, c, cfg, st, out):
    """udp_gro_receive_segment for packet i (UDP checksum and length already passed:
    a zero checksum or ``uh->len`` != the bytes received was a bypass code). Returns
    ``(deliver, hold, end)`` as :func:`dev._receive` acts on them; a merge is done here.

    No p: held (or delivered with a lower layer's flush). With p: the L3 checks (v6.9+),
    then a datagram longer than p's first completes p and starts a new head; otherwise
    skb_gro_receive (gro_max_size, the skb's own flush) or, fraglist,
    skb_gro_receive_list (p->len + skb->len >= 65536, whole lengths); after a merge p
    completes when this datagram was shorter than the first or p reached
    UDP_GRO_CNT_MAX segments."""
    held = st.ent[k]
    deliver = -1
    hold = -1
    end = 0
    sfl = c.sfl_out[i] if c.sfl_out[i] != 0 else c.sfl_in[i]
    if sfl == 0:
        sfl = c.sfl_fl[i]
    ulen = np.int64(c.udp_len[i])
    if held.e_first < 0:
        if sfl != 0:
            deliver = np.int64(sfl)
        else:
            hold = NO_HELD_PACKET
            held.e_udp_len = ulen
        return deliver, hold, end
    flush = _udp_l3_checks(i, k, c, cfg, st) if cfg.udp_l3 else 0
    r = 0
    merge_refused = False          # skb_gro_receive / skb_gro_receive_list said -E2BIG
    if ulen > np.int64(held.e_udp_len):
        r = FLUSH_UDP_LARGER
    elif flush != 0:
        r = flush
    else:
        merge_refused = True
        if c.udp[i] == UDP_FRAGLIST:
            if held.e_len + c.plen[i] >= FLIST_MAX_LEN:
                r = FLUSH_SIZE_LIMIT
        elif held.e_len + c.tlen[i] >= held.e_limit:
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
            held.e_udp_len = ulen
        return deliver, hold, end
    ln = c.tlen[i]
    held.e_last = c.row[i]
    held.e_count += 1
    held.e_payload += c.payload[i]
    held.e_grolen += ln
    held.e_len += ln
    out.reason[i] = MERGED
    out.inst[i] = held.e_inst
    if ulen != np.int64(held.e_udp_len):
        end = END_SHORT_SEGMENT
    elif held.e_count >= UDP_GRO_CNT_MAX:
        end = END_UDP_MAX_SEGS
    return deliver, hold, end
