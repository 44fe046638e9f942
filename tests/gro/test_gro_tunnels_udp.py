"""UDP tunnel sockets (VXLAN, Geneve), UDP GRO modes and needs_reference (gro/reference.py)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.gro import gso
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.reference import needs_reference, simulate
from gropcap.run.memory import decode_files
from tests.craft import eth, geneve, ipv4, ipv6, make_batch, tcp, tcp_ts, udp, vxlan

from where import TESTS

SAMPLES = os.path.join(os.path.dirname(TESTS), "sample_pcaps")


def table(frames):
    return pa.Table.from_batches([decode_batch(make_batch(frames))])


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def run(frames, config):
    """The reference result, after checking the numba engine gives the same bit for bit
    (UDP GRO and UDP tunnel sockets are in both engines)."""
    from gropcap.gro.engine import simulate as fast_simulate
    from tests.gro.test_gro_engine_equal import assert_same
    t = table(frames)
    r = simulate(t, config)
    r.check_invariants(t.column("payload_len").to_numpy())
    assert_same(fast_simulate(t, config), r, str(config))
    return r


# --- needs_reference ---------------------------------------------------------------------

@pytest.mark.parametrize("kw,expected", [
    ({}, False), ({"udp_gro": "forward"}, False), ({"udp_tunnels": "geneve:6081"}, False),
    ({"udp_gro": "fraglist", "udp_tunnels": "vxlan:4789,gue:6080"}, False),
    ({"native_gro": False}, False), ({"tunnel_gro": True}, False),
    ({"tunnel_gro": False}, False), ({"vlan_gro": False}, False),
    ({"queues": 4, "model": "napi"}, False)])
def test_needs_reference(kw, expected):
    assert needs_reference(GroConfig(**kw)) is expected


def test_udp_tunnel_spec_parsing():
    c = GroConfig(udp_tunnels="vxlan:4789,geneve:6081")
    assert c.udp_tunnels == (("vxlan", 4789), ("geneve", 6081))
    assert c.to_dict()["udp_tunnels"] == "vxlan:4789,geneve:6081"
    from gropcap.errors import ConfigError
    for bad in ("vxlan", "wireguard:51820", "vxlan:0"):
        with pytest.raises(ConfigError):
            GroConfig(udp_tunnels=bad)
    with pytest.raises(ConfigError):
        GroConfig(udp_gro="always")


# --- VXLAN on a real recording -----------------------------------------------------------

def test_vxlan_aggregates_only_with_a_socket():
    t, _ = decode_files(os.path.join(SAMPLES, "real_vxlan.pcap"))
    plain = simulate(t, GroConfig())
    assert plain.num_superpackets == t.num_rows
    assert set(np.unique(plain.reason)) == {R.BYPASS_UDP_NO_GRO}
    sock = simulate(t, GroConfig(udp_tunnels="vxlan:4789"))
    sock.check_invariants(t.column("payload_len").to_numpy())
    from gropcap.gro.engine import simulate as fast_simulate
    from tests.gro.test_gro_engine_equal import assert_same
    assert_same(fast_simulate(t, GroConfig(udp_tunnels="vxlan:4789")), sock, "real_vxlan")
    assert sock.num_superpackets < t.num_rows // 5
    big = sock.seg_gso_type[sock.seg_count > 1]
    # udp_gro_complete: outer checksum present -> UDP_TUNNEL_CSUM, then tcp4_gro_complete
    assert np.all(big & gso.SKB_GSO_UDP_TUNNEL_CSUM)
    assert np.all(big & gso.SKB_GSO_TCPV4)
    assert not np.any(big & gso.SKB_GSO_UDP_TUNNEL)
    # a socket on another port changes nothing
    other = simulate(t, GroConfig(udp_tunnels="vxlan:8472"))
    assert other.num_superpackets == t.num_rows


# --- Geneve (crafted) --------------------------------------------------------------------

def _geneve_frames(n=4, oam=False, options=(b"",), csum="zero", sport=50000):
    out = []
    for i in range(n):
        inner = eth(ipv4("192.0.2.1", "192.0.2.2", 6,
                         tcp(40000, 5201, seq=1 + 1000 * i, payload=bytes(1000),
                             options=tcp_ts(1, 2)), ident=i + 1))
        opt = options[i % len(options)]
        g = geneve(inner, vni=7, oam=oam, options=opt)
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17, udp(sport, 6081, g),
                            ident=100 + i, l4_csum=csum)))
    return out


def test_geneve_with_socket_merges_and_sets_udp_tunnel():
    r = run(_geneve_frames(), cfg(udp_tunnels="geneve:6081"))
    assert list(r.seg_count) == [4]
    assert r.seg_gso_type[0] & gso.SKB_GSO_UDP_TUNNEL          # zero outer checksum
    assert not r.seg_gso_type[0] & gso.SKB_GSO_UDP_TUNNEL_CSUM


def test_geneve_oam_is_refused():
    r = run(_geneve_frames(oam=True), cfg(udp_tunnels="geneve:6081"))
    assert r.num_superpackets == 4
    assert set(r.reason) == {R.BYPASS_TUNNEL}


def test_geneve_different_options_are_different_flows():
    a = b"\x01\x02\x03\x01" + bytes(4)
    b = b"\x01\x02\x03\x01" + b"\x00\x00\x00\x01"
    # geneve_gro_receive: the whole header with options must be identical
    r = run(_geneve_frames(n=4, options=(a, a, b, b)), cfg(udp_tunnels="geneve:6081"))
    assert list(r.seg_count) == [2, 2]
    assert r.reason[2] == R.NO_HELD_PACKET      # a new flow, not a flush of the first


def test_geneve_nested_outer_ip_id_rule_6_18():
    # random outer IDs: 6.18 requires outer IDs fixed or incrementing
    frames = _geneve_frames()
    t = table(frames)
    ids = t.column("outer_ip_id").to_pylist()
    assert ids == [100, 101, 102, 103]
    assert list(simulate(t, cfg(udp_tunnels="geneve:6081")).seg_count) == [4]


# --- inner UDP of a tunnel socket ---------------------------------------------------------

def _tunnel_udp_frames(kind, sizes, inner_csum="good", outer_csum="good", v6=False):
    """An inner UDP flow in VXLAN or Geneve (inner Ethernet) to a tunnel socket's port."""
    out = []
    for i, size in enumerate(sizes):
        if v6:
            inner = ipv6("2001:db8:1::1", "2001:db8:1::2", 17, udp(4000, 5000, bytes(size)),
                         l4_csum=inner_csum)
        else:
            inner = ipv4("192.0.2.1", "192.0.2.2", 17, udp(4000, 5000, bytes(size)),
                         ident=i + 1, l4_csum=inner_csum)
        inner = eth(inner, C.ETH_P_IPV6 if v6 else C.ETH_P_IP, dst=0x020000000012,
                    src=0x020000000011)
        tun, port = (vxlan(inner, 0x1092), 4789) if kind == "vxlan" else \
            (geneve(inner, vni=7), 6081)
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17, udp(50000, port, tun),
                            ident=500 + i, l4_csum=outer_csum)))
    return out


_SOCKET = {"vxlan": "vxlan:4789", "geneve": "geneve:6081"}


@pytest.mark.parametrize("kind", ["vxlan", "geneve"])
@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("mode", ["socket", "forward", "fraglist"])
def test_tunnel_socket_inner_udp_follows_the_udp_gro_mode(kind, v6, mode):
    """vxlan/geneve_gro_receive -> eth_gro_receive -> inet/ipv6_gro_receive ->
    udp4/6_gro_receive on the inner UDP: udp_gro_receive's lookup on the inner ports finds
    no tunnel socket, so its first branch runs udp_gro_receive_segment as for plain UDP
    (was BYPASS_TCP_HEADER: the inner UDP went through tcp_gro_pull_header). Completion:
    the outer udp_gro_complete assigns UDP_TUNNEL[_CSUM], the inner udp4/6_gro_complete
    ORs UDP_L4 (is_flist: FRAGLIST | UDP_L4, encap_mark cleared before). Live on 6.18:
    tests/replay/test_kernel_replay_tunnels.py::test_tunnel_socket_inner_udp_replay_agrees."""
    frames = _tunnel_udp_frames(kind, [1000] * 4, v6=v6)
    r = run(frames, cfg(udp_gro=mode, udp_tunnels=_SOCKET[kind]))
    assert list(r.seg_count) == [4]
    assert R.BYPASS_TCP_HEADER not in set(r.reason)
    expect = gso.SKB_GSO_UDP_TUNNEL_CSUM | gso.SKB_GSO_UDP_L4
    if mode == "fraglist":
        expect |= gso.SKB_GSO_FRAGLIST
    assert r.seg_gso_type[0] == expect
    assert r.seg_gso_size[0] == 1000 and r.seg_payload_len[0] == 4000
    # no UDP GRO mode: the inner UDP is not aggregated (udp_gro_receive: "no GRO")
    off = run(frames, cfg(udp_tunnels=_SOCKET[kind]))
    assert off.num_superpackets == 4 and set(off.reason) == {R.BYPASS_UDP_NO_GRO}


def test_tunnel_socket_inner_udp_segment_rules():
    """udp_gro_receive_segment on the inner header: a zero inner checksum is refused, the
    short datagram merges last, a larger one starts a new head, and the outer UDP checksum
    (zero here) only picks UDP_TUNNEL instead of UDP_TUNNEL_CSUM."""
    config = cfg(udp_gro="forward", udp_tunnels="vxlan:4789")
    zero = run(_tunnel_udp_frames("vxlan", [1000] * 3, inner_csum="zero"), config)
    assert zero.num_superpackets == 3 and set(zero.reason) == {R.NOT_HELD_UDP_ZERO_CSUM}
    r = run(_tunnel_udp_frames("vxlan", [1000, 1000, 400, 1000, 1200], outer_csum="zero"),
            config)
    assert list(r.seg_count) == [3, 1, 1]
    assert r.seg_end_reason[0] == R.END_SHORT_SEGMENT
    assert r.reason[4] == R.FLUSH_UDP_LARGER
    assert r.seg_gso_type[0] == gso.SKB_GSO_UDP_TUNNEL | gso.SKB_GSO_UDP_L4


@pytest.mark.parametrize("kernel,tunnel", [("5.6", False), ("5.12", False),
                                            ("5.13", True), ("6.18", True)])
def test_fraglist_before_5_13_bypasses_the_tunnel_socket(kernel, tunnel):
    """v5.6-v5.12: udp_gro_receive set is_flist = !udp_sk(sk)->gro_enabled (1 for a
    vxlan socket) and ran udp_gro_receive_segment before its tunnel branch: the outer
    datagrams are aggregated (FRAGLIST | UDP_L4, gso_size the outer UDP payload). From
    v5.13 ("udp: skip L4 aggregation for UDP tunnel packets") the tunnel socket wins and
    the inner UDP is the fraglist aggregate (UDP_TUNNEL_CSUM | FRAGLIST | UDP_L4)."""
    frames = _tunnel_udp_frames("vxlan", [1000] * 4)
    r = run(frames, cfg(kernel, udp_gro="fraglist", udp_tunnels="vxlan:4789"))
    assert list(r.seg_count) == [4]
    flist = gso.SKB_GSO_FRAGLIST | gso.SKB_GSO_UDP_L4
    if tunnel:
        assert r.seg_gso_type[0] == flist | gso.SKB_GSO_UDP_TUNNEL_CSUM
        assert r.seg_gso_size[0] == 1000
    else:
        assert r.seg_gso_type[0] == flist
        assert r.seg_gso_size[0] == 1000 + 8 + 14 + 20 + 8
    # socket mode (no UDP_GRO on the vxlan socket) reaches the tunnel branch on each
    sock = run(frames, cfg(kernel, udp_gro="socket", udp_tunnels="vxlan:4789"))
    assert sock.seg_gso_type[0] & gso.SKB_GSO_UDP_TUNNEL_CSUM


def test_outer_datagram_gso_size_is_the_outer_udp_payload():
    """No tunnel socket, a UDP GRO mode: udp_gro_receive_segment aggregates the outer
    datagrams. dev_gro_receive sets gso_size = skb_gro_len after the outer UDP header
    (the whole outer UDP payload of the first datagram: 1050 for 1000-byte inner UDP,
    measured on 6.18), udp_gro_complete_segment gso_segs = count. The super-packet's
    payload_len stays the sum of its packets' payload_len (inner L4 payload, conserved),
    so the gso_size bound holds on the outer UDP payloads, not on payload_len."""
    frames = _tunnel_udp_frames("vxlan", [100] * 5 + [60])
    t = table(frames)
    r = simulate(t, cfg(udp_gro="forward"))
    from gropcap.gro.engine import simulate as fast_simulate
    from tests.gro.test_gro_engine_equal import assert_same
    assert_same(fast_simulate(t, cfg(udp_gro="forward")), r, "outer datagrams")
    assert list(r.seg_count) == [6]
    outer_payload = t.column("outer_udp_len").to_numpy().astype(np.int64) - 8
    assert r.seg_gso_size[0] == outer_payload[0] == 8 + 14 + 20 + 8 + 100
    assert r.seg_gso_type[0] == gso.SKB_GSO_UDP_L4
    assert r.seg_payload_len[0] == 5 * 100 + 60
    gs, n = int(r.seg_gso_size[0]), int(r.seg_count[0])
    assert gs * (n - 1) < outer_payload.sum() <= gs * n
    # the contract's bound on payload_len does not hold for it: 560 > 150 * 5 is false
    assert not r.seg_payload_len[0] > gs * (n - 1)
    with pytest.raises(AssertionError, match="gso_size inconsistent"):
        r.check_invariants(t.column("payload_len").to_numpy())


# --- plain UDP GRO -----------------------------------------------------------------------

def _udp_frames(sizes, ttl=(64,), csum="good", ident0=1):
    return [eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(4000, 5000, bytes(s)),
                     ttl=ttl[i % len(ttl)], ident=ident0 + i, l4_csum=csum))
            for i, s in enumerate(sizes)]


def test_udp_gro_off_by_default():
    r = run(_udp_frames([1000] * 4), cfg())
    assert r.num_superpackets == 4 and set(r.reason) == {R.BYPASS_UDP_NO_GRO}


@pytest.mark.parametrize("mode,kernel,merged", [
    ("forward", "6.18", True), ("forward", "5.10", False), ("forward", "5.12", True),
    ("socket", "4.19", False), ("socket", "5.0", True),
    ("fraglist", "5.4", False), ("fraglist", "5.6", True)])
def test_udp_gro_modes_per_kernel(mode, kernel, merged):
    r = run(_udp_frames([1000] * 4), cfg(kernel, udp_gro=mode))
    assert (list(r.seg_count) == [4]) is merged
    if merged:
        t = r.seg_gso_type[0]
        assert t & gso.SKB_GSO_UDP_L4
        assert bool(t & gso.SKB_GSO_FRAGLIST) is (mode == "fraglist")
        assert r.seg_gso_size[0] == 1000


def test_udp_gro_zero_checksum_refused():
    r = run(_udp_frames([1000] * 3, csum="zero"), cfg(udp_gro="forward"))
    assert r.num_superpackets == 3 and set(r.reason) == {R.NOT_HELD_UDP_ZERO_CSUM}


def test_udp_gro_short_datagram_ends_larger_starts_new():
    r = run(_udp_frames([1000, 1000, 400, 1000, 1200]), cfg(udp_gro="forward"))
    # udp_gro_receive_segment: the short one merges last; a larger one starts a new head
    assert list(r.seg_count) == [3, 1, 1]
    assert r.seg_end_reason[0] == R.END_SHORT_SEGMENT
    assert r.reason[4] == R.FLUSH_UDP_LARGER


def test_udp_gro_max_64_segments():
    r = run(_udp_frames([100] * 70), cfg(udp_gro="forward"))
    assert list(r.seg_count) == [64, 6]
    assert r.seg_end_reason[0] == R.END_UDP_MAX_SEGS


def test_udp_gro_l3_checks_from_6_9():
    frames = _udp_frames([1000] * 4, ttl=(64, 64, 63, 63))
    assert list(run(frames, cfg("6.8", udp_gro="forward")).seg_count) == [4]
    r = run(frames, cfg("6.9", udp_gro="forward"))
    assert list(r.seg_count) == [2, 2]
    assert r.reason[2] == R.FLUSH_TTL
    assert list(run(frames, cfg("6.18", udp_gro="forward")).seg_count) == [2, 2]


def test_udp_gro_ip_id_must_increment_from_6_9():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(4000, 5000, bytes(500)),
                       ident=i, df=False)) for i in (5, 9, 13)]
    assert list(run(frames, cfg("6.8", udp_gro="forward")).seg_count) == [3]
    r = run(frames, cfg("6.18", udp_gro="forward"))
    assert r.num_superpackets == 3 and r.reason[1] == R.FLUSH_IP_ID


def test_native_gro_off_bypasses_everything():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1, 2, seq=1 + 100 * i,
                                                      payload=bytes(100)), ident=i))
              for i in range(5)]
    assert list(run(frames, cfg()).seg_count) == [5]
    r = run(frames, cfg(native_gro=False))
    assert r.num_superpackets == 5 and set(r.reason) == {R.BYPASS_GRO_DISABLED}
