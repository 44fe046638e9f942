"""The single pass (gro/fused.py) against the engine: every field of both models'
GroResult equal, on the samples it covers and on generated traffic in several receive
contexts; what it does not cover it says, and leaves to the engine."""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.capture.writer import write_pcap
from gropcap.gro import fused
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.reasons import BYPASS_NOT_IP
from gropcap.run.memory import analyze

from craft import eth, ipv4, ipv6, tcp, tcp_ts, udp
from where import SAMPLES


def _engine(path: str, config: GroConfig, engine: str = "fast") -> dict:
    a = analyze(path, config, engine=engine, decoder=engine)
    return a.results


def _differing(a, b) -> list[str]:
    return [f.name for f in fields(a)
            if not np.array_equal(getattr(a, f.name), getattr(b, f.name))]


@pytest.mark.parametrize("name", ["real_ipv4.pcap", "real_ipv4_p4.pcap", "real_ipv6.pcap",
                                  "crafted_nanosecond.pcap", "crafted_big_endian.pcap",
                                  "crafted_vlan.pcap"])
def test_the_pass_equals_the_engine_on_the_samples(name):
    """Real iperf3 traffic (one and four streams, IPv4 and IPv6 with its ICMPv6), a
    nanosecond capture, a big-endian one of IPv6 and one behind an 802.1Q tag: both
    models' per-packet verdicts and super-packets, field for field."""
    path = os.path.join(SAMPLES, name)
    got = fused.run_file(path)
    assert not isinstance(got, str), got
    want = _engine(path, GroConfig())
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
        assert got[model].num_superpackets < got[model].num_packets   # it merged


@pytest.mark.parametrize("name,why", [
    ("crafted_null.pcap", "link type 0"),
    ("crafted_ip6ip6.pcap", "does not cover at byte 24"),
    ("crafted_qinq.pcap", "does not cover at byte 24"),
    ("crafted_two_ifaces.pcapng", "not a pcap file"),
])
def test_what_the_pass_does_not_cover_it_says(name, why):
    assert why in fused.run_file(os.path.join(SAMPLES, name))


@pytest.mark.parametrize("changes,why", [
    ({"queues": 4}, "several RX queues"),
    ({"gro_flush_timeout_ns": 20_000}, "gro_flush_timeout"),
    ({"poll_acks": True}, "--poll-acks"),
    ({"kernel": KernelProfile.parse("6.12")}, "6.18's rules only"),
])
def test_a_context_the_pass_does_not_model_is_refused(changes, why):
    cfg = GroConfig().replace(**changes)
    assert why in fused.uncovered(cfg)
    assert why in fused.run_file(os.path.join(SAMPLES, "real_ipv4.pcap"), cfg)


def _flow_frame(sport, seq, size, flags=C.TCP_FLAG_ACK, options=b"", ident=0):
    seg = tcp(sport, 5201, seq=seq, ack=7, flags=flags, payload=b"\x00" * size,
              options=options)
    return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP, seg, ident=ident))


def test_a_udp_frame_leaves_the_capture_to_the_engine(tmp_path):
    frames = [_flow_frame(3000, 0, 100),
              eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_UDP, udp(1, 2, b"x" * 30)))]
    path = str(tmp_path / "udp.pcap")
    write_pcap(path, frames, [1_000, 2_000])
    assert "does not cover at byte 194" in fused.run_file(path)


def test_frames_above_the_mtu_a_syn_gives_are_left_to_the_engine(tmp_path):
    """A SYN's MSS of 536 makes the run's MTU 576 (gro/mtu.py): the 1000-byte data frames
    were captured coalesced, which only the engine models."""
    mss = b"\x02\x04" + struct.pack("!H", 536)
    frames = [_flow_frame(3000, 0, 0, C.TCP_FLAG_SYN, mss)] + \
        [_flow_frame(3000, 1 + 1000 * i, 1000, ident=i) for i in range(3)]
    path = str(tmp_path / "mss.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(4)])
    assert "above the inferred MTU (576)" in fused.run_file(path)
    assert analyze(path, GroConfig()).mtu.mtu == 576       # the run's own inference
    # given the MTU, those frames are wire frames and the pass covers them
    cfg = GroConfig(mtu=1500)
    got, want = fused.run_file(path, cfg), _engine(path, cfg)
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model


# --- generated traffic ------------------------------------------------------------------

_KINDS = ["data", "data", "data", "short", "psh", "fin", "syn", "ack", "ack_moves", "gap",
          "retrans", "window", "ts", "ttl", "tos", "ecn", "no_df", "id_fixed", "id_jump",
          "cwr", "pad", "urg", "rst", "mss_opt", "mss_12", "sack", "ae", "icmp", "arp",
          "lldp", "stp", "vlan"]
# what a kind changes in a frame of the flow (the rest: _ipv4_tcp_traffic)
_SIZE = {"short": 40, "ack": 0, "pad": 1}
_FLAGS = {"psh": C.TCP_FLAG_PSH | C.TCP_FLAG_ACK, "fin": C.TCP_FLAG_FIN | C.TCP_FLAG_ACK,
          "syn": C.TCP_FLAG_SYN, "cwr": C.TCP_FLAG_CWR | C.TCP_FLAG_ACK,
          "urg": C.TCP_FLAG_URG | C.TCP_FLAG_ACK, "rst": C.TCP_FLAG_RST,
          "ae": C.TCP_FLAG_AE | C.TCP_FLAG_ACK}
_IP = {"ttl": {"ttl": 7}, "tos": {"tos": 0x10}, "ecn": {"tos": 0x01}, "no_df": {"df": False}}
_IP6 = {"ttl": "hlim", "tos": "tc"}         # (their names in craft.ipv6)
# (mss_12: 12 bytes of options, as long as Linux's NOP NOP TS, that are not it)
_TCP = {"window": {"window": 1000}, "mss_opt": {"options": b"\x02\x04\x05\xb4"},
        "mss_12": {"options": b"\x02\x04\x05\xb4" + b"\x01" * 8},
        "sack": {"options": b"\x01\x01\x05\x0a" + bytes(range(8))}}


_V4, _V6 = ("10.0.0.1", "10.0.0.2", "10.0.0.3"), ("fd00::1", "fd00::2", "fd00::3")


@functools.lru_cache(maxsize=None)
def _one_bucket_ports(n: int = 12, v6: bool = False) -> tuple:
    """Source ports of ``n`` flows 10.0.0.1 -> 10.0.0.2:5201 (fd00::1 -> fd00::2) whose
    RSS hash falls in one GRO bucket (hash & 7) under the default key: more flows than
    MAX_GRO_SKBS there."""
    import ipaddress
    from gropcap.gro.rss import toeplitz_hash
    key = bytes(GroConfig().rss_key).ljust(40, b"\0")
    src, dst = (_V6 if v6 else _V4)[:2]
    addrs = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    ports = [p for p in range(3000, 4000)
             if toeplitz_hash(addrs + struct.pack("!HH", p, 5201), key) & 7 == 0]
    return tuple(ports[:n])


@st.composite
def _tcp_traffic(draw):
    """Ethernet / IPv4 or IPv6 / TCP frames of up to 70 flows (several in one GRO
    bucket), each kind changing one header field the checks compare (IPv6: hop limit
    and traffic class; no ID, no DF), with arrival gaps around the 50 us poll gap and
    the 1 ms jiffy of HZ 1000; ICMP (ICMPv6) and ARP frames (bypasses)."""
    v6 = draw(st.booleans())
    hosts = _V6 if v6 else _V4
    # frames behind one 802.1Q tag (a VLAN, priority bits), or untagged
    tci = draw(st.sampled_from([None, None, 100, 0x2005]))
    nflows = draw(st.sampled_from([1, 3, 12, 70]))
    n = draw(st.integers(1, 160))
    # Linux's NOP NOP TS on every frame, or no options: a change of the option bytes
    # within one header length is FLUSH_TCP_TS or FLUSH_TCP_OPTIONS, else FLUSH_TCP_DOFF
    tsval = 1 if draw(st.booleans()) else None
    seq, ident, ack = [0] * nflows, [0] * nflows, [7] * nflows
    frames, ts, t = [], [], 1_000_000_000_000
    # "burst": data frames of 12 flows of one GRO bucket in turn, back to back (the
    # bucket overflows: the oldest entry goes up); "bulk": full-sized frames of two flows
    # (the 64 KB size limit); "random": anything
    mode = draw(st.sampled_from(["random", "random", "burst", "bulk"]))
    ports = list(range(3000, 3000 + nflows))
    if mode == "burst":
        ports = list(_one_bucket_ports(v6=v6))
        nflows = len(ports)
        seq, ident, ack = [0] * nflows, [0] * nflows, [7] * nflows
    for x in range(n):
        f = x % nflows if mode == "burst" else \
            draw(st.integers(0, (min(nflows, 2) if mode == "bulk" else nflows) - 1))
        kind = "data" if mode != "random" and draw(st.integers(0, 49)) else \
            draw(st.sampled_from(_KINDS))
        if mode == "random":
            t += draw(st.sampled_from([0, 1_000, 5_000, 20_000, 50_000, 60_000, 400_000,
                                       3_000_000]))
        else:
            t += 1_000 if mode == "bulk" else draw(st.sampled_from([0, 0, 0, 700_000]))
        size = _SIZE.get(kind, (1428 if v6 else 1448) if mode == "bulk" else 100)
        flags = _FLAGS.get(kind, C.TCP_FLAG_ACK)
        ip_kw, tcp_kw = dict(_IP.get(kind, {})), dict(_TCP.get(kind, {}))
        if tsval is not None:
            tsval += kind == "ts"
            tcp_kw.setdefault("options", tcp_ts(tsval, 0))
        elif kind == "ts":
            tcp_kw["options"] = tcp_ts(draw(st.integers(0, 2)), 0)
        # the kinds that move a flow's own counters
        ack[f] += 1000 if kind == "ack_moves" else 0
        seq[f] = {"gap": seq[f] + 50, "retrans": max(0, seq[f] - 100)}.get(kind, seq[f])
        ident[f] += {"id_fixed": -1, "id_jump": 5}.get(kind, 0)
        seg = tcp(ports[f], 5201, seq=seq[f], ack=ack[f], flags=flags,
                  payload=b"\x00" * size, **tcp_kw)
        if v6:
            frame = eth(ipv6(hosts[0], hosts[1], C.IPPROTO_TCP, seg,
                             **{_IP6.get(k, k): v for k, v in ip_kw.items() if k != "df"}),
                        C.ETH_P_IPV6)
        else:
            frame = eth(ipv4(hosts[0], hosts[1], C.IPPROTO_TCP, seg,
                             ident=ident[f] & 0xFFFF, **ip_kw))
        # frames GRO passes by (their own flows): ICMP echo to one of two hosts, ARP
        if kind == "icmp" and v6:
            frame = eth(ipv6(hosts[0], hosts[1 + f % 2], 58,
                             b"\x80\x00\x00\x00" + bytes(4 + 8 * (f % 3))), C.ETH_P_IPV6)
        elif kind == "icmp":
            frame = eth(ipv4(hosts[0], hosts[1 + f % 2], C.IPPROTO_ICMP,
                             b"\x08\x00\x00\x00" + bytes(4 + 8 * (f % 3)), ident=x))
        elif kind == "arp":
            frame = eth(bytes(28), C.ETH_P_ARP, src=0x020000000010 + x % 2)
        elif kind in ("lldp", "stp"):
            # not IP either: LLDP, and a spanning-tree BPDU in an 802.3 frame (a length
            # where the EtherType goes), from the ARP senders' MAC addresses
            frame = eth(bytes(36), 0x88CC if kind == "lldp" else 39,
                        src=0x020000000010 + x % 2)
        if tci is not None and kind not in ("lldp", "stp"):
            # the tag after the MAC addresses; "vlan": this frame on another VLAN
            frame = frame[:12] + struct.pack("!HH", C.ETH_P_8021Q,
                                             tci + (1 if kind == "vlan" else 0)) + frame[12:]
        if kind == "pad":
            frame += bytes(60 - len(frame)) if len(frame) < 60 else b"\x00" * 4
        seq[f] += size
        ident[f] += 1
        frames.append(frame)
        ts.append(t)
    return frames, ts


# receive contexts: the default, HZ 1000 (a full-budget poll flushes only what an older
# jiffy held), small budgets (polls end at the budget), a short poll gap, a smaller
# gro_ipv4_max_size or gro_max_size (IPv6), no RSS hash
_CONTEXTS = [{}, {"hz": 1000, "budget": 8}, {"budget": 3}, {"hz": 1000, "budget": 4},
             {"poll_gap_ns": 5_000}, {"gro_ipv4_max_size": 8000}, {"gro_max_size": 9000},
             {"rss": "none"}]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(_tcp_traffic(), st.sampled_from(_CONTEXTS))
def test_the_pass_equals_the_engine_on_generated_traffic(tmp_path, traffic, context):
    """Every check, each kind of frame changing one compared field, many flows in one GRO
    bucket, polls ended by the gap and by the budget: both models' GroResults equal the
    reference models' (which equal the numba engine's bit for bit)."""
    frames, ts = traffic
    path = str(tmp_path / "gen.pcap")
    write_pcap(path, frames, ts)
    cfg = GroConfig(**context)
    got = fused.run_file(path, cfg)
    assert not isinstance(got, str), got
    want = _engine(path, cfg, engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert narrow_differs(path, cfg, batch=1 + len(frames) // 3) == []


@pytest.mark.parametrize("name,batch", [("real_ipv4.pcap", 997), ("real_ipv4_p4.pcap", 61),
                                        ("real_ipv6.pcap", 331),
                                        ("crafted_nanosecond.pcap", 3)])
def test_the_narrow_table_equals_the_decoder_on_the_samples(name, batch):
    """run.single's narrow table (the columns a summary-only run reads, from the record,
    the pass and the decoder run on each flow's first record) equals the decoder's
    columns row for row: real iperf3 traffic with SYNs' options, whole segments with
    their checksums, four streams whose flows start in different batches."""
    path = os.path.join(SAMPLES, name)
    assert narrow_differs(path, GroConfig(), batch) == []


def narrow_differs(path: str, config: GroConfig, batch: int) -> list:
    """The columns of run.single's narrow table that differ from the decoder's, as
    ``(first record of the batch, column)``, over the file's batches of records."""
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.decode.fast import decode_batch
    from gropcap.run.single import SinglePass, narrow_columns
    sp = SinglePass(config)
    out, r0 = [], 0
    for _, b in iter_scan_batches(path, batch_records=batch, digest=False):
        t, _, _ = sp.records(b)
        d = decode_batch(b)
        assert t.num_rows == len(b)
        for name in narrow_columns():
            if t.column(name).to_pylist() != d.column(name).to_pylist():
                out.append((r0, name))
        r0 += len(b)
    return out


def test_an_ipv6_flow_label_that_changes_stops_the_pass(tmp_path):
    """ipv6_gro_receive: a packet of another flow label is not the same flow, and the
    flows the pass numbers (gro/flows.py's) have no label: where a flow's label changes
    (a sender's txhash after a timeout), the pass stops and says where; the same flow
    under one label all along is covered."""
    def frame(i, label):
        seg = tcp(3000, 5201, seq=100 * i, ack=7, payload=bytes(100))
        return eth(ipv6("fd00::1", "fd00::2", C.IPPROTO_TCP, seg, flow=label),
                   C.ETH_P_IPV6)
    path = str(tmp_path / "label.pcap")
    frames = [frame(i, 0x12345 if i < 3 else 0x54321) for i in range(6)]
    write_pcap(path, frames, [1_000 * i for i in range(6)])
    at = 24 + sum(16 + len(f) for f in frames[:3])
    assert fused.run_file(path) == \
        f"an IPv6 flow label that changed within a flow at byte {at}"
    write_pcap(path, [frame(i, 0x12345) for i in range(6)], [1_000 * i for i in range(6)])
    got, want = fused.run_file(path), _engine(path, GroConfig(), engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert got["ideal"].seg_count.max() == 6


def test_ipv6_code_compiles_only_for_a_capture_that_has_ipv6(tmp_path):
    """fused_pass's variant without IPv6 (``v6`` None) runs a capture until its first
    IPv6 frame, and the pass goes on from that frame with the IPv6 variant: IPv4 flows
    before and after it, an IPv6 flow between, equal to the engine."""
    from gropcap.capture.scan import iter_scan_batches

    def six(i):
        seg = tcp(4000, 5201, seq=100 * i, ack=7, payload=bytes(100))
        return eth(ipv6("fd00::1", "fd00::2", C.IPPROTO_TCP, seg), C.ETH_P_IPV6)
    frames = [_flow_frame(3000, 100 * i, 100, ident=i) for i in range(3)] + \
        [six(i) for i in range(3)] + [_flow_frame(3000, 300 + 100 * i, 100, ident=3 + i)
                                      for i in range(3)]
    path = str(tmp_path / "mixed.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(len(frames))])
    v4 = os.path.join(SAMPLES, "real_ipv4.pcap")
    for p, variant in ((v4, None), (path, True)):
        run = fused.FusedRun(GroConfig())
        for _, b in iter_scan_batches(p, digest=False):
            run.take(b.buf, b.offset, b.cap_len, b.wire_len, b.ts_ns)
            assert run.status == fused.DONE
        assert run.v6 == variant
    got, want = fused.run_file(path, batch=4), _engine(path, GroConfig(), engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert sorted(got["ideal"].seg_count) == [3, 6]


def test_a_vlan_tagged_ipv6_flow_takes_the_ipv4_size_limit(tmp_path):
    """netif_get_gro_max_size: an in-band 802.1Q tag makes p->protocol 0x8100, so a
    tagged IPv6 flow grows to gro_ipv4_max_size, not gro_max_size: with gro_max_size at
    9000 the untagged flow's super-packets stay under it and the tagged one's do not."""
    def frame(i, tagged):
        seg = tcp(4000 + tagged, 5201, seq=1428 * i, ack=7, payload=bytes(1428))
        f = eth(ipv6("fd00::1", "fd00::2", C.IPPROTO_TCP, seg), C.ETH_P_IPV6)
        return f[:12] + struct.pack("!HH", C.ETH_P_8021Q, 100) + f[12:] if tagged else f
    frames = [frame(i, tagged) for tagged in (0, 1) for i in range(12)]
    path = str(tmp_path / "vlan6.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(len(frames))])
    cfg = GroConfig(gro_max_size=9000)
    got, want = fused.run_file(path, cfg), _engine(path, cfg, engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    flows = got["ideal"].seg_flow_id
    size = got["ideal"].seg_payload_len
    assert size[flows == 0].max() < 9000 < size[flows == 1].max()


def test_a_capture_across_calls_equals_one_call():
    """The pass's state carries from call to call: batches of 7 records give the same
    results as one call."""
    path = os.path.join(SAMPLES, "real_ipv4_p4.pcap")
    whole = fused.run_file(path)
    cut = fused.run_file(path, batch=7)
    for model in ("ideal", "napi"):
        assert _differing(whole[model], cut[model]) == [], model


def test_what_a_last_full_budget_poll_leaves_goes_up_at_the_end(tmp_path):
    """HZ 1000, budget 4: the capture's last poll is full; __napi_poll's partial flush
    keeps the entry held in the current jiffy, and the end of the capture sends it up
    (END_POLL in that poll, as napi_finish does); the ideal model's goes up at the end."""
    frames = [_flow_frame(3000, 100 * i, 100, ident=i) for i in range(4)]
    path = str(tmp_path / "full.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(4)])
    cfg = GroConfig(hz=1000, budget=4)
    got, want = fused.run_file(path, cfg), _engine(path, cfg, engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert list(got["napi"].seg_count) == [4] and list(got["ideal"].seg_count) == [4]


def test_frames_gro_passes_by_go_up_alone_in_flows_of_their_own(tmp_path):
    """ICMP to two hosts and ARP from two hosts between the segments of a TCP flow: each
    goes up at once with its BYPASS_* reason, in a flow of its own (the flow key: MAC
    addresses, EtherType, IP addresses and protocol), and the TCP flow still merges."""
    frames = []
    for i in range(8):
        frames.append(_flow_frame(3000, 100 * i, 100, ident=i))
        if i % 2:
            frames.append(eth(ipv4("10.0.0.1", f"10.0.0.{2 + i % 4}", C.IPPROTO_ICMP,
                                   b"\x08\x00" + bytes(6 + i))))
        else:
            frames.append(eth(bytes(28), C.ETH_P_ARP, src=0x020000000010 + i % 4))
    path = str(tmp_path / "bypass.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(len(frames))])
    got, want = fused.run_file(path), _engine(path, GroConfig(), engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert len(set(got["ideal"].flow_id)) == 5
    assert got["ideal"].seg_count.max() == 8


@pytest.mark.parametrize("etype,covered", [
    (C.ETH_P_ARP, True), (0x88CC, True), (39, True), (0x8847, True),
    (C.ETH_P_IPV6, False), (C.ETH_P_8021Q, True), (C.ETH_P_8021AD, False),
    (C.ETH_P_QINQ1, False)])
def test_what_is_not_ip_goes_by_and_what_the_decoder_reads_on_is_left(tmp_path, etype,
                                                                      covered):
    """A frame of an EtherType the decoder does not read on (ARP, LLDP, an 802.3 length,
    MPLS), also behind an 802.1Q tag, is not IP: BYPASS_NOT_IP in both models, as in
    the engine; a header of zeros where IPv6's would be, and the tags the pass does not
    read (802.1ad, 0x9100) are left to the engine."""
    frames = [_flow_frame(3000, 0, 100), eth(bytes(46), etype), _flow_frame(3000, 100, 100)]
    path = str(tmp_path / "etype.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(3)])
    got = fused.run_file(path)
    if not covered:
        assert "does not cover" in got
        return
    want = _engine(path, GroConfig(), engine="reference")
    for model in ("ideal", "napi"):
        assert _differing(got[model], want[model]) == [], model
    assert got["napi"].reason[1] == BYPASS_NOT_IP
    assert narrow_differs(path, GroConfig(), 2) == []


def test_the_cache_stamp_covers_every_module_the_pass_imports():
    """The pass's cached machine code bakes in the code and constants of the modules it
    imports from: each of them is in its stamp (else a change there would leave a stale
    kernel in numba's cache)."""
    import ast
    with open(fused.__file__) as fh:
        tree = ast.parse(fh.read())
    # (the module's own imports: what its kernels can reach; functions that run in
    # Python import more)
    imported = {node.module for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.module.startswith("gropcap")}
    stamped = {m.__name__ for m in fused.stamp_modules()}
    assert "gropcap.gro.fast.tcp" in imported and "gropcap.constants" in imported
    assert imported - stamped == set()


def test_the_flow_tables_grow_as_flows_come(monkeypatch):
    """Tables of two flows at first, doubled as the flows of the four-stream sample
    come (during a call): the same results as tables that never fill."""
    path = os.path.join(SAMPLES, "real_ipv4_p4.pcap")
    whole = fused.run_file(path)
    monkeypatch.setattr(fused, "FLOWS", 2)
    grown = fused.run_file(path, batch=500)
    assert len(set(whole["ideal"].flow_id)) > 4
    for model in ("ideal", "napi"):
        assert _differing(whole[model], grown[model]) == [], model


def test_the_probe_finds_the_first_frame_the_pass_does_not_cover(tmp_path):
    frames = [_flow_frame(3000, 0, 100), eth(bytes(28), C.ETH_P_ARP),
              eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_UDP, udp(1, 2, b"x" * 30))),
              _flow_frame(3000, 100, 100)]
    path = str(tmp_path / "probe.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(4)])
    buf, be, _ = fused.pcap_body(path)
    udp_at = 24 + 16 + 154 + 16 + 42
    assert fused.uncovered_at(buf, be, 0xFFFF) == udp_at
    assert fused.uncovered_at(buf, be, 0xFFFF, window=1) == udp_at     # record by record
    assert fused.probe(buf, 24, udp_at, be, 0xFFFF, udp_at) == (udp_at, True)
    assert fused.probe(buf, 24, len(buf), be, 0xFFFF, 100) == (24 + 16 + 154, True)
    assert fused.probe(buf, 24, 24 + 16 + 154 + 10, be, 0xFFFF, 10**9) == \
        (24 + 16 + 154, False)                                          # cut
    assert fused.uncovered_at(buf, be, 100) == 24                       # above the MTU
    frames.pop(2)
    write_pcap(path, frames, [1_000 * i for i in range(3)])
    assert fused.uncovered_at(fused.pcap_body(path)[0], be, 0xFFFF, window=50) == -1
