"""gro/gso.py: SKB_GSO_* bit values (include/linux/skbuff.h) and the completion-time gso_type."""

from __future__ import annotations

import doctest

import pytest

from gropcap.gro import coalesced as CO
from gropcap.gro import gso

# include/linux/skbuff.h enum (bits 0..19 stable since 5.x; 6.18 adds bits 30/31 and turns
# bit 3 into the internal __SKB_GSO_TCP_FIXEDID)
KERNEL_BITS = {
    "SKB_GSO_TCPV4": 0, "SKB_GSO_DODGY": 1, "SKB_GSO_TCP_ECN": 2,
    "SKB_GSO_TCP_FIXEDID_LEGACY": 3, "SKB_GSO_TCPV6": 4, "SKB_GSO_FCOE": 5,
    "SKB_GSO_GRE": 6, "SKB_GSO_GRE_CSUM": 7, "SKB_GSO_IPXIP4": 8, "SKB_GSO_IPXIP6": 9,
    "SKB_GSO_UDP_TUNNEL": 10, "SKB_GSO_UDP_TUNNEL_CSUM": 11, "SKB_GSO_PARTIAL": 12,
    "SKB_GSO_TUNNEL_REMCSUM": 13, "SKB_GSO_SCTP": 14, "SKB_GSO_ESP": 15, "SKB_GSO_UDP": 16,
    "SKB_GSO_UDP_L4": 17, "SKB_GSO_FRAGLIST": 18, "SKB_GSO_TCP_ACCECN": 19,
    "SKB_GSO_TCP_FIXEDID": 30, "SKB_GSO_TCP_FIXEDID_INNER": 31,
}


@pytest.mark.parametrize("name,bit", sorted(KERNEL_BITS.items()))
def test_bit_values(name, bit):
    assert getattr(gso, name) == 1 << bit


def test_inner_fixedid_is_outer_shifted():
    # tcp4_gro_complete: gso_type |= ip_fixedid * SKB_GSO_TCP_FIXEDID
    assert gso.SKB_GSO_TCP_FIXEDID_INNER == gso.SKB_GSO_TCP_FIXEDID << 1


@pytest.mark.parametrize("kernel,cwr_bit", [((6, 14), gso.SKB_GSO_TCP_ECN),
                                            ((6, 15), gso.SKB_GSO_TCP_ACCECN)])
def test_cwr_bit_by_version(kernel, cwr_bit):
    assert gso.gso_type_for(kernel, 4, cwr=True) == gso.SKB_GSO_TCPV4 | cwr_bit


@pytest.mark.parametrize("kernel,fixed,bits", [
    ((4, 6), 1, 0), ((4, 7), 1, gso.SKB_GSO_TCP_FIXEDID_LEGACY),
    ((6, 17), 1, gso.SKB_GSO_TCP_FIXEDID_LEGACY), ((6, 18), 1, gso.SKB_GSO_TCP_FIXEDID),
    ((6, 18), 2, gso.SKB_GSO_TCP_FIXEDID_INNER),
    ((6, 18), 3, gso.SKB_GSO_TCP_FIXEDID | gso.SKB_GSO_TCP_FIXEDID_INNER),
])
def test_fixedid_bits(kernel, fixed, bits):
    assert gso.fixedid_bits(kernel, fixed) == bits


def test_tunnel_bits():
    assert gso.gso_type_for((6, 18), 4, tun_type=1) == gso.SKB_GSO_GRE | gso.SKB_GSO_TCPV4
    assert gso.gso_type_for((6, 18), 6, tun_type=6) == gso.SKB_GSO_IPXIP4 | gso.SKB_GSO_TCPV6
    assert gso.gso_type_for((6, 18), 4, tun_type=8) == gso.SKB_GSO_IPXIP6 | gso.SKB_GSO_TCPV4
    assert gso.gso_type_for((6, 18), 6) == gso.SKB_GSO_TCPV6


def test_segments_and_names():
    assert gso.gso_segs(1448 * 3, 1448) == 3
    assert gso.gso_segs(1448 * 3 + 1, 1448) == 4
    assert gso.gso_segs(500, 0) == 1
    assert gso.gso_type_names(gso.SKB_GSO_TCPV6 | gso.SKB_GSO_TCP_ACCECN) == ["tcpv6",
                                                                             "tcp_accecn"]


def test_doctests():
    assert doctest.testmod(gso).failed == 0


# --- coalesced input (captured after TSO/GRO) ---------------------------------------------

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from craft import make_batch, tcp_ts  # noqa: E402
from tests.gro.test_gro_reference import frames_table, v4, v6  # noqa: E402

from gropcap import constants as C  # noqa: E402
from gropcap.decode.reference import decode_batch  # noqa: E402


def test_big_frame_takes_mtu_default():
    t = frames_table([v4(0, 3 * 1448, options=tcp_ts(1, 2)), v4(5000, 0)])
    ci = CO.coalesced_input(t)
    assert ci.is_gso.tolist() == [True, False]
    assert ci.gso_size.tolist() == [1448, 0] and ci.segs.tolist() == [3, 1]
    assert ci.source.tolist() == [CO.GSO_SIZE_FROM_MTU, CO.GSO_SIZE_NONE]
    t6 = frames_table([v6(0, 2 * 1428 + 5, options=tcp_ts(1, 2))])
    ci = CO.coalesced_input(t6)
    assert ci.gso_size.tolist() == [1428] and ci.segs.tolist() == [3]


def test_peer_syn_mss_wins():
    from craft import eth, ipv4, tcp
    syn_ack = eth(ipv4("192.168.1.100", "192.168.1.200", 6,
                       tcp(8000, 1500, flags=C.TCP_FLAG_SYN | C.TCP_FLAG_ACK,
                           options=b"\x02\x04\x05\x00")))          # MSS 1280
    t = frames_table([syn_ack, v4(0, 4000, options=tcp_ts(1, 2))])
    ci = CO.coalesced_input(t)
    assert ci.gso_size.tolist() == [0, 1280 - 12] and ci.segs.tolist() == [1, 4]
    assert ci.source[1] == CO.GSO_SIZE_FROM_SYN


def test_flow_mode_and_pcapng_flag():
    frames = [v4(0, 1000), v4(1000, 1000), v4(2000, 900), v4(2900, 2500)]
    batch = make_batch(frames)
    flags = np.zeros(4, np.uint32)
    flags[2] = C.EPB_FLAG_TCP_SEG_OFFLOAD
    # (RecordBatch overrides __len__, so NamedTuple._replace cannot rebuild it)
    fields = {f: getattr(batch, f) for f in batch._fields}
    fields["epb_flags"] = flags
    t = pa.Table.from_batches([decode_batch(type(batch)(**fields))])
    ci = CO.coalesced_input(t)
    assert ci.is_gso.tolist() == [False, False, True, True]
    assert ci.gso_size.tolist() == [0, 0, 1000, 1000] and ci.segs.tolist() == [1, 1, 1, 3]
    assert ci.source.tolist()[2:] == [CO.GSO_SIZE_FROM_FLOW] * 2


# --- coalesced frames arriving as TCP GSO skbs (opt-in: simulate(coalesced=...)) -------------

from tests.gro.test_gro_reference import config, names  # noqa: E402

from gropcap.gro.reference import simulate  # noqa: E402


def _run_gso(frames, coalesced=True):
    t = frames_table(frames)
    res = simulate(t, config(), coalesced=coalesced)
    ci = CO.coalesced_input(t) if coalesced is True else coalesced
    # the contract's invariants with segments instead of packets
    assert int(res.seg_count.sum()) == int(ci.segs.sum())
    assert int(res.seg_payload_len.sum()) == int(t.column("payload_len").to_numpy().sum())
    multi = res.seg_count > 1
    gs, cnt = res.seg_gso_size[multi].astype(int), res.seg_count[multi].astype(int)
    assert ((gs * (cnt - 1) < res.seg_payload_len[multi])
            & (res.seg_payload_len[multi] <= gs * cnt)).all()
    return res


TS = tcp_ts(1, 2)


def test_coalesced_frame_is_held_and_merges_with_following_segments():
    # the next frame's IP ID must be p.id + count (the fixed-ID decision is taken only
    # at count == 1, which a coalesced head never has)
    res = _run_gso([v4(0, 3 * 1448, options=TS), v4(3 * 1448, 1448, options=TS, ident=3)])
    assert res.seg_count.tolist() == [4] and res.seg_gso_size.tolist() == [1448]
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED"]
    res = _run_gso([v4(0, 3 * 1448, options=TS), v4(3 * 1448, 1448, options=TS, ident=0)])
    assert names(res.reason) == ["NO_HELD_PACKET", "FLUSH_IP_ID"]


def test_coalesced_frame_with_short_tail_goes_up_at_once():
    res = _run_gso([v4(0, 3 * 1448 - 100, options=TS), v4(3 * 1448 - 100, 1448, options=TS)])
    assert names(res.reason) == ["NOT_HELD_GSO_SHORT", "NO_HELD_PACKET"]
    assert res.seg_count.tolist() == [3, 1] and res.seg_gso_size.tolist() == [1448, 0]
    assert res.seg_gso_type[0] & gso.SKB_GSO_TCPV4


def test_coalesced_frame_merges_onto_a_single_segment():
    res = _run_gso([v4(0, 1448, options=TS, ident=0), v4(1448, 2 * 1448, options=TS, ident=1),
                    v4(3 * 1448, 500, options=TS, ident=3)])
    assert res.seg_count.tolist() == [4] and res.seg_payload_len.tolist() == [3 * 1448 + 500]
    assert names(res.seg_end_reason) == ["END_SHORT_SEGMENT"]


def test_coalesced_frame_with_other_gso_size_is_refused():
    t = frames_table([v4(0, 1000, options=TS), v4(1000, 2 * 1448, options=TS)])
    ci = CO.CoalescedInput(np.array([False, True]), np.array([0, 1448], np.int32),
                            np.array([1, 2], np.int32), np.array([0, 3], np.uint8))
    res = _run_gso([v4(0, 1000, options=TS), v4(1000, 2 * 1448, options=TS)], ci)
    assert names(res.reason) == ["NO_HELD_PACKET", "FLUSH_GSO_SIZE"]
    assert res.seg_count.tolist() == [1, 2]
    assert t.num_rows == 2


def test_without_coalesced_the_contract_holds():
    t = frames_table([v4(0, 3 * 1448, options=TS), v4(3 * 1448, 1448, options=TS)])
    res = simulate(t, config())
    res.check_invariants(t.column("payload_len").to_numpy())
    # the big frame is then one plain segment: its payload becomes gso_size
    assert res.seg_count.tolist() == [2] and res.seg_gso_size.tolist() == [3 * 1448]
