"""pcapng block scanner (draft-ietf-opsawg-pcapng).

Layer: capture. Walks the blocks of a pcapng file and appends one entry per packet record
(EPB, SPB, OPB) to :class:`~gropcap.capture.base.Columns`; hands nothing further down.

- Sections: any number, each with its own byte order (from its SHB byte-order magic).
  Interface ids are global across sections: section k's interface i is numbered after
  all interfaces of earlier sections. ``CaptureInfo.linktypes`` is indexed by that id.
- Timestamps: if_tsresol (10^-n or 2^-n s, default 10^-6) and if_tsoffset (signed
  seconds) per interface, converted with integer arithmetic only:
  ``ns = floor(ticks * 10**9 / ticks_per_second) + tsoffset * 10**9``.
  A result outside int64 is a CaptureError.
- EPB (type 6): ``epb_flags`` option kept as is (direction, FCS length and the Linux
  checksum / TCP-segmentation-offload bits). OPB (type 2, obsolete) is read the same way
  with its ``pack_flags``. SPB (type 3) has no timestamp and always means interface 0 of
  its section: its captured length is ``min(original length, IDB snaplen)`` (snaplen 0 =
  no limit); it gets the previous packet record's timestamp (0 if none) and the file gets
  one warning saying so.
- Every other block type (name resolution, statistics, custom, decryption secrets,
  unknown) is skipped by its length.
- ``CaptureInfo``: ``snaplen`` is interface 0's; ``ts_resolution_ns`` the finest
  interface tick in whole ns (at least 1; 2^-20 s gives 953); ``byte_order`` the first
  section's.
- A packet longer than its interface's snaplen is kept without a warning: unlike pcap,
  every block carries its length twice, so framing errors are caught by that instead.

Corruption policy: a block whose total length is below 12, not a multiple of 4, above
``PCAPNG_MAX_BLOCK_LEN``, or whose trailing copy of the length differs, is a CaptureError
naming the block type and byte offset; so is a packet whose captured length exceeds its
block or 256 KiB, a packet on an undefined interface, or malformed options. A block
with a plausible length that runs past the end of the file is the file being cut: the
packets before it are kept and a warning is added; only a cut inside the first Section
Header Block raises :class:`CaptureTruncatedError`.
"""

from __future__ import annotations

import math
import struct

import numpy as np

import gropcap.capture.fast as fast
from gropcap.capture.base import (DONE, INT64_MAX, INT64_MIN, LIMIT, NEED_MORE, NS_PER_S,
                                  Columns)
from gropcap.constants import MAX_RECORD_LEN
from gropcap.errors import CaptureError, CaptureTruncatedError

# Block types (pcapng 4 and 10.1)
SHB = 0x0A0D0D0A
IDB = 0x00000001
OPB = 0x00000002
SPB = 0x00000003
EPB = 0x00000006
BLOCK_NAMES = {SHB: "section header", IDB: "interface description", OPB: "obsolete packet",
               SPB: "simple packet", 0x4: "name resolution", 0x5: "interface statistics",
               EPB: "enhanced packet", 0x9: "systemd journal export",
               0xA: "decryption secrets", 0xBAD: "custom", 0x40000BAD: "custom"}
BYTE_ORDER_MAGIC_LE = b"\x4d\x3c\x2b\x1a"   # 0x1A2B3C4D written little-endian
BYTE_ORDER_MAGIC_BE = b"\x1a\x2b\x3c\x4d"
IF_TSRESOL = 9
IF_TSOFFSET = 14
EPB_FLAGS = 2          # also OPB pack_flags
# A block longer than this is treated as a corrupt length field (packets are capped at
# MAX_RECORD_LEN; other blocks, e.g. decryption secrets, are far smaller in practice).
PCAPNG_MAX_BLOCK_LEN = 64 * 1024 * 1024
assert fast.MAX_BLOCK_LEN == PCAPNG_MAX_BLOCK_LEN
FAST_CHUNK = 1 << 20        # records per numba kernel call


def is_pcapng_magic(head: bytes) -> bool:
    """True when ``head`` starts with the pcapng Section Header Block type."""
    return bytes(head[:4]) == b"\x0a\x0d\x0d\x0a"


def block_name(btype: int) -> str:
    """Human name of a block type for messages: ``'enhanced packet block (type 0x6)'``."""
    return f"{BLOCK_NAMES.get(btype, 'unknown')} block (type {btype:#x})"


class _Iface:
    __slots__ = ("gid", "linktype", "snaplen", "num", "den", "off_ns")

    def __init__(self, gid, linktype, snaplen, num, den, off_ns):
        self.gid, self.linktype, self.snaplen = gid, linktype, snaplen
        self.num, self.den, self.off_ns = num, den, off_ns   # ns = ticks * num // den + off


class PcapngScanner:
    """Stateful scanner over a pcapng byte window (see :meth:`step`)."""

    format = "pcapng"

    def __init__(self, path: str, info, fast: bool = True):
        self.path = path
        self.fast = fast
        self._params = None       # numba kernel arrays for the current section's ifaces
        self.info = info
        self.record = 0
        self.bo = None            # "<" or ">" of the current section
        self.ifaces: list[_Iface] = []     # interfaces of the current section
        self.next_gid = 0
        self.last_ts = 0
        self.spb_count = 0
        self.sections = 0
        self.finest_tick_ns = None

    # --- errors -----------------------------------------------------------------------
    def _corrupt(self, what: str, offset: int, btype: int | None = None) -> CaptureError:
        name = f"{block_name(btype)}: " if btype is not None else ""
        return CaptureError(name + what, path=self.path, offset=offset, record=self.record,
                            hint="the file is damaged here; blocks before this offset can "
                                 "be recovered with `editcap -r` or `pcapfix`")

    # --- blocks -----------------------------------------------------------------------
    def _shb(self, win, pos, base, blen_le):
        bom = bytes(win[pos + 8:pos + 12])
        if bom == BYTE_ORDER_MAGIC_LE:
            bo = "<"
        elif bom == BYTE_ORDER_MAGIC_BE:
            bo = ">"
        else:
            raise self._corrupt(f"byte-order magic is {bom.hex(' ')}, expected 1a 2b 3c 4d "
                                "in either byte order", base + pos + 8, SHB)
        major, minor = struct.unpack_from(bo + "HH", win, pos + 12)
        if major != 1:
            raise CaptureError(f"pcapng version {major}.{minor} is not supported (only 1.x)",
                               path=self.path, offset=base + pos, record=self.record,
                               hint="convert it with `editcap -F pcapng`")
        self.bo = bo
        self.ifaces = []
        self._params = None
        self.sections += 1
        if self.sections == 1:
            self.info.format = "pcapng"
            self.info.byte_order = "little" if bo == "<" else "big"

    def _options(self, win, start, end, base, btype):
        """Yield ``(code, value_start, value_len)`` for options in ``win[start:end]``."""
        bo = self.bo
        p = start
        while p + 4 <= end:
            code, olen = struct.unpack_from(bo + "HH", win, p)
            if code == 0:
                return
            if p + 4 + olen > end:
                raise self._corrupt(f"option {code} of length {olen} runs past the block end",
                                    base + p, btype)
            yield code, p + 4, olen
            p += 4 + olen + ((-olen) & 3)

    def _idb(self, win, pos, base, blen):
        if blen < 20:
            raise self._corrupt(f"block length {blen} is too short (needs 20)", base + pos, IDB)
        bo = self.bo
        linktype, _res, snaplen = struct.unpack_from(bo + "HHI", win, pos + 8)
        num, den, off_s = NS_PER_S, 10 ** 6, 0        # default if_tsresol 6 (microseconds)
        for code, vs, vl in self._options(win, pos + 16, pos + blen - 4, base, IDB):
            if code == IF_TSRESOL and vl >= 1:
                r = win[vs]
                if r & 0x80:
                    num, den = NS_PER_S, 1 << (r & 0x7F)
                else:
                    num, den = NS_PER_S, 10 ** r
            elif code == IF_TSOFFSET and vl >= 8:
                off_s = struct.unpack_from(bo + "q", win, vs)[0]
        # Reduce ticks * 1e9 / den to lowest terms (exact either way; keeps the fast path's
        # 64-bit products small: 10^-12 s becomes 1/1000, 2^-30 s 1953125/2^21).
        g = math.gcd(num, den)
        num, den = num // g, den // g
        tick_ns = max(1, num // den)
        if self.finest_tick_ns is None or tick_ns < self.finest_tick_ns:
            self.finest_tick_ns = tick_ns
            self.info.ts_resolution_ns = tick_ns
        gid = self.next_gid
        if gid > 0xFFFF:
            raise self._corrupt("more than 65536 interfaces (corrupt file?)", base + pos, IDB)
        self.next_gid += 1
        self.ifaces.append(_Iface(gid, linktype, snaplen, num, den, off_s * NS_PER_S))
        self._params = None
        self.info.linktypes.append(linktype)
        if gid == 0:
            self.info.snaplen = snaplen

    def _ts(self, iface, hi, lo, offset, btype):
        ticks = (hi << 32) | lo
        ns = (ticks * iface.num) // iface.den + iface.off_ns
        if ns < INT64_MIN or ns > INT64_MAX:
            raise self._corrupt(f"timestamp {ticks} ticks does not fit int64 nanoseconds",
                                offset, btype)
        return ns

    def _iface(self, iid, offset, btype):
        if iid >= len(self.ifaces):
            raise self._corrupt(f"packet on interface {iid}, but this section defines "
                                f"{len(self.ifaces)} interface(s)", offset, btype)
        return self.ifaces[iid]

    # --- driver -----------------------------------------------------------------------
    def step(self, win, pos: int, base: int, eof: bool, want: int, cols: Columns):
        """Scan blocks from ``win[pos:]`` (file offset ``base + pos``) into ``cols``.

        Same contract as :meth:`gropcap.capture.pcap.PcapScanner.step`: returns
        ``(new_pos, status)`` with status NEED_MORE, LIMIT or DONE.
        """
        arr = fast.window(win) if self.fast else None
        try:
            return self._step(win, arr, pos, base, eof, want, cols)
        finally:
            del arr         # a bytearray window must not stay exported (it grows later)

    def _fast_params(self):
        if self._params is None:
            ifs = self.ifaces
            lim = 1 << 62
            self._params = (
                np.array([i.linktype for i in ifs], dtype=np.int64),
                np.array([i.gid for i in ifs], dtype=np.int64),
                np.array([i.snaplen for i in ifs], dtype=np.int64),
                np.array([i.num if i.num < lim else 1 for i in ifs], dtype=np.int64),
                np.array([i.den if i.den < lim else 1 for i in ifs], dtype=np.int64),
                np.array([i.off_ns if abs(i.off_ns) < lim else 0 for i in ifs],
                         dtype=np.int64),
                # the kernel's r * num must fit int64; otherwise the reference path runs
                np.array([i.num * i.den < lim and abs(i.off_ns) < lim for i in ifs],
                         dtype=np.bool_),
            )
        return self._params

    def _fast_run(self, arr, pos, base, want, cols):
        """A run of EPB/SPB blocks through the numba kernel; returns (count, new_pos)."""
        n = len(arr)
        p = self._fast_params()
        k = min(want, FAST_CHUNK, (n - pos) // 16 + 1)
        data, cap, wire, ts, lt, gid, flags, foff = fast.alloc(k)
        m, pos, last_ts, spb = fast.pcapng_scan(
            arr, pos, n, self.bo == ">", *p, np.int64(self.last_ts), k,
            data, cap, wire, ts, lt, gid, flags, foff)
        if m:
            rec = self.record
            data, foff = data[:m], foff[:m]
            data += base                # (file offsets, in place: the arrays are new)
            foff += np.uint64(base)
            cols.add_arrays(data=data, cap=cap[:m], wire=wire[:m], ts=ts[:m],
                            lt=lt[:m], iface=gid[:m], flags=flags[:m],
                            rec=np.arange(rec, rec + m, dtype=np.uint64), foff=foff)
            self.record = rec + m
            self.last_ts = int(last_ts)
            self.spb_count += spb
        return m, pos

    def _step(self, win, arr, pos, base, eof, want, cols):
        n = len(win)
        got = 0
        unpack_from = struct.unpack_from
        while got < want:
            if arr is not None and self.bo is not None and self.ifaces:
                m, pos = self._fast_run(arr, pos, base, want - got, cols)
                got += m
                if got >= want:
                    break
            avail = n - pos
            if avail == 0:
                return pos, DONE if eof else NEED_MORE
            first = self.bo is None
            need = 12 if first else 8
            if avail < need:
                return self._short(pos, base, eof, n)
            if first:
                btype = unpack_from("<I", win, pos)[0]
                if btype != SHB:
                    raise self._corrupt("the file does not start with a section header block",
                                        base + pos)
            btype = unpack_from("<I", win, pos)[0]
            if btype == SHB:
                if avail < 12:
                    return self._short(pos, base, eof, n)
                bom = bytes(win[pos + 8:pos + 12])
                bo = ">" if bom == BYTE_ORDER_MAGIC_BE else "<"
                if bom not in (BYTE_ORDER_MAGIC_LE, BYTE_ORDER_MAGIC_BE):
                    raise self._corrupt(f"byte-order magic is {bom.hex(' ')}, expected "
                                        "1a 2b 3c 4d in either byte order", base + pos + 8, SHB)
                blen = unpack_from(bo + "I", win, pos + 4)[0]
            else:
                bo = self.bo
                btype, blen = unpack_from(bo + "II", win, pos)
            if blen < 12 or blen & 3 or blen > PCAPNG_MAX_BLOCK_LEN:
                why = ("is below the 12-byte minimum" if blen < 12 else
                       "is not a multiple of 4" if blen & 3 else
                       f"is above the {PCAPNG_MAX_BLOCK_LEN >> 20} MiB sanity limit")
                raise self._corrupt(f"block total length {blen} {why}", base + pos, btype)
            if btype == SHB and blen < 28:
                raise self._corrupt(f"block total length {blen} is below the 28-byte minimum",
                                    base + pos, btype)
            if avail < blen:
                return self._short(pos, base, eof, n, btype, blen)
            trail = unpack_from(bo + "I", win, pos + blen - 4)[0]
            if trail != blen:
                raise self._corrupt(f"trailing block length {trail} differs from the leading "
                                    f"length {blen}", base + pos, btype)
            if btype == EPB:
                if blen < 32:
                    raise self._corrupt(f"block length {blen} is too short (needs 32)",
                                        base + pos, btype)
                iid, hi, lo, cap, wire = unpack_from(bo + "IIIII", win, pos + 8)
                self._packet(win, pos, base, blen, btype, iid, hi, lo, cap, wire, 28, cols)
                got += 1
            elif btype == SPB:
                if blen < 16:
                    raise self._corrupt(f"block length {blen} is too short (needs 16)",
                                        base + pos, btype)
                wire = unpack_from(bo + "I", win, pos + 8)[0]
                iface = self._iface(0, base + pos, btype)
                cap = min(wire, iface.snaplen) if iface.snaplen else wire
                if cap > blen - 16 or cap > MAX_RECORD_LEN:
                    raise self._corrupt(f"original length {wire} (snaplen {iface.snaplen}) "
                                        f"exceeds the {blen - 16} data bytes of the block",
                                        base + pos, btype)
                self.spb_count += 1
                self._append(cols, base + pos, base + pos + 12, cap, wire, self.last_ts,
                             iface, 0)
                got += 1
            elif btype == OPB:
                if blen < 32:
                    raise self._corrupt(f"block length {blen} is too short (needs 32)",
                                        base + pos, btype)
                iid, _drops, hi, lo, cap, wire = unpack_from(bo + "HHIIII", win, pos + 8)
                self._packet(win, pos, base, blen, btype, iid, hi, lo, cap, wire, 28, cols)
                got += 1
            elif btype == SHB:
                self._shb(win, pos, base, blen)
            elif btype == IDB:
                self._idb(win, pos, base, blen)
            # every other block type is skipped by its length
            pos += blen
        return pos, LIMIT

    def _packet(self, win, pos, base, blen, btype, iid, hi, lo, cap, wire, hdr, cols):
        iface = self._iface(iid, base + pos, btype)
        if cap > MAX_RECORD_LEN or hdr + cap + 4 > blen:
            raise self._corrupt(f"captured length {cap} exceeds "
                                + ("the 256 KiB limit" if cap > MAX_RECORD_LEN
                                   else f"the {blen - hdr - 4} data bytes of the block"),
                                base + pos, btype)
        flags = 0
        opt_start = pos + hdr + cap + ((-cap) & 3)
        opt_end = pos + blen - 4
        if opt_start + 4 <= opt_end:
            for code, vs, vl in self._options(win, opt_start, opt_end, base, btype):
                if code == EPB_FLAGS and vl == 4:
                    flags = struct.unpack_from(self.bo + "I", win, vs)[0]
        ts = self._ts(iface, hi, lo, base + pos, btype)
        self.last_ts = ts
        self._append(cols, base + pos, base + pos + hdr, cap, wire, ts, iface, flags)

    def _append(self, cols, foff, data, cap, wire, ts, iface, flags):
        cols.foff.append(foff)
        cols.data.append(data)
        cols.cap.append(cap)
        cols.wire.append(wire)
        cols.ts.append(ts)
        cols.lt.append(iface.linktype)
        cols.iface.append(iface.gid)
        cols.flags.append(flags)
        cols.rec.append(self.record)
        self.record += 1

    def _short(self, pos, base, eof, n, btype=None, blen=None):
        """The window ends inside a block: wait for more, or report the cut at EOF."""
        if not eof:
            return pos, NEED_MORE
        if self.sections == 0:
            raise CaptureTruncatedError(
                f"file ends inside the first section header block ({n - pos} bytes present)",
                path=self.path, offset=base + pos, record=0,
                hint="the file is cut short or still being written")
        what = block_name(btype) if btype is not None else "a block header"
        extra = f" of {blen} bytes" if blen is not None else ""
        self.info.warnings.append(
            f"file ends inside {what}{extra} at byte offset {base + pos} "
            f"({n - pos} bytes present), before record {self.record}: capture still being "
            f"written? {self.record} complete records kept")
        return n, DONE

    def finish(self) -> None:
        """Add end-of-file warnings (SPB timestamps)."""
        if self.spb_count:
            self.info.warnings.append(
                f"{self.spb_count} simple packet block(s) carry no timestamp: each was given "
                "the previous packet's timestamp")
