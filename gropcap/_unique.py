"""``np.unique`` of a batch's integer column by hashing instead of sorting.

A batch of 65,536 rows holds a few dozen distinct flows, directions or IP lengths; sorting
the whole column to find them (what ``np.unique`` does) costs ~50 ns a row. Arrow's hash
table (``dictionary_encode``) numbers the distinct values in one pass, and only those few
are sorted, so the results are exactly ``np.unique``'s.

Layer: numpy/pyarrow only; used by the per-batch accumulators (``run/``, ``gso.py``,
``io/columns.py``, ``stream.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# below this many values numpy's sort is as fast as the round trip through Arrow
_SMALL = 4096


def unique(values, *, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False):
    """``np.unique(values, return_index=, return_inverse=, return_counts=)`` for a 1-D
    integer array: the same arrays (sorted distinct values, index of the first occurrence
    of each, the inverse as int64 of ``values``' length, counts).

    >>> unique(np.array([5, 3, 5, 9] * 2000), return_index=True)[1].tolist()
    [1, 0, 3]
    """
    values = np.asarray(values)
    if values.ndim != 1 or len(values) < _SMALL or values.dtype.kind not in "iu":
        out = np.unique(values, return_index=return_index, return_inverse=return_inverse,
                        return_counts=return_counts)
        if return_inverse:
            out = list(out)
            k = 1 + return_index
            out[k] = out[k].ravel()
            out = tuple(out)
        return out
    enc = pa.array(values).dictionary_encode()
    codes = enc.indices.to_numpy()            # numbered by first occurrence
    seen = enc.dictionary.to_numpy()
    order = np.argsort(seen, kind="stable")
    out = [seen[order]]
    if return_index:
        # code k first appears where the running maximum of the codes rises to k
        rises = np.empty(len(codes), np.bool_)
        rises[0] = True
        rises[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
        out.append(np.flatnonzero(rises)[order])
    if return_inverse:
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        out.append(rank[codes])
    if return_counts:
        out.append(np.bincount(codes, minlength=len(seen))[order])
    return tuple(out) if len(out) > 1 else out[0]


__all__ = ["unique"]
