"""Compressed captures, format sniffing and file/directory expansion."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import random

import numpy as np
import pytest
import xxhash
import zstandard

from gropcap.capture import (expand_inputs, iter_batches, read_capture, sniff_format,
                             write_pcap, write_pcapng)
from gropcap.errors import CaptureError

COMPRESSORS = {
    "gzip": gzip.compress,
    "zstd": lambda d: zstandard.ZstdCompressor(level=3).compress(d),
    "xz": lzma.compress,
    "bzip2": bz2.compress,
}
FIELDS = ("ts_ns", "cap_len", "wire_len", "linktype", "iface", "epb_flags", "record",
          "file_offset")


def xxh(data) -> str:
    """The capture digest (``capture.fingerprint``), computed here with xxhash itself."""
    return "xxh3-128:" + xxhash.xxh3_128(data).hexdigest()


def sample(tmp_path, fmt: str, n: int = 300):
    rng = random.Random(11)
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(20, 1500)))
              for _ in range(n)]
    ts = sorted(rng.randrange(10**18, 2 * 10**18) for _ in range(n))
    p = tmp_path / f"plain.{fmt}"
    if fmt == "pcap":
        write_pcap(p, frames, ts, nanosecond=True)
    else:
        write_pcapng(p, frames, ts, linktypes=(1, 101), ifaces=[i % 2 for i in range(n)],
                     epb_flags=[i % 7 for i in range(n)],
                     sections=[0] * (n // 3) + [1] * (n - n // 3))
    return p, frames


def same(a, b):
    for f in FIELDS:
        assert getattr(a, f).tolist() == getattr(b, f).tolist(), f
    assert [a.frame(i) for i in range(len(a))] == [b.frame(i) for i in range(len(b))]


@pytest.mark.parametrize("kind", list(COMPRESSORS))
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_compressed_reads_identically(tmp_path, kind, fmt):
    plain, frames = sample(tmp_path, fmt)
    info0, b0 = read_capture(plain)
    # A misleading name: detection is by content only.
    p = tmp_path / f"capture.{fmt}"
    p.write_bytes(COMPRESSORS[kind](plain.read_bytes()))
    info, b = read_capture(p)
    assert info.compression == kind and info.format == fmt
    assert info.digest == xxh(p.read_bytes()) != info0.digest
    assert info.linktypes == info0.linktypes and info.records == len(frames)
    assert info.warnings == []
    same(b, b0)
    # streamed in small batches, the same records in the same order
    got = list(iter_batches(p, batch_records=37))
    assert got[-1][0].digest == info.digest and got[-1][0].records == len(frames)
    for f in FIELDS:
        assert np.concatenate([getattr(x, f) for _i, x in got]).tolist() == \
            getattr(b0, f).tolist(), f
    assert sum(([x.frame(i) for i in range(len(x))] for _i, x in got), []) == frames


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz", "zstd"])
def test_concatenated_members_are_one_stream(tmp_path, kind):
    plain, frames = sample(tmp_path, "pcap", 60)
    data = plain.read_bytes()
    cut = 24 + sum(16 + len(f) for f in frames[:25])       # split on a record boundary
    p = tmp_path / "multi"
    p.write_bytes(COMPRESSORS[kind](data[:cut]) + COMPRESSORS[kind](data[cut:]))
    info, b = read_capture(p)
    assert [b.frame(i) for i in range(len(b))] == frames and info.warnings == []


def test_trailing_garbage_after_gzip_is_ignored_with_warning(tmp_path):
    plain, frames = sample(tmp_path, "pcapng", 20)
    p = tmp_path / "t.gz"
    p.write_bytes(gzip.compress(plain.read_bytes()) + b"\0" * 512)
    info, b = read_capture(p)
    assert len(b) == 20
    assert any("512 bytes after the end of the gzip data" in w for w in info.warnings)


def test_streaming_keeps_bounded_buffers(tmp_path):
    """A compressed batch owns only its own bytes, not the whole decompressed file."""
    plain, frames = sample(tmp_path, "pcap", 2000)
    p = tmp_path / "big.zst"
    p.write_bytes(COMPRESSORS["zstd"](plain.read_bytes()))
    total = os.path.getsize(plain)
    for _info, b in iter_batches(p, batch_records=100):
        assert len(b.buf) < total / 5
        assert len(b.buf) >= int(b.cap_len.sum())


def test_plain_batches_are_views_of_one_map(tmp_path):
    plain, _ = sample(tmp_path, "pcap", 50)
    bases = {b.buf.base is not None for _i, b in iter_batches(plain, batch_records=10)}
    assert bases == {True}       # zero-copy views, no per-batch copies


@pytest.mark.parametrize("head,want", [
    (bytes.fromhex("d4c3b2a1 0200 0400"), "pcap"),
    (bytes.fromhex("a1b2c3d4 0002 0004"), "pcap"),
    (bytes.fromhex("4d3cb2a1"), "pcap"),
    (bytes.fromhex("a1b23c4d"), "pcap"),
    (bytes.fromhex("0a0d0d0a 1c000000"), "pcapng"),
    (bytes.fromhex("1f8b0800"), "gzip"),
    (bytes.fromhex("28b52ffd"), "zstd"),
    (bytes.fromhex("fd377a585a00"), "xz"),
    (b"BZh9", "bzip2"),
    (b"BZh!", ""),
    (b"GET / HTTP/1.1", ""),
    (b"", ""),
])
def test_sniff_format(head, want):
    assert sniff_format(head) == want


def test_expand_inputs_walks_directories_by_content(tmp_path):
    d = tmp_path / "caps"
    (d / "b_sub").mkdir(parents=True)
    (d / ".hidden").mkdir()
    write_pcap(d / "z.pcap", [b"x" * 20], [1])
    write_pcapng(d / "a.dat", [b"x" * 20], [1])                       # odd name, a capture
    write_pcap(d / "b_sub" / "inner.pcap", [b"x" * 20], [1])
    (d / "c.zst").write_bytes(COMPRESSORS["zstd"]((d / "z.pcap").read_bytes()))
    (d / "readme.txt").write_text("not a capture")
    (d / "junk.gz").write_bytes(gzip.compress(b"not a capture either"))
    write_pcap(d / ".hidden" / "h.pcap", [b"x"], [1])
    write_pcap(d / ".dot.pcap", [b"x"], [1])
    single = tmp_path / "single.pcap"
    write_pcap(single, [b"y" * 20], [1])
    got = expand_inputs([str(single), str(d)])
    assert got == [str(single), str(d / "a.dat"), str(d / "c.zst"), str(d / "z.pcap"),
                   str(d / "b_sub" / "inner.pcap")]
    # every expanded file is readable
    assert [read_capture(f)[0].records for f in got] == [1] * 5
    assert expand_inputs(single) == [str(single)]


def test_expand_inputs_missing_path(tmp_path):
    with pytest.raises(CaptureError) as ei:
        expand_inputs([str(tmp_path / "missing.pcap")])
    assert "missing.pcap" in str(ei.value) and "no such file" in str(ei.value)


def test_expand_inputs_directory_without_captures(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CaptureError) as ei:
        expand_inputs([tmp_path])
    assert str(tmp_path) in str(ei.value) and "no pcap/pcapng" in str(ei.value)


@pytest.mark.parametrize("kind", [None, "gzip"])
def test_reads_from_a_pipe(tmp_path, kind):
    """A FIFO (e.g. `gropcap <(zcat x.pcap.gz)`) cannot be mapped or rewound: streamed."""
    import threading

    plain, frames = sample(tmp_path, "pcapng", 200)
    data = plain.read_bytes() if kind is None else COMPRESSORS[kind](plain.read_bytes())
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(data)

    t = threading.Thread(target=feed)
    t.start()
    try:
        info, b = read_capture(fifo)
    finally:
        t.join(timeout=30)
    assert info.compression == (kind or "")
    assert [b.frame(i) for i in range(len(b))] == frames
    assert info.digest == xxh(data)


def test_a_named_pipe_is_opened_once(tmp_path, monkeypatch):
    """The windowed scan leaves a pipe to the streaming reader without opening it
    itself: a named pipe opened and closed before the reader opens it again loses what
    a quick writer put in it (a pipe's data goes when its last reader closes), and the
    second open then waits for a writer for ever."""
    import threading

    import gropcap.capture.scan as scan_mod

    plain, frames = sample(tmp_path, "pcap", 20)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    opened = []
    real_open = os.open

    def counting_open(path, *a, **k):
        if os.fspath(path) == str(fifo):
            opened.append(path)
        return real_open(path, *a, **k)
    monkeypatch.setattr(scan_mod.os, "open", counting_open)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(plain.read_bytes())
    import signal

    def stuck(*_):
        raise AssertionError("the scan waits for a writer the pipe has lost")
    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        got = [b for _, b in scan_mod.iter_scan_batches(fifo, digest=False)]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        t.join(timeout=30)
    assert opened == []
    assert [b.frame(i) for b in got for i in range(len(b))] == frames


def test_empty_compressed_capture(tmp_path):
    p = tmp_path / "e.gz"
    write_pcap(tmp_path / "e.pcap", [], [])
    p.write_bytes(gzip.compress((tmp_path / "e.pcap").read_bytes()))
    info, b = read_capture(p)
    assert len(b) == 0 and info.format == "pcap" and info.compression == "gzip"


@pytest.mark.parametrize("kind", ["zstd", "gzip", "xz"])
def test_streaming_memory_bounded_on_extreme_ratio(tmp_path, kind):
    """Zero-payload traffic compresses thousands-fold: one decompressor call must not
    inflate the whole file (regression: zstd's decompressobj has no output limit)."""
    import tracemalloc

    n = 40_000
    plain = tmp_path / "zeros.pcap"
    write_pcap(plain, [bytes(1400)] * n, [0] * n)          # 56 MiB of nearly all zeros
    p = tmp_path / "zeros.cmp"
    p.write_bytes(COMPRESSORS[kind](plain.read_bytes()))
    plain.unlink()
    tracemalloc.start()
    try:
        count = 0
        for _info, b in iter_batches(p, batch_records=1000):   # 1.4 MiB batches
            count += len(b)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 24 * 2**20, f"peak {peak >> 20} MiB for 1.4 MiB batches"
