"""Public capture readers: files / directories -> (CaptureInfo, RecordBatch).

Layer: capture (top). Picks the byte source (``compress.Source``: mmap or stream
decompression) and the record scanner (``pcap`` or ``pcapng``) from the file's first bytes,
and hands :class:`~gropcap.capture.records.RecordBatch` objects to the decoders.

Memory: ``iter_batches`` keeps at most one batch of frame bytes (plus one decompression
chunk) in memory. For plain files every batch's ``buf`` is a zero-copy view of the mmap;
for compressed files it is a copy of that batch's decompressed bytes.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator

import numpy as np

from gropcap.capture.base import DONE, LIMIT, NEED_MORE, Columns, empty_batch, hexbytes
from gropcap.capture.compress import Source, peek_decompressed, sniff_compression
from gropcap.capture.pcap import PCAP_MAGIC_MODIFIED, PcapScanner, is_pcap_magic
from gropcap.capture.pcapng import PcapngScanner, is_pcapng_magic
from gropcap.capture.records import CaptureInfo, RecordBatch
from gropcap.errors import CaptureError, CaptureTruncatedError

ACCEPTED = ("pcap (magic a1b2c3d4 or a1b23c4d, either byte order) or pcapng "
            "(0a0d0d0a), optionally gzip/zstd/xz/bzip2 compressed")


def sniff_format(first_bytes: bytes) -> str:
    """Name the format of a file from its first bytes.

    Returns "pcap", "pcapng", a compression name ("gzip", "zstd", "xz", "bzip2"), or ""
    when unknown. At least 4 bytes (6 for xz) are needed.

    >>> sniff_format(bytes.fromhex("d4c3b2a1"))
    'pcap'
    """
    if is_pcap_magic(first_bytes):
        return "pcap"
    if is_pcapng_magic(first_bytes):
        return "pcapng"
    return sniff_compression(first_bytes)


def _scanner(path: str, head: bytes, info: CaptureInfo, compression: str, fast: bool):
    if is_pcap_magic(head):
        return PcapScanner(path, info, fast=fast)
    if is_pcapng_magic(head):
        return PcapngScanner(path, info, fast=fast)
    inside = f"{compression}-compressed file does not contain a capture: its decompressed" \
        if compression else "not a pcap or pcapng capture: its"
    if len(head) < 4:
        raise CaptureTruncatedError(
            f"{inside} first bytes are {hexbytes(head)}, too short for a capture header",
            path=path, offset=0, record=0, hint=f"expected {ACCEPTED}")
    hint = f"accepted formats: {ACCEPTED}"
    if int.from_bytes(head[:4], "little") in PCAP_MAGIC_MODIFIED:
        hint = "this is the 'modified pcap' format; convert it with `editcap -F pcap`"
    raise CaptureError(f"{inside} first bytes are {hexbytes(head[:8])}", path=path, offset=0,
                       record=0, hint=hint)


def _snapshot(info: CaptureInfo) -> CaptureInfo:
    return copy.deepcopy(info)


ENGINES = ("fast", "reference")


def _check_engine(engine: str) -> bool:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    return engine == "fast"


def _batches(path: str, batch_records: int | None, max_records: int | None, fast: bool
             ) -> Iterator[tuple[CaptureInfo, RecordBatch]]:
    """Core driver: yields (info snapshot, batch); the last one carries final info."""
    path = os.fspath(path)
    src = Source.open(path)
    info = CaptureInfo(path=path, compression=src.compression)
    try:
        # Enough bytes to recognise the format (streams may need a read or two).
        while len(src.window) < 8 and src.read():
            pass
        head = bytes(src.window[:8])
        scanner = _scanner(path, head, info, src.compression, fast)
        win_base = 0          # file offset of window[0] (decompressed offsets if compressed)
        pos = 0
        lo = 0                # window index where the current batch's bytes start
        total = 0
        cols = Columns()
        pending = None        # hold one batch back so the last yielded has final info
        while True:
            want = (batch_records or (1 << 62)) - len(cols)
            if max_records is not None:
                want = min(want, max_records - total - len(cols))
            if want > 0:
                try:
                    pos, status = scanner.step(src.window, pos, win_base, src.eof, want,
                                               cols)
                except CaptureError:
                    if pending is not None:
                        yield pending       # complete batches before the damage come first
                    raise
            else:
                status = LIMIT
            if status == NEED_MORE:
                # At the end of the stream eof becomes true and the next step reports the
                # clean end or the cut.
                src.read()
                continue
            done = status == DONE or (max_records is not None
                                      and total + len(cols) >= max_records)
            if len(cols) or (done and total == 0 and pending is None):
                buf = _buffer(src, lo, pos)
                batch = cols.to_batch(buf, win_base + lo) if len(cols) else empty_batch()
                total += len(cols)
                info.records = total
                if pending is not None:
                    yield pending
                pending = (_snapshot(info), batch)
                cols = Columns()
            if done:
                break
            src.discard(pos)
            if not src.mapped:
                win_base += pos
                pos = 0
            lo = pos
        if isinstance(scanner, PcapngScanner):
            scanner.finish()
        src.close()
        info.digest = src.digest
        info.warnings.extend(src.warnings)
        info.records = total
        if pending is not None:
            yield _snapshot(info), pending[1]
    finally:
        src.close(drain=False)      # no-op after a complete read; cheap on early exit


def _buffer(src: Source, lo: int, hi: int) -> np.ndarray:
    """The batch's frame bytes: a view of the mmap, or a copy of the stream window."""
    if src.mapped:
        if not len(src.window):
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(src.window, dtype=np.uint8)[lo:hi]
    # One copy; the temporary view is dropped at once so the bytearray can grow again.
    return np.frombuffer(src.window, dtype=np.uint8, count=hi - lo, offset=lo).copy()


def read_capture(path, *, max_records: int | None = None, engine: str = "fast"
                 ) -> tuple[CaptureInfo, RecordBatch]:
    """Read a whole capture file (pcap or pcapng, plain or compressed).

    Parameters: ``path`` of one file; ``max_records`` stops after that many records
    (the digest still covers the whole file); ``engine`` "fast" (numba record scan) or
    "reference" (plain Python, the oracle the fast path is tested against).
    Returns ``(info, batch)``. Raises :class:`~gropcap.errors.CaptureError` for a file
    that is not a capture or is corrupt, :class:`~gropcap.errors.CaptureTruncatedError`
    when it is cut inside its file header; a file cut later keeps its complete records
    and notes the cut in ``info.warnings``.

    >>> info, batch = read_capture("tests/data/x.pcap")   # doctest: +SKIP
    >>> batch.ts_ns[:2], info.linktypes                    # doctest: +SKIP
    """
    if max_records is not None and max_records < 0:
        raise ValueError("max_records must be >= 0")
    out = list(_batches(path, None, max_records, _check_engine(engine)))
    return out[-1]


def iter_batches(path, *, batch_records: int = 65536, engine: str = "fast"
                 ) -> Iterator[tuple[CaptureInfo, RecordBatch]]:
    """Stream a capture in batches of at most ``batch_records`` records.

    Memory stays bounded by one batch. Each yielded ``CaptureInfo`` is a snapshot:
    ``records`` counts records up to and including that batch; the last one yielded is
    complete (final record count, warnings, digest). A file with no records yields one
    empty batch. Errors and ``engine`` as in :func:`read_capture`; when a corrupt record is
    met, every complete batch before it has been yielded before the error is raised.

    >>> for info, batch in iter_batches("big.pcap.zst"):   # doctest: +SKIP
    ...     process(batch)
    """
    if batch_records < 1:
        raise ValueError("batch_records must be >= 1")
    return _batches(path, batch_records, None, _check_engine(engine))


def _looks_like_capture(path: str) -> bool:
    head = peek_decompressed(path, 8)
    return is_pcap_magic(head) or is_pcapng_magic(head)


def expand_inputs(paths) -> list[str]:
    """Files and directories -> ordered list of capture files.

    Files are taken as given (they are validated when read). Directories are walked in
    sorted order (recursively, hidden entries skipped) and contribute the files whose
    content starts like a pcap/pcapng capture, compressed or not, whatever their names.
    A path that does not exist, or a directory without any capture, raises CaptureError.

    >>> expand_inputs(["a.pcap", "captures/"])    # doctest: +SKIP
    ['a.pcap', 'captures/day1/x.pcapng.zst', 'captures/y.cap']
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    f = os.path.join(root, name)
                    if os.path.isfile(f) and _looks_like_capture(f):
                        found.append(f)
            if not found:
                raise CaptureError("directory contains no pcap/pcapng capture files",
                                   path=p, hint=f"expected files in {ACCEPTED}")
            out.extend(found)
        elif os.path.exists(p):
            out.append(p)
        else:
            raise CaptureError("no such file or directory", path=p,
                               hint="check the path")
    return out
