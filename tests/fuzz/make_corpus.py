#!/usr/bin/env python3
"""Build the hostile-input regression corpus in ``tests/fuzz/corpus/`` (deterministic).

    python tests/fuzz/make_corpus.py          # rewrites the generated files + MANIFEST.json

Each entry is a small capture made by hand for one hostile-input class named in the
fuzzing issue, with the outcome this script derives from how it built the file (where
it put the damage), not from running gropcap:

- ``error``/``offset``/``record``: the located CaptureError expected (message substring,
  byte offset of the damaged header, record number);
- ``records``/``status``: records read and the per-status row counts;
- ``warning``: a substring of a capture warning; ``records_at_most`` when a cut
  compressed stream keeps only the records decompressed before the cut.

Inputs found by the long fuzz run are added to the same directory by hand (with an
entry in ``found.json``) and replayed by ``tests/fuzz/test_regressions_fuzz.py`` too.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gropcap import constants as C  # noqa: E402
from gropcap.capture.writer import pcapng_block, write_pcap, write_pcapng  # noqa: E402
from tests.craft import eth, gre, ipv4, ipv6, tcp  # noqa: E402
from tests.fuzz.harness import deep_frame, vlan_flood_frame  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
TS = [1_700_000_000_000_000_000 + 1000 * i for i in range(64)]
TCP = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP, tcp(1000, 80, seq=1, payload=b"d" * 40)))
REC = 16 + len(TCP)          # one pcap record of TCP


def _pcap(frames, **kw) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.pcap"
        write_pcap(p, frames, TS[:len(frames)], **kw)
        return p.read_bytes()


def _pcapng(frames, **kw) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.pcapng"
        write_pcapng(p, frames, TS[:len(frames)], **kw)
        return p.read_bytes()


def _blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, length) of every block of a little-endian pcapng file."""
    out, pos = [], 0
    while pos < len(data):
        t, n = struct.unpack_from("<II", data, pos)
        out.append((pos, t, n))
        pos += n
    return out


def _put32(data: bytes, off: int, value: int, bo: str = "<") -> bytes:
    b = bytearray(data)
    struct.pack_into(bo + "I", b, off, value)
    return bytes(b)


def build() -> dict:
    entries: dict[str, tuple[bytes, dict]] = {}
    five = _pcap([TCP] * 5)

    # --- pcap framing ---
    for name, val in (("ffffffff", 0xFFFFFFFF), ("80000000", 0x80000000),
                      ("max_plus_1", C.MAX_RECORD_LEN + 1)):
        at = 24 + 2 * REC
        entries[f"pcap_caplen_{name}.pcap"] = (_put32(five, at + 8, val), {
            "error": "256 KiB", "offset": at, "record": 2})
    entries["pcap_caplen_zero_records.pcap"] = (_pcap([b""] * 4, wire_lens=[60] * 4), {
        "records": 4, "status": {"TRUNCATED": 4}})
    entries["pcap_caplen_one_records.pcap"] = (_pcap([b"\x02"] * 3), {
        "records": 3, "status": {"TRUNCATED": 3}})
    entries["pcap_wire_len_zero.pcap"] = (_pcap([TCP] * 2, wire_lens=[0, 0]), {
        "records": 2, "status": {"OK": 2}})
    entries["pcap_wire_len_huge.pcap"] = (_pcap([TCP] * 2, wire_lens=[2**32 - 1] * 2), {
        "records": 2, "status": {"OK": 2}})
    entries["pcap_cut_mid_record.pcap"] = (five[:24 + 3 * REC + 20], {
        "records": 3, "warning": "ends inside record 3"})
    entries["pcap_cut_in_file_header.pcap"] = (five[:10], {
        "error": "pcap file header", "offset": 0, "truncated": True})
    entries["pcap_snaplen_zero_and_huge_caplen_ok.pcap"] = (_pcap([TCP] * 2, snaplen=0), {
        "records": 2, "status": {"OK": 2}})

    # --- pcapng framing ---
    ng = _pcapng([TCP] * 4, linktypes=(1,))
    epbs = [(o, n) for o, t, n in _blocks(ng) if t == 6]
    at, blen = epbs[1]
    entries["pcapng_block_len_zero.pcapng"] = (_put32(ng, at + 4, 0), {
        "error": "below the 12-byte minimum", "offset": at, "record": 1})
    entries["pcapng_block_len_not_multiple_of_4.pcapng"] = (_put32(ng, at + 4, blen + 1), {
        "error": "not a multiple of 4", "offset": at, "record": 1})
    entries["pcapng_block_len_huge.pcapng"] = (_put32(ng, at + 4, 0xFFFFFFFC), {
        "error": "sanity limit", "offset": at, "record": 1})
    entries["pcapng_block_len_negative.pcapng"] = (_put32(ng, at + 4, 0x80000000), {
        "error": "sanity limit", "offset": at, "record": 1})
    entries["pcapng_block_len_past_eof.pcapng"] = (_put32(ng, at + 4, 60 << 20), {
        "records": 1, "warning": "ends inside"})
    entries["pcapng_trailing_len_mismatch.pcapng"] = (_put32(ng, at + blen - 4, blen + 4), {
        "error": "trailing block length", "offset": at, "record": 1})
    entries["pcapng_epb_caplen_past_block.pcapng"] = (_put32(ng, at + 20, blen), {
        "error": "exceeds the", "offset": at, "record": 1})
    entries["pcapng_epb_caplen_ffffffff.pcapng"] = (_put32(ng, at + 20, 0xFFFFFFFF), {
        "error": "256 KiB", "offset": at, "record": 1})
    entries["pcapng_undefined_interface.pcapng"] = (_put32(ng, at + 8, 7), {
        "error": "interface 7", "offset": at, "record": 1})
    # an IDB option whose length runs past the block
    idb = [(o, n) for o, t, n in _blocks(ng) if t == 1][0]
    bad_idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 200)
                           + b"\x09\x00\x00\x00")
    entries["pcapng_idb_option_overrun.pcapng"] = (
        ng[:idb[0]] + bad_idb + ng[idb[0] + idb[1]:], {
            "error": "runs past the block end", "offset": idb[0] + 16, "record": 0})
    # a block type the reader does not know, with a body of garbage, is skipped
    entries["pcapng_unknown_block_skipped.pcapng"] = (
        ng[:at] + pcapng_block(0x0BADF00D, b"\xff" * 37) + ng[at:], {
            "records": 4, "status": {"OK": 4}})
    # SHB claiming a big-endian section in a little-endian-looking block length
    entries["pcapng_bad_byte_order_magic.pcapng"] = (
        ng[:8] + b"\x4d\x3c\x2b\x1b" + ng[12:], {
            "error": "byte-order magic", "offset": 8})

    # --- encapsulation ---
    m = C.MAX_ENCAP_DEPTH
    entries["encap_gre_depth_limit_and_beyond.pcap"] = (_pcap([
        deep_frame(m, ["gre"] * m), deep_frame(m + 1, ["gre"] * (m + 1)),
        deep_frame(40, ["vxlan"] * 40)]), {
            "records": 3, "status": {"OK": 1, "ENCAP_TOO_DEEP": 2}})
    entries["encap_vlan_flood.pcap"] = (_pcap([vlan_flood_frame(5000)]), {
        "records": 1, "status": {"OK": 1}})
    v6 = eth(ipv6("2001:db8::1", "2001:db8::2", C.IPPROTO_TCP, tcp(1, 2)), C.ETH_P_IPV6)
    gre_loop = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_GRE,
                        gre(C.ETH_P_IP, b"\x45" + bytes(19))))
    entries["encap_gre_inner_zero_ihl_header.pcap"] = (_pcap([gre_loop, v6]), {
        "records": 2, "status": {"BAD_IP_HEADER": 1, "OK": 1}})
    big_len = bytearray(TCP)
    struct.pack_into("!H", big_len, 14 + 2, 0xFFFF)
    entries["ipv4_total_length_ffff.pcap"] = (_pcap([bytes(big_len)]), {
        "records": 1, "status": {"BAD_LENGTH": 1}})

    # --- compressed ---
    for kind, fn in (("gz", lambda d: gzip.compress(d, mtime=0)), ("xz", lzma.compress),
                     ("bz2", bz2.compress)):
        entries[f"compressed_cut.pcap.{kind}"] = (fn(five)[:-9 if kind != "gz" else -30], {
            "records_at_most": 5, "warning": "stream ends early"})
    gz = bytearray(gzip.compress(five, mtime=0))
    for i in range(30, len(gz) - 8):
        gz[i] ^= 0xA5
    entries["compressed_corrupt.pcap.gz"] = (bytes(gz), {"error": "corrupt gzip"})
    return entries


def main() -> int:
    CORPUS.mkdir(parents=True, exist_ok=True)
    entries = build()
    manifest = {}
    for name, (data, expect) in sorted(entries.items()):
        (CORPUS / name).write_bytes(data)
        manifest[name] = expect
    (CORPUS / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{len(entries)} corpus files in {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
