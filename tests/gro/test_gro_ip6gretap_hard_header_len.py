"""gro_list_prepare's MAC-header compare on ip6gretap / ip6erspan devices, per release and
stable point release (issue 13, found by the 5.10.223 guest replay).

ether_setup gives these ARPHRD_ETHER devices eth_header_ops; since 832ba596494b "net:
ip6_gre: set dev->hard_header_len when using header_ops" (v5.10-rc7) ip6gre_calc_hlen and
ip6gre_tnl_link_config_route (net/ipv6/ip6_gre.c) then set hard_header_len to the outer
stack (lower Ethernet 14 + IPv6 40 + GRE [+ ERSPAN]), and gro_list_prepare (net/core/dev.c,
later gro.c) memcmp()s that many bytes from the inner Ethernet header. 505b6d296c48
"ip6_gre: fix hardware header length for NBMA tunnels" (netdev/net, August 2026, after
v7.2) keeps hard_header_len for NBMA ip6gre devices only: stable 5.10.270, 6.1.188,
6.12.109 (Debian's 6.1.192 and 6.12.117 merge these devices live, 5.10.223 does not).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.decode.reference import decode_batch
from gropcap.gro.config import KernelProfile
from tests.craft import erspan2, erspan3, eth, gre, ipv4, ipv6, make_batch, tcp, tcp_ts
# the second stage's unit sizes, native GRO off (shared with the ip6tnl compare's tests)
from tests.gro.test_gro_ip6tnl_mac_header import OUT_DST, OUT_SRC, T0, _cells


def _inner(i: int, n: int, flags: int, v6: bool) -> bytes:
    seg = tcp(40000, 5201, seq=1 + 1000 * i, flags=flags, payload=bytes(n),
              options=tcp_ts(7, 9))
    if v6:
        ip = ipv6("2001:db8:1::1", "2001:db8:1::2", 6, seg)
    else:
        ip = ipv4("192.0.2.1", "192.0.2.2", 6, seg, ident=i + 1)
    return eth(ip, etype=C.ETH_P_IPV6 if v6 else C.ETH_P_IP)


def _encap(kind: str, frame: bytes, i: int) -> bytes:
    if kind == "ip6gretap":
        return gre(C.ETH_P_TEB, frame)
    if kind == "ip6gretap-key":
        return gre(C.ETH_P_TEB, frame, key=7)
    if kind == "ip6erspan2":
        return gre(C.ETH_P_ERSPAN, erspan2(frame, session=5), key=5, seq=i)
    return gre(C.ETH_P_ERSPAN2, erspan3(frame, session=5), key=5, seq=i)


def _flow(kind: str, v6: bool = False, segments: int = 6) -> pa.Table:
    """``segments - 1`` full segments and a last short one with PSH over an IPv6 outer
    header (the shape of the crafted captures' units)."""
    frames = []
    for i in range(segments):
        last = i == segments - 1
        inner = _inner(i, 300 if last else 1000,
                       C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if last else 0), v6)
        frames.append(eth(ipv6(OUT_SRC, OUT_DST, C.IPPROTO_GRE, _encap(kind, inner, i)),
                          etype=C.ETH_P_IPV6))
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])


@pytest.mark.parametrize("kernel,expected", [
    ("4.19", False), ("5.4", False), ("5.9.12", False), ("5.9.13", True),
    ("5.10", True), ("5.10.223", True),
    ("5.10.269", True), ("5.10.270", False), ("5.15", True), ("6.1", True),
    ("6.1.187", True), ("6.1.188", False), ("6.1.192", False), ("6.6", True),
    ("6.12.108", True), ("6.12.109", False), ("6.12.117", False), ("6.18", True)])
def test_ip6gre_calc_hlen_hard_header_len_switch(kernel, expected):
    """832ba596494b (v5.10-rc7; stable 5.9.13) until 505b6d296c48 (stable 5.10.270,
    6.1.188, 6.12.109; a profile without a stable number follows mainline X.Y, which
    lacks it)."""
    assert KernelProfile.parse(kernel).ip6gre_tap_hard_header_len is expected


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("kind", ["ip6gretap", "ip6erspan2", "ip6erspan3"])
def test_gro_list_prepare_ip6gretap_memcmp_reaches_tcp_seq_on_5_10_223(engine, kind):
    """5.10.223: hard_header_len 58 (ip6gretap) / 70 / 74 (ip6erspan type II / III) bytes
    from the inner Ethernet header reach the inner TCP sequence number of an IPv4 frame:
    every segment is its own flow, as the 5.10.223 guest delivered. 6.1.192 (6.1.188 has
    505b6d296c48): hard_header_len stays ETH_HLEN, one unit; and 5.10.270 likewise."""
    t = _flow(kind)
    assert _cells(t, "5.10.223", engine) == [1] * 6
    assert _cells(t, "5.10.270", engine) == [6]
    assert _cells(t, "6.1.192", engine) == [6]
    assert _cells(t, "6.1", engine) == [1] * 6


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_ip6gretap_inner_ipv6_memcmp_ends_at_the_ports(engine):
    """An inner IPv6 frame behind ip6gretap without a key: the 58 bytes end with the TCP
    ports (14 + 40 + 4), so full segments are one flow and the short last one (another
    payload length) is another: with PSH it goes up alone. With a GRE key (62 bytes) the
    sequence number is compared too: nothing merges."""
    assert _cells(_flow("ip6gretap", v6=True), "5.10.223", engine) == [5, 1]
    assert _cells(_flow("ip6gretap-key", v6=True), "5.10.223", engine) == [1] * 6
    assert _cells(_flow("ip6gretap", v6=True), "6.12.117", engine) == [6]


def test_ipv4_outer_gretap_is_not_affected():
    """gretap / erspan over IPv4 (ip_tunnel: needed_headroom, hard_header_len ETH_HLEN)."""
    frames = []
    for i in range(6):
        last = i == 5
        inner = _inner(i, 300 if last else 1000,
                       C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if last else 0), False)
        frames.append(eth(ipv4("198.51.100.1", "198.51.100.2", C.IPPROTO_GRE,
                               gre(C.ETH_P_TEB, inner), ident=10 + i)))
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    t = pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])
    assert _cells(t, "5.10.223", "reference") == [6]
