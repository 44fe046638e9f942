"""numba pass for the readable address columns (``io/columns.py``): each row's index
among a batch's distinct IPv4 addresses (a hash table of 32-bit words, where Arrow's
``dictionary_encode`` and the widening of its indices took 7 ns a row): the indices of
``ip_src_text`` and ``ip_dst_text``, dictionary arrays of the distinct texts.

Layer: io (4); imports nothing from the package but numba_cache.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from gropcap import numba_cache

_EMPTY = np.uint32(0xFFFFFFFF)      # (a slot with no word: its word is kept apart)


@njit(cache=True, nogil=True, inline="always")
def _home(w, mask):
    """The first slot of word ``w`` in a table of ``mask + 1`` slots (a multiplicative
    mix, as ``gro._batch_kernels._slot``; not that one: a cached kernel is not compiled
    again when a function it inlines from another file changes, ``gropcap.numba_cache``)."""
    return np.int64((np.uint64(w) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask


@njit(cache=True, nogil=True)
def word_index(words, idx):
    """``idx[i]``: the position of ``words[i]`` among the distinct words in first-
    appearance order; returns those words. Open addressing over a table that doubles
    at half full; consecutive rows mostly repeat a word, so the last one is kept."""
    n = words.shape[0]
    size = 64
    keys = np.full(size, _EMPTY, np.uint32)
    vals = np.zeros(size, np.int64)
    uniq = np.empty(max(n, 1), np.uint32)
    nu = 0
    empty_at = -1           # the position of the word 0xFFFFFFFF, if it came
    last_w = np.uint32(0)
    last_i = -1
    for i in range(n):
        w = words[i]
        if last_i >= 0 and w == last_w:
            idx[i] = last_i
            continue
        if w == _EMPTY:
            if empty_at < 0:
                empty_at = nu
                uniq[nu] = w
                nu += 1
            k = empty_at
        else:
            mask = size - 1
            s = _home(w, mask)
            while keys[s] != _EMPTY and keys[s] != w:
                s = (s + 1) & mask
            if keys[s] == w:
                k = vals[s]
            else:
                keys[s] = w
                vals[s] = nu
                uniq[nu] = w
                k = nu
                nu += 1
                if 2 * nu > size:
                    # double: every word placed again
                    size *= 2
                    mask = size - 1
                    keys2 = np.full(size, _EMPTY, np.uint32)
                    vals2 = np.zeros(size, np.int64)
                    for j in range(keys.shape[0]):
                        if keys[j] != _EMPTY:
                            t = _home(keys[j], mask)
                            while keys2[t] != _EMPTY:
                                t = (t + 1) & mask
                            keys2[t] = keys[j]
                            vals2[t] = vals[j]
                    keys = keys2
                    vals = vals2
        idx[i] = k
        last_w = w
        last_i = k
    return uniq[:nu].copy()


# cached kernels load without numba's registry refresh (gropcap.numba_cache.light_loads)
numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))
