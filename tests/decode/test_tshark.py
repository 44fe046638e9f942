"""Cross-check the capture reader and the reference decoder against tshark, field by field,
on every bundled sample capture.

tshark prints one line per frame; a field that occurs in several layers (IP in IP, the outer
and inner Ethernet of a VXLAN frame, ...) comes out comma-separated in protocol order: the
first occurrence is compared with the decoder's ``outer_*`` column and the last with the
innermost one. ``frame.protocols`` tells which IP versions the layers have.

tshark 4.0 does not dissect the DSA link types 281-285; for those files the tag is cut out
here (its position is fixed per link type) and tshark reads the resulting Ethernet frames,
while the decoder reads the original file.

Run with ``pytest -s tests/decode/test_tshark.py`` to see how many fields were compared.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gropcap import constants as C
from gropcap.capture import read_capture, write_pcap

from where import TESTS

reference = pytest.importorskip("gropcap.decode.reference",
                                reason="reference decoder (gropcap/decode/reference.py) missing")

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed "
                                "(apt-get install tshark) - cannot cross-check the decoder")

SAMPLES = Path(TESTS).parent / "sample_pcaps"
ALL = sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))
# link type -> (offset, length) of the DSA tag to cut before tshark sees the frame
DSA_TAG_AT = {C.LINKTYPE_DSA_TAG_BRCM: (12, 4), C.LINKTYPE_DSA_TAG_BRCM_PREPEND: (0, 4),
              C.LINKTYPE_DSA_TAG_DSA: (12, 4), C.LINKTYPE_DSA_TAG_EDSA: (12, 8)}

FIELDS = [
    "frame.protocols", "frame.time_epoch", "frame.len", "frame.cap_len", "frame.interface_id",
    "eth.src", "eth.dst", "sll.src.eth", "sll.etype",
    "vlan.id", "vlan.priority", "ieee8021ad.id", "ieee8021ad.priority",
    "ip.src", "ip.dst", "ip.ttl", "ip.id", "ip.dsfield", "ip.flags.df", "ip.flags.mf",
    "ip.len", "ip.proto", "ip.hdr_len", "ip.frag_offset",
    "ipv6.src", "ipv6.dst", "ipv6.hlim", "ipv6.tclass", "ipv6.flow", "ipv6.plen",
    "udp.srcport", "udp.dstport", "udp.length", "udp.checksum",
    "gre.flags_and_version", "gre.proto", "gre.key", "gre.sequence_number",
    "erspan.version", "erspan.spanid",
    "vxlan.vni", "vxlan.next_proto", "geneve.vni", "geneve.proto_type",
    "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags",
    "tcp.window_size_value", "tcp.len", "tcp.hdr_len", "tcp.urgent_pointer", "tcp.checksum",
    "tcp.options.timestamp.tsval", "tcp.options.timestamp.tsecr", "tcp.options.mss_val",
    "tcp.options.wscale.shift",
]

# Totals over the whole module, printed at the end (pytest -s).
TOTALS = {"files": 0, "packets": 0, "fields": 0}


def tshark_rows(path: Path) -> list[dict[str, list[str]]]:
    """One dict per frame: field -> list of occurrences (outermost first)."""
    cmd = [TSHARK, "-n", "-r", str(path), "-o", "tcp.analyze_sequence_numbers:FALSE",
           "-o", "tcp.desegment_tcp_streams:FALSE", "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    rows = []
    for line in out.splitlines():
        values = line.split("\t")
        assert len(values) == len(FIELDS), line
        rows.append({f: (v.split(",") if v else []) for f, v in zip(FIELDS, values)})
    return rows


def num(s: str) -> int:
    if s in ("True", "False"):
        return int(s == "True")
    return int(s, 0)


def addr(s: str) -> bytes:
    a = ipaddress.ip_address(s)
    return a.packed if a.version == 6 else bytes(10) + b"\xff\xff" + a.packed


def mac(s: str) -> int:
    return int(s.replace(":", ""), 16)


class Checker:
    """Compares tshark values with decoder columns for one frame, counting comparisons."""

    def __init__(self, name: str, i: int, cols: dict) -> None:
        self.name, self.i, self.cols = name, i, cols
        self.count = 0
        self.errors: list[str] = []

    def eq(self, col: str, want, what: str) -> None:
        got = self.cols[col][self.i]
        self.count += 1
        if got != want:
            self.errors.append(f"{self.name} frame {self.i}: {col}={got!r}, tshark {what}={want!r}")


def ip_layers(protocols: list[str]) -> list[int]:
    """IP versions of the frame's IP layers, outermost first, from frame.protocols."""
    return [4 if p == "ip" else 6 for p in ":".join(protocols).split(":") if p in ("ip", "ipv6")]


def check_ip(c: Checker, t: dict, prefix: str, version: int, k4: int, k6: int) -> None:
    """One IP layer: the k4-th IPv4 / k6-th IPv6 occurrence of the tshark fields."""
    c.eq(prefix + "version", version, "ip version")
    if version == 4:
        g = {f: t[f][k4] for f in ("ip.src", "ip.dst", "ip.ttl", "ip.id", "ip.dsfield",
                                   "ip.flags.df", "ip.flags.mf", "ip.len", "ip.proto",
                                   "ip.hdr_len", "ip.frag_offset")}
        c.eq(prefix + "src", addr(g["ip.src"]), "ip.src")
        c.eq(prefix + "dst", addr(g["ip.dst"]), "ip.dst")
        c.eq(prefix + "ttl", num(g["ip.ttl"]), "ip.ttl")
        c.eq(prefix + "id", num(g["ip.id"]), "ip.id")
        c.eq(prefix + "tos", num(g["ip.dsfield"]), "ip.dsfield")
        c.eq(prefix + "df", bool(num(g["ip.flags.df"])), "ip.flags.df")
        c.eq(prefix + "mf", bool(num(g["ip.flags.mf"])), "ip.flags.mf")
        c.eq(prefix + "tot_len", num(g["ip.len"]), "ip.len")
        c.eq(prefix + "proto", num(g["ip.proto"]), "ip.proto")
        c.eq(prefix + "hdr_len", num(g["ip.hdr_len"]), "ip.hdr_len")
        c.eq(prefix + "frag_off", num(g["ip.frag_offset"]) // 8, "ip.frag_offset")
    else:
        g = {f: t[f][k6] for f in ("ipv6.src", "ipv6.dst", "ipv6.hlim", "ipv6.tclass",
                                   "ipv6.flow", "ipv6.plen")}
        c.eq(prefix + "src", addr(g["ipv6.src"]), "ipv6.src")
        c.eq(prefix + "dst", addr(g["ipv6.dst"]), "ipv6.dst")
        c.eq(prefix + "ttl", num(g["ipv6.hlim"]), "ipv6.hlim")
        c.eq(prefix + "tos", num(g["ipv6.tclass"]), "ipv6.tclass")
        c.eq(prefix + "flow_label", num(g["ipv6.flow"]), "ipv6.flow")
        c.eq(prefix + "tot_len", 40 + num(g["ipv6.plen"]), "ipv6.plen + 40")


def check_frame(c: Checker, t: dict, tag_len: int) -> None:
    """Every field tshark printed for this frame against the decoder's columns."""
    sec, _, frac = t["frame.time_epoch"][0].partition(".")
    c.eq("ts_ns", int(Decimal(sec + "." + frac) * 1_000_000_000), "frame.time_epoch")
    c.eq("wire_len", num(t["frame.len"][0]) + tag_len, "frame.len (+ DSA tag)")
    c.eq("cap_len", num(t["frame.cap_len"][0]) + tag_len, "frame.cap_len (+ DSA tag)")
    if t["frame.interface_id"]:
        c.eq("iface", num(t["frame.interface_id"][0]), "frame.interface_id")

    # L2: first Ethernet = outer, a second one = the tunnel's inner Ethernet
    if t["eth.src"]:
        c.eq("eth_src", mac(t["eth.src"][0]), "eth.src")
        c.eq("eth_dst", mac(t["eth.dst"][0]), "eth.dst")
        if len(t["eth.src"]) > 1:
            c.eq("inner_eth_src", mac(t["eth.src"][-1]), "eth.src (last)")
            c.eq("inner_eth_dst", mac(t["eth.dst"][-1]), "eth.dst (last)")
    if t["sll.src.eth"]:
        c.eq("eth_src", mac(t["sll.src.eth"][0]), "sll.src.eth")
        c.eq("eth_type", num(t["sll.etype"][0]), "sll.etype")
    tcis = []
    for f in ("ieee8021ad", "vlan"):   # 802.1ad comes outside 802.1Q in our samples
        for vid, prio in zip(t[f + ".id"], t[f + ".priority"]):
            tcis.append((num(prio) << 13) | num(vid))
    if tcis:
        c.eq("vlan_tci0", tcis[0], "vlan/ieee8021ad id+priority")
        if len(tcis) > 1:
            c.eq("vlan_tci1", tcis[1], "vlan id+priority (inner tag)")

    # IP layers
    versions = ip_layers(t["frame.protocols"])
    if versions:
        k4 = versions.count(4) - 1
        k6 = versions.count(6) - 1
        check_ip(c, t, "ip_", versions[-1], k4, k6)
        if len(versions) > 1:
            check_ip(c, t, "outer_ip_", versions[0], 0, 0)

    # tunnels
    if t["gre.proto"]:
        c.eq("tun_proto", num(t["gre.proto"][0]), "gre.proto")
        c.eq("tun_flags", num(t["gre.flags_and_version"][0]), "gre.flags_and_version")
        if t["gre.key"]:
            c.eq("tun_key", num(t["gre.key"][0]), "gre.key")
        if t["gre.sequence_number"]:
            c.eq("tun_seq", num(t["gre.sequence_number"][0]), "gre.sequence_number")
    if t["erspan.version"]:
        c.eq("erspan_ver", num(t["erspan.version"][0]), "erspan.version")
        c.eq("erspan_session", num(t["erspan.spanid"][0]), "erspan.spanid")
    if t["vxlan.vni"]:
        c.eq("tun_key", num(t["vxlan.vni"][0]) << 8, "vxlan.vni << 8")
        if t["vxlan.next_proto"]:
            c.eq("tun_proto", num(t["vxlan.next_proto"][0]), "vxlan.next_proto")
    if t["geneve.vni"]:
        c.eq("tun_key", num(t["geneve.vni"][0]) << 8, "geneve.vni << 8")
        c.eq("tun_proto", num(t["geneve.proto_type"][0]), "geneve.proto_type")
    if t["udp.srcport"] and (t["tcp.srcport"] or len(t["udp.srcport"]) > 1):
        # UDP under something else: the tunnel's outer UDP header
        c.eq("outer_sport", num(t["udp.srcport"][0]), "udp.srcport")
        c.eq("outer_dport", num(t["udp.dstport"][0]), "udp.dstport")
        c.eq("outer_udp_len", num(t["udp.length"][0]), "udp.length")
        c.eq("outer_udp_csum", num(t["udp.checksum"][0]), "udp.checksum")

    # innermost TCP
    if t["tcp.srcport"]:
        c.eq("sport", num(t["tcp.srcport"][-1]), "tcp.srcport")
        c.eq("dport", num(t["tcp.dstport"][-1]), "tcp.dstport")
        c.eq("tcp_seq", num(t["tcp.seq_raw"][-1]), "tcp.seq_raw")
        c.eq("tcp_ack", num(t["tcp.ack_raw"][-1]), "tcp.ack_raw")
        c.eq("tcp_flags", num(t["tcp.flags"][-1]) & 0x1FF, "tcp.flags")
        c.eq("tcp_window", num(t["tcp.window_size_value"][-1]), "tcp.window_size_value")
        c.eq("payload_len", num(t["tcp.len"][-1]), "tcp.len")
        c.eq("tcp_doff", num(t["tcp.hdr_len"][-1]) // 4, "tcp.hdr_len / 4")
        c.eq("tcp_urg_ptr", num(t["tcp.urgent_pointer"][-1]), "tcp.urgent_pointer")
        c.eq("l4_csum", num(t["tcp.checksum"][-1]), "tcp.checksum")
        has_ts = bool(t["tcp.options.timestamp.tsval"])
        c.eq("tcp_has_ts", has_ts, "tcp.options.timestamp present")
        if has_ts:
            c.eq("tcp_tsval", num(t["tcp.options.timestamp.tsval"][-1]), "tsval")
            c.eq("tcp_tsecr", num(t["tcp.options.timestamp.tsecr"][-1]), "tsecr")
        c.eq("tcp_mss", num(t["tcp.options.mss_val"][-1]) if t["tcp.options.mss_val"] else 0,
             "tcp.options.mss_val")
        c.eq("tcp_wscale", num(t["tcp.options.wscale.shift"][-1])
             if t["tcp.options.wscale.shift"] else -1, "tcp.options.wscale.shift")


def tshark_input(name: str, tmp_path: Path) -> tuple[Path, int]:
    """The file tshark reads, and the DSA tag length cut from each frame (0 if none)."""
    path = SAMPLES / name
    _, batch = read_capture(path)
    lt = int(batch.linktype[0])
    if lt not in DSA_TAG_AT:
        return path, 0
    at, n = DSA_TAG_AT[lt]
    frames = [(lambda f: f[:at] + f[at + n:])(batch.frame(i)) for i in range(len(batch))]
    out = tmp_path / (name + ".untagged.pcap")
    write_pcap(out, frames, batch.ts_ns.tolist(), linktype=C.LINKTYPE_ETHERNET,
               wire_lens=(batch.wire_len - n).tolist())
    return out, n


@pytest.mark.parametrize("name", ALL)
def test_decoder_matches_tshark(name, tmp_path):
    _, batch = read_capture(SAMPLES / name)
    cols = reference.decode_batch(batch).to_pydict()
    path, tag_len = tshark_input(name, tmp_path)
    rows = tshark_rows(path)
    assert len(rows) == len(batch), "tshark and gropcap see different record counts"
    errors, fields = [], 0
    for i, t in enumerate(rows):
        c = Checker(name, i, cols)
        check_frame(c, t, tag_len)
        # a TCP frame has at least: time, lengths, 6 IP fields, 10 TCP fields
        assert c.count >= 20, f"{name} frame {i}: only {c.count} fields compared"
        fields += c.count
        errors += c.errors
    TOTALS["files"] += 1
    TOTALS["packets"] += len(rows)
    TOTALS["fields"] += fields
    print(f"\n{name}: {len(rows)} packets, {fields} fields compared with tshark")
    assert not errors, f"{len(errors)} mismatches, first ones:\n" + "\n".join(errors[:20])


def test_tshark_totals():
    """Runs after the per-file tests (file order): the cross-check was not vacuous."""
    print(f"\ntshark cross-check: {TOTALS['files']} files, {TOTALS['packets']} packets, "
          f"{TOTALS['fields']} fields compared")
    if TOTALS["files"] == 0:
        pytest.skip("per-file tshark comparisons were not run in this session")
    assert TOTALS["packets"] >= 20 * TOTALS["files"]
    assert TOTALS["fields"] >= 20 * TOTALS["packets"]


@pytest.mark.parametrize("name", [n for n in ALL if n.startswith("crafted_")
                                  and n.endswith(".pcap") and "dsa" not in n])
def test_tshark_verifies_crafted_checksums_once_padded(name, tmp_path):
    """README promise, checked without gropcap's decoder: pad each record to wire_len with
    zeros and tshark finds every IPv4 header, TCP and GRE checksum good."""
    _, batch = read_capture(SAMPLES / name)
    frames = [batch.frame(i) + bytes(int(batch.wire_len[i] - batch.cap_len[i]))
              for i in range(len(batch))]
    padded = tmp_path / name
    write_pcap(padded, frames, batch.ts_ns.tolist(), linktype=int(batch.linktype[0]),
               big_endian=name == "crafted_big_endian.pcap")
    out = subprocess.run(
        [TSHARK, "-n", "-r", str(padded), "-o", "ip.check_checksum:TRUE",
         "-o", "tcp.check_checksum:TRUE", "-T", "fields", "-E", "occurrence=a",
         "-E", "aggregator=,", "-e", "ip.checksum.status", "-e", "tcp.checksum.status",
         "-e", "gre.checksum.status"],
        capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    assert len(out) == len(frames)
    statuses = [s for line in out for field in line.split("\t") if field
                for s in field.split(",")]
    # status 1 = good (Wireshark PROTO_CHECKSUM_E_GOOD); at least the TCP one per frame
    assert len(statuses) >= len(frames)
    assert set(statuses) == {"1"}, f"{name}: checksum statuses {sorted(set(statuses))}"
