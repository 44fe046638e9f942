"""Live kernel vs simulator for UDP tunnels with a tunnel socket in the receiving namespace.

The receiving namespace gets a vxlan / vxlan-gpe device (its UDP socket is what
udp4_gro_lookup_skb finds); the simulator gets the same ``udp_tunnels``. Root + netns only:
skipped with the reason elsewhere. GRE/IPIP/SIT/ip6ip6/ip4ip6/ERSPAN samples are replayed
by tests/replay/test_kernel_replay.py::test_simulator_agrees_with_kernel_on_sample.
"""

from __future__ import annotations

import os

import pytest

from gropcap.errors import GropcapError
from gropcap.replay.kernel import running_kernel
from tests.live import live

from where import ROOT

SAMPLES = os.path.join(ROOT, "sample_pcaps")




def _replay(name, tunnels):
    from gropcap.capture import read_capture
    from gropcap.replay.frames import capture_frames
    from gropcap.replay.kernel import ReplaySession
    _info, batch = read_capture(os.path.join(SAMPLES, name))
    frames, wires, cnr, _ = capture_frames(batch)
    try:
        with ReplaySession(udp_tunnels=tunnels) as s:
            return s.replay(frames, [i // 63 for i in range(len(frames))], wire_lens=wires,
                            csum_not_ready=cnr)
    except GropcapError as e:
        if "cannot create" in str(e):
            pytest.skip(str(e))
        raise


@pytest.mark.root
@live
@pytest.mark.parametrize("name,tunnels,aggregates", [
    ("real_vxlan.pcap", (("vxlan", 4789),), True),
    ("real_vxlan.pcap", (), False),
    ("crafted_vxlan_gpe.pcap", (("vxlan-gpe", 4790),), True),
    ("crafted_vxlan_gpe.pcap", (), False),
    # a socket on another port: the frames stay plain UDP
    ("real_vxlan.pcap", (("vxlan", 8472),), False),
])
def test_udp_tunnel_socket_replay_agrees(name, tunnels, aggregates):
    from gropcap.replay.compare import compare, simulate_replay
    r = _replay(name, tunnels)
    assert r.lost == [] and r.unmatched == []
    assert r.config["udp_tunnels"] == ",".join(f"{k}:{p}" for k, p in tunnels)
    assert (max(u.count for u in r.units) > 1) is aggregates
    packets, sim = simulate_replay(r)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences[:20]])


def test_replay_refuses_unknown_tunnel_kind():
    from gropcap.replay._netns import VethPair
    pair = VethPair(udp_tunnels=(("fou", 5555),))
    with pytest.raises(GropcapError):
        pair.add_udp_tunnel("fou", 5555, "x")   # refused before touching the system


MAX_FRAGS_SEEN = 17     # some native super-packets exceed MAX_SKB_FRAGS (frag_list)


def _vxlan_to_receiver():
    from gropcap.capture import read_capture
    from gropcap.replay.frames import capture_frames
    _info, batch = read_capture(os.path.join(SAMPLES, "real_vxlan.pcap"))
    frames, wires, cnr, _ = capture_frames(batch)
    # the data direction: frames to the receiver (the ACKs go the other way)
    keep = [i for i, f in enumerate(frames) if f[30:34] == frames[0][30:34]]
    return ([frames[i] for i in keep], [wires[i] for i in keep], [cnr[i] for i in keep])


@pytest.mark.root
@live
def test_gro_cells_stage_agrees_with_kernel_native_on():
    """Native GRO on the veth, then the vxlan device's gro_cells: the two-stage model
    builds exactly what the kernel delivers on the vxlan device."""
    from gropcap.replay.cells import replay_gro_cells, simulate_cells
    frames, wires, cnr = _vxlan_to_receiver()
    bursts = [i // 63 for i in range(len(frames))]
    try:
        r = replay_gro_cells(frames, bursts, wire_lens=wires, csum_not_ready=cnr)
    except GropcapError as e:
        pytest.skip(str(e))
    assert r.lost == [] and all(r.units)
    sim = simulate_cells(r)
    assert sorted(r.units) == sorted(sim)
    assert max(r.counts) > MAX_FRAGS_SEEN


@pytest.mark.root
@live
def test_gro_cells_native_off_deferred_cells_split_only_at_jiffies():
    """Native GRO off, a deferred flush on the vxlan device: the cell aggregates; every
    kernel unit lies inside one simulator unit (splits only where a jiffy boundary made
    the deferred completion flush an older entry), and most are equal."""
    from gropcap.replay.cells import replay_gro_cells, simulate_cells
    frames, wires, cnr = _vxlan_to_receiver()
    bursts = [i // 63 for i in range(len(frames))]
    try:
        r = replay_gro_cells(frames, bursts, wire_lens=wires, csum_not_ready=cnr,
                             native_gro=False, cells_flush_timeout_ns=20_000_000)
    except GropcapError as e:
        pytest.skip(str(e))
    assert r.lost == [] and all(r.units)
    sim = simulate_cells(r, native_gro=False)
    owner = {i: k for k, u in enumerate(sim) for i in u}
    for u in r.units:
        assert len({owner[i] for i in u}) == 1, u
    assert len(set(r.units) & set(sim)) >= 0.8 * len(sim)
    assert len(r.units) < len(frames) // 5


def _vxlan_flow(n, k):
    """One inner TCP flow in VXLAN; the outer IPv4 ID jumps every ``k`` frames, so native
    GRO (6.18: outer IDs must be fixed or incrementing) ends a super-packet there, while
    after decapsulation the inner flow is continuous."""
    from tests.craft import eth, ipv4, tcp, tcp_ts, udp, vxlan
    out = []
    for i in range(n):
        inner = eth(ipv4("192.0.2.1", "192.0.2.2", 6,
                         tcp(40000, 5201, seq=1 + 1000 * i, payload=bytes(1000),
                             options=tcp_ts(7, 9)), ident=i + 1),
                    dst=0x020000000012, src=0x020000000011)
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                            udp(50000, 4789, vxlan(inner, 0x1092)),
                            ident=500 + i + (i // k) * 100)))
    return out


@pytest.mark.root
@live
@pytest.mark.parametrize("k,expected", [(1, [47, 1]), (4, [4] * 12), (20, [20, 20, 8])])
def test_gro_cells_remerge_and_frag_list_on_veth(k, expected):
    """Native units of 1 merge again on the vxlan device; units of more than one segment
    built on veth carry a frag_list and never merge again; the unit still held when the
    burst ends reaches the cell in the deferred flush poll, alone."""
    from gropcap.replay.cells import replay_gro_cells, simulate_cells
    if running_kernel() < (6, 18):
        pytest.skip("outer IP ID rule of 6.18 expected")
    try:
        r = replay_gro_cells(_vxlan_flow(48, k), [0] * 48)
    except GropcapError as e:
        pytest.skip(str(e))
    assert r.lost == []
    assert r.counts == expected
    assert [len(u) for u in simulate_cells(r)] == expected


@pytest.mark.root
@live
def test_gro_cells_late_flush_is_replayed_again(monkeypatch):
    """As ``ReplaySession``: a veth whose deferred flush ran late merges two bursts'
    frames into one super-packet, not the replay asked for; the cells replay notices it
    and sends the frames again. The first attempt here has no pause after its bursts,
    so the timer has no time to run."""
    import gropcap.replay.cells as cells
    real, attempts = cells._inject, []

    def hurried(send, sent, polls, kick, pause_s, limit_ns):
        attempts.append(pause_s)
        return real(send, sent, polls, kick, 0.0 if len(attempts) == 1 else pause_s,
                    limit_ns)
    monkeypatch.setattr(cells, "_inject", hurried)
    try:
        r = cells.replay_gro_cells(_vxlan_flow(8, 20), [0] * 4 + [1] * 4)
    except GropcapError as e:
        pytest.skip(str(e))
    assert len(attempts) == 2 and r.attempts == 2, attempts
    assert r.late_flushes == [] and r.slow_bursts == [] and r.lost == []
    assert r.counts == [4, 4]


# --- UDP in a UDP tunnel under a UDP GRO mode ----------------------------------------------

def _vxlan_udp_flow(n, size=1000):
    """One inner UDP flow (checksummed) in VXLAN to port 4789."""
    from tests.craft import eth, ipv4, udp, vxlan
    out = []
    for i in range(n):
        inner = eth(ipv4("192.0.2.1", "192.0.2.2", 17, udp(4000, 5000, bytes(size)),
                         ident=i + 1), dst=0x020000000012, src=0x020000000011)
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                            udp(50000, 4789, vxlan(inner, 0x1092)), ident=500 + i)))
    return out


def _replay_with_feature(frames, tunnels, feature):
    """Replay ``frames`` in one burst with ethtool ``feature`` on the receiving veth."""
    from gropcap.replay._netns import _run
    from gropcap.replay.kernel import ReplaySession
    try:
        with ReplaySession(udp_tunnels=tunnels) as s:
            try:
                _run(["ip", "netns", "exec", s.pair.ns_rx, "ethtool", "-K", s.pair.dev_rx,
                      feature, "on"])
            except GropcapError as e:
                pytest.skip(f"veth cannot turn {feature} on here: {e}")
            return s.replay(frames, [0] * len(frames))
    except GropcapError as e:
        if "cannot create" in str(e):
            pytest.skip(str(e))
        raise


_UDP_FEATURES = [("rx-udp-gro-forwarding", "forward", (5, 12)),
                 ("rx-gro-list", "fraglist", (5, 6))]


@pytest.mark.root
@live
@pytest.mark.parametrize("feature,mode,since", _UDP_FEATURES)
def test_tunnel_socket_inner_udp_replay_agrees(feature, mode, since):
    """A vxlan device's socket and a UDP GRO mode on the veth: the kernel aggregates the
    inner UDP flow (udp4_gro_receive after vxlan_gro_receive / eth_gro_receive /
    inet_gro_receive; no socket on the inner port -> udp_gro_receive_segment), gso_size the
    inner UDP payload; the simulator with the same --udp-gro and --udp-tunnel agrees (it
    delivered them alone as BYPASS_TCP_HEADER before)."""
    from gropcap.replay.compare import compare, simulate_replay
    if running_kernel() < since:
        pytest.skip(f"{feature} GRO is {since[0]}.{since[1]}+, running {running_kernel()}")
    r = _replay_with_feature(_vxlan_udp_flow(20), (("vxlan", 4789),), feature)
    assert r.lost == [] and r.unmatched == []
    assert [u.count for u in r.units] == [20]
    assert r.units[0].gso_size == 1000
    packets, sim = simulate_replay(r, udp_gro=mode)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences[:20]])
    assert list(sim.seg_count) == [20] and sim.seg_gso_size[0] == 1000


@pytest.mark.root
@live
def test_outer_datagram_gso_size_live():
    """No tunnel socket, rx-udp-gro-forwarding: the kernel aggregates the outer UDP
    datagrams; its virtio header gives gso_size = the outer UDP payload (dev_gro_receive:
    skb_gro_len after the outer UDP header) and the packet is the outer headers plus the
    20 outer UDP payloads (udp_gro_complete: uh->len = skb->len - nhoff). The simulator
    gives the same count and gso_size. (The replay's matcher keys a delivered packet by
    its innermost headers, so it matches only the first frame of such a packet: checked
    here on the unit itself, not with compare.)"""
    from gropcap.replay.compare import simulate_replay
    from gropcap.gro.gso import SKB_GSO_UDP_L4
    if running_kernel() < (5, 12):
        pytest.skip(f"rx-udp-gro-forwarding is 5.12+, running {running_kernel()}")
    frames = _vxlan_udp_flow(20)
    r = _replay_with_feature(frames, (), "rx-udp-gro-forwarding")
    outer_payload = len(frames[0]) - 14 - 20 - 8
    assert len(r.units) == 1
    u = r.units[0]
    assert u.gso_known and u.gso_size == outer_payload == 1050
    assert u.gso_type & SKB_GSO_UDP_L4
    assert u.length == 14 + 20 + 8 + 20 * outer_payload
    _packets, sim = simulate_replay(r, udp_gro="forward")
    assert list(sim.seg_count) == [20]
    assert sim.seg_gso_size[0] == u.gso_size
    assert sim.seg_payload_len[0] == 20 * 1000       # inner payload_len, conserved
