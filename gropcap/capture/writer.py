"""Capture writers: frames + timestamps -> pcap / pcapng files.

Layer: the reverse of the capture layer. Tests, sample generators and the kernel-replay
harness build captures with these; the readers in this package read them back. Only
uncompressed files are written; compress them with the standard library if needed.

Timestamps are int64 nanoseconds since the epoch. A timestamp that the chosen resolution
cannot represent is quantised so that reading it back gives the nanosecond *containing*
the stored instant: resolutions coarser than 1 ns truncate (as libpcap does), finer ones
round up to the next tick, which the reader floors back to the exact nanosecond.

Formats: pcap per draft-ietf-opsawg-pcap, pcapng per draft-ietf-opsawg-pcapng
(section header 0x0A0D0D0A, interface description 1, simple packet 3, enhanced packet 6).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

# pcap file magics as written in the writer's byte order (draft-ietf-opsawg-pcap 4)
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
# pcapng block types (draft-ietf-opsawg-pcapng 4, 10.1)
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_IDB = 0x00000001
PCAPNG_OPB = 0x00000002   # obsolete packet block
PCAPNG_SPB = 0x00000003
PCAPNG_EPB = 0x00000006
PCAPNG_CB_COPY = 0x00000BAD     # custom block, may be copied
PCAPNG_CB_NOCOPY = 0x40000BAD   # custom block, must not be copied
PCAPNG_BOM = 0x1A2B3C4D
# option codes (pcapng 3.5, 4.2, 4.3)
OPT_ENDOFOPT = 0
IF_TSRESOL = 9
IF_TSOFFSET = 14
EPB_FLAGS = 2

NS_PER_S = 1_000_000_000


def _bo(big_endian: bool) -> str:
    return ">" if big_endian else "<"


def _pad4(n: int) -> int:
    return (-n) & 3


def _per_frame(values, n: int, name: str, default):
    """Expand an optional per-frame argument to a list of ``n`` Python ints."""
    if values is None:
        return [default] * n
    out = [int(v) for v in values]
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} values for {n} frames")
    return out


def ticks_from_ns(ts_ns: int, tsresol: int, tsoffset: int = 0) -> int:
    """Timestamp in ns -> count of if_tsresol ticks after ``tsoffset`` seconds.

    ``tsresol`` is the pcapng if_tsresol byte: ``n`` for 10^-n s, ``0x80 | n`` for 2^-n s.
    Coarser than 1 ns truncates; finer rounds up so that the reader's floor gives ``ts_ns``
    back exactly.

    >>> ticks_from_ns(1_500, 6)
    1
    >>> ticks_from_ns(1, 0x80 | 30)
    2
    """
    rel = int(ts_ns) - int(tsoffset) * NS_PER_S
    if rel < 0:
        raise ValueError(f"timestamp {ts_ns} ns is before if_tsoffset {tsoffset} s")
    if tsresol & 0x80:
        num, den = 1 << (tsresol & 0x7F), NS_PER_S    # ticks per ns = 2^n / 1e9
    else:
        num, den = 10 ** tsresol, NS_PER_S
    ticks = rel * num // den if num <= den else -((-rel * num) // den)   # floor / ceil
    if ticks >> 64:
        raise ValueError(f"timestamp {ts_ns} ns needs more than 64 bits of ticks at "
                         f"if_tsresol {tsresol:#x}; set tsoffset closer to it")
    return ticks


def pcapng_block(block_type: int, body: bytes, *, big_endian: bool = False) -> bytes:
    """One pcapng block: type, total length, ``body`` padded to 4 bytes, total length.

    Handy for tests that need hand-made blocks (custom, obsolete packet, corrupt ones).

    >>> len(pcapng_block(0x40000BAD, b"abc"))
    16
    """
    bo = _bo(big_endian)
    body = body + b"\0" * _pad4(len(body))
    total = 12 + len(body)
    return struct.pack(bo + "II", block_type, total) + body + struct.pack(bo + "I", total)


def pcapng_options(options: Sequence[tuple[int, bytes]], *, big_endian: bool = False) -> bytes:
    """Encode ``(code, value)`` options followed by opt_endofopt (empty if no options)."""
    if not options:
        return b""
    bo = _bo(big_endian)
    out = bytearray()
    for code, value in options:
        out += struct.pack(bo + "HH", code, len(value)) + value + b"\0" * _pad4(len(value))
    out += struct.pack(bo + "HH", OPT_ENDOFOPT, 0)
    return bytes(out)


def write_pcap(path, frames, ts_ns, *, linktype: int = 1, nanosecond: bool = False,
               big_endian: bool = False, snaplen: int = 262144, wire_lens=None) -> None:
    """Write a classic pcap file.

    Parameters: ``frames`` sequence of bytes; ``ts_ns`` one int per frame (ns since the
    epoch, >= 0); ``linktype`` the header's link type; ``nanosecond`` selects the
    nanosecond magic (else microseconds, truncated); ``big_endian`` the byte order;
    ``snaplen`` the header snap length; ``wire_lens`` the original lengths (default: the
    frame lengths).

    >>> write_pcap("/tmp/x.pcap", [b"\\x00" * 60], [1_000_000_001_000])
    """
    frames = [bytes(f) for f in frames]
    n = len(frames)
    ts = _per_frame(ts_ns, n, "ts_ns", 0)
    wire = _per_frame(wire_lens, n, "wire_lens", 0) if wire_lens is not None \
        else [len(f) for f in frames]
    bo = _bo(big_endian)
    magic = PCAP_MAGIC_NS if nanosecond else PCAP_MAGIC_US
    out = bytearray(struct.pack(bo + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
    for f, t, w in zip(frames, ts, wire):
        if t < 0:
            raise ValueError(f"pcap cannot store negative timestamp {t}")
        sec, frac = divmod(t, NS_PER_S)
        if not nanosecond:
            frac //= 1000
        out += struct.pack(bo + "IIII", sec, frac, len(f), w)
        out += f
    _write(path, out)


def write_pcapng(path, frames, ts_ns, *, linktypes=(1,), ifaces=None, tsresol: int = 9,
                 tsoffset: int = 0, big_endian: bool = False, epb_flags=None, wire_lens=None,
                 sections=None, spb: bool = False, snaplen: int = 0) -> None:
    """Write a pcapng file.

    Parameters:
    - ``frames``, ``ts_ns``: bytes and int ns timestamps, one per frame.
    - ``linktypes``: one link type per interface; every section gets these interfaces.
      For different interfaces per section pass one sequence per section.
    - ``ifaces``: per frame, the interface id *within its section* (default 0).
      Readers number interfaces globally: section k's interface i becomes
      ``i + number of interfaces in sections before k``.
    - ``tsresol``: if_tsresol byte (``n`` = 10^-n s, ``0x80 | n`` = 2^-n s); the option is
      omitted when it is 6 (the pcapng default). ``tsoffset``: if_tsoffset in seconds
      (omitted when 0). Both apply to every interface.
    - ``big_endian``: byte order of every section.
    - ``epb_flags``: per frame epb_flags word, written as an option on every EPB.
    - ``wire_lens``: original lengths (default: the frame lengths).
    - ``sections``: per frame section index, non-decreasing from 0 (default: one section).
    - ``spb``: write Simple Packet Blocks instead of EPBs (no timestamps, interface 0 only;
      each frame must be ``min(wire_len, snaplen)`` long when ``snaplen`` is non-zero).
    - ``snaplen``: SnapLen of every IDB (0 = no limit).

    >>> write_pcapng("/tmp/x.pcapng", [b"\\x00" * 60] * 2, [0, 1], linktypes=(1, 101),
    ...              ifaces=[0, 1])
    """
    frames = [bytes(f) for f in frames]
    n = len(frames)
    ts = _per_frame(ts_ns, n, "ts_ns", 0)
    ifs = _per_frame(ifaces, n, "ifaces", 0)
    wire = _per_frame(wire_lens, n, "wire_lens", 0) if wire_lens is not None \
        else [len(f) for f in frames]
    flags = None if epb_flags is None else _per_frame(epb_flags, n, "epb_flags", 0)
    secs = _per_frame(sections, n, "sections", 0)
    if any(b < a for a, b in zip(secs, secs[1:])) or (secs and secs[0] < 0):
        raise ValueError("sections must be non-decreasing section indexes from 0")
    nsec = (secs[-1] + 1) if secs else 1
    lts = list(linktypes)
    if lts and isinstance(lts[0], (list, tuple)):
        per_section = [list(x) for x in lts]
        if len(per_section) < nsec:
            raise ValueError(f"linktypes gives {len(per_section)} sections, frames use {nsec}")
        nsec = len(per_section)
    else:
        per_section = [lts] * nsec
    if spb and any(i != 0 for i in ifs):
        raise ValueError("simple packet blocks can only use interface 0")

    bo = _bo(big_endian)
    idb_opts = []
    if tsresol != 6:
        idb_opts.append((IF_TSRESOL, bytes([tsresol])))
    if tsoffset:
        idb_opts.append((IF_TSOFFSET, struct.pack(bo + "q", tsoffset)))
    idb_opt_bytes = pcapng_options(idb_opts, big_endian=big_endian)

    out = bytearray()
    i = 0
    for s in range(nsec):
        out += pcapng_block(PCAPNG_SHB, struct.pack(bo + "IHHq", PCAPNG_BOM, 1, 0, -1),
                            big_endian=big_endian)
        for lt in per_section[s]:
            out += pcapng_block(PCAPNG_IDB, struct.pack(bo + "HHI", lt, 0, snaplen)
                                + idb_opt_bytes, big_endian=big_endian)
        while i < n and secs[i] == s:
            f, w, iface = frames[i], wire[i], ifs[i]
            if not 0 <= iface < len(per_section[s]):
                raise ValueError(f"frame {i}: interface {iface} not in section {s}")
            if spb:
                if snaplen and len(f) != min(w, snaplen):
                    raise ValueError(f"frame {i}: SPB frame length must be min(wire_len, snaplen)")
                out += pcapng_block(PCAPNG_SPB, struct.pack(bo + "I", w) + f,
                                    big_endian=big_endian)
            else:
                t = ticks_from_ns(ts[i], tsresol, tsoffset)
                body = struct.pack(bo + "IIIII", iface, (t >> 32) & 0xFFFFFFFF,
                                   t & 0xFFFFFFFF, len(f), w) + f + b"\0" * _pad4(len(f))
                if flags is not None:
                    body += pcapng_options([(EPB_FLAGS, struct.pack(bo + "I", flags[i]))],
                                           big_endian=big_endian)
                out += pcapng_block(PCAPNG_EPB, body, big_endian=big_endian)
            i += 1
    _write(path, out)


def _write(path, data: bytes) -> None:
    # Write to a temporary name and rename, so a reader never sees a half-written sample.
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
