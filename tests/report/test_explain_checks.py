"""Every failed check at a break (issue 16 item 5): a lost segment breaks both the sequence
number and an incrementing IP ID; the kernel ORs both into one flush, the engines record
the first (FLUSH_IP_ID in 6.10+ order), and `explain` must name both and call it loss.

The traffic is crafted here (tests/craft.py): one TCP flow, 1448-byte segments, IP ID +1
per segment, one segment missing (loss), one segment sent again (retransmission).
"""

from __future__ import annotations

import numpy as np
import pytest

from gropcap import constants as C
from gropcap.capture import write_pcap
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze
from gropcap.report.explain import explain_flow, flow_breaks, flow_causes, probable_cause
from tests.craft import eth, ipv4, tcp

MSS = 1448
SEQ0 = 1000
ID0 = 40450


def _segment(k: int, ident: int | None = None) -> bytes:
    """Segment number k of the flow (seq SEQ0 + k * MSS, IP ID ID0 + k unless given)."""
    return eth(ipv4("192.0.2.1", "192.0.2.2", C.IPPROTO_TCP,
                    tcp(40000, 5201, seq=SEQ0 + k * MSS, ack=1, payload=bytes(MSS)),
                    ident=ID0 + k if ident is None else ident, df=True))


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    """Segments 0-4, segment 5 lost, 6-9, then segment 8 sent again, then 10-11.
    Packet rows: 0-4 = k 0-4, 5 = k 6 (the break after the loss), 6-8 = k 7-9,
    9 = k 8 again (retransmission), 10-11 = k 10-11."""
    ks = [0, 1, 2, 3, 4, 6, 7, 8, 9, 8, 10, 11]
    frames = [_segment(k) for k in ks]
    path = tmp_path_factory.mktemp("lossy") / "lossy.pcap"
    write_pcap(path, frames, [1_700_000_000_000_000_000 + i * 1000 for i in range(len(ks))])
    return analyze([str(path)], GroConfig(), models=("ideal",), engine="reference",
                   decoder="reference")


def test_loss_lists_seq_and_ip_id(lossy):
    """The break after the lost segment: both checks listed, with the expected values."""
    res = lossy.results["ideal"]
    assert int(res.reason[5]) == R.FLUSH_IP_ID      # 6.18 order: the ID check comes first
    brk = {b.packet: b for b in flow_breaks(lossy, 0)}[5]
    assert [c.reason for c in brk.checks] == [R.FLUSH_IP_ID, R.FLUSH_SEQ]
    ip_id, seq = (c.detail for c in brk.checks)
    assert ip_id.startswith(f"ip_id {ID0 + 4} -> {ID0 + 6}, expected {ID0 + 5}")
    assert seq.startswith(f"tcp_seq {SEQ0 + 4 * MSS} -> {SEQ0 + 6 * MSS}, "
                          f"expected {SEQ0 + 5 * MSS}")
    assert brk.cause == f"loss or reordering ({MSS} bytes missing)"
    assert brk.to_dict()["checks"][1] == {"reason": "FLUSH_SEQ", "detail": seq}


def test_retransmission_goes_back(lossy):
    """Segment 8 again after 9: the sequence goes back, so the cause is retransmission."""
    brk = {b.packet: b for b in flow_breaks(lossy, 0)}[9]
    names = [c.name for c in brk.checks]
    assert "FLUSH_SEQ" in names and "FLUSH_IP_ID" in names
    assert brk.cause.startswith("retransmission or reordering (")


def test_explain_text_shows_every_check(lossy):
    text = explain_flow(lossy, 0, breaks_only=True)
    block = text[text.index("\n     5 ") + 1:]
    assert "why, 2 checks failed (the kernel ORs them):" in block.splitlines()[1]
    assert f"FLUSH_IP_ID: ip_id {ID0 + 4} -> {ID0 + 6}, expected {ID0 + 5}" in block
    assert f"FLUSH_SEQ: tcp_seq {SEQ0 + 4 * MSS} -> {SEQ0 + 6 * MSS}" in block
    assert f"probable cause: loss or reordering ({MSS} bytes missing)" in block
    assert all(len(line) <= 80 for line in text.splitlines())


def test_single_check_keeps_one_why_line(tmp_path):
    """Only the ID is off (the sequence continues): one check, blamed on the IP IDs."""
    ids = [ID0, ID0 + 1, ID0 + 7, ID0 + 8]
    frames = [_segment(k, ident=i) for k, i in enumerate(ids)]
    path = tmp_path / "ids.pcap"
    write_pcap(path, frames, [1_700_000_000_000_000_000 + i * 1000 for i in range(4)])
    a = analyze([str(path)], GroConfig(), models=("ideal",), engine="reference",
                decoder="reference")
    (brk,) = flow_breaks(a, 0)
    assert [c.name for c in brk.checks] == ["FLUSH_IP_ID"]
    assert brk.cause.startswith("IP ID not p.id + count")
    assert "why: ip_id" in explain_flow(a, 0, breaks_only=True)


def test_probable_cause_needs_a_seq_jump():
    assert probable_cause([R.FLUSH_TCP_TS]) is None
    assert probable_cause([R.FLUSH_SEQ], -10).startswith("retransmission")
    assert probable_cause([R.FLUSH_IP_ID, R.FLUSH_SEQ], 5) == \
        "loss or reordering (5 bytes missing)"


def test_flow_cause_counts_loss_and_retransmission(lossy):
    """Three FLUSH breaks: two jump ahead (after the loss, after the retransmission), one
    goes back."""
    assert flow_causes(lossy) == ["loss or reordering at 2 of 3 breaks"]


@pytest.mark.parametrize("kernel", ["4.4", "5.10", "6.1", "6.18"])
def test_every_rule_era_lists_both_checks(tmp_path, kernel):
    """The IP ID rule moved (tcp_gro_receive's flush_id before 6.10, inet_gro_flush from
    6.10); each era still reports the ID first and the sequence gap second."""
    from gropcap.gro.config import KernelProfile

    ks = [0, 1, 2, 4, 5]
    path = tmp_path / "l.pcap"
    write_pcap(path, [_segment(k) for k in ks], [10**18 + i * 1000 for i in range(len(ks))])
    a = analyze([str(path)], GroConfig(kernel=KernelProfile.parse(kernel)),
                models=("ideal",), engine="reference", decoder="reference")
    (brk,) = flow_breaks(a, 0)
    assert (brk.packet, [c.name for c in brk.checks]) == (3, ["FLUSH_IP_ID", "FLUSH_SEQ"])


def test_fixed_ids_blame_only_the_sequence(tmp_path):
    """DF and one fixed ID: a loss breaks the sequence only."""
    ks = [0, 1, 2, 4, 5]
    path = tmp_path / "f.pcap"
    write_pcap(path, [_segment(k, ident=7) for k in ks],
               [10**18 + i * 1000 for i in range(len(ks))])
    a = analyze([str(path)], GroConfig(), models=("ideal",), engine="reference",
                decoder="reference")
    (brk,) = flow_breaks(a, 0)
    assert [c.name for c in brk.checks] == ["FLUSH_SEQ"]
    assert brk.cause == f"loss or reordering ({MSS} bytes missing)"
