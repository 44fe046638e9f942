"""The numba record scan (engine="fast") equals the Python reference scanners, bit for bit.

Same records, same arrays, same warnings, same errors (type and message), on every
writer variant, on hand-made blocks the kernels leave to the reference path, and on
randomly damaged files.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.capture import fast, iter_batches, read_capture, write_pcap, write_pcapng
from gropcap.capture.pcapng import PcapngScanner
from gropcap.capture.writer import pcapng_block, pcapng_options
from gropcap.errors import CaptureError

FIELDS = ("offset", "cap_len", "wire_len", "ts_ns", "linktype", "iface", "epb_flags",
          "record", "file_offset")


def outcome(path, engine, batch_records=None):
    """Everything observable about reading ``path``: arrays, frames, info, or the error."""
    try:
        if batch_records is None:
            info, b = read_capture(path, engine=engine)
            batches = [b]
        else:
            got = list(iter_batches(path, batch_records=batch_records, engine=engine))
            info, batches = got[-1][0], [b for _i, b in got]
    except CaptureError as e:
        return ("error", type(e).__name__, str(e))
    out = {f: np.concatenate([getattr(b, f) for b in batches]).tolist()
           for f in FIELDS if f != "offset"}
    out["frames"] = [b.frame(i) for b in batches for i in range(len(b))]
    out["dtypes"] = [str(getattr(batches[0], f).dtype) for f in FIELDS]
    return ("ok", out, info)


def assert_same(path, batch_records=None):
    a = outcome(path, "fast", batch_records)
    b = outcome(path, "reference", batch_records)
    assert a == b
    return a


def variants(tmp_path):
    rng = random.Random(21)
    n = 60
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(n)]
    ts = sorted(rng.randrange(10**17, 3 * 10**18) for _ in range(n))
    files = []

    def add(name, fn, *a, **kw):
        p = tmp_path / name
        fn(p, *a, **kw)
        files.append(p)

    for ns in (False, True):
        for be in (False, True):
            add(f"p{ns}{be}.pcap", write_pcap, frames, ts, nanosecond=ns, big_endian=be,
                wire_lens=[len(f) + 3 for f in frames])
    add("snapwarn.pcap", write_pcap, frames, ts, snaplen=100)
    for res in (6, 9, 12, 0x80 | 20, 0x80 | 30, 0x80 | 52, 0x80 | 60):
        for be in (False, True):
            # 64-bit tick counts at 2^-60 s last 16 s: keep those timestamps small
            fine = res in (12, 0x80 | 52, 0x80 | 60)
            add(f"r{res}{be}.pcapng", write_pcapng, frames,
                [t % 10**10 for t in ts] if fine else ts,
                tsresol=res, big_endian=be, linktypes=[(1, 101), (113,)],
                ifaces=[i % 2 if i < 30 else 0 for i in range(n)],
                sections=[0] * 30 + [1] * 30, epb_flags=[i * 7919 for i in range(n)])
    add("off.pcapng", write_pcapng, frames, ts, tsoffset=10**8)
    add("spb.pcapng", write_pcapng, [f[:64] for f in frames], [0] * n, spb=True, snaplen=64,
        wire_lens=[max(len(f), 64) if len(f) >= 64 else len(f) for f in frames])
    # hand-made: options before epb_flags, OPB, custom and unknown blocks between packets
    shb = pcapng_block(0x0A0D0D0A, struct.pack(">IHHq", 0x1A2B3C4D, 1, 0, -1), big_endian=True)
    idb = pcapng_block(1, struct.pack(">HHI", 1, 0, 0)
                       + pcapng_options([(2, b"eth0"), (9, b"\x09")], big_endian=True),
                       big_endian=True)
    blocks = [shb, idb]
    for i, f in enumerate(frames[:20]):
        opts = pcapng_options([(1, b"comment"), (2, struct.pack(">I", i)),
                               (3, bytes(8))], big_endian=True)
        blocks.append(pcapng_block(6, struct.pack(">IIIII", 0, 0, i, len(f), len(f) + i) + f
                                   + b"\0" * ((-len(f)) & 3) + opts, big_endian=True))
        if i % 5 == 0:
            blocks.append(pcapng_block(0x40000BAD, b"\0\0\x7e\xd9xyz", big_endian=True))
        if i % 7 == 0:
            blocks.append(pcapng_block(2, struct.pack(">HHIIII", 0, 0, 0, i, len(f), len(f))
                                       + f + b"\0" * ((-len(f)) & 3), big_endian=True))
    p = tmp_path / "hand.pcapng"
    p.write_bytes(b"".join(blocks))
    files.append(p)
    return files


def test_fast_equals_reference_on_variants(tmp_path):
    for p in variants(tmp_path):
        res = assert_same(p)
        assert res[0] == "ok", (p, res)
        for batch in (1, 7):
            assert outcome(p, "fast", batch)[1] == res[1], p


@pytest.mark.parametrize("big_endian", [False, True])
def test_fast_path_is_really_used(tmp_path, monkeypatch, big_endian):
    """Every record of either byte order goes through the kernels (a kernel that misread
    a length would stop at once and leave the records to the reference path: the same
    results, at reference speed)."""
    calls = {"pcap": 0, "pcapng": 0}
    real_pcap, real_ng = fast.pcap_scan, fast.pcapng_scan

    def count_pcap(*a):
        r = real_pcap(*a)
        calls["pcap"] += r[0]
        return r

    def count_ng(*a):
        r = real_ng(*a)
        calls["pcapng"] += r[0]
        return r

    monkeypatch.setattr(fast, "pcap_scan", count_pcap)
    monkeypatch.setattr(fast, "pcapng_scan", count_ng)
    monkeypatch.setattr(PcapngScanner, "_packet",
                        lambda *a: pytest.fail("EPB went through the reference path"))
    frames = [bytes([i]) * (20 + i) for i in range(100)]
    ts = [1_700_000_000_123_456_000 + 1_000_001 * i for i in range(100)]
    write_pcap(tmp_path / "a.pcap", frames, ts, big_endian=big_endian, nanosecond=True,
               wire_lens=[len(f) + 7 for f in frames])
    write_pcapng(tmp_path / "a.pcapng", frames, ts, big_endian=big_endian,
                 epb_flags=[3] * 100, linktypes=(1, 101), ifaces=[i % 2 for i in range(100)])
    for name, extra in (("a.pcap", 7), ("a.pcapng", 0)):
        b = read_capture(tmp_path / name)[1]
        assert b.ts_ns.tolist() == ts
        assert b.wire_len.tolist() == [len(f) + extra for f in frames]
        assert [b.frame(i) for i in range(len(b))] == frames
    assert calls == {"pcap": 100, "pcapng": 100}


def _seeds(tmp_path):
    a = tmp_path / "s.pcap"
    write_pcap(a, [b"a" * 40, b"b" * 50, b"c" * 9, b"d" * 3], [1, 2, 3, 4], snaplen=45)
    b = tmp_path / "s.pcapng"
    write_pcapng(b, [b"a" * 40, b"b" * 50, b"c" * 9, b"d"], [5 * 10**9] * 4,
                 linktypes=(1, 101), ifaces=[0, 1, 0, 1], epb_flags=[1, 2, 3, 4],
                 sections=[0, 0, 1, 1], tsresol=0x80 | 24, tsoffset=2)
    c = tmp_path / "spb.pcapng"
    write_pcapng(c, [b"a" * 20, b"b" * 20], [0, 0], spb=True, snaplen=20,
                 wire_lens=[20, 90], big_endian=True)
    return [a.read_bytes(), b.read_bytes(), c.read_bytes()]


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 2), cut=st.integers(0, 400),
       flips=st.lists(st.tuples(st.integers(0, 399), st.integers(0, 255)), max_size=4),
       batch=st.sampled_from([None, 1, 3]))
def test_fast_equals_reference_on_damaged_files(tmp_path, which, cut, flips, batch):
    data = bytearray(_seeds(tmp_path)[which])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    p = tmp_path / "fuzz.bin"
    p.write_bytes(bytes(data[:cut]))
    assert_same(p, batch)
