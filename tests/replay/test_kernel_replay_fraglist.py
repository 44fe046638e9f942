"""Live kernel vs simulator for rules of issue 13 on the running kernel: rx-gro-list (TCP
fraglist GRO from 6.10, UDP fraglist with skb_gro_receive_list) and the ECN decapsulation
of a vxlan device before its gro_cells. The veth receiver's namespace has no TCP/UDP
socket for the replayed flows, so they are "forwarded" for tcp4_check_fraglist_gro. Root +
netns only: skipped with the reason elsewhere.
"""

from __future__ import annotations

import pytest

from gropcap import constants as C
from gropcap.errors import GropcapError
from gropcap.replay.kernel import running_kernel
from tests.craft import eth, ipv4, tcp, tcp_ts, udp
from tests.replay.test_kernel_replay_tunnels import live


def _replay(frames, bursts, features):
    from gropcap.replay._netns import _run
    from gropcap.replay.kernel import ReplaySession
    with ReplaySession() as s:
        for feat in features:
            try:
                _run(["ip", "netns", "exec", s.pair.ns_rx, "ethtool", "-K", s.pair.dev_rx,
                      feat, "on"])
            except GropcapError as e:
                pytest.skip(f"veth cannot turn {feat} on here: {e}")
        return s.replay(frames, bursts)


def _check(r, **changes):
    from gropcap.replay.compare import compare, simulate_replay
    assert r.lost == [] and r.unmatched == []
    packets, sim = simulate_replay(r, **changes)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences[:20]])
    return sim


def _tcp_flow(sport, n, size=1000, flags=None, seqs=None, ttls=None):
    out = []
    for i in range(n):
        out.append(eth(ipv4("10.0.0.1", "10.0.0.2", 6,
                            tcp(sport, 5201, seq=1 + size * i if seqs is None else seqs[i],
                                flags=C.TCP_FLAG_ACK if flags is None else flags[i],
                                payload=bytes(size), options=tcp_ts(7, 9)),
                            ident=1 + i, ttl=64 if ttls is None else ttls[i])))
    return out


def _tcp_cases():
    A, P = C.TCP_FLAG_ACK, C.TCP_FLAG_ACK | C.TCP_FLAG_PSH
    cases = [
        _tcp_flow(41000, 6, flags=[A, A, P, A, A, A]),             # PSH differs
        _tcp_flow(41001, 4, seqs=[1, 3001, 1001, 2001]),             # out of order
        _tcp_flow(41002, 4, ttls=[64, 64, 63, 63]),                  # TTL changes
        _tcp_flow(41003, 60, size=1400),                             # 65536 whole length
    ]
    frames, bursts = [], []
    for b, c in enumerate(cases):
        frames += c
        bursts += [b] * len(c)
    return frames, bursts


@pytest.mark.root
@live
def test_tcp_fraglist_gro_live():
    """tcp4_check_fraglist_gro + the is_flist branch of tcp_gro_receive (v6.10): the
    running kernel with rx-gro-list on and no socket equals --rx-gro-list --tcp-forwarded."""
    if running_kernel() < (6, 10):
        pytest.skip(f"TCP fraglist GRO is 6.10+, running {running_kernel()}")
    frames, bursts = _tcp_cases()
    r = _replay(frames, bursts, ["rx-gro-list"])
    sim = _check(r, rx_gro_list=True, tcp_local_socket=False)
    # and it differs from plain GRO on these cases (the rule is exercised)
    plain = _check_plain(frames, bursts)
    assert list(plain.seg_count) != list(sim.seg_count)


def _check_plain(frames, bursts):
    r = _replay(frames, bursts, [])
    return _check(r)


@pytest.mark.root
@live
def test_udp_fraglist_skb_gro_receive_list_live():
    """udp_gro_receive_segment with is_flist: skb_gro_receive_list (65536 on whole
    lengths), SKB_GSO_FRAGLIST; the kernel with rx-gro-list equals --udp-gro fraglist."""
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(4000, 5000, bytes(1400)),
                       ident=1 + i)) for i in range(60)]
    r = _replay(frames, [0] * 60, ["rx-gro-list"])
    sim = _check(r, udp_gro="fraglist")
    assert 1 < sim.seg_count[0] < 60


def _vxlan_ecn_frames():
    """One inner TCP flow in VXLAN, inner ECT(0); the outer header is CE on frames
    10-19 and on the last frame, whose inner header is Not-ECT. The outer IPv4 ID jumps
    every frame, so native GRO (6.18) delivers single frames to the vxlan device."""
    from tests.craft import vxlan
    out = []
    for i in range(48):
        inner_tos = 0 if i == 47 else 2
        outer_tos = 3 if (10 <= i < 20 or i == 47) else 2
        inner = eth(ipv4("192.0.2.1", "192.0.2.2", 6,
                         tcp(40000, 5201, seq=1 + 1000 * i, payload=bytes(1000),
                             options=tcp_ts(7, 9)), ident=i + 1, tos=inner_tos),
                    dst=0x020000000012, src=0x020000000011)
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                            udp(50000, 4789, vxlan(inner, 0x1092)),
                            ident=500 + 101 * i, tos=outer_tos)))
    return out


@pytest.mark.root
@live
def test_vxlan_ecn_decapsulate_before_gro_cells_live():
    """vxlan_rcv -> IP_ECN_decapsulate before gro_cells_receive: outer CE over ECT(0)
    marks the inner header CE (the cell does not merge it with unmarked packets), outer CE
    over Not-ECT is dropped; the model's gro_cells stage equals the vxlan device's output."""
    from gropcap.replay.cells import replay_gro_cells, simulate_cells
    if running_kernel() < (6, 18):
        pytest.skip("outer IP ID rule of 6.18 expected")
    try:
        r = replay_gro_cells(_vxlan_ecn_frames(), [0] * 48)
    except GropcapError as e:
        pytest.skip(str(e))
    assert r.lost == [47]                      # dropped by the vxlan device
    sim = simulate_cells(r)
    assert sorted(r.units) == sorted(sim)
    assert (10, 11, 12, 13, 14, 15, 16, 17, 18, 19) in r.units
