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


class Columns:
    """Per-record values appended by a scanner; offsets are absolute file offsets."""

    __slots__ = ("data", "cap", "wire", "ts", "lt", "iface", "flags", "rec", "foff")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.data)

    def to_batch(self, buf: np.ndarray, buf_base: int) -> RecordBatch:
        """Pack into a RecordBatch whose ``buf`` starts at file offset ``buf_base``."""
        return RecordBatch(
            buf=buf,
            offset=np.asarray(self.data, dtype=np.int64) - buf_base,
            cap_len=np.asarray(self.cap, dtype=np.uint32),
            wire_len=np.asarray(self.wire, dtype=np.uint32),
            ts_ns=np.asarray(self.ts, dtype=np.int64),
            linktype=np.asarray(self.lt, dtype=np.uint16),
            iface=np.asarray(self.iface, dtype=np.uint16),
            epb_flags=np.asarray(self.flags, dtype=np.uint32),
            record=np.asarray(self.rec, dtype=np.uint64),
            file_offset=np.asarray(self.foff, dtype=np.uint64),
        )


def empty_batch() -> RecordBatch:
    """A RecordBatch with no records."""
    return Columns().to_batch(np.zeros(0, dtype=np.uint8), 0)


def hexbytes(data: bytes) -> str:
    """``b'\\x0a\\x0d'`` -> ``'0a 0d'`` for error messages."""
    return " ".join(f"{b:02x}" for b in bytes(data)) or "(none: the file is empty)"
