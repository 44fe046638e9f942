"""The text report of `gropcap analyze`, exact (issue 16 item 10): the data-direction
ratio first, the flows table with its super-packet column and "N of M", `--top`, the
meaning of `largest`, human byte counts, a per-file table for several inputs, an egress
table whose columns add up, and the same data in the JSON.

crafted_gre.pcap (sample_pcaps/README.md, tests/report/test_explain.py): 32 data segments in
bursts of 8, 6, 2, 5, 3, 8 (6 data super-packets: 32 / 6 = 5.33) and 3 pure ACKs that are
never aggregated (35 / 9 = 3.89 overall); 47994 bytes on the wire (48.0 kB). One segment
is missing before row 23: the flow's one loss among its 4 FLUSH breaks.
crafted_ipip.pcap carries the same traffic in IPIP.
"""

from __future__ import annotations

import json
import os
import shutil

from click.testing import CliRunner

from gropcap.cli import main
from gropcap.report.summary import human_bytes

from where import TESTS

HERE = TESTS
SAMPLES = os.path.join(HERE, "..", "sample_pcaps")
GRE = os.path.join(SAMPLES, "crafted_gre.pcap")
IPIP = os.path.join(SAMPLES, "crafted_ipip.pcap")


def run(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


# the receive context of a run with no receive option: every value a default
RECEIVE_DEFAULTS = (
    'MTU 1500, the Ethernet default (no SYN MSS, no jumbo or loopback frames)\n'
    'receive context, defaults: budget 64, hz 250, gro_flush_timeout_us 0,\n'
    '  napi_defer_hard_irqs 0, poll_gap_us 50, poll_acks off, queues 1, rss toeplitz,\n'
    '  udp_tunnels none, tunnel_gro not modelled, native_gro on, udp_gro off,\n'
    '  gro_max_size 65536, gro_ipv4_max_size 65536\n'
)


GRE_REPORT = (
    RECEIVE_DEFAULTS +
    '\n'
    'data direction: 5.33 segments per super-packet (napi; ideal 5.33); all packets\n'
    'including pure ACKs: 3.89\n'
    '\n'
    'Aggregation\n'
    'model   data ratio   ratio   packets in   super-packets out   largest\n'
    '─────────────────────────────────────────────────────────────────────\n'
    'ideal         5.33    3.89           35                   9         8\n'
    'napi          5.33    3.89           35                   9         8\n'
    '  data ratio: segments carrying payload per super-packet carrying payload;\n'
    '    ratio: every packet in (pure ACKs included) per super-packet out; largest:\n'
    '    segments in the largest super-packet\n'
    'napi depends on them: of its 9 super-packets 0% by a poll end, 0% by a\n'
    '  full-budget or deferred flush, 0% by a GRO table eviction; ratio napi 3.89,\n'
    '  ideal 3.89 (no polls, unlimited table)\n'
    "poll ends: 1 TCP data direction with the receiver's ACKs in the capture; if that\n"
    '  receiver had GRO on, --poll-acks infers the napi polls from its ACKs instead\n'
    '  of from the timing (docs/gro-model.md)\n'
    '\n'
    'Flows with the most super-packets (napi): 2 of 2\n'
    'flow   endpoints / top end reason           pkts in   super-pkts   ratio\n'
    '────────────────────────────────────────────────────────────────────────\n'
    '   0   192.0.2.1:40000 > 192.0.2.2:5201          32            6    5.33\n'
    '         FLUSH_TCP_TS; loss or reordering\n'
    '         at 1 of 4 breaks\n'
    '   1   192.0.2.2:5201 > 192.0.2.1:40000           3            3    1.00\n'
    '         NOT_HELD_ZERO_PAYLOAD\n'
    '\n'
    'Why super-packets ended (napi)\n'
    'reason                  count   share\n'
    '─────────────────────────────────────\n'
    'NOT_HELD_ZERO_PAYLOAD       3   33.3%\n'
    'FLUSH_TCP_TS                3   33.3%\n'
    'END_PSH                     2   22.2%\n'
    'FLUSH_SEQ                   1   11.1%\n'
    '  NOT_HELD_ZERO_PAYLOAD: no payload (pure ACK): never held\n'
    '  FLUSH_TCP_TS: TCP timestamp changed: the sender starts a new TSval between\n'
    '    bursts, GRO cannot merge across it\n'
    '  END_PSH: PSH merged: the sender marked the end of a write, GRO pushes up\n'
    '  FLUSH_SEQ: sequence gap: loss, reordering or retransmission\n'
    '\n'
    'Per encapsulation\n'
    'encapsulation           packets   ideal ratio   napi ratio\n'
    '──────────────────────────────────────────────────────────\n'
    'eth/ipv4/gre/ipv4/tcp        35          3.89         3.89\n'
)


def test_gre_report_exact():
    assert run("analyze", GRE) == (
        "gropcap 0.1.0: kernel 6.18, 35 packets, 48.0 kB on the wire\n"
        f"capture: {GRE}\n" + GRE_REPORT)


TWO_FILES_REPORT = (
    RECEIVE_DEFAULTS +
    '\n'
    'data direction: 5.33 segments per super-packet (napi); all packets including\n'
    'pure ACKs: 3.89\n'
    '\n'
    'Aggregation\n'
    'model   data ratio   ratio   packets in   super-packets out   largest\n'
    '─────────────────────────────────────────────────────────────────────\n'
    'napi          5.33    3.89           70                  18         8\n'
    '  data ratio: segments carrying payload per super-packet carrying payload;\n'
    '    ratio: every packet in (pure ACKs included) per super-packet out; largest:\n'
    '    segments in the largest super-packet\n'
    'napi depends on them: of its 18 super-packets 0% by a poll end, 0% by a\n'
    '  full-budget or deferred flush, 0% by a GRO table eviction\n'
    "poll ends: 2 TCP data directions with the receiver's ACKs in the capture; if\n"
    '  that receiver had GRO on, --poll-acks infers the napi polls from its ACKs\n'
    '  instead of from the timing (docs/gro-model.md)\n'
    '\n'
    'Per file (2 files)\n'
    'file                packets     bytes   napi data / all\n'
    '───────────────────────────────────────────────────────\n'
    'crafted_gre.pcap         35   48.0 kB       5.33 / 3.89\n'
    'crafted_ipip.pcap        35   48.0 kB       5.33 / 3.89\n'
    '  data / all: the data ratio and the ratio of every packet, as above; a\n'
    '    super-packet counts for the file of its first packet\n'
    '\n'
    'Flows with the most super-packets (napi): 1 of 4; --top N shows more\n'
    'flow   endpoints / top end reason           pkts in   super-pkts   ratio\n'
    '────────────────────────────────────────────────────────────────────────\n'
    '   0   192.0.2.1:40000 > 192.0.2.2:5201          32            6    5.33\n'
    '         FLUSH_TCP_TS; loss or reordering\n'
    '         at 1 of 4 breaks\n'
    '\n'
    'Why super-packets ended (napi)\n'
    'reason                  count   share\n'
    '─────────────────────────────────────\n'
    'NOT_HELD_ZERO_PAYLOAD       6   33.3%\n'
    'FLUSH_TCP_TS                6   33.3%\n'
    'END_PSH                     4   22.2%\n'
    'FLUSH_SEQ                   2   11.1%\n'
    '  NOT_HELD_ZERO_PAYLOAD: no payload (pure ACK): never held\n'
    '  FLUSH_TCP_TS: TCP timestamp changed: the sender starts a new TSval between\n'
    '    bursts, GRO cannot merge across it\n'
    '  END_PSH: PSH merged: the sender marked the end of a write, GRO pushes up\n'
    '  FLUSH_SEQ: sequence gap: loss, reordering or retransmission\n'
    '\n'
    'Per encapsulation\n'
    'encapsulation           packets   napi ratio\n'
    '────────────────────────────────────────────\n'
    'eth/ipv4/gre/ipv4/tcp        35         3.89\n'
    'eth/ipv4/ipv4/tcp            35         3.89\n'
    '\n'
    'Egress segmentation\n'
    'model   scenario   super-pkts   segments   hardware   software   as is   dropped\n'
    '────────────────────────────────────────────────────────────────────────────────\n'
    'napi    encap              18          6          0          0       6        12\n'
    '  segments = hardware (TSO/USO) + software (GSO) + as is (super-packets of one\n'
    '    packet, sent unchanged); dropped counts super-packets above the egress MTU\n'
    '    with DF (or IPv6), which put no segment on the wire\n'
)


def _two(tmp_path):
    d = tmp_path / "two"
    d.mkdir()
    for f in (GRE, IPIP):
        shutil.copy(f, d)
    return d


def test_directory_report_exact_with_top_and_egress(tmp_path):
    d = _two(tmp_path)
    out = run("analyze", d, "--top", "1", "--model", "napi", "--egress", "encap",
              "--egress-mtu", "1400")
    assert out == ("gropcap 0.1.0: kernel 6.18, 70 packets, 96.0 kB on the wire\n"
                   f"capture: 2 files in {d}\n"
                   # two captures of the same time: separate receivers (--captures auto)
                   "inputs: 2 files: 2 separate receivers (file 2 starts 0.408 ms before "
                   "file 1\n  ends); --captures continuous to replay them as one\n"
                   + TWO_FILES_REPORT)
    assert all(len(line) <= 80 for line in out.splitlines()[2:])


def test_json_has_top_flows_and_per_file_data(tmp_path):
    d = _two(tmp_path)
    s = json.loads(run("analyze", d, "--top", "2", "--format", "json"))
    assert s["top_flows"]["model"] == "napi"
    assert (s["top_flows"]["total"], s["top_flows"]["shown"]) == (4, 2)
    first = s["top_flows"]["flows"][0]
    # the two files are separate receivers (--captures auto): flow 0 of the first file
    # and flow 2 of the second, the same traffic, tie at 6 super-packets
    assert (first["flow_id"], first["packets"], first["superpackets"]) == (0, 32, 6)
    assert s["inputs"]["run_of_file"] == [0, 1]
    assert first["probable_cause"] == "loss or reordering at 1 of 4 breaks"
    gre, ipip = s["files"]
    assert (gre["packets"], gre["wire_bytes"]) == (35, 47994)
    assert gre["models"]["napi"]["data_ratio"] == round(32 / 6, 4)
    assert gre["models"]["napi"]["superpackets_out"] + \
        ipip["models"]["napi"]["superpackets_out"] == s["models"]["napi"]["superpackets_out"]
    assert s["models"]["napi"]["data_segments_in"] == 64


def test_egress_columns_add_up(tmp_path):
    s = json.loads(run("analyze", GRE, "--format", "json", "--egress", "decap",
                       "--egress-mtu", "1400"))
    for e in s["egress"].values():
        assert e["segments"] == (e["hardware_segments"] + e["software_segments"]
                                 + e["unsegmented"])


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 999, 1000, 47994, 2855269, 123456789)] == \
        ["0 B", "999 B", "1.00 kB", "48.0 kB", "2.86 MB", "123 MB"]
