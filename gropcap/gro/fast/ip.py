"""The L3 pair rules of the numba GRO engine: inet_gro_receive / ipv6_gro_receive's
p->flush (up to v6.9) and inet_gro_flush / ipv6_gro_flush (v6.10+), per IP header, outer
first; the IP ID rule of every era (net/ipv4/af_inet.c, net/ipv6/ip6_offload.c,
include/net/gro.h).

Layer: gro/fast, above ``state``. Called by tcp_gro_receive's checks (``tcp.py``) and
udp_gro_receive_segment's (``udp.py``); a packet against the held entry of its key.
"""

from __future__ import annotations

import numba

from gropcap.gro.fast.state import ERA_FLUSH_ID, ERA_INNER_ID, ERA_ONE_BIT
from gropcap.gro.reasons import (
    FLUSH_DF, FLUSH_ECN, FLUSH_IP_ID, FLUSH_OUTER_DF, FLUSH_OUTER_ECN, FLUSH_OUTER_IP_ID,
    FLUSH_OUTER_TOS, FLUSH_OUTER_TTL, FLUSH_TOS, FLUSH_TTL,
)


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


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ip_id_checks(i, k, c, cfg, st, count):
    """The IP ID rule of packet i against held entry k (``count``: p's segments), and
    from 6.10 every L3 pair check (inet_gro_flush / ipv6_gro_flush per header, outer
    first: gro_receive_network_flush): the reason of the first item that holds, 0 none.
    Shared by tcp_gro_receive (:func:`tcp._pair_checks`) and udp_gro_receive_segment
    (:func:`udp._udp_l3_checks`); mutates the entry's fixed-ID state as the kernel does."""
    held = st.ent[k]
    r_id = 0
    if cfg.era == ERA_INNER_ID:
        # < 4.7: only the innermost IPv4 ID is checked, it must be p.id + count
        if c.in_v[i] == 4 and ((held.e_in_id + count) & 0xFFFF) != c.in_id[i]:
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
                pid = held.e_out_id
                ndf = c.out_df[i]
            else:
                v = c.in_v[i]
                nid = c.in_id[i]
                pid = held.e_in_id
                ndf = c.in_df[i]
            if v == 6:
                if n_atomic:
                    flush_id = 0       # ipv6_gro_receive: if is_atomic, flush_id = 0
                    src = -1
                n_atomic = 1
                continue
            fid = (nid - pid) & 0xFFFF
            if held.e_fixed == 0 or ndf == 0:
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
        if flush_id == 1 and count == 1 and held.e_fixed != 0:
            held.e_fixed = 0
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
                r = _ip_pair(v, c.out_ttl[i], c.out_tos[i], c.out_df[i], held.e_out_ttl,
                             held.e_out_tos, held.e_out_df, cfg.hop_flush, FLUSH_OUTER_TTL,
                             FLUSH_OUTER_TOS, FLUSH_OUTER_ECN, FLUSH_OUTER_DF)
                nid = c.out_id[i]
                pid = held.e_out_id
                ndf = c.out_df[i]
                outer = True
                bit = 1
                rid = FLUSH_OUTER_IP_ID
            else:
                v = c.in_v[i]
                r = _ip_pair(v, c.in_ttl[i], c.in_tos[i], c.in_df[i], held.e_in_ttl,
                             held.e_in_tos, held.e_in_df, cfg.hop_flush, FLUSH_TTL, FLUSH_TOS,
                             FLUSH_ECN, FLUSH_DF)
                nid = c.in_id[i]
                pid = held.e_in_id
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
                    held.e_fixed = 1
                bad = off != ((count * (1 - held.e_fixed)) & 0xFFFF)
            else:
                if count == 1 and off == 0:
                    held.e_fixed |= bit
                fixed = 1 if (held.e_fixed & bit) != 0 else 0
                bad = off != ((count * (1 - fixed)) & 0xFFFF)
            if bad and r_id == 0:
                r_id = rid
    return r_id
