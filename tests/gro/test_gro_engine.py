"""The numba GRO engine on named kernel cases (expected results derived from the kernel
rules in tcp_gro_receive / inet_gro_flush / dev_gro_receive, not from the engine), the
NAPI/bucket model, and GroResult invariants on random traffic."""

from __future__ import annotations

import numpy as np
import pytest

from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import simulate
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic, tcp_row

MSS = 1448


def flow(n, *, v=4, seq=1000, start_id=100, id_step=1, ts_step=1000, t0=0, src=None,
         sport=1000, **kw):
    """n in-sequence full-size segments of one flow (kwargs apply to every row)."""
    src = src or ("10.0.0.1" if v == 4 else "fd00::1")
    dst = "10.0.0.2" if v == 4 else "fd00::2"
    rows = []
    for i in range(n):
        rows.append(tcp_row(v, src, dst, sport, 80, seq=seq + i * MSS,
                            ip_id=(start_id + i * id_step) & 0xFFFF,
                            ts_ns=t0 + i * ts_step, **kw))
    return rows


def run(rows, config=None, **kw):
    t = packet_table(rows)
    res = simulate(t, config or GroConfig(**kw))
    res.check_invariants(t.column("payload_len").to_numpy())
    return res


def names(codes):
    return [R.reason_name(c) for c in codes]


def kernel(v):
    return GroConfig(kernel=KernelProfile.parse(v))


def test_data_same_coalesces():
    res = run(flow(4))
    assert res.seg_count.tolist() == [4]
    assert res.seg_gso_size.tolist() == [MSS]
    assert res.seg_payload_len.tolist() == [4 * MSS]
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED", "MERGED", "MERGED"]
    assert res.gro_role.tolist() == [R.ROLE_HEAD, R.ROLE_MERGED, R.ROLE_MERGED, R.ROLE_MERGED]
    assert names(res.seg_end_reason) == ["END_CAPTURE"]


def test_psh_merges_and_ends_super_packet():
    rows = flow(5)
    rows[2]["tcp_flags"] |= 0x08
    res = run(rows)
    assert res.seg_count.tolist() == [3, 2]
    assert names(res.seg_end_reason) == ["END_PSH", "END_CAPTURE"]


def test_short_segment_merges_as_last():
    rows = flow(4)
    rows[2]["payload_len"] = 100
    rows[2]["ip_tot_len"] -= MSS - 100
    rows[2]["wire_len"] -= MSS - 100
    rows[3]["tcp_seq"] = rows[2]["tcp_seq"] + 100
    res = run(rows)
    assert res.seg_count.tolist() == [3, 1]
    assert names(res.seg_end_reason)[0] == "END_SHORT_SEGMENT"
    assert res.seg_payload_len.tolist()[0] == 2 * MSS + 100


def test_larger_segment_flushes_and_starts_new():
    rows = flow(3)
    rows.append(tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, seq=1000 + 3 * MSS,
                        payload=MSS + 10, ip_id=103, ts_ns=3000))
    res = run(rows)
    assert res.seg_count.tolist() == [3, 1]
    assert names(res.reason)[3] == "FLUSH_PAYLOAD_LARGER"
    assert names(res.seg_end_reason) == ["FLUSH_PAYLOAD_LARGER", "END_CAPTURE"]


# a differing SYN/RST/URG in the flag word is reported as FLUSH_FLAGS_FINAL, ECE as a
# plain flag change (docs/gro-model.md, reason precedence)
@pytest.mark.parametrize("flag,expect", [(0x02, "FLUSH_FLAGS_FINAL"), (0x04, "FLUSH_FLAGS_FINAL"),
                                         (0x20, "FLUSH_FLAGS_FINAL"), (0x40, "FLUSH_TCP_FLAGS")])
def test_syn_rst_urg_complete_held_and_go_alone(flag, expect):
    rows = flow(3)
    rows[2]["tcp_flags"] |= flag
    res = run(rows)
    # p completed first, then the packet itself: delivered when it carries a final flag,
    # else held as a new head (ECE)
    assert res.seg_count.tolist() == [2, 1]
    assert res.seg_first_packet.tolist() == [0, 2]
    end = "END_CAPTURE" if flag == 0x40 else expect
    assert names(res.seg_end_reason) == [expect, end]


def test_pure_ack_completes_held():
    ack = dict(seq=1000 + 2 * MSS, payload=0, ip_id=102, ts_ns=5000)
    rows = flow(2) + [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, **ack)]
    res = run(rows)
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED", "FLUSH_ZERO_PAYLOAD"]
    assert res.seg_count.tolist() == [2, 1]
    # padded to 60 bytes: skb_gro_len at TCP is the 6 padding bytes, so (len - 1) >= mss
    # and seq pass; skb_gro_receive refuses for the IP length flush
    rows = flow(2) + [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, pad=6, **ack)]
    assert names(run(rows).reason) == ["NO_HELD_PACKET", "MERGED", "FLUSH_LENGTH"]


def test_padding_alone_is_not_held_and_with_p_flushes():
    alone = run([tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, payload=4, pad=2)])
    assert names(alone.reason) == ["NOT_HELD_LENGTH"]
    rows = flow(2) + [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, seq=1000 + 2 * MSS,
                              payload=4, pad=2, ip_id=102, ts_ns=5000)]
    res = run(rows)
    # every tcp_gro_receive item passes (in sequence, small payload); skb_gro_receive
    # refuses because the skb carries the flush from inet_gro_receive
    assert names(res.reason)[2] == "FLUSH_LENGTH"
    assert res.seg_count.tolist() == [2, 1]


def test_seq_gap_and_ack_change():
    rows = flow(4)
    rows[2]["tcp_seq"] += 1
    rows[3]["tcp_seq"] += 1
    res = run(rows)
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED", "FLUSH_SEQ", "MERGED"]
    rows = flow(3)
    rows[2]["tcp_ack"] = 99
    assert names(run(rows).reason)[2] == "FLUSH_TCP_ACK"


def test_window_doff_timestamp_sack():
    ts = lambda v: b"\x01\x01\x08\x0a" + v.to_bytes(4, "big") + bytes(4)  # noqa: E731
    rows = flow(3, options=ts(5))
    rows[2]["tcp_window"] = 1000
    assert names(run(rows).reason)[2] == "FLUSH_TCP_WINDOW"
    rows = flow(3, options=ts(5))
    rows[2]["tcp_options"] = ts(6)
    assert names(run(rows).reason)[2] == "FLUSH_TCP_TS"
    rows = flow(3, options=ts(5) + b"\x01\x01\x05\x0a" + bytes(8))
    rows[2]["tcp_options"] = ts(5) + b"\x01\x01\x05\x0a" + bytes(7) + b"\x01"
    assert names(run(rows).reason)[2] == "FLUSH_TCP_OPTIONS"
    rows = flow(3, options=ts(5))
    rows[2]["tcp_doff"] = 5
    assert names(run(rows).reason)[2] == "FLUSH_TCP_DOFF"


@pytest.mark.parametrize("field,value,expect", [
    ("ip_ttl", 63, "FLUSH_TTL"), ("ip_tos", 0x20, "FLUSH_TOS"), ("ip_tos", 0x03, "FLUSH_ECN"),
    ("ip_df", False, "FLUSH_DF")])
def test_ip_pair_checks(field, value, expect):
    rows = flow(3)
    rows[2][field] = value
    res = run(rows)
    assert names(res.reason)[2] == expect
    assert res.seg_count.tolist() == [2, 1]


@pytest.mark.parametrize("version,df,step,merges", [
    # selftest ip_id_df1_inc / df1_fixed / df0_inc / df0_fixed per era
    ("6.18", True, 1, True), ("6.18", True, 0, True), ("6.18", False, 1, True),
    ("6.18", False, 0, True),                  # 6.18: fixed IDs without DF merge
    ("6.12", True, 0, True), ("6.12", False, 0, False), ("6.12", False, 1, True),
    ("6.1", True, 0, True), ("6.1", False, 0, False), ("5.4", True, 1, True),
    ("4.4", True, 0, False), ("4.4", True, 1, True),      # < 4.7: no fixed IDs at all
    ("6.18", True, 7, False)])
def test_ip_id_rules_per_era(version, df, step, merges):
    res = run(flow(4, df=df, id_step=step), kernel(version))
    if merges:
        assert res.seg_count.tolist() == [4]
    else:
        assert res.seg_count.tolist()[0] < 4
        assert "FLUSH_IP_ID" in names(res.reason)


def test_ip_id_fixed_then_incrementing_is_refused():
    # decided at the second segment: fixed (offset 0), then +1 is not fixed
    rows = flow(4, id_step=0)
    rows[2]["ip_id"] = 101
    res = run(rows, kernel("6.18"))
    assert names(res.reason)[2] == "FLUSH_IP_ID"


def test_cwr_per_version():
    rows = flow(4)
    rows[1]["tcp_flags"] |= 0x80
    new = run(rows, kernel("6.18"))
    # 6.15+: the CWR packet is refused (FLUSH_CWR) and, held, refuses the next one
    # because CWR is in the compared flag word
    assert names(new.reason) == ["NO_HELD_PACKET", "FLUSH_CWR", "FLUSH_TCP_FLAGS", "MERGED"]
    old = run(rows, kernel("6.6"))
    assert names(old.reason) == ["NO_HELD_PACKET", "FLUSH_CWR", "MERGED", "MERGED"]


def test_bypass_overtakes_held_packet():
    rows = flow(3, id_step=0)           # fixed IDs: only the seq gap remains
    rows[1]["ip_hdr_len"] = 24          # IPv4 options: inet_gro_receive bails
    res = run(rows)
    assert names(res.reason) == ["NO_HELD_PACKET", "BYPASS_IP_OPTIONS", "FLUSH_SEQ"]
    # delivery order: the bypass packet first, then the held packet it overtook
    assert res.seg_first_packet.tolist() == [1, 0, 2]


def test_bypass_codes():
    base = dict(seq=1000, payload=100)
    cases = [
        (dict(ip_mf=True), "BYPASS_IP_FRAGMENT"), (dict(ip_csum_ok=False), "BYPASS_IP_CSUM"),
        (dict(l4_proto=17, ip_proto=17), "BYPASS_UDP_NO_GRO"),
        (dict(l4_proto=1, ip_proto=1), "BYPASS_NO_L4_OFFLOAD"),
        (dict(status=1), "BYPASS_DECODE"), (dict(status=2, ip_version=0), "BYPASS_NOT_IP"),
    ]
    for extra, expect in cases:
        res = run([tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, **base, **extra)])
        assert names(res.reason) == [expect], extra
    v6 = run([tcp_row(6, "fd00::1", "fd00::2", 1, 2, **base, ip_ext_mask=0x08)])
    assert names(v6.reason) == ["BYPASS_IPV6_EXTHDR"]


def test_checksum_policy():
    rows = flow(2) + [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, seq=1000 + 2 * MSS,
                              ip_id=102, l4_csum_state=2)]
    assert names(run(rows).reason)[2] == "MERGED"          # NIC validated by default
    res = run(rows, GroConfig(verify_checksums=True))
    assert names(res.reason)[2] == "BYPASS_L4_CSUM"


def test_size_limit_64k():
    res = run(flow(60))
    # skb_gro_receive: p->len + len >= 65536, p->len from the IP header
    first_len = 20 + 20 + MSS
    k = 1
    while first_len + k * MSS < 65536:
        k += 1
    assert res.seg_count.tolist()[0] == k
    assert names(res.seg_end_reason)[0] == "FLUSH_SIZE_LIMIT"


def test_ipv6_hop_limit_before_and_after_5_18():
    rows = flow(4, v=6)
    rows[2]["ip_ttl"] = 63
    rows[3]["ip_ttl"] = 63
    new = run(rows, kernel("6.1"))
    assert names(new.reason) == ["NO_HELD_PACKET", "MERGED", "FLUSH_TTL", "MERGED"]
    old = run(rows, kernel("5.15"))
    # before 5.18 a separate flow entry: the first entry stays held, seq gap then
    assert names(old.reason)[:3] == ["NO_HELD_PACKET", "MERGED", "FLUSH_HOP_LIMIT_FLOW"]
    assert old.seg_count.tolist() == [2, 2]


def test_flow_label_is_a_flow_key():
    rows = flow(3, v=6)
    rows[1]["ip_flow_label"] = 5
    rows[2]["tcp_seq"] = rows[1]["tcp_seq"]   # continues the first entry's sequence
    res = run(rows)
    assert names(res.reason) == ["NO_HELD_PACKET", "NO_HELD_PACKET", "MERGED"]
    # rows 0 and 2 merge (same flow label), row 1 is its own entry
    assert res.gro_seg[0] == res.gro_seg[2] != res.gro_seg[1]


def test_bucket_full_evicts_oldest():
    # 9 flows in one bucket (rss none): the ninth held flow completes the oldest entry
    rows = []
    for f in range(9):
        rows += flow(1, src=f"10.0.1.{f + 1}", t0=f * 10)
    res = run(rows, GroConfig(model="napi", rss="none"))
    assert names(res.seg_end_reason)[0] == "END_BUCKET_FULL"
    assert res.seg_first_packet[0] == 0
    # before 4.19 one list of 8 also with RSS spreading flows over buckets
    rows = []
    for f in range(9):
        rows += flow(1, src=f"10.0.2.{f + 1}", sport=2000 + f, t0=f * 10)
    old = run(rows, GroConfig(model="napi", kernel=KernelProfile.parse("4.14")))
    assert "END_BUCKET_FULL" in names(old.seg_end_reason)


def test_napi_gap_and_budget():
    rows = flow(6, ts_step=1000)
    rows[3]["ts_ns"] += 10_000_000      # gap > poll_gap_ns: a new poll
    rows[4]["ts_ns"] += 10_000_000
    rows[5]["ts_ns"] += 10_000_000
    res = run(rows, GroConfig(model="napi"))
    assert res.seg_count.tolist() == [3, 3]
    assert names(res.seg_end_reason) == ["END_POLL", "END_POLL"]
    assert res.poll_id.tolist() == [0, 0, 0, 1, 1, 1]
    # full-budget polls: HZ < 1000 flushes everything after each budget of 4
    res = run(flow(10), GroConfig(model="napi", budget=4, hz=250))
    assert res.seg_count.tolist() == [4, 4, 2]
    # HZ = 1000: only entries of an older jiffy are flushed; all in one jiffy here
    res = run(flow(10), GroConfig(model="napi", budget=4, hz=1000))
    assert res.seg_count.tolist() == [10]


def test_explicit_polls():
    t = packet_table(flow(5))
    res = simulate(t, GroConfig(model="napi"), polls=np.array([0, 0, 0, 7, 7]))
    assert res.seg_count.tolist() == [3, 2]
    assert res.poll_id.tolist() == [0, 0, 0, 1, 1]
    assert names(res.seg_end_reason) == ["END_POLL", "END_POLL"]


def test_gso_size_and_type():
    res = run(flow(3, id_step=0))
    from gropcap.gro.gso import SKB_GSO_TCP_FIXEDID, SKB_GSO_TCPV4, SKB_GSO_TCPV6
    assert res.seg_gso_type.tolist() == [SKB_GSO_TCPV4 | SKB_GSO_TCP_FIXEDID]
    assert run(flow(3, v=6)).seg_gso_type.tolist() == [SKB_GSO_TCPV6]
    assert run(flow(1)).seg_gso_type.tolist() == [0]


@pytest.mark.parametrize("seed", range(6))
def test_invariants_random_traffic(seed):
    rng = np.random.default_rng(seed)
    t = packet_table(random_traffic(rng, 400, 1 + seed, tunnels=seed % 2 == 1))
    payload = t.column("payload_len").to_numpy()
    for cfg in (GroConfig(), GroConfig(kernel=KernelProfile.parse("4.4")),
                GroConfig(model="napi", queues=3, budget=8, hz=1000),
                GroConfig(model="napi", rss="none", gro_flush_timeout_ns=50_000,
                          napi_defer_hard_irqs=2)):
        res = simulate(t, cfg)
        res.check_invariants(payload)
        # delivery order: a super-packet's packets are in row order and disjoint
        assert np.all(res.seg_first_packet <= res.seg_last_packet)
        if cfg.model == "napi":
            assert np.all(np.diff(res.seg_poll_id) >= 0)


@pytest.mark.parametrize("version,merges", [("6.18", False), ("6.12", True), ("6.1", True)])
def test_outer_ip_id_random_with_df(version, merges):
    # GRE with random outer IDs and outer DF: ignored before 6.18, must be fixed or
    # incrementing from 6.18 ("net: gso: restore outer ip ids correctly")
    from tests.gro.test_gro_engine_traffic import encapsulate
    rows = []
    for i, r in enumerate(flow(4)):
        outer = dict(src={4: "192.0.2.1"}, dst={4: "198.51.100.1"}, ttl=64, tos=0,
                     id=(i * 7919 + 13) & 0xFFFF, df=True, flow_label=0, key=1,
                     csum_ok=True)
        rows.append(encapsulate(r, "gre", outer))
    res = run(rows, kernel(version))
    if merges:
        assert res.seg_count.tolist() == [4]
    else:
        assert names(res.reason)[1] == "FLUSH_OUTER_IP_ID"
