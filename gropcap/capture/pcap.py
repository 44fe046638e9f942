"""Classic pcap record scanner (draft-ietf-opsawg-pcap).

Layer: capture. Walks the bytes of a pcap file and appends one entry per record to
:class:`~gropcap.capture.base.Columns`; hands nothing further down.

Accepted: magic ``a1b2c3d4`` (microsecond timestamps) and ``a1b23c4d`` (nanosecond),
in either byte order. Timestamps become int64 ns: ``sec * 10**9 + frac * (1000 or 1)``,
integers only. The header's thiszone/sigfigs are ignored (always 0 in practice); the
link type is the low 16 bits of the LinkType field (the upper bits carry FCS info).

Length policy (the record framing has no other check, so lengths are the only defence
against reading garbage as records):

- ``caplen > MAX_RECORD_LEN`` (256 KiB) is refused as corrupt: no real capture writer
  produces it, and it is what a misaligned or damaged header looks like.
- ``caplen > max(snaplen, 65535)`` with a non-zero snaplen is also refused: writers never
  exceed their own snap length, and 65535 covers old files whose header says a smaller
  snaplen than their records (some tools rewrite headers carelessly).
- ``snaplen < caplen <= 65535`` is kept with one warning per file.
- ``caplen > wire_len`` is legal for some writers: both are kept as stored.
- A file cut inside a record keeps the complete records before it and adds a warning;
  only a cut inside the 24-byte file header raises :class:`CaptureTruncatedError`.
"""

from __future__ import annotations

import struct

import numpy as np

import gropcap.capture.fast as fast
from gropcap.capture.base import DONE, LIMIT, NEED_MORE, NS_PER_S, Columns
from gropcap.constants import MAX_RECORD_LEN
from gropcap.errors import CaptureError, CaptureTruncatedError

PCAP_HEADER_LEN = 24
PCAP_RECORD_HEADER_LEN = 16
# magic as read little-endian -> (byte order, ns per fractional unit)
PCAP_MAGICS = {
    0xA1B2C3D4: ("little", 1000),   # microseconds, little-endian file
    0xD4C3B2A1: ("big", 1000),      # microseconds, big-endian file
    0xA1B23C4D: ("little", 1),      # nanoseconds, little-endian file
    0x4D3CB2A1: ("big", 1),         # nanoseconds, big-endian file
}
PCAP_MAGIC_MODIFIED = (0xA1B2CD34, 0x34CDB2A1)   # Kuznetzov "modified pcap"
SNAPLEN_SLACK = 65535
FAST_CHUNK = 1 << 20        # records per numba kernel call


def is_pcap_magic(head: bytes) -> bool:
    """True when ``head`` starts with one of the four classic pcap magics."""
    return len(head) >= 4 and struct.unpack_from("<I", head)[0] in PCAP_MAGICS


class PcapScanner:
    """Stateful scanner over a pcap byte window (see :meth:`step`)."""

    format = "pcap"

    def __init__(self, path: str, info, fast: bool = True):
        self.path = path
        self.fast = fast
        self.info = info
        self.started = False
        self.record = 0
        self._rec = None
        self._frac_ns = 1000
        self._linktype = 0
        self._snaplen = 0
        self._warned_snaplen = False
        self._constants = None       # (_constant_fields)

    def _header(self, win, pos: int) -> None:
        magic = struct.unpack_from("<I", win, pos)[0]
        order, frac_ns = PCAP_MAGICS[magic]
        bo = "<" if order == "little" else ">"
        major, minor, _zone, _sigfigs, snaplen, linktype = struct.unpack_from(
            bo + "HHiIII", win, pos + 4)
        self._rec = struct.Struct(bo + "IIII")
        self._frac_ns = frac_ns
        self._snaplen = snaplen
        self._linktype = linktype & 0xFFFF
        info = self.info
        info.format = "pcap"
        info.byte_order = order
        info.ts_resolution_ns = frac_ns
        info.snaplen = snaplen
        info.linktypes = [self._linktype]
        if major != 2:
            info.warnings.append(f"pcap version {major}.{minor} (expected 2.4); "
                                 "records read as 2.4")

    def _constant_fields(self, m: int):
        """The fields every record of a pcap file has alike (the header's link type,
        interface 0, no EPB flags) for ``m`` records: views of arrays kept from batch to
        batch, not filled again for each (nothing writes to a batch's fields)."""
        got = self._constants
        if got is None or len(got[0]) < m:
            size = max(m, 1 << 16)
            got = self._constants = (np.full(size, self._linktype, np.uint16),
                                     np.zeros(size, np.uint16), np.zeros(size, np.uint32))
        return got[0][:m], got[1][:m], got[2][:m]

    def _fast(self, win, pos, base, want, len_limit, cols):
        """Bulk of the records through the numba kernel; the rest stays for step()."""
        arr = fast.window(win)
        n = len(arr)
        be = self.info.byte_order == "big"
        got = 0
        try:
            while got < want:
                k = min(want - got, FAST_CHUNK, (n - pos) // PCAP_RECORD_HEADER_LEN + 1)
                data, cap, wire, ts, _lt, _g, _f, foff = fast.alloc(k)
                recs = np.empty(k, np.uint64)
                rec = self.record
                m, pos = fast.pcap_scan(arr, pos, n, be, self._frac_ns, len_limit, k,
                                        base, rec, data, cap, wire, ts, foff, recs)
                if m:
                    if self._snaplen and not self._warned_snaplen:
                        over = np.flatnonzero(cap[:m] > self._snaplen)
                        if len(over):
                            i = int(over[0])
                            self._warned_snaplen = True
                            self.info.warnings.append(
                                f"record {rec + i} at byte offset {int(foff[i])}: "
                                f"captured length {int(cap[i])} exceeds the header snap "
                                f"length {self._snaplen}; records kept as stored")
                    lt, iface, flags = self._constant_fields(m)
                    cols.add_arrays(data=data[:m], cap=cap[:m], wire=wire[:m], ts=ts[:m],
                                    lt=lt, iface=iface, flags=flags, rec=recs[:m],
                                    foff=foff[:m])
                    self.record = rec + m
                    got += m
                if m < k:
                    break
        finally:
            del arr         # a bytearray window must not stay exported (it grows later)
        return got, pos

    def step(self, win, pos: int, base: int, eof: bool, want: int, cols: Columns):
        """Scan records from ``win[pos:]`` (file offset ``base + pos``) into ``cols``.

        Stops after ``want`` records (LIMIT), at an incomplete record (NEED_MORE, or DONE
        with a warning when ``eof``), or at the end of the window (DONE when ``eof``).
        Returns ``(new_pos, status)``.
        """
        n = len(win)
        if not self.started:
            if n - pos < PCAP_HEADER_LEN:
                if not eof:
                    return pos, NEED_MORE
                raise CaptureTruncatedError(
                    f"file ends inside the {PCAP_HEADER_LEN}-byte pcap file header "
                    f"({n - pos} bytes present)", path=self.path, offset=base + pos,
                    hint="the file is cut short or still being written")
            self._header(win, pos)
            self.started = True
            pos += PCAP_HEADER_LEN
        frac_ns, lt, snaplen = self._frac_ns, self._linktype, self._snaplen
        limit = max(snaplen, SNAPLEN_SLACK) if snaplen else MAX_RECORD_LEN
        got = 0
        if self.fast and n - pos >= PCAP_RECORD_HEADER_LEN:
            got, pos = self._fast(win, pos, base, want, min(limit, MAX_RECORD_LEN), cols)
        unpack = self._rec.unpack_from
        a_data, a_cap, a_wire, a_ts = (cols.data.append, cols.cap.append,
                                       cols.wire.append, cols.ts.append)
        a_rec, a_foff = cols.rec.append, cols.foff.append
        rec = self.record
        k0 = len(cols.data)
        while got < want:
            if n - pos < PCAP_RECORD_HEADER_LEN:
                break
            sec, frac, incl, orig = unpack(win, pos)
            # Validate the length before trusting it (module docstring: length policy).
            if incl > MAX_RECORD_LEN or incl > limit:
                self.record = rec
                raise CaptureError(
                    f"record captured length {incl} is larger than "
                    + (f"the 256 KiB limit" if incl > MAX_RECORD_LEN
                       else f"the snap length {snaplen}")
                    + " (corrupt record header?)", path=self.path, offset=base + pos,
                    record=rec, hint="the file is damaged here; records before this "
                                     "offset can be recovered with `editcap -r`")
            if n - pos - PCAP_RECORD_HEADER_LEN < incl:
                break
            if snaplen and incl > snaplen and not self._warned_snaplen:
                self._warned_snaplen = True
                self.info.warnings.append(
                    f"record {rec} at byte offset {base + pos}: captured length {incl} "
                    f"exceeds the header snap length {snaplen}; records kept as stored")
            a_foff(base + pos)
            a_data(base + pos + PCAP_RECORD_HEADER_LEN)
            a_cap(incl)
            a_wire(orig)
            a_ts(sec * NS_PER_S + frac * frac_ns)
            a_rec(rec)
            rec += 1
            got += 1
            pos += PCAP_RECORD_HEADER_LEN + incl
        k = len(cols.data) - k0
        cols.lt.extend([lt] * k)
        cols.iface.extend([0] * k)
        cols.flags.extend([0] * k)
        self.record = rec
        if got >= want:
            return pos, LIMIT
        if pos == n:
            return pos, DONE if eof else NEED_MORE
        if not eof:
            return pos, NEED_MORE
        self.info.warnings.append(
            f"file ends inside record {rec} at byte offset {base + pos} "
            f"({n - pos} of its bytes present): capture still being written? "
            f"{rec} complete records kept")
        return n, DONE
