"""gso.py: SKB_GSO_* bit values (include/linux/skbuff.h) and the completion-time gso_type."""

from __future__ import annotations

import doctest

import pytest

from gropcap import gso

# include/linux/skbuff.h enum (bits 0..19 stable since 5.x; 6.18 adds bits 30/31 and turns
# bit 3 into the internal __SKB_GSO_TCP_FIXEDID)
KERNEL_BITS = {
    "SKB_GSO_TCPV4": 0, "SKB_GSO_DODGY": 1, "SKB_GSO_TCP_ECN": 2,
    "SKB_GSO_TCP_FIXEDID_LEGACY": 3, "SKB_GSO_TCPV6": 4, "SKB_GSO_FCOE": 5,
    "SKB_GSO_GRE": 6, "SKB_GSO_GRE_CSUM": 7, "SKB_GSO_IPXIP4": 8, "SKB_GSO_IPXIP6": 9,
    "SKB_GSO_UDP_TUNNEL": 10, "SKB_GSO_UDP_TUNNEL_CSUM": 11, "SKB_GSO_PARTIAL": 12,
    "SKB_GSO_TUNNEL_REMCSUM": 13, "SKB_GSO_SCTP": 14, "SKB_GSO_ESP": 15, "SKB_GSO_UDP": 16,
    "SKB_GSO_UDP_L4": 17, "SKB_GSO_FRAGLIST": 18, "SKB_GSO_TCP_ACCECN": 19,
    "SKB_GSO_TCP_FIXEDID": 30, "SKB_GSO_TCP_FIXEDID_INNER": 31,
}


@pytest.mark.parametrize("name,bit", sorted(KERNEL_BITS.items()))
def test_bit_values(name, bit):
    assert getattr(gso, name) == 1 << bit


def test_inner_fixedid_is_outer_shifted():
    # tcp4_gro_complete: gso_type |= ip_fixedid * SKB_GSO_TCP_FIXEDID
    assert gso.SKB_GSO_TCP_FIXEDID_INNER == gso.SKB_GSO_TCP_FIXEDID << 1


@pytest.mark.parametrize("kernel,cwr_bit", [((6, 14), gso.SKB_GSO_TCP_ECN),
                                            ((6, 15), gso.SKB_GSO_TCP_ACCECN)])
def test_cwr_bit_by_version(kernel, cwr_bit):
    assert gso.gso_type_for(kernel, 4, cwr=True) == gso.SKB_GSO_TCPV4 | cwr_bit


@pytest.mark.parametrize("kernel,fixed,bits", [
    ((4, 6), 1, 0), ((4, 7), 1, gso.SKB_GSO_TCP_FIXEDID_LEGACY),
    ((6, 17), 1, gso.SKB_GSO_TCP_FIXEDID_LEGACY), ((6, 18), 1, gso.SKB_GSO_TCP_FIXEDID),
    ((6, 18), 2, gso.SKB_GSO_TCP_FIXEDID_INNER),
    ((6, 18), 3, gso.SKB_GSO_TCP_FIXEDID | gso.SKB_GSO_TCP_FIXEDID_INNER),
])
def test_fixedid_bits(kernel, fixed, bits):
    assert gso.fixedid_bits(kernel, fixed) == bits


def test_tunnel_bits():
    assert gso.gso_type_for((6, 18), 4, tun_type=1) == gso.SKB_GSO_GRE | gso.SKB_GSO_TCPV4
    assert gso.gso_type_for((6, 18), 6, tun_type=6) == gso.SKB_GSO_IPXIP4 | gso.SKB_GSO_TCPV6
    assert gso.gso_type_for((6, 18), 4, tun_type=8) == gso.SKB_GSO_IPXIP6 | gso.SKB_GSO_TCPV4
    assert gso.gso_type_for((6, 18), 6) == gso.SKB_GSO_TCPV6


def test_segments_and_names():
    assert gso.gso_segs(1448 * 3, 1448) == 3
    assert gso.gso_segs(1448 * 3 + 1, 1448) == 4
    assert gso.gso_segs(500, 0) == 1
    assert gso.gso_type_names(gso.SKB_GSO_TCPV6 | gso.SKB_GSO_TCP_ACCECN) == ["tcpv6",
                                                                             "tcp_accecn"]


def test_doctests():
    assert doctest.testmod(gso).failed == 0
