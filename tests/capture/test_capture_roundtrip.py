"""Round trips through the capture writers and readers: every pcap / pcapng variant.

Expected timestamps are computed here with fractions (not with the reader's code), so a
wrong resolution or offset conversion fails.
"""

from __future__ import annotations

import random
import struct
from fractions import Fraction
from math import floor

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.capture import iter_batches, read_capture, write_pcap, write_pcapng
from gropcap.capture.writer import pcapng_block, pcapng_options
from gropcap.constants import (EPB_FLAG_CSUM_NOT_READY, EPB_FLAG_CSUM_VALID,
                               EPB_FLAG_TCP_SEG_OFFLOAD, LINKTYPE_ETHERNET,
                               LINKTYPE_LINUX_SLL2, LINKTYPE_RAW)

T0 = 1_700_000_000_123_456_789     # an arbitrary 2023 instant, in ns


def xxh(data) -> str:
    """The capture digest (``capture.fingerprint``), computed here with xxhash itself."""
    return "xxh3-128:" + xxhash.xxh3_128(data).hexdigest()


def make_frames(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.randrange(14, 200))) for _ in range(n)]


def make_ts(n: int, seed: int = 2) -> list[int]:
    rng = random.Random(seed)
    ts, t = [], T0
    for _ in range(n):
        t += rng.randrange(0, 3_000_000)
        ts.append(t)
    return ts


def frames_of(batch) -> list[bytes]:
    return [batch.frame(i) for i in range(len(batch))]


def expected_ns(ts_ns: int, ticks_per_s: int, tsoffset_s: int = 0) -> int:
    """What a reader must return for ``ts_ns`` stored at 1/ticks_per_s resolution.

    Coarser than ns: ticks truncate (floor) and read back as floor(ticks * 1e9 / tps).
    Finer: the writer stores the next tick and the reader floors back to ts_ns exactly.
    """
    rel = Fraction(ts_ns - tsoffset_s * 10**9, 10**9)
    if ticks_per_s <= 10**9:
        ticks = floor(rel * ticks_per_s)
    else:
        ticks = -floor(-rel * ticks_per_s)
    return floor(Fraction(ticks * 10**9, ticks_per_s)) + tsoffset_s * 10**9


# --- pcap -------------------------------------------------------------------------------

@pytest.mark.parametrize("nanosecond", [False, True], ids=["us", "ns"])
@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
def test_pcap_round_trip(tmp_path, nanosecond, big_endian):
    frames, ts = make_frames(20), make_ts(20)
    wire = [len(f) + (i % 3) * 100 for i, f in enumerate(frames)]   # some snapped records
    p = tmp_path / "x.pcap"
    write_pcap(p, frames, ts, linktype=LINKTYPE_RAW, nanosecond=nanosecond,
               big_endian=big_endian, snaplen=65535, wire_lens=wire)
    info, b = read_capture(p)
    assert info.format == "pcap" and info.compression == ""
    assert info.byte_order == ("big" if big_endian else "little")
    assert info.ts_resolution_ns == (1 if nanosecond else 1000)
    assert info.snaplen == 65535 and info.linktypes == [LINKTYPE_RAW]
    assert info.records == 20 and info.warnings == []
    assert info.digest == xxh(p.read_bytes())
    assert frames_of(b) == frames
    want_ts = ts if nanosecond else [t // 1000 * 1000 for t in ts]
    assert b.ts_ns.tolist() == want_ts
    assert b.ts_ns.dtype == np.int64
    assert b.cap_len.tolist() == [len(f) for f in frames]
    assert b.wire_len.tolist() == wire
    assert b.linktype.tolist() == [LINKTYPE_RAW] * 20
    assert b.iface.tolist() == [0] * 20 and b.epb_flags.tolist() == [0] * 20
    assert b.record.tolist() == list(range(20))
    # file_offset points at each record header: 24-byte file header, 16-byte record headers
    want_off, o = [], 24
    for f in frames:
        want_off.append(o)
        o += 16 + len(f)
    assert b.file_offset.tolist() == want_off


def test_pcap_header_fields_decoded_exactly(tmp_path):
    # A record at sec=0xFFFFFFFF (year 2106) must not overflow or lose nanoseconds.
    p = tmp_path / "late.pcap"
    t = 0xFFFFFFFF * 10**9 + 999_999_999
    write_pcap(p, [b"\x45" + bytes(19)], [t], nanosecond=True, linktype=228)
    info, b = read_capture(p)
    assert b.ts_ns.tolist() == [t] and info.linktypes == [228]


def test_pcap_empty_but_valid(tmp_path):
    p = tmp_path / "empty.pcap"
    write_pcap(p, [], [])
    info, b = read_capture(p)
    assert len(b) == 0 and info.records == 0 and info.format == "pcap"


# --- pcapng -----------------------------------------------------------------------------

@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
def test_pcapng_two_sections_two_interfaces(tmp_path, big_endian):
    n = 24
    frames, ts = make_frames(n, 3), make_ts(n, 4)
    sections = [0] * 10 + [1] * 14
    ifaces = [i % 2 for i in range(n)]
    lts = [(LINKTYPE_ETHERNET, LINKTYPE_RAW), (LINKTYPE_LINUX_SLL2, LINKTYPE_ETHERNET)]
    p = tmp_path / "x.pcapng"
    write_pcapng(p, frames, ts, linktypes=lts, ifaces=ifaces, sections=sections,
                 big_endian=big_endian)
    info, b = read_capture(p)
    assert info.format == "pcapng"
    assert info.byte_order == ("big" if big_endian else "little")
    # interface ids are global: section 1's interfaces are 2 and 3
    assert info.linktypes == [LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL2,
                              LINKTYPE_ETHERNET]
    want_iface = [i + 2 * s for i, s in zip(ifaces, sections)]
    assert b.iface.tolist() == want_iface
    assert b.linktype.tolist() == [info.linktypes[g] for g in want_iface]
    assert frames_of(b) == frames
    assert b.ts_ns.tolist() == ts           # default tsresol 9: exact
    assert b.record.tolist() == list(range(n))
    assert info.warnings == []


def test_pcapng_sections_with_different_byte_orders(tmp_path):
    """Each section has its own byte order: concatenate an LE and a BE file."""
    f1, f2 = tmp_path / "le.pcapng", tmp_path / "be.pcapng"
    write_pcapng(f1, [b"A" * 30], [T0], linktypes=(LINKTYPE_RAW,))
    write_pcapng(f2, [b"B" * 31, b"C" * 32], [T0 + 1, T0 + 2], linktypes=(1, 101),
                 ifaces=[1, 0], big_endian=True)
    p = tmp_path / "mixed.pcapng"
    p.write_bytes(f1.read_bytes() + f2.read_bytes())
    info, b = read_capture(p)
    assert info.byte_order == "little"      # of the first section
    assert frames_of(b) == [b"A" * 30, b"B" * 31, b"C" * 32]
    assert b.ts_ns.tolist() == [T0, T0 + 1, T0 + 2]
    assert b.iface.tolist() == [0, 2, 1]
    assert b.linktype.tolist() == [101, 101, 1]


TSRESOLS = {  # if_tsresol byte -> ticks per second
    6: 10**6, 9: 10**9, 3: 10**3, 12: 10**12,
    0x80 | 20: 2**20, 0x80 | 10: 2**10, 0x80 | 30: 2**30, 0x80 | 40: 2**40,
}


@pytest.mark.parametrize("tsresol", list(TSRESOLS), ids=lambda r: f"res{r:#x}")
@pytest.mark.parametrize("tsoffset", [0, 1_600_000_000, -5], ids=["off0", "offpos", "offneg"])
@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
def test_pcapng_tsresol_tsoffset(tmp_path, tsresol, tsoffset, big_endian):
    # Timestamps after the offset (64-bit tick counts at 10^-12 s last only 213 days).
    base = max(tsoffset, 0) * 10**9
    ts = [base + t - T0 for t in make_ts(12, 5)] + [base + 86_400 * 10**9 + 999_999_999,
                                                    base + 1]
    frames = make_frames(len(ts), 6)
    p = tmp_path / "r.pcapng"
    write_pcapng(p, frames, ts, tsresol=tsresol, tsoffset=tsoffset, big_endian=big_endian)
    info, b = read_capture(p)
    tps = TSRESOLS[tsresol]
    assert b.ts_ns.tolist() == [expected_ns(t, tps, tsoffset) for t in ts]
    assert info.ts_resolution_ns == max(1, 10**9 // tps)
    if tps >= 10**9:
        assert b.ts_ns.tolist() == ts       # fine resolutions are exact


def test_pcapng_ticks_decoded_with_integer_arithmetic(tmp_path):
    """Tick counts near 2^64 at 2^-30 s: a float conversion would be off by microseconds."""
    ticks = (1 << 63) + 12345
    idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0)
                       + pcapng_options([(9, bytes([0x80 | 30]))]))
    epb = pcapng_block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, 4, 4)
                       + b"abcd")
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    p = tmp_path / "t.pcapng"
    p.write_bytes(shb + idb + epb)
    info, b = read_capture(p)
    assert b.ts_ns.tolist() == [ticks * 10**9 // 2**30]
    assert info.ts_resolution_ns == 1


def test_writer_refuses_tick_overflow(tmp_path):
    with pytest.raises(ValueError, match="64 bits"):
        write_pcapng(tmp_path / "o.pcapng", [b"x"], [T0], tsresol=12)


def test_pcapng_epb_flags_kept(tmp_path):
    flags = [0, 1, 2, EPB_FLAG_CSUM_VALID | 1, EPB_FLAG_CSUM_NOT_READY | 2,
             EPB_FLAG_TCP_SEG_OFFLOAD | EPB_FLAG_CSUM_NOT_READY | 1, (4 << 5) | 1, 0xFFFFFFFF]
    frames, ts = make_frames(len(flags)), make_ts(len(flags))
    for be in (False, True):
        p = tmp_path / f"f{be}.pcapng"
        write_pcapng(p, frames, ts, epb_flags=flags, big_endian=be)
        _info, b = read_capture(p)
        assert b.epb_flags.tolist() == flags
        assert frames_of(b) == frames


def test_pcapng_wire_len_kept(tmp_path):
    frames, ts = make_frames(5), make_ts(5)
    wire = [len(f) + 1000 for f in frames]
    p = tmp_path / "w.pcapng"
    write_pcapng(p, frames, ts, wire_lens=wire, snaplen=200)
    info, b = read_capture(p)
    assert b.wire_len.tolist() == wire and b.cap_len.tolist() == [len(f) for f in frames]
    assert info.snaplen == 200


def test_pcapng_simple_packet_blocks(tmp_path):
    snap = 64
    wire = [40, 64, 65, 1500, 9000]
    frames = [bytes([i]) * min(w, snap) for i, w in enumerate(wire)]
    p = tmp_path / "spb.pcapng"
    write_pcapng(p, frames, [0] * 5, spb=True, snaplen=snap, linktypes=(LINKTYPE_RAW,),
                 wire_lens=wire)
    info, b = read_capture(p)
    assert frames_of(b) == frames
    assert b.cap_len.tolist() == [40, 64, 64, 64, 64]
    assert b.wire_len.tolist() == wire
    assert b.linktype.tolist() == [LINKTYPE_RAW] * 5
    assert b.ts_ns.tolist() == [0] * 5
    assert any("simple packet" in w for w in info.warnings)


def test_pcapng_spb_takes_previous_timestamp(tmp_path):
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0) + pcapng_options([(9, b"\x09")]))
    epb = pcapng_block(6, struct.pack("<IIIII", 0, 0, 5000, 3, 3) + b"xyz")
    spb = pcapng_block(3, struct.pack("<I", 2) + b"pq")
    p = tmp_path / "mix.pcapng"
    p.write_bytes(shb + idb + epb + spb)
    _info, b = read_capture(p)
    assert b.ts_ns.tolist() == [5000, 5000] and frames_of(b) == [b"xyz", b"pq"]


def test_pcapng_unknown_and_custom_blocks_skipped(tmp_path):
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
                       + pcapng_options([(4, b"gropcap test")]))     # shb_userappl
    idb = pcapng_block(1, struct.pack("<HHI", 101, 0, 0) + pcapng_options([(9, b"\x09")]))
    epb1 = pcapng_block(6, struct.pack("<IIIII", 0, 0, 10, 3, 3) + b"one")
    custom = pcapng_block(0x40000BAD, struct.pack("<I", 32473) + b"private enterprise data")
    nrb = pcapng_block(4, struct.pack("<HH", 1, 8) + bytes([10, 0, 0, 1]) + b"host"
                       + struct.pack("<HH", 0, 0))
    isb = pcapng_block(5, struct.pack("<III", 0, 0, 20))
    unknown = pcapng_block(0x7FFF1234, bytes(100))
    epb2 = pcapng_block(6, struct.pack("<IIIII", 0, 0, 30, 3, 3) + b"two")
    p = tmp_path / "u.pcapng"
    p.write_bytes(shb + idb + epb1 + custom + nrb + isb + unknown + epb2)
    info, b = read_capture(p)
    assert frames_of(b) == [b"one", b"two"]
    assert b.ts_ns.tolist() == [10, 30]
    assert b.record.tolist() == [0, 1]      # records count packets, not blocks
    assert info.linktypes == [101] and info.warnings == []


def test_pcapng_obsolete_packet_block(tmp_path):
    shb = pcapng_block(0x0A0D0D0A, struct.pack(">IHHq", 0x1A2B3C4D, 1, 0, -1), big_endian=True)
    idb0 = pcapng_block(1, struct.pack(">HHI", 1, 0, 0), big_endian=True)
    idb1 = pcapng_block(1, struct.pack(">HHI", 113, 0, 0), big_endian=True)
    opb = pcapng_block(2, struct.pack(">HHIIII", 1, 0, 0, 7, 5, 60) + b"hello"
                       + b"\0\0\0" + pcapng_options([(2, struct.pack(">I", 1 | (1 << 9)))],
                                                   big_endian=True), big_endian=True)
    p = tmp_path / "opb.pcapng"
    p.write_bytes(shb + idb0 + idb1 + opb)
    _info, b = read_capture(p)
    assert frames_of(b) == [b"hello"]
    assert b.iface.tolist() == [1] and b.linktype.tolist() == [113]
    assert b.ts_ns.tolist() == [7000] and b.wire_len.tolist() == [60]   # default 10^-6
    assert b.epb_flags.tolist() == [1 | (1 << 9)]


# --- batching, limits -------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_iter_batches_equals_read_capture(tmp_path, fmt):
    n = 50
    frames, ts = make_frames(n, 7), make_ts(n, 8)
    p = tmp_path / f"b.{fmt}"
    if fmt == "pcap":
        write_pcap(p, frames, ts, nanosecond=True)
    else:
        write_pcapng(p, frames, ts, linktypes=(1, 101), ifaces=[i % 2 for i in range(n)],
                     sections=[0] * 20 + [1] * 30)
    info, whole = read_capture(p)
    got = list(iter_batches(p, batch_records=7))
    assert [len(b) for _i, b in got] == [7] * 7 + [1]
    assert [i.records for i, _b in got] == [7 * k for k in range(1, 8)] + [50]
    last = got[-1][0]
    assert last.digest == info.digest == xxh(p.read_bytes())
    assert last.linktypes == info.linktypes
    assert sum((frames_of(b) for _i, b in got), []) == frames
    for field in ("ts_ns", "cap_len", "wire_len", "linktype", "iface", "record", "file_offset"):
        assert np.concatenate([getattr(b, field) for _i, b in got]).tolist() == \
            getattr(whole, field).tolist(), field


def test_iter_batches_empty_file_yields_one_empty_batch(tmp_path):
    p = tmp_path / "e.pcapng"
    write_pcapng(p, [], [])
    got = list(iter_batches(p))
    assert len(got) == 1 and len(got[0][1]) == 0 and got[0][0].format == "pcapng"


def test_max_records(tmp_path):
    frames, ts = make_frames(10), make_ts(10)
    p = tmp_path / "m.pcap"
    write_pcap(p, frames, ts)
    info, b = read_capture(p, max_records=4)
    assert frames_of(b) == frames[:4] and info.records == 4
    assert info.digest == xxh(p.read_bytes())
    _info, b0 = read_capture(p, max_records=0)
    assert len(b0) == 0


# --- property ---------------------------------------------------------------------------

frame_st = st.binary(min_size=0, max_size=300)
ts_st = st.integers(min_value=0, max_value=(1 << 32) * 10**9 - 1)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.tuples(frame_st, ts_st, st.integers(0, 3)), max_size=30),
       fmt=st.sampled_from(["pcap", "pcapng"]), big_endian=st.booleans(),
       batch=st.integers(1, 8))
def test_property_write_then_read_equal(tmp_path, data, fmt, big_endian, batch):
    frames = [d[0] for d in data]
    ts = [d[1] for d in data]
    ifaces = [d[2] for d in data]
    p = tmp_path / f"prop.{fmt}"
    if fmt == "pcap":
        write_pcap(p, frames, ts, nanosecond=True, big_endian=big_endian)
        ifaces = [0] * len(frames)
    else:
        write_pcapng(p, frames, ts, linktypes=(1, 101, 113, 276), ifaces=ifaces,
                     big_endian=big_endian, epb_flags=ifaces)
    info, b = read_capture(p)
    assert frames_of(b) == frames
    assert b.ts_ns.tolist() == ts
    assert b.iface.tolist() == ifaces
    assert info.records == len(frames)
    streamed = list(iter_batches(p, batch_records=batch))
    assert sum((frames_of(x) for _i, x in streamed), []) == frames
    assert np.concatenate([x.ts_ns for _i, x in streamed]).tolist() == ts
