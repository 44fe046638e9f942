"""The selftest case table: frames well formed (reference decoder + dpkt), checksums right
(except where a case breaks them on purpose), expected sizes consistent with what is sent."""

from __future__ import annotations

import struct

import dpkt
import numpy as np
import pytest

from gropcap import constants as C
from gropcap import selftest_cases as ST
from gropcap.capture.records import RecordBatch
from gropcap.decode import schema as S
from gropcap.decode.reference import decode_batch

ALL = [(p, c.name) for p in ST.PROTOS for c in ST.cases_for(p)]


def _batch(frames: list[bytes]) -> RecordBatch:
    n = len(frames)
    off = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.int64)
    return RecordBatch(
        buf=np.frombuffer(b"".join(frames), dtype=np.uint8), offset=off,
        cap_len=np.array([len(f) for f in frames], np.uint32),
        wire_len=np.array([len(f) for f in frames], np.uint32),
        ts_ns=np.arange(n, dtype=np.int64), linktype=np.ones(n, np.uint16),
        iface=np.zeros(n, np.uint16), epb_flags=np.zeros(n, np.uint32),
        record=np.arange(n, dtype=np.uint64), file_offset=np.zeros(n, np.uint64))


def _decode(name, proto):
    return decode_batch(_batch(ST.CASES[name].frames(proto))).to_pydict()


# frames gro.c deliberately makes odd: (case, frame index) -> what is odd
BAD_L4_CSUM = {("tcp_csum", 1)}
# the ipip variants of ip_opt / ip_frag4 rewrite the OUTER header (gro.c quirks)
ODD_IPIP = {("ip_opt", 1), ("ip_frag4", 1)}
FRAGMENTS = {("ip_frag4", 1), ("ip_frag6", 2)}


@pytest.mark.parametrize("proto,name", ALL)
def test_frames_decode_and_checksums(proto, name):
    """Every frame decodes; L4/IP checksums are valid unless the case breaks them."""
    d = _decode(name, proto)
    frames = ST.CASES[name].frames(proto)
    for i in range(len(frames)):
        if proto == "ipip" and (name, i) in ODD_IPIP:
            continue
        if (name, i) in FRAGMENTS:
            continue       # a fragment's L4 is not decoded (and frag4's csum covers 200 B)
        assert d["status"][i] == S.STATUS_OK, (i, d["status"][i])
        assert d["l4_proto"][i] == C.IPPROTO_TCP
        assert d["dport"][i] == ST.DPORT
        assert d["ip_csum_ok"][i]
        if proto == "ipip":
            assert d["tun_type"][i] == C.TUN_IPIP and d["outer_ip_csum_ok"][i]
        want = S.CSUM_BAD if (name, i) in BAD_L4_CSUM else S.CSUM_GOOD
        assert d["l4_csum_state"][i] == want, (i, d["l4_csum_state"][i])


@pytest.mark.parametrize("proto,name", ALL)
def test_frames_with_dpkt(proto, name):
    """An independent parser agrees on the layout: ethertype, TCP ports, FIN at the end."""
    frames = ST.CASES[name].frames(proto)
    for i, f in enumerate(frames):
        eth = dpkt.ethernet.Ethernet(f)
        assert eth.dst == ST.DST_MAC and eth.src == ST.SRC_MAC
        assert eth.type == (C.ETH_P_IPV6 if proto == "ipv6" else C.ETH_P_IP)
    last = dpkt.ethernet.Ethernet(frames[-1]).data
    if proto == "ipip":
        last = last.data
    tcp = last.data
    assert isinstance(tcp, dpkt.tcp.TCP)
    assert tcp.flags == (dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK) and tcp.seq == 300 and not tcp.data


@pytest.mark.parametrize("proto,name", ALL)
def test_expected_consistent_with_payload(proto, name):
    """Expected sizes never exceed what was sent; merged totals are sums of segments."""
    c = ST.CASES[name]
    d = _decode(name, proto)
    n = len(d["status"]) - 1                  # without the FIN
    sent = [int(x) for x in d["payload_len"][:n]]
    exp = c.expected(proto)
    if proto == "ipip" and name == "ip_frag4":
        sent = [100, 100]     # the rewritten outer header hides the inner TCP from a decoder
    if proto == "ipip" and name == "ip_opt":
        sent[1] = 100
    assert sum(exp) == sum(sent), (exp, sent)
    assert len(exp) <= n
    assert all(x >= 0 for x in exp)


def test_burst_boundaries_follow_gro_c_sleeps():
    assert ST.bursts("data_burst", "ipv4") == [0, 0, 1, 1, 1]
    assert ST.bursts("ip_frag6", "ipv6") == [0, 0, 1, 1, 2]
    assert ST.bursts("flags_psh", "ipv6") == [0] * 6
    assert ST.CASES["ip_frag6"].case_frames("ipv6").sleeps_s == [1.0, 0.1]


def test_protocol_coverage_matches_gro_py():
    names4 = {c.name for c in ST.cases_for("ipv4")}
    names6 = {c.name for c in ST.cases_for("ipv6")}
    assert {"ip_ttl", "ip_opt", "ip_frag4", "ip_id_df0_fixed"} <= names4
    assert not {"ip_frag6", "ip_v6ext_same"} & names4
    assert {"ip_frag6", "ip_v6ext_same", "ip_v6ext_diff", "ip_v6ext_same_hbh"} <= names6
    assert not {"ip_ttl", "ip_opt"} & names6
    assert {c.name for c in ST.cases_for("ipip")} == names4
    with pytest.raises(ValueError):
        ST.CASES["ip_ttl"].frames("ipv6")


def test_version_differences():
    assert ST.expected("ip_id_df0_fixed", "ipv4", (6, 18)) == [200]
    assert ST.expected("ip_id_df0_fixed", "ipv4", (6, 17)) == [100, 100]
    assert ST.expected("flags_cwr", "ipv4", (6, 18)) == [100, 100, 100, 200]
    assert ST.expected("flags_cwr", "ipv4", (6, 1)) == [100, 100, 300]
    assert ST.expected("ip_hoplimit6", "ipv6", (5, 18)) == [100, 100]
    assert ST.expected("ip_hoplimit6", "ipv6", (5, 15)) == [100]
    assert ST.expected("ip_id_df1_inc_fixed", "ipip", (6, 6)) == [300]
    assert ST.expected("ip_id_df1_inc_fixed", "ipv4", (6, 6)) == [200, 100]


def test_large_geometry_matches_selftest_doc():
    # docs/kernel-gro-selftest.md "Large-test geometry", newest gro.c
    assert ST.large_geometry("ipv4") == (4056, 65495, 16, 599)
    assert ST.large_geometry("ipv6") == (4036, 65475, 16, 899)
    assert ST.large_geometry("ipip") == (4036, 65475, 16, 899)
    assert ST.expected("large_rem", "ipv6") == [64576, 900, 900]
    f = ST.frames("large_max", "ipv4")
    assert len(f) == 16 + 2 + 1 and len(f[0]) == 54 + 4056


def test_gro_c_quirks_reproduced():
    # tcp_ts order 2: TS at 0 with 2 bytes of struct padding, byte 10 zero, NOP at 11
    f = ST.frames("tcp_ts", "ipv4")
    opts = [bytes(x[54:66]) for x in f[:5]]
    assert opts[0] == bytes([1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0])
    assert opts[2] == bytes([1, 1, 8, 10, 0, 0, 100, 0, 0, 0, 0, 0])
    assert opts[3] == bytes([1, 8, 10, 0, 0, 100, 0, 0, 0, 0, 0, 1])
    assert opts[4] == bytes([8, 10, 0, 0, 100, 0, 0, 0, 0, 0, 0, 1])
    # tcp_opt: NOP+WS written at MAX_HDR_LEN: zeros over ipv4, real options over ipv6
    assert bytes(ST.frames("tcp_opt", "ipv4")[2][54:58]) == bytes(4)
    assert bytes(ST.frames("tcp_opt", "ipv6")[2][74:78]) == bytes([1, 3, 3, 0])
    # ipip ip_frag4: the outer header becomes a TCP fragment header
    fr = ST.frames("ip_frag4", "ipip")[1]
    assert fr[14 + 9] == C.IPPROTO_TCP and struct.unpack_from("!H", fr, 20)[0] == 0x6000
    # frames are unpadded like gro.c sends them
    assert len(ST.frames("ack", "ipv4")[0]) == 54
    assert len(ST.frames("data_lrg_1byte", "ipv4")[1]) == 55


def test_received_sizes_counts_like_gro_c():
    for proto in ST.PROTOS:
        fr = ST.frames("data_sml_lrg", proto)
        assert ST.received_sizes(proto, fr) == [50, 100]       # stops at the FIN
        assert ST.received_sizes(proto, fr[:2] + fr[:1]) == [50, 100, 50]
    fr = ST.frames("ip_opt", "ipip")
    assert ST.received_sizes("ipip", fr) == [100, 100, 100]


def test_write_case_pcap_roundtrip(tmp_path):
    dpkt_reader = dpkt.pcap.Reader
    path = tmp_path / "c.pcap"
    ST.write_case_pcap(path, "data_burst", "ipv6", gap_ns=1000)
    with open(path, "rb") as fh:
        recs = list(dpkt_reader(fh))
    assert [bytes(b) for _, b in recs] == ST.frames("data_burst", "ipv6")
    ts = [t for t, _ in recs]
    # the sleep of 100 ms sits between frames 1 and 2
    gaps = np.diff(np.array([int(round(float(t) * 1e9)) for t in ts]))
    assert gaps[1] > 50_000_000 and max(gaps[0], gaps[2], gaps[3]) < 1_000_000
