"""Per-packet column helpers of the numba GRO engine: the lengths and gso_type code the
rules read (prepared before a batch runs) and the per-packet result columns (assembled
once the delivery order is known).

Layer: gro/fast, beside ``state`` (imports none of its modules).
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.gro.reasons import ROLE_ALONE, ROLE_HEAD, ROLE_MERGED


@numba.njit(cache=True, nogil=True, _nrt=False)
def assemble_rows(inst, seg_of_inst, s_count, s_first, rank, poll, gro_seg, role):
    """engine.assemble per packet: its super-packet (``seg_of_inst[inst]``), its role
    (alone when the super-packet has one segment, head when it is its first packet,
    else merged) and, when ``rank`` is given (napi, inferred polls), its poll number
    mapped to delivery order in place (-1 indexes from the end, as numpy would)."""
    nr = rank.shape[0]
    for r in range(inst.shape[0]):
        # unsigned indices: no wraparound code (never negative here)
        g = seg_of_inst[np.uint64(inst[r])]
        gro_seg[r] = g
        gu = np.uint64(g)
        if s_count[gu] == 1:
            role[r] = ROLE_ALONE
        elif s_first[gu] == r:
            role[r] = ROLE_HEAD
        else:
            role[r] = ROLE_MERGED
        if nr:
            p = poll[r]
            poll[r] = rank[p + nr if p < 0 else p]


# derive_lengths' ``big``: which packets may go past the legacy 64 KB limit (BIG TCP)
BIG_NONE, BIG_V6_PLAIN, BIG_ANY = range(3)


@numba.njit(cache=True, nogil=True)
def derive_lengths(wire, out_v, out_off, in_off, vlan_depth, in_hdr, doff, payload, in_v,
                   flags, tun, ext_len, cwr, legacy_size, per_device, max4, max6, big, plen,
                   tlen, gcode, limit):
    """Per-packet lengths, the gso_type code and the size limit in one pass (int64
    arithmetic):

    * ``plen``: p->len if held, bytes after the outermost IP header's offset
      (eth_type_trans pulled the MAC header; in-band VLAN tags stay in skb->data);
    * ``tlen``: skb_gro_len at TCP, bytes after the innermost IP and TCP headers (padding
      included), at least ``payload_len``;
    * ``gcode``: (innermost IPv6, CWR, tunnel type) for ``gso.gso_type_for``;
    * ``limit``: skb_gro_receive's limit for a super-packet headed by the packet.
      netif_get_gro_max_size: ``p->protocol`` IPv6 (the outermost IP header IPv6, no
      in-band VLAN tag) -> ``max6`` (gro_max_size), anything else -> ``max4``
      (gro_ipv4_max_size); without a per-device knob (before 5.16, ``per_device``
      false) ``legacy_size`` (64 KB). Above 64 KB (BIG TCP) only where ``big`` allows:
      ``BIG_ANY`` any TCP (from 6.3), ``BIG_V6_PLAIN`` p->protocol IPv6 with TCP right
      after a plain IPv6 header (5.19-6.2), ``BIG_NONE`` none.
    """
    for r in range(plen.shape[0]):
        w = np.int64(wire[r])
        ov = out_v[r]
        outer = np.int64(out_off[r]) if ov != 0 else np.int64(in_off[r])
        plen[r] = w - outer + 4 * np.int64(vlan_depth[r])
        t = w - np.int64(in_off[r]) - np.int64(in_hdr[r]) - 4 * np.int64(doff[r])
        p = np.int64(payload[r])
        tlen[r] = t if t > p else p
        gcode[r] = ((2 if in_v[r] == 6 else 0) + (1 if (np.int64(flags[r]) & cwr) != 0 else 0)) \
            * 16 + (np.int64(tun[r]) & 15)
        lim = legacy_size
        if per_device:
            v6 = (ov if ov != 0 else in_v[r]) == 6 and vlan_depth[r] == 0
            lim = max6 if v6 else max4
            if lim > legacy_size and not (big == BIG_ANY or (
                    big == BIG_V6_PLAIN and v6 and ov == 0 and ext_len[r] == 0)):
                lim = legacy_size
        limit[r] = lim
