"""Crafted captures for the encapsulations the bundled samples lack: FOU, GUE, ip6erspan,
VXLAN over IPv6, and the egress feature rules (gro/reference.py, gro/stages.py, egress.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap import egress
from gropcap.gro import gso
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.reference import simulate
from gropcap.gro.stages import simulate_stages, stages_summary
from tests.craft import (erspan2, eth, gre, gue, ipv4, ipv6, make_batch, tcp, tcp_ts, udp,
                         vxlan)

OPTS = DecodeOptions(fou_ports=((5555, C.IPPROTO_IPIP),), gue_ports=(5556,))


def table(frames, opts=OPTS):
    # 10 us apart: one NAPI poll in the napi model (poll_gap 100 us)
    ts = 1_700_000_000_000_000_000 + 10_000 * np.arange(len(frames), dtype=np.int64)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts), opts)])


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def inner_tcp(i, n=1000, flags=C.TCP_FLAG_ACK):
    return ipv4("192.0.2.1", "192.0.2.2", 6, tcp(40000, 5201, seq=1 + n * i, flags=flags,
                                                 payload=bytes(n), options=tcp_ts(7, 9)),
                ident=i + 1)


def run(frames, config, opts=OPTS):
    t = table(frames, opts)
    r = simulate(t, config)
    r.check_invariants(t.column("payload_len").to_numpy())
    return t, r


# --- FOU / GUE ---------------------------------------------------------------------------

def fou_frames(n=4, csum="good"):
    return [eth(ipv4("198.51.100.1", "198.51.100.2", 17, udp(40001, 5555, inner_tcp(i)),
                     ident=10 + i, l4_csum=csum)) for i in range(n)]


def test_fou_ipip_needs_its_socket():
    t, r = run(fou_frames(), cfg())
    assert set(t.column("tun_type").to_pylist()) == {C.TUN_FOU}
    # without the socket the kernel sees plain UDP; the reason stays BYPASS_TUNNEL, as in
    # the fast engine (same delivery)
    assert r.num_superpackets == 4 and set(r.reason) == {R.BYPASS_TUNNEL}
    _, r = run(fou_frames(), cfg(udp_tunnels="fou:5555"))
    assert list(r.seg_count) == [4]
    # udp_gro_complete (checksum present) then ipip_gro_complete via fou_gro_complete
    assert r.seg_gso_type[0] == (gso.SKB_GSO_UDP_TUNNEL_CSUM | gso.SKB_GSO_IPXIP4
                                 | gso.SKB_GSO_TCPV4)
    _, r = run(fou_frames(csum="zero"), cfg(udp_tunnels="fou:5555"))
    assert r.seg_gso_type[0] == gso.SKB_GSO_UDP_TUNNEL | gso.SKB_GSO_IPXIP4 | gso.SKB_GSO_TCPV4


def gue_frames(optionals):
    return [eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                     udp(40001, 5556, gue(inner_tcp(i), C.IPPROTO_IPIP, optional=o)),
                     ident=10 + i)) for i, o in enumerate(optionals)]


def test_gue_optional_fields_compared():
    a, b = bytes(4), b"\x00\x00\x00\x01"
    _, r = run(gue_frames([a, a, a, a]), cfg(udp_tunnels="gue:5556"))
    assert list(r.seg_count) == [4]
    # gue_gro_receive: optional fields byte-identical, else another flow
    _, r = run(gue_frames([a, a, b, b]), cfg(udp_tunnels="gue:5556"))
    assert list(r.seg_count) == [2, 2] and r.reason[2] == R.NO_HELD_PACKET


# --- VXLAN over IPv6 ---------------------------------------------------------------------

def vxlan6_frames(n=4, hlim=(64,)):
    out = []
    for i in range(n):
        inner = eth(inner_tcp(i), dst=0x020000000012, src=0x020000000011)
        out.append(eth(ipv6("2001:db8:ff::1", "2001:db8:ff::2", 17,
                            udp(50000, 4789, vxlan(inner, 42)), hlim=hlim[i % len(hlim)]),
                       etype=C.ETH_P_IPV6))
    return out


def test_vxlan_over_ipv6_outer_hop_limit_rule_per_kernel():
    assert list(run(vxlan6_frames(), cfg(udp_tunnels="vxlan:4789"))[1].seg_count) == [4]
    frames = vxlan6_frames(hlim=(64, 64, 63, 63))
    _, new = run(frames, cfg(udp_tunnels="vxlan:4789"))
    assert list(new.seg_count) == [2, 2] and new.reason[2] == R.FLUSH_OUTER_TTL
    # before 5.18 the hop limit was a flow key: a parallel entry, merged separately
    _, old = run(frames, cfg("5.15", udp_tunnels="vxlan:4789"))
    assert list(old.seg_count) == [2, 2] and old.reason[2] == R.FLUSH_HOP_LIMIT_FLOW


# --- ip6erspan: gro_cells only, and only from 4.17 ---------------------------------------

def ip6erspan_frames(n=6):
    out = []
    for i in range(n):
        mirrored = eth(inner_tcp(i), dst=0x020000000012, src=0x020000000011)
        out.append(eth(ipv6("2001:db8:ff::1", "2001:db8:ff::2", 47,
                            gre(C.ETH_P_ERSPAN, erspan2(mirrored, 0x155), seq=100 + i)),
                       etype=C.ETH_P_IPV6))
    return out


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_ip6erspan_aggregates_only_in_gro_cells_from_4_17(model):
    t = table(ip6erspan_frames())
    assert set(t.column("tun_type").to_pylist()) == {C.TUN_ERSPAN2}
    # 5.10 / mainline 6.18: hard_header_len is the outer stack (832ba596494b), the cell
    # compares the inner TCP sequence number; 505b6d296c48 (stable 6.12.109) restores it
    for kernel, delivered in (("4.16", 6), ("4.17", 1), ("5.10", 6), ("6.18", 6),
                              ("6.12.109", 1)):
        st = simulate_stages(t, cfg(kernel, model=model, tunnel_gro=True))
        for s in st:
            s.check_invariants()
        assert st[0].superpackets_out == 6                  # GRE S flag: no native GRO
        assert stages_summary(st)["delivered"] == delivered, kernel


# --- egress feature rules ----------------------------------------------------------------

def test_fixed_id_super_packets_need_mangleid_for_tso():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1, 2, seq=1 + 500 * i,
                                                      payload=bytes(500)), ident=7))
              for i in range(4)]
    _, r = run(frames, cfg())
    assert r.seg_gso_type[0] == gso.SKB_GSO_TCPV4 | gso.SKB_GSO_TCP_FIXEDID
    args = (r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len)
    assert not egress.egress(*args, features=egress.parse_features("tso")).hardware[0]
    e = egress.egress(*args, features=egress.parse_features("tso,tx-tcp-mangleid-segmentation"))
    assert e.hardware[0] and e.totals()["hardware_segments"] == 4


def test_ecn_bit_per_kernel_and_its_feature():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6,
                       tcp(1, 2, seq=1 + 500 * i, payload=bytes(500),
                           flags=C.TCP_FLAG_ACK | (C.TCP_FLAG_CWR if i == 0 else 0)),
                       ident=i)) for i in range(3)]
    _, old = run(frames, cfg("6.6"))
    assert old.seg_count[0] == 3 and old.seg_gso_type[0] & gso.SKB_GSO_TCP_ECN
    args = (old.seg_count, old.seg_gso_size, old.seg_gso_type, old.seg_payload_len)
    assert not egress.egress(*args, features=egress.parse_features("tso")).hardware[0]
    assert egress.egress(*args, features=egress.parse_features(
        "tso,tx-tcp-ecn-segmentation")).hardware[0]


def test_encap_forwarding_keeps_gre_bits_and_counts_segments():
    frames = [eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_IP, inner_tcp(i)),
                       ident=0x100 + i)) for i in range(5)]
    t, r = run(frames, cfg())
    hdr, df, ihl = egress.egress_headers(t, r.seg_first_packet, "encap")
    assert list(hdr) == [20 + 4 + 20 + 32]
    e = egress.egress(r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len,
                   features=egress.parse_features("tso,tx-gre-segmentation"), hdr_len=hdr,
                   df=df, ip_hdr_len=ihl, mtu=1500)
    assert e.totals() == {"superpackets": 1, "segments": 5, "hardware_segments": 5,
                          "software_segments": 0, "superpackets_hardware": 1,
                          "superpackets_software": 0, "dropped": 0, "fragmented": 0,
                          "unsegmented": 0}
    hdr_d, _, _ = egress.egress_headers(t, r.seg_first_packet, "decap")
    assert list(hdr_d) == [20 + 32]
    # a 1050-byte egress MTU: the 1076-byte outer segments do not fit; DF -> dropped
    e = egress.egress(r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len,
                   hdr_len=hdr, df=df, ip_hdr_len=ihl, mtu=1050)
    assert e.totals()["dropped"] == 1 and e.totals()["segments"] == 0
    # decapsulated, the 1052-byte inner segments still exceed 1050 -> dropped as well
    e = egress.egress(r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len,
                   scenario="decap", hdr_len=hdr_d, df=np.zeros(1, bool),
                   ip_hdr_len=np.full(1, 20), mtu=1050)
    assert e.totals()["fragmented"] == 1 and list(e.segments) == [10]
