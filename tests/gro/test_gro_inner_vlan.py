"""Inner VLAN tags of Ethernet-carrying tunnels (issue 13 item 11).

eth_gro_receive (net/ethernet/eth.c) hands an inner 0x8100 / 0x88A8 frame of gretap,
VXLAN and Geneve to vlan_gro_receive (net/8021q/vlan_core.c; vlan.c before it moved),
which compares each tag with compare_vlan_header (include/linux/if_vlan.h): the whole
TCI (PCP, DEI and VID) and the encapsulated type. vlan_gro_receive exists since v4.1
("vlan: Add GRO support for non hardware accelerated vlan"), before the oldest modelled
release (4.4), so no profile switch gates it. The decoders record the first two inner
tags (``inner_vlan_*``); both GRO engines compare them, natively (GRE-TEB; VXLAN/Geneve
with a tunnel socket, reference engine) and at the gro_cells stage, where the tags of the
decapsulated frame are the device's in-band tags.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.decode import fast as fast_decode
from gropcap.decode.reference import decode_batch, decode_frame
from gropcap.errors import ConfigError, GropcapError
from gropcap.gro import engine as fast
from gropcap.gro import reasons as R
from gropcap.gro import reference as ref
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.stages import simulate_stages
from tests.craft import eth, geneve, gre, ipv4, make_batch, tcp, tcp_ts, udp, vxlan
from tests.live import live
from tests.decode.test_decode_parity import assert_same

T0 = 1_700_000_000_000_000_000
SIZE = 1000
VID_A, VID_B = 10, 20


def tags(*pairs) -> tuple[int, bytes]:
    """(first TPID, tag bytes ending in IPv4) for ``(tpid, tci)`` pairs."""
    body = b""
    for k, (_, tci) in enumerate(pairs):
        nxt = pairs[k + 1][0] if k + 1 < len(pairs) else C.ETH_P_IP
        body += struct.pack("!HH", tci, nxt)
    return pairs[0][0], body


def inner_frame(seq: int, vlan: tuple, ident: int) -> bytes:
    """An inner Ethernet frame with in-band tags carrying one TCP segment."""
    tpid, body = tags(*vlan)
    ip = ipv4("192.0.2.1", "192.0.2.2", 6,
              tcp(40000, 5201, seq=seq, payload=bytes(SIZE), options=tcp_ts(7, 9)),
              ident=ident)
    return eth(body + ip, etype=tpid, dst=b"\x02\x00\x00\x00\x00\xbb",
               src=b"\x02\x00\x00\x00\x00\xaa")


def carry(kind: str, inner: bytes, ident: int) -> bytes:
    """``inner`` in a gretap / VXLAN / Geneve packet over IPv4."""
    if kind == "gretap":
        return eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_TEB, inner),
                        ident=ident))
    hdr = vxlan(inner, 42) if kind == "vxlan" else geneve(inner, 42)
    return eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                    udp(50000, 4789 if kind == "vxlan" else 6081, hdr), ident=ident))


def table(frames) -> pa.Table:
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])


def traffic(kind: str, order: str, tcis=(VID_A, VID_B), tpid=C.ETH_P_8021Q):
    """Four segments per inner tag value; each tag value is its own TCP stream with the
    same 5-tuple. ``interleaved``: A B A B ...; ``back_to_back``: A A A A B B B B, B's
    sequence numbers continuing A's (one stream if the tag were not compared)."""
    frames = []      # (tag value, segment number within its stream, sequence number)
    if order == "interleaved":
        for i in range(4):
            for tci in tcis:
                frames.append((tci, i, 1 + SIZE * i))
    else:
        frames = [(tci, i, 1 + SIZE * (4 * k + i)) for k, tci in enumerate(tcis)
                  for i in range(4)]
    # IP IDs follow the sequence numbers (the pre-4.7 rule wants p's ID + count)
    out = [carry(kind, inner_frame(seq, [(tpid, tci)], ident=1 + seq // SIZE),
                 ident=100 + seq // SIZE) for tci, _, seq in frames]
    return table(out), [tci for tci, _, _ in frames]


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), model="ideal", **kw)


SOCKETS = "vxlan:4789,geneve:6081"


def kcfg(kind, **kw):
    """A VXLAN / Geneve device (tunnel socket) for those kinds; gretap needs none, so its
    configuration runs on the numba engine too."""
    return cfg(udp_tunnels=SOCKETS if kind != "gretap" else (), **kw)


def both(t, config):
    """The reference result, after checking the numba engine gives the same bit for bit.
    Native GRO with a UDP tunnel socket is implemented by the reference only
    (``needs_reference``: the numba engine refuses it, the pipeline runs the reference)."""
    r = ref.simulate(t, config)
    r.check_invariants(t.column("payload_len").to_numpy())
    if ref.needs_reference(config):
        with pytest.raises(ConfigError):
            fast.simulate(t, config)
        return r
    f = fast.simulate(t, config)
    for name in ("gro_seg", "gro_role", "reason", "seg_count", "seg_gso_type",
                 "seg_end_reason", "seg_first_packet", "seg_payload_len"):
        assert np.array_equal(getattr(r, name), getattr(f, name)), name
    return r


def units(res, tcis) -> list[tuple[int, list[int]]]:
    """(segment count, tag values of its packets) per super-packet."""
    out = []
    for s in range(res.num_superpackets):
        members = [tcis[i] for i in np.flatnonzero(res.gro_seg == s)]
        out.append((int(res.seg_count[s]), sorted(set(members))))
    return sorted(out)


# --- decoders ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gretap", "vxlan", "geneve"])
def test_decoders_record_inner_tags(kind):
    one = carry(kind, inner_frame(1, [(C.ETH_P_8021Q, 0xA00A)], 1), 1)
    two = carry(kind, inner_frame(1, [(C.ETH_P_8021AD, 0x0064), (C.ETH_P_8021Q, 0x2014)],
                                  1), 1)
    three = carry(kind, inner_frame(1, [(C.ETH_P_8021AD, 1), (C.ETH_P_8021Q, 2),
                                        (C.ETH_P_8021Q, 3)], 1), 1)
    r = decode_frame(one, linktype=1, wire_len=len(one))
    assert (r["inner_eth_type"], r["inner_vlan_depth"], r["inner_vlan_tpid0"],
            r["inner_vlan_tci0"], r["inner_vlan_tpid1"]) == (0x8100, 1, 0x8100, 0xA00A, 0)
    assert r["vlan_depth"] == 0 and r["ip_offset"] == r["tun_offset"] + \
        (4 if kind == "gretap" else 8) + 14 + 4
    r = decode_frame(two, linktype=1, wire_len=len(two))
    assert (r["inner_vlan_depth"], r["inner_vlan_tpid0"], r["inner_vlan_tci0"],
            r["inner_vlan_tpid1"], r["inner_vlan_tci1"]) == (2, 0x88A8, 0x64, 0x8100, 0x2014)
    r = decode_frame(three, linktype=1, wire_len=len(three))
    assert r["inner_vlan_depth"] == 3 and r["inner_vlan_tci1"] == 2   # third: counted only
    assert "eth/vlan/vlan/vlan/ipv4/tcp" in r["encap"]
    # the fast decoder agrees, also on every truncation
    frames = [one, two, three] + [two[:cut] for cut in range(len(two) - SIZE)]
    assert_same(make_batch(frames, wire_lens=[len(f) for f in (one, two, three)]
                           + [len(two)] * (len(frames) - 3)))


def test_decoders_keep_outer_and_inner_tags_apart():
    inner = inner_frame(1, [(C.ETH_P_8021Q, 7)], 1)
    outer_tag = struct.pack("!HH", 99, C.ETH_P_IP)
    f = eth(outer_tag + ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_TEB, inner)),
            etype=C.ETH_P_8021Q)
    r = decode_frame(f, linktype=1, wire_len=len(f))
    assert (r["vlan_depth"], r["vlan_tci0"]) == (1, 99)
    assert (r["inner_vlan_depth"], r["inner_vlan_tci0"]) == (1, 7)
    # a second tunnel's Ethernet (gretap in gretap) is not the outermost tunnel's: not kept
    nested = eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(
        C.ETH_P_TEB, eth(ipv4("203.0.113.1", "203.0.113.2", 47, gre(C.ETH_P_TEB, inner))))))
    r = decode_frame(nested, linktype=1, wire_len=len(nested))
    assert r["encap_depth"] == 2 and r["inner_vlan_depth"] == 0
    assert_same(make_batch([f, nested]))
    assert fast_decode.decode_batch(make_batch([f])).column("inner_vlan_tci0")[0].as_py() == 7


# --- native GRO: gretap on both engines, VXLAN / Geneve with a tunnel socket ---------------

@pytest.mark.parametrize("order", ["interleaved", "back_to_back"])
@pytest.mark.parametrize("kernel", ["4.4", "6.18"])
def test_vlan_gro_receive_inner_tci_splits_gretap_flows_since_4_1(order, kernel):
    t, tcis = traffic("gretap", order)
    r = both(t, cfg(kernel))
    assert units(r, tcis) == [(4, [VID_A]), (4, [VID_B])]


@pytest.mark.parametrize("kind", ["vxlan", "geneve"])
@pytest.mark.parametrize("order", ["interleaved", "back_to_back"])
def test_vlan_gro_receive_inner_tci_splits_udp_tunnel_flows(kind, order):
    t, tcis = traffic(kind, order)
    r = both(t, kcfg(kind))
    assert units(r, tcis) == [(4, [VID_A]), (4, [VID_B])]


def test_vlan_gro_receive_compares_the_whole_inner_tci():
    # compare_vlan_header XORs the whole 16-bit TCI: the same VID with another PCP is
    # another flow
    t, tcis = traffic("gretap", "interleaved", tcis=(VID_A, (5 << 13) | VID_A))
    assert units(both(t, cfg()), tcis) == [(4, [VID_A]), (4, [(5 << 13) | VID_A])]
    # and the same tag merges (the control)
    t, tcis = traffic("gretap", "back_to_back", tcis=(VID_A, VID_A))
    assert units(both(t, cfg()), tcis) == [(8, [VID_A])]


@pytest.mark.parametrize("kind", ["gretap", "vxlan"])
def test_vlan_gro_receive_inner_second_tpid_9100_flushes(kind):
    frames = [carry(kind, inner_frame(1 + SIZE * i, [(C.ETH_P_8021AD, 5), (C.ETH_P_QINQ1, 6)],
                                      i + 1), 100 + i) for i in range(4)]
    r = both(table(frames), kcfg(kind))
    assert r.num_superpackets == 4 and set(r.reason) == {R.BYPASS_NOT_IP}


@pytest.mark.parametrize("kind", ["gretap", "vxlan", "geneve"])
def test_eth_gro_receive_inner_tag_without_config_vlan_8021q_flushes(kind):
    t, _ = traffic(kind, "back_to_back", tcis=(VID_A, VID_A))
    on = both(t, kcfg(kind))
    assert list(on.seg_count) == [8]
    off = both(t, kcfg(kind, vlan_gro=False))
    assert off.num_superpackets == 8 and set(off.reason) == {R.BYPASS_NO_VLAN_GRO}


# --- the gro_cells stage: the decapsulated frame's tags go to vlan_gro_receive -------------

def _stages(t, config, engine):
    st = simulate_stages(t, config, engine=engine)
    for s in st:
        s.check_invariants()
    return st


@pytest.mark.parametrize("kind", ["gretap", "vxlan", "geneve"])
@pytest.mark.parametrize("order", ["interleaved", "back_to_back"])
def test_gro_cells_vlan_gro_receive_on_decapsulated_tags(kind, order):
    # native GRO off on the lower device: each packet reaches the tunnel device alone
    t, tcis = traffic(kind, order)
    config = kcfg(kind, native_gro=False, tunnel_gro=True)
    rs = _stages(t, config, "reference")
    fs = _stages(t, config, "fast")
    for a, b in zip(rs, fs):
        for name in ("gro_seg", "reason", "seg_count", "seg_gso_type", "seg_first_packet"):
            assert np.array_equal(getattr(a.result, name), getattr(b.result, name)), name
    cells = rs[1]
    d = cells.table
    assert set(d.column("vlan_depth").to_pylist()) == {1}
    assert set(d.column("eth_type").to_pylist()) == {C.ETH_P_8021Q}
    assert set(d.column("ip_offset").to_pylist()) == {18}
    assert set(d.column("inner_vlan_depth").to_pylist()) == {0}
    row_tci = d.column("vlan_tci0").to_pylist()
    assert units(cells.result, row_tci) == [(4, [VID_A]), (4, [VID_B])]
    # without CONFIG_VLAN_8021Q the device has no handler for the tags either
    off = _stages(t, config.replace(vlan_gro=False), "reference")[1].result
    assert set(off.reason) == {R.BYPASS_NO_VLAN_GRO}


# --- live: what this host's kernel can show -----------------------------------------------

@pytest.mark.root
@live
def test_live_vxlan_inner_tags_replay_agrees():
    """Inner-tagged VXLAN frames through a veth with a vxlan socket (vxlan_gro_receive ->
    eth_gro_receive). The TCI comparison itself cannot be shown on this host: its kernel
    has no CONFIG_VLAN_8021Q, so no vlan_gro_receive exists and every tagged frame goes up
    alone; the replay simulates with ``vlan_gro`` read from the kernel config
    (``running_kernel_has_vlan_gro``) and must agree frame for frame. An untagged stream
    in the next window is the control (it aggregates)."""
    from gropcap.replay.compare import compare, running_kernel_has_vlan_gro, simulate_replay
    from gropcap.replay.kernel import ReplaySession

    tagged = [carry("vxlan", inner_frame(1 + SIZE * i, [(C.ETH_P_8021Q, tci)],
                                         ident=1 + i), ident=100 + 2 * i + k)
              for i in range(4) for k, tci in enumerate((VID_A, VID_B))]
    plain = [carry("vxlan", eth(ipv4("192.0.2.3", "192.0.2.4", 6, tcp(
        40001, 5201, seq=1 + SIZE * i, payload=bytes(SIZE), options=tcp_ts(7, 9)),
        ident=1 + i)), ident=200 + i) for i in range(4)]
    frames = tagged + plain
    bursts = [0] * len(tagged) + [1] * len(plain)
    try:
        with ReplaySession(udp_tunnels=(("vxlan", 4789),)) as s:
            r = s.replay(frames, bursts)
    except GropcapError as e:
        if "cannot create" in str(e):
            pytest.skip(str(e))
        raise
    assert r.lost == [] and r.unmatched == []
    packets, sim = simulate_replay(r)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences[:20]])
    counts = {u.indices: u.count for u in r.units}
    assert max(c for ix, c in counts.items() if ix[0] >= len(tagged)) > 1   # control
    if not running_kernel_has_vlan_gro():
        assert all(c == 1 for ix, c in counts.items() if ix[0] < len(tagged))
    else:
        assert max(c for ix, c in counts.items() if ix[0] < len(tagged)) > 1
