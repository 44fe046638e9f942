"""Report CLI on bundled samples: exact summary lines, `explain`, `compare`, warnings.

Expected numbers come from the crafted GRE sample's documented traffic (see
test_explain.py: 32 data segments, TSval changes, PSH, one loss, 3 pure ACKs), worked out
by hand from the kernel rules, not from the code under test.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from tests.report.test_explain import GRE, GRE_GROUPS, SAMPLES, hand_analysis  # noqa: E402

from gropcap.cli import main  # noqa: E402
from gropcap.cli.report import register  # noqa: E402
from gropcap.report.explain import explain_flow  # noqa: E402

from where import TESTS

register(main)
ENGINES = ["fast"] + (["reference"] if os.path.exists(os.path.join(
    TESTS, "..", "gropcap", "gro", "reference.py")) else [])


def run(*args, code=0):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    return r.output


def wire_bytes(path):
    """Sum of orig_len over a classic pcap's record headers (independent of gropcap)."""
    data = open(path, "rb").read()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, total = 24, 0
    while off < len(data):
        _, _, incl, orig = struct.unpack(endian + "IIII", data[off:off + 16])
        total += orig
        off += 16 + incl
    return total


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_agree_with_the_hand_verdicts_on_crafted_gre(engine):
    import gropcap

    a = gropcap.analyze(GRE, engine=engine)
    for model, res in a.results.items():
        groups = [np.flatnonzero(res.gro_seg == s).tolist() for s in range(res.num_superpackets)]
        assert groups == GRE_GROUPS, model


def test_analyze_text_summary_lines_exact():
    out = run("analyze", GRE).splitlines()
    # the whole report, exact: tests/report/test_report_text.py
    assert wire_bytes(GRE) == 47994
    assert out[0] == "gropcap 0.1.0: kernel 6.18, 35 packets, 48.0 kB on the wire"
    assert out[1] == f"capture: {GRE}"
    i = out.index("Aggregation")
    assert out[i + 1].split() == ["model", "data", "ratio", "ratio", "packets", "in",
                                  "super-packets", "out", "largest"]
    assert out[i + 3] == "ideal         5.33    3.89           35                   9         8"
    assert out[i + 4] == "napi          5.33    3.89           35                   9         8"
    j = out.index("Per encapsulation")
    assert out[j + 3] == "eth/ipv4/gre/ipv4/tcp        35          3.89         3.89"
    k = out.index("Why super-packets ended (napi)")
    rows = [line.split() for line in out[k + 3:k + 7]]
    assert sorted(rows) == sorted([["NOT_HELD_ZERO_PAYLOAD", "3", "33.3%"],
                                   ["FLUSH_TCP_TS", "3", "33.3%"], ["END_PSH", "2", "22.2%"],
                                   ["FLUSH_SEQ", "1", "11.1%"]])
    assert ("  FLUSH_TCP_TS: TCP timestamp changed: the sender starts a new TSval between"
            in out)
    assert "    bursts, GRO cannot merge across it" in out
    assert all(len(line) <= 80 for line in out), "readable at 80 columns"
    assert "\x1b[" not in "\n".join(out), "no colour when not a terminal"


def test_warnings_partial_checksums_and_one_direction():
    out = run("analyze", os.path.join(SAMPLES, "real_ipv4.pcap"), "--model", "ideal")
    import dpkt
    n = sum(1 for _ in dpkt.pcap.Reader(open(os.path.join(SAMPLES, "real_ipv4.pcap"), "rb")))
    # the sender kept TX checksum offload: every TCP checksum is the pseudo-header sum
    assert f"warning: {n} TCP/UDP checksums hold only the pseudo-header sum" in \
        " ".join(out.split())
    assert "one direction only" not in out
    # DSA sample: two flows from switch ports, no ACKs -> both one-way
    out = " ".join(run("analyze", os.path.join(SAMPLES, "crafted_dsa_edsa.pcap"),
                       "--dsa-tag", "edsa").split())
    assert "warning: 2 of 2 TCP flows are seen in one direction only" in out


def test_explain_cli_equals_the_hand_walk():
    out = run("explain", GRE, "--flow", "0", "--model", "ideal", "--breaks-only")
    assert out == explain_flow(hand_analysis(), 0, breaks_only=True)


def test_explain_cli_by_five_tuple_napi():
    out = run("explain", GRE, "--flow", "tcp 192.0.2.2:5201 > 192.0.2.1:40000")
    assert out.splitlines()[:2] == [
        "flow 1: 192.0.2.2:5201 > 192.0.2.1:40000 TCP, eth/ipv4/gre/ipv4/tcp",
        "model napi, kernel 6.18: 3 packets -> 3 super-packets, aggregation ratio 1.00"]
    assert out.count("NOT_HELD_ZERO_PAYLOAD") == 4     # 3 packets + the reasons legend


def test_explain_unknown_flow_is_one_line_exit_1():
    r = CliRunner().invoke(main, ["explain", GRE, "--flow", "192.0.2.9:1>192.0.2.8:2"])
    assert r.exit_code == 1
    assert r.output.strip() == ("gropcap: error: no flow 192.0.2.9:1 > 192.0.2.8:2; "
                                "`gropcap analyze` lists the flows")
    r = CliRunner().invoke(main, ["explain", GRE])
    assert r.exit_code == 2 and "--flow" in r.output


def test_compare_one_capture_under_two_configurations():
    # gro_ipv4_max_size 6000: p->len + len >= 6000 stops at 4 segments of 1424 bytes
    # (skb_gro_receive: p->len from the outer IP header, 20 + 4 + 20 + 32 + 4 x 1424 = 5772,
    # plus 1424 reaches 6000)
    out = run("compare", GRE, "--set-b", "gro_ipv4_max_size=6000", "--model", "ideal",
              "--format", "json")
    d = json.loads(out)
    assert d["config_diff"] == {"gro_ipv4_max_size": [65536, 6000]}
    assert d["same_bytes"] is True
    m = d["metrics"]["ideal"]
    assert m["packets_in"] == [35, 35]
    assert m["largest_superpacket"] == [8, 4]
    # bursts of 8, 6, 2, 5, 3, 8 -> 4+4, 4+2, 2, 4+1, 3, 4+4: 10 data super-packets, 3 ACKs
    assert m["superpackets"] == [9, 13]
    assert m["end_reasons"]["FLUSH_SIZE_LIMIT"] == [0, 4]
    text = run("compare", GRE, "--set-b", "gro_ipv4_max_size=6000", "--model", "ideal")
    assert "configuration differs: gro_ipv4_max_size 65536 -> 6000" in text
    assert "same capture bytes" in text
    assert any(line.split() == ["super-packets", "out", "9", "13", "+44.4%"]
               for line in text.splitlines())


def test_compare_tells_the_same_bytes_from_an_earlier_releases_sha256(tmp_path):
    """A side loaded from an earlier release's output names its capture by a bare sha256:
    ``same_bytes`` hashes the other side's file again with sha256; without the file it
    says it cannot tell."""
    import hashlib
    from types import SimpleNamespace

    from gropcap.capture.fingerprint import legacy, of_file
    from gropcap.report.compare import same_bytes
    cap = tmp_path / "c.pcap"
    cap.write_bytes(open(GRE, "rb").read())
    new = SimpleNamespace(infos=[SimpleNamespace(path=str(cap), digest=of_file(str(cap)))])

    def old(data):
        return SimpleNamespace(infos=[SimpleNamespace(
            path="elsewhere", digest=legacy(hashlib.sha256(data).hexdigest()))])
    assert same_bytes(old(cap.read_bytes()), new) is True
    assert same_bytes(old(cap.read_bytes() + b"x"), new) is False
    cap.unlink()
    assert same_bytes(old(b""), new) is None
    assert same_bytes(new, SimpleNamespace(infos=[])) is False


def test_compare_two_captures_and_bad_setting():
    out = run("compare", GRE, os.path.join(SAMPLES, "crafted_gre_seq.pcap"), "--model",
              "ideal", "--format", "json")
    d = json.loads(out)
    assert d["config_diff"] == {}
    assert d["a"]["files"] == ["crafted_gre.pcap"]
    assert d["b"]["files"] == ["crafted_gre_seq.pcap"]
    assert d["same_bytes"] is False
    # GRE with sequence numbers: the kernel does not aggregate (gre_gro_receive bails)
    assert d["metrics"]["ideal"]["superpackets"] == [9, 35]
    r = CliRunner().invoke(main, ["compare", GRE, "--set-b", "colour=blue"])
    assert r.exit_code == 2 and "KEY=VALUE" in r.output


def test_warnings_pre_coalesced_and_cut_headers(tmp_path):
    from craft import eth, ipv4, tcp

    from gropcap.capture import write_pcap

    t0 = 1_700_000_000_000_000_000
    big = eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1000, 80, seq=1, payload=bytes(8000))))
    frames = [big] + [eth(ipv4("10.0.0.1", "10.0.0.2", 6,
                               tcp(1000, 80, seq=8001 + k * 1448, payload=bytes(1448))))
                      for k in range(3)]
    cut = frames[-1][:14 + 20 + 8]            # TCP header cut after 8 bytes
    path = tmp_path / "gso.pcap"
    write_pcap(str(path), frames + [cut], [t0 + k * 1000 for k in range(5)],
               wire_lens=[len(f) for f in frames] + [len(frames[-1])])
    out = " ".join(run("analyze", path, "--model", "ideal").split())
    # an 8040-byte IP packet on a 1500-byte MTU link was coalesced before the capture
    assert (f"warning: 1 frames are already coalesced (more IP bytes than the 1500-byte MTU, "
            f"IPv4 total length 0 or the pcapng TSO flag; largest {len(big)} bytes)") in out
    assert "warning: 1 frames are cut by the snap length inside their headers" in out
    # good checksums everywhere (craft computes them) and one direction only
    assert "pseudo-header sum" not in out
    assert "warning: 1 of 1 TCP flows are seen in one direction only (e.g. flow 0, " \
           "10.0.0.1:1000 > 10.0.0.2:80)" in out


def test_ipv6_endpoints_are_bracketed_not_eaten_as_markup():
    out = run("analyze", os.path.join(SAMPLES, "crafted_ip6ip6.pcap"), "--model", "ideal")
    lines = [line.split() for line in out.splitlines()]
    # the endpoints column wraps at 80 columns: source on the row, destination below
    i = lines.index(["0", "[2001:db8:1::1]:40000", ">", "32", "6", "5.33"])
    assert lines[i + 1] == ["[2001:db8:1::2]:5201"]
    assert lines[i + 2][0] == "FLUSH_TCP_TS;"
    assert all(len(line) <= 80 for line in out.splitlines())


def test_explain_names_the_gre_flag_that_stops_gro():
    # sample_pcaps/README.md: GRE with sequence numbers, which the kernel does not aggregate
    out = run("explain", os.path.join(SAMPLES, "crafted_gre_seq.pcap"), "--flow", "0",
              "--breaks-only")
    lines = out.splitlines()
    assert lines[1] == ("model napi, kernel 6.18: 32 packets -> 32 super-packets, "
                        "aggregation ratio 1.00")
    assert lines[4].split()[-2:] == ["alone", "BYPASS_TUNNEL"]
    assert lines[5] == " " * 18 + "why: GRE sequence (S) set: gre_gro_receive takes only K and C"
    assert out.count("why: GRE sequence (S) set") == 32
