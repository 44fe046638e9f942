"""Bad capture input: one clear CaptureError (path, byte offset, record, what to do).

Every case asserts the exception type and the located parts of the message; cut files
must keep their complete records and say where they were cut.
"""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.capture import iter_batches, read_capture, write_pcap, write_pcapng
from gropcap.capture.writer import pcapng_block
from gropcap.errors import CaptureError, CaptureTruncatedError

SHB_LE = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
IDB_LE = pcapng_block(1, struct.pack("<HHI", 1, 0, 0))


def epb(data: bytes, iface: int = 0, ts: int = 1) -> bytes:
    return pcapng_block(6, struct.pack("<IIIII", iface, 0, ts, len(data), len(data)) + data)


def three_record_pcap(tmp_path, **kw):
    p = tmp_path / "ok.pcap"
    write_pcap(p, [b"a" * 60, b"b" * 70, b"c" * 80], [1000, 2000, 3000], **kw)
    return p


def raises_located(exc_type, path, call, *, offset=None, record=None, parts=()):
    with pytest.raises(exc_type) as ei:
        call()
    e = ei.value
    msg = str(e)
    assert e.path == str(path) and str(path) in msg
    if offset is not None:
        assert e.offset == offset and f"byte offset {offset}" in msg
    if record is not None:
        assert e.record == record and f"record {record}" in msg
    for part in parts:
        assert part in msg, (part, msg)
    assert e.hint, "every capture error says what to do"
    return e


# --- magic ------------------------------------------------------------------------------

def test_bad_magic_names_first_bytes_and_accepted_formats(tmp_path):
    p = tmp_path / "notes.pcap"
    p.write_bytes(b"PK\x03\x04 this is a zip file, not a capture")
    raises_located(CaptureError, p, lambda: read_capture(p), offset=0, record=0,
                   parts=("50 4b 03 04", "pcapng", "a1b2c3d4", "gzip"))


def test_modified_pcap_magic_gets_editcap_hint(tmp_path):
    p = tmp_path / "kuz.pcap"
    p.write_bytes(struct.pack("<I", 0xA1B2CD34) + bytes(40))
    e = raises_located(CaptureError, p, lambda: read_capture(p), offset=0)
    assert "editcap" in e.hint


def test_compressed_non_capture(tmp_path):
    p = tmp_path / "x.pcap.gz"
    p.write_bytes(gzip.compress(b"hello world, no capture in here"))
    raises_located(CaptureError, p, lambda: read_capture(p), offset=0,
                   parts=("gzip-compressed", "68 65 6c 6c"))


def test_empty_file_is_truncated(tmp_path):
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    e = raises_located(CaptureTruncatedError, p, lambda: read_capture(p), offset=0)
    assert "empty" in str(e)


def test_missing_file(tmp_path):
    p = tmp_path / "nope.pcap"
    raises_located(CaptureError, p, lambda: read_capture(p), parts=("cannot open",))


# --- pcap -------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [4, 10, 23])
def test_pcap_cut_inside_file_header_raises(tmp_path, keep):
    p = three_record_pcap(tmp_path)
    p.write_bytes(p.read_bytes()[:keep])
    raises_located(CaptureTruncatedError, p, lambda: read_capture(p), offset=0,
                   parts=("24-byte pcap file header",))


@pytest.mark.parametrize("cut", [1, 8, 15, 16, 17, 50])
def test_pcap_cut_mid_record_keeps_complete_records(tmp_path, cut):
    p = three_record_pcap(tmp_path)
    data = p.read_bytes()
    third = 24 + (16 + 60) + (16 + 70)      # file offset of record 2's header
    p.write_bytes(data[:third + cut])
    info, b = read_capture(p)
    assert [b.frame(i) for i in range(len(b))] == [b"a" * 60, b"b" * 70]
    assert info.records == 2
    (w,) = info.warnings
    assert f"byte offset {third}" in w and "record 2" in w and "still being written" in w
    # streaming sees the same cut
    got = list(iter_batches(p, batch_records=1))
    assert sum(len(x) for _i, x in got) == 2 and got[-1][0].warnings == info.warnings


@pytest.mark.parametrize("big_endian", [False, True])
def test_pcap_absurd_caplen_raises_before_allocating(tmp_path, big_endian):
    p = three_record_pcap(tmp_path, big_endian=big_endian, snaplen=0)
    data = bytearray(p.read_bytes())
    second = 24 + 16 + 60
    bo = ">" if big_endian else "<"
    struct.pack_into(bo + "I", data, second + 8, 0x7FFFFFF0)   # incl_len of record 1
    p.write_bytes(bytes(data))
    raises_located(CaptureError, p, lambda: read_capture(p), offset=second, record=1,
                   parts=("2147483632", "256 KiB"))


def test_pcap_caplen_above_snaplen_slack_raises(tmp_path):
    # snaplen 200: a 70000-byte record (> 65535 slack, < 256 KiB) is corrupt framing
    p = tmp_path / "s.pcap"
    write_pcap(p, [b"x" * 100, b"y" * 70000], [1, 2], snaplen=200)
    raises_located(CaptureError, p, lambda: read_capture(p), offset=24 + 16 + 100, record=1,
                   parts=("snap length 200",))


def test_pcap_caplen_above_snaplen_within_slack_warns(tmp_path):
    p = tmp_path / "s.pcap"
    write_pcap(p, [b"x" * 100, b"y" * 300, b"z" * 400], [1, 2, 3], snaplen=200)
    info, b = read_capture(p)
    assert b.cap_len.tolist() == [100, 300, 400]
    (w,) = info.warnings       # once per file
    assert "record 1" in w and "snap length 200" in w


def test_pcap_caplen_above_wire_len_is_kept(tmp_path):
    p = tmp_path / "c.pcap"
    write_pcap(p, [b"q" * 64], [5], wire_lens=[60])
    info, b = read_capture(p)
    assert b.cap_len.tolist() == [64] and b.wire_len.tolist() == [60] and not info.warnings


# --- pcapng -----------------------------------------------------------------------------

def _ng(tmp_path, *blocks, name="b.pcapng"):
    p = tmp_path / name
    p.write_bytes(b"".join(blocks))
    return p


def test_pcapng_block_length_not_multiple_of_4(tmp_path):
    bad = bytearray(epb(b"abcd"))
    struct.pack_into("<I", bad, 4, 33)
    p = _ng(tmp_path, SHB_LE, IDB_LE, epb(b"ok"), bytes(bad))
    off = len(SHB_LE) + len(IDB_LE) + len(epb(b"ok"))
    raises_located(CaptureError, p, lambda: read_capture(p), offset=off, record=1,
                   parts=("enhanced packet block", "33", "multiple of 4"))


def test_pcapng_block_length_below_minimum(tmp_path):
    bad = struct.pack("<II", 0x7FFF0001, 8) + bytes(8)
    p = _ng(tmp_path, SHB_LE, IDB_LE, bad)
    off = len(SHB_LE) + len(IDB_LE)
    raises_located(CaptureError, p, lambda: read_capture(p), offset=off, record=0,
                   parts=("unknown block (type 0x7fff0001)", "below the 12-byte minimum"))


def test_pcapng_trailing_length_mismatch(tmp_path):
    bad = bytearray(epb(b"abcd"))
    assert len(bad) == 36
    struct.pack_into("<I", bad, len(bad) - 4, 40)
    p = _ng(tmp_path, SHB_LE, IDB_LE, bytes(bad))
    off = len(SHB_LE) + len(IDB_LE)
    raises_located(CaptureError, p, lambda: read_capture(p), offset=off, record=0,
                   parts=("trailing block length 40", "leading length 36", "enhanced packet"))


def test_pcapng_absurd_block_length_beyond_eof(tmp_path):
    bad = struct.pack("<II", 6, 0x7FFFFFF0) + bytes(40)
    p = _ng(tmp_path, SHB_LE, IDB_LE, epb(b"ok"), bad)
    off = len(SHB_LE) + len(IDB_LE) + len(epb(b"ok"))
    raises_located(CaptureError, p, lambda: read_capture(p), offset=off, record=1,
                   parts=("2147483632", "sanity limit"))


@pytest.mark.parametrize("cut", [3, 8, 20, 40])
def test_pcapng_cut_mid_block_keeps_records(tmp_path, cut):
    last = epb(b"z" * 40)
    p = _ng(tmp_path, SHB_LE, IDB_LE, epb(b"one"), epb(b"two"), last[:cut])
    info, b = read_capture(p)
    assert [b.frame(i) for i in range(len(b))] == [b"one", b"two"]
    off = len(SHB_LE) + len(IDB_LE) + 2 * len(epb(b"one"))
    (w,) = info.warnings
    assert f"byte offset {off}" in w and "record 2" in w and "still being written" in w


def test_pcapng_cut_inside_first_shb_raises(tmp_path):
    p = _ng(tmp_path, SHB_LE[:20])
    raises_located(CaptureTruncatedError, p, lambda: read_capture(p), offset=0, record=0,
                   parts=("section header",))


def test_pcapng_must_start_with_shb_and_known_byte_order(tmp_path):
    bad_bom = bytearray(SHB_LE)
    bad_bom[8:12] = b"\x01\x02\x03\x04"
    p = _ng(tmp_path, bytes(bad_bom), IDB_LE)
    raises_located(CaptureError, p, lambda: read_capture(p), offset=8,
                   parts=("byte-order magic", "01 02 03 04"))


def test_pcapng_packet_caplen_beyond_block(tmp_path):
    bad = bytearray(epb(b"abcd"))
    struct.pack_into("<I", bad, 20, 200)          # caplen 200 in a 4-byte packet block
    p = _ng(tmp_path, SHB_LE, IDB_LE, bytes(bad))
    raises_located(CaptureError, p, lambda: read_capture(p),
                   offset=len(SHB_LE) + len(IDB_LE), record=0,
                   parts=("captured length 200", "enhanced packet block"))


def test_pcapng_undefined_interface(tmp_path):
    p = _ng(tmp_path, SHB_LE, IDB_LE, epb(b"abc", iface=3))
    raises_located(CaptureError, p, lambda: read_capture(p),
                   offset=len(SHB_LE) + len(IDB_LE), record=0,
                   parts=("interface 3", "defines 1 interface"))


def test_pcapng_interfaces_do_not_carry_into_next_section(tmp_path):
    # Section 2 has no IDB: its packet on interface 0 is an error, not section 1's iface.
    p = _ng(tmp_path, SHB_LE, IDB_LE, epb(b"one"), SHB_LE, epb(b"two"))
    raises_located(CaptureError, p, lambda: read_capture(p), record=1,
                   parts=("defines 0 interface",))


def test_pcapng_option_running_past_block(tmp_path):
    idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 200) + b"\x09")
    p = _ng(tmp_path, SHB_LE, idb, epb(b"x"))
    raises_located(CaptureError, p, lambda: read_capture(p), offset=len(SHB_LE) + 16,
                   parts=("interface description block", "option 9"))


def test_pcapng_unsupported_major_version(tmp_path):
    shb2 = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 2, 0, -1))
    p = _ng(tmp_path, shb2, IDB_LE)
    raises_located(CaptureError, p, lambda: read_capture(p), offset=0, parts=("2.0",))


# --- compression damage -----------------------------------------------------------------

def test_truncated_gzip_keeps_decompressed_records(tmp_path):
    src = tmp_path / "big.pcap"
    frames = [bytes([i % 256]) * 500 for i in range(400)]
    write_pcap(src, frames, list(range(400)))
    gz = gzip.compress(src.read_bytes(), compresslevel=1)
    p = tmp_path / "cut.pcap.gz"
    p.write_bytes(gz[: len(gz) * 2 // 3])
    info, b = read_capture(p)
    assert 0 < len(b) < 400
    assert [b.frame(i) for i in range(len(b))] == frames[:len(b)]
    assert any("gzip stream ends early" in w for w in info.warnings)


def test_corrupt_gzip_raises_capture_error(tmp_path):
    src = tmp_path / "x.pcap"
    write_pcap(src, [b"a" * 100] * 50, list(range(50)))
    gz = bytearray(gzip.compress(src.read_bytes()))
    for i in range(20, len(gz) - 8):
        gz[i] ^= 0x5A
    p = tmp_path / "bad.pcap.gz"
    p.write_bytes(bytes(gz))
    with pytest.raises(CaptureError) as ei:
        read_capture(p)
    assert str(p) in str(ei.value)


# --- no other exception types, no hangs --------------------------------------------------

def _seed_files(tmp_path):
    a = tmp_path / "seed.pcap"
    write_pcap(a, [b"a" * 40, b"b" * 50, b"c" * 9], [1, 2, 3], nanosecond=True)
    b = tmp_path / "seed.pcapng"
    write_pcapng(b, [b"a" * 40, b"b" * 50, b"c" * 9], [3 * 10**9, 4 * 10**9, 5 * 10**9],
                 linktypes=(1, 101),
                 ifaces=[0, 1, 0], epb_flags=[1, 2, 3], sections=[0, 0, 1], tsresol=0x85,
                 tsoffset=2)
    return a.read_bytes(), b.read_bytes()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), cut=st.integers(0, 400),
       flips=st.lists(st.tuples(st.integers(0, 399), st.integers(0, 255)), max_size=4))
def test_fuzz_mutated_files_raise_only_capture_errors(tmp_path, which, cut, flips):
    data = bytearray(_seed_files(tmp_path)[which])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    p = tmp_path / "fuzz.bin"
    p.write_bytes(bytes(data[:cut]))
    try:
        info, b = read_capture(p)
    except CaptureError:
        return
    # whatever was accepted is internally consistent
    assert len(b.offset) == len(b.ts_ns) == info.records
    assert all(int(b.offset[i]) + int(b.cap_len[i]) <= len(b.buf) for i in range(len(b)))


def test_iter_batches_yields_good_batches_before_the_error(tmp_path):
    p = tmp_path / "late.pcap"
    write_pcap(p, [b"r" * 30] * 10, list(range(10)))
    data = bytearray(p.read_bytes())
    tenth = 24 + 9 * (16 + 30)
    struct.pack_into("<I", data, tenth + 8, 10**7)          # record 9 becomes absurd
    p.write_bytes(bytes(data))
    seen = []
    with pytest.raises(CaptureError) as ei:
        for _info, b in iter_batches(p, batch_records=3):
            seen.append(len(b))
    assert seen == [3, 3, 3] and ei.value.record == 9 and ei.value.offset == tenth
