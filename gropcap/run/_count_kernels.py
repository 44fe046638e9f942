"""numba kernels of the run's accumulators (``run/accumulators.py``, ``run/stream.py``):
one pass over a batch's columns where numpy took a pass per mask, bincount and unique.

Each kernel is the numpy code it replaces, row by row; the accumulators' tests (and the
equality of every entry point's summary with the in-memory run) hold them to it. Codes
they compare against (protocol numbers, statuses, reason codes, flags) are arguments, not
module globals, so a cached kernel never keeps a stale constant from another file
(``gropcap.numba_cache``'s module docstring).

Layer: run (5); imports nothing from the package but numba_cache.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from gropcap import numba_cache

# CaptureCounts: the scalars of one batch (capture_batch's ``scal``)
SC_DATA, SC_WIRE, SC_PRE, SC_PRE_LARGEST, SC_PARTIAL, SC_CUT, SC_SHORT, SC_BIG_TOT = range(8)
N_SCALARS = 8
TOT_BINS = 1 << 16          # IP lengths counted in bins; above: returned row by row
# capture_batch's per-file columns
F_PACKETS, F_BYTES, F_DATA, F_FIRST_TS, F_MAX_TS = range(5)


@njit(cache=True, nogil=True)
def capture_batch(payload_len, wire_len, file_index, ts_ns, status, outer_ver, ip_ver,
                  outer_tot, ip_tot, epb_flags, csum_state, cap_len, l4_proto, codes,
                  no_ts, status_hist, tot_cnt, tot_big, scal):
    """``CaptureCounts.add``'s counts of one batch (``codes``: the EPB TCP segment
    offload flag, CSUM_PARTIAL, STATUS_TRUNCATED). Adds into ``status_hist`` (256),
    ``tot_cnt``/``tot_big`` (frames and largest frame per outermost IP length below
    TOT_BINS, frames neither coalesced nor non-IP) and ``scal`` (SC_*). Returns the
    per-file table (rows: file index, columns: F_*; ``no_ts`` where a file has no row)
    and the rows whose IP length is TOT_BINS or more (counted by the caller)."""
    tso, partial, truncated = codes[0], codes[1], codes[2]
    n = payload_len.shape[0]
    nfiles = 0
    for i in range(n):
        if file_index[i] >= nfiles:
            nfiles = np.int64(file_index[i]) + 1
    files = np.zeros((nfiles, 5), np.int64)
    files[:, F_FIRST_TS] = no_ts
    files[:, F_MAX_TS] = no_ts
    big = np.empty(n, np.int64)
    nbig = 0
    for i in range(n):
        f = file_index[i]
        w = np.int64(wire_len[i])
        ts = ts_ns[i]
        has = payload_len[i] > 0
        files[f, F_PACKETS] += 1
        files[f, F_BYTES] += w
        if has:
            files[f, F_DATA] += 1
            scal[SC_DATA] += 1
        if files[f, F_FIRST_TS] == no_ts:
            files[f, F_FIRST_TS] = ts
        if ts > files[f, F_MAX_TS]:
            files[f, F_MAX_TS] = ts
        scal[SC_WIRE] += w
        st = status[i]
        status_hist[st] += 1
        if outer_ver[i] != 0:
            ver = outer_ver[i]
            tot = np.int64(outer_tot[i])
        else:
            ver = ip_ver[i]
            tot = np.int64(ip_tot[i])
        if (ver == 4 and tot == 0) or (epb_flags[i] & tso) != 0:
            scal[SC_PRE] += 1
            if w > scal[SC_PRE_LARGEST]:
                scal[SC_PRE_LARGEST] = w
        elif ver != 0:
            if tot < TOT_BINS:
                tot_cnt[tot] += 1
                if w > tot_big[tot]:
                    tot_big[tot] = w
            else:
                big[nbig] = i
                nbig += 1
        if csum_state[i] == partial:
            scal[SC_PARTIAL] += 1
        if st == truncated:
            scal[SC_CUT] += 1
        if cap_len[i] < wire_len[i] and l4_proto[i] != 0:
            scal[SC_SHORT] += 1
    scal[SC_BIG_TOT] += nbig
    return files, big[:nbig]


@njit(cache=True, nogil=True)
def flow_causes(fid, seq, payload, proto, reason, tcp, lo, hi, next_seq, total, ahead,
                back):
    """``FlowCauses.add`` row by row: a TCP row (``proto == tcp``) whose reason is in
    ``lo..hi`` (the sequence-break flushes) after an earlier row of its flow is a break,
    ahead or back by the signed 32-bit distance from where that row ended."""
    for i in range(fid.shape[0]):
        f = fid[i]
        s = np.int64(seq[i])
        prev = next_seq[f]
        r = reason[i]
        if proto[i] == tcp and prev >= 0 and r >= lo and r <= hi:
            total[f] += 1
            d = (s - prev + 2147483648) % 4294967296 - 2147483648
            if d > 0:
                ahead[f] += 1
            elif d < 0:
                back[f] += 1
        next_seq[f] = (s + np.int64(payload[i])) & 0xFFFFFFFF


@njit(cache=True, nogil=True)
def first_rows(inst, seen, first):
    """``first[i]``: row ``i`` is the first of its instance (``seen``: instances whose
    first row came earlier, updated)."""
    for i in range(inst.shape[0]):
        k = inst[i]
        if not seen[k]:
            seen[k] = True
            first[i] = True


# cached kernels load without numba's registry refresh (gropcap.numba_cache.light_loads)
numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))
