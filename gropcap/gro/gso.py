"""GSO description of GRO super-packets: SKB_GSO_* type bits and segment counts.

The GRO engines call
:func:`gso_type_for` when they complete a super-packet of two or more segments
(``gro_complete`` -> ``inet_gro_complete`` / ``ipv6_gro_complete`` -> tunnel completions ->
``tcp4_gro_complete`` / ``tcp6_gro_complete`` -> ``tcp_gro_complete``); reports use
:func:`gso_type_names` and :func:`gso_segs`; ``egress.py`` (what a super-packet becomes
on the way out) and ``gro/coalesced.py`` (frames captured already coalesced) build on it.

Bit values are the kernel's ``enum { SKB_GSO_* }`` in include/linux/skbuff.h. In v6.18
("net: gso: restore outer ip ids correctly") the fixed-ID bit moved: bit 3 became the
internal ``__SKB_GSO_TCP_FIXEDID`` (the NETIF_F_TSO_MANGLEID feature bit) and the GSO type
carries ``SKB_GSO_TCP_FIXEDID = 1 << 30`` (outer or only IPv4 header) and
``SKB_GSO_TCP_FIXEDID_INNER = 1 << 31`` (inner IPv4 header of a tunnelled packet).
"""

from __future__ import annotations

# include/linux/skbuff.h, enum { SKB_GSO_* } (values identical from v4.7 to v6.18 except
# where noted)
SKB_GSO_TCPV4 = 1 << 0
SKB_GSO_DODGY = 1 << 1
SKB_GSO_TCP_ECN = 1 << 2            # the TCP segment has CWR set (before v6.15 from GRO)
SKB_GSO_TCP_FIXEDID_LEGACY = 1 << 3  # SKB_GSO_TCP_FIXEDID 4.7-6.17; __SKB_GSO_TCP_FIXEDID 6.18
SKB_GSO_TCPV6 = 1 << 4
SKB_GSO_FCOE = 1 << 5
SKB_GSO_GRE = 1 << 6
SKB_GSO_GRE_CSUM = 1 << 7
SKB_GSO_IPXIP4 = 1 << 8
SKB_GSO_IPXIP6 = 1 << 9
SKB_GSO_UDP_TUNNEL = 1 << 10
SKB_GSO_UDP_TUNNEL_CSUM = 1 << 11
SKB_GSO_PARTIAL = 1 << 12
SKB_GSO_TUNNEL_REMCSUM = 1 << 13
SKB_GSO_SCTP = 1 << 14
SKB_GSO_ESP = 1 << 15
SKB_GSO_UDP = 1 << 16
SKB_GSO_UDP_L4 = 1 << 17
SKB_GSO_FRAGLIST = 1 << 18
SKB_GSO_TCP_ACCECN = 1 << 19        # v6.15 "gso: AccECN support" (023af5a72ab1)
SKB_GSO_TCP_FIXEDID = 1 << 30       # v6.18: fixed IDs in the outer (or only) IPv4 header
SKB_GSO_TCP_FIXEDID_INNER = 1 << 31  # v6.18: fixed IDs in the inner IPv4 header

GSO_TYPE_NAMES = {
    SKB_GSO_TCPV4: "tcpv4", SKB_GSO_DODGY: "dodgy", SKB_GSO_TCP_ECN: "tcp_ecn",
    SKB_GSO_TCP_FIXEDID_LEGACY: "tcp_fixedid", SKB_GSO_TCPV6: "tcpv6",
    SKB_GSO_FCOE: "fcoe", SKB_GSO_GRE: "gre", SKB_GSO_GRE_CSUM: "gre_csum",
    SKB_GSO_IPXIP4: "ipxip4", SKB_GSO_IPXIP6: "ipxip6", SKB_GSO_UDP_TUNNEL: "udp_tunnel",
    SKB_GSO_UDP_TUNNEL_CSUM: "udp_tunnel_csum", SKB_GSO_PARTIAL: "partial",
    SKB_GSO_TUNNEL_REMCSUM: "tunnel_remcsum", SKB_GSO_SCTP: "sctp", SKB_GSO_ESP: "esp",
    SKB_GSO_UDP: "udp", SKB_GSO_UDP_L4: "udp_l4", SKB_GSO_FRAGLIST: "fraglist",
    SKB_GSO_TCP_ACCECN: "tcp_accecn", SKB_GSO_TCP_FIXEDID: "tcp_fixedid",
    SKB_GSO_TCP_FIXEDID_INNER: "tcp_fixedid_inner",
}

# Tunnel completions (gre_gro_complete, ipip_gro_complete, sit_gro_complete,
# ip6ip6_gro_complete, ip4ip6_gro_complete), keyed by constants.TUN_* codes.
_TUN_GRE, _TUN_GRE_TEB, _TUN_IPIP, _TUN_SIT, _TUN_IP6IP6, _TUN_IP4IP6 = 1, 2, 5, 6, 7, 8
_TUN_VXLAN, _TUN_VXLAN_GPE, _TUN_GENEVE, _TUN_FOU, _TUN_GUE = 9, 10, 11, 12, 13
_UDP_TUNS = (_TUN_VXLAN, _TUN_VXLAN_GPE, _TUN_GENEVE, _TUN_FOU, _TUN_GUE)


def fixedid_bits(kernel_version: tuple[int, int], ip_fixedid: int) -> int:
    """GSO bits for the fixed-ID state of a super-packet (``tcp4_gro_complete``).

    ``ip_fixedid``: before v6.18 a single bit (``is_atomic`` before v6.10, ``ip_fixedid``
    v6.10-v6.17) -> ``SKB_GSO_TCP_FIXEDID`` (bit 3); from v6.18 two bits (bit 0 outer or
    only header, bit 1 inner) multiplied by ``SKB_GSO_TCP_FIXEDID`` (bit 30), so bit 1 lands
    on ``SKB_GSO_TCP_FIXEDID_INNER``. Before v4.7 there was no fixed-ID GSO type.

    >>> fixedid_bits((6, 18), 0b11) == SKB_GSO_TCP_FIXEDID | SKB_GSO_TCP_FIXEDID_INNER
    True
    >>> fixedid_bits((6, 1), 1) == SKB_GSO_TCP_FIXEDID_LEGACY
    True
    """
    if kernel_version < (4, 7) or not ip_fixedid:
        return 0
    if kernel_version >= (6, 18):
        return (ip_fixedid & 0b11) * SKB_GSO_TCP_FIXEDID
    return SKB_GSO_TCP_FIXEDID_LEGACY


def gso_type_for(kernel_version: tuple[int, int], inner_ip_version: int, *,
                 ip_fixedid: int = 0, cwr: bool = False, tun_type: int = 0,
                 udp_csum: bool | None = None, inner_tun_type: int = 0) -> int:
    """``skb_shinfo(skb)->gso_type`` of a completed TCP super-packet (count > 1).

    Parameters:
        kernel_version: ``(major, minor)`` of the modelled kernel.
        inner_ip_version: 4 or 6, the IP header right above TCP (``tcp4/tcp6_gro_complete``).
        ip_fixedid: fixed-ID state decided on the second segment (see :func:`fixedid_bits`);
            only IPv4 TCP sets it (``tcp4_gro_complete``).
        cwr: the first segment's TCP header has CWR (``tcp_gro_complete``):
            ``SKB_GSO_TCP_ECN`` before v6.15, ``SKB_GSO_TCP_ACCECN`` from v6.15.
        tun_type: ``constants.TUN_*`` of a natively aggregated tunnel: GRE/GRE-TEB ->
            ``SKB_GSO_GRE`` (``gre_gro_complete`` assigns it; the C flag does not add
            ``SKB_GSO_GRE_CSUM``), IPIP/SIT -> ``SKB_GSO_IPXIP4``, ip6ip6/ip4ip6 ->
            ``SKB_GSO_IPXIP6``; a UDP tunnel (VXLAN, VXLAN-GPE, Geneve, FOU, GUE)
            aggregated through its socket -> ``SKB_GSO_UDP_TUNNEL_CSUM`` when the outer
            checksum is non-zero (``udp_csum``), else ``SKB_GSO_UDP_TUNNEL``
            (udp_gro_complete assigns it), and FOU/GUE then add the bits of the IP protocol
            they carry (``inner_tun_type``: IPIP/SIT).

    >>> hex(gso_type_for((6, 18), 4, ip_fixedid=1))
    '0x40000001'
    >>> gso_type_for((6, 6), 6, cwr=True) == SKB_GSO_TCPV6 | SKB_GSO_TCP_ECN
    True
    """
    t = 0
    if tun_type in _UDP_TUNS:
        # udp_gro_complete: assignment before the inner completions OR their bits
        t = SKB_GSO_UDP_TUNNEL_CSUM if udp_csum else SKB_GSO_UDP_TUNNEL
        tun_type = inner_tun_type
    if tun_type in (_TUN_GRE, _TUN_GRE_TEB):
        t = t | SKB_GSO_GRE if t else SKB_GSO_GRE   # gre_gro_complete (outermost: assigns)
    elif tun_type in (_TUN_IPIP, _TUN_SIT):
        t |= SKB_GSO_IPXIP4                  # ipip_gro_complete / sit_gro_complete
    elif tun_type in (_TUN_IP6IP6, _TUN_IP4IP6):
        t |= SKB_GSO_IPXIP6                  # ip6ip6_gro_complete / ip4ip6_gro_complete
    if inner_ip_version == 4:
        t |= SKB_GSO_TCPV4 | fixedid_bits(kernel_version, ip_fixedid)  # tcp4_gro_complete
    else:
        t |= SKB_GSO_TCPV6                   # tcp6_gro_complete
    if cwr:                                  # tcp_gro_complete
        t |= SKB_GSO_TCP_ACCECN if kernel_version >= (6, 15) else SKB_GSO_TCP_ECN
    return t


def gso_type_names(gso_type: int) -> list[str]:
    """Names of the bits set in ``gso_type``, lowest bit first.

    Bit 3 is ``tcp_fixedid`` (before v6.18) and never set by GRO from v6.18 on.

    >>> gso_type_names(SKB_GSO_TCPV4 | SKB_GSO_TCP_FIXEDID)
    ['tcpv4', 'tcp_fixedid']
    """
    return [name for bit, name in sorted(GSO_TYPE_NAMES.items()) if gso_type & bit]


def gso_segs(payload_len: int, gso_size: int) -> int:
    """Segments a super-packet becomes on egress: ``ceil(payload / gso_size)``.

    GRO merges only segments of exactly ``gso_size`` bytes except the last (a shorter one
    ends the super-packet, a longer one is refused), so this equals GRO's ``count`` and
    ``tcp_gro_complete``'s ``gso_segs``; software GSO (``tcp_gso_segment``) and TSO
    reproduce the original segment boundaries. A plain packet (``gso_size == 0``) is one.

    >>> gso_segs(2 * 1448 + 100, 1448)
    3
    """
    if gso_size <= 0:
        return 1
    return max(1, -(-int(payload_len) // int(gso_size)))


# NETIF_F_GSO_ENCAP_ALL (include/linux/netdev_features.h): cleared on decapsulation from
# v4.6 (iptunnel_pull_offloads, b311341e0bd9 "tunnels: Remove encapsulation offloads on
# decap")
GSO_ENCAP_ALL = (SKB_GSO_GRE | SKB_GSO_GRE_CSUM | SKB_GSO_IPXIP4 | SKB_GSO_IPXIP6
                 | SKB_GSO_UDP_TUNNEL | SKB_GSO_UDP_TUNNEL_CSUM)


def decap_gso_type(gso_type, kernel_version: tuple[int, int]):
    """gso_type after decapsulation: the tunnel bits are stripped from v4.6 on
    (iptunnel_pull_offloads); before, they stayed set ("stale")."""
    import numpy as np

    t = np.asarray(gso_type, dtype=np.uint64)
    if kernel_version >= (4, 6):
        return (t & ~np.uint64(GSO_ENCAP_ALL)).astype(np.uint32)
    return t.astype(np.uint32)


def udp_tunnel_gso_bits(version: tuple, tun_type: int, udp_csum: bool,
                        inner_tun_type: int) -> int:
    """The gso_type bits a UDP tunnel socket's completion sets before the inner L4's:
    udp_gro_complete's ``SKB_GSO_UDP_TUNNEL[_CSUM]`` and, for FOU/GUE, the carried
    protocol's (ipip/sit/ip6ip6/ip4ip6_gro_complete); :func:`gso_type_for` without
    the TCP completion (``tcp6_gro_complete``'s TCPV6, the only bit it adds here)."""
    return gso_type_for(version, 6, tun_type=tun_type, udp_csum=udp_csum,
                            inner_tun_type=inner_tun_type) & ~SKB_GSO_TCPV6
