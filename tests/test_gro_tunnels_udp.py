"""UDP tunnel sockets (VXLAN, Geneve), UDP GRO modes and needs_reference (gro/reference.py)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from gropcap import gso
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.reference import needs_reference, simulate
from gropcap.pipeline import decode_files
from tests.craft import eth, geneve, ipv4, make_batch, tcp, tcp_ts, udp

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "sample_pcaps")


def table(frames):
    return pa.Table.from_batches([decode_batch(make_batch(frames))])


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def run(frames, config):
    """The reference result, after checking the numba engine gives the same bit for bit
    (UDP GRO and UDP tunnel sockets are in both engines)."""
    from gropcap.gro.engine import simulate as fast_simulate
    from test_gro_engine_equal import assert_same
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
    from test_gro_engine_equal import assert_same
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
