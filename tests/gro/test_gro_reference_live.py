"""The reference model against the live kernel: crafted edge cases replayed through a veth
pair with GRO on (gropcap.replay.kernel), one burst = one GRO window, and compared super-
packet by super-packet, in delivery order (gropcap.replay.compare).

Needs Linux, root and network namespaces, and a running kernel the model covers; skips with
the reason otherwise. The cases are the rules whose kernel behaviour the spec marks as
measured or derived: padding/trailers, DF-less fixed IDs, Hop-by-Hop, outer IDs, CWR heads,
bypass overtaking, hop limit, flow label.
"""

from __future__ import annotations

import os
import sys

import pytest

from craft import eth, ext_opts, gre, ipv4, tcp, tcp_ts
from tests.gro.test_gro_reference import v4, v6

from gropcap import constants as C
from gropcap.errors import GropcapError

pytestmark = pytest.mark.root


def _ipip(off, outer_id, **kw):
    return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_IPIP, v4(off, **kw)[14:], ident=outer_id))


def _ip_opts(off):
    return eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                    tcp(1500, 8000, seq=100 + off, ack=100, window=65535, payload=b"a" * 100),
                    ttl=8, options=b"\x01\x01\x01\x00"))


HBH = ext_opts(C.IPPROTO_TCP)
CASES = {
    # inet_gro_receive: tot_len != bytes received -> flush (Ethernet padding, trailer/FCS)
    "padding": [v4(0), v4(100, 1, pad=True)],
    "trailer": [v4(0), v4(100) + b"\xde\xad\xbe\xef", v4(200)],
    "padded_pure_ack": [v4(0), v4(100, 0, pad=True), v4(100)],
    # inet_gro_flush 6.18: fixed IDs without DF merge; outer IDs are checked even with DF
    "df0_fixed": [v4(100 * k, ident=8, df=False) for k in range(3)],
    "ipip_outer_random_ids": [_ipip(0, 1), _ipip(100, 77), _ipip(200, 5)],
    "ipip_outer_incrementing": [_ipip(0, 1), _ipip(100, 2), _ipip(200, 3)],
    # ipv6_gro_receive: Hop-by-Hop is skipped; hop limit flushes; flow label = other flow
    "ipv6_hbh": [v6(100 * k, ext=HBH, first_nh=C.IPPROTO_HOPOPTS) for k in range(2)],
    "ipv6_hop_limit": [v6(0, hlim=8), v6(100, hlim=7), v6(200, hlim=7)],
    "ipv6_flow_label": [v6(0, flow=1), v6(500, flow=2), v6(100, flow=1)],
    # tcp_gro_receive
    "cwr_head": [v4(0, flags=C.TCP_FLAG_ACK | C.TCP_FLAG_CWR), v4(100), v4(200)],
    "window": [v4(0), v4(100, window=1000), v4(200, window=1000)],
    "tsval": [v4(0, options=tcp_ts(1, 0)), v4(100, options=tcp_ts(1, 0)),
              v4(200, options=tcp_ts(2, 0))],
    "psh_then_more": [v4(0), v4(100, flags=C.TCP_FLAG_ACK | C.TCP_FLAG_PSH), v4(200)],
    "ecn_ce": [v4(0, tos=1), v4(100, tos=3)],
    # bail-outs overtake the held packet
    "ip_options_overtake": [v4(0), _ip_opts(100), v4(100)],
    "gre_key": [eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_GRE,
                         gre(C.ETH_P_IP, v4(100 * k)[14:], key=5))) for k in range(3)],
}


@pytest.fixture(scope="module")
def live():
    if not sys.platform.startswith("linux"):
        pytest.skip("live-kernel replay needs Linux")
    if os.geteuid() != 0:
        pytest.skip("live-kernel replay needs root (network namespaces, veth)")
    from gropcap.gro.config import KernelProfile
    from gropcap.replay.kernel import replay, running_kernel
    from gropcap.errors import ConfigError
    try:
        from gropcap.replay._netns import check_environment
        check_environment()
    except GropcapError as e:
        pytest.skip(f"no live-kernel environment: {e}")
    try:
        KernelProfile.parse(running_kernel())
    except ConfigError:
        pytest.skip(f"running kernel {running_kernel()} is not modelled")
    return replay


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_live_kernel(live, name):
    from gropcap.replay.compare import compare, simulate_replay
    frames = CASES[name]
    kr = live(frames, [0] * len(frames))
    packets, sim = simulate_replay(kr, engine="reference")
    rep = compare(packets, kr, sim)
    assert rep.ok, (rep.summary_line(), [str(d) for d in rep.differences],
                    kr.payload_sizes(), [int(x) for x in sim.seg_payload_len])
    assert rep.global_order_ok, rep.summary_line()
