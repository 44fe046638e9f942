"""Windowed scan (gropcap.capture.scan.iter_scan_batches) == reference reader, exactly.

Same batches (arrays, frames, dtypes), same CaptureInfo snapshots (warnings, digest), same
errors, whatever the window size, including records and blocks that straddle windows,
files cut mid-record, corrupt blocks, compressed input and odd paths. Plus: the windows
really are released while streaming (bounded memory).
"""

from __future__ import annotations

import glob
import gzip
import os
import random
import struct
import sys

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.capture import iter_batches, write_pcap, write_pcapng
from gropcap.capture.scan import iter_scan_batches
from gropcap.capture.writer import pcapng_block, pcapng_options
from gropcap.errors import CaptureError

from where import ROOT

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "sample_pcaps", "*.pcap*")))
FIELDS = ("cap_len", "wire_len", "ts_ns", "linktype", "iface", "epb_flags", "record",
          "file_offset")
WINDOWS = (1, 97, 4096, 1 << 20)


def observe(it):
    """Everything a consumer sees: per batch the info snapshot, arrays, frames; or the error."""
    out = []
    try:
        for info, b in it:
            arrays = {f: (getattr(b, f).dtype.str, getattr(b, f).tolist()) for f in FIELDS}
            out.append((vars(info), arrays, [b.frame(i) for i in range(len(b))]))
    except CaptureError as e:
        out.append(("error", type(e).__name__, str(e)))
    return out


def assert_same(path, batch_records=5, windows=WINDOWS):
    want = observe(iter_batches(path, batch_records=batch_records, engine="reference"))
    for w in windows:
        got = observe(iter_scan_batches(path, batch_records=batch_records, window_bytes=w))
        assert got == want, (path, w)
    return want


def _frames(n, seed=3, top=300):
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.randrange(0, top))) for _ in range(n)]


def variant_files(tmp_path):
    frames = _frames(40)
    ts = [1_700_000_000_000_000_000 + 12345 * i for i in range(40)]
    files = []
    for ns in (False, True):
        for be in (False, True):
            p = tmp_path / f"v{ns}{be}.pcap"
            write_pcap(p, frames, ts, nanosecond=ns, big_endian=be,
                       wire_lens=[len(f) + 4 for f in frames])
            files.append(p)
    p = tmp_path / "snap.pcap"
    write_pcap(p, frames, ts, snaplen=100)
    files.append(p)
    for be in (False, True):
        p = tmp_path / f"ng{be}.pcapng"
        write_pcapng(p, frames, ts, tsresol=0x80 | 30, big_endian=be, linktypes=[(1, 101),
                     (113,)], ifaces=[i % 2 if i < 20 else 0 for i in range(40)],
                     sections=[0] * 20 + [1] * 20, epb_flags=[i * 31 for i in range(40)])
        files.append(p)
    p = tmp_path / "spb.pcapng"
    write_pcapng(p, [f[:64] for f in frames], [0] * 40, spb=True, snaplen=64,
                 wire_lens=[len(f) for f in frames])
    files.append(p)
    # hand-made pcapng: custom blocks and an OPB between EPBs
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0) + pcapng_options([(9, b"\x06")]))
    blocks = [shb, idb]
    for i, f in enumerate(frames[:15]):
        opts = pcapng_options([(1, b"c"), (2, struct.pack("<I", i))])
        blocks.append(pcapng_block(6, struct.pack("<IIIII", 0, 0, i, len(f), len(f)) + f
                                   + bytes(-len(f) & 3) + opts))
        if i % 4 == 0:
            blocks.append(pcapng_block(0xBAD, b"\0\0\x7e\xd9" + bytes(300)))
        if i % 6 == 0:
            blocks.append(pcapng_block(2, struct.pack("<HHIIII", 0, 0, 0, i, len(f), len(f))
                                       + f + bytes(-len(f) & 3)))
    p = tmp_path / "hand.pcapng"
    p.write_bytes(b"".join(blocks))
    files.append(p)
    return files


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_samples_same_as_reference(path):
    got = assert_same(path, batch_records=1000, windows=(4096, 1 << 20))
    assert got[-1][0]["records"] > 0
    assert len(got[-1][0]["digest"]) == len("xxh3-128:") + 32


def test_writer_variants_same_as_reference(tmp_path):
    for p in variant_files(tmp_path):
        res = assert_same(p)
        assert res[0] != "error" and res[-1][0]["records"] == sum(len(b[2]) for b in res)


@pytest.mark.parametrize("batch_records", [1, 3, 1000])
def test_cut_at_every_length(tmp_path, batch_records):
    # every cut of a small pcap and pcapng: records kept, warning or error as the reference
    frames = _frames(6, seed=9, top=60)
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcapng"
    write_pcap(a, frames, list(range(6)))
    write_pcapng(b, frames, list(range(6)), epb_flags=[1] * 6)
    kinds = set()
    for src in (a, b):
        data = src.read_bytes()
        for cut in range(len(data) + 1):
            p = tmp_path / "cut.bin"
            p.write_bytes(data[:cut])
            res = assert_same(p, batch_records, windows=(1, 64))
            kinds.add(res[-1][0] if res[-1][0] == "error" else "ok")
    assert kinds == {"ok", "error"}


def test_corrupt_blocks_and_lengths_raise_like_reference(tmp_path):
    frames = _frames(10, seed=5, top=80)
    p = tmp_path / "a.pcapng"
    write_pcapng(p, frames, list(range(10)))
    good = p.read_bytes()
    errors = 0
    for pos in range(28, min(len(good), 400), 4):
        for v in (0, 1, 13, 0xFFFFFFF0):
            data = bytearray(good)
            data[pos:pos + 4] = struct.pack("<I", v)
            q = tmp_path / "bad.pcapng"
            q.write_bytes(bytes(data))
            res = assert_same(q, 4, windows=(64, 4096))
            errors += res[-1][0] == "error"
    assert errors > 10
    q = tmp_path / "bad.pcap"
    write_pcap(q, frames, list(range(10)))
    data = bytearray(q.read_bytes())
    data[24 + 8:24 + 12] = struct.pack("<I", 300000)      # caplen above 256 KiB
    q.write_bytes(bytes(data))
    res = assert_same(q, 4)
    assert res[-1][:2] == ("error", "CaptureError") and "256 KiB" in res[-1][2]


def test_record_larger_than_window(tmp_path):
    p = tmp_path / "big.pcap"
    frames = [bytes([i]) * 200_000 for i in range(5)] + [b"tail"]
    write_pcap(p, frames, list(range(6)))
    got = assert_same(p, batch_records=2, windows=(4096, 100_000))
    assert [len(f) for b in got for f in b[2]] == [len(f) for f in frames]


def test_compressed_empty_missing_and_garbage(tmp_path):
    frames = _frames(30)
    raw = tmp_path / "c.pcap"
    write_pcap(raw, frames, list(range(30)))
    gz, zs = tmp_path / "c.pcap.gz", tmp_path / "c.pcap.zst"
    gz.write_bytes(gzip.compress(raw.read_bytes()))
    zs.write_bytes(zstandard.ZstdCompressor().compress(raw.read_bytes()))
    for p in (gz, zs):
        res = assert_same(p, 7, windows=(4096,))
        assert res[-1][0]["compression"] in ("gzip", "zstd") and res[-1][0]["records"] == 30
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    assert assert_same(empty, windows=(4096,))[-1][1] == "CaptureTruncatedError"
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"hello world, not a capture")
    assert assert_same(junk, windows=(4096,))[-1][1] == "CaptureError"
    missing = tmp_path / "nope.pcap"
    assert assert_same(missing, windows=(4096,))[-1][1] == "CaptureError"
    assert assert_same(tmp_path, windows=(4096,))[-1][1] == "CaptureError"   # a directory


def test_header_only_file_yields_one_empty_batch(tmp_path):
    p = tmp_path / "h.pcap"
    write_pcap(p, [], [])
    res = assert_same(p)
    assert len(res) == 1 and res[0][2] == [] and res[0][0]["records"] == 0


def test_bad_arguments():
    with pytest.raises(ValueError):
        iter_scan_batches("x.pcap", batch_records=0)
    with pytest.raises(ValueError):
        iter_scan_batches("x.pcap", window_bytes=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_windows_are_released_while_streaming(tmp_path):
    # 4 MB file, 64 KiB windows: while a consumer keeps only the current batch, a few
    # windows at most are mapped at any time (the current one, one being hashed), never
    # the ~64 the file spans: memory is bounded whatever the file size
    p = tmp_path / "stream.pcap"
    frames = [bytes([i % 251]) * 1000 for i in range(4000)]
    write_pcap(p, frames, list(range(4000)))
    real = os.path.realpath(p)
    peak, n = 0, 0
    for _info, batch in iter_scan_batches(p, batch_records=50, window_bytes=64 << 10):
        n += len(batch)
        with open("/proc/self/maps") as fh:
            maps = [line for line in fh if line.rstrip().endswith(real)]
        peak = max(peak, len(maps))
        del batch
    assert n == 4000
    assert 1 <= peak <= 5


def _seed_files(tmp_path):
    a = tmp_path / "s.pcap"
    write_pcap(a, [b"a" * 40, b"b" * 50, b"c" * 9, b"d" * 3], [1, 2, 3, 4], snaplen=45)
    b = tmp_path / "s.pcapng"
    write_pcapng(b, [b"a" * 40, b"b" * 50, b"c" * 9, b"d"], [5 * 10**9] * 4,
                 linktypes=(1, 101), ifaces=[0, 1, 0, 1], epb_flags=[1, 2, 3, 4],
                 sections=[0, 0, 1, 1], tsresol=0x80 | 24, tsoffset=2)
    return [a.read_bytes(), b.read_bytes()]


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), cut=st.integers(0, 400),
       flips=st.lists(st.tuples(st.integers(0, 399), st.integers(0, 255)), max_size=4),
       batch=st.sampled_from([1, 3, 100]), window=st.sampled_from([1, 50, 4096]))
def test_damaged_files_same_as_reference(tmp_path, which, cut, flips, batch, window):
    data = bytearray(_seed_files(tmp_path)[which])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    p = tmp_path / "fuzz.bin"
    p.write_bytes(bytes(data[:cut]))
    assert_same(p, batch, windows=(window,))


def test_batches_before_a_corrupt_record_are_yielded_first(tmp_path):
    # regression: the reference reader yields its held-back batch before raising
    data = bytearray(_seed_files(tmp_path)[1])
    data[204] = 0                                   # second EPB's length field -> 0
    p = tmp_path / "cut.pcapng"
    p.write_bytes(bytes(data[:208]))
    res = assert_same(p, batch_records=1, windows=(1, 4096))
    assert len(res) == 2 and len(res[0][2]) == 1 and res[1][1] == "CaptureError"
