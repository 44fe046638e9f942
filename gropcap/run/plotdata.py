"""What ``--plot`` draws, from either way of running: :class:`PlotData`.

``report.plots`` draws a :class:`PlotData`; this module builds one from an in-memory
:class:`Analysis` (:func:`plot_data_of`) or from a bounded-memory run's finished
accumulators (:class:`PlotRows` and :func:`plot_data`), through the same functions, so
both ways draw the same figure:

- segments per super-packet: a histogram per model (``ModelCounts.seg_hist`` in a
  bounded-memory run, ``np.bincount`` of ``GroResult.seg_count`` in memory);
- the aggregation ratio over time: packets and super-packets (by their first packet) in
  time bins from each file's first packet (:func:`time_series`). The bin width needs the
  whole capture's time span and packet count, so a bounded-memory run keeps each row's
  timestamp and file index (16 bytes a packet and a super-packet per model) in a
  temporary file (:class:`PlotRows`) and bins them at the end, a batch at a time;
- the end reasons of the busiest flows: the flows table and, per model, the super-packets
  per (flow, end reason) key, ``flow * 256 + reason`` (``ModelCounts.top_keys``).

Layer: run (numpy and pyarrow; ``report.plots`` imports it).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from gropcap.arrays import ArraySpill, numpy_of


@dataclasses.dataclass
class TimeSeries:
    """Packets and super-packets per time bin (``width`` ns, from each file's first
    packet); ``superpackets[model]`` counts the super-packets whose first packet arrived
    in the bin."""
    width: int
    packets: np.ndarray
    superpackets: dict
    n_files: int

    def equals(self, other: "TimeSeries") -> bool:
        return (self.width == other.width and self.n_files == other.n_files
                and np.array_equal(self.packets, other.packets)
                and self.superpackets.keys() == other.superpackets.keys()
                and all(np.array_equal(v, other.superpackets[k])
                        for k, v in self.superpackets.items()))


@dataclasses.dataclass
class PlotData:
    """Everything ``report.plots`` draws.

    Attributes:
        models, primary: the models run and the primary one (``napi`` when run).
        title: the figure's title (input files and kernel).
        seg_hist: per model, super-packets by segment count (index: segments).
        time: the ratio-over-time series (None: no packets).
        flows: the flows table (``src``, ``dst``, ``sport``, ``dport``, ``packets``).
        reason_keys: per model, ``(keys, counts)``: super-packets per sorted
            ``flow * 256 + end reason`` key.
    """
    models: list
    primary: str
    title: str
    seg_hist: dict
    time: TimeSeries | None
    flows: object
    reason_keys: dict

    def superpackets(self, model: str) -> int:
        return int(self.seg_hist[model].sum())

    def equals(self, other: "PlotData") -> bool:
        """Same figure: every field equal (arrays by value)."""
        same_time = (self.time is None) == (other.time is None) and (
            self.time is None or self.time.equals(other.time))
        return (self.models == other.models and self.primary == other.primary
                and self.title == other.title and same_time
                and self.seg_hist.keys() == other.seg_hist.keys()
                and all(np.array_equal(v, other.seg_hist[k])
                        for k, v in self.seg_hist.items())
                and self.flows.select(FLOW_COLUMNS).equals(other.flows.select(FLOW_COLUMNS))
                and self.reason_keys.keys() == other.reason_keys.keys()
                and all(np.array_equal(k, other.reason_keys[m][0])
                        and np.array_equal(c, other.reason_keys[m][1])
                        for m, (k, c) in self.reason_keys.items()))


FLOW_COLUMNS = ("src", "sport", "dst", "dport", "packets")
BINS = 50


def time_bins(span_ns: int, bins: int) -> int:
    """The bin width (ns) for ``span_ns`` in at most ``bins`` bins, rounded to 1, 2 or 5 x
    10^k microseconds (1 ns at least)."""
    raw = max(int(span_ns), 1) / bins / 1000
    mag = 10 ** np.floor(np.log10(max(raw, 1e-3)))
    width_us = float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))
    return max(int(width_us * 1000), 1)


def _bins_of(n_packets: int, rel_max: int, bins: int) -> tuple[int, int]:
    """``(width, number of bins)``: at least ~20 packets a bin on average, or the ratio is
    noise."""
    width = time_bins(rel_max, max(1, min(bins, n_packets // 20)))
    return width, int(rel_max) // width + 1


def _bin_into(out: np.ndarray, ts: np.ndarray, fidx: np.ndarray, start: np.ndarray,
              width: int) -> None:
    """Add rows (time, file) to the bins ``out`` (time since their file's first packet)."""
    if len(ts):
        out += np.bincount((ts - start[fidx]) // width, minlength=len(out))


def time_series(start: np.ndarray, n_packets: int, rel_max: int, packet_slices,
                first_slices: dict, bins: int = BINS) -> TimeSeries:
    """Bin the packets and each model's super-packets by time since their file's first
    packet. ``start``: each file's first timestamp; ``rel_max``: the largest time since
    it; ``packet_slices`` and ``first_slices[model]``: callables giving ``(ts_ns,
    file_index)`` array pairs (every packet; every super-packet's first packet), in any
    slicing. At least ~20 packets a bin on average, or the ratio is noise."""
    width, nb = _bins_of(n_packets, rel_max, bins)

    def count(slices):
        out = np.zeros(nb, np.int64)
        for ts, fidx in slices():
            _bin_into(out, ts, fidx, start, width)
        return out
    return TimeSeries(width, count(packet_slices),
                      {m: count(s) for m, s in first_slices.items()}, len(start))


def title_of(infos, config) -> str:
    files = ", ".join(os.path.basename(i.path) for i in infos)
    return f"gropcap: {files} (kernel {config.kernel.name})"


def plot_data(models, primary, title, seg_hist, time, flows, reason_keys) -> PlotData:
    """A :class:`PlotData` of finished counts (both ways end here)."""
    return PlotData(list(models), primary, title,
                    {m: np.asarray(seg_hist[m], np.int64) for m in models}, time,
                    flows.select(FLOW_COLUMNS),
                    {m: (np.asarray(k, np.int64), np.asarray(c, np.int64))
                     for m, (k, c) in reason_keys.items()})


def plot_data_of(analysis, bins: int = BINS) -> PlotData:
    """The :class:`PlotData` of an in-memory :class:`Analysis`."""
    t = analysis.decoded
    time = None
    if t.num_rows:
        ts = numpy_of(t.column("ts_ns")).astype(np.int64)
        fidx = numpy_of(t.column("file_index")).astype(np.int64)
        start = np.full(int(fidx.max()) + 1, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(start, fidx, ts)
        rel_max = int((ts - start[fidx]).max())
        firsts = {m: (lambda r=r: [(ts[r.seg_first_packet], fidx[r.seg_first_packet])])
                  for m, r in analysis.results.items()}
        time = time_series(start, len(ts), rel_max, lambda: [(ts, fidx)], firsts, bins)
    seg_hist, keys = {}, {}
    for m, r in analysis.results.items():
        seg_hist[m] = np.bincount(np.asarray(r.seg_count, np.int64)) if \
            r.num_superpackets else np.zeros(0, np.int64)
        keys[m] = np.unique(np.asarray(r.seg_flow_id, np.int64) * 256 +
                            np.asarray(r.seg_end_reason, np.int64), return_counts=True)
    return plot_data(analysis.models, analysis.primary_model,
                     title_of(analysis.infos, analysis.config), seg_hist, time,
                     analysis.flows, keys)


class PlotRows:
    """A bounded-memory run's rows for :func:`time_series`: each packet's and each
    super-packet's first packet's timestamp and file index, spilled batch by batch (in
    capture order, ``arrays.ArraySpill`` in ``directory``), and each file's first and
    last timestamp."""

    def __init__(self, directory: str, models):
        self.n = 0
        self.lo = np.zeros(0, np.int64)
        self.hi = np.zeros(0, np.int64)
        self._spills = {name: [ArraySpill(os.path.join(directory, f"plot-{name}")), 0]
                        for name in ("packets", *models)}

    def _append(self, name: str, ts: np.ndarray, fidx: np.ndarray) -> None:
        spill = self._spills[name]
        spill[0].put(np.asarray(ts, np.int64), np.asarray(fidx, np.int64))
        spill[1] += 1

    def add_packets(self, t) -> None:
        """Every decoded row of a batch (``ts_ns``, ``file_index``)."""
        if not t.num_rows:
            return
        ts = numpy_of(t.column("ts_ns")).astype(np.int64)
        fidx = numpy_of(t.column("file_index")).astype(np.int64)
        top = int(fidx.max()) + 1
        if top > len(self.lo):
            grow = top - len(self.lo)
            self.lo = np.concatenate([self.lo, np.full(grow, np.iinfo(np.int64).max)])
            self.hi = np.concatenate([self.hi, np.full(grow, np.iinfo(np.int64).min)])
        np.minimum.at(self.lo, fidx, ts)
        np.maximum.at(self.hi, fidx, ts)
        self.n += len(ts)
        self._append("packets", ts, fidx)

    def add_firsts(self, model: str, t, first: np.ndarray) -> None:
        """The rows of a batch that start a super-packet of ``model``."""
        idx = np.flatnonzero(first)
        if len(idx):
            self._append(model, numpy_of(t.column("ts_ns"))[idx],
                         numpy_of(t.column("file_index"))[idx])

    def _batches(self, name: str):
        spill, puts = self._spills[name]
        spill.rewind()
        for _ in range(puts):
            yield spill.get(2)

    def series(self, bins: int = BINS) -> TimeSeries | None:
        """The finished :func:`time_series` (None: no packets)."""
        if not self.n:
            return None
        seen = self.lo != np.iinfo(np.int64).max
        rel_max = int((self.hi[seen] - self.lo[seen]).max())
        start = np.where(seen, self.lo, 0)
        return time_series(start, self.n, rel_max, lambda: self._batches("packets"),
                           {m: (lambda m=m: self._batches(m))
                            for m in self._spills if m != "packets"}, bins)

    def close(self) -> None:
        for spill, _ in self._spills.values():
            spill.close()


def _spilled_pairs(path: str):
    """The ``(ts_ns, file_index)`` pairs a :class:`PlotRows` wrote to ``path`` (another
    process's: read to the end)."""
    if not os.path.exists(path):
        return
    sp = ArraySpill.reopen(path)
    try:
        end = os.path.getsize(path)
        while sp.f.tell() < end:
            ts, fidx = sp.get(2)
            yield ts, fidx
    finally:
        sp.close()


class PlotParts:
    """``--plot`` on the Dask core per partition (``run.dask_core``): each partition's
    output pass spills its rows like one process's (:class:`PlotRows` in its work
    directory) and its GRO task keeps its super-packets per (flow, end reason) key with
    the partition's flow ids (``top-<model>.npy``). Once the whole capture's time span
    is known (``start``: each file's first timestamp, ``rel_max``, ``n_packets``: as
    :func:`time_series` takes them) each partition is folded in with :meth:`add`: its
    rows binned, its keys renumbered to the run's flow ids (``gid.npy``,
    ``run.spill.number_flows``). The client holds the bins and the keys, not the rows."""

    def __init__(self, models, start: np.ndarray, n_packets: int, rel_max: int,
                 bins: int = BINS):
        self.models = list(models)
        self.start = np.asarray(start, np.int64)
        self.n_packets = n_packets
        self.width, self.nb = _bins_of(n_packets, rel_max, bins)
        self.packets = np.zeros(self.nb, np.int64)
        self.firsts = {m: np.zeros(self.nb, np.int64) for m in self.models}
        self.keys = {m: [] for m in self.models}

    @classmethod
    def of_capture(cls, models, capture) -> "PlotParts":
        """For a run whose ``CaptureCounts`` are known (:func:`capture_span`)."""
        start, rel_max = capture_span(capture)
        return cls(models, start, capture.packets, rel_max)

    def _bin(self, out: np.ndarray, path: str) -> None:
        for ts, fidx in _spilled_pairs(path):
            _bin_into(out, ts, fidx, self.start, self.width)

    def add(self, work: str) -> None:
        """A partition's work directory (its flows numbered, its output pass done)."""
        from gropcap.run.spill import GIDS, read_array
        self._bin(self.packets, os.path.join(work, "plot-packets"))
        gid = np.asarray(read_array(os.path.join(work, GIDS)), np.int64)
        for m in self.models:
            self._bin(self.firsts[m], os.path.join(work, f"plot-{m}"))
            path = os.path.join(work, f"top-{m}.npy")
            if os.path.exists(path):
                keys, counts = np.array(read_array(path))   # (never unpickles)
                flow, reason = np.divmod(keys, 256)
                self.keys[m].append((gid[flow] * 256 + reason, counts))

    def series(self) -> TimeSeries | None:
        if not self.n_packets:
            return None
        return TimeSeries(self.width, self.packets, dict(self.firsts), len(self.start))

    def reason_keys(self) -> dict:
        """Per model, ``(keys, counts)`` sorted by key (``ModelCounts.top_keys``)."""
        out = {}
        for m, parts in self.keys.items():
            if not parts:
                out[m] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
                continue
            k = np.concatenate([p[0] for p in parts])
            c = np.concatenate([p[1] for p in parts])
            u, inv = np.unique(k, return_inverse=True)
            out[m] = (u, np.bincount(inv.ravel(), weights=c, minlength=len(u)).astype(
                np.int64))
        return out


def capture_span(capture) -> tuple[np.ndarray, int]:
    """``(start, rel_max)`` of :func:`time_series` from a run's ``CaptureCounts``:
    each file's first timestamp up to the last file with rows (0 for a file without
    rows, as :class:`PlotRows` has it) and the largest time since it."""
    from gropcap.run.receivers import NO_TS
    first = np.asarray(capture.file_first_ts, np.int64)
    top = np.asarray(capture.file_max_ts, np.int64)
    seen = first != NO_TS
    n = int(np.flatnonzero(seen)[-1]) + 1 if seen.any() else 0
    first, top, seen = first[:n], top[:n], seen[:n]
    start = np.where(seen, first, 0)
    rel_max = int((top[seen] - first[seen]).max()) if seen.any() else 0
    return start, rel_max


__all__ = ["PlotData", "TimeSeries", "PlotRows", "PlotParts", "plot_data", "plot_data_of",
           "time_series", "time_bins", "title_of", "capture_span", "BINS", "FLOW_COLUMNS"]
