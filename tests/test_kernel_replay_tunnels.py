"""Live kernel vs simulator for UDP tunnels with a tunnel socket in the receiving namespace.

The receiving namespace gets a vxlan / vxlan-gpe device (its UDP socket is what
udp4_gro_lookup_skb finds); the simulator gets the same ``udp_tunnels``. Root + netns only:
skipped with the reason elsewhere. GRE/IPIP/SIT/ip6ip6/ip4ip6/ERSPAN samples are replayed
by tests/test_kernel_replay.py::test_simulator_agrees_with_kernel_on_sample.
"""

from __future__ import annotations

import os

import pytest

from gropcap.errors import GropcapError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_pcaps")


def _live_reason():
    from gropcap.replay._netns import check_environment
    try:
        check_environment()
    except GropcapError as e:
        return str(e)
    return None


LIVE_REASON = _live_reason()
live = pytest.mark.skipif(LIVE_REASON is not None,
                          reason=f"live kernel replay unavailable: {LIVE_REASON}")


def _replay(name, tunnels):
    from gropcap.capture import read_capture
    from gropcap.replay.command import capture_frames
    from gropcap.replay.kernel import ReplaySession
    _info, batch = read_capture(os.path.join(SAMPLES, name))
    frames, wires, cnr, _ = capture_frames(batch)
    try:
        with ReplaySession(udp_tunnels=tunnels) as s:
            return s.replay(frames, [i // 64 for i in range(len(frames))], wire_lens=wires,
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
