"""The tasks of the core per partition (``run.dask_core``), run on Dask workers.

:func:`gro_partition_task`: one GRO partition's rows through the bounded-memory core
(``run.engines.BatchGroModels``, ``run.stream``'s spills), its accumulators and its
delivery table; :func:`write_partition_task`: the partition's super-packets placed in
the global delivery order (:class:`_Order`) and its ``packets`` / ``superpackets``
Parquet parts. Module-level functions, so Dask pickles them by reference.

Layer: run/, below run/dask_core.py (which submits them and merges their results).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from gropcap.arrays import arrow_repeated, arrow_table
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.run.stream import _FirstRows, _verdict_columns, _with_model


def _partition_batches(pieces, split: str, nparts: int, k: int, batch_records: int,
                       columns=None):
    """Partition ``k``'s rows in capture order as ``(table, global_rows)`` batches (about
    ``batch_records`` rows: each slice of ``batch_records * nparts`` piece rows filtered
    to the partition's, 10x cheaper than a ``take`` over the whole piece), from the
    scratch pieces ``(path, index, new_index, offset)`` (mapped: only the rows kept are
    copied); ``columns``: only those (None: all). A piece may carry a window of global
    rows, ``(path, index, new_index, offset, lo, hi)``: only its rows ``lo <= row < hi``
    (a time piece of the core per partition, :func:`time_windowed`)."""
    from gropcap.run.distributed import _renumber_file, _table_of
    step = batch_records * max(1, nparts)
    for path, index, new_index, offset, *window in pieces:
        table = _table_of(path)
        if not table.num_rows:
            continue
        start, stop = 0, table.num_rows
        if window:
            start, stop = max(0, window[0] - offset), min(stop, window[1] - offset)
        if columns is not None:
            table = table.select(columns)
        part = None
        if nparts > 1:
            with pa.memory_map(f"{path}.{split}.part") as src:
                part = pa.ipc.open_file(src).read_all().column("part").to_numpy()
        for lo in range(start, stop, step):
            t = table.slice(lo, min(step, stop - lo))
            if part is None:
                rows = np.arange(lo, lo + t.num_rows, dtype=np.int64)
            else:
                # k // nparts: its receiver run (or time piece)
                mine = part[lo:lo + t.num_rows] == k % nparts
                rows = np.flatnonzero(mine) + lo
                if not len(rows):
                    continue
                t = t.filter(pa.array(mine))
            if index != new_index and "file_index" in t.column_names:
                t = _renumber_file(t, new_index)
            yield t, rows + offset


def time_windowed(pieces: list, bounds) -> list[list]:
    """The scratch pieces of one receiver run (``(path, index, new_index, offset, rows)``
    with its row count last) cut into time pieces at ``bounds`` (global rows: 0, the
    cuts, the run's rows): per piece of time, the pieces with rows in it, each with its
    window of global rows (:func:`_partition_batches`)."""
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out.append([(path, index, new_index, offset, int(lo), int(hi))
                    for path, index, new_index, offset, rows in pieces
                    if offset < hi and offset + rows > lo])
    return out


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
    from gropcap.gro.coalesced import _mix_words
    return _mix_words(words)


def _reopen(path: str):
    """A ``arrays.ArraySpill`` written by another task, opened for reading."""
    from gropcap.arrays import ArraySpill
    return ArraySpill.reopen(path)


def gro_partition_task(pieces, config, models, split: str, nparts: int, k: int, stats,
                       work: str, n_total: int, batch_records: int, check: bool,
                       tunnels: tuple = (), egress=None, acks=None,
                       plot: bool = False) -> dict:
    """GRO of partition ``k`` through the bounded-memory core (module docstring, step 2);
    spills and delivery tables go to ``work``, and so do its per-flow results
    (``run.spill.save_partition_flows``: flows-table rows, first rows, keys and, with
    ``check``, the loose-class hashes of its rows). Returns the partition's accumulators
    without their per-flow parts, its flows (``nflows``), and the
    rows of the UDP tunnels ``tunnels`` (``(kind, port)`` pairs without a socket: the
    tunnel hint runs them again) with their global rows and coalesced input."""
    batches = _partition_batches(pieces, split, nparts, k, batch_records)
    return _gro_core(((t, g, tunnels) for t, g in batches), config, models, stats, work,
                     lambda: n_total, check, bool(tunnels), k=k, nparts=nparts,
                     egress=egress, acks=acks, plot=plot)


def _gro_core(batches, config, models, stats, work: str, n_total, check: bool,
              collect: bool, keep=None, local_pass: bool = False, k: int = 0,
              nparts: int = 1, egress=None, acks=None, plot: bool = False) -> dict:
    """The GRO of one partition's ``(table, global_rows, tunnel pairs)`` batches (capture
    order) for :func:`gro_partition_task` and :func:`fused_partition_task`; ``n_total()``:
    the capture's rows (asked once the batches are done); ``collect``: keep the rows of
    each batch's tunnel pairs (the tunnel hint); ``keep``: columns of the partition's rows
    written to ``work/rows.arrow`` for the output pass (None: none); ``local_pass``: run
    the output pass's counts here on them (the summary-only fused run: ``"local"``);
    ``k``, ``nparts``: the partition and the partitions per receiver run (the run,
    ``k // nparts``, leads the delivery key); ``egress``: the ``run.options.EgressOptions``
    to count (``ModelCounts.egress``, additive over partitions) or None; ``acks``:
    ``(path, row offset)`` of ``--poll-acks``' retimed arrivals (:func:`ack_task`: one
    int64 per row of the capture; a batch's global rows plus the offset index it), which
    the napi model reads instead of the capture's times, or None; ``plot``: keep what
    ``--plot`` draws in ``work`` (``run.plotdata.PlotParts``: the super-packets per
    (flow, end reason) key, and the local pass's rows)."""
    from gropcap.run.accumulators import CoalescedCounts, Totals, _add_at
    from gropcap.run.engines import BatchGroModels
    from gropcap.run.stream import _ModelRun
    from gropcap.run.stream import RowCodes
    work = _attempt_dir(work)
    tot = Totals(models, config.verify_checksums,
                 egress=None if egress is None else (egress, config.kernel.version))
    # egress reads each super-packet's first packet: 8 bytes a partition row (RowCodes)
    egress_rows = None if egress is None else \
        RowCodes(os.path.join(work, "egress.rows"), egress.scenario)
    # summary only (local_pass): the packets pass's counts in this pass, batch by batch
    # (run.stream._Inline), nothing spilled and nothing read back
    runs = [_ModelRun(m, config, work, tot.models[m], egress_rows=egress_rows,
                      inline=local_pass) for m in models]
    retimed = None
    if acks is not None:
        # --poll-acks: the engine reads the retimed arrivals, the rest the capture's
        # times; the napi model's polls from them (receive/ackpolls.py)
        from gropcap.receive.ackpolls import engine_config
        retimed = np.memmap(acks[0], np.int64, mode="r")
        for run in runs:
            if run.model == "napi":
                run.config = engine_config(run.config)
    gro = BatchGroModels([r.config for r in runs])
    coal = CoalescedCounts() if stats is not None and stats.num else None
    ideal_cfg = config.replace(model="ideal")
    file_rows = np.zeros(0, np.int64)
    firsts, hashes = [], np.zeros(0, np.uint64)  # (int64 would make union1d float)
    # each partition row's global row, for the delivery table (not in a local pass)
    rows_out = None if local_pass else open(os.path.join(work, "global.rows"), "wb")
    kept = None
    packets = plots = None
    if local_pass:
        from gropcap.run.accumulators import FlowCauses, ModelCounts
        from gropcap.run.hints import missing_pairs
        from gropcap.run.stream import _Inline
        if plot:
            from gropcap.run.plotdata import PlotRows
            plots = PlotRows(work, models)
        primary = "napi" if "napi" in models else models[0]
        pairs = _PairFirsts(lambda t: missing_pairs(t, config), models)
        packets = _Inline(runs, primary, FlowCauses(), plots, pairs,
                          encap={m: ModelCounts(m) for m in models})
    n = 0
    tun_rows, tun_at, tun_co = [], [], []
    from gropcap.run.hints import HINT_MAX_ROWS
    n_tun = 0

    def file_of(rows):
        return np.searchsorted(np.cumsum(file_rows), rows, side="right")

    def take(parts):
        for run, part in zip(runs, parts):
            run.take(part, file_of=file_of)
    for t, grows, tunnels in batches:
        if rows_out is not None:
            grows.astype(np.int64).tofile(rows_out)
        file_rows = _add_at(file_rows, np.bincount(
            t.column("file_index").to_numpy().astype(np.int64)))
        co = stats.infer(t) if coal is not None else None
        if co is not None:
            coal.add(t, co)
        before = tot.flows.n_flows
        tg = t
        if retimed is not None and t.num_rows:
            from gropcap.run.stream import with_arrivals
            tg = with_arrivals(t, retimed[np.asarray(grows, np.int64) + acks[1]])
        parts = gro.feed(tg, final=False, coalesced=co)
        if egress_rows is not None:
            egress_rows.add(t)
        take(parts)
        if packets is not None:
            if plots is not None:
                plots.add_packets(t)
            packets.batch(t, parts[models.index(packets.primary)].flow_id)
        fid = parts[0].flow_id.astype(np.int64)
        tot.flows.add(t, fid)
        new = np.flatnonzero(fid >= before)
        if len(new):
            _, first = np.unique(fid[new], return_index=True)
            firsts.append(grows[new[first]])
        if check:
            hashes = np.union1d(hashes, _class_hash(t, ideal_cfg))
        if collect and tunnels and n_tun <= HINT_MAX_ROWS:
            # (a task over the limit: so is the capture, the hint runs no model)
            from gropcap.run.hints import tunnel_mask
            idx = np.flatnonzero(tunnel_mask(t, tunnels))
            n_tun += len(idx)
            tun_rows.append(t.take(pa.array(idx)))
            tun_at.append(grows[idx])
            tun_co.append(None if co is None else
                          (co.is_gso[idx], co.gso_size[idx], co.segs[idx], co.source[idx]))
        if keep is not None and not local_pass:
            kept = _keep_rows(kept, os.path.join(work, "rows.arrow"), t.select(keep))
        n += t.num_rows
    take(gro.feed(PACKET_SCHEMA.empty_table(), final=True))
    if packets is not None:
        packets.drain(final=True)
    if rows_out is not None:
        rows_out.close()
    if egress_rows is not None:
        egress_rows.close()
        os.unlink(egress_rows.path)
    if kept is not None:
        kept[1].close()
        kept[0].close()
    n_total = n_total()
    states = gro.states or []
    kt = states[0].flow_ids if states else None
    keys = np.zeros(0, np.uint64) if kt is None or kt.sorted_keys is None else \
        kt.sorted_keys
    # global row of each partition row, read back mapped (not held)
    grows = np.memmap(os.path.join(work, "global.rows"), np.int64, mode="r") \
        if n and not local_pass else np.zeros(0, np.int64)
    info = {}
    for run, ninst in zip(runs, gro.instances()):
        p_time = np.concatenate(run.poll_time) if run.poll_time else np.zeros(0, np.int64)
        # nseg, npolls: what a later receiver run's positions and poll ids start after
        info[run.model] = {"ninst": ninst, "parts": run.parts,
                           "napi": run.config.model == "napi" and len(p_time) > 0,
                           "nseg": run.nseg, "npolls": len(p_time)}
        for sp in (run.rows, run.verdicts):
            sp.close()
        if local_pass:
            continue            # no write task reads a delivery table
        # the delivery table of this partition (read by every write task), from one
        # sweep over the spilled super-packets
        p_queue = np.concatenate(run.poll_queue) if run.poll_queue else \
            np.zeros(0, np.int64)
        napi = run.config.model == "napi"
        nseg = np.zeros(len(p_time), np.int64)
        whens = []
        run.segs.rewind()
        for _ in range(run.parts):
            s = run.segs.get_segs()
            if napi and len(p_time) and len(s["poll"]):
                nseg += np.bincount(s["poll"].astype(np.int64), minlength=len(p_time))
            elif not napi and len(s["trig"]):
                trig, first = s["trig"].astype(np.int64), s["first"].astype(np.int64)
                # run after run (run // nparts leads), a run's end flush after its rows
                whens.append((k // nparts) * 2 * n_total + np.where(
                    trig >= 0, grows[np.maximum(trig, 0)], n_total + grows[first]))
        table = {}
        if napi and len(p_time):
            order = np.lexsort((np.arange(len(p_time)), p_queue, p_time))
            table = {"run": np.full(len(order), k // nparts, np.int64),
                     "time": p_time[order].astype(np.int64),
                     "queue": p_queue[order].astype(np.int64),
                     "cum": np.concatenate([[0], np.cumsum(nseg[order])]), "order": order}
        elif not napi:
            when = np.concatenate(whens) if whens else np.zeros(0, np.int64)
            order = np.lexsort((np.arange(len(when)), when))
            table = {"when": when, "sorted": when[order], "order": order}
        _save_ints(os.path.join(work, f"{run.model}.order"), table)
        run.segs.close()
    local = {}
    from gropcap.run.spill import CAUSES, causes_table, save_partition_flows, write_ipc
    nflows = tot.flows.n_flows
    if packets is not None:
        # summary only: the output pass's counts, taken in the pass (no write task)
        if plots is not None:
            plots.close()
        write_ipc(os.path.join(work, CAUSES), causes_table(packets.causes, nflows))
        local = {"local": {"encap": {m: mc.encap for m, mc in packets.encap.items()},
                           "before": packets.tunnels.before}}
    # the per-flow results stay here, in files the client reads a slice at a time
    # (run.spill): the flows-table rows (each flow's counts, super-packets and most
    # frequent end reason per model: a flow is in one partition only), first rows, keys
    save_partition_flows(work, tot.flows.table(tot.models),
                         np.concatenate(firsts) if firsts else np.zeros(0, np.int64),
                         keys, hashes if check else None)
    from gropcap.arrays import write_array
    for m, mc in tot.models.items():
        # (flow, end reason) keys, this partition's flow ids: what --plot bins, and what
        # a flow's most frequent end reason is summed from when time pieces share flows
        # (run.spill.merged_flow_rows)
        write_array(os.path.join(work, f"top-{m}.npy"),
                    np.stack([mc.top_keys, mc.top_counts]))
        mc.drop_flows()
    return {"k": k, "work": work, "rows": n, "models": tot.models, "nflows": nflows,
            "coalesced": coal, "info": info,
            "tunnels": (tun_rows, tun_at, tun_co) if collect else None, **local}


class _PairFirsts:
    """The tunnel hint's super-packets of a partition's inline packets pass
    (``run.stream._Inline``'s ``tunnels``): per model the rows that start one and are
    UDP tunnels of ``pairs_of(table)`` (the batch's tunnels without a socket)."""

    def __init__(self, pairs_of, models):
        self.pairs_of = pairs_of
        self.before = {m: 0 for m in models}
        self._last = (None, ())

    def firsts(self, t: pa.Table, model: str, first: np.ndarray) -> None:
        from gropcap.run.stream import _tunnel_firsts
        if self._last[0] is not t:          # once per batch, not per model
            self._last = (t, self.pairs_of(t))
        self.before[model] += _tunnel_firsts(t, self._last[1], first)


def _keep_rows(kept, path: str, t: pa.Table):
    """Append ``t`` to the partition's kept rows at ``path`` (Arrow IPC stream, lz4, each
    batch with its own ``encap`` dictionary, as ``run.stream`` keeps them); ``kept``:
    ``(sink, writer)`` once open."""
    if kept is None:
        sink = pa.OSFile(path, "wb")
        kept = (sink, pa.ipc.new_stream(sink, t.schema,
                                        options=pa.ipc.IpcWriteOptions(compression="lz4")))
    kept[1].write_table(t)
    return kept


def _kept_batches(path: str):
    """The tables :func:`_keep_rows` wrote, in order (read, not mapped)."""
    if not os.path.exists(path):
        return
    with pa.OSFile(path, "rb") as src:
        for b in pa.ipc.open_stream(src):
            yield pa.Table.from_batches([b])


# a fused task decodes batches of at most this many times batch_records records
FUSED_BATCH_PARTS = 4


def ack_task(files, decode_options, batch_records: int, work: str, config,
             captures: str, decoder: str = "fast") -> str | None:
    """``--poll-acks``' pass over the whole capture before GRO, as one task
    (``run.stream._ack_times``, bounded memory): the path of the retimed arrivals, one
    int64 per row of the capture in ``work`` (every GRO task maps it), or None when no
    ACK closes a frame (the gap rule stays)."""
    from gropcap.run.distributed import mkdir_in_place
    from gropcap.run.stream import _ack_times
    mkdir_in_place(work)
    timed = _ack_times(files, decode_options, batch_records, work, config, captures,
                       decoder=decoder)
    if timed is None:
        return None
    path = timed.filename
    del timed
    return path


def fused_partition_task(files, decode_options, config, models, split_config, nparts: int,
                         k: int, stats, work: str, batch_records: int, check: bool,
                         keep, local_pass: bool, first_index: int = 0,
                         count: bool = True, tunnels: tuple | None = None,
                         egress=None, acks=None, plot: bool = False,
                         decoder: str = "fast") -> dict:
    """Partition ``k`` decoded and replayed in one task, nothing exchanged (the fused
    exchange, ``run.dask_core``): every input decoded batch by batch as one process
    decodes it (``run.inputs.decode_file``), each row's partition computed
    (``engine.partition_of`` of ``split_config``, as the decode tasks of the exchange
    compute it), the partition's rows through :func:`_gro_core`.

    ``stats`` None (the first try): the task also counts its own rows
    (``CaptureCounts``, ``gso.CoalescedStats``: additive per row, a TCP direction in one
    partition; merged on the client) and returns them with the files' ``CaptureInfo`` s;
    if a row is coalesced input for certain (a mark, or above a given MTU) GRO stops
    there (``"stopped"``: the client runs the task again with the merged statistics).
    ``keep``: the columns the output pass reads, kept in ``work/rows.arrow``;
    ``local_pass``: that pass runs here (summary only). Returns :func:`_gro_core`'s dict
    plus ``"counts"``, ``"stats"``, ``"infos"`` (a plain file's ``digest`` left empty: the
    client hashes it), ``"total"`` (rows of every partition),
    ``"timings"`` (wall seconds, ``decode``: decode, partition and counting; ``gro``: the
    rest; ``cpu``: the task's CPU seconds, every thread).

    ``first_index``: the ``file_index`` of ``files[0]`` (a receiver run's files of a
    longer input list, ``run.dask_core``'s runs exchange: its rows are numbered from 0
    within the run); ``count=False``: the client has the counts and the statistics
    already (:func:`scan_task`), the task does not count. ``tunnels``: the UDP tunnels
    whose rows the tunnel hint needs (``(kind, port)`` pairs; empty: none, the hint has
    too many to run a model on; None: each batch's tunnels without a socket).
    ``decoder``: ``"fast"`` or ``"reference"`` (``run.inputs.decode_file``)."""
    import time

    from gropcap.gro.coalesced import CoalescedStats
    from gropcap.gro.engine import partition_of
    from gropcap.run.accumulators import CaptureCounts
    from gropcap.run.hints import missing_pairs
    from gropcap.run.inputs import decode_file
    clock = time.perf_counter
    counting = stats is None and count
    counts = CaptureCounts(config.verify_checksums) if counting else None
    own = CoalescedStats(config.mtu) if counting else None
    infos, state = [], {"total": 0, "coalesced": False, "decode": 0.0}
    times = {}

    def batches():
        for i, path in enumerate(files):
            t0 = clock()
            # the client hashes the files (once, not once per partition)
            # batches of batch_records * P records: the partition's share is about a
            # batch of one process (GRO's per-batch work and the output's per-batch
            # dictionaries, e.g. the address texts, as one process pays them)
            gen = decode_file(path, first_index + i, decode_options, decoder=decoder,
                              batch_records=batch_records * min(nparts, FUSED_BATCH_PARTS),
                              digest=False)
            while True:
                try:
                    t = pa.Table.from_batches([next(gen)])
                except StopIteration as stop:
                    infos.append(stop.value)
                    break
                g0 = state["total"]
                state["total"] += t.num_rows
                if counting and t.num_rows:
                    # each file's first and latest timestamp over all its rows (the
                    # receiver runs), not only this partition's
                    ts = t.column("ts_ns").to_numpy()
                    if i not in times:
                        times[i] = [int(ts[0]), int(ts.max())]
                    times[i][1] = max(times[i][1], int(ts.max()))
                if nparts > 1:
                    mine = partition_of(t, split_config, nparts) == k
                    rows = np.flatnonzero(mine) + g0
                    t = t.filter(pa.array(mine))
                else:
                    rows = np.arange(g0, g0 + t.num_rows, dtype=np.int64)
                if counting:
                    counts.add(t)
                    own.add(t)
                    if not state["coalesced"] and _surely_coalesced(own, t, config.mtu):
                        state["coalesced"] = True
                state["decode"] += clock() - t0
                if not state["coalesced"] and t.num_rows:
                    yield t, rows, (missing_pairs(t, config) if tunnels is None
                                    else tunnels)
                t0 = clock()
            state["decode"] += clock() - t0
    t_start, cpu = clock(), time.process_time()
    out = _gro_core(batches(), config, models, stats, work, lambda: state["total"], check,
                    tunnels is None or bool(tunnels), keep,
                    local_pass and not state["coalesced"], k=k, nparts=nparts,
                    egress=egress, acks=acks, plot=plot)
    if counting:
        # the statistics per TCP direction stay in the attempt's directory: the client
        # merges paths, not directions (gro.coalesced.CoalescedStats.spill)
        own.spill(os.path.join(out["work"], "coalesced"))
        from gropcap.run.receivers import NO_TS
        first = np.full(first_index + len(files), NO_TS, np.int64)
        top = np.full(first_index + len(files), NO_TS, np.int64)
        for i, (a, b) in times.items():
            first[first_index + i], top[first_index + i] = a, b
        counts.file_first_ts, counts.file_max_ts = first, top
    out.update(counts=counts, stats=own, infos=infos, total=state["total"],
               stopped=state["coalesced"],
               timings={"decode": state["decode"],
                        "gro": clock() - t_start - state["decode"],
                        "cpu": time.process_time() - cpu})
    return out


def _surely_coalesced(stats, t: pa.Table, mtu) -> bool:
    """A row of ``t`` is coalesced input whatever the rest of the capture says: marked
    (``CoalescedStats.hard``), or a TCP data frame above the MTU given."""
    if stats.hard:
        return True
    if mtu is None:
        return False
    data, _, tot = stats._marks(t)
    return bool((data & (tot > mtu)).any())


def scan_task(path: str, index: int, decode_options, config, batch_records: int,
              work: str | None = None, decoder: str = "fast") -> dict:
    """The first pass of the runs exchange (``run.dask_core``) over one input file: decode
    it and count what the client needs before any GRO runs: the ``CaptureCounts`` (each
    file's timestamps: the receiver runs), the ``gso.CoalescedStats`` (the MTU and the
    coalesced input, merged over every file) and the file's ``CaptureInfo`` (digest
    included: the provenance every part carries). Returns ``{"counts", "stats", "info",
    "rows"}``; the statistics per TCP direction stay in a directory of this attempt under
    ``work`` (the scratch: ``CoalescedStats.spill``) when given."""
    from gropcap.gro.coalesced import CoalescedStats
    from gropcap.run.accumulators import CaptureCounts
    from gropcap.run.inputs import decode_file
    counts = CaptureCounts(config.verify_checksums)
    stats = CoalescedStats(config.mtu)
    gen = decode_file(path, index, decode_options, batch_records=batch_records,
                      decoder=decoder)
    rows = 0
    while True:
        try:
            t = pa.Table.from_batches([next(gen)])
        except StopIteration as stop:
            info = stop.value
            break
        counts.add(t)
        stats.add(t)
        rows += t.num_rows
    if work is not None:
        stats.spill(os.path.join(_attempt_dir(work), "coalesced"))
    return {"counts": counts, "stats": stats, "info": info, "rows": rows}


def _save_ints(prefix: str, table: dict) -> None:
    """A partition's delivery table for the other tasks: each array as raw int64
    (``prefix.<name>.i64``) and the names in ``prefix.names`` (no pickle, no np.load)."""
    for name, a in table.items():
        np.ascontiguousarray(a, dtype=np.int64).tofile(f"{prefix}.{name}.i64")
    with open(f"{prefix}.names", "w", encoding="ascii") as f:
        f.write("\n".join(table))


def _load_ints(prefix: str) -> dict:
    """What :func:`_save_ints` wrote."""
    with open(f"{prefix}.names", encoding="ascii") as f:
        names = [n for n in f.read().split("\n") if n]
    return {n: np.fromfile(f"{prefix}.{n}.i64", dtype=np.int64) for n in names}


class _Order:
    """Global delivery positions of one partition's super-packets and poll ids of its
    polls, from every partition's delivery table (``run.stream._SegOrder``'s interface:
    ``positions`` in emission order, ``poll_ids``)."""

    def __init__(self, model: str, k: int, works: list, napi: bool, seg_base: int = 0,
                 poll_base: int = 0):
        load = lambda w: _load_ints(os.path.join(w, f"{model}.order"))  # noqa: E731
        own = load(works[k])
        self.napi, self.inferred = model == "napi", napi
        self.next = 0
        # the super-packets and polls of the receiver runs before ``works``' (the runs
        # exchange: each run's tasks know only their own run's partitions)
        self.seg_base, self.poll_base = seg_base, poll_base
        if napi:
            # receiver run, then time and queue (engine.assemble's order)
            key = lambda t: np.rec.fromarrays([t["run"], t["time"], t["queue"]],  # noqa
                                              names="r,t,q")
            mine = key(own)
            rank_sorted = np.arange(len(mine), dtype=np.int64)
            off_sorted = own["cum"][:-1].copy()
            for j, w in enumerate(works):
                other = load(w) if j != k else None
                if other is None or "time" not in other:
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
                    if "sorted" in other:
                        pos += np.searchsorted(other["sorted"], when)
            self.pos = pos

    def positions(self, polls: np.ndarray) -> np.ndarray:
        from gropcap.run.stream import _SegOrder
        if self.inferred:
            return self.seg_base + _SegOrder.positions(self, polls)
        m = len(polls)
        out = self.pos[self.next:self.next + m] if not self.napi else \
            np.arange(self.next, self.next + m, dtype=np.int64)
        self.next += m
        return self.seg_base + out

    def poll_ids(self, polls: np.ndarray) -> np.ndarray:
        if self.inferred:
            return self.poll_base + self.rank[polls]
        return polls if self.napi else np.full(len(polls), -1, np.int64)


def _attempt_dir(work: str) -> str:
    """A fresh directory under ``work`` for one attempt of a GRO task: a task re-run
    after its worker died (or a recomputation of a result lost with one) never reads,
    truncates or appends to the files of another attempt; the client reads the
    directory the attempt it got a result from returns."""
    import tempfile

    from gropcap.run.distributed import mkdir_in_place
    return tempfile.mkdtemp(prefix="attempt-", dir=mkdir_in_place(work))


# under the stage directory, beside the dataset directories: the parts being written
STAGE_TMP = ".tmp"


def _part_writer(stage: str | None, name: str, k: int):
    """``(final path, temporary path)`` of partition ``k``'s part of ``name``: written
    under a name of this attempt's own in ``stage/.tmp`` (never in the dataset directory,
    which then only ever holds complete parts) and renamed into place. The client made
    both directories; when they are gone (the run ended) opening the part fails instead
    of recreating them."""
    if stage is None:
        return None, None
    import uuid
    path = os.path.join(stage, name, f"part-{k:05d}.parquet")
    return path, os.path.join(stage, STAGE_TMP,
                              f"{name}-{k:05d}-{os.getpid()}-{uuid.uuid4().hex}.parquet")


def write_partition_task(pieces, config, models, split: str, nparts: int, k: int,
                         works: list, info: dict, stage: str | None,
                         meta: dict, packet_columns, batch_records: int,
                         tunnels: tuple = (), bases: dict | None = None,
                         plot: bool = False, cells_dir: str | None = None) -> dict:
    """The output pass of partition ``k`` (module docstring, step 4): super-packets with
    their global delivery positions and the packets with their verdicts, written as
    ``stage/superpackets/part-K.parquet`` and ``stage/packets/part-K.parquet`` (None:
    nothing written), ``flow_id`` by the partition's ``gid.i64`` (``run.spill``), its flow
    causes to ``causes.arrow`` in its work directory; returns ``{"encap": {model:
    counts}, "before": per model, its super-packets that start at a row of ``tunnels``
    (the tunnel hint)}``.

    ``bases`` (the runs exchange: ``works`` are one receiver run's partitions, ``k``
    among them): ``{"part": the part's number, "rows": global rows before the run,
    "segs"/"polls": per model, the super-packets and polls before it}``. ``plot``: the
    rows ``--plot`` bins spilled to the work directory (``run.plotdata.PlotRows``).
    ``cells_dir`` (``--tunnel-gro``): each model's native super-packets gathered there
    for the gro_cells stage (``run.cells.CellsPart``; the pieces must hold every decoded
    column), returned as ``"cells"``: per model the part's files."""
    from gropcap.gro.engine import _gso_table, gso_types
    from gropcap.io.columns import readable, readable_names, select_packet_columns
    from gropcap.io.parquet import TableWriter
    from gropcap.run.spill import CAUSES, GIDS, causes_table, read_array, write_ipc
    work = works[k]
    fmap = np.array(read_array(os.path.join(work, GIDS)))
    bases = bases or {}
    row_base = bases.get("rows", 0)
    part = bases.get("part", k)
    grows = np.memmap(os.path.join(work, "global.rows"), np.int64, mode="r") \
        if os.path.getsize(os.path.join(work, "global.rows")) else np.zeros(0, np.int64)
    orders, inst_pos = {}, {}
    sp_path, sp_tmp = _part_writer(stage, "superpackets", part)
    sp_writer = None
    cells = None
    if cells_dir is not None:
        from gropcap.run.cells import CellsPart
        # a directory of this attempt's own (a retried task never touches another's)
        mine = _attempt_dir(cells_dir)
        cells = {m: CellsPart(mine, config.replace(model=m), part) for m in models}
    for m in models:
        cfg = config.replace(model=m)
        so = _Order(m, k, works, info[m]["napi"], bases.get("segs", {}).get(m, 0),
                    bases.get("polls", {}).get(m, 0))
        # delivery position per instance, -(pos + 1) for one packet (run.stream's map;
        # int64: positions count every partition's super-packets)
        ipos = np.full(info[m]["ninst"], -1, np.int64)
        gtable = _gso_table(cfg)
        from gropcap.run.stream import SegSpill
        segs = SegSpill.reopen(os.path.join(work, f"{m}.segs"))
        for _ in range(info[m]["parts"]):
            s = segs.get_segs()
            pos = so.positions(s["poll"])
            if len(pos):
                ipos[s["inst"]] = np.where(s["count"] > 1, pos, -pos - 1)
            if (sp_path is None and cells is None) or not len(pos):
                continue
            gso_type = gso_types(s, gtable)
            if cells is not None:
                cells[m].segs(pos, s["count"], s["payload"], s["gso"], gso_type, s["end"],
                              so.poll_ids(s["poll"]))
            if sp_path is None:
                continue
            tbl = readable(arrow_table({
                "seg_id": pos, "flow_id": fmap[s["flow"].astype(np.int64)],
                "first_packet": row_base + grows[s["first"]],
                "last_packet": row_base + grows[s["last"]],
                "count": s["count"].astype(np.int32), "payload_len": s["payload"],
                "gso_size": s["gso"].astype(np.int32), "gso_type": gso_type,
                "end_reason": s["end"].astype(np.uint8),
                "rx_queue": s["queue"].astype(np.uint16),
                "poll_id": so.poll_ids(s["poll"]).astype(np.int64)}).append_column(
                "model", arrow_repeated(m, len(pos))))
            if sp_writer is None:
                sp_writer = TableWriter(sp_tmp, tbl, meta)
            sp_writer.write_table(tbl)
        segs.close()
        orders[m], inst_pos[m] = so, ipos
        if cells is not None:
            cells[m].sort()
    if sp_writer is not None:
        sp_writer.close()
        os.replace(sp_tmp, sp_path)
    # the packets pass: decoded rows + verdicts (run.stream's pass 4, per partition)
    pk_path, pk_tmp = _part_writer(stage, "packets", part)
    pk: dict = {}               # the packets part's "columns" and "writer"
    # (the gro_cells stage reads every column of a unit's first row)
    keep = None if cells_dir is not None else write_columns(stage, packet_columns, models,
                                                            plot)

    def write(t, cols):
        for name in ("flow_id", "gro_seg", "gro_role", "reason", "rx_queue", "poll_id"):
            t = t.append_column(name, pa.array(cols.pop(name)))
        for name, v in cols.items():
            t = t.append_column(name, pa.array(v))
        if not pk:
            pk["columns"] = select_packet_columns(readable_names(t.column_names),
                                                  packet_columns)
        t = readable(t, columns=pk["columns"])
        if "writer" not in pk:
            pk["writer"] = TableWriter(pk_tmp, t, meta)
        pk["writer"].write_table(t)
    batches = (t for t, _ in _partition_batches(pieces, split, nparts, k, batch_records,
                                                keep)) if not isinstance(pieces, str) \
        else _kept_batches(pieces)
    plots = None
    if plot:
        from gropcap.run.plotdata import PlotRows
        plots = PlotRows(work, models)
    encap, before, causes = _packets_pass(batches, work, models, info, inst_pos, orders,
                                          fmap, lambda t: tunnels,
                                          write if pk_path is not None else None, plots,
                                          cells)
    if plots is not None:
        plots.close()
    if "writer" in pk:
        pk["writer"].close()
        os.replace(pk_tmp, pk_path)
    write_ipc(os.path.join(work, CAUSES), causes_table(causes, len(fmap)))
    out = {"encap": encap, "before": before}
    if cells is not None:
        out["cells"] = {m: c.close() for m, c in cells.items()}
    return out


def write_columns(out_dir, packet_columns, models, plot: bool = False) -> list[str] | None:
    """Decoded columns the output pass reads (None: all): ``run.stream._kept_columns``
    (the tunnel hint's columns included) and the per-file counts' ``file_index``."""
    from gropcap.run.stream import _kept_columns
    keep = _kept_columns(out_dir, packet_columns, models, plot)
    if keep is not None:
        keep = sorted(set(keep) | {"file_index"}, key=PACKET_SCHEMA.names.index)
    return keep


def _packets_pass(batches, work: str, models, info: dict, inst_pos: dict, orders,
                  fmap, pairs_of, write, plots=None, cells=None):
    """Decoded rows (a partition's, capture order) joined with their verdicts spilled in
    ``work``: per model the super-packets per encapsulation and those starting at a row
    of the tunnels ``pairs_of(table)`` (the tunnel hint), and the flow causes (flow ids
    local); ``write(table, verdict columns)`` (None: no packets part) gets each batch
    with ``gro_seg`` from ``inst_pos`` (per instance its delivery position, ``-(pos +
    1)`` for a single packet), ``poll_id`` from ``orders`` and ``flow_id`` by ``fmap``.
    ``plots``: a ``run.plotdata.PlotRows`` given every row and each super-packet's first.
    ``cells``: per model a ``run.cells.CellsPart`` given every row with its unit.
    Returns ``(encap, before, causes)``."""
    from gropcap.run.accumulators import FlowCauses, ModelCounts
    from gropcap.run.stream import _RowCursor, _VerdictCursor
    primary = "napi" if "napi" in models else models[0]
    cursors = {m: (_RowCursor(_reopen(os.path.join(work, f"{m}.rows")), 2),
                   _VerdictCursor(_reopen(os.path.join(work, f"{m}.verdicts"))))
               for m in models}
    first_rows = {m: _FirstRows(info[m]["ninst"]) for m in models}
    counts = {m: ModelCounts(m) for m in models}
    before = {m: 0 for m in models}
    causes = FlowCauses()
    r0 = 0
    for t in batches:
        r1 = r0 + t.num_rows
        cols = {}
        pairs = pairs_of(t)
        if plots is not None:
            plots.add_packets(t)
        for m in models:
            fid, rxq = cursors[m][0].take(t.num_rows)
            reason, inst, poll = cursors[m][1].take(r0, r1)
            first = first_rows[m](inst)
            counts[m].add_encap(t, first)
            if plots is not None:
                plots.add_firsts(m, t, first)
            if cells is not None:
                code = inst_pos[m][inst].astype(np.int64)
                cells[m].packets(t, np.where(code < 0, -code - 1, code), first)
            if pairs:
                from gropcap.run.hints import tunnel_mask
                before[m] += int(np.count_nonzero(tunnel_mask(t, pairs) & first))
            if m == primary:
                causes.add(fid, t.column("tcp_seq").to_numpy(),
                           t.column("payload_len").to_numpy(),
                           t.column("l4_proto").to_numpy(), reason)
            if write is None:
                continue
            so = orders[m]
            cols = _with_model(cols, _verdict_columns(
                fmap[fid.astype(np.int64)], rxq, reason,
                so.poll_base + so.rank[poll] if so.inferred else poll, inst, inst_pos[m],
                first), m, primary)
        r0 = r1
        if write is not None:
            write(t, cols)
    for c in cursors.values():
        c[0].spill.close()
        c[1].spill.close()
    return {m: mc.encap for m, mc in counts.items()}, before, causes


def cells_task(cells_dir: str, config, model: str, parts: list, run_of_file, packets: int,
               segments: int, egress=None):
    """``--tunnel-gro``'s gro_cells stage of one model over the units its partitions
    gathered (``parts``: their ``run.cells.CellsPart.close`` dicts, in partition order;
    ``run.cells.CellsStage.gathered``), as the one-process core runs it
    (``CellsStage.run``). ``egress``: the run's ``EgressOptions`` to count what reaches
    the stack. Returns ``(stage counts, egress counts or None)``."""
    from gropcap.run.cells import CellsStage
    counts = None
    if egress is not None:
        from gropcap.egress import EgressCounts
        counts = EgressCounts.of(egress, config.kernel.version)
    stage = CellsStage.gathered(cells_dir, config.replace(model=model), parts)
    try:
        got = stage.run(run_of_file, packets, segments, egress=counts)
    finally:
        stage.remove()
    return got, counts


__all__ = ["gro_partition_task", "fused_partition_task", "write_partition_task",
           "write_columns", "scan_task", "cells_task"]
