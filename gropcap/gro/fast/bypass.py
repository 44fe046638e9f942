"""The checks that send a packet past GRO, in the numba GRO engine: per row, the first
that holds in the kernel's evaluation order gives its BYPASS_* code, and the outer /
inner IP layer's skb flush (netif_elide_gro, the packet_offload table, vlan_gro_receive,
inet_gro_receive / ipv6_gro_receive, gre_gro_receive and the tunnel offloads,
tcp4/6_gro_receive; docs/gro-model.md, "Bypass precedence").

Layer: gro/fast, beside ``state`` (imports none of its modules); ``engine._pre_and_flush``
calls :func:`pre_and_flush`. A new encapsulation's acceptance checks go here.
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
)
from gropcap.decode.schema import (
    CSUM_BAD, CSUM_PARTIAL, STATUS_BAD_L4_HEADER, STATUS_BAD_TUNNEL_HEADER,
    STATUS_ENCAP_TOO_DEEP, STATUS_NOT_IP, STATUS_OK, STATUS_UNSUPPORTED_ENCAP,
    STATUS_UNSUPPORTED_LINKTYPE,
)
from gropcap.gro.reasons import (
    BYPASS_DECODE, BYPASS_GRO_DISABLED, BYPASS_IP_CSUM, BYPASS_IP_FRAGMENT, BYPASS_IP_OPTIONS,
    BYPASS_IPV6_EXTHDR, BYPASS_L4_CSUM, BYPASS_NO_L4_OFFLOAD, BYPASS_NO_VLAN_GRO,
    BYPASS_NOT_IP, BYPASS_TCP_HEADER, BYPASS_TUNNEL, BYPASS_UDP_NO_GRO, NOT_HELD_IP_RF,
    NOT_HELD_LENGTH,
)


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
