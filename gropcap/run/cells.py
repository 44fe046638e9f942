"""``--tunnel-gro`` batch by batch: the gro_cells stage after the native one, in bounded
memory.

The in-memory run (``run.memory.analyze``) builds the gro_cells devices' input from the
whole decoded table and the native stage's :class:`GroResult`
(``gro.stages.simulate_stages``). The bounded-memory core (``run/stream.py``) has
neither: it learns each native super-packet (a *unit*) piece by piece. Its
super-packets pass knows each unit's delivery position and totals (count, payload,
gso_size and gso_type, end reason, poll); its packets pass sees the unit's packets in
row order (the first one's decoded row, the last one's time, the FIN/PSH bits of all).
:class:`CellsStage` gathers both, per model, on disk:

- the totals in one record per unit (a ``numpy.memmap`` indexed by delivery position,
  its pages dropped after each batch);
- the first packets' decoded rows in an Arrow IPC stream file, in row order, with the
  spill row of each unit's head in its record.

:meth:`CellsStage.run` then reads the units in delivery order, :data:`UNITS_PER_SLICE`
at a time, through the same ``gro.stages.gro_cells_rows`` the in-memory run uses, and
feeds the rows to the stage's engine with its state carried from slice to slice
(``engine.simulate_batch``, as ``engine.simulate`` feeds pieces): the same summary as
the in-memory stage (``gro.stages.StageCounts``). Memory: one slice of units and the
devices seen, whatever the capture's size.

Layer: run (reads gro/, decode/).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from gropcap.arrays import RowFile, drop_pages, map_ipc_file, numpy_of, take_rows
from gropcap.constants import TCP_FLAG_FIN, TCP_FLAG_PSH
from gropcap.decode.schema import PACKET_SCHEMA, empty_packet_table
from gropcap.gro.config import GroConfig

__all__ = ["CellsStage", "CellsPart", "UNITS_PER_SLICE"]

UNITS_PER_SLICE = 1 << 16       # units per slice of the gro_cells pass

# one record per native super-packet, by delivery position
_UNIT = np.dtype([("count", np.int64), ("payload", np.int64), ("gso_size", np.int64),
                  ("gso_type", np.uint32), ("end", np.uint8), ("flags", np.uint8),
                  ("poll", np.int64), ("last_ts", np.int64), ("head", np.int64)])
# a partition's unit (CellsPart): the record and its delivery position over the run
_PART = np.dtype([("pos", np.int64)] + [(name, _UNIT[name]) for name in _UNIT.names])


class CellsStage:
    """One model's gro_cells stage, gathered batch by batch (see the module docstring).

    ``nseg``: the model's native super-packets (known once GRO is done);
    ``config``: the run's configuration with ``model`` set (``tunnel_gro`` not None)."""

    def __init__(self, tmp: str, config: GroConfig, nseg: int):
        self.config = config
        self.nseg = nseg
        self.path = os.path.join(tmp, f"cells-{config.model}")
        self.units = np.memmap(self.path + ".units", _UNIT, "w+", shape=(max(nseg, 1),))
        self.units["head"] = -1
        self.heads = 0                   # heads spilled so far
        self.sink = self.writer = None
        self.rowfiles: list = []         # (egress: the cells' rows' codes, gso types)

    @classmethod
    def gathered(cls, tmp: str, config: GroConfig, parts: list) -> "CellsStage":
        """The stage of a run whose units the Dask core's partitions gathered
        (:class:`CellsPart`, ``parts``: their :meth:`CellsPart.close` dicts, in partition
        order): each partition's records scattered to their delivery positions and its
        first rows appended to this stage's, a slice at a time."""
        stage = cls(tmp, config, sum(p["units"] for p in parts))
        u = stage.units
        for p in parts:
            if p["units"]:
                src = np.memmap(p["path"] + ".units", _PART, "r", shape=(p["units"],))
                for lo in range(0, p["units"], UNITS_PER_SLICE):
                    rec = np.array(src[lo:lo + UNITS_PER_SLICE])
                    rec["head"] = np.where(rec["head"] >= 0, rec["head"] + stage.heads, -1)
                    for name in _UNIT.names:
                        u[name][rec["pos"]] = rec[name]
                    drop_pages(u)
                del src
            if p["heads"]:
                if stage.writer is None:
                    stage.sink = pa.OSFile(stage.path + ".heads", "wb")
                    stage.writer = pa.ipc.new_stream(stage.sink, PACKET_SCHEMA)
                with pa.OSFile(p["path"] + ".heads") as f:
                    for batch in pa.ipc.open_stream(f):
                        stage.writer.write_batch(batch)
                stage.heads += p["heads"]
        return stage

    def segs(self, pos: np.ndarray, count, payload, gso_size, gso_type, end, poll) -> None:
        """A batch of the super-packets pass: units at delivery positions ``pos``."""
        u = self.units
        u["count"][pos] = count
        u["payload"][pos] = payload
        u["gso_size"][pos] = gso_size
        u["gso_type"][pos] = gso_type
        u["end"][pos] = end
        u["poll"][pos] = poll
        drop_pages(u)

    def packets(self, t: pa.Table, pos: np.ndarray, first: np.ndarray) -> None:
        """A batch of the packets pass: its decoded rows (row order), each row's unit
        (delivery position) and whether it is its unit's first row."""
        if not t.num_rows:
            return
        u = self.units
        flags = numpy_of(t.column("tcp_flags")).astype(np.uint8) & \
            (TCP_FLAG_FIN | TCP_FLAG_PSH)
        orf = u["flags"]
        np.bitwise_or.at(orf, pos, flags)
        # the last row of each unit in this batch (later batches come later)
        rev = pos[::-1]
        seen, at = np.unique(rev, return_index=True)
        u["last_ts"][seen] = numpy_of(t.column("ts_ns"))[len(pos) - 1 - at]
        heads = np.flatnonzero(first)
        if len(heads):
            u["head"][pos[heads]] = self.heads + np.arange(len(heads))
            self.heads += len(heads)
            if self.writer is None:
                self.sink = pa.OSFile(self.path + ".heads", "wb")
                # the stream format: each batch keeps its own encap dictionary
                self.writer = pa.ipc.new_stream(self.sink, PACKET_SCHEMA)
            self.writer.write_table(take_rows(t, heads))
        drop_pages(u)

    def close(self) -> None:
        for f in self.rowfiles:
            f.close()
        self.rowfiles = []
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = None

    def run(self, run_of_file: np.ndarray, native_packets: int, native_segments: int,
            egress=None, progress=None):
        """The gro_cells stage over the gathered units, in delivery order:
        ``[StageCounts native, StageCounts gro_cells]``. ``run_of_file``: the receiver
        run of each input file (a unit's rows reach the cells of its own run);
        ``native_packets``, ``native_segments``: the native stage's input rows and the
        wire segments they stand for. ``egress``: an ``egress.EgressCounts`` to count
        what reaches the stack into (``Analysis.egress``): the native super-packets no
        cell took or dropped, and the cells' super-packets. ``progress``: a line counting
        the native super-packets read (``run.progress.phase``)."""
        from gropcap.egress import header_codes
        from gropcap.gro.engine import _cut_coalesced, _gso_table, next_run, simulate_batch
        from gropcap.gro.stages import (CellsIds, StageCounts, Units, gro_cells_rows,
                                        stage_config)
        self.close()
        n = self.nseg
        u = self.units
        if n and (u["head"][:n] < 0).any():
            raise AssertionError("gro_cells: a native super-packet without its first row")
        heads = map_ipc_file(self.path + ".heads", stream=True) if n else \
            empty_packet_table()
        batches = heads.to_batches()
        bounds = np.cumsum([0] + [b.num_rows for b in batches])
        cfg2 = stage_config(self.config)
        napi = self.config.model == "napi"
        ids = CellsIds()                 # devices and MAC ids, across the slices
        state, cur = None, None
        cells = StageCounts("gro_cells", 0, 0, 0, 0)
        run_of_file = np.asarray(run_of_file, np.int64)
        largest = 0

        if egress is not None:
            # per row fed to the cells: egress's header codes and the gso_type it arrived
            # with (a merged super-packet keeps its head's bits: _keep_arriving_gso_type)
            codes = RowFile(self.path + ".codes", np.int64)
            arriving = RowFile(self.path + ".arriving", np.uint32)
            self.rowfiles = [codes, arriving]
            gtable = _gso_table(cfg2)

        def feed(table, final, **kw):
            nonlocal state
            if egress is not None and table.num_rows:
                codes.append(header_codes(table, egress.scenario))
                co = kw.get("coalesced")
                arriving.append(co.gso_type if co is not None else
                                np.zeros(table.num_rows, np.uint32))
            part, state = simulate_batch(table, cfg2, state, final=final, **kw)
            s = part.segs
            counts = s["count"]
            cells.superpackets_out += len(counts)
            cells.largest = max(cells.largest, int(counts.max()) if len(counts) else 0)
            if egress is not None and len(counts):
                multi = counts > 1
                gso_type = np.zeros(len(counts), np.uint32)
                gso_type[multi] = gtable[s["gcode"][multi], s["fixed"][multi] & 3] | \
                    arriving.take(s["first"][multi])
                egress.add(counts, s["gso"], gso_type, s["payload"], codes.take(s["first"]))

        from gropcap.run.progress import phase
        line = phase(progress, f"gro_cells {self.config.model}", n, "super-packets")
        for lo in range(0, n, UNITS_PER_SLICE):
            hi = min(n, lo + UNITS_PER_SLICE)
            rec = np.array(u[lo:hi])             # this slice's records, read once
            drop_pages(u)
            drop_pages(heads)
            largest = max(largest, int(rec["count"].max()))
            line.advance(hi - lo)
            units = Units(heads=_gather(batches, bounds, rec["head"]),
                          count=rec["count"], payload=rec["payload"],
                          gso_size=rec["gso_size"], gso_type=rec["gso_type"],
                          end_reason=rec["end"], poll_id=rec["poll"],
                          last_ts=rec["last_ts"], or_flags=rec["flags"].astype(np.int64))
            derived, segs, src, device, gro, co, hashes, polls, dropped = gro_cells_rows(
                units, self.config, ids=ids)
            cells.packets_in += derived.num_rows
            cells.segments_in += int(np.asarray(segs).sum())
            cells.dropped += len(dropped)
            cells.rows_without_gro += int((~gro).sum())
            if egress is not None:
                # the native super-packets that reach the stack as they are
                keep = np.ones(len(units), bool)
                keep[src] = keep[dropped] = False
                keep = np.flatnonzero(keep)
                egress.add(rec["count"][keep], rec["gso_size"][keep], rec["gso_type"][keep],
                           rec["payload"][keep],
                           header_codes(take_rows(units.heads, keep), egress.scenario))
            if not derived.num_rows:
                continue
            runs = run_of_file[numpy_of(units.heads.column("file_index")).astype(
                np.int64)[src]] if len(run_of_file) else np.zeros(len(src), np.int64)
            cuts = np.flatnonzero(np.diff(runs)) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(runs)]):
                if cur is not None and runs[a] != cur:
                    feed(empty_packet_table(), True, **_empty_kw(napi))
                    state = next_run(state)
                cur = int(runs[a])
                feed(derived.slice(a, b - a), False, no_gro=~gro[a:b],
                     polls=polls[a:b] if napi else None,
                     hashes=hashes[a:b] if napi else None,
                     coalesced=_cut_coalesced(co, a, b))
        if state is not None:
            feed(empty_packet_table(), True, **_empty_kw(napi))
        line.end()
        cells.devices = len(ids.devices)
        native = StageCounts("native", native_packets, native_segments, n, largest)
        return [native, cells]

    def remove(self) -> None:
        """Close and delete the files (the temporary directory goes anyway)."""
        self.close()
        self.units = None           # (a mapped file may go while mapped)
        for ext in (".units", ".heads", ".codes", ".arriving"):
            try:
                os.unlink(self.path + ext)
            except OSError:
                pass


class CellsPart(CellsStage):
    """One partition's share of a model's units on the Dask core per partition
    (``run.dask_tasks.write_partition_task``): a unit's packets are one flow's, so one
    partition's. Its super-packets pass appends each unit's record with its delivery
    position over the run (:meth:`segs`); :meth:`sort` orders them by position; its
    packets pass finds each row's unit by that position (a binary search) and keeps the
    FIN/PSH bits, the last time and the first row as :class:`CellsStage` does. The files
    stay in ``cells_dir`` for :meth:`CellsStage.gathered`; :meth:`close` says where."""

    def __init__(self, cells_dir: str, config: GroConfig, part: int):
        self.config = config
        self.path = os.path.join(cells_dir, f"{config.model}-{part}")
        self.nseg = 0
        self.units = None
        self.heads = 0
        self.sink = self.writer = None
        self.rowfiles: list = []
        self._records = open(self.path + ".records", "wb")

    def segs(self, pos: np.ndarray, count, payload, gso_size, gso_type, end, poll) -> None:
        rec = np.zeros(len(pos), _PART)
        rec["pos"], rec["count"], rec["payload"] = pos, count, payload
        rec["gso_size"], rec["gso_type"], rec["end"], rec["poll"] = gso_size, gso_type, \
            end, poll
        rec["head"] = -1
        self._records.write(rec.tobytes())
        self.nseg += len(pos)

    def sort(self) -> None:
        """The records by delivery position (after the super-packets pass). Usually they
        already are (a partition emits its super-packets in delivery order): the file is
        then kept as it is; else the positions are sorted in memory (16 bytes a unit)
        and the records gathered a slice at a time."""
        self._records.close()
        n = self.nseg
        src = self.path + ".records"
        if n:
            rec = np.memmap(src, _PART, "r", shape=(n,))
            pos = np.array(rec["pos"])
            if n > 1 and not bool(np.all(pos[1:] > pos[:-1])):
                order = np.argsort(pos, kind="stable")
                del pos
                out = np.memmap(src + ".sorted", _PART, "w+", shape=(n,))
                for lo in range(0, n, UNITS_PER_SLICE):
                    out[lo:lo + UNITS_PER_SLICE] = rec[order[lo:lo + UNITS_PER_SLICE]]
                    drop_pages(out)
                    drop_pages(rec)
                out.flush()
                del out, order
                os.replace(src + ".sorted", src)
            del rec
            os.replace(src, self.path + ".units")
            self.units = np.memmap(self.path + ".units", _PART, "r+", shape=(n,))
        else:
            os.unlink(src)
            self.units = np.zeros(1, _PART)
        drop_pages(self.units)

    def packets(self, t: pa.Table, pos: np.ndarray, first: np.ndarray) -> None:
        super().packets(t, np.searchsorted(self.units["pos"][:self.nseg], pos), first)

    def close(self) -> dict:
        """Closes the files: ``{"path", "units", "heads"}`` for
        :meth:`CellsStage.gathered`."""
        super().close()
        if isinstance(self.units, np.memmap):
            self.units.flush()
        self.units = None
        return {"path": self.path, "units": self.nseg, "heads": self.heads}


def _gather(batches: list, bounds: np.ndarray, rows: np.ndarray) -> pa.Table:
    """Rows ``rows`` (spill row numbers, any order) of the spilled heads, in that order:
    a take from each record batch they fall in (no concatenation of the whole file)."""
    which = np.searchsorted(bounds, rows, side="right") - 1
    order = np.argsort(which, kind="stable")        # the rows grouped by batch
    ks, starts = np.unique(which[order], return_index=True)
    pieces = [take_rows(pa.Table.from_batches([batches[k]]), rows[sel] - bounds[k])
              for k, sel in zip(ks, np.split(order, starts[1:]))]
    table = pa.concat_tables(pieces).unify_dictionaries().combine_chunks()
    back = np.empty(len(rows), np.int64)
    back[order] = np.arange(len(rows))
    return take_rows(table, back)


def _empty_kw(napi: bool) -> dict:
    """simulate_batch's per-row arguments for an empty final batch."""
    return {"no_gro": np.zeros(0, bool), "polls": np.zeros(0, np.int64) if napi else None,
            "hashes": np.zeros(0, np.uint32) if napi else None}
