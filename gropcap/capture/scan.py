"""Windowed record scan: a plain capture file, mapped a window at a time -> RecordBatch.

Layer: capture (the fast path of :func:`gropcap.capture.iter_batches`). Hands
:class:`~gropcap.capture.records.RecordBatch` objects (plus a
:class:`~gropcap.capture.records.CaptureInfo` snapshot) to the decoders.

The record framing itself is done by the capture scanners (``pcap.PcapScanner`` /
``pcapng.PcapngScanner``), whose bulk runs through the numba kernels of
:mod:`gropcap.capture.fast`, so the records, warnings and errors are exactly those of the
reference reader. What this module adds is memory: the reference reader maps the whole
file; here only a window of it is mapped at a time (``window_bytes``, 64 MiB by default,
plus the span of the batch being built), so resident memory stays bounded whatever the
file size. Each batch's ``buf`` is a zero-copy view of its window; a window is unmapped
once no batch refers to it. The file's digest (``capture.fingerprint``) is computed
incrementally over the same windows, by a worker thread that also maps in
(``MADV_POPULATE_READ``) the pages of the next batch while the consumer decodes the
current one: page faults of a file mapping cost about as much as scanning its
records.

Compressed files, pipes and empty files are handed to the reference reader, which
decompresses in streaming fashion with the same bounded memory.
"""

from __future__ import annotations

import mmap
from concurrent.futures import ThreadPoolExecutor
import os
import stat
from collections.abc import Iterator

import numpy as np

import gropcap.capture.fingerprint as fingerprint
from gropcap.capture.base import DONE, NEED_MORE, Columns, empty_batch
from gropcap.capture.compress import sniff_compression
from gropcap.capture.pcapng import PcapngScanner
from gropcap.capture.reader import _scanner, _snapshot, iter_batches
from gropcap.capture.records import CaptureInfo, RecordBatch
from gropcap.errors import CaptureError
from gropcap.priority import BACKGROUND, lower_this_thread

__all__ = ["iter_scan_batches", "WINDOW_BYTES", "BATCH_RECORDS"]

WINDOW_BYTES = 64 << 20          # bytes mapped beyond the current batch's start
_GRAN = mmap.ALLOCATIONGRANULARITY
_HASH_CHUNK = 8 << 20
_HASH_BACKLOG = 2                # batches queued for hashing at most
_POPULATE = getattr(mmap, "MADV_POPULATE_READ", 22) if hasattr(mmap.mmap, "madvise") else None


class _Window:
    """One read-only mapping ``[base, base + len)`` of the file (``base`` page aligned)."""

    def __init__(self, fd: int, size: int, start: int, length: int):
        self.base = start - start % _GRAN
        end = min(size, start + length)
        self.mm = mmap.mmap(fd, end - self.base, access=mmap.ACCESS_READ, offset=self.base)
        self.end = end
        self.eof = end == size
        try:     # sequential access: let the kernel read ahead and drop pages behind
            self.mm.madvise(mmap.MADV_SEQUENTIAL)
        except (AttributeError, OSError):
            pass

    def view(self, lo: int, hi: int) -> np.ndarray:
        """Bytes ``[lo, hi)`` (file offsets) as a uint8 view; keeps the mapping alive."""
        return np.frombuffer(self.mm, dtype=np.uint8)[lo - self.base:hi - self.base]


# records per scan batch unless a caller asks otherwise (the Dask runner cuts byte ranges
# in whole batches of this size to lay out ``encap`` dictionaries as one process does)
BATCH_RECORDS = 262144


def iter_scan_batches(path, *, batch_records: int = BATCH_RECORDS,
                      window_bytes: int = WINDOW_BYTES, digest: bool = True
                      ) -> Iterator[tuple[CaptureInfo, RecordBatch]]:
    """Stream a capture in batches, mapping at most a window of a plain file at a time.

    Same contract as :func:`gropcap.capture.iter_batches` (identical records, warnings,
    errors and ``CaptureInfo`` snapshots; the last one yielded is complete), with bounded
    resident memory for files of any size.

    Parameters
    ----------
    path: one capture file (pcap or pcapng; compressed files are streamed by the
        reference reader).
    batch_records: records per batch (the last batch may be smaller).
    window_bytes: bytes mapped ahead of the current batch's start (tests use tiny
        windows to exercise records that straddle windows).
    digest: False: a plain file's ``CaptureInfo.digest`` is left empty (a caller that
        hashes the file elsewhere: the Dask runner's fused partitions each scan every
        file; compressed files are hashed anyway).

    Yields ``(info, batch)``. Raises :class:`~gropcap.errors.CaptureError` /
    :class:`~gropcap.errors.CaptureTruncatedError` as the reference reader does.

    >>> n = sum(len(b) for _, b in iter_scan_batches("big.pcap"))   # doctest: +SKIP
    """
    if batch_records < 1:
        raise ValueError("batch_records must be >= 1")
    if window_bytes < 1:
        raise ValueError("window_bytes must be >= 1")
    return _scan(os.fspath(path), batch_records, window_bytes, digest)


def _scan(path: str, batch_records: int, window_bytes: int, digest: bool = True):
    # (a pipe is not opened here: a named pipe opened and closed before the reader
    # opens it again can lose its writer, which gets EPIPE, and the reader then waits
    # for a writer for ever)
    try:
        fd = os.open(path, os.O_RDONLY) if stat.S_ISREG(os.stat(path).st_mode) else -1
    except OSError:
        fd = -1
    if fd < 0:
        yield from iter_batches(path, batch_records=batch_records)   # its located error
        return
    try:
        st = os.fstat(fd)
        size = st.st_size
        regular = stat.S_ISREG(st.st_mode)
        head = os.pread(fd, 8, 0) if regular and size else b""
        if not regular or size == 0 or sniff_compression(head):
            os.close(fd)
            fd = -1
            yield from iter_batches(path, batch_records=batch_records)
            return
        yield from _scan_mapped(path, fd, size, head, batch_records, window_bytes, digest)
    finally:
        if fd >= 0:
            os.close(fd)


class _Hasher:
    """The file's digest (``fingerprint.ALGORITHM``), fed in order by one worker thread
    that also maps in the pages of the next batch (:meth:`prefault`). Either overlaps
    with decoding when a second core is free; with one core it costs the same as
    inline."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.hash = fingerprint.new()
        # the lowest priority: the digest is needed only at the end of the run
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="gropcap-digest",
                                       initializer=lower_this_thread, initargs=(BACKGROUND,))
        self.pending = []

    def update(self, mm, lo: int, hi: int) -> None:
        """Hash ``mm[lo:hi]`` (the mapping stays alive until it is hashed)."""
        if not self.enabled:
            return
        self.pending = [f for f in self.pending if not f.done()]
        while len(self.pending) >= _HASH_BACKLOG:     # bounded: windows wait to be hashed
            self.pending.pop(0).result()
        self.pending.append(self.pool.submit(self._update, mm, lo, hi))

    def _update(self, mm, lo, hi):
        with memoryview(mm) as mv:
            self.hash.update(mv[lo:hi])

    def prefault(self, mm, lo: int, hi: int) -> None:
        """Map the file pages of ``mm[lo:hi]`` from the worker thread, ahead of the scan.

        The page faults of a file mapping cost about as much as scanning its records; the
        worker takes them (``MADV_POPULATE_READ``, Linux 5.14) while the main thread
        decodes the previous batch. The same CPU time, off the decoding thread. A no-op
        where the kernel lacks it."""
        if _POPULATE is not None and hi > lo:
            self.pool.submit(self._prefault, mm, lo - lo % mmap.PAGESIZE, hi)

    @staticmethod
    def _prefault(mm, lo, hi):
        global _POPULATE
        try:
            mm.madvise(_POPULATE, lo, hi - lo)
        except (OSError, ValueError):
            _POPULATE = None

    def hexdigest(self) -> str:
        for f in self.pending:
            f.result()
        self.pool.shutdown(wait=True)
        return fingerprint.label(self.hash) if self.enabled else ""

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _scan_mapped(path, fd, size, head, batch_records, window_bytes, digest=True):
    hasher = _Hasher(digest)
    try:
        yield from _scan_hashed(path, fd, size, head, batch_records, window_bytes, hasher)
    finally:
        hasher.close()


def _scan_hashed(path, fd, size, head, batch_records, window_bytes, hasher):
    info = CaptureInfo(path=path, compression="")
    scanner = _scanner(path, head, info, "", True)
    hashed = 0                   # file bytes hashed so far
    win = _Window(fd, size, 0, window_bytes)
    lo = 0                       # file offset where the current batch's bytes start
    pos = 0                      # file offset of the next record
    total = 0
    cols = Columns()
    pending = None               # hold one batch back so the last yielded has final info
    while True:
        want = batch_records - len(cols)
        try:
            rel, status = scanner.step(win.mm, pos - win.base, win.base, win.eof, want, cols)
        except CaptureError:
            if pending is not None:
                yield pending       # complete batches before the damage come first
            raise
        pos = win.base + rel
        if status == NEED_MORE:
            # The window ends inside a record: map again from the batch start, far
            # enough to hold what is scanned already plus a fresh window.
            need = max(window_bytes, 2 * (win.end - pos))
            win = _Window(fd, size, lo, pos - lo + need)
            continue
        done = status == DONE
        if len(cols) or (done and total == 0 and pending is None):
            batch = cols.to_batch(win.view(lo, pos), lo) if len(cols) else empty_batch()
            total += len(cols)
            info.records = total
            if pending is not None:
                yield pending
            pending = (_snapshot(info), batch)
            cols = Columns()
        hash_from = win                 # the mapping that holds what the scan has passed
        if not done:
            span = pos - lo             # the next batch probably spans as many bytes
            lo = pos
            if win.end - pos < window_bytes // 2 and not win.eof:
                win = _Window(fd, size, pos, window_bytes)
            hasher.prefault(win.mm, pos - win.base, min(win.end, pos + span) - win.base)
        # hash what the scan has passed, from the mapping already in memory
        if pos > hashed:
            hasher.update(hash_from.mm, hashed - hash_from.base, pos - hash_from.base)
            hashed = pos
        if done:
            break
    del win
    for f in hasher.pending:      # the worker is done with the windows after this
        f.result()
    while hasher.enabled and hashed < size:   # bytes after a cut record, or never reached
        chunk = os.pread(fd, min(_HASH_CHUNK, size - hashed), hashed)
        if not chunk:
            break
        hasher.hash.update(chunk)
        hashed += len(chunk)
    if isinstance(scanner, PcapngScanner):
        scanner.finish()
    info.digest = hasher.hexdigest()
    info.records = total
    if pending is not None:
        yield _snapshot(info), pending[1]
