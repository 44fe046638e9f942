"""Inputs: paths -> capture files -> decoded batches, the one loop every entry point runs.

Layer: calls capture/ (record batches) and decode/ (packet columns); hands decoded
``pa.RecordBatch`` es (:data:`gropcap.decode.schema.PACKET_SCHEMA`) to the core.
"""

from __future__ import annotations

from gropcap.run.options import check_decoder


def input_files(paths) -> list[str]:
    """A path or a list of files/directories -> the capture files, directories expanded
    in sorted order (``capture.expand_inputs``)."""
    from gropcap.capture import expand_inputs
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    return expand_inputs([str(p) for p in paths])


# how much larger than its file a compressed capture is assumed to be (a small-run guess)
COMPRESSED_RATIO = 10


def capture_bytes(paths) -> int:
    """The inputs' size once decompressed, as a guess before reading them: the file sizes,
    a compressed file (by its first bytes) counted :data:`COMPRESSED_RATIO` times. -1 when a
    file cannot be read (the run reports it)."""
    import os

    from gropcap.capture.compress import sniff_compression
    total = 0
    try:
        for path in input_files(paths):
            with open(path, "rb") as f:
                head = f.read(6)
            total += os.path.getsize(path) * (COMPRESSED_RATIO if sniff_compression(head)
                                              else 1)
    except (OSError, ValueError):
        return -1
    return total


def record_batches(decoder: str = "fast", batch_records: int | None = None,
                   digest: bool = True):
    """``(batches_of, decode_batch)`` of a decoder: ``"fast"`` (numba scan over a
    windowed memory map, numba decode) or ``"reference"`` (plain-Python reader and
    decoder); ``batches_of(path)`` yields ``(CaptureInfo, RecordBatch)``; ``digest``
    False: the fast scan leaves a plain file's ``CaptureInfo.digest`` empty."""
    check_decoder(decoder)
    if decoder == "fast":
        from gropcap.capture.scan import BATCH_RECORDS, iter_scan_batches
        from gropcap.decode.fast import decode_batch

        def batches_of(path):
            return iter_scan_batches(path, batch_records=batch_records or BATCH_RECORDS,
                                     digest=digest)
    else:
        from gropcap.capture import iter_batches
        from gropcap.decode.reference import decode_batch

        def batches_of(path):
            if batch_records:
                return iter_batches(path, engine="reference", batch_records=batch_records)
            return iter_batches(path, engine="reference")
    return batches_of, decode_batch


def decode_file(path: str, file_index: int, options, *, decoder: str = "fast",
                batch_records: int | None = None, progress=None, digest: bool = True,
                decode=None, scan_ahead: bool = False):
    """Decode one capture file batch by batch: yields ``pa.RecordBatch`` es with
    ``file_index`` set; the generator's return value is the file's ``CaptureInfo``
    (``info = yield from decode_file(...)``); ``digest`` as :func:`record_batches`.
    ``decode``: what takes each batch of records instead of the decoder (called as
    ``decode_batch``; yields what it returns: ``run.single.SinglePass.records``).
    ``scan_ahead``: the record scan runs ahead in a thread of its own
    (``run.threads.Ahead``: a two-thread single pass, whose pass is the longest stage).

    Raises:
        DecodeError: no frame of the file has a link type gropcap decodes
            (``decode.support``); files where only some have one get a warning instead.
    """
    from gropcap.decode.support import LinktypeCheck
    batches_of, decode_batch = record_batches(decoder, batch_records, digest)
    decode_batch = decode or decode_batch
    info = None
    linktypes = LinktypeCheck()
    records = batches_of(path)
    if scan_ahead:
        from gropcap.run.threads import Ahead
        records = Ahead(records, name="gropcap-scan")
    try:
        for info, batch in records:
            if progress is not None:
                progress.batch(path, info, batch)
            if len(batch):
                linktypes.add(batch)
                yield decode_batch(batch, options, file_index=file_index)
    finally:
        if scan_ahead:
            records.close()
    linktypes.finish(info)
    return info


def drain(gen, out: list):
    """Append everything ``gen`` yields to ``out``; return the generator's return value."""
    try:
        while True:
            out.append(next(gen))
    except StopIteration as stop:
        return stop.value


def decode_table(path: str, file_index: int, options, *, decoder: str = "fast",
                 batch_records: int | None = None, progress=None):
    """One file decoded into one table: ``(table, CaptureInfo)``."""
    import pyarrow as pa

    from gropcap.decode.schema import PACKET_SCHEMA
    batches: list = []
    info = drain(decode_file(path, file_index, options, decoder=decoder,
                             batch_records=batch_records, progress=progress), batches)
    table = pa.Table.from_batches(batches, schema=PACKET_SCHEMA) if batches \
        else PACKET_SCHEMA.empty_table()
    return table, info


def first_times_rise(files) -> bool:
    """Whether each file's first timestamp is later than the one before (a rotated
    capture can be one receiver run; copies of one capture start at the same time).
    Reads the first records of each file, unhashed (``iter_batches`` would hash a plain
    file whole on open: the client of the 100 GB run read all 40 files, and its RSS
    peaked at 5 GB of mapped pages); an unreadable file answers False (the run reports
    it)."""
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.errors import GropcapError
    last = None
    for f in files:
        try:
            gen = iter_scan_batches(f, batch_records=1, window_bytes=1 << 16, digest=False)
            _, batch = next(gen)
            gen.close()
        except (GropcapError, OSError, StopIteration):
            return False
        if not len(batch.ts_ns):
            continue
        t = int(batch.ts_ns[0])
        if last is not None and t <= last:
            return False
        last = t
    return True

__all__ = ["input_files", "record_batches", "decode_file", "decode_table", "drain"]
