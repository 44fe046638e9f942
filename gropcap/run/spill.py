"""Per-flow results kept on disk instead of in the client's memory.

The Dask runner (``run.dask_core``) cuts a receiver run into partitions whose flows are
disjoint. Each GRO task writes its partition's flows to its work directory
(:func:`save_partition_flows`: the flows-table rows, each flow's first global row and
flow key, the loose-class hashes; its flow causes once its packets are counted). The
client never loads them whole: it checks that no flow or class is in two partitions
(:func:`disjoint`, slice by slice over mapped files), numbers the flows by first
appearance over the run (:func:`number_flows`: a ``gid.npy`` file per partition, which
the write tasks read for their ``flow_id`` columns) and appends the rows in that order,
a slice of :data:`arrays.SLICE_ROWS` flows at a time (:func:`in_flow_order`), to an
Arrow IPC file in the scratch (:class:`Spill`), run by run. When the analysis ends that
file is memory-mapped and unlinked, and the result's flows table and flow causes are
read through the page cache on access. The client's own (anonymous) memory then holds
no flow: the kernel may drop the mapped pages at any time and read them again. The
coalesced-input statistics, per TCP direction, stay in the tasks' directories too
(``gro.coalesced.CoalescedStats.spill``: docs/scale.md, "The coalesced-input
statistics on disk")."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from gropcap import arrays
from gropcap.arrays import (arrow_numeric, batch_column, map_ipc_file, read_array,  # noqa: F401
                            slices, write_array)
from gropcap.run.accumulators import cause_text

# a partition's flow files in its work directory
FLOWS = "flows.arrow"           # flows-table rows, local flow order
CAUSES = "causes.arrow"         # flow causes (total, ahead, back), local flow order
# numpy .npy files
FIRSTS = "firsts.npy"           # each flow's first global row (ascending)
KEYS = "keys.npy"               # the flows' same-flow keys (fixed-width bytes), sorted
HASHES = "hashes.npy"           # the rows' loose same-flow class hashes, sorted
GIDS = "gid.npy"                # each flow's id in the run's numbering (the client's)
LKEYS = "lkeys.npy"             # the flows' same-flow keys in local flow order
CAUSE_COLS = ("total", "ahead", "back")


def write_ipc(path: str, table: pa.Table) -> None:
    """``table`` as an Arrow IPC file at ``path``, written under another name and
    renamed (a task re-run never leaves a reader half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def causes_table(causes, n: int) -> pa.Table:
    """A ``FlowCauses``' counts of flows ``0 .. n-1`` as a table (:data:`CAUSE_COLS`)."""
    causes._grow(n)
    return pa.table({k: arrow_numeric(np.ascontiguousarray(getattr(causes, k)[:n]),
                                      pa.int64()) for k in CAUSE_COLS})


def save_partition_flows(work: str, flows: pa.Table, firsts: np.ndarray,
                         keys: np.ndarray, hashes: np.ndarray | None) -> None:
    """A GRO task's partition flows in ``work`` (module docstring): ``flows`` its
    flows-table rows by local id, ``firsts`` their first global rows, ``keys`` their flow
    keys, ``hashes`` its rows' loose-class hashes (None: not checked)."""
    if len(firsts) > 1 and np.any(np.diff(firsts) <= 0):
        # flows are interned in row order: their first rows rise with their ids
        raise ValueError("a partition's flows are not numbered by first appearance")
    write_ipc(os.path.join(work, FLOWS), flows)
    write_array(os.path.join(work, FIRSTS), np.asarray(firsts, np.int64))
    keys = np.ascontiguousarray(keys)
    if keys.dtype.kind == "V":      # (raw bytes: sortable and searchable as byte strings)
        keys = keys.view(f"S{keys.dtype.itemsize}")
    write_array(os.path.join(work, KEYS), np.sort(keys))
    write_array(os.path.join(work, LKEYS), keys)
    if hashes is not None:
        write_array(os.path.join(work, HASHES), np.unique(hashes))


def disjoint(paths: list[str]) -> bool:
    """Whether no value is in two of the sorted, duplicate-free arrays at ``paths``
    (:func:`write_array`; a missing file: none), read mapped a slice at a time."""
    arrs = [read_array(p) for p in paths]
    return not any(arrays.sorted_meet(a, b) for i, a in enumerate(arrs)
                   for b in arrs[i + 1:])


def number_flows(works: list[str], base: int = 0) -> int:
    """Number the flows of the partitions in ``works`` by first appearance over all of
    them, from ``base`` (one process's numbering: a flow's id is the count of flows with
    an earlier first row), into each partition's ``gid.i64``; returns the flows. A
    flow's id is its local id plus, per other partition, its flows first seen before."""
    firsts = [read_array(os.path.join(w, FIRSTS)) for w in works]
    step = arrays.SLICE_ROWS
    for k, (w, mine) in enumerate(zip(works, firsts)):
        tmp = os.path.join(w, f"{GIDS}.{os.getpid()}.tmp")
        with open(tmp, "wb") as out:
            np.lib.format.write_array_header_1_0(out, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)),
                "fortran_order": False, "shape": (len(mine),)})
            for lo in range(0, len(mine), step):
                part = np.asarray(mine[lo:lo + step])
                gid = np.arange(base + lo, base + lo + len(part), dtype=np.int64)
                for j, other in enumerate(firsts):
                    if j != k and len(other):
                        gid += np.searchsorted(other, part)
                gid.tofile(out)
                for f in firsts:
                    arrays.drop_pages(f)
        os.replace(tmp, os.path.join(w, GIDS))
    return sum(len(f) for f in firsts)


def in_flow_order(works: list[str], name: str, base: int, n: int):
    """The rows of the partitions' tables ``name`` (:data:`FLOWS` or :data:`CAUSES`,
    local flow order) in the run's flow order (``gid.i64``: ids ``base .. base+n-1``),
    as tables of at most :data:`arrays.SLICE_ROWS` rows; a ``flow_id`` column gets the
    run's ids. The tables are read mapped, their pages dropped after each slice."""
    tables, gids = [], []
    for w in works:
        path = os.path.join(w, name)
        gid = read_array(os.path.join(w, GIDS))
        if len(gid):
            tables.append(map_ipc_file(path))
            gids.append(gid)
    step = arrays.SLICE_ROWS
    for lo in range(base, base + n, step):
        hi = min(lo + step, base + n)
        parts, ids = [], []
        for t, gid in zip(tables, gids):
            a, b = np.searchsorted(gid, [lo, hi])
            if b > a:
                parts.append(t.slice(a, b - a))
                ids.append(np.asarray(gid[a:b]))
        ids = np.concatenate(ids)
        if len(ids) != hi - lo:
            raise ValueError(f"flows {lo}-{hi - 1}: {len(ids)} rows found")
        order = np.argsort(ids, kind="stable")
        out = pa.concat_tables(parts).take(arrays.arrow_indices(order)) \
            if len(parts) > 1 else parts[0]
        if "flow_id" in out.column_names:
            out = out.set_column(out.schema.get_field_index("flow_id"), "flow_id",
                                 arrow_numeric(np.ascontiguousarray(ids[order]),
                                               pa.int64()))
        yield out
        for t, gid in zip(tables, gids):
            arrays.drop_pages(t)
            arrays.drop_pages(gid)


def number_flows_merged(works: list[str], base: int = 0) -> int:
    """:func:`number_flows` for partitions that may share flows (time pieces of one
    receiver run, ``run.dask_core``): a flow is its key (:data:`LKEYS`), numbered by its
    first row over every partition; each partition's ``gid.npy`` maps its local flows
    to those ids, which then need not rise within a partition and may occur in several.
    Returns the flows. Holds every partition's keys (one per flow and partition)."""
    keys = [np.asarray(read_array(os.path.join(w, LKEYS))) for w in works]
    firsts = [np.asarray(read_array(os.path.join(w, FIRSTS))) for w in works]
    if not sum(len(k) for k in keys):
        for w in works:
            write_array(os.path.join(w, GIDS), np.zeros(0, np.int64))
        return 0
    width = max(k.dtype.itemsize for k in keys if len(k))
    allk = np.concatenate([k.astype(f"S{width}") if len(k) else np.zeros(0, f"S{width}")
                           for k in keys])
    uniq, inv = np.unique(allk, return_inverse=True)
    first = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, inv, np.concatenate(firsts).astype(np.int64))
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq), dtype=np.int64)
    lo = 0
    for w, k in zip(works, keys):
        write_array(os.path.join(w, GIDS), base + rank[inv[lo:lo + len(k)]])
        lo += len(k)
    return len(uniq)


def _gathered(works: list[str], name: str):
    """Every partition's table ``name`` (local flow order), their ``gid.npy`` and first
    rows, concatenated and ordered by (flow id, first row): the rows of one flow
    together, the one of its first appearance first."""
    tables, gids, firsts = [], [], []
    for w in works:
        gid = np.asarray(read_array(os.path.join(w, GIDS)))
        if len(gid):
            tables.append(map_ipc_file(os.path.join(w, name)))
            gids.append(gid)
            firsts.append(np.asarray(read_array(os.path.join(w, FIRSTS))))
    if not tables:
        return None, np.zeros(0, np.int64), np.zeros(0, bool)
    gid, first = np.concatenate(gids), np.concatenate(firsts)
    order = np.lexsort((first, gid))
    table = pa.concat_tables(tables).take(arrays.arrow_indices(order))
    gid = gid[order]
    head = np.ones(len(gid), bool)
    head[1:] = gid[1:] != gid[:-1]
    return table, gid, head


def merged_flow_rows(works: list[str], base: int, n: int, models) -> pa.Table:
    """The flows-table rows of partitions that share flows (:func:`number_flows_merged`),
    one row per flow in flow order: the key columns of its first appearance, packets,
    payload bytes and super-packets summed, the ratio of the sums, and the most frequent
    end reason of the summed (flow, end reason) counts each partition kept
    (``top-MODEL.npy``). Time pieces cut where nothing is held (``run.dask_core``) share
    no super-packet, so each sum is the one-process count."""
    from gropcap.run.accumulators import ModelCounts, flow_ratio
    table, gid, head = _gathered(works, FLOWS)
    if table is None:
        return None
    starts = np.flatnonzero(head)
    out = table.take(arrays.arrow_indices(starts))
    if len(np.unique(gid)) != n or gid[starts][0] != base:
        raise ValueError(f"flows {base}-{base + n - 1}: {len(starts)} found")

    def summed(name):
        v = arrays.numpy_of(table.column(name)).astype(np.int64)
        return np.add.reduceat(v, starts)
    cols = {"flow_id": gid[starts], "packets": summed("packets"),
            "payload_bytes": summed("payload_bytes")}
    fmaps = [np.asarray(read_array(os.path.join(w, GIDS))) for w in works]
    for m in models:
        segs = summed(f"{m}_superpackets")
        cols[f"{m}_superpackets"] = segs
        cols[f"{m}_ratio"] = flow_ratio(cols["packets"], segs)
        mc = ModelCounts(m)
        for w, fmap in zip(works, fmaps):
            path = os.path.join(w, f"top-{m}.npy")
            if not len(fmap) or not os.path.exists(path):
                continue
            keys, counts = np.asarray(read_array(path))
            f, r = np.divmod(keys, 256)
            mc._top((fmap[f] - base) * 256 + r, counts)
        cols[f"{m}_top_reason"] = mc.top_reasons(n)
    for name, v in cols.items():
        i = out.schema.get_field_index(name)
        typ = out.schema.field(i).type
        out = out.set_column(i, name, v if isinstance(v, (pa.Array, pa.ChunkedArray))
                             else arrow_numeric(np.ascontiguousarray(v), typ))
    return out


def merged_causes(works: list[str], base: int, n: int) -> pa.Table:
    """The flow causes (:data:`CAUSES`) of partitions that share flows, summed per flow
    in flow order (a sequence break is counted where the flow's held entry is, in the
    partition of its time piece)."""
    out = {k: np.zeros(n, np.int64) for k in CAUSE_COLS}
    for w in works:
        gid = np.asarray(read_array(os.path.join(w, GIDS)))
        if not len(gid):
            continue
        t = map_ipc_file(os.path.join(w, CAUSES))
        for k in CAUSE_COLS:
            np.add.at(out[k], gid - base, arrays.numpy_of(t.column(k)).astype(np.int64))
    return pa.table({k: arrow_numeric(v, pa.int64()) for k, v in out.items()})


class Spill:
    """Tables with one schema appended to an Arrow IPC file at ``path``; ``table()``
    maps the file and unlinks it (the mapping lives as long as the table) and returns
    that table from then on."""

    def __init__(self, path: str):
        self.path = path
        self.num_rows = 0
        self._sink = self._writer = self._table = None

    def add(self, table: pa.Table) -> None:
        if self._table is not None:
            raise ValueError("the spill is mapped already: nothing more can be added")
        if not table.num_rows:
            return
        if self._writer is None:
            self._sink = pa.OSFile(self.path, "wb")
            self._writer = pa.ipc.new_file(self._sink, table.schema)
        self._writer.write_table(table)
        self.num_rows += table.num_rows

    def table(self, empty: pa.Table) -> pa.Table:
        """Everything added, as one table over the mapped file (``empty`` when nothing
        was)."""
        if self._table is None:
            if self._writer is None:
                self._table = empty
            else:
                self._writer.close()
                self._sink.close()
                self._writer = self._sink = None
                try:
                    self._table = map_ipc_file(self.path)
                finally:
                    os.unlink(self.path)
        return self._table


class CauseTexts(Sequence):
    """Per flow, :func:`cause_text` of its counts, made when an item is read (the flow
    causes of a run with more flows than the client should hold as strings):
    ``table``: columns ``total``, ``ahead``, ``back`` in flow order."""

    def __init__(self, table: pa.Table):
        self._t = table

    def __len__(self) -> int:
        return self._t.num_rows

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return cause_text(*(self._t.column(k)[i].as_py() for k in ("ahead", "back", "total")))

    def __iter__(self):
        for _, batch in slices(self._t):
            cols = [batch_column(batch, k).tolist() for k in ("ahead", "back", "total")]
            yield from (cause_text(a, b, n) for a, b, n in zip(*cols))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None


class CausesSpill:
    """Flow causes of sealed runs, in flow order: each run's counts (a ``FlowCauses``
    its write results were folded into under the run's own flow ids, from 0) appended
    once the run is complete (``seal``, runs in order)."""

    def __init__(self, path: str):
        self._spill = Spill(path)

    def add(self, table: pa.Table) -> None:
        """Append the counts of the next flows (:data:`CAUSE_COLS`, flow order)."""
        self._spill.add(table.select(list(CAUSE_COLS)))

    def result(self, n_flows: int) -> CauseTexts:
        none = np.zeros(0, np.int64)
        table = self._spill.table(pa.table({k: arrow_numeric(none, pa.int64())
                                            for k in ("total", "ahead", "back")}))
        if table.num_rows != n_flows:
            raise ValueError(f"flow causes of {table.num_rows} flows for {n_flows} flows")
        return CauseTexts(table)


__all__ = ["Spill", "CausesSpill", "CauseTexts", "save_partition_flows", "disjoint",
           "number_flows", "in_flow_order", "causes_table", "number_flows_merged",
           "merged_flow_rows", "merged_causes"]
