"""The reference GRO model against the kernel's own GRO selftest (gropcap/selftest_cases.py).

Every case of tools/testing/selftests/net/lib/gro.c, over IPv4, IPv6 and IPIP, is decoded
with the reference decoder and replayed through ``gro.reference.simulate`` the way the
live-kernel replay runs it: the napi model with one explicit GRO window per burst (gro.c
sleeps between bursts), veth's receive path (no RSS hash, so every flow in bucket 0;
CHECKSUM_NONE, so TCP checksums are verified in software). The sizes the receiver would see
must equal the case table's expectations for each kernel version on both sides of every
rule change the cases touch.

Also here: small helpers the rule tests import (``frames_table``, ``v4``, ``v6``, ``run``).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest


from craft import eth, ipv4, ipv6, make_batch, tcp  # noqa: E402

from gropcap import constants as C  # noqa: E402
from gropcap.gro import gso  # noqa: E402
from gropcap import selftest_cases as ST  # noqa: E402
from gropcap.decode.reference import decode_batch  # noqa: E402
from gropcap.gro import reasons as R  # noqa: E402
from gropcap.gro.config import GroConfig, KernelProfile  # noqa: E402
from gropcap.gro.reference import simulate  # noqa: E402

# kernels on both sides of the changes the selftest cases exercise:
# 4.7 fixed IDs, 5.18 IPv6 hop limit, 6.10 flush rework, 6.15 CWR/AccECN, 6.18 outer IDs
KERNELS = [(4, 7), (5, 17), (5, 18), (6, 9), (6, 10), (6, 14), (6, 15), (6, 17), (6, 18)]
ACK = C.TCP_FLAG_ACK


# --- helpers shared with test_gro_rules*.py ---------------------------------------------

def frames_table(frames, ts_ns=None, wire_lens=None) -> pa.Table:
    """Decode crafted frames (bytes) into a packet table with the reference decoder."""
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts_ns,
                                                          wire_lens=wire_lens))])


def v4(off: int, n: int = 100, flags: int = ACK, *, sport: int = 1500, dport: int = 8000,
       ack: int = 100, window: int = 65535, options: bytes = b"", ttl: int = 8,
       tos: int = 0, ident: int = 0, df: bool = True, src: str = "192.168.1.200",
       dst: str = "192.168.1.100", pad: bool = False, vlans=(), **ip) -> bytes:
    """A gro.c-style Ethernet/IPv4/TCP data segment with ``seq = 100 + off``."""
    seg = tcp(sport, dport, seq=100 + off, ack=ack, flags=flags, window=window,
              options=options, payload=b"a" * n)
    return eth(ipv4(src, dst, C.IPPROTO_TCP, seg, ttl=ttl, tos=tos, ident=ident, df=df, **ip),
               pad=pad, vlans=vlans)


def v6(off: int, n: int = 100, flags: int = ACK, *, sport: int = 1500, dport: int = 8000,
       ack: int = 100, hlim: int = 8, tc: int = 0, flow: int = 0, ext: bytes = b"",
       first_nh=None, src: str = "fdaa::2", dst: str = "fdaa::1", **kw) -> bytes:
    """An Ethernet/IPv6/TCP data segment with ``seq = 100 + off``."""
    seg = tcp(sport, dport, seq=100 + off, ack=ack, flags=flags, window=65535,
              payload=b"a" * n, **kw)
    return eth(ipv6(src, dst, C.IPPROTO_TCP, seg, hlim=hlim, tc=tc, flow=flow, ext=ext,
                    first_nh=first_nh), etype=C.ETH_P_IPV6)


def config(kernel=(6, 18), **kw) -> GroConfig:
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def run(frames, kernel=(6, 18), *, ts_ns=None, wire_lens=None, polls=None, **kw):
    """Decode + simulate; checks the invariants; returns (result, table)."""
    t = frames_table(frames, ts_ns=ts_ns, wire_lens=wire_lens)
    res = simulate(t, config(kernel, **kw), polls=polls)
    res.check_invariants(t.column("payload_len").to_numpy())
    return res, t


def seg_sizes(res) -> list[int]:
    """Payload bytes of each super-packet, in delivery order."""
    return [int(x) for x in res.seg_payload_len]


def seg_packets(res) -> list[list[int]]:
    """Row numbers of each super-packet, in delivery order."""
    out = [[] for _ in range(res.num_superpackets)]
    for i, s in enumerate(res.gro_seg):
        out[int(s)].append(i)
    return out


def names(codes) -> list[str]:
    return [R.reason_name(c) for c in codes]


# --- the selftest -------------------------------------------------------------------------

def replay_selftest(case: ST.SelftestCase, proto: str, kernel):
    """Run one case as the live replay does; return (sizes before the FIN, result, frames)."""
    cf = case.case_frames(proto)
    t = frames_table(cf.frames)
    cfg = GroConfig(kernel=KernelProfile(kernel), model="napi", rss="none",
                    verify_checksums=True)
    res = simulate(t, cfg, polls=np.array(cf.bursts, dtype=np.int64))
    res.check_invariants(t.column("payload_len").to_numpy())
    # gro.c counts bytes per frame its own way (headers it assumes, padding); a super-packet
    # shows the sum of its frames' counts; the FIN ends the list
    per_frame = [ST.received_sizes(proto, [f]) for f in cf.frames]
    fin = len(cf.frames) - 1
    sizes = []
    for pk in seg_packets(res):
        if fin in pk:
            break
        sizes.append(sum(sum(per_frame[i]) for i in pk))
    return sizes, res, cf.frames


CASES = [(p, c.name) for p in ST.PROTOS for c in ST.cases_for(p)]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k[0]}.{k[1]}")
@pytest.mark.parametrize("proto,name", CASES, ids=[f"{p}-{n}" for p, n in CASES])
def test_selftest_case(proto, name, kernel):
    case = ST.CASES[name]
    sizes, _, _ = replay_selftest(case, proto, kernel)
    assert sizes == case.expected(proto, kernel)


BYPASS_CASES = [(p, n) for n in ("tcp_csum", "ip_opt", "ip_frag4")
                for p in ST.CASES[n].protos]


@pytest.mark.parametrize("proto,name", BYPASS_CASES, ids=[f"{p}-{n}" for p, n in BYPASS_CASES])
def test_selftest_bypass_overtakes_held_packet(proto, name):
    """Live 6.18: the bad-checksum / options / fragment frame reaches the stack before the
    frame GRO holds (spec section 10): it skips GRO and leaves p held."""
    sizes, res, _ = replay_selftest(ST.CASES[name], proto, (6, 18))
    assert seg_packets(res)[:2] == [[1], [0]]
    assert R.reason_name(res.reason[1]).startswith("BYPASS_")
    assert res.reason[0] == R.NO_HELD_PACKET


def test_selftest_ipv6_fragment_header_bypasses():
    """ipv6_gro_receive: a Fragment header has no offload to skip -> BYPASS_IPV6_EXTHDR."""
    _, res, _ = replay_selftest(ST.CASES["ip_frag6"], "ipv6", (6, 18))
    assert names(res.reason[:4]) == ["NO_HELD_PACKET", "MERGED", "BYPASS_IPV6_EXTHDR",
                                     "NO_HELD_PACKET"]


@pytest.mark.parametrize("proto", ST.PROTOS)
def test_selftest_large_is_counted_from_the_ip_header(proto):
    """skb_gro_receive: p->len + len >= 65536 refuses; the max super-packet is exactly one
    64 KB IP datagram (large_max merges the remainder, large_rem one byte more does not)."""
    mss, max_payload, n, rem = ST.large_geometry(proto)
    _, res, _ = replay_selftest(ST.CASES["large_max"], proto, (6, 18))
    assert res.seg_payload_len[0] == max_payload == n * mss + rem
    assert res.seg_count[0] == n + 1 and res.seg_gso_size[0] == mss
    _, res, _ = replay_selftest(ST.CASES["large_rem"], proto, (6, 18))
    assert res.seg_payload_len[0] == n * mss
    assert res.reason[n] == R.FLUSH_SIZE_LIMIT and res.seg_end_reason[0] == R.FLUSH_SIZE_LIMIT


def test_selftest_cwr_gso_type_before_accecn():
    """Before 6.15 the CWR head absorbs the following segments; tcp_gro_complete marks the
    super-packet SKB_GSO_TCP_ECN (from 6.15 such a super-packet cannot form)."""
    _, res, _ = replay_selftest(ST.CASES["flags_cwr"], "ipv4", (6, 14))
    big = int(np.argmax(res.seg_count))
    assert res.seg_count[big] == 3
    assert res.seg_gso_type[big] & gso.SKB_GSO_TCP_ECN
    assert res.seg_gso_type[big] & gso.SKB_GSO_TCPV4
    _, res, _ = replay_selftest(ST.CASES["flags_cwr"], "ipv4", (6, 15))
    assert res.seg_count.max() == 2 and not (res.seg_gso_type & gso.SKB_GSO_TCP_ACCECN).any()


def test_selftest_ipip_gso_type_and_fixed_ids():
    """IPIP super-packets carry SKB_GSO_IPXIP4; gro.c's IDs are all 0 with DF: fixed IDs
    in both headers (6.18: outer bit 30, inner bit 31; 6.10-6.17: the one shared bit 3)."""
    _, res, _ = replay_selftest(ST.CASES["data_same"], "ipip", (6, 18))
    assert res.seg_gso_type[0] == (gso.SKB_GSO_IPXIP4 | gso.SKB_GSO_TCPV4
                                   | gso.SKB_GSO_TCP_FIXEDID | gso.SKB_GSO_TCP_FIXEDID_INNER)
    _, res, _ = replay_selftest(ST.CASES["data_same"], "ipip", (6, 17))
    assert res.seg_gso_type[0] == (gso.SKB_GSO_IPXIP4 | gso.SKB_GSO_TCPV4
                                   | gso.SKB_GSO_TCP_FIXEDID_LEGACY)
    _, res, _ = replay_selftest(ST.CASES["data_same"], "ipv6", (6, 18))
    assert res.seg_gso_type[0] == gso.SKB_GSO_TCPV6


@pytest.mark.parametrize("kernel", [(4, 4), (4, 6)])
def test_before_4_7_fixed_ids_never_merge(kernel):
    """Before v4.7 the innermost IPv4 ID must be p.id + count: gro.c's constant ID 0
    (DF set) never coalesces, an incrementing one does."""
    sizes, res, _ = replay_selftest(ST.CASES["data_same"], "ipv4", kernel)
    assert sizes == [100, 100] and res.reason[1] == R.FLUSH_IP_ID
    sizes, _, _ = replay_selftest(ST.CASES["ip_id_df1_inc"], "ipv4", kernel)
    assert sizes == [200]
    sizes, _, _ = replay_selftest(ST.CASES["ip_id_df0_inc"], "ipv4", kernel)
    assert sizes == [200]
    sizes, _, _ = replay_selftest(ST.CASES["data_same"], "ipv6", kernel)
    assert sizes == [200]       # IPv6 has no ID


def test_crafted_helpers_match_gro_c_template():
    """Our own crafted segments merge like gro.c's (guards the helpers the rule tests use)."""
    res, _ = run([v4(0), v4(100), v4(200, 50)])
    assert seg_sizes(res) == [250]
    assert names(res.reason) == ["NO_HELD_PACKET", "MERGED", "MERGED"]
    assert names(res.seg_end_reason) == ["END_SHORT_SEGMENT"]
    res, _ = run([v6(0), v6(100)])
    assert seg_sizes(res) == [200] and names(res.seg_end_reason) == ["END_CAPTURE"]
