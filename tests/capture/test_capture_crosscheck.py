"""Cross-checks against independent readers and writers: dpkt and tshark.

dpkt reads our files and we read files dpkt writes; tshark (when installed) gives exact
nanosecond timestamps, lengths and interfaces for the pcapng variants dpkt cannot read
(several sections, power-of-two resolutions, if_tsoffset).
"""

from __future__ import annotations

import io
import os
import random
import shutil
import struct
import subprocess
from decimal import Decimal

import dpkt
import pytest

from gropcap.capture import read_capture, write_pcap, write_pcapng

from where import TESTS


def sample(n=40, seed=5):
    rng = random.Random(seed)
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(20, 400)))
              for _ in range(n)]
    t, ts = 1_650_000_000 * 10**9, []
    for _ in range(n):
        t += rng.randrange(1, 10**9)
        ts.append(t)
    return frames, ts


def dpkt_ns(ts) -> int:
    """dpkt gives float seconds (µs files) or Decimal (ns files): exact int ns."""
    if isinstance(ts, Decimal):
        return int(ts * 10**9)
    return round(ts * 10**6) * 1000      # a float only carries µs at this epoch


# --- dpkt reads our files ---------------------------------------------------------------

@pytest.mark.parametrize("nanosecond", [False, True])
@pytest.mark.parametrize("big_endian", [False, True])
def test_dpkt_reads_our_pcap_the_same(tmp_path, nanosecond, big_endian):
    frames, ts = sample()
    p = tmp_path / "x.pcap"
    write_pcap(p, frames, ts, nanosecond=nanosecond, big_endian=big_endian, linktype=101)
    with open(p, "rb") as fh:
        r = dpkt.pcap.Reader(fh)
        ref = [(dpkt_ns(t), bytes(b)) for t, b in r]
        assert r.datalink() == 101
    info, b = read_capture(p)
    assert [(int(b.ts_ns[i]), b.frame(i)) for i in range(len(b))] == ref


@pytest.mark.parametrize("big_endian", [False, True])
def test_dpkt_reads_our_pcapng_the_same(tmp_path, big_endian):
    frames, ts = sample()
    p = tmp_path / "x.pcapng"
    write_pcapng(p, frames, ts, tsresol=6, big_endian=big_endian, epb_flags=[1] * len(ts))
    with open(p, "rb") as fh:
        ref = [(dpkt_ns(t), bytes(b)) for t, b in dpkt.pcapng.Reader(fh)]
    _info, b = read_capture(p)
    assert [(int(b.ts_ns[i]), b.frame(i)) for i in range(len(b))] == ref


# --- we read files dpkt writes ----------------------------------------------------------

def test_we_read_dpkt_pcap_writer(tmp_path):
    frames, ts = sample(seed=9)
    p = tmp_path / "d.pcap"
    with open(p, "wb") as fh:
        w = dpkt.pcap.Writer(fh, nano=True, linktype=1)
        for f, t in zip(frames, ts):
            w.writepkt(f, ts=Decimal(t) / 10**9)
    _info, b = read_capture(p)
    assert b.ts_ns.tolist() == ts
    assert [b.frame(i) for i in range(len(b))] == frames


def test_we_read_dpkt_pcapng_writer_with_ns_resolution(tmp_path):
    frames, ts = sample(seed=10)
    le = dpkt.pcapng
    idbs = [le.InterfaceDescriptionBlockLE(linktype=1, snaplen=65535, opts=[
                le.PcapngOptionLE(code=9, data=b"\x09"), le.PcapngOptionLE(code=0)]),
            le.InterfaceDescriptionBlockLE(linktype=113, snaplen=65535, opts=[
                le.PcapngOptionLE(code=9, data=b"\x09"), le.PcapngOptionLE(code=0)])]
    p = tmp_path / "d.pcapng"
    with open(p, "wb") as fh:
        w = dpkt.pcapng.Writer(fh, shb=le.SectionHeaderBlockLE(), idb=idbs)
        for i, (f, t) in enumerate(zip(frames, ts)):
            epb = le.EnhancedPacketBlockLE(
                iface_id=i % 2, ts_high=t >> 32, ts_low=t & 0xFFFFFFFF, caplen=len(f),
                pkt_len=len(f), pkt_data=f,     # dpkt always writes pkt_len = caplen
                opts=[le.PcapngOptionLE(code=2, data=struct.pack("<I", i)),
                      le.PcapngOptionLE(code=0)])
            w.writepkt(epb)
    info, b = read_capture(p)
    assert b.ts_ns.tolist() == ts
    assert [b.frame(i) for i in range(len(b))] == frames
    assert b.wire_len.tolist() == [len(f) for f in frames]
    assert b.iface.tolist() == [i % 2 for i in range(len(frames))]
    assert b.linktype.tolist() == [(1, 113)[i % 2] for i in range(len(frames))]
    assert b.epb_flags.tolist() == list(range(len(frames)))
    assert info.linktypes == [1, 113] and info.snaplen == 65535


# --- tshark -----------------------------------------------------------------------------

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")


def tshark_rows(path):
    out = subprocess.run(
        [TSHARK, "-r", str(path), "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len",
         "-e", "frame.cap_len"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    rows = []
    for line in out.splitlines():
        t, wire, cap = line.split("\t")
        sec, _, frac = t.partition(".")
        rows.append((int(sec) * 10**9 + int(frac.ljust(9, "0")[:9]), int(wire), int(cap)))
    return rows


@needs_tshark
@pytest.mark.parametrize("tsresol,tsoffset,big_endian", [
    (9, 0, False), (6, 0, True), (0x80 | 20, 0, False), (9, 1_600_000_000, True),
    (0x80 | 30, 1_640_000_000, False),
])
def test_tshark_agrees_on_pcapng(tmp_path, tsresol, tsoffset, big_endian):
    frames, ts = sample(30, seed=tsresol)
    n = len(frames)
    p = tmp_path / "t.pcapng"
    write_pcapng(p, frames, ts, linktypes=(1, 101), ifaces=[i % 2 for i in range(n)],
                 sections=[0] * 12 + [1] * (n - 12), tsresol=tsresol, tsoffset=tsoffset,
                 big_endian=big_endian, wire_lens=[len(f) + 10 for f in frames])
    _info, b = read_capture(p)
    ours = [(int(b.ts_ns[i]), int(b.wire_len[i]), int(b.cap_len[i])) for i in range(n)]
    assert ours == tshark_rows(p)


@needs_tshark
@pytest.mark.parametrize("nanosecond", [False, True])
def test_tshark_agrees_on_pcap(tmp_path, nanosecond):
    frames, ts = sample(30, seed=3)
    p = tmp_path / "t.pcap"
    write_pcap(p, frames, ts, nanosecond=nanosecond, big_endian=True)
    _info, b = read_capture(p)
    ours = [(int(b.ts_ns[i]), int(b.wire_len[i]), int(b.cap_len[i])) for i in range(len(b))]
    assert ours == tshark_rows(p)


# --- the project's sample captures (crafted and recorded by tcpdump) ----------------------

SAMPLE_DIR = __import__("pathlib").Path(TESTS).parent / "sample_pcaps"


def _decompressed(raw, compression: str):
    """A file object of the capture's own bytes for dpkt (the committed pairs are
    zstd-compressed)."""
    if not compression:
        return raw
    if compression == "zstd":
        import zstandard
        return io.BytesIO(zstandard.ZstdDecompressor().stream_reader(raw).read())
    import bz2, gzip, lzma  # noqa: E401
    opener = {"gzip": gzip.open, "xz": lzma.open, "bzip2": bz2.open}[compression]
    return io.BytesIO(opener(raw).read())


def _sample_files():
    from gropcap.capture import expand_inputs
    if not SAMPLE_DIR.is_dir():
        return []
    return expand_inputs([str(SAMPLE_DIR)])


@pytest.mark.skipif(not _sample_files(), reason="no sample_pcaps directory in this checkout")
def test_sample_captures_match_dpkt_both_engines():
    empty = []
    for path in _sample_files():
        info, b = read_capture(path)
        _info_ref, ref = read_capture(path, engine="reference")
        for f in ("ts_ns", "cap_len", "wire_len", "linktype", "iface", "epb_flags",
                  "file_offset"):
            assert getattr(b, f).tolist() == getattr(ref, f).tolist(), (path, f)
        with open(path, "rb") as raw:
            fh = _decompressed(raw, info.compression)
            rd = dpkt.pcapng.Reader(fh) if info.format == "pcapng" else dpkt.pcap.Reader(fh)
            want = [bytes(buf) for _t, buf in rd]
        assert [b.frame(i) for i in range(len(b))] == want, path
        assert info.records == len(want) and info.warnings == []
        if not want:
            empty.append(os.path.basename(path))
    # only the receiver's ACK view of a UDP recording has no frame (UDP sends no ACKs)
    assert set(empty) <= {"udpgso.acks.pcap.zst"}, empty
