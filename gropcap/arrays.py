"""numpy <-> Arrow conversions that never import pandas.

pyarrow imports pandas (0.2-0.45 s) on its first numpy <-> Arrow conversion through
``pa.array``, ``to_numpy``, ``take(numpy)``, ``Schema.empty_table`` (it asks whether the
object is a pandas one); a run that never uses pandas converts with these instead
(docs/performance.md, "Start-up"); those a summary-only run needs are also done without
``pyarrow.compute`` (``take_rows``, ``dictionary_strings``, ``string_codes``,
``strings_at``: its import is 20-50 ms of a warm run). Same values and types as the
pyarrow calls named.

Layer: 0 (numpy and pyarrow only); decode/, gro/ and run/ use it.
"""

from __future__ import annotations

import mmap
import os
import struct
import weakref

import numpy as np
import pyarrow as pa


# Arrow type -> its numpy dtype for numpy_of's buffer reads (np.bool_ for boolean), or
# None for the types it hands to to_numpy: the pyarrow type tests and to_pandas_dtype
# were most of a call's cost (about 2 800 calls a batch pass of the real capture)
_DTYPES: dict = {}


def pandas_shim_ready() -> None:
    """Initialise pyarrow's pandas shim now, whole: an interrupt during it waits for its
    end (``interrupt.deferred``). pyarrow imports pandas (if installed) the first time a
    Python sequence becomes an Arrow array or an array becomes numpy, and its check
    swallows any exception raised meanwhile (a ``cdef bint`` Cython function): a
    Ctrl-C there was lost and left pandas half-initialised, so the next array failed
    with ``partially initialized module 'pandas' has no attribute
    '_pandas_datetime_CAPI'`` (exit 1 instead of 130; once in about 35 interrupts as a
    Dask run's workers came up). The runs that meet the shim call this first (the Dask
    client, the in-memory run); the bounded-memory run never imports pandas."""
    from gropcap.interrupt import deferred
    with deferred():
        pa.array([])


def _dtype_of(t: pa.DataType):
    try:
        return _DTYPES[t]
    except KeyError:
        pass
    if pa.types.is_boolean(t):
        d = np.dtype(np.bool_)
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        d = np.dtype(t.to_pandas_dtype())
    else:
        d = None
    _DTYPES[t] = d
    return d


def numpy_of(col) -> np.ndarray:
    """``col.combine_chunks().to_numpy(zero_copy_only=False)`` (an Array or a
    ChunkedArray), read from the Arrow buffers for a null-free integer, float or boolean
    column: the same values, dtype and flags (numeric: a read-only view, empty or not,
    so numba compiles one signature; boolean: a new writable array). Other columns go
    through ``to_numpy``."""
    dt = _dtype_of(col.type)
    if dt is not None and len(col) == 0:    # (combine_chunks of no chunk imports pandas)
        if dt == np.bool_:
            return np.zeros(0, np.bool_)
        empty = np.zeros(0, dt)
        empty.flags.writeable = False
        return empty
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if dt is not None and col.null_count == 0:
        n, off = len(col), col.offset
        buf = col.buffers()[1]
        if dt == np.bool_:
            # only the bytes of these rows: the buffer can be a slab far longer than
            # the column (the decoder's batches share one)
            bits = np.frombuffer(buf, np.uint8)[off // 8:(off + n + 7) // 8]
            lo = off % 8
            return np.unpackbits(bits, bitorder="little")[lo:lo + n].view(np.bool_)
        view = np.frombuffer(buf, dt)[off:off + n]
        view.flags.writeable = False        # (a writable buffer gives a writable view)
        return view
    return col.to_numpy(zero_copy_only=False)


def arrow_numeric(a: np.ndarray, t: pa.DataType) -> pa.Array:
    """``pa.array(a, t)`` for a 1-D numpy array: over ``a``'s memory (no copy) when it
    already has ``t``'s width and is contiguous, a bool array packed into Arrow's bits
    (numpy keeps a byte per bool), else through ``pa.array``."""
    if a.ndim == 1 and pa.types.is_boolean(t) and a.dtype == np.bool_:
        bits = np.packbits(a, bitorder="little")
        return pa.Array.from_buffers(t, len(a), [None, pa.py_buffer(bits)])
    if a.ndim == 1 and a.flags.c_contiguous and pa.from_numpy_dtype(a.dtype) == t:
        return pa.Array.from_buffers(t, len(a), [None, pa.py_buffer(a)])
    return pa.array(a, t)


def arrow_of(a: np.ndarray) -> pa.Array:
    """``pa.array(a)`` for a 1-D numeric or bool numpy array (its own Arrow type)."""
    return arrow_numeric(a, pa.from_numpy_dtype(a.dtype))


def arrow_masked(a: np.ndarray, missing: np.ndarray, t: pa.DataType) -> pa.Array:
    """``pa.array(a, t, mask=missing)`` for a 1-D numeric numpy array already of ``t``'s
    width (the values under the mask are set to 0)."""
    nulls = int(np.count_nonzero(missing))
    valid = pa.py_buffer(np.packbits(~missing, bitorder="little")) if nulls else None
    data = np.ascontiguousarray(np.where(missing, 0, a).astype(a.dtype, copy=False)
                                if nulls else a)
    return pa.Array.from_buffers(t, len(a), [valid, pa.py_buffer(data)], nulls)


def arrow_table(cols: dict) -> pa.Table:
    """``pa.table(cols)`` for a dict of 1-D numeric or bool numpy arrays."""
    return pa.table({k: arrow_of(v) for k, v in cols.items()})


# passes over a table that may be larger than memory should hold (a flows table mapped
# from disk) take it in slices of this many rows
SLICE_ROWS = 1 << 19

# the mappings of tables map_ipc_file made, by id(table), while the table lives
_MAPS: dict = {}


def map_ipc_file(path: str, stream: bool = False) -> pa.Table:
    """The tables of an Arrow IPC file (``stream``: the IPC stream format, whose batches
    may each carry their own dictionaries), zero-copy over a read-only mapping of it (the
    file may be unlinked once this returns: the mapping lives as long as the table).
    :func:`slices` drops the mapping's resident pages after each slice."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = pa.BufferReader(pa.py_buffer(mm))
    table = (pa.ipc.open_stream(buf) if stream else pa.ipc.open_file(buf)).read_all()
    _MAPS[id(table)] = mm
    weakref.finalize(table, _MAPS.pop, id(table), None)
    return table


def drop_pages(obj) -> None:
    """Drop this process's resident pages of the mapping under ``obj`` (a table of
    :func:`map_ipc_file`, a ``numpy.memmap`` or a view of one; anything else: nothing):
    the kernel reads them again from the page cache when used, and the process's RSS
    (VmHWM counts a mapped file's resident pages) does not keep them."""
    mm = _MAPS.get(id(obj))
    if mm is None and isinstance(obj, np.ndarray):
        while isinstance(obj, np.ndarray):
            obj = obj.base
        mm = obj
    if isinstance(mm, mmap.mmap):
        mm.madvise(mmap.MADV_DONTNEED)


def is_mapped(table) -> bool:
    """Whether ``table`` is one :func:`map_ipc_file` made."""
    return id(table) in _MAPS


def slices(table: pa.Table, rows: int | None = None):
    """``(first row, record batch)`` over ``table`` in slices of at most ``rows``
    (:data:`SLICE_ROWS`) rows, zero-copy. For a table of :func:`map_ipc_file` this
    process's resident pages of the file are dropped after each slice (the kernel reads
    them again from the page cache when used), so a pass does not leave the whole file
    in the process's RSS (VmHWM counts a mapped file's resident pages)."""
    mm = _MAPS.get(id(table))
    off = 0
    for batch in table.to_batches(max_chunksize=max(rows or SLICE_ROWS, 1)):
        yield off, batch
        off += batch.num_rows
        if mm is not None:
            mm.madvise(mmap.MADV_DONTNEED)


def batch_column(batch: pa.RecordBatch, name: str) -> np.ndarray:
    """:func:`numpy_of` a record batch's column by name."""
    return numpy_of(batch.column(batch.schema.get_field_index(name)))


def arrow_strings(values) -> pa.Array:
    """``pa.array(values, pa.string())`` for a sequence of str (no None)."""
    enc = [v.encode() for v in values]
    offsets = np.zeros(len(enc) + 1, np.int32)
    np.cumsum([len(b) for b in enc], out=offsets[1:])
    return pa.StringArray.from_buffers(len(enc), pa.py_buffer(offsets),
                                       pa.py_buffer(b"".join(enc)))


def arrow_repeated(value: str, n: int) -> pa.Array:
    """``pa.array([value] * n, pa.string())``, its buffers built at once."""
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(b))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(b * n))


def arrow_indices(rows: np.ndarray) -> pa.Array:
    """Row numbers for ``Table.take`` / ``Array.take`` (which would convert a numpy
    argument with ``pa.array``): an int64 Arrow array over the rows' memory."""
    return arrow_numeric(np.ascontiguousarray(rows, dtype=np.int64), pa.int64())


def strings_at(texts: list, idx: np.ndarray) -> pa.Array:
    """``pa.array([texts[i] for i in idx])`` from numpy buffers: no ``pa.array`` (pandas)
    and no ``Array.take`` (``pyarrow.compute``)."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    got = _take_array(arrow_strings(texts), idx)
    return got if got is not None else arrow_strings(texts).take(arrow_indices(idx))


def dictionary_strings(col) -> pa.Array:
    """``col.cast(pa.string())`` of a dictionary-of-strings column (Array or
    ChunkedArray) without ``pyarrow.compute``, for a null-free column; else the cast."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if col.null_count or not chunks:
        return col.cast(pa.string())
    parts = [strings_at(c.dictionary.to_pylist(), numpy_of(c.indices).astype(np.int64))
             for c in chunks]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


STRING_CODES_PYTHON = 8192   # rows coded in Python by string_codes (<= ~3 ms)


def string_codes(arr) -> np.ndarray:
    """int64 codes of a string Array (or dictionary array of strings), equal exactly for
    equal values: ``dictionary_encode().indices``, which imports ``pyarrow.compute``
    (20-50 ms of a warm run); up to :data:`STRING_CODES_PYTHON` rows are coded in Python
    instead (the codes then number the values by first appearance too)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = dictionary_strings(arr)
    if len(arr) <= STRING_CODES_PYTHON:
        seen: dict = {}
        return np.fromiter((seen.setdefault(v, len(seen)) for v in arr.to_pylist()),
                           np.int64, len(arr))
    return numpy_of(arr.dictionary_encode().indices).astype(np.int64)


def _take_array(col, idx: np.ndarray):
    """:func:`take_rows` of one column; None where only ``pyarrow.compute`` can."""
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks != 1 and pa.types.is_dictionary(col.type):
            return None                     # (chunks may carry different dictionaries)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    if col.null_count:
        return None
    if pa.types.is_dictionary(t):
        return pa.DictionaryArray.from_arrays(arrow_numeric(
            numpy_of(col.indices)[idx], t.index_type), col.dictionary)
    if pa.types.is_fixed_size_binary(t):
        w = t.byte_width
        raw = np.frombuffer(col.buffers()[1], np.uint8)[col.offset * w:
                                                         (col.offset + len(col)) * w]
        rows = np.ascontiguousarray(raw.reshape(len(col), w)[idx])
        return pa.Array.from_buffers(t, len(idx), [None, pa.py_buffer(rows)])
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return arrow_numeric(np.ascontiguousarray(numpy_of(col)[idx]), t)
    if pa.types.is_string(t):
        offs = np.frombuffer(col.buffers()[1], np.int32)[col.offset:col.offset + len(col) + 1]
        data = np.frombuffer(col.buffers()[2] or b"", np.uint8)
        lens = (offs[1:] - offs[:-1])[idx]
        new = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=new[1:])
        if new[-1] >= 2 ** 31:
            return None
        at = np.repeat(offs[:-1][idx].astype(np.int64) - new[:-1], lens) + \
            np.arange(new[-1], dtype=np.int64)
        return pa.StringArray.from_buffers(len(idx), pa.py_buffer(new.astype(np.int32)),
                                           pa.py_buffer(np.ascontiguousarray(data[at])))
    return None


def take_rows(table, rows: np.ndarray):
    """``table.take(rows)`` (a Table or a RecordBatch) built from numpy when every column
    is a null-free numeric, boolean, fixed-size binary, string or single-chunk dictionary
    one (flow keys, the flows table); other tables go through ``Table.take``, whose
    ``pyarrow.compute`` import is 20-50 ms of a warm run (docs/performance.md,
    "Start-up")."""
    idx = np.ascontiguousarray(rows, dtype=np.int64)
    cols = []
    for c in table.columns:
        got = _take_array(c, idx)
        if got is None:
            return table.take(arrow_indices(idx))
        cols.append(got)
    kind = pa.RecordBatch if isinstance(table, pa.RecordBatch) else pa.Table
    return kind.from_arrays(cols, schema=table.schema)


class RowFile:
    """One value per row (``dtype``), appended in row order to a file and looked up by
    row number: what a later pass reads of some rows, without keeping the rows. The file
    is mapped again when it has grown and only the looked-up pages are read."""

    def __init__(self, path: str, dtype=np.int64):
        self.path, self.dtype = path, np.dtype(dtype)
        self.f = open(path, "wb", buffering=0)
        self.n = 0
        self._map = None

    def append(self, values: np.ndarray) -> None:
        """The next rows' values."""
        if len(values):
            self.f.write(memoryview(np.ascontiguousarray(values, self.dtype)).cast("B"))
            self.n += len(values)

    def take(self, rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0, self.dtype)
        if self._map is None or len(self._map) < self.n:
            self._map = np.memmap(self.path, self.dtype, mode="r", shape=(self.n,))
        return np.asarray(self._map[np.asarray(rows, np.int64)])

    def close(self) -> None:
        self._map = None
        self.f.close()


class ArraySpill:
    """numpy arrays written one after another to a temporary file and read back in order
    (``put`` several, ``rewind``, ``get`` as many): the bounded-memory run's spills."""

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "w+b")

    # record: dtype string (8 bytes, e.g. b"<i8") and element count, then the raw bytes
    _HEAD = struct.Struct("<8sQ")

    def put(self, *arrays) -> None:
        for a in arrays:
            a = np.ascontiguousarray(a).ravel()
            self.f.write(self._HEAD.pack(a.dtype.str.encode(), len(a)))
            self.f.write(memoryview(a).cast("B"))

    def rewind(self) -> None:
        self.f.flush()
        self.f.seek(0)

    def get(self, k: int) -> list[np.ndarray]:
        out = []
        for _ in range(k):
            code, n = self._HEAD.unpack(self.f.read(self._HEAD.size))
            a = np.empty(n, np.dtype(code.rstrip(b"\0").decode()))
            if n:
                self.f.readinto(memoryview(a).cast("B"))
            out.append(a)
        return out

    @classmethod
    def reopen(cls, path: str) -> "ArraySpill":
        """A spill another process wrote, opened for reading."""
        sp = cls.__new__(cls)
        sp.path = path
        sp.f = open(path, "rb")
        return sp

    def size(self) -> int:
        return os.path.getsize(self.path)

    def close(self) -> None:
        self.f.close()


def sorted_meet(a, b, step: int = SLICE_ROWS) -> bool:
    """Whether sorted arrays ``a`` and ``b`` (mapped or not) share a value, ``a`` read
    ``step`` values at a time; the mapped pages are dropped after each slice."""
    if not len(a) or not len(b) or a[-1] < b[0] or b[-1] < a[0]:
        return False
    for lo in range(0, len(a), step):
        part = np.asarray(a[lo:lo + step])
        at = np.minimum(np.searchsorted(b, part), len(b) - 1)
        hit = np.any(np.asarray(b[at]) == part)
        drop_pages(a)
        drop_pages(b)
        if hit:
            return True
    return False


def write_array(path: str, a: np.ndarray) -> None:
    """``a`` as a ``.npy`` file at ``path`` (under another name, then renamed)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(a))
    os.replace(tmp, path)


def read_array(path: str, dtype=np.int64) -> np.ndarray:
    """The array :func:`write_array` wrote, read-only over a mapping of the file
    (``arrays.drop_pages`` drops its resident pages); no file: an empty array of ``dtype``."""
    if not os.path.exists(path):
        return np.zeros(0, dtype)
    # (open_memmap reads the header and maps the data; it refuses object arrays, so
    # nothing is unpickled)
    return np.lib.format.open_memmap(path, mode="r")
