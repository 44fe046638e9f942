"""Each GRO rule of the reference model, on both sides of the kernel version that changed it,
and every reason code it emits (crafted frames, reference decoder)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from craft import (dsa_tag, eth, eth_with_tag, ext_frag, ext_opts, ext_routing, gre, ipv4,
                   make_batch, tcp, tcp_ts, udp, vxlan)
from tests.gro.test_gro_reference import config, names, run, seg_packets, seg_sizes, v4, v6

from gropcap import constants as C
from gropcap.gro import gso
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch
from gropcap.errors import ConfigError
from gropcap.gro import reasons as R
from gropcap.gro.reference import simulate

ACK, PSH, FIN, SYN, RST, URG, ECE, CWR = (C.TCP_FLAG_ACK, C.TCP_FLAG_PSH, C.TCP_FLAG_FIN,
                                          C.TCP_FLAG_SYN, C.TCP_FLAG_RST, C.TCP_FLAG_URG,
                                          C.TCP_FLAG_ECE, C.TCP_FLAG_CWR)


def reasons_of(frames, kernel=(6, 18), **kw):
    res, _ = run(frames, kernel, **kw)
    return names(res.reason), res


# --- IPv6 hop limit: flow key before 5.18, flush from 5.18 (6fc2f3832d36) ----------------

def test_ipv6_hop_limit_flushes_from_5_18():
    frames = [v6(0, hlim=8), v6(100, hlim=7), v6(200, hlim=8)]
    r, res = reasons_of(frames, (5, 18))
    assert r == ["NO_HELD_PACKET", "FLUSH_TTL", "FLUSH_TTL"]
    assert seg_sizes(res) == [100, 100, 100]


def test_ipv6_hop_limit_is_a_flow_key_before_5_18():
    # P1 opens a second entry of the same connection; P2 still merges into P0's entry
    frames = [v6(0, hlim=8), v6(100, hlim=7), v6(200, hlim=8)]
    r, res = reasons_of(frames, (5, 17))
    assert r == ["NO_HELD_PACKET", "FLUSH_HOP_LIMIT_FLOW", "FLUSH_SEQ"]
    assert seg_packets(res) == [[0], [1], [2]]
    frames = [v6(0, hlim=8), v6(100, hlim=7), v6(100, hlim=8)]
    r, res = reasons_of(frames, (5, 17))
    assert r == ["NO_HELD_PACKET", "FLUSH_HOP_LIMIT_FLOW", "MERGED"]
    assert seg_packets(res) == [[0, 2], [1]]


def test_ipv6_flow_label_is_a_different_flow():
    r, res = reasons_of([v6(0, flow=1), v6(100, flow=2)])
    assert r == ["NO_HELD_PACKET", "NO_HELD_PACKET"]
    assert names(res.seg_end_reason) == ["END_CAPTURE", "END_CAPTURE"]


@pytest.mark.parametrize("ext", [
    ext_opts(C.IPPROTO_TCP),                               # destination options
    ext_routing(C.IPPROTO_TCP, ["fdaa::9"]),               # routing
])
def test_ipv6_skippable_extension_headers_coalesce(ext):
    first = C.IPPROTO_DSTOPTS if ext[2] == 1 else C.IPPROTO_ROUTING
    r, res = reasons_of([v6(0, ext=ext, first_nh=first), v6(100, ext=ext, first_nh=first)])
    assert r == ["NO_HELD_PACKET", "MERGED"]


def test_ipv6_hop_by_hop_coalesces():
    """Measured on 6.18; hbh_offload has INET6_PROTO_GSO_EXTHDR (older kernels skipped
    NEXTHDR_HOP explicitly in ipv6_gso_pull_exthdrs)."""
    ext = ext_opts(C.IPPROTO_TCP)
    r, _ = reasons_of([v6(0, ext=ext, first_nh=C.IPPROTO_HOPOPTS),
                       v6(100, ext=ext, first_nh=C.IPPROTO_HOPOPTS)])
    assert r == ["NO_HELD_PACKET", "MERGED"]


def test_ipv6_fragment_header_bypasses_and_overtakes():
    ext = ext_frag(C.IPPROTO_TCP)
    r, res = reasons_of([v6(0), v6(100, ext=ext, first_nh=C.IPPROTO_FRAGMENT), v6(100)])
    assert r == ["NO_HELD_PACKET", "BYPASS_IPV6_EXTHDR", "MERGED"]
    assert seg_packets(res) == [[1], [0, 2]]


# --- IPv4 per-pair checks -------------------------------------------------------------------

@pytest.mark.parametrize("change,reason", [
    (dict(ttl=7), "FLUSH_TTL"), (dict(tos=0x02), "FLUSH_ECN"), (dict(tos=0x04), "FLUSH_TOS"),
    (dict(df=False, ident=1), "FLUSH_DF"), (dict(ident=5), "FLUSH_IP_ID"),
])
@pytest.mark.parametrize("kernel", [(6, 9), (6, 18)])
def test_ipv4_pair_checks(change, reason, kernel):
    r, res = reasons_of([v4(0), v4(100, **change)], kernel)
    assert r == ["NO_HELD_PACKET", reason]
    assert names(res.seg_end_reason)[0] == reason


@pytest.mark.parametrize("change,reason", [(dict(tc=0x01), "FLUSH_ECN"),
                                           (dict(tc=0xF0), "FLUSH_TOS")])
def test_ipv6_traffic_class(change, reason):
    assert reasons_of([v6(0), v6(100, **change)])[0] == ["NO_HELD_PACKET", reason]


@pytest.mark.parametrize("kernel,ids,df,merged,bits", [
    ((6, 18), (8, 8, 8), False, 3, gso.SKB_GSO_TCP_FIXEDID),          # DF-less fixed IDs
    ((6, 17), (8, 8, 8), False, 1, 0),
    ((6, 17), (8, 8, 8), True, 3, gso.SKB_GSO_TCP_FIXEDID_LEGACY),
    ((6, 10), (8, 8, 8), True, 3, gso.SKB_GSO_TCP_FIXEDID_LEGACY),
    ((6, 9), (8, 8, 8), True, 3, gso.SKB_GSO_TCP_FIXEDID_LEGACY),      # is_atomic era
    ((6, 9), (8, 9, 10), True, 3, 0),                                   # incrementing
    ((6, 18), (8, 9, 10), False, 3, 0),
    ((4, 7), (8, 8, 8), True, 3, gso.SKB_GSO_TCP_FIXEDID_LEGACY),
    ((4, 6), (8, 8, 8), True, 1, 0),                                    # no fixed IDs yet
    ((4, 6), (8, 9, 10), True, 3, 0),
])
def test_ip_id_modes_per_era(kernel, ids, df, merged, bits):
    frames = [v4(100 * k, ident=i, df=df) for k, i in enumerate(ids)]
    res, _ = run(frames, kernel)
    assert res.seg_count[0] == merged
    if merged > 1:
        fixed_mask = (gso.SKB_GSO_TCP_FIXEDID | gso.SKB_GSO_TCP_FIXEDID_INNER
                      | gso.SKB_GSO_TCP_FIXEDID_LEGACY)
        assert res.seg_gso_type[0] & fixed_mask == bits
        assert res.seg_gso_type[0] & gso.SKB_GSO_TCPV4


def test_ip_id_mode_sticks_after_the_second_segment():
    # fixed on the 2nd segment -> the 3rd must be fixed too (and vice versa)
    assert seg_sizes(run([v4(0, ident=8), v4(100, ident=8), v4(200, ident=9)])[0]) == [200, 100]
    assert seg_sizes(run([v4(0, ident=8), v4(100, ident=9), v4(200, ident=9)])[0]) == [200, 100]
    assert seg_sizes(run([v4(0, ident=0xFFFF), v4(100, ident=0)])[0]) == [200]   # u16 wrap


# --- TCP checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("second,reason", [
    (v4(100, window=1000), "FLUSH_TCP_WINDOW"),
    (v4(100, flags=ACK | ECE), "FLUSH_TCP_FLAGS"),
    (v4(100, ack=101), "FLUSH_TCP_ACK"),
    (v4(100, options=tcp_ts(1, 2)), "FLUSH_TCP_DOFF"),
    (v4(200), "FLUSH_SEQ"),
    (v4(100, 150), "FLUSH_PAYLOAD_LARGER"),
    (v4(100, flags=ACK | CWR), "FLUSH_CWR"),
])
def test_tcp_flush_items_complete_p_and_hold_the_packet(second, reason):
    r, res = reasons_of([v4(0), second])
    assert r == ["NO_HELD_PACKET", reason]
    assert seg_packets(res) == [[0], [1]]
    assert names(res.seg_end_reason) == [reason, "END_CAPTURE"]


def test_tcp_options_timestamp_vs_other_options():
    base = [v4(0, options=tcp_ts(1, 2))]
    assert reasons_of(base + [v4(100, options=tcp_ts(3, 2))])[0][1] == "FLUSH_TCP_TS"
    sack = b"\x01\x01\x05\x0a" + struct.pack("!II", 1, 2)
    assert reasons_of(base + [v4(100, options=sack)])[0][1] == "FLUSH_TCP_OPTIONS"
    assert reasons_of(base + [v4(100, options=tcp_ts(1, 2))])[0][1] == "MERGED"


@pytest.mark.parametrize("flags,reason", [(ACK | SYN, "FLUSH_FLAGS_FINAL"),
                                          (ACK | RST, "FLUSH_FLAGS_FINAL"),
                                          (ACK | URG, "FLUSH_FLAGS_FINAL")])
def test_final_flags_complete_p_and_go_up_after_it(flags, reason):
    r, res = reasons_of([v4(0), v4(100, 0, flags=flags)])
    assert r == ["NO_HELD_PACKET", reason]
    assert seg_packets(res) == [[0], [1]]
    assert res.gro_role[1] == R.ROLE_ALONE and res.seg_end_reason[1] == res.reason[1]


def test_pure_ack_completes_p():
    r, res = reasons_of([v4(0), v4(100, 0)])
    assert r == ["NO_HELD_PACKET", "FLUSH_ZERO_PAYLOAD"]
    assert names(res.seg_end_reason) == ["FLUSH_ZERO_PAYLOAD", "FLUSH_ZERO_PAYLOAD"]


@pytest.mark.parametrize("flags,n,reason", [
    (ACK | SYN, 0, "NOT_HELD_SYN"), (ACK | RST, 0, "NOT_HELD_RST"),
    (ACK | URG, 10, "NOT_HELD_URG"), (ACK | FIN, 0, "NOT_HELD_FIN"),
    (ACK | PSH, 10, "NOT_HELD_PSH"), (ACK, 0, "NOT_HELD_ZERO_PAYLOAD"),
])
def test_not_held(flags, n, reason):
    r, res = reasons_of([v4(0, n, flags=flags)])
    assert r == [reason] and names(res.seg_end_reason) == [reason]


@pytest.mark.parametrize("flags,reason", [(ACK | PSH, "END_PSH"), (ACK | FIN, "END_FIN")])
def test_psh_fin_merge_and_end(flags, reason):
    r, res = reasons_of([v4(0), v4(100, flags=flags), v4(200)])
    assert r == ["NO_HELD_PACKET", "MERGED", "NO_HELD_PACKET"]
    assert names(res.seg_end_reason) == [reason, "END_CAPTURE"]


def test_cwr_head_before_and_after_accecn():
    frames = [v4(0, flags=ACK | CWR), v4(100), v4(200)]
    assert seg_sizes(run(frames, (6, 14))[0]) == [300]
    r, res = reasons_of(frames, (6, 15))
    assert r == ["NO_HELD_PACKET", "FLUSH_TCP_FLAGS", "MERGED"]
    assert seg_sizes(res) == [100, 200]


# --- lengths: padding, trailers, FCS, reserved bit --------------------------------------------

def test_padding_flushes():
    # 1 byte of payload: 55-byte frame; padded to 60 the IP length no longer matches
    r, res = reasons_of([v4(0), v4(100, 1, pad=True)])
    assert r == ["NO_HELD_PACKET", "FLUSH_LENGTH"]
    assert seg_packets(res) == [[0], [1]] and res.gro_role[1] == R.ROLE_ALONE
    r, res = reasons_of([v4(0), v4(100, 1)])
    assert r == ["NO_HELD_PACKET", "MERGED"]
    assert reasons_of([v4(0, 1, pad=True)])[0] == ["NOT_HELD_LENGTH"]


def test_captured_fcs_counts_as_trailer():
    f = v4(0)
    r, _ = reasons_of([f + b"\xde\xad\xbe\xef", v4(100)])
    assert r == ["NOT_HELD_LENGTH", "NO_HELD_PACKET"]


def test_reserved_bit():
    def rf(off):
        b = bytearray(v4(off))
        b[14 + 6] |= 0x80
        b[14 + 10:14 + 12] = b"\0\0"
        from gropcap.decode.digest import inet_checksum
        b[14 + 10:14 + 12] = struct.pack("!H", inet_checksum(bytes(b[14:34])))
        return bytes(b)
    assert reasons_of([rf(0)])[0] == ["NOT_HELD_IP_RF"]
    assert reasons_of([v4(0), rf(100)])[0] == ["NO_HELD_PACKET", "FLUSH_IP_RF"]


def test_length_flush_precedence_changed_in_6_10():
    """Before 6.10 the IP loop put the length flush into p->flush, evaluated first; from
    6.10 it surfaces only in skb_gro_receive, after the TCP checks."""
    frames = [v4(0), v4(300, 1, pad=True)]
    assert reasons_of(frames, (6, 9))[0][1] == "FLUSH_LENGTH"
    assert reasons_of(frames, (6, 10))[0][1] == "FLUSH_SEQ"


# --- bypasses -------------------------------------------------------------------------------

def _bypass(frame, **kw):
    r, res = reasons_of([v4(0), frame, v4(100)], **kw)
    assert seg_packets(res)[0] == [1], "a bypass packet overtakes the held one"
    assert r[2] == "MERGED", "the held packet stayed held"
    return r[1]


def test_bypass_codes():
    opt = b"\x01\x01\x01\x00"                               # NOP NOP NOP EOL
    assert _bypass(eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                            tcp(1500, 8000, seq=600, ack=100, payload=b"x"),
                            options=opt))) == "BYPASS_IP_OPTIONS"
    assert _bypass(eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                            tcp(1500, 8000, seq=600, ack=100, payload=b"x" * 16),
                            mf=True))) == "BYPASS_IP_FRAGMENT"
    assert _bypass(eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                            tcp(1500, 8000, seq=600, ack=100, payload=b"x"),
                            csum=0x1234))) == "BYPASS_IP_CSUM"
    assert _bypass(eth(ipv4("192.168.1.200", "192.168.1.100", C.IPPROTO_ICMP,
                            b"\x08\x00" + bytes(30)))) == "BYPASS_NO_L4_OFFLOAD"
    assert _bypass(eth(ipv4("192.168.1.200", "192.168.1.100", C.IPPROTO_UDP,
                            udp(1500, 8000, b"x" * 40)))) == "BYPASS_UDP_NO_GRO"
    vx = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_UDP,
                  udp(5555, 4789, vxlan(v4(0), 42))))
    assert _bypass(vx) == "BYPASS_UDP_NO_GRO"
    arp = eth(bytes(28), etype=C.ETH_P_ARP)
    assert _bypass(arp) == "BYPASS_NOT_IP"
    qinq = eth(v4(0)[14:], vlans=[(C.ETH_P_QINQ1, 5)])
    assert _bypass(qinq) == "BYPASS_NOT_IP"


def test_bypass_truncated_header_is_decode():
    t = pa.Table.from_batches([decode_batch(make_batch([v4(0), v4(100)[:40], v4(100)]))])
    res = simulate(t, config())
    assert names(res.reason) == ["NO_HELD_PACKET", "BYPASS_DECODE", "MERGED"]


def test_checksums_only_when_asked():
    bad = eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                   tcp(1500, 8000, seq=200, ack=100, window=65535, payload=b"a" * 100),
                   ttl=8, l4_csum="bad"))
    partial = eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                       tcp(1500, 8000, seq=200, ack=100, window=65535, payload=b"a" * 100),
                       ttl=8, l4_csum="partial"))
    assert reasons_of([v4(0), bad])[0] == ["NO_HELD_PACKET", "MERGED"]
    assert reasons_of([v4(0), bad], verify_checksums=True)[0][1] == "BYPASS_L4_CSUM"
    assert reasons_of([v4(0), partial], verify_checksums=True)[0][1] == "BYPASS_L4_CSUM"
    # "don't bother verifying checksum if we're going to flush anyway": padding wins
    padded = eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                      tcp(1500, 8000, seq=200, ack=100, window=65535, payload=b"a"),
                      ttl=8, l4_csum="bad"), pad=True)
    assert reasons_of([v4(0), padded], verify_checksums=True)[0][1] == "FLUSH_LENGTH"


# --- L2 identity, VLAN, DSA ---------------------------------------------------------------------

def test_l2_identity():
    other_src = eth(v4(100)[14:], src=0x020000000099)
    r, res = reasons_of([v4(0), other_src])
    assert r == ["NO_HELD_PACKET", "NO_HELD_PACKET"]
    tagged = [eth(v4(k)[14:], vlans=[(C.ETH_P_8021Q, 10)]) for k in (0, 100)]
    other_vid = eth(v4(100)[14:], vlans=[(C.ETH_P_8021Q, 11)])
    assert reasons_of(tagged)[0] == ["NO_HELD_PACKET", "MERGED"]
    assert reasons_of([tagged[0], other_vid])[0] == ["NO_HELD_PACKET", "NO_HELD_PACKET"]
    qinq = [eth(v4(k)[14:], vlans=[(C.ETH_P_8021AD, 10), (C.ETH_P_8021Q, 20)]) for k in (0, 100)]
    assert reasons_of(qinq)[0] == ["NO_HELD_PACKET", "MERGED"]


def test_vlan_tag_counts_against_gro_max_size():
    """p->len counts from after the MAC header: an in-band tag adds 4 bytes, so the
    selftest's large_max geometry (16 x 4056 + 599 = exactly 65535 IP bytes) no longer fits."""
    def seg(k, n, vlans=()):
        return v4(4056 * k, n, vlans=vlans)
    plain = [seg(k, 4056) for k in range(16)] + [seg(16, 599)]
    assert seg_sizes(run(plain)[0]) == [16 * 4056 + 599]
    tagged = [seg(k, 4056, [(C.ETH_P_8021Q, 1)]) for k in range(16)] + \
        [seg(16, 599, [(C.ETH_P_8021Q, 1)])]
    res, _ = run(tagged)
    assert seg_sizes(res) == [16 * 4056, 599] and res.reason[16] == R.FLUSH_SIZE_LIMIT


def _dsa_table(port_of):
    frames = [eth_with_tag(v4(100 * k)[14:], dsa_tag(p)) for k, p in enumerate(port_of)]
    return pa.Table.from_batches([decode_batch(make_batch(frames),
                                               DecodeOptions(dsa_tag="dsa"))])


def test_dsa_gro_from_5_8_per_user_port():
    t = _dsa_table([1, 1, 2])
    res = simulate(t, config((5, 8)))
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED", "NO_HELD_PACKET"]
    res = simulate(t, config((5, 7)))
    assert names(res.reason) == ["BYPASS_GRO_DISABLED"] * 3


# --- tunnels (native GRE / IPIP) --------------------------------------------------------------

def _gre(off, key=None, seq=None, csum=False, **kw):
    inner = v4(off, **kw)[14:]
    return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_GRE,
                    gre(C.ETH_P_IP, inner, key=key, seq=seq, csum=csum)))


def test_gre_key_and_csum_coalesce_seq_does_not():
    res, _ = run([_gre(0, key=7, csum=True), _gre(100, key=7, csum=True)])
    assert seg_sizes(res) == [200]
    assert res.seg_gso_type[0] & gso.SKB_GSO_GRE and res.seg_gso_type[0] & gso.SKB_GSO_TCPV4
    assert not res.seg_gso_type[0] & gso.SKB_GSO_GRE_CSUM
    r, _ = reasons_of([_gre(0, key=7), _gre(100, key=8)])
    assert r == ["NO_HELD_PACKET", "NO_HELD_PACKET"]          # different key, different flow
    r, _ = reasons_of([_gre(0, seq=1), _gre(100, seq=2)])
    assert r == ["BYPASS_TUNNEL", "BYPASS_TUNNEL"]


def test_gre_outer_ttl_is_checked_as_outer():
    a = _gre(0)
    b = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_GRE, gre(C.ETH_P_IP, v4(100)[14:]), ttl=9))
    assert reasons_of([a, b])[0] == ["NO_HELD_PACKET", "FLUSH_OUTER_TTL"]


def test_outer_ids_with_df_ignored_before_6_18():
    """6.18 ("restore outer ip ids"): outer IDs must be fixed or incrementing even with DF."""
    def ipip(off, outer_id):
        return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_IPIP, v4(off)[14:], ident=outer_id))
    frames = [ipip(0, 1), ipip(100, 77), ipip(200, 5)]
    assert seg_sizes(run(frames, (6, 17))[0]) == [300]
    r, _ = reasons_of(frames, (6, 18))
    assert r == ["NO_HELD_PACKET", "FLUSH_OUTER_IP_ID", "FLUSH_OUTER_IP_ID"]
    # an incrementing outer ID (the usual sender) still merges on 6.18
    assert seg_sizes(run([ipip(0, 1), ipip(100, 2), ipip(200, 3)], (6, 18))[0]) == [300]


# --- size limits per version ------------------------------------------------------------------

def _big(n_full, mss=4056, last=None, version=4):
    mk = v4 if version == 4 else v6
    fr = [mk(mss * k, mss) for k in range(n_full)]
    if last:
        fr.append(mk(mss * n_full, last))
    return fr


def test_per_family_max_size_from_6_3():
    """b1a78b9b9886 (v6.3): gro_ipv4_max_size for p->protocol != IPv6."""
    frames = _big(10)
    kw = dict(gro_max_size=65536, gro_ipv4_max_size=16384)
    assert seg_sizes(run(frames, (6, 2), **kw)[0]) == [10 * 4056]
    res, _ = run(frames, (6, 3), **kw)
    assert res.seg_count[0] == 4 and res.reason[4] == R.FLUSH_SIZE_LIMIT


def test_vlan_tagged_ipv6_takes_the_ipv4_limit():
    """p->protocol of an in-band tagged frame is 0x8100, not ETH_P_IPV6."""
    kw = dict(gro_max_size=65536, gro_ipv4_max_size=16384)
    plain = _big(10, mss=4036, version=6)
    tagged = [eth(f[14:], etype=C.ETH_P_IPV6, vlans=[(C.ETH_P_8021Q, 5)]) for f in plain]
    assert run(plain, (6, 18), **kw)[0].seg_count[0] == 10
    assert run(tagged, (6, 18), **kw)[0].seg_count[0] == 4


def test_big_tcp_ipv6_from_5_19_and_no_knob_before_5_16():
    frames = _big(20, mss=4036, version=6)
    assert run(frames, (5, 19), gro_max_size=131072)[0].seg_count[0] == 20
    assert run(frames, (5, 18), gro_max_size=131072)[0].seg_count[0] == 16
    assert run(frames, (5, 15), gro_max_size=8192)[0].seg_count[0] == 16
    assert run(frames, (5, 16), gro_max_size=8192)[0].seg_count[0] == 2
    # v5.19-v6.2: above 64 KB only when TCP follows the IPv6 header directly
    ext = ext_opts(C.IPPROTO_TCP)
    with_ext = [v6(4036 * k, 4036, ext=ext, first_nh=C.IPPROTO_DSTOPTS) for k in range(20)]
    assert run(with_ext, (6, 2), gro_max_size=131072)[0].seg_count[0] == 16
    assert run(with_ext, (6, 3), gro_max_size=131072)[0].seg_count[0] == 20


# --- configuration errors -------------------------------------------------------------------------

def test_polls_need_napi_and_one_value_per_packet():
    t = pa.Table.from_batches([decode_batch(make_batch([v4(0), v4(100)]))])
    with pytest.raises(ConfigError):
        simulate(t, config(), polls=np.array([0, 0]))
    with pytest.raises(ConfigError):
        simulate(t, config(model="napi"), polls=np.array([0]))
    with pytest.raises(ConfigError):
        simulate(t, config(model="napi"), polls=np.array([1, 0]))


def test_bad_tcp_doff_bypasses():
    bad = eth(ipv4("192.168.1.200", "192.168.1.100", 6,
                   tcp(1500, 8000, seq=300, ack=100, payload=b"x" * 20, doff=4)))
    assert _bypass(bad) == "BYPASS_TCP_HEADER"


@pytest.mark.parametrize("outer,reason", [(dict(tos=0x01), "FLUSH_OUTER_ECN"),
                                          (dict(tos=0x20), "FLUSH_OUTER_TOS"),
                                          (dict(df=False), "FLUSH_OUTER_DF")])
@pytest.mark.parametrize("kernel", [(6, 9), (6, 18)])
def test_outer_header_pair_checks(outer, reason, kernel):
    def ipip(off, **kw):
        return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_IPIP, v4(off)[14:], **kw))
    r, res = reasons_of([ipip(0), ipip(100, **outer)], kernel)
    assert r == ["NO_HELD_PACKET", reason]


def test_ipip_inner_checks_are_inner():
    def ipip(off, **kw):
        return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_IPIP, v4(off, **kw)[14:]))
    assert reasons_of([ipip(0), ipip(100, ttl=3)])[0][1] == "FLUSH_TTL"
    res, _ = run([ipip(0), ipip(100)])
    assert res.seg_gso_type[0] & gso.SKB_GSO_IPXIP4
