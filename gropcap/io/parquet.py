"""Parquet output with provenance metadata, written atomically.

Every file carries key-value metadata (``gropcap.version``, ``gropcap.config``,
``gropcap.sources`` with path and digest, ...) so a notebook can tell how it was made.
Files are written to a temporary name in the target directory and renamed, so an
interrupted run never leaves a half-written file; an existing file is only replaced with
``force=True``.
"""

from __future__ import annotations

import base64
import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from gropcap.arrays import is_mapped, slices
from gropcap.errors import OutputError  # noqa: F401  (defined with the other errors)


def required(field: pa.Field) -> bool:
    """Whether gropcap's files declare ``field`` REQUIRED (never null): numbers,
    booleans and times, which gropcap builds from numpy arrays without a mask. Strings
    (address texts, null where the layer is absent) and dictionaries (code names, null
    for a code without one) stay OPTIONAL. A REQUIRED column has no definition levels:
    the real capture's packets table wrote in 0.50 s of CPU against 0.81 s with every
    column OPTIONAL (docs/performance.md, "Session 23")."""
    t = field.type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_temporal(t))


def file_schema(schema: pa.Schema, metadata: dict[str, str]) -> pa.Schema:
    """The schema a file of ``schema``'s columns is written with: :func:`required`
    fields not nullable, ``metadata`` added to the schema's own."""
    meta = dict(schema.metadata or {})
    meta.update({k.encode(): v.encode() for k, v in metadata.items()})
    return pa.schema([f.with_nullable(not required(f)) for f in schema], metadata=meta)


def with_metadata(table: pa.Table, metadata: dict[str, str]) -> pa.Table:
    """``table`` as gropcap writes it (:func:`file_schema`). A null in a
    :func:`required` column raises ``ValueError`` (a bug: nothing is written
    with a null where the schema says there is none)."""
    return table.cast(file_schema(table.schema, metadata))


def as_built(table: pa.Table) -> pa.Table:
    """A table read from a gropcap file with every field nullable again, as the
    in-memory tables are built (``gropcap.load`` gives what ``analyze`` gives)."""
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema],
                                metadata=table.schema.metadata))


# rows a row group of :class:`TableWriter` holds at least (but a file's last): the
# batches of a small ``--batch``, of a Dask partition's end or of a file's end are written
# together, not a row group each (a row group costs the writer about 2 ms whatever its
# rows, and readers a footer entry and a round of reads)
ROW_GROUP_ROWS = 65536


class TableWriter:
    """One Parquet file written a table at a time: :func:`file_schema` of the first
    table's schema and ``metadata``, :func:`parquet_options`; each table is cast to it
    (the tables are built nullable, as every pyarrow table is).

    ``metadata`` None: given to :meth:`close` instead (a file written while the run that
    makes it goes on: its sources' digests and the inferred MTU are known at the end).
    The footer then carries it, with the Arrow schema pyarrow stores there (the
    ``ARROW:schema`` key, which readers take the schema's metadata from) written again
    with it: the file reads back as one written with ``metadata`` from the start.
    Needs pyarrow's ``ParquetWriter.add_key_value_metadata`` (:func:`can_defer`).

    Tables smaller than :data:`ROW_GROUP_ROWS` are held and written together: a row
    group holds at least that many rows, but the file's last.
    """

    def __init__(self, path: str, first: pa.Table, metadata: dict[str, str] | None):
        self._first = first.schema
        self.schema = file_schema(first.schema, metadata or {})
        self._writer = pq.ParquetWriter(path, self.schema, **parquet_options(self.schema))
        self._deferred = metadata is None
        self._held: list[pa.Table] = []
        self._rows = 0

    def write_table(self, table: pa.Table) -> None:
        self._held.append(table.cast(self.schema))
        self._rows += table.num_rows
        if self._rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            self._writer.write_table(pa.concat_tables(self._held))
        self._held, self._rows = [], 0

    def close(self, metadata: dict[str, str] | None = None) -> None:
        self._flush()
        if self._deferred and metadata is not None:
            whole = file_schema(self._first, metadata)
            self._writer.add_key_value_metadata(
                {**metadata, "ARROW:schema": base64.b64encode(whole.serialize().to_pybytes())})
        self._writer.close()


def can_defer() -> bool:
    """Whether this pyarrow lets :class:`TableWriter` take its metadata at
    :meth:`~TableWriter.close` (``ParquetWriter.add_key_value_metadata``)."""
    return hasattr(pq.ParquetWriter, "add_key_value_metadata")


# values the Parquet writer encodes at a time (pyarrow's default: 1024): fewer rounds
# through its per-batch checks; pages still close near ``data_page_size`` (1 MiB), at
# most this many values past it. 0.05 s less of 0.53 s writing the real capture's
# packets table (docs/performance.md, "Writing Parquet")
WRITE_BATCH_SIZE = 65536


# the pages' codec. LZ4 (Parquet's LZ4_RAW): the real capture's packets.parquet writes in
# 146-163 ns a row against 208-214 ns with zstd, for 19.6 MB against 14.8 MB (2.95 M rows,
# 7 bytes a packet against 5; the capture holds 143). zstd's share was mostly making a
# fresh compression context for every page (ZSTD_createCCtx_advanced, perf). Readers:
# pyarrow, DuckDB, polars, Spark 3.4+ (docs/performance.md, "Session 40").
CODEC = "lz4"


def delta_encoded(field: pa.Field) -> bool:
    """Whether :func:`parquet_options` writes ``field`` with ``DELTA_BINARY_PACKED``:
    the 64-bit integer and timestamp columns. In gropcap's tables those are times, row
    and record numbers, flow and super-packet ids: sequences that rise or stay
    near their neighbours, which the delta encoding stores as a few bits a value where
    plain pages hand the codec 8 bytes a value. The narrower columns (ports, sequence
    numbers, lengths, codes) keep plain pages, which the codec compresses faster and as
    small; so do the poll ids (``poll_id``, ``<model>_poll_id``): long runs of one
    value, which plain LZ4 pages write in half the time of the delta encoder (3.1-3.6 ns
    a row against 6.2-6.7 on the real and the synthetic capture)."""
    t = field.type
    if field.name.endswith("poll_id"):
        return False
    return pa.types.is_timestamp(t) or (pa.types.is_integer(t) and t.bit_width == 64)


def parquet_options(schema: pa.Schema) -> dict:
    """The writer options of every Parquet file gropcap writes: LZ4 (:data:`CODEC`);
    dictionary pages only for ``encap``, ``model`` and the dictionary columns (the
    readable ``*_name`` and ``*_text`` ones, which then load back as dictionaries): for
    numeric columns they cost ~35% of
    the write time and made the files larger; ``DELTA_BINARY_PACKED`` for the 64-bit
    columns (:func:`delta_encoded`: a third of the packets table's and super-packets
    table's write time went to them, delta-encoded they take about half as long and
    less space); min/max statistics only for the columns that are not strings, what a
    reader prunes row groups by (times, ids, codes): on the string columns they cost
    ~20% of the write time and prune nothing (every row group holds most names);
    :data:`WRITE_BATCH_SIZE`. Measured on the real capture's and a synthetic capture's
    tables (docs/performance.md, "Writing Parquet")."""
    names = [f.name for f in schema if f.name in ("encap", "model")
             or pa.types.is_dictionary(f.type)]
    return {"compression": CODEC, "use_dictionary": names,
            "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema
                                if f.name not in names and delta_encoded(f)},
            "write_statistics": [f.name for f in schema if f.name not in names
                                 and not pa.types.is_string(f.type)
                                 and not pa.types.is_large_string(f.type)],
            "write_batch_size": WRITE_BATCH_SIZE}


def current_umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_table(table: pa.Table, path: str, metadata: dict[str, str], *,
                force: bool = False) -> str:
    """Write ``table`` to ``path`` as Parquet with ``metadata``; returns the path."""
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise OutputError("output exists", path=path, hint="use --force to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gropcap-", suffix=".parquet.tmp", dir=directory)
        os.close(fd)
        try:
            if is_mapped(table):
                # a table mapped from disk (the runs exchange's flows): by slices, its
                # pages dropped after each (arrays.slices), not the whole file in RSS
                w = TableWriter(tmp, table.slice(0, 0), metadata)
                try:
                    for _, batch in slices(table):
                        w.write_table(pa.Table.from_batches([batch]))
                finally:
                    w.close()
            else:
                t = with_metadata(table, metadata)
                pq.write_table(t, tmp, **parquet_options(t.schema))
            os.chmod(tmp, 0o666 & ~current_umask())   # mkstemp made it 0600
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as e:
        raise OutputError(f"cannot write: {e.strerror or e}", path=path,
                          hint="check free space and permissions") from None
    return path


def read_metadata(path: str) -> dict[str, str]:
    """The gropcap key-value metadata of a Parquet file."""
    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"gropcap.")}


def summary_metadata(summary: dict) -> dict[str, str]:
    """The run's summary as ``flows.parquet`` metadata (``gropcap.summary``): what
    ``gropcap.load`` gives back when ``packets.parquet`` holds the default columns only."""
    import json
    return {"gropcap.summary": json.dumps(summary, sort_keys=True)}


def write_analysis(analysis, out_dir: str, *, force: bool = False,
                   columns="default") -> list[str]:
    """``packets.parquet``, ``superpackets.parquet``, ``flows.parquet`` under ``out_dir``.

    ``columns``: the columns of ``packets.parquet``: ``"default"`` (what people filter on,
    ``io.columns.DEFAULT_PACKET_COLUMNS``, and every model's verdicts), ``"all"`` (every
    column of ``Analysis.packets``) or a list of names (``io.columns.parse_packet_columns``).
    Every target is checked before any is written, so a refused run changes nothing.
    """
    from gropcap.io.columns import parse_packet_columns, select_packet_columns
    spec = parse_packet_columns(columns)
    names = ("packets.parquet", "superpackets.parquet", "flows.parquet")
    paths = [os.path.join(out_dir, n) for n in names]
    if not force:
        for path in paths:
            if os.path.exists(path):
                raise OutputError("output exists", path=path, hint="use --force to replace it")
    meta = analysis.metadata()
    packets = analysis.packets_with_verdicts
    if spec != "all":
        packets = packets.select(select_packet_columns(packets.column_names, spec))
    tables = (packets, analysis.superpackets, analysis.flows)
    metas = (meta, meta, {**meta, **summary_metadata(analysis.summary())})
    return [write_table(t, path, m, force=True) for t, path, m in zip(tables, paths, metas)]
