"""Shared pieces of the record scanners: column accumulators, scan statuses, limits.

Layer: capture. A scanner (``pcap.PcapScanner``, ``pcapng.PcapngScanner``) walks a byte
window and appends one entry per record to :class:`Columns`; the reader turns those into a
:class:`~gropcap.capture.records.RecordBatch`.
"""

from __future__ import annotations

import numpy as np

from gropcap.capture.records import RecordBatch

# What a scanner's step() reports back to the driver.
NEED_MORE = 0     # stopped at an incomplete header/record, more bytes may come
LIMIT = 1         # collected the number of records asked for
DONE = 2          # end of the capture (after any truncation warning)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
NS_PER_S = 1_000_000_000


_DTYPES = {"data": np.int64, "cap": np.uint32, "wire": np.uint32, "ts": np.int64,
           "lt": np.uint16, "iface": np.uint16, "flags": np.uint32, "rec": np.uint64,
           "foff": np.uint64}
FIELDS = tuple(_DTYPES)


class Columns:
    """Per-record values appended by a scanner; offsets are absolute file offsets.

    The reference scanners append one record at a time to the lists; the numba fast path
    adds whole arrays with :meth:`add_arrays`. Order is kept across both.
    """

    __slots__ = FIELDS + ("_chunks", "_nchunked")

    def __init__(self):
        for name in FIELDS:
            setattr(self, name, [])
        self._chunks: list[dict] = []
        self._nchunked = 0

    def __len__(self) -> int:
        return self._nchunked + len(self.data)

    def _flush(self) -> None:
        if self.data:
            self._chunks.append({f: np.asarray(getattr(self, f), dtype=_DTYPES[f])
                                 for f in FIELDS})
            self._nchunked += len(self.data)
            for f in FIELDS:
                setattr(self, f, [])

    def add_arrays(self, **arrays) -> None:
        """Append records given as equal-length arrays, one keyword per field name."""
        self._flush()
        k = len(arrays["data"])
        if k:
            self._chunks.append({f: np.asarray(arrays[f]).astype(_DTYPES[f], copy=False)
                                 for f in FIELDS})
            self._nchunked += k

    def to_batch(self, buf: np.ndarray, buf_base: int) -> RecordBatch:
        """Pack into a RecordBatch whose ``buf`` starts at file offset ``buf_base``. The
        batch takes the arrays over (the frame offsets are made relative to ``buf`` in
        place): call it once, and add nothing after it."""
        self._flush()
        cols = {}
        for f in FIELDS:
            parts = [c[f] for c in self._chunks]
            cols[f] = (np.concatenate(parts) if len(parts) > 1 else parts[0] if parts
                       else np.zeros(0, dtype=_DTYPES[f]))
        offset = cols["data"]
        offset -= np.int64(buf_base)
        return RecordBatch(
            buf=buf, offset=offset, cap_len=cols["cap"],
            wire_len=cols["wire"], ts_ns=cols["ts"], linktype=cols["lt"],
            iface=cols["iface"], epb_flags=cols["flags"], record=cols["rec"],
            file_offset=cols["foff"])


def empty_batch() -> RecordBatch:
    """A RecordBatch with no records."""
    return Columns().to_batch(np.zeros(0, dtype=np.uint8), 0)


def hexbytes(data: bytes) -> str:
    """``b'\\x0a\\x0d'`` -> ``'0a 0d'`` for error messages."""
    return " ".join(f"{b:02x}" for b in bytes(data)) or "(none: the file is empty)"
