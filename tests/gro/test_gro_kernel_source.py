"""Rules read in the kernel source per release (issue 13): each test names the kernel
function and the release it follows (gro/reference.py, gro/engine.py, gro/stages.py,
gro/config.py). Rules both engines implement are checked on both."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap import egress
from gropcap.gro import gso
from gropcap.decode.reference import decode_batch
from gropcap.gro import engine as fast
from gropcap.gro import reasons as R
from gropcap.gro import reference as ref
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.stages import ecn_decapsulate, simulate_stages, stages_summary
from tests.craft import eth, gre, ipv4, ipv6, make_batch, tcp, tcp_ts, udp, vxlan, vxlan_gpe

T0 = 1_700_000_000_000_000_000


def table(frames):
    ts = T0 + 10_000 * np.arange(len(frames), dtype=np.int64)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def both(t, config, **kw):
    """Reference result, after checking the numba engine gives the same, field by field."""
    r = ref.simulate(t, config, **kw)
    r.check_invariants(t.column("payload_len").to_numpy())
    f = fast.simulate(t, config, **kw)
    for name in ("gro_seg", "gro_role", "reason", "seg_count", "seg_gso_type",
                 "seg_end_reason", "seg_first_packet", "seg_payload_len"):
        assert np.array_equal(getattr(r, name), getattr(f, name)), name
    return r


def inner4(i, n=1000, flags=C.TCP_FLAG_ACK, ident=None, seq=None, tos=0, ttl=64):
    return ipv4("192.0.2.1", "192.0.2.2", 6,
                tcp(40000, 5201, seq=1 + n * i if seq is None else seq, flags=flags,
                    payload=bytes(n), options=tcp_ts(7, 9)),
                ident=i + 1 if ident is None else ident, tos=tos, ttl=ttl)


def inner6(i, n=1000):
    return ipv6("2001:db8:1::1", "2001:db8:1::2", 6,
                tcp(40000, 5201, seq=1 + n * i, payload=bytes(n), options=tcp_ts(7, 9)))


# --- item 9: ip6ip6 / ip4ip6 from 4.7 (inet6_offloads[41] / [4]) ---------------------------

@pytest.mark.parametrize("inner", ["ip6ip6", "ip4ip6"])
def test_ipv6_gro_receive_ip6ip6_ip4ip6_handlers_from_4_7(inner):
    if inner == "ip6ip6":
        frames = [eth(ipv6("2001:db8:ff::1", "2001:db8:ff::2", 41, inner6(i)),
                      etype=C.ETH_P_IPV6) for i in range(4)]
    else:
        frames = [eth(ipv6("2001:db8:ff::1", "2001:db8:ff::2", 4, inner4(i)),
                      etype=C.ETH_P_IPV6) for i in range(4)]
    t = table(frames)
    assert set(t.column("tun_type").to_pylist()) <= {C.TUN_IP6IP6, C.TUN_IP4IP6}
    old = both(t, cfg("4.6"))
    assert old.num_superpackets == 4 and set(old.reason) == {R.BYPASS_NO_L4_OFFLOAD}
    new = both(t, cfg("4.7"))
    assert list(new.seg_count) == [4]
    assert new.seg_gso_type[0] & gso.SKB_GSO_IPXIP6


# --- item 9: napi_defer_hard_irqs exists from 5.7 ------------------------------------------

def test_napi_defer_hard_irqs_knob_from_5_7(tmp_path):
    # 6f8b12d661d0 (v5.7): before it the sysfs knob does not exist, so none is in force
    assert cfg("5.6", napi_defer_hard_irqs=2).napi_defer_hard_irqs == 0
    assert cfg("5.7", napi_defer_hard_irqs=2).napi_defer_hard_irqs == 2
    from click.testing import CliRunner

    from gropcap.cli import main
    path = tmp_path / "one.pcap"
    _write_pcap(path, _tcp(2))
    r = CliRunner().invoke(main, ["analyze", str(path), "--kernel", "5.6",
                                  "--napi-defer-hard-irqs", "2", "--format", "json"])
    assert r.exit_code != 0 and "5.7" in r.output
    r = CliRunner().invoke(main, ["analyze", str(path), "--kernel", "5.7",
                                  "--napi-defer-hard-irqs", "2", "--format", "json"])
    assert r.exit_code == 0, r.output


# --- item 3: ipip6_rcv -> netif_rx: SIT devices have no gro_cells --------------------------

@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_sit_ipip6_rcv_netif_rx_has_no_gro_cells(engine):
    sit = [eth(ipv4("198.51.100.1", "198.51.100.2", 41, inner6(i), ident=10 + i))
           for i in range(4)]
    ipip = [eth(ipv4("198.51.100.1", "198.51.100.2", 4, inner4(i), ident=10 + i))
            for i in range(4)]
    for frames, stage2 in ((sit, 4), (ipip, 1)):
        t = table(frames)
        st = simulate_stages(t, cfg(native_gro=False, tunnel_gro=True), engine=engine)
        for s in st:
            s.check_invariants()
        assert st[1].packets_in == 4
        assert st[1].superpackets_out == stage2
        if stage2 == 4:
            assert not st[1].gro.any()
            assert set(st[1].result.reason) == {R.BYPASS_GRO_DISABLED}


# --- item 4: IP_ECN_decapsulate before gro_cells_receive ----------------------------------

def test_inet_ecn_decapsulate_table():
    outer = np.array([0, 1, 2, 3, 3, 3, 1, 1, 2])
    inner = np.array([0, 0, 0, 0, 2, 1, 2, 1, 1])
    tos, drop = ecn_decapsulate(outer, inner, ect1=True)
    assert drop.tolist() == [False, False, False, True, False, False, False, False, False]
    assert tos.tolist() == [0, 0, 0, 0, 3, 3, 1, 1, 1]
    # before v5.7 no ECT(1) propagation: ECT(0) under ECT(1) stays ECT(0)
    tos, _ = ecn_decapsulate(outer, inner, ect1=False)
    assert tos[6] == 2


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_ip_tunnel_rcv_ecn_decapsulation_in_the_second_stage(engine):
    # GRE units (native GRO off: one unit per packet); the third has outer CE over an
    # ECT(0) inner header: ip_tunnel_rcv marks the inner CE, so it no longer merges with
    # the others (TOS compare), and the fifth (outer CE over Not-ECT) is dropped
    frames = []
    for i, (otos, itos) in enumerate([(2, 2), (2, 2), (3, 2), (2, 2), (3, 0)]):
        frames.append(eth(ipv4("198.51.100.1", "198.51.100.2", 47,
                               gre(C.ETH_P_IP, inner4(i, tos=itos)), ident=10 + i,
                               tos=otos)))
    t = table(frames)
    st = simulate_stages(t, cfg(native_gro=False, tunnel_gro=True), engine=engine)
    for s in st:
        s.check_invariants()
    assert st[1].dropped.tolist() == [4]
    assert st[1].packets_in == 4
    assert st[1].table.column("ip_tos").to_pylist() == [2, 2, 3, 2]
    r = st[1].result
    assert list(r.seg_count) == [2, 1, 1]
    assert r.reason[2] == R.FLUSH_ECN
    d = stages_summary(st)
    assert d["stages"]["gro_cells"]["ecn_dropped"] == 1
    assert d["delivered"] == 3


# --- item 5: skb_gro_receive above GRO_LEGACY_MAX_SIZE only for TCP -----------------------

def test_skb_gro_receive_big_only_for_tcp_from_6_3():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(4000, 5000, bytes(1400)),
                       ident=1 + i)) for i in range(64)]
    t = table(frames)
    r = both(t, cfg("6.18", udp_gro="forward", gro_ipv4_max_size=131072))
    # p->len (whole first packet) + 1400 per merged datagram stops below 65536
    first = 20 + 8 + 1400
    expected = 1 + max(k for k in range(64) if first + k * 1400 < 65536)
    assert r.seg_count[0] == expected < 64
    assert r.reason[expected] == R.FLUSH_SIZE_LIMIT


def test_skb_gro_receive_ipv6_nexthdr_tcp_5_19_to_6_2():
    frames = [eth(ipv6("2001:db8::1", "2001:db8::2", 17, udp(4000, 5000, bytes(1400))),
                  etype=C.ETH_P_IPV6) for _ in range(64)]
    t = table(frames)
    r = both(t, cfg("6.1", udp_gro="forward", gro_max_size=131072))
    assert r.seg_count[0] < 64 and R.FLUSH_SIZE_LIMIT in r.reason


# --- item 6: VXLAN-GPE GRO from 6.5, GPE sockets from 4.7 ---------------------------------

def _gpe_frames(n=4, np_=C.GPE_NP_IPV4):
    out = []
    for i in range(n):
        payload = inner4(i) if np_ == C.GPE_NP_IPV4 else eth(inner4(i))
        out.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                            udp(50000, 4790, vxlan_gpe(payload, 7, np_)),
                            ident=10 + i, l4_csum="zero")))
    return out


@pytest.mark.parametrize("kernel,expected", [("6.5", [4]), ("6.18", [4]),
                                             ("6.4", [1, 1, 1, 1]), ("4.7", [1, 1, 1, 1])])
def test_vxlan_gpe_gro_receive_from_6_5(kernel, expected):
    t = table(_gpe_frames())
    r = both(t, cfg(kernel, udp_tunnels="vxlan-gpe:4790"))
    assert list(r.seg_count) == expected
    if expected != [4]:
        # vxlan_gro_receive -> eth_gro_receive finds no handler: flush
        assert set(r.reason) == {R.BYPASS_TUNNEL}


def test_vxlan_gpe_ethernet_payload_aggregates_before_6_5():
    t = table(_gpe_frames(np_=C.GPE_NP_ETHERNET))
    assert list(both(t, cfg("6.4", udp_tunnels="vxlan-gpe:4790")).seg_count) == [4]


def test_vxlan_gpe_socket_needs_4_7():
    t = table(_gpe_frames())
    r = both(t, cfg("4.6", udp_tunnels="vxlan-gpe:4790"))
    assert set(r.reason) == {R.BYPASS_UDP_NO_GRO}       # e1e5314de08b: no GPE before 4.7


# --- item 8: no tunnel socket + UDP GRO mode: udp_gro_receive_segment on the outer UDP ----

@pytest.mark.parametrize("mode", ["forward", "fraglist"])
def test_udp_gro_receive_segment_on_outer_udp_without_tunnel_socket(mode):
    frames = [eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                       udp(50000, 4789, vxlan(eth(inner4(i)), 5)), ident=10 + i,
                       l4_csum="good")) for i in range(4)]
    t = table(frames)
    r = both(t, cfg(udp_gro=mode))
    assert list(r.seg_count) == [4]
    gt = r.seg_gso_type[0]
    assert gt & gso.SKB_GSO_UDP_L4 and not gt & gso.SKB_GSO_UDP_TUNNEL
    assert bool(gt & gso.SKB_GSO_FRAGLIST) is (mode == "fraglist")
    # gso_size: the whole outer UDP payload of the first datagram
    assert r.seg_gso_size[0] == len(vxlan(eth(inner4(0)), 5))
    zero = [eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                     udp(50000, 4789, vxlan(eth(inner4(i)), 5)), ident=10 + i,
                     l4_csum="zero")) for i in range(4)]
    r = both(table(zero), cfg(udp_gro=mode))
    assert set(r.reason) == {R.NOT_HELD_UDP_ZERO_CSUM}
    # off: no UDP GRO at all
    assert set(both(t, cfg()).reason) == {R.BYPASS_UDP_NO_GRO}


# --- item 10: UDP fraglist merges with skb_gro_receive_list --------------------------------

def test_udp_fraglist_skb_gro_receive_list_whole_length_no_gro_max_size():
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(4000, 5000, bytes(1400)),
                       ident=1 + i)) for i in range(64)]
    t = table(frames)
    whole = 20 + 8 + 1400
    # skb_gro_receive_list: p->len + skb->len >= 65536, skb->len from the IP header
    # j merges done: p->len = whole + j * (8 + 1400); the next one needs p->len + whole
    merged = 2 + max(j for j in range(64) if whole + j * (8 + 1400) + whole < 65536)
    r = both(t, cfg(udp_gro="fraglist", gro_max_size=16000, gro_ipv4_max_size=16000))
    assert r.seg_count[0] == merged
    assert r.reason[merged] == R.FLUSH_SIZE_LIMIT
    # skb_gro_receive (forward) obeys gro_max_size on payload lengths
    fwd = both(t, cfg(udp_gro="forward", gro_max_size=16000, gro_ipv4_max_size=16000))
    assert fwd.seg_count[0] == 1 + max(k for k in range(64) if whole + k * 1400 < 16000)


# --- item 7 (+ 9, strip_tunnel_gso_on_decap): gso_type bits survive decapsulation ---------

def _gre_units(kernel):
    # fixed inner IPv4 IDs with DF (6.18: SKB_GSO_TCP_FIXEDID_INNER), outer IDs increment;
    # before 4.7 only incrementing inner IDs merge
    fixed = KernelProfile.parse(kernel).fixed_id_support
    frames = [eth(ipv4("198.51.100.1", "198.51.100.2", 47,
                       gre(C.ETH_P_IP, inner4(i, ident=77 if fixed else None)),
                       ident=10 + i)) for i in range(4)]
    t = table(frames)
    return t, simulate_stages(t, cfg(kernel, tunnel_gro=True), engine="reference")


@pytest.mark.parametrize("kernel", ["4.5", "4.6", "5.10", "6.1", "6.18"])
def test_iptunnel_pull_offloads_keeps_stage_one_gso_bits(kernel):
    t, st = _gre_units(kernel)
    native, cells = st[0].result, st[1].result
    assert list(native.seg_count) == [4] and list(cells.seg_count) == [4]
    stage1 = int(native.seg_gso_type[0])
    assert stage1 & gso.SKB_GSO_GRE
    # v4.6 (b311341e0bd9) clears NETIF_F_GSO_ENCAP_ALL; before, the GRE bit stays
    strip = KernelProfile.parse(kernel).strip_tunnel_gso_on_decap
    expected = stage1 & ~gso.GSO_ENCAP_ALL if strip else stage1
    assert int(cells.seg_gso_type[0]) == expected
    if KernelProfile.parse(kernel).fixed_id_support:
        fixed = gso.SKB_GSO_TCP_FIXEDID_INNER if kernel == "6.18" else \
            gso.SKB_GSO_TCP_FIXEDID_LEGACY
        assert int(cells.seg_gso_type[0]) & fixed
    fast_st = simulate_stages(t, cfg(kernel, tunnel_gro=True), engine="fast")
    assert np.array_equal(fast_st[1].result.seg_gso_type, cells.seg_gso_type)


# --- dev_gro_receive: arriving GSO skbs flushed before 5eddb24901ee (v5.19) ----------------

@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("kernel,stage2", [("5.18", [2, 2]), ("6.1", [4])])
def test_dev_gro_receive_flushes_gso_skbs_before_5_19(engine, kernel, stage2):
    # the outer TTL changes in the middle: two first-stage units; after decapsulation
    # their inner headers continue, so the gro_cells stage may merge them (6.1), unless
    # dev_gro_receive sets flush = skb_is_gso(skb) (5.18)
    # (fixed inner IDs with DF: 6.1's flush_id rule lets two such units merge)
    frames = [eth(ipv4("198.51.100.1", "198.51.100.2", 47,
                       gre(C.ETH_P_IP, inner4(i, ident=77)),
                       ident=10 + i, ttl=64 if i < 2 else 63)) for i in range(4)]
    t = table(frames)
    st = simulate_stages(t, cfg(kernel, tunnel_gro=True), engine=engine)
    for s in st:
        s.check_invariants()
    assert list(st[0].result.seg_count) == [2, 2]
    assert list(st[1].result.seg_count) == stage2
    if stage2 == [2, 2]:
        assert R.NOT_HELD_FRAG_LIST in st[1].result.reason


# --- item 11: an inner 0x9100 TPID has no packet_offload ------------------------------------

def test_eth_gro_receive_inner_9100_tpid_flushes():
    def frame(i, tpid):
        tag = bytes([0x00, 0x05]) + C.ETH_P_IP.to_bytes(2, "big")
        inner = eth(tag + inner4(i), etype=tpid)
        return eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_TEB, inner),
                        ident=10 + i))
    bad = both(table([frame(i, C.ETH_P_QINQ1) for i in range(4)]), cfg())
    assert bad.num_superpackets == 4 and set(bad.reason) == {R.BYPASS_NOT_IP}
    good = both(table([frame(i, C.ETH_P_8021Q) for i in range(4)]), cfg())
    assert list(good.seg_count) == [4]


# --- item 1: TCP fraglist GRO (v6.10) -----------------------------------------------------

def _tcp(n, flags=None, size=1000, seqs=None, ttls=None):
    out = []
    for i in range(n):
        f = C.TCP_FLAG_ACK if flags is None else flags[i]
        seq = 1 + size * i if seqs is None else seqs[i]
        ttl = 64 if ttls is None else ttls[i]
        out.append(eth(ipv4("10.0.0.1", "10.0.0.2", 6,
                            tcp(40000, 5201, seq=seq, flags=f, payload=bytes(size),
                                options=tcp_ts(7, 9)), ident=1 + i, ttl=ttl)))
    return out


FWD = dict(rx_gro_list=True, tcp_local_socket=False)


def test_tcp_fraglist_needs_rx_gro_list_no_socket_and_6_10():
    assert not ref.needs_reference(cfg(**FWD))          # both engines implement it
    assert not cfg(rx_gro_list=True).tcp_fraglist
    assert not cfg("6.9", **FWD).tcp_fraglist
    assert cfg("6.10", **FWD).tcp_fraglist
    assert cfg().to_dict() == GroConfig().to_dict()
    assert cfg(**FWD).to_dict()["rx_gro_list"] is True


def test_tcp_gro_receive_is_flist_merges_with_fraglist_gso_type():
    t = table(_tcp(4))
    r = both(t, cfg("6.10", **FWD))
    assert list(r.seg_count) == [4]
    assert r.seg_gso_type[0] == gso.SKB_GSO_FRAGLIST | gso.SKB_GSO_TCPV4
    # a local socket (or 6.9): normal GRO, no FRAGLIST
    assert both(t, cfg("6.10", rx_gro_list=True)).seg_gso_type[0] & \
        gso.SKB_GSO_FRAGLIST == 0
    assert both(t, cfg("6.9", **FWD)).seg_gso_type[0] & gso.SKB_GSO_FRAGLIST == 0


def test_tcp_gro_receive_is_flist_whole_flag_word():
    A, P = C.TCP_FLAG_ACK, C.TCP_FLAG_ACK | C.TCP_FLAG_PSH
    t = table(_tcp(5, flags=[A, A, P, A, A]))
    assert list(both(t, cfg("6.18")).seg_count) == [3, 2]
    r = both(t, cfg("6.18", **FWD))
    # PSH differs from p's flag word: p completes, the PSH segment goes up alone
    assert list(r.seg_count) == [2, 1, 2]
    assert r.reason[2] == R.FLUSH_TCP_FLAGS


def test_tcp_gro_receive_is_flist_64_segments():
    t = table(_tcp(70, size=100))
    r = both(t, cfg("6.18", **FWD))
    assert list(r.seg_count) == [64, 6]
    assert r.reason[64] == R.FLUSH_MAX_SEGS


def test_tcp_gro_receive_is_flist_keeps_the_normal_checks():
    # the is_flist branch comes after the sequence, size and IP-header checks (confirmed
    # live on 6.18: out-of-order and TTL-changing flows split as with normal GRO)
    for kw in (dict(seqs=[1, 3001, 1001, 2001]), dict(ttls=[64, 64, 63, 63])):
        t = table(_tcp(4, **kw))
        normal = both(t, cfg("6.18"))
        flist = both(t, cfg("6.18", **FWD))
        assert list(flist.seg_count) == list(normal.seg_count) != [4]
        assert list(flist.reason) == list(normal.reason)


def test_tcp_gro_receive_is_flist_skb_gro_receive_list_limit():
    t = table(_tcp(64, size=1400))
    r = both(t, cfg("6.18", gro_max_size=131072, gro_ipv4_max_size=131072, **FWD))
    whole = 20 + 32 + 1400
    merged = 2 + max(j for j in range(64) if whole + j * 1400 + whole < 65536)
    assert r.seg_count[0] == merged and r.reason[merged] == R.FLUSH_SIZE_LIMIT


def test_cli_rx_gro_list_tcp_forwarded(tmp_path):
    import json

    from click.testing import CliRunner

    from gropcap.cli import main

    A, P = C.TCP_FLAG_ACK, C.TCP_FLAG_ACK | C.TCP_FLAG_PSH
    frames = _tcp(5, flags=[A, A, P, A, A])
    path = tmp_path / "psh.pcap"
    _write_pcap(path, frames)
    out = {}
    for extra in ([], ["--rx-gro-list", "--tcp-forwarded"],
                  ["--rx-gro-list", "--tcp-local-socket"]):
        r = CliRunner().invoke(main, ["analyze", str(path), "--model", "ideal", "--format",
                                      "json", "--kernel", "6.12", *extra])
        assert r.exit_code == 0, r.output
        out[" ".join(extra)] = json.loads(r.stdout)["models"]["ideal"]["superpackets_out"]
    assert out == {"": 2, "--rx-gro-list --tcp-forwarded": 3,
                   "--rx-gro-list --tcp-local-socket": 2}


def _write_pcap(path, frames):
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000, 10 * i, len(fr), len(fr)))
            f.write(fr)


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_tcp_fraglist_engines_equal_on_mixed_traffic(model):
    # PSH, padding (an skb flush that skb_gro_receive_list ignores), a GRE tunnel, a
    # CWR segment and a second flow, both engines, gso_type included
    A, P = C.TCP_FLAG_ACK, C.TCP_FLAG_ACK | C.TCP_FLAG_PSH
    frames = _tcp(6, flags=[A, A, P, A, A, A | C.TCP_FLAG_CWR])
    frames += [f + bytes(6) for f in _tcp(3, size=20)]            # Ethernet padding
    frames += [eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_IP, inner4(i)),
                        ident=10 + i)) for i in range(4)]
    t = table(frames)
    for kernel in ("6.10", "6.18"):
        r = both(t, cfg(kernel, model=model, **FWD))
        assert np.any(r.seg_gso_type & gso.SKB_GSO_FRAGLIST)


# --- item 12: gso_features_check on egress ------------------------------------------------

def test_gso_features_check_mangleid_needs_df():
    # 6.18: fixed IDs merge without DF; gso_features_check then clears
    # NETIF_F_TSO_MANGLEID ("the IPv4 header has the potential to be fragmented")
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1, 2, seq=1 + 500 * i,
                                                      payload=bytes(500)), ident=7, df=df))
              for df in (True, False) for i in range(4)]
    t = table(frames)
    r = both(t, cfg("6.18"))
    assert list(r.seg_count) == [4, 4]
    assert np.all(r.seg_gso_type & gso.SKB_GSO_TCP_FIXEDID)
    feats = egress.parse_features("tso,tx-tcp-mangleid-segmentation")
    args = (r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len)
    df = egress.mangleid_df(t, r.seg_first_packet)
    assert df.tolist() == [True, False]
    e = egress.egress(*args, features=feats, mangleid_df=df)
    assert e.hardware.tolist() == [True, False]
    assert egress.egress(*args, features=feats).hardware.tolist() == [True, True]


def test_gso_features_check_max_segs_and_size():
    count, size = np.array([4, 40]), np.array([1000, 1630])
    payload = count * size
    gt = np.array([gso.SKB_GSO_TCPV4] * 2)
    hdr = np.array([52, 52])
    feats = egress.parse_features("tso")
    assert egress.egress(count, size, gt, payload, features=feats).hardware.tolist() == \
        [True, True]
    e = egress.egress(count, size, gt, payload, features=feats, hdr_len=hdr,
                   gso_max_size=egress.GSO_MAX_SIZE, gso_max_segs=16)
    # 14 + 52 + 65200 >= 65536 and 40 > 16 segments: software GSO
    assert e.hardware.tolist() == [True, False]
