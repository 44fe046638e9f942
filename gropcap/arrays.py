"""numpy <-> Arrow conversions that never import pandas.

pyarrow imports pandas (0.2-0.45 s) on its first numpy <-> Arrow conversion through
``pa.array``, ``to_numpy``, ``take(numpy)``, ``Schema.empty_table`` (it asks whether the
object is a pandas one); a run that never uses pandas converts with these instead
(docs/performance.md, "Start-up"). Same values and types as the pyarrow calls named.

Layer: 0 (numpy and pyarrow only); decode/, gro/ and run/ use it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def numpy_of(col) -> np.ndarray:
    """``col.combine_chunks().to_numpy(zero_copy_only=False)`` (an Array or a
    ChunkedArray), read from the Arrow buffers for a null-free integer, float or boolean
    column: the same values, dtype and flags (numeric: a read-only view, empty or not,
    so numba compiles one signature; boolean: a new writable array). Other columns go
    through ``to_numpy``."""
    t = col.type
    simple = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if simple and len(col) == 0:            # (combine_chunks of no chunk imports pandas)
        if pa.types.is_boolean(t):
            return np.zeros(0, np.bool_)
        empty = np.zeros(0, t.to_pandas_dtype())
        empty.flags.writeable = False
        return empty
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if simple and col.null_count == 0:
        n, off = len(col), col.offset
        buf = col.buffers()[1]
        if pa.types.is_boolean(t):
            bits = np.frombuffer(buf, np.uint8)
            return np.unpackbits(bits, bitorder="little")[off:off + n].view(np.bool_)
        view = np.frombuffer(buf, t.to_pandas_dtype())[off:off + n]
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


def arrow_indices(rows: np.ndarray) -> pa.Array:
    """Row numbers for ``Table.take`` / ``Array.take`` (which would convert a numpy
    argument with ``pa.array``): an int64 Arrow array over the rows' memory."""
    return arrow_numeric(np.ascontiguousarray(rows, dtype=np.int64), pa.int64())
