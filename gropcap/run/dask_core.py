"""The bounded-memory core per Dask partition: workers write their own Parquet parts, the
client merges accumulators.

:func:`analyze_partitioned` is what ``gropcap analyze --jobs N`` / ``--scheduler`` runs
when the run is one the bounded-memory core models (``run.options.memory_reason`` is
None) and the workers share a scratch directory with the client (local workers, or
``--scratch`` on a shared file system). Otherwise, or when the data asks for it (below),
the run is :func:`gropcap.run.distributed.analyze_distributed`, the in-memory merge.

1. **decode** (``run.distributed._decode_all``): one task per file or byte range writes
   its decoded piece to the scratch directory with the GRO partition of every row
   (``engine.partition_of`` of the napi model when it runs: whole RX queues; else of the
   ideal model) and returns its ``CaptureCounts`` and ``gso.CoalescedStats``, merged on
   the client in input order.
2. **GRO** (:func:`gro_partition_task`, one task per partition): the partition's rows in
   capture order, cut into batches of ``batch_records``, through
   ``run.engines.BatchGroModels`` (every model from one preparation, state carried), the
   engine's partial results spilled as ``run.stream`` spills them; returns the
   partition's accumulators (``ModelCounts``, ``FlowCounts``, ``CoalescedCounts``,
   numbered by the partition's own flow ids), each local flow's same-flow key and first
   global row, and writes the small table its delivery order needs (napi: its polls'
   time, queue and super-packets, sorted; ideal: each super-packet's trigger row).
3. **client**: flows numbered over the whole capture by first appearance (keys ranked
   by first global row), the accumulators remapped to those ids and merged
   (``Totals.merge``); the summary is rendered from them as in every other mode.
4. **write** (:func:`write_partition_task`, one task per partition): each partition
   reads every partition's delivery table and gives its super-packets their global
   delivery position (napi: polls ranked by (time, queue, order), the one-process rule
   of ``engine.assemble``; ideal: (trigger row, emission order), the end-of-capture
   flush by first row: ``run.distributed.merge_parts``), then writes
   ``packets/part-K.parquet`` and ``superpackets/part-K.parquet`` (provenance metadata
   on each) and returns the counts only this pass makes (super-packets per
   encapsulation, the flow causes). The client writes ``flows.parquet``.

Exactness needs each partition to hold whole GRO-state units for every model: RX queues
(napi) and loose same-flow classes (ideal). Both models run over one partition, cut by
RX queue when napi runs. The napi model's classes include the RSS hash, so they never
straddle queues; the ideal model's leave it out (a tunnel's outer UDP source port can
send one inner flow to two queues). A GRO task returns the 64-bit hashes of its rows'
loose-class fields (:func:`_class_hash`) and the client checks that no hash and no flow
occurs in two partitions; otherwise the run falls back to the in-memory merge
(``run.distributed``), which partitions each model on its own.

The union of the parts equals the one-process files row for row; the order differs:
sort ``packets`` by (``file_index``, ``record``), ``superpackets`` by (``model``,
``seg_id``) to compare (docs/scale.md).

Layer: run/, above run/distributed.py and run/stream.py (it reuses their tasks and
spills).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.gro.config import MODELS
from gropcap.gro.reasons import ROLE_ALONE, ROLE_HEAD, ROLE_MERGED
from gropcap.run.stream import StreamResult

# the one-process layout, and the dataset layout workers write
DATASET_DIRS = ("packets", "superpackets")
FLOWS_FILE = "flows.parquet"


class _Fallback(Exception):
    """The data needs the in-memory merge (why: the message)."""


@dataclasses.dataclass
class PartitionedResult(StreamResult):
    """A :class:`StreamResult` of a Dask run plus the inputs left out (``failures``,
    as ``run.distributed.DistributedAnalysis``; the summary lists them under
    ``failed_inputs``)."""

    failures: list = dataclasses.field(default_factory=list)


def partitioned_reason(config, *, engine="fast", decoder="fast", egress=None,
                       plot=False) -> str | None:
    """None when :func:`analyze_partitioned` can run this configuration, else why not
    (then the in-memory Dask merge runs it): what the bounded-memory core does not model
    (``run.options.memory_reason``)."""
    from gropcap.run.options import memory_reason
    return memory_reason(config, engine=engine, decoder=decoder, egress=egress, plot=plot)


# ---- worker side ----

def _partition_batches(pieces, split: str, nparts: int, k: int, batch_records: int,
                       columns=None):
    """Partition ``k``'s rows in capture order as ``(table, global_rows)`` batches (about
    ``batch_records`` rows: each slice of ``batch_records * nparts`` piece rows filtered
    to the partition's, 10x cheaper than a ``take`` over the whole piece), from the
    scratch pieces ``(path, index, new_index, offset)`` (mapped: only the rows kept are
    copied); ``columns``: only those (None: all)."""
    from gropcap.run.distributed import _renumber_file, _table_of
    step = batch_records * max(1, nparts)
    for path, index, new_index, offset in pieces:
        table = _table_of(path)
        if not table.num_rows:
            continue
        if columns is not None:
            table = table.select(columns)
        part = None
        if nparts > 1:
            with pa.memory_map(f"{path}.{split}.part") as src:
                part = pa.ipc.open_file(src).read_all().column("part").to_numpy()
        for lo in range(0, table.num_rows, step):
            t = table.slice(lo, step)
            if part is None:
                rows = np.arange(lo, lo + t.num_rows, dtype=np.int64)
            else:
                mine = part[lo:lo + step] == k
                rows = np.flatnonzero(mine) + lo
                if not len(rows):
                    continue
                t = t.filter(pa.array(mine))
            if index != new_index and "file_index" in t.column_names:
                t = _renumber_file(t, new_index)
            yield t, rows + offset


def _class_hash(t: pa.Table, config) -> np.ndarray:
    """Per row, a 64-bit hash of fields of the ideal model's loose same-flow key (outer
    and inner IP versions, protocols and addresses, tunnel type, ports: words 4-22 of
    ``engine._classes``; not the RSS hash, which the ideal model leaves out), on the
    table ``engine.partition_of`` cuts (``_udp_prepare.partition_table``): rows of one
    class share it, so a hash found in two partitions is the only way a class can
    straddle them."""
    from gropcap.gro._udp_prepare import partition_table
    from gropcap.gro.engine import _addr_words
    t = partition_table(t, config)
    col = lambda name: t.column(name).to_numpy().astype(np.uint64)  # noqa: E731
    words = [w for name in ("ip_src", "ip_dst", "outer_ip_src", "outer_ip_dst")
             for w in _addr_words(t, name)]
    words.append(col("sport") | col("dport") << np.uint64(16)
                 | col("tun_type") << np.uint64(32) | col("ip_version") << np.uint64(40)
                 | col("ip_proto") << np.uint64(48) | col("outer_ip_version") << np.uint64(56))
    words.append(col("outer_ip_proto"))
    h = np.zeros(t.num_rows, np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for w in words:
            h = (h ^ w) * mul
            h ^= h >> np.uint64(29)
    return h


def _reopen(path: str):
    """A ``run.stream._Spill`` written by another task, opened for reading."""
    from gropcap.run.stream import _Spill
    sp = _Spill.__new__(_Spill)
    sp.path = path
    sp.f = open(path, "rb")
    return sp


def gro_partition_task(pieces, config, models, split: str, nparts: int, k: int, stats,
                       work: str, n_total: int, batch_records: int, check: bool,
                       tunnels: tuple = ()) -> dict:
    """GRO of partition ``k`` through the bounded-memory core (module docstring, step 2);
    spills and delivery tables go to ``work``. Returns the partition's accumulators,
    flow keys and first rows, (``check``) the loose-class hashes of its rows, and the
    rows of the UDP tunnels ``tunnels`` (``(kind, port)`` pairs without a socket: the
    tunnel hint runs them again) with their global rows and coalesced input."""
    from gropcap.gro.engine import _SEG_FIELDS
    from gropcap.run.accumulators import CoalescedCounts, Totals, _add_at
    from gropcap.run.engines import BatchGroModels
    from gropcap.run.stream import _ModelRun
    os.makedirs(work, exist_ok=True)
    tot = Totals(models, config.verify_checksums)
    runs = [_ModelRun(m, config, work, tot.models[m]) for m in models]
    gro = BatchGroModels([r.config for r in runs])
    coal = CoalescedCounts() if stats is not None and stats.num else None
    ideal_cfg = config.replace(model="ideal")
    file_rows = np.zeros(0, np.int64)
    firsts, hashes = [], np.zeros(0, np.int64)
    rows_out = open(os.path.join(work, "global.rows"), "wb")
    n = 0
    tun_rows, tun_at, tun_co = [], [], []

    def file_of(rows):
        return np.searchsorted(np.cumsum(file_rows), rows, side="right")

    def take(parts):
        for run, part in zip(runs, parts):
            run.take(part, file_of=file_of)
    for t, grows in _partition_batches(pieces, split, nparts, k, batch_records):
        grows.astype(np.int64).tofile(rows_out)
        file_rows = _add_at(file_rows, np.bincount(
            t.column("file_index").to_numpy().astype(np.int64)))
        co = stats.infer(t) if coal is not None else None
        if co is not None:
            coal.add(t, co)
        before = tot.flows.n_flows
        parts = gro.feed(t, final=False, coalesced=co)
        take(parts)
        fid = parts[0].flow_id.astype(np.int64)
        tot.flows.add(t, fid)
        new = np.flatnonzero(fid >= before)
        if len(new):
            _, first = np.unique(fid[new], return_index=True)
            firsts.append(grows[new[first]])
        if check:
            hashes = np.union1d(hashes, _class_hash(t, ideal_cfg))
        if tunnels:
            from gropcap.run.hints import tunnel_mask
            idx = np.flatnonzero(tunnel_mask(t, tunnels))
            tun_rows.append(t.take(pa.array(idx)))
            tun_at.append(grows[idx])
            tun_co.append(None if co is None else
                          (co.is_gso[idx], co.gso_size[idx], co.segs[idx], co.source[idx]))
        n += t.num_rows
    take(gro.feed(PACKET_SCHEMA.empty_table(), final=True))
    rows_out.close()
    states = gro.states or []
    kt = states[0].flow_ids if states else None
    keys = np.zeros(0, np.uint64) if kt is None or kt.sorted_keys is None else \
        kt.sorted_keys[np.argsort(kt.sorted_ids)]
    # global row of each partition row, read back mapped (not held)
    grows = np.memmap(os.path.join(work, "global.rows"), np.int64, mode="r") if n else \
        np.zeros(0, np.int64)
    info = {}
    for run, state in zip(runs, states):
        # the delivery table of this partition (read by every write task), from one
        # sweep over the spilled super-packets
        p_time = np.concatenate(run.poll_time) if run.poll_time else np.zeros(0, np.int64)
        p_queue = np.concatenate(run.poll_queue) if run.poll_queue else \
            np.zeros(0, np.int64)
        napi = run.config.model == "napi"
        nseg = np.zeros(len(p_time), np.int64)
        whens = []
        run.segs.rewind()
        for _ in range(run.parts):
            s = dict(zip(_SEG_FIELDS, run.segs.get(len(_SEG_FIELDS))))
            if napi and len(p_time) and len(s["poll"]):
                nseg += np.bincount(s["poll"].astype(np.int64), minlength=len(p_time))
            elif not napi and len(s["trig"]):
                trig, first = s["trig"].astype(np.int64), s["first"].astype(np.int64)
                whens.append(np.where(trig >= 0, grows[np.maximum(trig, 0)],
                                      n_total + grows[first]))
        table = {}
        if napi and len(p_time):
            order = np.lexsort((np.arange(len(p_time)), p_queue, p_time))
            table = {"time": p_time[order].astype(np.int64),
                     "queue": p_queue[order].astype(np.int64),
                     "cum": np.concatenate([[0], np.cumsum(nseg[order])]), "order": order}
        elif not napi:
            when = np.concatenate(whens) if whens else np.zeros(0, np.int64)
            order = np.lexsort((np.arange(len(when)), when))
            table = {"when": when, "sorted": when[order], "order": order}
        np.savez(os.path.join(work, f"{run.model}.order.npz"), **table)
        run.segs.close()
        info[run.model] = {"ninst": int(state.kernel.ctr[1]), "parts": run.parts,
                           "napi": run.config.model == "napi" and len(p_time) > 0}
        for sp in (run.rows, run.verdicts):
            sp.close()
    return {"k": k, "rows": n, "models": tot.models, "flows": tot.flows,
            "coalesced": coal, "keys": keys,
            "firsts": np.concatenate(firsts) if firsts else np.zeros(0, np.int64),
            "hashes": hashes if check else None, "info": info,
            "tunnels": (tun_rows, tun_at, tun_co) if tunnels else None}


class _Order:
    """Global delivery positions of one partition's super-packets and poll ids of its
    polls, from every partition's delivery table (``run.stream._SegOrder``'s interface:
    ``positions`` in emission order, ``poll_ids``)."""

    def __init__(self, model: str, k: int, works: list, napi: bool):
        load = lambda w: np.load(os.path.join(w, f"{model}.order.npz"))  # noqa: E731
        own = load(works[k])
        self.napi, self.inferred = model == "napi", napi
        self.next = 0
        if napi:
            key = lambda t: np.rec.fromarrays([t["time"], t["queue"]],  # noqa: E731
                                              names="t,q")
            mine = key(own)
            rank_sorted = np.arange(len(mine), dtype=np.int64)
            off_sorted = own["cum"][:-1].copy()
            for j, w in enumerate(works):
                other = load(w) if j != k else None
                if other is None or not len(other.files) or "time" not in other.files:
                    continue
                at = np.searchsorted(key(other), mine)   # (time, queue) never tie across
                rank_sorted += at
                off_sorted += other["cum"][at]
            order = own["order"]
            self.rank = np.empty(len(order), np.int64)
            self.rank[order] = rank_sorted
            self.offset = np.empty(len(order), np.int64)
            self.offset[order] = off_sorted
            self.seen = np.zeros(len(order), np.int64)
        elif not self.napi:
            when = own["when"]
            pos = np.empty(len(when), np.int64)
            pos[own["order"]] = np.arange(len(when))
            for j, w in enumerate(works):
                if j != k:
                    other = load(w)
                    if "sorted" in other.files:
                        pos += np.searchsorted(other["sorted"], when)
            self.pos = pos

    def positions(self, polls: np.ndarray) -> np.ndarray:
        from gropcap.run.stream import _SegOrder
        if self.inferred:
            return _SegOrder.positions(self, polls)
        m = len(polls)
        out = self.pos[self.next:self.next + m] if not self.napi else \
            np.arange(self.next, self.next + m, dtype=np.int64)
        self.next += m
        return out

    def poll_ids(self, polls: np.ndarray) -> np.ndarray:
        if self.inferred:
            return self.rank[polls]
        return polls if self.napi else np.full(len(polls), -1, np.int64)


def _part_writer(stage: str | None, name: str, k: int):
    """``(final path, temporary path)`` of partition ``k``'s part of ``name``."""
    if stage is None:
        return None, None
    d = os.path.join(stage, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"part-{k:05d}.parquet")
    return path, os.path.join(d, f".part-{k:05d}.parquet.tmp")


def write_partition_task(pieces, config, models, split: str, nparts: int, k: int,
                         works: list, info: dict, fmap: np.ndarray, stage: str | None,
                         meta: dict, packet_columns, batch_records: int,
                         tunnels: tuple = ()) -> dict:
    """The output pass of partition ``k`` (module docstring, step 4): super-packets with
    their global delivery positions and the packets with their verdicts, written as
    ``stage/superpackets/part-K.parquet`` and ``stage/packets/part-K.parquet`` (None:
    nothing written); returns ``{"encap": {model: counts}, "causes": (flow ids, total,
    ahead, back)}`` (flow ids global), ``"before"``: per model, its super-packets that
    start at a row of ``tunnels`` (the tunnel hint)."""
    from gropcap.gro.engine import _SEG_FIELDS, _gso_table
    from gropcap.io.columns import readable, readable_names, select_packet_columns
    from gropcap.io.parquet import with_metadata
    from gropcap.run.accumulators import FlowCauses, ModelCounts
    from gropcap.run.stream import _RowCursor, _VerdictCursor, _parquet_options
    work = works[k]
    grows = np.memmap(os.path.join(work, "global.rows"), np.int64, mode="r") \
        if os.path.getsize(os.path.join(work, "global.rows")) else np.zeros(0, np.int64)
    primary = "napi" if "napi" in models else models[0]
    orders, inst_pos = {}, {}
    sp_path, sp_tmp = _part_writer(stage, "superpackets", k)
    sp_writer = None
    for m in models:
        cfg = config.replace(model=m)
        so = _Order(m, k, works, info[m]["napi"])
        # delivery position per instance, -(pos + 1) for one packet (run.stream's map;
        # int64: positions count every partition's super-packets)
        ipos = np.full(info[m]["ninst"], -1, np.int64)
        gtable = _gso_table(cfg)
        segs = _reopen(os.path.join(work, f"{m}.segs"))
        for _ in range(info[m]["parts"]):
            s = dict(zip(_SEG_FIELDS, segs.get(len(_SEG_FIELDS))))
            pos = so.positions(s["poll"])
            if len(pos):
                ipos[s["inst"]] = np.where(s["count"] > 1, pos, -pos - 1)
            if sp_path is None or not len(pos):
                continue
            gso_type = np.zeros(len(pos), np.uint32)
            multi = s["count"] > 1
            gso_type[multi] = gtable[s["gcode"][multi], s["fixed"][multi] & 3]
            tbl = readable(pa.table({
                "seg_id": pos, "flow_id": fmap[s["flow"].astype(np.int64)],
                "first_packet": grows[s["first"]], "last_packet": grows[s["last"]],
                "count": s["count"].astype(np.int32), "payload_len": s["payload"],
                "gso_size": s["gso"].astype(np.int32), "gso_type": gso_type,
                "end_reason": s["end"].astype(np.uint8),
                "rx_queue": s["queue"].astype(np.uint16),
                "poll_id": so.poll_ids(s["poll"]).astype(np.int64),
                "model": pa.array([m] * len(pos), pa.string())}))
            if sp_writer is None:
                sp_writer = pq.ParquetWriter(sp_tmp, with_metadata(tbl.slice(0, 0),
                                                                   meta).schema,
                                             **_parquet_options(tbl.schema))
            sp_writer.write_table(tbl)
        segs.close()
        orders[m], inst_pos[m] = so, ipos
    if sp_writer is not None:
        sp_writer.close()
        os.replace(sp_tmp, sp_path)
    # the packets pass: decoded rows + verdicts (run.stream's pass 4, per partition)
    cursors = {m: (_RowCursor(_reopen(os.path.join(work, f"{m}.rows")), 2),
                   _VerdictCursor(_reopen(os.path.join(work, f"{m}.verdicts"))))
               for m in models}
    seen = {m: np.zeros(info[m]["ninst"], np.bool_) for m in models}
    counts = {m: ModelCounts(m) for m in models}
    before = {m: 0 for m in models}
    causes = FlowCauses()
    pk_path, pk_tmp = _part_writer(stage, "packets", k)
    pk_writer, pk_cols = None, None
    r0 = 0
    from gropcap.run.stream import _kept_columns
    keep = _kept_columns(stage, packet_columns, models)
    if keep is not None:
        keep = sorted(set(keep) | {"file_index", "tun_type", "outer_dport",
                                   "outer_l4_proto"}, key=PACKET_SCHEMA.names.index)
    for t, _ in _partition_batches(pieces, split, nparts, k, batch_records, keep):
        r1 = r0 + t.num_rows
        cols = {}
        for m in models:
            fid, rxq = cursors[m][0].take(t.num_rows)
            reason, inst, poll = cursors[m][1].take(r0, r1)
            code = inst_pos[m][inst].astype(np.int64)
            alone = code < 0
            role = np.where(alone, ROLE_ALONE, ROLE_MERGED).astype(np.uint8)
            multi = np.flatnonzero(~alone)
            _, first_idx = np.unique(inst[multi], return_index=True)
            cand = multi[first_idx]
            role[cand[~seen[m][inst[cand]]]] = ROLE_HEAD
            seen[m][inst[multi]] = True
            counts[m].add_encap(t, role != ROLE_MERGED)
            if tunnels:
                from gropcap.run.hints import tunnel_mask
                before[m] += int(np.count_nonzero(tunnel_mask(t, tunnels) &
                                                  (role != ROLE_MERGED)))
            if m == primary:
                causes.add(fid, t.column("tcp_seq").to_numpy(),
                           t.column("payload_len").to_numpy(),
                           t.column("l4_proto").to_numpy(), reason)
            so = orders[m]
            c = {"flow_id": fmap[fid.astype(np.int64)],
                 "gro_seg": np.where(alone, -code - 1, code), "gro_role": role,
                 "reason": reason.astype(np.uint8), "rx_queue": rxq.astype(np.uint16),
                 "poll_id": (so.rank[poll] if so.inferred else poll).astype(np.int64)}
            if m == primary:
                cols = {**c, **cols}
            else:
                cols.update({f"{m}_{name}": v for name, v in c.items() if name != "flow_id"})
        r0 = r1
        if pk_path is None:
            continue
        for name in ("flow_id", "gro_seg", "gro_role", "reason", "rx_queue", "poll_id"):
            t = t.append_column(name, pa.array(cols.pop(name)))
        for name, v in cols.items():
            t = t.append_column(name, pa.array(v))
        if pk_cols is None:
            pk_cols = select_packet_columns(readable_names(t.column_names), packet_columns)
        t = readable(t, columns=pk_cols)
        if pk_writer is None:
            pk_writer = pq.ParquetWriter(pk_tmp, with_metadata(t.slice(0, 0), meta).schema,
                                         **_parquet_options(t.schema))
        pk_writer.write_table(t)
    if pk_writer is not None:
        pk_writer.close()
        os.replace(pk_tmp, pk_path)
    for c in cursors.values():
        c[0].spill.close()
        c[1].spill.close()
    nloc = len(causes.next_seq)
    return {"encap": {m: mc.encap for m, mc in counts.items()}, "before": before,
            "causes": (fmap[:nloc], causes.total, causes.ahead, causes.back)}


# ---- client side ----

def flow_maps(keys: list, firsts: list) -> list[np.ndarray]:
    """Per partition, its local flow id -> the global id (flows numbered by first
    appearance over the whole capture: keys ranked by their first global row). Raises
    :class:`_Fallback` when a flow occurs in two partitions."""
    spans = [len(k) for k in keys]
    if not sum(spans):
        return [np.zeros(0, np.int64) for _ in keys]
    cat = np.concatenate([k for k in keys if len(k)])
    uniq, inv = np.unique(cat, return_inverse=True)
    if len(uniq) != len(cat):
        raise _Fallback("a flow's rows fall in two partitions")
    first = np.concatenate([f for f, k in zip(firsts, keys) if len(k)])
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    out, off = [], 0
    for s in spans:
        out.append(rank[off:off + s])
        off += s
    return out


def _remap_models(mc, fmap: np.ndarray):
    """``ModelCounts`` of local flow ids -> the same counts under the global ids."""
    from gropcap.run.accumulators import ModelCounts
    out = ModelCounts(mc.model)
    for k in ("reason_hist", "end_hist", "nseg", "largest", "data_segs", "file_segs",
              "file_data_segs", "encap"):
        setattr(out, k, getattr(mc, k))
    if len(mc.flow_segs):
        out.flow_segs = np.zeros(int(fmap.max()) + 1 if len(fmap) else 0, np.int64)
        out.flow_segs[fmap[:len(mc.flow_segs)]] = mc.flow_segs
    f, r = np.divmod(mc.top_keys, 256)
    out._top(fmap[f] * 256 + r if len(f) else f, mc.top_counts)
    return out


def _remap_flows(fc, fmap: np.ndarray):
    """``FlowCounts`` of local flow ids -> the global ids (flows of one partition only)."""
    from gropcap.run.accumulators import FlowCounts
    out = FlowCounts()
    if not fc.n_flows:
        return out
    n = int(fmap.max()) + 1
    out.packets = np.zeros(n, np.int64)
    out.packets[fmap[:len(fc.packets)]] = fc.packets
    out.payload = np.zeros(n, np.float64)
    out.payload[fmap[:len(fc.payload)]] = fc.payload
    out.key_parts = list(fc.key_parts)
    out.key_ids = [fmap[ids] for ids in fc.key_ids]
    out.n_flows = n
    return out


def _merge_flows(parts: list):
    """One ``FlowCounts`` from partitions' remapped ones (no flow in two of them)."""
    from gropcap.run.accumulators import FlowCounts, _add_at
    out = FlowCounts()
    tables, ids = [], []
    for fc in parts:
        out.packets = _add_at(out.packets, fc.packets)
        out.payload = _add_at(out.payload, fc.payload)
        tables += fc.key_parts
        ids += fc.key_ids
        out.n_flows = max(out.n_flows, fc.n_flows)
    if tables:
        ids = np.concatenate(ids)
        order = np.argsort(ids, kind="stable")
        out.key_parts = [pa.concat_tables(tables).take(pa.array(order))]
        out.key_ids = [ids[order]]
    return out


def _check_classes(done: list) -> None:
    """No loose same-flow class (its 64-bit hash) in two partitions, else
    :class:`_Fallback`."""
    hashes = [d["hashes"] for d in done if d["hashes"] is not None and len(d["hashes"])]
    if len(hashes) > 1:
        cat = np.concatenate(hashes)
        if len(np.unique(cat)) != len(cat):
            raise _Fallback("a same-flow class of the ideal model falls in two RX-queue "
                            "partitions")


def _empty_part(stage: str, name: str, models, meta: dict, packet_columns) -> None:
    """A dataset directory with no rows still gets one (empty) part: the schema."""
    from gropcap.io.columns import readable, readable_names, select_packet_columns
    from gropcap.io.parquet import with_metadata
    from gropcap.run.stream import _empty_packets, _empty_superpackets
    if name == "packets":
        primary = "napi" if "napi" in models else models[0]
        t = _empty_packets(models, primary)
        t = readable(t, columns=select_packet_columns(readable_names(t.column_names),
                                                     packet_columns))
    else:
        t = readable(_empty_superpackets())
    d = os.path.join(stage, name)
    os.makedirs(d, exist_ok=True)
    pq.write_table(with_metadata(t, meta), os.path.join(d, "part-00000.parquet"),
                   compression="zstd")


def check_targets(out_dir: str | None, force: bool) -> None:
    """The dataset's targets under ``out_dir`` (and the one-process files they replace)
    checked before any work: existing ones need ``force``."""
    from gropcap.io.parquet import OutputError
    if not out_dir or force:
        return
    for n in (*DATASET_DIRS, FLOWS_FILE, "packets.parquet", "superpackets.parquet"):
        p = os.path.join(out_dir, n)
        if os.path.lexists(p):
            raise OutputError("output exists", path=p, hint="use --force to replace it")


def analyze_partitioned(paths, config=None, *, client=None, jobs=None, scheduler=None,
                        models=MODELS, decode_options=None, out_dir=None,
                        force: bool = False, scratch=None, progress=None, receiver=None,
                        receive=None, packet_columns="default", batch_records: int = 65536,
                        split_bytes=None, fallback=None):
    """Analyse captures on Dask with the bounded-memory core per partition (module
    docstring): a :class:`PartitionedResult` whose summary equals the one-process run's;
    with ``out_dir``, ``packets/part-*.parquet``, ``superpackets/part-*.parquet`` and
    ``flows.parquet`` there, the same rows as the one-process files.

    When the workers share no scratch directory with this process, or the data needs
    it (a flow or an ideal-model same-flow class in two RX-queue partitions),
    ``fallback(client, why)`` runs instead (the caller's in-memory Dask merge) and its
    result is returned.
    """
    import shutil

    from gropcap.analysis import Analysis
    from gropcap.receive.context import ReceiveContext
    from gropcap.run.accumulators import Totals
    from gropcap.run.distributed import (BATCH_RECORDS, SPLIT_BYTES, _decode_all,
                                         _merged_capture, _nparts, _nworkers,
                                         _result_or_retry, _scratch_dir, open_client)
    from gropcap.run.inputs import input_files
    from gropcap.run.summary import render_summary
    from gropcap.run.options import run_options
    config, decode_options, models = run_options(config, decode_options, models)
    files = input_files(paths)
    check_targets(out_dir, force)
    split_model = "napi" if "napi" in models else models[0]
    with open_client(client, jobs=jobs, scheduler=scheduler) as c:
        try:
            with _scratch_dir(c, scratch) as tmp:
                if tmp is None:
                    raise _Fallback("the workers share no scratch directory")
                scfg = config.replace(model=split_model)
                nparts = _nparts(scfg, _nworkers(c))
                split = "joint"
                decoded, infos, failures = _decode_all(
                    c, files, decode_options, "fast",
                    SPLIT_BYTES if split_bytes is None else split_bytes, BATCH_RECORDS,
                    tmp, progress, ((split, scfg, nparts),) if nparts > 1 else ())
                n = sum(p.rows for d in decoded for p in d.pieces)
                capture = _merged_capture(decoded)
                capture.verify = config.verify_checksums
                stats = None
                for d in decoded:
                    for p in d.pieces:
                        stats = p.stats if stats is None else stats.merge(p.stats)
                if stats is not None:
                    stats.set_mtu(config.mtu).mtu_inference()
                stats_arg = c.scatter(stats, hash=False) if stats is not None and \
                    stats.num else None
                pieces = [(p.ref, d.index, d.new_index, p.offset)
                          for d in decoded for p in d.pieces]
                works = [os.path.join(tmp, f"core-{k}") for k in range(nparts)]
                check = nparts > 1 and split_model == "napi" and "ideal" in models
                from gropcap.run.stream import _TunnelHint
                hint = _TunnelHint(capture.udp_tunnels, config, models)
                tasks = []
                for k in range(nparts):
                    args = (pieces, config, tuple(models), split, nparts, k, stats_arg,
                            works[k], n, batch_records, check,
                            hint.pairs if hint.collect else ())
                    tasks.append((c.submit(gro_partition_task, *args, pure=False), args))
                if progress is not None:
                    progress.track(f"GRO {'+'.join(models)}", [f for f, _ in tasks])
                done = [_result_or_retry(c, f, gro_partition_task, *a)[0] for f, a in tasks]
                _check_classes(done)
                fmaps = flow_maps([d["keys"] for d in done], [d["firsts"] for d in done])
                tot = Totals(models, config.verify_checksums)
                tot.capture = capture
                for d, fmap in zip(done, fmaps):
                    for m, mc in d["models"].items():
                        tot.models[m].merge(_remap_models(mc, fmap))
                    if d["coalesced"] is not None:
                        tot.coalesced = d["coalesced"] if tot.coalesced is None else \
                            tot.coalesced.merge(d["coalesced"])
                if stats is not None and stats.num and tot.coalesced is None:
                    from gropcap.run.accumulators import CoalescedCounts
                    tot.coalesced = CoalescedCounts()
                tot.flows = _merge_flows([_remap_flows(d["flows"], f)
                                          for d, f in zip(done, fmaps)])
                from gropcap.gro.coalesced import CoalescedStats
                mtu = (stats or CoalescedStats(config.mtu)).mtu_inference()
                meta_of = Analysis(PACKET_SCHEMA.empty_table(), infos, config,
                                   {m: None for m in models}, decode_options)
                meta_of.mtu = mtu
                meta_of.receiver = receiver
                meta = meta_of.metadata()
                stage = None
                if out_dir:
                    # beside the targets (same file system: renamed, not copied); the
                    # workers see it as they see the scratch directory
                    import tempfile
                    os.makedirs(out_dir, exist_ok=True)
                    stage = tempfile.mkdtemp(prefix=".gropcap-parts-", dir=out_dir)
                    os.chmod(stage, 0o755)
                wtasks = []
                for k, (d, fmap) in enumerate(zip(done, fmaps)):
                    args = (pieces, config, tuple(models), split, nparts, k, works,
                            d["info"], fmap, stage, meta, packet_columns, batch_records,
                            hint.pairs)
                    wtasks.append((c.submit(write_partition_task, *args, pure=False),
                                   args))
                if progress is not None:
                    progress.track("packets.parquet" if out_dir else "verdicts",
                                   [f for f, _ in wtasks])
                wrote = [_result_or_retry(c, f, write_partition_task, *a)[0]
                         for f, a in wtasks]
                from gropcap.run.accumulators import FlowCauses
                causes = FlowCauses()
                causes._grow(tot.flows.n_flows)
                for w in wrote:
                    for m, enc in w["encap"].items():
                        _merge_encap(tot.models[m], enc)
                        hint.before[m] += w["before"][m]
                    ids, total, ahead, back = w["causes"]
                    for name, v in (("total", total), ("ahead", ahead), ("back", back)):
                        getattr(causes, name)[ids] += v[:len(ids)]
                summary = render_summary(tot, infos=infos, config=config, mtu=mtu,
                                         receive=receive or ReceiveContext.from_config(config))
                tunnel_hint = _finish_hint(hint, done, summary, tot, decoded, stats)
                if failures:
                    summary["failed_inputs"] = [f.as_dict() for f in failures]
                flows = tot.flows_table()
                written = []
                if out_dir:
                    from gropcap.io.parquet import summary_metadata, write_table
                    for name in DATASET_DIRS:
                        if not os.path.isdir(os.path.join(stage, name)) or \
                                not os.listdir(os.path.join(stage, name)):
                            _empty_part(stage, name, models, meta, packet_columns)
                    write_table(flows, os.path.join(stage, FLOWS_FILE),
                                {**meta, **summary_metadata(summary)}, force=True)
                    for name in (*DATASET_DIRS, FLOWS_FILE):
                        dst = os.path.join(out_dir, name)
                        _remove(dst)
                        os.replace(os.path.join(stage, name), dst)
                        written.append(dst)
                    for name in ("packets.parquet", "superpackets.parquet"):
                        _remove(os.path.join(out_dir, name))   # a one-process run's
        except _Fallback as why:
            if fallback is None:
                raise
            return fallback(c, str(why))
        finally:
            if locals().get("stage"):
                shutil.rmtree(stage, ignore_errors=True)
    return PartitionedResult(summary=summary, flows=flows, paths=written, metadata=meta,
                             totals=tot, flow_causes=causes.result(flows.num_rows),
                             udp_tunnel_hint=tunnel_hint, failures=failures)


def _finish_hint(hint, done: list, summary: dict, tot, decoded: list, stats):
    """``report.receive.tunnel_hint`` of the run (None without one): the partitions'
    tunnel rows in capture order for the ideal model, the whole decoded table (small by
    ``HINT_NAPI_MAX_ROWS``) read back from the scratch pieces for the napi model."""
    if hint.hint is None:
        return None
    from gropcap.run.distributed import file_table
    if hint.collect:
        got = [d["tunnels"] for d in done if d["tunnels"] is not None]
        tables = [t for g in got for t in g[0]]
        at = np.concatenate([a for g in got for a in g[1]]) if tables else \
            np.zeros(0, np.int64)
        order = np.argsort(at, kind="stable")
        hint.rows = [pa.concat_tables(tables).take(pa.array(order))] if tables else []
        cos = [c for g in got for c in g[2]]
        hint.co = [None] if not cos or any(c is None for c in cos) else \
            [tuple(np.concatenate([c[i] for c in cos])[order] for i in range(4))]

    def whole():
        tables = [file_table(d.kind, [p.ref for p in d.pieces], d.index, d.new_index)
                  for d in decoded]
        table = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
        co = stats.infer(table) if stats is not None and stats.num else None
        return table, (co if co is not None and co.num_coalesced else None)
    seg_in = tot.coalesced.segs_total if tot.coalesced else tot.capture.packets
    return hint.finish(summary["models"], seg_in, tot.capture.packets, whole)


def _merge_encap(mc, enc: dict) -> None:
    from gropcap.run.accumulators import _merge_dicts
    mc.encap = _merge_dicts(mc.encap, enc)


def _remove(path: str) -> None:
    import shutil
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


__all__ = ["analyze_partitioned", "partitioned_reason", "PartitionedResult",
           "gro_partition_task", "write_partition_task", "flow_maps", "DATASET_DIRS"]
