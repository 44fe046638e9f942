"""gro_list_prepare's MAC-header compare on ip6tnl devices (ip6ip6 / ip4ip6), per release,
and the stable point releases a profile can name (issue 13, found by the 5.10 guest replay).

ip6_tnl_link_config (net/ipv6/ip6_tunnel.c) set the device's hard_header_len to the lower
device's + 40 until 4b3e33fcc38f "ip6_tunnel: Fix broken GRO" (v6.11; stable 5.10.225,
5.15.166, 6.1.107, 6.6.48, 6.10.7); gro_list_prepare (net/core/dev.c, later gro.c) then
memcmp()s that many bytes from skb_mac_header: before da5a2e49f064 (v5.14) the outer
Ethernet + IPv6 headers (payload length included), from it the inner IP + L4 headers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.decode.reference import decode_batch
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.stages import simulate_stages
from tests.craft import eth, ipv4, ipv6, make_batch, tcp, tcp_ts

T0 = 1_700_000_000_000_000_000
OUT_SRC, OUT_DST = "2001:db8:ff::1", "2001:db8:ff::2"


def _inner(i: int, n: int, flags: int, v6: bool) -> bytes:
    seg = tcp(40000, 5201, seq=1 + 1000 * i, flags=flags, payload=bytes(n),
              options=tcp_ts(7, 9))
    if v6:
        return ipv6("2001:db8:1::1", "2001:db8:1::2", 6, seg)
    return ipv4("192.0.2.1", "192.0.2.2", 6, seg, ident=i + 1)


def _flow(v6: bool, segments: int = 6) -> pa.Table:
    """``segments - 1`` full segments and a last short one with PSH, in ip6ip6 or ip4ip6
    (the shape of crafted_ip6ip6.pcap's unit #24-31)."""
    frames = []
    for i in range(segments):
        last = i == segments - 1
        inner = _inner(i, 300 if last else 1000,
                       C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if last else 0), v6)
        frames.append(eth(ipv6(OUT_SRC, OUT_DST, 41 if v6 else 4, inner),
                          etype=C.ETH_P_IPV6))
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])


def _cells(t: pa.Table, kernel: str, engine: str):
    cfg = GroConfig(kernel=KernelProfile.parse(kernel), native_gro=False, tunnel_gro=True)
    st = simulate_stages(t, cfg, engine=engine)
    for s in st:
        s.check_invariants()
    res = st[1].result
    return sorted(res.seg_count.tolist(), reverse=True)


@pytest.mark.parametrize("kernel,hard_header_len,reset", [
    ("4.19", True, False), ("5.10", True, False), ("5.10.223", True, False),
    ("5.10.225", False, False), ("5.13", True, False), ("5.14", True, True),
    ("5.15", True, True), ("5.15.165", True, True), ("5.15.166", False, True),
    ("6.1", True, True), ("6.1.106", True, True), ("6.1.107", False, True),
    ("6.6.47", True, True), ("6.6.48", False, True), ("6.10.6", True, True),
    ("6.10.7", False, True), ("6.11", False, True), ("6.18", False, True)])
def test_ip6_tnl_link_config_hard_header_len_switches(kernel, hard_header_len, reset):
    p = KernelProfile.parse(kernel)
    assert p.ip6_tnl_hard_header_len is hard_header_len
    assert p.ip6_tnl_mac_header_reset is reset


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("v6", [True, False], ids=["ip6ip6", "ip4ip6"])
def test_gro_list_prepare_ip6tnl_compares_outer_headers_on_5_10(engine, v6):
    """5.10 (before da5a2e49f064 and 4b3e33fcc38f): the 54 bytes compared are the outer
    Ethernet and IPv6 headers, so the short last segment (another outer payload length)
    is another flow: with PSH it goes up alone and the full segments merge, as the 5.10.223
    guest delivered crafted_ip6ip6 / crafted_ip4ip6 (#31 alone, #24-30)."""
    assert _cells(_flow(v6), "5.10", engine) == [5, 1]
    # the stable backport of the fix (5.10.225): one unit
    assert _cells(_flow(v6), "5.10.225", engine) == [6]


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_gro_list_prepare_ip6tnl_compares_inner_headers_5_14_to_6_10(engine):
    """From da5a2e49f064 (v5.14) __ip6_tnl_rcv resets the MAC header to the inner IP header:
    the compared bytes include the TCP sequence number, so nothing merges until the fix
    (mainline 6.11; 6.1.107 in the 6.1 series)."""
    t = _flow(True)
    assert _cells(t, "6.1", engine) == [1] * 6
    assert _cells(t, "6.1.107", engine) == [6]
    assert _cells(t, "6.11", engine) == [6]


def test_ipip_devices_are_not_affected():
    """ip_tunnel devices (ipip) use needed_headroom: hard_header_len 0, no compare."""
    frames = [eth(ipv4("198.51.100.1", "198.51.100.2", 4,
                       _inner(i, 300 if i == 5 else 1000,
                              C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if i == 5 else 0), False),
                       ident=10 + i)) for i in range(6)]
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    t = pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])
    assert _cells(t, "5.10", "reference") == [6]


@pytest.mark.parametrize("kernel,expected", [
    ("6.1", False), ("6.1.42", False), ("6.1.43", True), ("6.1.192", True),
    ("6.4", False), ("6.5", True), ("5.10.223", False)])
def test_vxlan_gpe_gro_receive_stable_6_1_43(kernel, expected):
    """b0b672c4d095 "vxlan: fix GRO with VXLAN-GPE" (v6.5) came to 6.1.43 ("[PATCH 6.1
    090/228]", August 2023): Debian's 6.1.192 aggregates GPE IP payloads live."""
    assert KernelProfile.parse(kernel).vxlan_gpe_gro is expected


def test_kernel_profile_stable_number():
    p = KernelProfile.parse("6.1.192")
    assert p.version == (6, 1) and p.stable == 192 and p.name == "6.1.192"
    assert KernelProfile.parse((6, 1, 192)) == p
    assert KernelProfile.parse("6.12.117+deb12-amd64").stable == 117
    # Debian ABI names carry no stable number: the mainline profile
    d = KernelProfile.parse("6.1.0-57-amd64")
    assert d.stable == 0 and d.name == "6.1" and d == KernelProfile.parse("6.1")
    cfg = GroConfig(kernel=p)
    assert cfg.to_dict()["kernel"] == "6.1.192"
