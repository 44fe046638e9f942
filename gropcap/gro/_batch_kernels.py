"""numba passes over a decoded batch's columns for the run's accumulators
(``run/accumulators.py``: CaptureCounts, FlowCauses, ModelCounts; ``run/stream.py``: the
first rows of each super-packet) and for :meth:`gropcap.gro.coalesced.CoalescedStats.add`: one pass
where numpy took a pass per mask and a sort per histogram.

Each kernel is the numpy code it replaced, row by row (``tests/run/test_count_kernels.py``
and ``tests/gro/test_coalesced_stats.py`` hold them to it). Codes they compare against
(protocol numbers, statuses, reason codes, flags) are arguments, not module globals, so a
cached kernel never keeps a stale constant from another file (``gropcap.numba_cache``).
No kernel hands an array to another function: an array crossing a call is
reference-counted on every call, which cost more than the work (``count_pairs`` took
7x longer with its probe in a helper).

Layer: gro (3); imports nothing from the package but numba_cache.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from gropcap import numba_cache

TOT_BINS = 1 << 16          # IP lengths counted in bins; above: returned row by row


class LengthBins:
    """Frames per IP length (``largest``: and the largest frame of each) as the kernels
    count them: :meth:`bins` are TOT_BINS counters kept from batch to batch, which a
    kernel adds into; a length past them is added with :meth:`add`. A batch neither
    allocates nor scans the 64 Ki bins (four such arrays a batch took about 1 ms of a
    single-pass run's 4 ms of fixed cost per batch). Pickled as its lengths only."""

    def __init__(self, largest: bool = False):
        self.largest = largest
        self.past: dict[int, list[int]] = {}    # length -> [frames, largest]
        self.cnt = self.big = None

    def bins(self):
        """``(frames, largest frame)`` per length below TOT_BINS, to add into (the second
        a one-element array unless ``largest``)."""
        if self.cnt is None:
            self.cnt = np.zeros(TOT_BINS, np.int64)
            self.big = np.zeros(TOT_BINS if self.largest else 1, np.int64)
        return self.cnt, self.big

    def add(self, length: int, frames: int, largest: int = 0) -> None:
        if self.cnt is not None and length < TOT_BINS:
            self.cnt[length] += frames
            if self.largest:
                self.big[length] = max(int(self.big[length]), largest)
            return
        e = self.past.setdefault(length, [0, 0])
        e[0] += frames
        e[1] = max(e[1], largest)

    def items(self) -> list:
        """``(length, [frames, largest])``, ascending."""
        out = dict(self.past)
        if self.cnt is not None:
            u = np.flatnonzero(self.cnt)
            big = self.big[u] if self.largest else np.zeros(len(u), np.int64)
            for k, c, b in zip(u.tolist(), self.cnt[u].tolist(), big.tolist()):
                e = out.setdefault(k, [0, 0])
                out[k] = [e[0] + c, max(e[1], b)]
        return sorted(out.items())

    def frames(self) -> dict[int, int]:
        """``{length: frames}``, ascending."""
        return {k: e[0] for k, e in self.items()}

    def merge(self, later: "LengthBins") -> None:
        for k, (c, b) in later.items():
            self.add(k, c, b)

    def __eq__(self, other) -> bool:
        return isinstance(other, LengthBins) and self.items() == other.items()

    __hash__ = None

    def __repr__(self) -> str:
        return f"LengthBins({dict(self.items())})"

    def __getstate__(self):
        return {"largest": self.largest, "past": {k: list(e) for k, e in self.items()},
                "cnt": None, "big": None}


@njit(cache=True, nogil=True, inline="always")
def _outermost(outer_ver, outer_tot, ver, tot):
    """The outermost IP header's version and length (int64) of one row."""
    if outer_ver != 0:
        return outer_ver, np.int64(outer_tot)
    return ver, np.int64(tot)


# CaptureCounts: the scalars of one batch (capture_batch's ``scal``)
SC_DATA, SC_WIRE, SC_PRE, SC_PRE_LARGEST, SC_PARTIAL, SC_CUT, SC_SHORT, SC_BIG_TOT = range(8)
N_SCALARS = 8
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
        ver, tot = _outermost(outer_ver[i], outer_tot[i], ip_ver[i], ip_tot[i])
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


@njit(cache=True, nogil=True)
def verdict_codes(inst, ipos, first, reason, role_alone, role_head, role_merged, seg,
                  role, reason8):
    """``packets.parquet``'s verdict codes of a batch's rows (``run.stream``): each
    row's super-packet position ``ipos[inst]`` (``-(pos + 1)`` for a super-packet of one
    packet) as ``seg`` (the position) and ``role`` (ALONE; else HEAD for the instance's
    ``first`` row, MERGED), and the reason as uint8."""
    for i in range(inst.shape[0]):
        c = ipos[inst[i]]
        if c < 0:
            seg[i] = -c - 1
            role[i] = role_alone
        else:
            seg[i] = c
            role[i] = role_head if first[i] else role_merged
        reason8[i] = reason[i]


@njit(cache=True, nogil=True)
def code_hist(codes, hist):
    """``hist[c] += 1`` for each uint8 code (``np.bincount(codes, minlength=256)``).
    Four partial histograms taken in turn: a batch's codes repeat (most rows have the
    same end reason), and one counter would make each increment wait for the last."""
    part = np.zeros((4, 256), np.int64)
    n = codes.shape[0]
    i = 0
    while i + 4 <= n:
        part[0, codes[i]] += 1
        part[1, codes[i + 1]] += 1
        part[2, codes[i + 2]] += 1
        part[3, codes[i + 3]] += 1
        i += 4
    while i < n:
        part[0, codes[i]] += 1
        i += 1
    for c in range(256):
        hist[c] += part[0, c] + part[1, c] + part[2, c] + part[3, c]


@njit(cache=True, nogil=True)
def flow_sums(fid, payload, packets, payload_sum):
    """Per flow id, packets and payload bytes (``np.bincount(fid)`` and
    ``np.bincount(fid, weights=payload)``, added to ``packets`` / ``payload_sum``, which
    hold every id)."""
    for i in range(fid.shape[0]):
        f = fid[i]
        packets[f] += 1
        payload_sum[f] += payload[i]


# marks' scalars
MK_HARD, MK_ETH, MK_ZERO_MAC = range(3)
_EMPTY = -1


@njit(cache=True, nogil=True)
def marks(status, l4_proto, payload_len, epb_flags, outer_ver, ip_ver, outer_tot, ip_tot,
          linktype, eth_dst, eth_src, tcp_flags, tcp_mss, codes, scal, other_cnt,
          synd_cnt, flow_id):
    """The masks of ``CoalescedStats.add`` in one pass (``codes``: STATUS_OK, IPPROTO_TCP,
    the EPB TCP segment offload flag, LINKTYPE_ETHERNET, the SYN flag).

    A data row is a TCP row decoded whole with payload; it is "hard" (coalesced whatever
    the MTU) when flagged TSO or its outermost IP length is 0 (IPv4) or 40 (IPv6). Adds
    the hard rows, Ethernet frames and those with both MACs zero into ``scal``; counts
    the outermost IP length of SYNs with data that are not hard (``synd_cnt``) and of the
    IP rows that are not data (``other_cnt``), below TOT_BINS. Returns the rows of SYNs
    with an MSS, of the other data rows, and of the two counts' lengths past the bins,
    then each of those data rows' size key ``(IP length << 20) | min(payload, 2**20 -
    1)`` and, when ``flow_id`` is given (else empty), its pair key ``(flow << 36) |
    size``, which is valid when the last value returned is True (every such flow in
    ``0 .. 2**27 - 1``)."""
    ok, tcp, tso, ether, synflag = codes[0], codes[1], codes[2], codes[3], codes[4]
    n = status.shape[0]
    syn_rows = np.empty(n, np.int64)
    data_rows = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    by_flow = flow_id.shape[0] == n
    pairs = np.empty(n if by_flow else 0, np.int64)
    flows_ok = by_flow
    big_synd = np.empty(n, np.int64)
    big_other = np.empty(n, np.int64)
    ns = nd = nbs = nbo = 0
    for i in range(n):
        v, tot = _outermost(outer_ver[i], outer_tot[i], ip_ver[i], ip_tot[i])
        is_tcp = status[i] == ok and l4_proto[i] == tcp
        data = is_tcp and payload_len[i] != 0
        hard = data and ((epb_flags[i] & tso) != 0 or (v == 4 and tot == 0)
                         or (v == 6 and tot == 40))
        if hard:
            scal[MK_HARD] += 1
        if linktype[i] == ether:
            scal[MK_ETH] += 1
            if eth_dst[i] == 0 and eth_src[i] == 0:
                scal[MK_ZERO_MAC] += 1
        syn = is_tcp and (tcp_flags[i] & synflag) != 0 and tcp_mss[i] != 0
        if syn:
            syn_rows[ns] = i
            ns += 1
        if data and not hard:
            if syn:                      # data on a SYN: coalesced above the MTU, no size
                if tot < TOT_BINS:
                    synd_cnt[tot] += 1
                else:
                    big_synd[nbs] = i
                    nbs += 1
            else:
                data_rows[nd] = i
                size = (tot << 20) | min(np.int64(payload_len[i]), 0xFFFFF)
                sizes[nd] = size
                if by_flow:
                    f = np.int64(flow_id[i])
                    if f < 0 or f >= 1 << 27:
                        flows_ok = False
                    pairs[nd] = (f << 36) | size
                nd += 1
        elif not data and ip_ver[i] != 0:
            if tot < TOT_BINS:
                other_cnt[tot] += 1
            else:
                big_other[nbo] = i
                nbo += 1
    return (syn_rows[:ns], data_rows[:nd], big_synd[:nbs], big_other[:nbo], sizes[:nd],
            pairs[:nd] if by_flow else pairs, flows_ok)


@njit(cache=True, nogil=True)
def count_pairs(pairs):
    """``np.unique(pairs, return_index=True, return_counts=True)`` of non-negative int64
    keys, by hashing instead of sorting: the distinct keys (in first-seen order: the
    caller sorts these few), each one's first index and count. Open addressing, linear
    probing, the table at most half full (grown by rehashing); the probe is written
    inline (an array handed to a function is reference-counted on every call)."""
    n = pairs.shape[0]
    size = 256
    keys = np.full(size, _EMPTY, np.int64)
    pos = np.empty(size, np.int64)          # table slot -> position in the outputs
    out_key = np.empty(n, np.int64)
    out_first = np.empty(n, np.int64)
    out_cnt = np.zeros(n, np.int64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    m = 0
    last, last_pos = np.int64(_EMPTY), 0
    for i in range(n):
        k = pairs[i]
        if k == last:                       # runs of one flow's one size: no probe
            out_cnt[last_pos] += 1
            continue
        if 2 * (m + 1) > size:              # a new key may come: keep it half empty
            size *= 2
            keys = np.full(size, _EMPTY, np.int64)
            pos = np.empty(size, np.int64)
            for p in range(m):
                j = np.int64((np.uint64(out_key[p]) * mul) >> np.uint64(40)) & (size - 1)
                while keys[j] != _EMPTY:
                    j = (j + 1) & (size - 1)
                keys[j] = out_key[p]
                pos[j] = p
        j = np.int64((np.uint64(k) * mul) >> np.uint64(40)) & (size - 1)
        while keys[j] != _EMPTY and keys[j] != k:
            j = (j + 1) & (size - 1)
        if keys[j] == _EMPTY:
            keys[j] = k
            pos[j] = m
            out_key[m] = k
            out_first[m] = i
            m += 1
        last, last_pos = k, pos[j]
        out_cnt[last_pos] += 1
    return out_key[:m], out_first[:m], out_cnt[:m]


@njit(cache=True, nogil=True)
def seg_maxima(count, payload, flow, file, out):
    """``run.accumulators.ModelCounts.add_segs``' sizes of one batch's super-packets:
    into ``out`` the largest ``count``, ``file``, ``file`` of those with payload (-1:
    none) and ``flow`` (the lengths its histograms need, as ``np.bincount`` gives them)."""
    out[0] = out[1] = out[2] = out[3] = -1
    for i in range(count.shape[0]):
        if count[i] > out[0]:
            out[0] = count[i]
        if file[i] > out[1]:
            out[1] = file[i]
        if payload[i] > 0 and file[i] > out[2]:
            out[2] = file[i]
        if flow[i] > out[3]:
            out[3] = flow[i]


@njit(cache=True, nogil=True)
def seg_hists(count, end, payload, flow, file, end_hist, seg_hist, file_segs,
              file_data_segs, flow_segs):
    """``ModelCounts.add_segs``' histograms of one batch in one pass (each long enough:
    :func:`seg_maxima`): super-packets by end reason, by segments, by input file (all,
    and those with payload) and by flow; returns how many carry payload."""
    data = 0
    for i in range(count.shape[0]):
        end_hist[end[i]] += 1
        seg_hist[count[i]] += 1
        file_segs[file[i]] += 1
        flow_segs[flow[i]] += 1
        if payload[i] > 0:
            file_data_segs[file[i]] += 1
            data += 1
    return data


# the counting table's largest load (keys / slots) before it grows (:func:`add_keys`)
LOAD_NUM, LOAD_DEN = 7, 10


@njit(cache=True, nogil=True, inline="always")
def _slot(k, size):
    """The first slot of key ``k`` in a table of ``size`` slots: a 64-bit multiplicative
    mix, its high 32 bits scaled to the size (any size below 2**32, no modulo)."""
    h = np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(((h >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))


@njit(cache=True, nogil=True)
def add_keys(keys, weights, unit, table, counts, used, start):
    """Add ``keys[i]`` (non-negative int64) with ``weights[i]`` (``unit``: 1 each) to
    the counting table ``table``/``counts`` (open addressing, linear probing, ``_EMPTY``
    free) from ``start`` on. Stops before a new key would load it past
    ``LOAD_NUM / LOAD_DEN``: returns ``(i, used)``, the first key not added
    (``len(keys)`` when all were) and the keys in the table; the caller grows it
    (:func:`rehash`) and calls again from ``i``. The probe is inline (an array handed
    to a function is reference-counted on every call)."""
    n = keys.shape[0]
    size = table.shape[0]
    last, last_j = np.int64(_EMPTY), np.int64(0)
    for i in range(start, n):
        k = keys[i]
        w = np.int64(1) if unit else weights[i]
        if k == last:                       # a flow's run of one end reason: no probe
            counts[last_j] += w
            continue
        j = _slot(k, size)
        while table[j] != _EMPTY and table[j] != k:
            j += 1
            if j == size:
                j = 0
        if table[j] == _EMPTY:
            if LOAD_DEN * (used + 1) > LOAD_NUM * size:
                return i, used
            table[j] = k
            used += 1
        counts[j] += w
        last, last_j = k, j
    return n, used


@njit(cache=True, nogil=True)
def rehash(table, counts, new_table, new_counts):
    """Move the keys of one counting table (:func:`add_keys`) into a larger, empty one."""
    size = new_table.shape[0]
    for p in range(table.shape[0]):
        k = table[p]
        if k == _EMPTY:
            continue
        j = _slot(k, size)
        while new_table[j] != _EMPTY:
            j += 1
            if j == size:
                j = 0
        new_table[j] = k
        new_counts[j] = counts[p]


# cached kernels load without numba's registry refresh (gropcap.numba_cache.light_loads)
numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))
