"""The record index: what the capture layer hands to the decoders.

A :class:`RecordBatch` is a set of captured frames in file order: their bytes live in one
``uint8`` buffer and each frame is a slice ``buf[offset[i] : offset[i] + cap_len[i]]``.
All fields are numpy arrays so numba kernels can take them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


class RecordBatch(NamedTuple):
    """Captured frames, one array element per record, in file order."""

    buf: np.ndarray          # uint8: bytes the frames are sliced from
    offset: np.ndarray       # int64: start of frame i in buf
    cap_len: np.ndarray      # uint32: captured bytes
    wire_len: np.ndarray     # uint32: original length on the wire
    ts_ns: np.ndarray        # int64: ns since the epoch (if_tsresol/if_tsoffset applied)
    linktype: np.ndarray     # uint16
    iface: np.ndarray        # uint16: pcapng interface id (global across sections), 0 for pcap
    epb_flags: np.ndarray    # uint32: pcapng epb_flags, 0 when absent
    record: np.ndarray       # uint64: record number in the file, from 0
    file_offset: np.ndarray  # uint64: byte offset of the record header in the (decompressed) file

    def __len__(self) -> int:
        # the number of records, not of fields; _replace below does not rely on it
        return len(self.offset)

    def frame(self, i: int) -> bytes:
        """The captured bytes of record ``i``."""
        o = int(self.offset[i])
        return bytes(self.buf[o:o + int(self.cap_len[i])])


def _replace(self: RecordBatch, **changes) -> RecordBatch:
    """A copy with some arrays replaced (NamedTuple's own _replace checks len())."""
    return RecordBatch(*[changes.pop(f, getattr(self, f)) for f in self._fields])


RecordBatch._replace = _replace  # typing.NamedTuple forbids defining it in the class body


@dataclass
class CaptureInfo:
    """What is known about one capture file after reading it."""

    path: str
    format: str = ""                 # "pcap" or "pcapng"
    compression: str = ""            # "", "gzip", "zstd", "xz", "bzip2"
    byte_order: str = ""             # "little" or "big"
    ts_resolution_ns: int = 1000     # pcap: 1000 (us magic) or 1 (ns magic)
    snaplen: int = 0
    linktypes: list[int] = field(default_factory=list)   # per interface id
    records: int = 0
    digest: str = ""                 # capture.fingerprint of the file as stored (compressed
                                     # bytes if compressed): "xxh3-128:<hex>"
    warnings: list[str] = field(default_factory=list)
