"""`gropcap explain`: the packet-by-packet walk of one flow, flow selection, break details.

The GRO verdicts here are written by hand from the kernel rules (docs/kernel-gro-spec.md
section 3.4: TSval change, PSH, sequence gap) for the crafted GRE sample, whose traffic is
described in sample_pcaps/README.md; `hand_result` packs them into a GroResult, so these
tests do not depend on a GRO engine. The same hand verdicts are checked against the engines
in test_report_cli.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from gropcap.errors import ConfigError
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig
from gropcap.gro.flows import assign_flow_ids
from gropcap.gro.result import GroResult
from gropcap.run.memory import decode_files
from gropcap.analysis import Analysis
from gropcap.report.explain import (FlowSpec, explain_flow, find_flows, flag_letters,
                                    parse_flow_spec)
from where import TESTS

HERE = TESTS
SAMPLES = os.path.join(HERE, "..", "sample_pcaps")
GRE = os.path.join(SAMPLES, "crafted_gre.pcap")

# crafted_gre.pcap, flow 0 (192.0.2.1:40000 > 192.0.2.2:5201 inside GRE): TSval advances
# at rows 8, 17, 26; PSH on rows 14 and 34 (34 is also the short 700-byte last segment);
# rows 10, 21, 32 are the receiver's pure ACKs (flow 1); row 23 follows a lost segment.
GRE_GROUPS = [[0, 1, 2, 3, 4, 5, 6, 7], [10], [8, 9, 11, 12, 13, 14], [15, 16],
              [21], [17, 18, 19, 20, 22], [23, 24, 25], [32], [26, 27, 28, 29, 30, 31, 33, 34]]
GRE_REASONS = {8: R.FLUSH_TCP_TS, 10: R.NOT_HELD_ZERO_PAYLOAD, 17: R.FLUSH_TCP_TS,
               21: R.NOT_HELD_ZERO_PAYLOAD, 23: R.FLUSH_SEQ, 26: R.FLUSH_TCP_TS,
               32: R.NOT_HELD_ZERO_PAYLOAD}
GRE_ENDS = [R.FLUSH_TCP_TS, R.NOT_HELD_ZERO_PAYLOAD, R.END_PSH, R.FLUSH_TCP_TS,
            R.NOT_HELD_ZERO_PAYLOAD, R.FLUSH_SEQ, R.FLUSH_TCP_TS, R.NOT_HELD_ZERO_PAYLOAD,
            R.END_PSH]  # row 34 is both PSH and short: the flag is named


def hand_result(packets, groups, reasons, end_reasons) -> GroResult:
    """A GroResult from super-packets given as lists of packet rows, in delivery order.

    ``reasons``: row -> reason for rows that did not merge (first rows of groups default
    to NO_HELD_PACKET); ``end_reasons``: one per group.
    """
    n = packets.num_rows
    payload = packets.column("payload_len").to_numpy().astype(np.int64)
    flow_id = assign_flow_ids(packets)
    gro_seg = np.full(n, -1, np.int64)
    role = np.zeros(n, np.uint8)
    reason = np.zeros(n, np.uint8)
    seg = {k: [] for k in ("flow_id", "first_packet", "last_packet", "count", "payload_len",
                           "gso_size")}
    for s, rows in enumerate(groups):
        gro_seg[rows] = s
        for k, r in enumerate(rows):
            role[r] = R.ROLE_ALONE if len(rows) == 1 else (R.ROLE_HEAD if k == 0
                                                           else R.ROLE_MERGED)
            reason[r] = reasons.get(r, R.NO_HELD_PACKET) if k == 0 else R.MERGED
        seg["flow_id"].append(flow_id[rows[0]])
        seg["first_packet"].append(rows[0])
        seg["last_packet"].append(rows[-1])
        seg["count"].append(len(rows))
        seg["payload_len"].append(int(payload[rows].sum()))
        seg["gso_size"].append(int(payload[rows[0]]) if len(rows) > 1 else 0)
    assert (gro_seg >= 0).all(), "every packet must be in a group"
    m = len(groups)
    return GroResult(flow_id=flow_id, gro_seg=gro_seg, gro_role=role, reason=reason,
                     rx_queue=np.zeros(n), poll_id=np.full(n, -1),
                     seg_flow_id=seg["flow_id"], seg_first_packet=seg["first_packet"],
                     seg_last_packet=seg["last_packet"], seg_count=seg["count"],
                     seg_payload_len=seg["payload_len"], seg_gso_size=seg["gso_size"],
                     seg_gso_type=np.zeros(m), seg_end_reason=end_reasons,
                     seg_rx_queue=np.zeros(m), seg_poll_id=np.full(m, -1))


def hand_analysis(path=GRE, groups=GRE_GROUPS, reasons=GRE_REASONS, ends=GRE_ENDS,
                  config=None) -> Analysis:
    packets, infos = decode_files(path)
    res = hand_result(packets, groups, reasons, ends)
    res.check_invariants(packets.column("payload_len").to_numpy())
    return Analysis(packets=packets, infos=infos, config=config or GroConfig(),
                    results={"ideal": res})


def _with_column(table, name, values):
    import pyarrow as pa
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(name), pa.array(values, table.schema
                                                                   .field(name).type))


def test_explain_gre_bulk_flow_breaks_only_exact():
    text = explain_flow(hand_analysis(), 0, breaks_only=True)
    assert text.splitlines()[:4] == [
        "flow 0: 192.0.2.1:40000 > 192.0.2.2:5201 TCP, eth/ipv4/gre/ipv4/tcp",
        "model ideal, kernel 6.18: 32 packets -> 6 super-packets, aggregation ratio 5.33",
        "",
        "   pkt     time_us        seq   len flags super-pkt role   verdict",
    ]
    body = text.splitlines()[4:]
    assert body[:5] == [
        "     0       0.000  287454020  1424 .            #0 head   NO_HELD_PACKET",
        "        = #0: 8 segments, 11392 bytes, gso_size 1424, ended by FLUSH_TCP_TS",
        "     8      96.000  287465412  1424 .            #2 head   FLUSH_TCP_TS",
        "                  why: TSval 270544960 -> 270544961, TSecr 168496141 unchanged",
        "        = #2: 6 segments, 8544 bytes, gso_size 1424, ended by END_PSH",
    ]
    # the lost segment: 5 segments of 1424 merged from seq 287476804 -> expected next
    assert ("                  why: tcp_seq 287482500 -> 287485348, expected 287483924 (1424"
            in body)
    assert "                       bytes missing: loss or reordering)" in body
    end = body.index("reasons:")
    assert body[end - 2:end] == [
        "        = #8: 8 segments, 10668 bytes, gso_size 1424, ended by END_PSH",
        "",
    ]
    assert body[end + 1:] == [
        "  NO_HELD_PACKET: started a super-packet: nothing of its flow was held",
        "  FLUSH_TCP_TS: TCP timestamp changed: the sender starts a new TSval between",
        "      bursts, GRO cannot merge across it",
        "  FLUSH_SEQ: sequence gap: loss, reordering or retransmission",
        "  END_PSH: PSH merged: the sender marked the end of a write, GRO pushes up",
    ]
    assert all(len(line) <= 80 for line in text.splitlines())


def test_explain_full_walk_lists_every_packet_of_the_flow_once():
    a = hand_analysis()
    text = explain_flow(a, 0)
    rows = [int(line.split()[0]) for line in text.splitlines()
            if line[:6].strip().isdigit()]
    flow0 = [i for g in GRE_GROUPS for i in g if i not in (10, 21, 32)]
    assert rows == sorted(flow0)
    assert text.count(" merged MERGED") == 32 - 6
    # pure ACKs of the other direction: alone, each with its why line, no summary line
    back = explain_flow(a, 1)
    assert back.count("why: payload_len 0, flags ACK") == 3
    assert "= #" not in back


def test_ip_id_break_incrementing_mode_names_expected_value():
    packets, infos = decode_files(GRE)
    ids = packets.column("ip_id").to_pylist()
    ids[3] = ids[2] + 2          # row 3 skips one ID: 4098 -> 4100, expected 4099
    packets = _with_column(packets, "ip_id", ids)
    groups = [[0, 1, 2], [3, 4, 5, 6, 7]] + GRE_GROUPS[1:]
    reasons = {**GRE_REASONS, 3: R.FLUSH_IP_ID}
    ends = [R.FLUSH_IP_ID] + GRE_ENDS
    res = hand_result(packets, groups, reasons, ends)
    a = Analysis(packets=packets, infos=infos, config=GroConfig(), results={"ideal": res})
    text = explain_flow(a, 0, breaks_only=True)
    assert "why: ip_id 4098 -> 4100, expected 4099 (incrementing mode)" in text


def test_ip_id_break_fixed_mode_and_single_held_packet():
    packets, infos = decode_files(GRE)
    ids = packets.column("ip_id").to_pylist()
    ids[0:3] = [777, 777, 777]    # fixed ID decided on the second packet
    ids[3] = 778
    packets = _with_column(packets, "ip_id", ids)
    groups = [[0, 1, 2], [3, 4, 5, 6, 7]] + GRE_GROUPS[1:]
    res = hand_result(packets, groups, {**GRE_REASONS, 3: R.FLUSH_IP_ID},
                      [R.FLUSH_IP_ID] + GRE_ENDS)
    a = Analysis(packets=packets, infos=infos, config=GroConfig(), results={"ideal": res})
    assert "why: ip_id 777 -> 778, expected 777 (fixed mode)" in explain_flow(a, 0)
    # p held one packet: both modes were still open
    groups = [[0], [1, 2, 3, 4, 5, 6, 7]] + GRE_GROUPS[1:]
    ids = packets.column("ip_id").to_pylist()
    ids[1] = 900
    packets = _with_column(packets, "ip_id", ids)
    res = hand_result(packets, groups, {**GRE_REASONS, 1: R.FLUSH_IP_ID},
                      [R.FLUSH_IP_ID] + GRE_ENDS)
    a = Analysis(packets=packets, infos=infos, config=GroConfig(), results={"ideal": res})
    # the why line is wrapped at 80 columns
    assert "why: ip_id 777 -> 900, expected 778 (incrementing) or 777 (fixed)" \
        in " ".join(explain_flow(a, 0).split())


def test_ttl_tos_and_window_breaks_show_old_and_new():
    packets, infos = decode_files(GRE)
    ttl = packets.column("ip_ttl").to_pylist()
    tos = packets.column("ip_tos").to_pylist()
    win = packets.column("tcp_window").to_pylist()
    ttl[2], tos[4], win[6] = 63, 0x03, 400      # 3 breaks inside the first burst
    for name, vals in (("ip_ttl", ttl), ("ip_tos", tos), ("tcp_window", win)):
        packets = _with_column(packets, name, vals)
    groups = [[0, 1], [2, 3], [4, 5], [6, 7]] + GRE_GROUPS[1:]
    reasons = {**GRE_REASONS, 2: R.FLUSH_TTL, 4: R.FLUSH_ECN, 6: R.FLUSH_TCP_WINDOW}
    ends = [R.FLUSH_TTL, R.FLUSH_ECN, R.FLUSH_TCP_WINDOW, R.FLUSH_TCP_TS] + GRE_ENDS[1:]
    a = Analysis(packets=packets, infos=infos, config=GroConfig(),
                 results={"ideal": hand_result(packets, groups, reasons, ends)})
    text = explain_flow(a, 0, breaks_only=True)
    assert "why: ttl 64 -> 63" in text
    # rows 4 and 6 also differ from their head in the field changed two rows before
    # (ttl, tos): every failed check is listed, the recorded reason first
    assert "FLUSH_ECN: ECN Not-ECT -> CE (tos 0x00 -> 0x03)\n" \
           "                    FLUSH_TTL: ttl 63 -> 64" in text
    assert "FLUSH_TCP_WINDOW: tcp_window 502 -> 400" in text


@pytest.mark.parametrize("text, expect", [
    ("3", 3),
    ("192.0.2.1:40000>192.0.2.2:5201", FlowSpec("192.0.2.1", 40000, "192.0.2.2", 5201)),
    ("tcp 192.0.2.1:40000 -> 192.0.2.2:5201",
     FlowSpec("192.0.2.1", 40000, "192.0.2.2", 5201, 6)),
    ("[2001:db8:1::1]:40000-[2001:0db8:1::2]:5201/udp",
     FlowSpec("2001:db8:1::1", 40000, "2001:db8:1::2", 5201, 17)),
    ("tcp,2001:db8:1::1,40000,2001:db8:1::2,5201",
     FlowSpec("2001:db8:1::1", 40000, "2001:db8:1::2", 5201, 6)),
])
def test_parse_flow_spec(text, expect):
    assert parse_flow_spec(text) == expect


def test_parse_flow_spec_rejects_garbage():
    with pytest.raises(ConfigError, match="neither a flow id"):
        parse_flow_spec("192.0.2.1 to 192.0.2.2")


def test_find_flows_by_tuple_and_reverse_hint():
    flows = hand_analysis().flows
    assert find_flows(flows, "192.0.2.2:5201>192.0.2.1:40000") == [1]
    assert find_flows(flows, "tcp 192.0.2.1:40000>192.0.2.2:5201") == [0]
    with pytest.raises(ConfigError, match="no flow 192.0.2.1:40000 > 192.0.2.2:5201"):
        find_flows(flows, "udp 192.0.2.1:40000>192.0.2.2:5201")
    with pytest.raises(ConfigError, match="reverse direction is flow 0"):
        find_flows(flows.slice(0, 1), "192.0.2.2:5201>192.0.2.1:40000")
    with pytest.raises(ConfigError, match="flow ids run from 0 to 1"):
        find_flows(flows, 7)


def test_flag_letters():
    assert flag_letters(C_ACK | C_PSH) == "P."
    assert flag_letters(0) == "-"


C_ACK, C_PSH = 0x10, 0x08


def test_napi_flush_names_poll_and_queue():
    a = hand_analysis()
    res = a.results["ideal"]
    res.seg_end_reason[0] = R.END_POLL          # the first burst ended by a poll's end
    res.seg_poll_id[0], res.seg_rx_queue[0] = 3, 1
    text = explain_flow(a, 0, breaks_only=True)
    assert text.splitlines()[5:7] == [
        "        = #0: 8 segments, 11392 bytes, gso_size 1424, ended by END_POLL (poll 3,",
        "            queue 1)"]
    assert "  END_POLL: end of a NAPI poll: everything held is flushed" in text
