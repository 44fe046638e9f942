"""What an analysis run counts: accumulators that ``add`` batches in capture order and
``merge`` with each other.

One set of accumulators (:class:`Totals`) serves every way a run is computed: the
bounded-memory core adds decoded batches and the engine's partial results as they come;
an in-memory :class:`~gropcap.analysis.Analysis` is added as one batch
(:func:`totals_of_analysis`); the Dask runner merges each decode task's
:class:`CaptureCounts` and each GRO partition's :class:`ModelCounts`.
``report/summary.py`` renders finished totals (the JSON summary, the warnings, the text
report); :meth:`Totals.flows_table` builds the flows table.

* :class:`CaptureCounts`: rows, wire bytes, decode status, rows per encapsulation and per
  input file, the evidence of capture warnings (frames above the MTU, offload-partial
  checksums, headers cut short), UDP tunnels by port;
* :class:`CoalescedCounts`: frames captured already coalesced: their segments, per file
  and for rows with payload, and the gso_sizes inferred (``gso.CoalescedInput`` per
  batch);
* :class:`ModelCounts`: one GRO model: reason and end-reason histograms, super-packets
  (per file, with payload, per flow, per encapsulation), the largest, each flow's end
  reasons;
* :class:`FlowCounts`: per flow (numbered by first appearance), its key row, packets and
  payload bytes.

Merging: counts add; a per-file or per-flow array adds by index (both sides numbered the
same way, as the one-process run numbers them); flow key rows merge in capture order
(:class:`FlowCauses` carries state from batch to batch: add only).

Layer: reads packet columns (decode/) and GRO results (gro/); imports nothing above.
"""

from __future__ import annotations

import ipaddress
import os

import numpy as np
import pyarrow as pa

from gropcap import constants as C
from gropcap.addresses import ipv6_text
from gropcap.arrays import (SLICE_ROWS, arrow_indices, arrow_numeric, arrow_strings,
                            batch_column, dictionary_strings, numpy_of, slices,
                            string_codes, strings_at, take_rows)
from gropcap.gro.reasons import FLUSH_CWR, FLUSH_ZERO_PAYLOAD, reason_name

# UDP tunnels a local socket must own before GRO looks inside (udp_gro_receive ->
# udp_sk(sk)->gro_receive): constants.TUN_* -> the --udp-tunnel kind
UDP_TUNNEL_KINDS = {C.TUN_VXLAN: "vxlan", C.TUN_VXLAN_GPE: "vxlan-gpe",
                    C.TUN_GENEVE: "geneve", C.TUN_FOU: "fou", C.TUN_GUE: "gue"}
FLOW_KEY_COLS = ("encap", "ip_version", "ip_src", "ip_dst", "l4_proto", "sport", "dport",
                 "tun_type", "tun_key", "vlan_tci0", "dsa_port", "file_index")
# CaptureCounts.add's columns, in gro._batch_kernels.capture_batch's order, with their
# schema types (one compiled specialisation whatever array a caller hands in)
_CAPTURE_COLUMNS = (
    ("payload_len", np.uint32), ("wire_len", np.uint32), ("file_index", np.uint16),
    ("ts_ns", np.int64), ("status", np.uint8), ("outer_ip_version", np.uint8),
    ("ip_version", np.uint8), ("outer_ip_tot_len", np.uint32), ("ip_tot_len", np.uint32),
    ("epb_flags", np.uint32), ("l4_csum_state", np.uint8), ("cap_len", np.uint32),
    ("l4_proto", np.uint8))


def udp_tunnel_counts(t) -> dict[tuple[str, int], int]:
    """``{(kind, UDP port): packets}`` of the UDP tunnels decoded in packet table ``t``."""
    out: dict = {}
    udp = numpy_of(t.column("outer_l4_proto")) == C.IPPROTO_UDP
    if not udp.any():               # (no outer UDP: no isin over every row)
        return out
    tun = numpy_of(t.column("tun_type"))
    udp &= np.isin(tun, list(UDP_TUNNEL_KINDS))
    if udp.any():
        port = numpy_of(t.column("outer_dport"))[udp].astype(np.int64)
        pair = tun[udp].astype(np.int64) * 65536 + port
        for key, n in zip(*np.unique(pair, return_counts=True)):
            out[(UDP_TUNNEL_KINDS[int(key) >> 16], int(key) & 0xFFFF)] = int(n)
    return out


def _add_at(acc: np.ndarray, add: np.ndarray) -> np.ndarray:
    """``acc + add`` elementwise, the shorter one padded with zeros."""
    n = max(len(acc), len(add))
    out = np.zeros(n, np.result_type(acc, add))
    out[:len(acc)] += acc
    out[:len(add)] += add
    return out


def _merge_dicts(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def encap_counts(t: pa.Table, mask: np.ndarray) -> dict[str, int]:
    """Rows of ``t`` where ``mask`` counted per ``encap`` string (in first-seen order)."""
    out: dict[str, int] = {}
    if not t.num_rows or not mask.any():
        return out
    col = t.column("encap")
    if pa.types.is_dictionary(col.type):
        # the decoder's dictionaries, per chunk: no string is built per row
        order: dict[str, None] = {}      # names by first row, over every row
        counts: dict[str, int] = {}
        lo = 0
        for chunk in col.chunks:
            n = len(chunk)
            if not n:
                continue
            names = chunk.dictionary.to_pylist()
            m = mask[lo:lo + n]
            if len(names) == 1:        # one encapsulation in the chunk (the usual case)
                order.setdefault(names[0], None)
                got = int(np.count_nonzero(m))
                if got:
                    counts[names[0]] = counts.get(names[0], 0) + got
                lo += n
                continue
            idx = numpy_of(chunk.indices)
            every = np.bincount(idx, minlength=len(names))
            used = np.flatnonzero(every)
            if len(used) == 1:
                first = np.zeros(1, np.int64)
            elif len(used) <= 8:       # a few encapsulations: one scan each, no sort
                first = np.array([int(np.argmax(idx == k)) for k in used.tolist()])
            else:
                used, first = np.unique(idx, return_index=True)
            for k in used[np.argsort(first, kind="stable")].tolist():
                order.setdefault(names[k], None)
            got = every if m.all() else np.bincount(idx[m], minlength=len(names))
            for k in np.flatnonzero(got).tolist():
                counts[names[k]] = counts.get(names[k], 0) + int(got[k])
            lo += n
        return {name: counts[name] for name in order if counts.get(name)}
    enc = col.cast(pa.string()).combine_chunks().dictionary_encode()
    idx = numpy_of(enc.indices).astype(np.int64)[mask]
    names = enc.dictionary.to_pylist()
    for k, c in enumerate(np.bincount(idx, minlength=len(names)).tolist()):
        if c:
            out[names[k]] = out.get(names[k], 0) + c
    return out


def hist_by_name(hist: np.ndarray) -> dict[str, int]:
    """A 256-bin reason histogram keyed by reason name, most frequent first (ties: lower
    code first)."""
    codes = np.nonzero(hist)[0]
    pairs = sorted(((int(hist[c]), int(c)) for c in codes), key=lambda p: (-p[0], p[1]))
    return {reason_name(c): n for n, c in pairs}


class CaptureCounts:
    """Capture-level counts (the summary's ``packets``, ``wire_bytes``, ``status``,
    per-file rows and encapsulations, and the evidence of its warnings)."""

    def __init__(self, verify_checksums: bool = False):
        self.verify = verify_checksums
        self.packets = 0
        self.data_packets = 0     # rows with payload
        self.file_packets = np.zeros(0, np.int64)   # per input file (file_index)
        self.file_bytes = np.zeros(0, np.int64)
        self.file_data = np.zeros(0, np.int64)
        # per input file: its first and latest timestamp (run.receivers.NO_TS: no row),
        # what --captures auto decides receiver runs from
        self.file_first_ts = np.zeros(0, np.int64)
        self.file_max_ts = np.zeros(0, np.int64)
        self.wire_bytes = 0
        self.status = np.zeros(256, np.int64)
        self.encap: dict[str, int] = {}
        self.pre = 0            # frames marked coalesced whatever the MTU
        self.pre_largest = 0
        from gropcap.gro._batch_kernels import LengthBins
        self._lengths = LengthBins(largest=True)  # IP length -> [frames, largest frame]
        self.udp_tunnels: dict = {}   # (kind, port) -> packets (report.receive)
        self.partial = 0
        self.cut = 0
        self.short = 0

    def file_of(self, rows: np.ndarray) -> np.ndarray:
        """Input file of global packet rows (rows are numbered file after file)."""
        return np.searchsorted(np.cumsum(self.file_packets), rows, side="right")

    def add(self, t: pa.Table) -> None:
        from gropcap.decode.schema import CSUM_PARTIAL, STATUS_TRUNCATED
        from gropcap.gro import _batch_kernels as K
        from gropcap.run.receivers import NO_TS

        if not t.num_rows:
            return
        col = lambda name: numpy_of(t.column(name))  # noqa: E731
        self.packets += t.num_rows
        scal = np.zeros(K.N_SCALARS, np.int64)
        cnt, big = self._lengths.bins()
        codes = np.array([C.EPB_FLAG_TCP_SEG_OFFLOAD, CSUM_PARTIAL, STATUS_TRUNCATED],
                         np.int64)
        # one pass over the batch (gro._batch_kernels), the columns in their schema types
        files, big_rows = K.capture_batch(
            *(np.asarray(col(name), dt) for name, dt in _CAPTURE_COLUMNS), codes,
            NO_TS, self.status, cnt, big, scal)
        self.data_packets += int(scal[K.SC_DATA])
        self.file_packets = _add_at(self.file_packets, files[:, K.F_PACKETS])
        self.file_bytes = _add_at(self.file_bytes, files[:, K.F_BYTES])
        self.file_data = _add_at(self.file_data, files[:, K.F_DATA])
        self._merge_times(files[:, K.F_FIRST_TS], files[:, K.F_MAX_TS])
        self.wire_bytes += int(scal[K.SC_WIRE])
        self.encap = _merge_dicts(self.encap, encap_counts(t, np.ones(t.num_rows, np.bool_)))
        if scal[K.SC_PRE]:
            self.pre += int(scal[K.SC_PRE])
            self.pre_largest = max(self.pre_largest, int(scal[K.SC_PRE_LARGEST]))
        # frames above the MTU are counted when it is known (report.summary.warnings):
        # IP lengths counted and maximised by bins kept from batch to batch (np.unique's
        # sort was 3 ms a batch), those past the bins here
        if len(big_rows):        # IPv6 jumbograms: lengths past the bins
            outer = col("outer_ip_version")[big_rows] != 0
            tot = np.where(outer, col("outer_ip_tot_len")[big_rows],
                           col("ip_tot_len")[big_rows]).astype(np.int64)
            wire = col("wire_len")[big_rows].astype(np.int64)
            for k in np.unique(tot).tolist():
                self._tot(k, int(np.count_nonzero(tot == k)), int(wire[tot == k].max()))
        self.udp_tunnels = _merge_dicts(self.udp_tunnels, udp_tunnel_counts(t))
        self.partial += int(scal[K.SC_PARTIAL])
        self.cut += int(scal[K.SC_CUT])
        # counted always (a piece decoded on a Dask worker does not know the option);
        # reported under --verify-checksums (report.summary.warnings_of)
        self.short += int(scal[K.SC_SHORT])

    def _merge_times(self, first: np.ndarray, top: np.ndarray) -> None:
        """Fold in later rows' first and latest timestamps per file."""
        from gropcap.run.receivers import NO_TS
        n = max(len(self.file_first_ts), len(first))
        pad = lambda a: np.concatenate([a, np.full(n - len(a), NO_TS, np.int64)])  # noqa
        mine, theirs = pad(self.file_first_ts), pad(first)
        self.file_first_ts = np.where(mine == NO_TS, theirs, mine)
        self.file_max_ts = np.maximum(pad(self.file_max_ts), pad(top))

    def _tot(self, k: int, frames: int, largest: int) -> None:
        self._lengths.add(k, frames, largest)

    @property
    def tot_hist(self) -> dict[int, list[int]]:
        """``{outermost IP length: [frames, largest frame]}`` of the frames neither
        coalesced nor non-IP, ascending."""
        return dict(self._lengths.items())

    def above_mtu(self, mtu: int) -> tuple[int, int]:
        """``(frames, largest frame)`` already coalesced with this MTU."""
        above = [e for k, e in self.tot_hist.items() if k > mtu]
        n = self.pre + sum(e[0] for e in above)
        return n, (max([self.pre_largest] + [e[1] for e in above]) if n else 0)

    def renumber_file(self, old: int, new: int) -> "CaptureCounts":
        """Counts of rows of one input file, moved from ``file_index`` ``old`` to ``new``
        (an earlier input was left out); returns self."""
        for k in ("file_packets", "file_bytes", "file_data"):
            a = getattr(self, k)
            moved = np.zeros(new + 1, np.int64)
            moved[new] = int(a[old]) if old < len(a) else 0
            setattr(self, k, moved)
        from gropcap.run.receivers import NO_TS
        for k in ("file_first_ts", "file_max_ts"):
            a = getattr(self, k)
            moved = np.full(new + 1, NO_TS, np.int64)
            moved[new] = int(a[old]) if old < len(a) else NO_TS
            setattr(self, k, moved)
        return self

    def merge(self, later: "CaptureCounts") -> "CaptureCounts":
        """Fold in the counts of later rows (or of rows that share no file with these);
        returns self."""
        for k in ("packets", "data_packets", "wire_bytes", "pre", "partial", "cut", "short"):
            setattr(self, k, getattr(self, k) + getattr(later, k))
        for k in ("file_packets", "file_bytes", "file_data"):
            setattr(self, k, _add_at(getattr(self, k), getattr(later, k)))
        self._merge_times(later.file_first_ts, later.file_max_ts)
        self.status = self.status + later.status
        self.encap = _merge_dicts(self.encap, later.encap)
        self.pre_largest = max(self.pre_largest, later.pre_largest)
        self._lengths.merge(later._lengths)
        self.udp_tunnels = _merge_dicts(self.udp_tunnels, later.udp_tunnels)
        return self


class CoalescedCounts:
    """Frames captured already coalesced, per batch's ``gso.CoalescedInput``: segments
    of every row (``segments_in``), of the rows with payload, per file, and the
    coalesced frames and gso_sizes the warning names."""

    def __init__(self):
        self.num = 0            # coalesced frames treated as GSO packets
        self.gso_segs = 0       # segments of those frames
        self.segs_total = 0     # segments of every row
        self.data_segs = 0      # segments of the rows with payload
        self.file_segs = np.zeros(0, np.int64)
        self.file_data_segs = np.zeros(0, np.int64)
        self.sizes_seen: set[int] = set()

    def add(self, t: pa.Table, co) -> None:
        """Rows ``t`` and their ``gso.CoalescedInput``."""
        rows = co.is_gso
        if rows.any():
            self.num += int(np.count_nonzero(rows))
            self.gso_segs += int(co.segs[rows].sum())
            self.sizes_seen.update(np.unique(co.gso_size[rows]).tolist())
        if not t.num_rows:
            return
        segs = co.segs.astype(np.int64)
        self.segs_total += int(segs.sum())
        has = numpy_of(t.column("payload_len")) > 0
        self.data_segs += int(segs[has].sum())
        fidx = numpy_of(t.column("file_index")).astype(np.int64)
        self.file_segs = _add_at(self.file_segs, np.bincount(fidx, segs).astype(np.int64))
        self.file_data_segs = _add_at(self.file_data_segs,
                                      np.bincount(fidx[has], segs[has]).astype(np.int64))

    def merge(self, later: "CoalescedCounts") -> "CoalescedCounts":
        for k in ("num", "gso_segs", "segs_total", "data_segs"):
            setattr(self, k, getattr(self, k) + getattr(later, k))
        self.file_segs = _add_at(self.file_segs, later.file_segs)
        self.file_data_segs = _add_at(self.file_data_segs, later.file_data_segs)
        self.sizes_seen |= later.sizes_seen
        return self


# ModelCounts counts super-packets per (flow, end reason) key in an open-addressing
# table of at least this many slots (grown by half when it would be loaded past 70%:
# gro._batch_kernels.add_keys)
TOP_TABLE_MIN = 1 << 10


def _writable(a, dtype) -> np.ndarray:
    """``a`` as a C-contiguous, writable ``dtype`` array (one compiled specialisation of
    the counting kernels), a copy only when it is not one already."""
    a = np.asarray(a)
    if a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, dtype, order="C")


def _i64(a) -> np.ndarray:
    """:func:`_writable` int64."""
    return _writable(a, np.int64)


def _read_only(a, dtype) -> np.ndarray:
    """``a`` as a C-contiguous, read-only ``dtype`` array (what ``arrays.numpy_of`` gives
    for a column: one compiled specialisation), a copy only when the type differs."""
    a = np.ascontiguousarray(a, dtype)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _at_least(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` padded with zeros to ``n`` values (``a`` itself when long enough)."""
    if len(a) >= n:
        return a
    out = np.zeros(n, np.int64)
    out[:len(a)] = a
    return out


class ModelCounts:
    """One GRO model's counts: per-row reasons, and per super-packet its end reason,
    size, payload, flow and input file (of its first packet)."""

    def __init__(self, model: str):
        self.model = model
        self.reason_hist = np.zeros(256, np.int64)
        self.end_hist = np.zeros(256, np.int64)
        self.nseg = 0
        self.largest = 0
        self.seg_hist = np.zeros(0, np.int64)   # super-packets by segments (--plot)
        self.data_segs = 0      # super-packets with payload
        self.file_segs = np.zeros(0, np.int64)
        self.file_data_segs = np.zeros(0, np.int64)
        self.flow_segs = np.zeros(0, np.int64)
        # per (flow, end reason) key, flow * 256 + reason: super-packets, counted in an
        # open-addressing table (gro._batch_kernels.add_keys); top_keys / top_counts
        # read it sorted
        self._top_drop()
        self.encap: dict[str, int] = {}           # super-packets per encap (first packet)
        # egress totals (``egress.EgressCounts``) when the run accounts for egress
        self.egress = None

    def add_reasons(self, reasons: np.ndarray) -> None:
        """Per-row reason codes (uint8: ``gro.reasons``), counted by
        ``gro._batch_kernels.code_hist`` (a fifth of the time of a ``bincount`` of them
        as int64)."""
        from gropcap.gro._batch_kernels import code_hist
        code_hist(_writable(reasons, np.uint8), self.reason_hist)

    def add_segs(self, *, count, end, payload, flow, file) -> None:
        """Super-packets: segments each, end reason, payload bytes, flow id and the input
        file of the first packet (one pass for the histograms and one over the
        (flow, end reason) keys: ``gro._batch_kernels``)."""
        from gropcap.gro._batch_kernels import seg_hists, seg_maxima
        m = len(count)
        if not m:
            return
        count, end, payload = _i64(count), _i64(end), _i64(payload)
        flow, file = _i64(flow), _i64(file)
        top = np.empty(4, np.int64)
        seg_maxima(count, payload, flow, file, top)
        self.nseg += m
        self.largest = max(self.largest, int(top[0]))
        # the lengths np.bincount would give, as before
        self.seg_hist = _at_least(self.seg_hist, int(top[0]) + 1)
        self.file_segs = _at_least(self.file_segs, int(top[1]) + 1)
        self.file_data_segs = _at_least(self.file_data_segs, int(top[2]) + 1)
        self.flow_segs = _at_least(self.flow_segs, int(top[3]) + 1)
        self.data_segs += seg_hists(count, end, payload, flow, file, self.end_hist,
                                    self.seg_hist, self.file_segs, self.file_data_segs,
                                    self.flow_segs)
        self._top(flow * 256 + end)

    def _top_drop(self) -> None:
        size = max(2, TOP_TABLE_MIN)
        self._top_table = np.full(size, -1, np.int64)
        self._top_cnt = np.zeros(size, np.int64)
        self._top_used = 0
        self._top_sorted = None

    def _top(self, keys: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count ``keys`` (``flow * 256 + end reason``), ``counts`` each (None: one)."""
        from gropcap.gro._batch_kernels import add_keys, rehash
        keys = _i64(keys)
        if not len(keys):
            return
        weights = keys if counts is None else _i64(counts)
        self._top_sorted = None
        i = 0
        while True:
            i, self._top_used = add_keys(keys, weights, counts is None, self._top_table,
                                         self._top_cnt, self._top_used, i)
            if i == len(keys):
                return
            # 1.5 times the slots: at most twice the keys after growing (the keys of a
            # run of 1.5 M flows: 3.3 M a model, 8 M slots with powers of two)
            size = len(self._top_table) * 3 // 2 + 1
            table = np.full(size, -1, np.int64)
            cnt = np.zeros(size, np.int64)
            rehash(self._top_table, self._top_cnt, table, cnt)
            self._top_table, self._top_cnt = table, cnt

    def _sorted_top(self) -> tuple[np.ndarray, np.ndarray]:
        if self._top_sorted is None:
            used = self._top_table >= 0
            keys, cnt = self._top_table[used], self._top_cnt[used]
            order = np.argsort(keys)
            self._top_sorted = (keys[order], cnt[order])
        return self._top_sorted

    @property
    def top_keys(self) -> np.ndarray:
        """Sorted ``flow * 256 + end reason`` keys of the super-packets counted."""
        return self._sorted_top()[0]

    @property
    def top_counts(self) -> np.ndarray:
        """Super-packets per key of :attr:`top_keys`."""
        return self._sorted_top()[1]

    def drop_flows(self) -> None:
        """Forget the per-flow counts (super-packets and end reasons per flow: a Dask
        task's, whose flows-table rows hold them)."""
        self.flow_segs = np.zeros(0, np.int64)
        self._top_drop()

    def add_encap(self, t: pa.Table, first: np.ndarray) -> None:
        """Rows of ``t`` that are a super-packet's first packet (``first`` mask)."""
        self.encap = _merge_dicts(self.encap, encap_counts(t, first))

    def top_reasons(self, n_flows: int) -> pa.Array:
        """Most frequent end reason per flow (ties: the lower code), "" for none: a
        string array made from the codes (``arrays.strings_at``), no Python string per
        flow (1.55 M flows: 0.5 s less of the flows table)."""
        f, r = np.divmod(self.top_keys, 256)
        # per flow, its keys by count (most first), then by code: the first one wins
        order = np.lexsort((r, -self.top_counts, f))
        f, r = f[order], r[order]
        first = np.ones(len(f), bool)
        first[1:] = f[1:] != f[:-1]
        f, r = f[first], r[first]
        keep = f < n_flows
        code = np.full(n_flows, 256, np.int64)          # 256: ""
        code[f[keep]] = r[keep]
        return strings_at([reason_name(c) for c in range(256)] + [""], code)

    def merge(self, later: "ModelCounts") -> "ModelCounts":
        self.reason_hist = self.reason_hist + later.reason_hist
        self.end_hist = self.end_hist + later.end_hist
        self.nseg += later.nseg
        self.largest = max(self.largest, later.largest)
        self.data_segs += later.data_segs
        for k in ("file_segs", "file_data_segs", "flow_segs", "seg_hist"):
            setattr(self, k, _add_at(getattr(self, k), getattr(later, k)))
        self._top(later.top_keys, later.top_counts)
        self.encap = _merge_dicts(self.encap, later.encap)
        if later.egress is not None:
            self.egress = later.egress if self.egress is None else \
                self.egress.merge(later.egress)
        return self


def addr_text(raw: bytes, version: int) -> str:
    """16-byte column value -> printable address."""
    if version == 4:
        return str(ipaddress.IPv4Address(raw[12:16]))
    if version == 6:
        return ipv6_text(raw)
    return ""


ADDR_TEXTS_PYTHON = 4096   # distinct addresses formatted in Python (about 2 us each)


def addr_texts(raw: pa.ChunkedArray, ver: np.ndarray) -> pa.Array:
    """:func:`addr_text` of every row of a 16-byte address column: IPv4 addresses
    formatted by Arrow compute, each distinct other address once (IPv6 by
    ``addresses.ipv6_text``, other versions ""). No Python scalar reaches Arrow compute and no ``pa.array``:
    either imports pandas (``gropcap.arrays``). Up to :data:`ADDR_TEXTS_PYTHON` distinct
    addresses are formatted in Python instead: importing ``pyarrow.compute`` costs more
    than that (20-50 ms, a tenth of a warm run on the sample)."""
    n = len(ver)
    if not n:
        return arrow_strings([])
    buf = np.empty((n, 17), np.uint8)
    buf[:, :16] = np.concatenate([np.frombuffer(c.buffers()[1], np.uint8)[
        c.offset * 16:(c.offset + len(c)) * 16] for c in raw.chunks]).reshape(n, 16)
    buf[:, 16] = ver
    uniq, inv = np.unique(buf.view(np.dtype((np.void, 17))).ravel(), return_inverse=True)
    ub = uniq.view(np.uint8).reshape(len(uniq), 17)
    m = len(uniq)
    if m <= ADDR_TEXTS_PYTHON:
        return strings_at([addr_text(ub[i, :16].tobytes(), int(ub[i, 16]))
                            for i in range(m)], inv.ravel())
    import pyarrow.compute as pc

    from gropcap.io.columns import v4_texts
    text = v4_texts(ub[:, 12:16])
    other = np.flatnonzero(ub[:, 16] != 4)
    if len(other):
        mask = np.zeros(m, np.bool_)
        mask[other] = True
        text = pc.replace_with_mask(text, arrow_numeric(mask, pa.bool_()), arrow_strings(
            [addr_text(ub[i, :16].tobytes(), int(ub[i, 16])) for i in other.tolist()]))
    return text.take(arrow_indices(inv.ravel()))


def flow_key_columns(keys: pa.Table) -> dict:
    """The key columns of the flows table from each flow's first packet (one row a flow)."""
    ver = numpy_of(keys.column("ip_version"))
    return {
        "flow_id": np.arange(keys.num_rows, dtype=np.int64),
        "encap": dictionary_strings(keys.column("encap")),
        "ip_version": keys.column("ip_version"),
        "src": addr_texts(keys.column("ip_src"), ver),
        "dst": addr_texts(keys.column("ip_dst"), ver),
        **{name: keys.column(name) for name in ("l4_proto", "sport", "dport", "tun_type",
                                                "tun_key", "vlan_tci0", "dsa_port",
                                                "file_index")},
    }


def reverse_seen(flows: pa.Table, rows: np.ndarray, among: np.ndarray,
                 keys=("src", "sport", "dst", "dport")) -> np.ndarray:
    """Per flow in ``rows`` (indices into ``flows``): whether a flow in ``among`` has its
    key reversed (source and destination swapped; ``keys`` pairs them as src/sport/dst/
    dport, any other key column compared as is). Vectorised, not a Python set: each key
    column becomes integer codes (``src`` and ``dst`` over one dictionary, so a swapped
    address compares equal), packed into as few int64 words a row as their ranges allow
    (``_packed``), and the rows' words are looked up among the swapped ones
    (``np.isin``; the rows numbered first, ``_row_ids``, when a row needs several
    words). (Not Arrow's hash join: ``Table.join`` imports ``pyarrow.dataset`` and with
    it pandas, 0.2-0.4 s of a warm run.)"""
    rows = np.asarray(rows, np.int64)
    among = np.asarray(among, np.int64)
    out = np.zeros(len(rows), bool)
    if not len(rows) or not len(among):
        return out
    swap = {"src": "dst", "dst": "src", "sport": "dport", "dport": "sport"}
    codes = {}
    for k in keys:
        if k in codes:
            continue
        if k in ("src", "dst"):
            # one dictionary over both address columns
            both = pa.concat_arrays([flows.column("src").combine_chunks(),
                                     flows.column("dst").combine_chunks()])
            ids = string_codes(both)
            codes["src"], codes["dst"] = ids[:flows.num_rows], ids[flows.num_rows:]
            continue
        col = flows.column(k)
        if pa.types.is_integer(col.type):
            codes[k] = numpy_of(col).astype(np.int64)
        else:
            codes[k] = string_codes(col)
    # from 0 (a signed column), and a position's range covers both columns it holds
    # (src and dst, sport and dport)
    low = {k: int(c.min()) for k, c in codes.items()}
    codes = {k: c - min(low[k], low[swap.get(k, k)]) for k, c in codes.items()}
    top = {k: int(c.max()) + 1 for k, c in codes.items()}
    ranges = [max(top[k], top[swap.get(k, k)]) for k in keys]
    left = _packed([codes[k][rows] for k in keys], ranges)
    right = _packed([codes[swap.get(k, k)][among] for k in keys], ranges)
    if left.shape[1] == 1:
        return np.isin(left[:, 0], right[:, 0])
    ids = _row_ids(np.concatenate([left, right]))
    return np.isin(ids[:len(rows)], ids[len(rows):])


def _row_ids(words: np.ndarray) -> np.ndarray:
    """Per row of an ``(n, k)`` int64 array, an id equal exactly for equal rows: a
    lexsort of the columns and a count of the changes (``np.unique(axis=0)`` sorts the
    rows as opaque bytes: 5x slower)."""
    order = np.lexsort(words.T[::-1])
    s = words[order]
    new = np.ones(len(s), np.int64)
    new[1:] = np.any(s[1:] != s[:-1], axis=1)
    ids = np.empty(len(s), np.int64)
    ids[order] = np.cumsum(new)
    return ids


def reverse_count(flows: pa.Table, rows_of, among_of,
                  keys=("src", "sport", "dst", "dport"),
                  limit: int | None = None) -> tuple[int, int, int]:
    """:func:`reverse_seen` over a flows table of any size in bounded memory:
    ``rows_of(batch)`` and ``among_of(batch)`` pick the rows and the candidates of each
    record batch (bool masks). Returns ``(rows, seen, first)``: how many rows were
    picked, how many have their reverse among the candidates, and the first picked
    row that has not (-1: none). Up to ``limit`` (``arrays.SLICE_ROWS``) flows in one
    lookup (the key rows held at a time); more are split
    into ``ceil(flows / limit)`` buckets by a hash of the endpoints that a flow and its
    reverse share, written to temporary files in one pass over slices of ``limit``
    rows, then looked up bucket by bucket (a grace hash join)."""
    import tempfile
    n = flows.num_rows
    limit = max(limit or SLICE_ROWS, 1)
    buckets = -(-n // limit)
    cols = list(dict.fromkeys([*keys, *("src", "dst", "sport", "dport")]))
    out = [0, 0, -1]

    def picked(batch, off):
        r = np.asarray(rows_of(batch), bool)
        a = np.asarray(among_of(batch), bool)
        idx = np.flatnonzero(r | a)
        arrays = [batch.column(batch.schema.get_field_index(k)) for k in cols]
        part = pa.RecordBatch.from_arrays(
            [*arrays, arrow_numeric(np.arange(off, off + batch.num_rows, dtype=np.int64),
                                     pa.int64()), arrow_numeric(r, pa.bool_()),
             arrow_numeric(a, pa.bool_())], names=[*cols, "_id", "_row", "_among"])
        return take_rows(part, idx), idx

    def lookup(sub: pa.Table):
        if not sub.num_rows:
            return
        ids = numpy_of(sub.column("_id"))
        rows = np.flatnonzero(numpy_of(sub.column("_row")))
        hit = reverse_seen(sub, rows, np.flatnonzero(numpy_of(sub.column("_among"))), keys)
        out[0] += len(rows)
        out[1] += int(np.count_nonzero(hit))
        miss = ids[rows[~hit]]
        if len(miss):
            out[2] = int(miss.min()) if out[2] < 0 else min(out[2], int(miss.min()))

    if buckets <= 1:
        lookup(pa.Table.from_batches([picked(b, o)[0] for o, b in slices(flows, limit)]))
        return tuple(out)
    with tempfile.TemporaryDirectory(prefix="gropcap-flows-") as d:
        sinks, writers = {}, {}
        try:
            for o, batch in slices(flows, limit):
                part, idx = picked(batch, o)
                bucket = _endpoint_bucket(batch, buckets)[idx]
                order = np.argsort(bucket, kind="stable")
                edges = np.flatnonzero(np.diff(bucket[order])) + 1
                for sel in np.split(order, edges):
                    if not len(sel):
                        continue
                    b = int(bucket[sel[0]])
                    chunk = take_rows(part, sel)
                    if b not in writers:
                        sinks[b] = pa.OSFile(os.path.join(d, f"{b}.arrow"), "wb")
                        writers[b] = pa.ipc.new_file(sinks[b], chunk.schema)
                    writers[b].write_batch(chunk)
        finally:
            for b in writers:
                writers[b].close()
                sinks[b].close()
        for b in sorted(writers):
            with pa.OSFile(os.path.join(d, f"{b}.arrow")) as f:
                lookup(pa.ipc.open_file(f).read_all())
    return tuple(out)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 (wrapping)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _text_hash(a: pa.Array) -> np.ndarray:
    """A uint64 per string of a string array (equal strings, equal hashes): the sum of
    its bytes times powers of an odd constant by position, plus its length."""
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    n = len(a)
    offs = np.frombuffer(a.buffers()[1], np.int32, count=n + 1,
                         offset=4 * a.offset).astype(np.int64)
    lo, hi = int(offs[0]), int(offs[-1])
    data = a.buffers()[2]
    seg = np.frombuffer(data, np.uint8)[lo:hi].astype(np.uint64) if data is not None and \
        hi > lo else np.zeros(0, np.uint64)
    lengths = np.diff(offs)
    pos = np.arange(hi - lo) - np.repeat(offs[:-1] - lo, lengths)
    powers = np.cumprod(np.full(int(lengths.max(initial=0)) + 1, 0x100000001B3, np.uint64))
    sums = np.zeros(hi - lo + 1, np.uint64)
    np.cumsum(seg * powers[pos], out=sums[1:])
    return sums[offs[1:] - lo] - sums[offs[:-1] - lo] + lengths.astype(np.uint64)


def _endpoint_bucket(batch, buckets: int) -> np.ndarray:
    """Per flow of a record batch of the flows table, its bucket of ``buckets``: a
    hash of its two endpoints (address, port) that does not change when they swap."""
    ends = []
    for addr, port in (("src", "sport"), ("dst", "dport")):
        p = batch_column(batch, port).astype(np.uint64)
        ends.append(_mix(_text_hash(batch.column(batch.schema.get_field_index(addr)))
                         ^ _mix(p)))
    return ((ends[0] + ends[1]) % np.uint64(buckets)).astype(np.int64)


def _packed(cols: list, ranges: list) -> np.ndarray:
    """Non-negative integer key columns packed into as few int64 words per row as the
    columns' ``ranges`` (every value below its range, the same ranges for both sides of
    a lookup) allow, mixed radix: an ``(n, words)`` array whose rows are equal exactly
    when the key rows are."""
    words, word, span = [], None, 1
    for c, r in zip(cols, ranges):
        if word is not None and span * r < 2 ** 62:
            word, span = word * r + c, span * r
        else:
            if word is not None:
                words.append(word)
            word, span = c.astype(np.int64), r
    words.append(word)
    return np.stack(words, axis=1)


class FlowCounts:
    """Per flow (ids numbered by first appearance over the whole run): its key row (the
    first packet's key columns), packets and payload bytes."""

    def __init__(self):
        self.key_parts: list[pa.Table] = []     # key rows, first seen here ...
        self.key_ids: list[np.ndarray] = []     # ... and their flow ids
        self.n_flows = 0
        self.packets = np.zeros(0, np.int64)
        self.payload = np.zeros(0, np.float64)

    def add(self, t: pa.Table, flow_id: np.ndarray) -> None:
        """Rows ``t`` (after every row added so far) and their flow ids."""
        from gropcap.gro._batch_kernels import flow_sums
        fid = _i64(flow_id)
        if not len(fid):
            return
        top = int(fid.max()) + 1
        if int(fid.min()) < 0:
            raise ValueError("negative flow id")        # (the kernel does not check)
        if top > len(self.packets):
            self.packets = _add_at(self.packets, np.zeros(top, np.int64))
            self.payload = _add_at(self.payload, np.zeros(top, np.float64))
        # one pass (gro._batch_kernels): two bincounts and the conversions took 6x longer
        flow_sums(fid, _read_only(numpy_of(t.column("payload_len")), np.uint32),
                  self.packets, self.payload)
        if top > self.n_flows:
            new = np.nonzero(fid >= self.n_flows)[0]
            ids, first = np.unique(fid[new], return_index=True)
            self.key_parts.append(take_rows(t.select(FLOW_KEY_COLS), new[first]))
            self.key_ids.append(ids)
            self.n_flows = top

    def merge(self, later: "FlowCounts") -> "FlowCounts":
        """Fold in the counts of the rows after these (flow ids numbered over the whole
        run, so a later piece's new flows are the ids from ``n_flows`` on)."""
        self.packets = _add_at(self.packets, later.packets)
        self.payload = _add_at(self.payload, later.payload)
        for keys, ids in zip(later.key_parts, later.key_ids):
            pick = np.flatnonzero(ids >= self.n_flows)
            if len(pick):
                self.key_parts.append(take_rows(keys, pick))
                self.key_ids.append(ids[pick])
        self.n_flows = max(self.n_flows, later.n_flows)
        return self

    def table(self, models: dict[str, ModelCounts]) -> pa.Table:
        """The flows table: one row per flow: keys, packets, payload bytes, and per model
        super-packets, ratio and most frequent end reason."""
        from gropcap.decode.schema import empty_packet_table
        keys = pa.concat_tables(self.key_parts) if self.key_parts else \
            empty_packet_table().select(FLOW_KEY_COLS)
        if len(self.key_parts) > 1:
            ids = np.concatenate(self.key_ids)
            if np.any(np.diff(ids) < 0):
                keys = take_rows(keys, np.argsort(ids, kind="stable"))
        n_flows = keys.num_rows
        pk = np.zeros(n_flows, np.int64)
        pk[:min(n_flows, len(self.packets))] = self.packets[:n_flows]
        pay = np.zeros(n_flows, np.float64)
        pay[:min(n_flows, len(self.payload))] = self.payload[:n_flows]
        cols = {**flow_key_columns(keys), "packets": pk, "payload_bytes": pay.astype(np.int64)}
        for model, mc in models.items():
            segs = np.zeros(n_flows, np.int64)
            k = min(n_flows, len(mc.flow_segs))
            segs[:k] = mc.flow_segs[:k]
            cols[f"{model}_superpackets"] = segs
            cols[f"{model}_ratio"] = flow_ratio(pk, segs)
            cols[f"{model}_top_reason"] = mc.top_reasons(n_flows)
        return pa.table({k: arrow_numeric(v, pa.from_numpy_dtype(v.dtype))
                         if isinstance(v, np.ndarray) else v for k, v in cols.items()})


def flow_ratio(packets: np.ndarray, segs: np.ndarray) -> np.ndarray:
    """The flows table's ``<model>_ratio``: packets per super-packet, 0 for a flow
    without one."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(segs > 0, packets / np.maximum(segs, 1), 0.0)


def cause_text(ahead: int, back: int, total: int) -> str:
    """The probable cause of a flow's breaks (``report.explain.flow_causes``) from how
    many of its ``total`` sequence breaks jumped ahead and how many back."""
    if not ahead and not back:
        return ""
    if ahead >= back:
        return f"loss or reordering at {ahead} of {total} breaks"
    return f"retransmission at {back} of {total} breaks"


class FlowCauses:
    """Accumulator of ``report.explain.flow_causes`` over batches in capture order (the
    streamed run adds one batch at a time); the expected next sequence number of each
    flow is carried from one batch to the next, so it adds batches in order and has no
    ``merge``."""

    def __init__(self):
        self.next_seq = np.full(0, -1, np.int64)   # per flow: seq + payload of its last packet
        self.total = np.zeros(0, np.int64)
        self.ahead = np.zeros(0, np.int64)
        self.back = np.zeros(0, np.int64)

    def _grow(self, n: int) -> None:
        if n > len(self.next_seq):
            pad = n - len(self.next_seq)
            self.next_seq = np.concatenate([self.next_seq, np.full(pad, -1, np.int64)])
            for k in ("total", "ahead", "back"):
                setattr(self, k, np.concatenate([getattr(self, k), np.zeros(pad, np.int64)]))

    def add(self, flow_id, tcp_seq, payload_len, l4_proto, reason) -> None:
        """One batch: per packet its flow, TCP sequence number, payload, protocol and
        reason code (primary model)."""
        from gropcap.gro._batch_kernels import flow_causes
        fid = np.asarray(flow_id, np.int64)
        if not len(fid):
            return
        self._grow(int(fid.max()) + 1)
        # row by row in row order (gro._batch_kernels), each flow's next sequence number
        # carried from its previous row, in this batch or an earlier one
        flow_causes(fid, np.asarray(tcp_seq, np.uint32), np.asarray(payload_len, np.uint32),
                    np.asarray(l4_proto, np.uint8), np.asarray(reason, np.int64),
                    C.IPPROTO_TCP, FLUSH_CWR, FLUSH_ZERO_PAYLOAD, self.next_seq, self.total,
                    self.ahead, self.back)

    def result(self, n_flows: int) -> list[str]:
        """One string per flow (see ``report.explain.flow_causes``)."""
        self._grow(n_flows)
        return [cause_text(a, b, n) for a, b, n in zip(
            self.ahead[:n_flows].tolist(), self.back[:n_flows].tolist(),
            self.total[:n_flows].tolist())]


def flow_causes_of(analysis, model: str | None = None) -> list[str]:
    """``report.explain.flow_causes`` of an in-memory analysis (its whole table as one
    batch): per flow of ``model`` (the primary one when None), the probable cause of its
    breaks."""
    model = model or analysis.primary_model
    res = analysis.results[model]
    t = analysis.decoded
    n_flows = int(res.flow_id.max()) + 1 if len(res.flow_id) else 0
    acc = FlowCauses()
    if n_flows:
        acc.add(res.flow_id, t.column("tcp_seq").to_numpy(), t.column("payload_len").to_numpy(),
                t.column("l4_proto").to_numpy(), res.reason)
    return acc.result(n_flows)


class SealedTables:
    """``run.spill.Spill``'s interface over tables kept in memory (concatenated once)."""

    def __init__(self):
        self.num_rows = 0
        self._parts: list = []

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self._parts.append(table)
            self.num_rows += table.num_rows

    def table(self, empty: pa.Table) -> pa.Table:
        if len(self._parts) != 1:
            self._parts = [pa.concat_tables(self._parts)] if self._parts else []
        return self._parts[0] if self._parts else empty


class Totals:
    """Every accumulator of one run: ``capture``, ``coalesced`` (None: no frame was
    captured already coalesced), ``models`` (``{model: ModelCounts}``) and ``flows``.
    ``egress``: ``(run.options.EgressOptions, kernel version)`` to count egress per model
    (``ModelCounts.egress``)."""

    def __init__(self, models, verify_checksums: bool = False, spill=None, egress=None):
        self.capture = CaptureCounts(verify_checksums)
        self.coalesced: CoalescedCounts | None = None
        self.models = {m: ModelCounts(m) for m in models}
        if egress is not None:      # (egress options, kernel version)
            from gropcap.egress import EgressCounts
            for mc in self.models.values():
                mc.egress = EgressCounts.of(*egress)
        self.flows = FlowCounts()
        self._flows_table = None
        # final flows-table rows (``add_flow_rows``): on disk (a ``run.spill.Spill``) or
        # in memory
        self._sealed = spill if spill is not None else SealedTables()

    @property
    def sealed_flows(self) -> int:
        """Flows added as final rows so far (``add_flow_rows``)."""
        return self._sealed.num_rows

    def flows_table(self) -> pa.Table:
        if self._flows_table is None:
            self._flows_table = self._sealed.table(self.flows.table(self.models)) \
                if self._sealed.num_rows else self.flows.table(self.models)
        return self._flows_table

    def add_flow_rows(self, table: pa.Table) -> None:
        """Append flows-table rows that are final (the next flows, numbered on from those
        before: a receiver run's flows never span runs, and a partition's are its own),
        kept as table rows (on disk with a spill), not as per-flow accumulators (the Dask
        runner's client, ``run.spill``)."""
        if self.flows.n_flows:
            raise ValueError("final flows follow final flows only")
        self._sealed.add(table)
        self._flows_table = None

    def merge(self, later: "Totals") -> "Totals":
        """Fold in the totals of the rows after these (same flow numbering)."""
        self.capture.merge(later.capture)
        if later.coalesced is not None:
            self.coalesced = later.coalesced if self.coalesced is None else \
                self.coalesced.merge(later.coalesced)
        for m, mc in later.models.items():
            self.models[m] = self.models[m].merge(mc) if m in self.models else mc
        self.flows.merge(later.flows)
        self._flows_table = None
        return self


def model_counts(model: str, table: pa.Table, file_index: np.ndarray, *, reasons, count,
                 end, payload, flow, first) -> ModelCounts:
    """One model's counts over rows of ``table`` (global rows): per-row ``reasons`` and,
    per super-packet, segments, end reason, payload bytes, flow id and first row."""
    mc = ModelCounts(model)
    mc.add_reasons(reasons)
    first = np.asarray(first, np.int64)
    mc.add_segs(count=count, end=end, payload=payload, flow=flow, file=file_index[first])
    mask = np.zeros(table.num_rows, np.bool_)
    mask[first] = True
    mc.add_encap(table, mask)
    return mc


def file_index_of(table: pa.Table) -> np.ndarray:
    return numpy_of(table.column("file_index")).astype(np.int64) if table.num_rows else \
        np.zeros(0, np.int64)


def totals_of_analysis(analysis, capture: CaptureCounts | None = None,
                       models: dict | None = None) -> Totals:
    """The totals of an in-memory analysis (its whole table as one batch): the decoded
    rows, its ``coalesced`` input and each model's ``GroResult``. ``capture``, ``models``:
    counts already merged from pieces or partitions (the Dask runner), used as given."""
    t = analysis.decoded
    tot = Totals(analysis.results, analysis.config.verify_checksums)
    if capture is not None:
        capture.verify = tot.capture.verify
        tot.capture = capture
    else:
        tot.capture.add(t)
    co = getattr(analysis, "coalesced", None)
    if co is not None and co.num_coalesced:
        tot.coalesced = CoalescedCounts()
        tot.coalesced.add(t, co)
    fidx = file_index_of(t)
    for m, r in analysis.results.items():
        if models and m in models:
            tot.models[m] = models[m]
            continue
        tot.models[m] = model_counts(m, t, fidx, reasons=r.reason, count=r.seg_count,
                                     end=r.seg_end_reason, payload=r.seg_payload_len,
                                     flow=r.seg_flow_id, first=r.seg_first_packet)
    if analysis.results:
        tot.flows.add(t, next(iter(analysis.results.values())).flow_id)
    return tot


__all__ = ["UDP_TUNNEL_KINDS", "udp_tunnel_counts", "FlowCauses", "flow_causes_of", "Totals", "CaptureCounts",
           "CoalescedCounts", "ModelCounts", "FlowCounts", "totals_of_analysis",
           "model_counts", "file_index_of", "encap_counts", "hist_by_name",
           "flow_key_columns", "addr_text", "addr_texts", "reverse_seen", "reverse_count",
           "cause_text", "FLOW_KEY_COLS"]
