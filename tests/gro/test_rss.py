"""RSS Toeplitz hash: Microsoft's published verification vectors, table form == bit form,
and the input selection of rss_hash (docs/gro-model.md)."""

from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gropcap.gro.config import DEFAULT_RSS_KEY
from gropcap.gro.rss import gro_bucket, rss_hash, rx_queue, toeplitz_hash, toeplitz_table
from tests.gro.test_gro_engine_traffic import addr16, packet_table, tcp_row

MS_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")

# Microsoft "Verifying the RSS Hash Calculation": (src, sport, dst, dport,
# hash with TCP ports, hash of addresses only)
MS_VECTORS = [
    ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x51CCC178, 0x323E8FC2),
    ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xC626B0EA, 0xD718262A),
    ("24.19.198.95", 12898, "12.22.207.184", 38024, 0x5C2B394A, 0xD2D0A5DE),
    ("38.27.205.30", 48228, "209.142.163.6", 2217, 0xAFC7327F, 0x82989176),
    ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x10E828A2, 0x5D1809C5),
    ("3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x40207D3D, 0x2CC18CD5),
    ("3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0xDDE51BBF, 0x0F0C461C),
    ("3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, "fe80::200:f8ff:fe21:67cf", 38024,
     0x02D1FEEF, 0x4B61E985),
]


def _tuple_bytes(src, sport, dst, dport, ports=True):
    b = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    return b + struct.pack(">HH", sport, dport) if ports else b


def test_default_rss_key_is_microsofts():
    assert DEFAULT_RSS_KEY == MS_KEY


@pytest.mark.parametrize("src,sport,dst,dport,h4,h2", MS_VECTORS)
def test_toeplitz_microsoft_vectors(src, sport, dst, dport, h4, h2):
    assert toeplitz_hash(_tuple_bytes(src, sport, dst, dport), MS_KEY) == h4
    assert toeplitz_hash(_tuple_bytes(src, sport, dst, dport, ports=False), MS_KEY) == h2


def test_toeplitz_key_too_short():
    with pytest.raises(ValueError):
        toeplitz_hash(bytes(37), MS_KEY)  # 37 + 4 > 40


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=0, max_size=36), st.binary(min_size=40, max_size=40))
def test_table_form_equals_bitwise(data, key):
    table = toeplitz_table(key)
    h = 0
    for i, v in enumerate(data):
        h ^= int(table[i, v])
    assert h == toeplitz_hash(data, key)


@pytest.mark.parametrize("src,sport,dst,dport,h4,h2", MS_VECTORS)
def test_rss_hash_tcp_and_fragment_select_tuple(src, sport, dst, dport, h4, h2):
    v = ipaddress.ip_address(src).version
    rows = [tcp_row(v, src, dst, sport, dport),
            # fragment: 2-tuple even though ports were decoded
            tcp_row(v, src, dst, sport, dport, ip_mf=True),
            # non-TCP/UDP (ICMP): 2-tuple
            tcp_row(v, src, dst, 0, 0, l4_proto=1),
            # no IP at all
            dict(status=2, eth_type=0x0806)]
    h = rss_hash(packet_table(rows), MS_KEY)
    assert h.dtype == np.uint32
    assert h.tolist() == [h4, h2, h2, 0]
    assert rss_hash(packet_table(rows), MS_KEY, enabled=False).tolist() == [0, 0, 0, 0]


def test_rss_hash_uses_outermost_header():
    src, sport, dst, dport, h4, h2 = MS_VECTORS[0]
    # VXLAN: outer UDP 4-tuple is the NIC's input, not the inner TCP one
    vx = tcp_row(4, "10.1.1.1", "10.1.1.2", 5, 6, outer_ip_version=4,
                 outer_ip_src=addr16(src), outer_ip_dst=addr16(dst), outer_l4_proto=17,
                 outer_sport=sport, outer_dport=dport, tun_type=9)
    # GRE: outer header has no ports -> 2-tuple of the outer addresses
    gre = tcp_row(4, "10.1.1.1", "10.1.1.2", 5, 6, outer_ip_version=4,
                  outer_ip_src=addr16(src), outer_ip_dst=addr16(dst), tun_type=1)
    assert rss_hash(packet_table([vx, gre]), MS_KEY).tolist() == [h4, h2]


def test_queue_and_bucket():
    h = np.array([0, 1, 127, 128, 0x51CCC178, 0xFFFFFFFF], dtype=np.uint32)
    assert rx_queue(h, 4).tolist() == [(x & 127) % 4 for x in h.tolist()]
    assert rx_queue(h, 3).tolist() == [0, 1, 1, 0, (0x78 & 127) % 3, 127 % 3]
    assert gro_bucket(h, 8).tolist() == [0, 1, 7, 0, 0, 7]
    assert gro_bucket(h, 1).tolist() == [0] * 6
    assert rx_queue(0x51CCC178, 5) == (0x78 % 5)
    assert rx_queue(h, 4).dtype == np.uint16
