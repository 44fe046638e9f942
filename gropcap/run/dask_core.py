"""The bounded-memory core per Dask partition: workers write their own Parquet parts, the
client merges accumulators.

:func:`analyze_partitioned` is what ``gropcap analyze --jobs N`` / ``--scheduler`` runs
when the run is one the bounded-memory core models (``run.options.memory_reason`` is
None) and the workers share a scratch directory with the client (local workers, or
``--scratch`` on a shared file system). Otherwise, or when the data asks for it (below),
the run is :func:`gropcap.run.distributed.analyze_distributed`, the in-memory merge.

Steps 1 and 2 run one of two ways (:func:`exchange_rule`): **fused** (local workers,
a worker per partition, at most :data:`FUSED_MAX_PARTS`): one task per partition
(``run.dask_tasks.fused_partition_task``) decodes every input, keeps its partition's
rows (``engine.partition_of``, as step 1 computes it) and runs step 2 on them, counting
its own rows for the capture counters and coalesced-input statistics (merged here;
coalesced input: the tasks run again with the merged statistics); summary only, it
also makes step 4's counts in the same pass (``run.stream._Inline``: nothing spilled)
and no write task runs. Nothing decoded is exchanged; every
partition decodes every input. Else the **exchange** through scratch files:

1. **decode** (``run.distributed._decode_all``): one task per file or byte range writes
   its decoded piece to the scratch directory with the GRO partition of every row
   (``engine.partition_of`` of the napi model when it runs: whole RX queues; else of the
   ideal model) and returns its ``CaptureCounts`` and ``gso.CoalescedStats``, merged on
   the client in input order.
2. **GRO** (``run.dask_tasks.gro_partition_task``, one task per partition): the
   partition's rows in capture order, cut into batches of ``batch_records``, through
   ``run.engines.BatchGroModels`` (every model from one preparation, state carried), the
   engine's partial results spilled as ``run.stream`` spills them; returns the
   partition's accumulators without their per-flow parts (``ModelCounts``,
   ``CoalescedCounts``), writes its per-flow results to its work directory
   (``run.spill.save_partition_flows``: the flows-table rows of its flows, numbered by
   its own flow ids, each flow's same-flow key and first global row) and the small
   table its delivery order needs (napi: its polls' time, queue and super-packets,
   sorted; ideal: each super-packet's trigger row).
3. **client**: flows numbered over the whole capture by first appearance
   (``run.spill.number_flows``: a ``gid.npy`` file per partition), the accumulators
   merged (``Totals.merge``) and the partitions' flows-table rows appended in that
   order to a file, a slice of flows at a time (``run.spill.in_flow_order``): the
   client holds nothing per flow; the summary is rendered from them as in every other
   mode.
4. **write** (``run.dask_tasks.write_partition_task``, one task per partition): each
   partition reads every partition's delivery table and gives its super-packets their
   global delivery position (napi: polls ranked by (time, queue, order), the one-process
   rule of ``engine.assemble``; ideal: (trigger row, emission order), the end-of-capture
   flush by first row: ``run.distributed.merge_parts``), then writes
   ``packets/part-K.parquet`` and ``superpackets/part-K.parquet`` (provenance metadata
   on each), writes its flow causes beside its flows and returns the counts only this
   pass makes (super-packets per encapsulation). The client appends the causes in flow
   order as it did the flows and writes ``flows.parquet``.
5. **gro_cells** (``--tunnel-gro``, ``run.dask_tasks.cells_task``, one task per model):
   step 4 runs for every partition (summary only too, no Parquet) and gathers its
   native super-packets (``run.cells.CellsPart``: each one's totals with its global
   delivery position, its first row, last time and FIN/PSH bits: a super-packet's
   packets are one flow's, so one partition's); the task scatters them into delivery
   order (``CellsStage.gathered``) and runs the stage as one process does, counting
   egress after it when asked (the GRO tasks then count none).

A worker lost mid-run: its running task is retried (by Dask, then once by the client),
and every attempt writes under names of its own (GRO: an ``attempt-*`` directory it
returns; write: ``stage/.tmp`` then renamed into ``stage/NAME``); each stage's results are
released once fetched, so nothing finished is recomputed (docs/scale.md "Failures").

**Time pieces** (one receiver run on more workers than RX-queue partitions, e.g. one
RX queue on two workers; the exchange, whose decoded rows the client can read first):
the client reads the rows' times from the scratch pieces (``engine.time_cuts_of_parts``,
one piece at a time) and cuts the run at idle gaps longer than every napi timer
(``engine.quiet_gap_ns``); partition ``j`` is RX-queue partition ``j % nparts`` of time
piece ``j // nparts``, the pieces playing the part of receiver runs for delivery order
(piece after piece). Both models run over each piece, and the ideal model has no
timer: it holds a flow's last super-packet across any gap. So the cut is exact only
where it holds nothing either; the first piece's partitions tell (no ``END_CAPTURE``
super-packet at their end, :func:`_cuts_refused`), and otherwise the GRO tasks run again
without cuts, with a note (also when the pieces hold more flows than
:data:`CUT_FLOWS_MAX`, which the client merges in memory). Flows span pieces: they are
numbered by first row over every piece (``run.spill.number_flows_merged``, the
partitions' keys in local order) and their flows-table rows and flow causes summed per
flow (``run.spill.merged_flow_rows``, ``merged_causes``; the end reasons from each
partition's (flow, end reason) counts).
Real captures whose flows end each burst with PSH cut cleanly (the bundled iperf3
samples at every idle gap); traffic that leaves segments held does not.

Exactness needs each partition to hold whole GRO-state units for every model: RX queues
(napi) and loose same-flow classes (ideal). Both models run over one partition, cut by
RX queue when napi runs. The napi model's classes include the RSS hash, so they never
straddle queues; the ideal model's leave it out (a tunnel's outer UDP source port can
send one inner flow to two queues). A GRO task writes the 64-bit hashes of its rows'
loose-class fields (``run.dask_tasks._class_hash``) and the client checks that no hash
and no flow key occurs in two partitions of a run (``run.spill.disjoint``); otherwise
the run falls back to the in-memory merge (``run.distributed``), which partitions each
model on its own.

The union of the parts equals the one-process files row for row; the order differs:
sort ``packets`` by (``file_index``, ``record``), ``superpackets`` by (``model``,
``seg_id``) to compare (docs/scale.md).

Layer: run/, above run/dask_tasks.py (the worker side), run/distributed.py and
run/stream.py (it reuses their tasks and spills).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyarrow as pa

from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.gro.config import MODELS
from gropcap.run.dask_tasks import STAGE_TMP, gro_partition_task, write_partition_task
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
    ``failed_inputs``). ``timings``: wall seconds of the client's stages (``decode``,
    ``gro``, ``merge``, ``write``: the output pass, ``finish``: summary, flows table,
    ``flows.parquet``; the fused exchange: ``fused``, the tasks' wall time, split into
    ``decode``, the slowest task's decoding, and ``gro``, the rest)."""

    failures: list = dataclasses.field(default_factory=list)
    # how the partitions got their rows: "fused" (each task decodes every input and
    # keeps its partition's rows) or "exchange" (decode tasks, rows through scratch
    # files); exchange_rule
    exchange: str = "exchange"
    # per partition task of the fused exchange, its own wall seconds (decode: decoding,
    # partitioning and counting; gro: the rest)
    task_timings: list = dataclasses.field(default_factory=list)


def partitioned_reason(config, *, engine="fast", decoder="fast", egress=None,
                       plot=False) -> str | None:
    """None when :func:`analyze_partitioned` can run this configuration, else why not
    (then the in-memory Dask merge runs it): what the bounded-memory core does not model
    (``run.options.memory_reason``). ``plot``: the plots' counts are collected per
    partition (``run.plotdata.PlotParts``); ``--tunnel-gro``: the partitions gather the
    native super-packets (``run.cells.CellsPart``), one task per model replays them in
    delivery order (``run.dask_tasks.cells_task``)."""
    from gropcap.run.options import memory_reason
    return memory_reason(config, engine=engine, decoder=decoder, egress=egress) or None


# at most this many partitions run fused (every partition task decodes every input): the
# fused exchange's extra work grows with the partitions (P decodes instead of one), the
# exchange's with the rows only. Measured faster at 2 on this 2-core machine; 4 from the
# per-row costs measured (docs/scale.md, "Which exchange")
FUSED_MAX_PARTS = 4


EXCHANGES = ("auto", "fused", "runs", "exchange")


def exchange_rule(exchange: str, nparts: int, nworkers: int, workers_local: bool,
                  separate: bool = False) -> str:
    """How partitions get their rows: ``exchange`` as asked (``"fused"``, ``"runs"``,
    ``"exchange"``), or for ``"auto"``: runs when the input files may be separate
    receivers (``separate``: ``--captures separate``, or ``auto`` with a file that does
    not start after the one before, ``run.inputs.first_times_rise``); fused when every
    worker runs on this host, each partition has a worker of its own and there are at
    most :data:`FUSED_MAX_PARTS`; else the exchange through scratch files."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, not {exchange!r}")
    if exchange != "auto":
        return exchange
    if separate:
        return "runs"
    return "fused" if workers_local and nparts <= min(nworkers, FUSED_MAX_PARTS) \
        else "exchange"


def _runs_stage(c, files, config, models, decode_options, scfg, nparts: int, nworkers: int,
                tmp: str, batch_records: int, keep, out_dir, make_stage, metadata,
                packet_columns, captures: str, progress, tm: dict, egress=None,
                acks=None, plot: bool = False, cells_dir: str | None = None,
                decoder: str = "fast"):
    """The runs exchange (module docstring): the inputs' receiver runs replayed as
    independent units, a run's output written as soon as the runs before it are
    counted, its scratch removed once written: scratch stays bounded by the runs in
    flight, whatever the number of files.

    1. **scan** (``run.dask_tasks.scan_task``, one task per file): counts, coalesced
       statistics, ``CaptureInfo`` (its digest too); merged here in input order. The
       receiver runs, the MTU and the provenance are then known before any GRO.
    2. **GRO** (``run.dask_tasks.fused_partition_task`` per run and partition: the
       run's files decoded, numbered from 0 within the run): at most ``nworkers`` runs
       submitted from the one the client waits for on.
    3. **write** (``run.dask_tasks.write_partition_task`` with ``bases``: rows, flows,
       super-packets and polls of the runs before), submitted with priority over GRO
       tasks as soon as the runs before are counted; the client waits for them before
       it submits more GRO while ``nworkers`` runs wait for their writes; summary
       only: the GRO task counts its output pass itself and nothing is written (with
       ``cells_dir``, ``--tunnel-gro``, the write tasks run anyway and gather the
       native super-packets there: ``run.cells.CellsPart``).

    Each run's GRO results are merged into the totals as they arrive (``_merge_run``),
    its flows-table rows and flow causes appended to files (``run.spill``), and each
    write result folded in (``_fold_wrote``): the client holds the totals, not the runs
    or their flows. Returns a dict (the totals ``tot`` and flow ``causes``; ``done``: the GRO
    results left, their tunnel rows and delivery info; ``capture``, ``stats``,
    ``infos``, ``n`` rows, ``meta``, ``nruns``, the tunnel ``hint``, the ``cells``
    parts per model) or why the exchange must run instead (a string: an input fails
    to decode)."""
    import shutil

    from gropcap.errors import GropcapError
    from gropcap.run.accumulators import CaptureCounts
    from gropcap.run.dask_tasks import fused_partition_task, scan_task
    from gropcap.run.distributed import shared
    from gropcap.run.summary import inputs_of
    import time
    clock = time.perf_counter
    t0 = clock()
    scan = [(f, i, decode_options, config, batch_records, os.path.join(tmp, f"scan-{i}"),
             decoder) for i, f in enumerate(files)]
    tasks = [(c.submit(scan_task, *a, pure=False), a) for a in scan]
    if progress is not None:
        progress.track("scan", [f for f, _ in tasks])
    capture, stats = CaptureCounts(config.verify_checksums), None
    infos, rows_of = [], []
    try:
        for task in tasks:      # merged one by one, in input order (the client's memory)
            d = _results(c, [task], scan_task)[0]
            capture.merge(d["counts"])
            stats = d["stats"] if stats is None else stats.merge(d["stats"])
            infos.append(d["info"])
            rows_of.append(d["rows"])
    except (GropcapError, OSError):
        c.cancel([f for f, _ in tasks])
        return "an input failed"
    stats.set_mtu(config.mtu).mtu_inference()
    run_of_file = inputs_of(capture, infos, captures)["run_of_file"]
    nruns = max(run_of_file, default=0) + 1
    runs = [[i for i, r in enumerate(run_of_file) if r == k] for k in range(nruns)]
    # runs enough to keep every worker busy: one task per run (no file decoded twice)
    rparts = 1 if nruns >= nworkers else nparts
    check = rparts > 1 and scfg.model == "napi" and "ideal" in models
    stats_arg = shared(c, stats) if stats.num else None
    from gropcap.run.stream import _TunnelHint
    hint = _TunnelHint(capture.udp_tunnels, config, models)
    stage = make_stage()
    meta = metadata(infos, stats.mtu_inference())
    tm["decode"] = clock() - t0
    t0 = clock()

    def gro_args(r, k):
        fidx = runs[r]
        return ([files[i] for i in fidx], decode_options, config, tuple(models), scfg,
                rparts, k, stats_arg, os.path.join(tmp, f"run-{r}-{k}"), batch_records,
                check, keep, not out_dir and cells_dir is None, fidx[0] if fidx else 0,
                False,
                # the tunnel rows only when the hint runs a model on them: every task
                # collecting its share up to the limit held 40 x that on the client
                hint.pairs if hint.collect else (), egress,
                # --poll-acks: the run's rows are numbered from 0 within the run
                None if acks is None else (acks, sum(rows_of[:fidx[0]]) if fidx else 0),
                plot, decoder)
    gro, submitted = {}, 0
    parts = None
    if plot:
        # the capture's time span is known from the scan: each run's partitions are
        # binned before their scratch goes (run.plotdata.PlotParts)
        from gropcap.run.plotdata import PlotParts
        parts = PlotParts.of_capture(models, capture)
    # a line per stage counting packets (the rows the scan found): its rate is packets/s
    run_rows = [sum(rows_of[i] for i in fidx) for fidx in runs]
    lines = {}
    if progress is not None:
        lines["gro"] = progress.track(f"decode+GRO {'+'.join(models)}", [],
                                      total=sum(rows_of), unit="packets")
        if out_dir:
            lines["write"] = progress.track("packets.parquet", [], total=sum(rows_of),
                                            unit="packets")

    def submit_gro(upto):
        nonlocal submitted
        while submitted < min(upto, nruns):
            for k in range(rparts):
                a = gro_args(submitted, k)
                gro[(submitted, k)] = (c.submit(fused_partition_task, *a, pure=False), a)
                if progress is not None:
                    # a run's partitions share its rows about evenly
                    progress.follow(lines["gro"], gro[(submitted, k)][0],
                                    run_rows[submitted] // rparts
                                    + (k < run_rows[submitted] % rparts))
            submitted += 1
    from gropcap.run.accumulators import Totals
    from gropcap.run.spill import CausesSpill, Spill
    # the flows-table rows and flow causes of each run go to disk as the run is
    # counted: the client's memory does not grow with the flows (run.spill)
    tot = Totals(models, config.verify_checksums, spill=Spill(os.path.join(tmp, "flows.arrow")))
    causes = CausesSpill(os.path.join(tmp, "causes.arrow"))
    done, writes = [], []
    cells: dict = {}            # --tunnel-gro: per model, the write tasks' CellsPart files
    flow_base, row_base = 0, 0
    seg_base = {m: 0 for m in models}
    poll_base = {m: 0 for m in models}
    if progress is not None:
        progress.note(f"{nruns} receiver run{'s' if nruns != 1 else ''} on {nworkers} "
                      f"workers, {rparts} task{'s' if rparts != 1 else ''} each")

    def collect_writes(keep: int):
        # a run's scratch goes once all its write tasks are done (each reads every
        # partition's delivery table of its run); waits while more than ``keep`` runs
        # wait for their writes (writes slower than GRO would pile up scratch)
        while writes and (len(writes) > keep or all(f.done() for f, _ in writes[0][1])):
            r_works, wtasks, base, n = writes.pop(0)
            for w in _results(c, wtasks, write_partition_task):
                _fold_wrote(w, tot, hint, cells)
            _add_causes(causes, r_works, base, n)   # runs written in order
            for w in r_works:
                if parts is not None:
                    parts.add(w)
                shutil.rmtree(os.path.dirname(w), ignore_errors=True)
    for r in range(nruns):
        collect_writes(nworkers - 1)
        submit_gro(r + nworkers)
        mine = _results(c, [gro.pop((r, k)) for k in range(rparts)], fused_partition_task)
        r_works = [d["work"] for d in mine]
        _check_disjoint(r_works)
        # the run's flows numbered on from the runs before: the client keeps the
        # totals, not the runs
        _merge_run(tot, mine)
        nflows = _add_flows(tot, r_works, flow_base)
        for d in mine:
            if "local" in d:
                _fold_wrote(d.pop("local"), tot, hint)
        for d in mine:
            if d["tunnels"] is not None:
                d["tunnels"] = (d["tunnels"][0], [a + row_base for a in d["tunnels"][1]],
                                d["tunnels"][2])
        if out_dir or cells_dir is not None:
            wtasks = []
            for k, d in enumerate(mine):
                bases = {"part": r * rparts + k, "rows": row_base, "segs": dict(seg_base),
                         "polls": dict(poll_base)}
                args = (os.path.join(d["work"], "rows.arrow"), config, tuple(models),
                        "napi", rparts, k, r_works, d["info"], stage, meta,
                        packet_columns, batch_records, hint.pairs, bases, plot, cells_dir)
                wtasks.append((c.submit(write_partition_task, *args, pure=False,
                                        priority=1), args))
                if progress is not None and "write" in lines:
                    progress.follow(lines["write"], wtasks[-1][0], d["rows"])
            writes.append((r_works, wtasks, flow_base, nflows))
        else:
            _add_causes(causes, r_works, flow_base, nflows)
            for w in r_works:
                if parts is not None:
                    parts.add(w)
                shutil.rmtree(os.path.dirname(w), ignore_errors=True)
        for m in models:
            seg_base[m] += sum(d["info"][m]["nseg"] for d in mine)
            poll_base[m] += sum(d["info"][m]["npolls"] for d in mine)
        flow_base += nflows
        row_base += sum(rows_of[i] for i in runs[r])
        done += mine
    collect_writes(0)
    if stats_arg is not None:
        stats_arg.release()
    tm["gro"] = clock() - t0
    return {"done": done, "tot": tot, "causes": causes, "capture": capture,
            "stats": stats, "infos": infos, "n": sum(rows_of), "meta": meta,
            "nruns": nruns, "hint": hint, "plots": parts, "cells": cells}


def _fused_stage(c, files, config, models, decode_options, split_config, nparts: int,
                 works: list, batch_records: int, check: bool, keep, local_pass: bool,
                 progress, egress=None, acks=None, plot: bool = False,
                 decoder: str = "fast"):
    """Decode and GRO of every partition in one task each
    (``run.dask_tasks.fused_partition_task``): ``(done, capture counts, coalesced
    statistics, infos, rows)``, or why the exchange must run instead (a string: an
    input fails to decode, whose report the exchange gives; a TCP direction's SYNs in
    two partitions). With coalesced input the tasks run again, given the statistics
    of the whole capture."""
    from gropcap.errors import GropcapError
    from gropcap.run.accumulators import CaptureCounts
    from gropcap.run.dask_tasks import fused_partition_task
    from gropcap.run.distributed import shared

    from concurrent.futures import ThreadPoolExecutor
    # the files' digests here, while the tasks run, once
    from gropcap.priority import BACKGROUND, lower_this_thread
    hashing = ThreadPoolExecutor(1, thread_name_prefix="gropcap-digest",
                                 initializer=lower_this_thread, initargs=(BACKGROUND,))
    digests = [hashing.submit(_digest_plain, f) for f in files]
    hashing.shutdown(wait=False)

    def run(stats_arg):
        tasks = []
        for k in range(nparts):
            args = (files, decode_options, config, tuple(models), split_config, nparts, k,
                    stats_arg, works[k], batch_records, check, keep, local_pass, 0, True,
                    None, egress, None if acks is None else (acks, 0), plot, decoder)
            tasks.append((c.submit(fused_partition_task, *args, pure=False), args))
        if progress is not None:
            # every task decodes every input: the line counts the input bytes (MB/s)
            progress.track_shares(f"decode+GRO {'+'.join(models)}", [f for f, _ in tasks],
                                  sum(os.path.getsize(f) for f in files), "bytes")
        try:
            return _results(c, tasks, fused_partition_task)
        except (GropcapError, OSError):
            c.cancel([f for f, _ in tasks])
            return None
    done = run(None)
    if done is None:
        return "an input failed"
    capture, stats = CaptureCounts(), None
    for d in done:
        capture.merge(d["counts"])      # additive (dictionaries are reported sorted)
        st = d["stats"]
        if stats is not None and stats.shares_syn(st):
            return "a TCP direction's SYNs fall in two partitions"
        # per direction, first-in-order within its partition is first in the capture
        stats = st if stats is None else stats.merge(st)
    stats.set_mtu(config.mtu).mtu_inference()
    first = done
    if stats.num or any(d["stopped"] for d in done):
        done = run(shared(c, stats))
        if done is None:
            return "an input failed"
        for d, d0 in zip(done, first):
            d["timings"] = {k: d["timings"][k] + d0["timings"][k] for k in d["timings"]}
    infos = first[0]["infos"]
    for info, digest in zip(infos, digests):
        if not info.digest:
            info.digest = digest.result()
    return done, capture, stats, infos, first[0]["total"]


def _digest_plain(path: str) -> str:
    """The digest (``capture.fingerprint``) of a plain capture file (compressed ones: "",
    their reader hashes them)."""
    from gropcap.capture import fingerprint
    from gropcap.capture.compress import sniff_compression
    try:
        with open(path, "rb") as f:
            if sniff_compression(f.read(8)):
                return ""
        return fingerprint.of_file(path)
    except OSError:
        return ""           # the tasks report it


# ---- client side ----

def _check_disjoint(works: list) -> None:
    """No flow key and no loose same-flow class (its 64-bit hash) in two of the
    partitions in ``works`` (one receiver run's), else :class:`_Fallback`."""
    from gropcap.run.spill import HASHES, KEYS, disjoint
    if len(works) < 2:
        return
    if not disjoint([os.path.join(w, KEYS) for w in works]):
        raise _Fallback("a flow's rows fall in two partitions")
    if not disjoint([os.path.join(w, HASHES) for w in works]):
        raise _Fallback("a same-flow class of the ideal model falls in two RX-queue "
                        "partitions")


def _add_flows(tot, works: list, base: int) -> int:
    """Number the flows of the partitions in ``works`` by first appearance from ``base``
    (``run.spill.number_flows``: the write tasks read the ids) and append their
    flows-table rows in that order to ``tot``, a slice at a time; returns the flows."""
    from gropcap.run.spill import FLOWS, in_flow_order, number_flows
    n = number_flows(works, base)
    for t in in_flow_order(works, FLOWS, base, n):
        tot.add_flow_rows(t)
    return n


def _add_causes(causes, works: list, base: int, n: int) -> None:
    """Append the flow causes of the partitions in ``works`` (their ``causes.arrow``),
    flows ``base .. base+n-1``, to ``causes`` (a ``run.spill.CausesSpill``) in flow
    order."""
    from gropcap.run.spill import CAUSES, in_flow_order
    for t in in_flow_order(works, CAUSES, base, n):
        causes.add(t)


def _cut_pieces(scfg, models, nparts: int, nworkers: int, how: str, exchange: str,
                separate: bool, plot: bool, cells_on: bool) -> int:
    """Time pieces per RX-queue partition for one receiver run on more workers than
    partitions (``nworkers // nparts``, 0: not cut): the napi model cut where every
    queue is idle and empty (``engine.quiet_gap_ns``: not at HZ >= 1000, not with
    ``--poll-acks``). Both models run over each piece, so a cut also needs the ideal
    model to hold nothing there (it holds a flow's last super-packet across any gap):
    :func:`_cuts_refused` checks it after the GRO tasks. Not cut: several receiver runs
    (a task per run already), the fused exchange asked for (each task decodes the
    input, none reads the rows' times first), ``--plot`` and ``--tunnel-gro`` (their
    per-flow and per-super-packet parts are kept by partition)."""
    from gropcap.gro.engine import quiet_gap_ns
    if "napi" not in models or scfg.model != "napi" or quiet_gap_ns(scfg) is None:
        return 0
    if separate or plot or cells_on or how == "runs" or exchange == "fused" \
            or nworkers // nparts < 2:
        return 0
    return nworkers // nparts


def _core_time_cuts(decoded: list, scfg, pieces: int, progress) -> np.ndarray | None:
    """The rows where the decoded run (scratch pieces in capture order) is cut into at
    most ``pieces`` pieces of time (``engine.time_cuts_of_parts``: each piece's times
    read from its mapped file in turn), None when there is no gap to cut at; says
    which on ``progress``."""
    from gropcap.arrays import numpy_of
    from gropcap.gro.engine import quiet_gap_ns, time_cuts_of_parts
    from gropcap.run.distributed import _table_of
    refs = [p.ref for d in decoded for p in d.pieces]
    sizes = [p.rows for d in decoded for p in d.pieces]
    cuts = time_cuts_of_parts(sizes, lambda i: numpy_of(_table_of(refs[i]).column("ts_ns")),
                              scfg, pieces)
    if progress is not None:
        gap = quiet_gap_ns(scfg) / 1000
        progress.note(f"napi model: cut in time at {len(cuts)} idle gap(s) longer than "
                      f"{gap:g} us, {len(cuts) + 1} pieces per RX-queue partition"
                      if len(cuts) else f"napi model: no idle gap longer than {gap:g} us "
                      "to cut it at: one task per RX-queue partition")
    return cuts if len(cuts) else None


# flows-table rows of a cut run's partitions the client merges in memory (its keys
# while numbering them, then the rows: about 350 bytes each); above it the run is
# replayed uncut, whose flows the client takes a slice at a time (run.spill)
CUT_FLOWS_MAX = 1 << 20


def _cuts_refused(done: list, before: int) -> str | None:
    """Why the time cuts of a run's GRO tasks (``done``) cannot stand, None when they
    can. A partition of a time piece but the last (``done[:before]``) that ended with a
    super-packet still held (``END_CAPTURE``, in either model) was not empty at its
    cut; when none did, every model was empty at every cut, and each piece replayed
    from a fresh receiver is the one-process replay of its rows (the napi model by the
    quiet gap, the ideal model because it holds nothing else from row to row). And the
    client merges a cut run's flows in memory: at most :data:`CUT_FLOWS_MAX` rows."""
    from gropcap.gro.reasons import END_CAPTURE
    if any(mc.end_hist[END_CAPTURE] for d in done[:before] for mc in d["models"].values()):
        return ("a super-packet was held across a time cut (the ideal model holds a "
                "flow's last one across any gap)")
    rows = sum(d["nflows"] for d in done)
    if rows > CUT_FLOWS_MAX:
        return (f"the time pieces hold {rows} flow rows, more than the "
                f"{CUT_FLOWS_MAX} the client merges in memory")
    return None


def _add_flows_merged(tot, works: list, models) -> int:
    """:func:`_add_flows` for time pieces, which share flows: numbered by first row over
    every piece (``run.spill.number_flows_merged``), one flows-table row per flow
    (``run.spill.merged_flow_rows``), appended a slice at a time."""
    from gropcap.arrays import SLICE_ROWS
    from gropcap.run.spill import merged_flow_rows, number_flows_merged
    n = number_flows_merged(works, 0)
    if n:
        t = merged_flow_rows(works, 0, n, models)
        for lo in range(0, t.num_rows, SLICE_ROWS):
            tot.add_flow_rows(t.slice(lo, SLICE_ROWS))
    return n


def _results(c, tasks: list, fn) -> list:
    """The results of ``tasks`` (``(future, args)``, a task lost with its worker retried:
    ``run.distributed._result_or_retry``), then the futures released: a result kept on a
    worker would be recomputed when that worker is lost later (Dask recomputes what a
    client still holds), a GRO task rewriting its files while the write tasks read them,
    a write task its part while the client renames the dataset."""
    from gropcap.run.distributed import _result_or_retry
    out = [_result_or_retry(c, f, fn, *a)[0] for f, a in tasks]
    for f, _ in tasks:
        f.release()
    return out


def _empty_part(stage: str, name: str, models, meta: dict, packet_columns) -> None:
    """A dataset directory with no rows still gets one (empty) part: the schema."""
    from gropcap.io.columns import readable, readable_names, select_packet_columns
    from gropcap.io.parquet import write_table
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
    write_table(t, os.path.join(d, "part-00000.parquet"), meta, force=True)


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
                        split_bytes=None, fallback=None, captures: str = "auto",
                        exchange: str = "auto", egress=None, plot: bool = False,
                        decoder: str = "fast"):
    """Analyse captures on Dask with the bounded-memory core per partition (module
    docstring): a :class:`PartitionedResult` whose summary equals the one-process run's;
    with ``out_dir``, ``packets/part-*.parquet``, ``superpackets/part-*.parquet`` and
    ``flows.parquet`` there, the same rows as the one-process files (a list of
    ``packet_columns`` gets ``file_index`` and ``record`` too: the key that puts the
    parts back in capture order).

    Receiver runs (``captures``, ``run/receivers.py``): a partition holds the rows of
    one run only (its files' pieces; partition ``j`` is RX-queue partition
    ``j % nparts`` of run ``j // nparts``), flows are keyed by run and key, and delivery
    is run after run (``run.dask_tasks``: the run leads the delivery key).

    When the workers share no scratch directory with this process, or the data needs
    it (a flow or an ideal-model same-flow class in two RX-queue partitions),
    ``fallback(client, why)`` runs instead (the caller's in-memory Dask merge) and its
    result is returned.

    ``exchange``: how the partitions get their rows (:func:`exchange_rule`): ``"auto"``,
    ``"fused"`` (each partition task decodes every input) or ``"exchange"`` (decode
    tasks, rows through the scratch directory); the result's ``exchange`` says which ran.

    ``config.poll_acks`` (with the napi model): one task first makes the pass over the
    whole capture that finds the polls the receiver's ACKs close
    (``run.dask_tasks.ack_task``: ``run.stream._ack_times``) and writes the retimed
    arrivals to the scratch directory; every GRO task's napi model reads its rows'
    arrivals there, as one process's does.

    ``plot``: collect what ``--plot`` draws (the result's ``plot_data``,
    ``run.plotdata.PlotParts``): the partitions spill their rows' times and keep their
    (flow, end reason) counts, folded in once the capture's time span and the flows'
    numbers are known.

    ``decoder``: ``"fast"`` or ``"reference"`` (the plain-Python reader and decoder, the
    oracle), for every task that decodes.
    """
    import shutil

    from gropcap.analysis import Analysis
    from gropcap.receive.context import ReceiveContext
    from gropcap.run.accumulators import Totals
    from gropcap.run.distributed import (BATCH_RECORDS, SPLIT_BYTES, _decode_all,
                                         _merged_capture, _nparts, _nworkers,
                                         _scratch_dir, _workers_local,
                                         open_client, shared)
    from gropcap.run.inputs import decode_table, first_times_rise, input_files
    from gropcap.run.summary import render_summary
    from gropcap.io.columns import parse_packet_columns
    from gropcap.run.options import run_options
    config, decode_options, models = run_options(config, decode_options, models,
                                                 captures=captures)
    packet_columns = parse_packet_columns(packet_columns)
    if isinstance(packet_columns, tuple):
        # the dataset's order key (its parts hold partitions): always written
        packet_columns += tuple(c for c in ("file_index", "record")
                                if c not in packet_columns)
    files = input_files(paths)
    check_targets(out_dir, force)
    separate = len(files) > 1 and (captures == "separate" or
                                   (captures == "auto" and not first_times_rise(files)))
    split_model = "napi" if "napi" in models else models[0]
    # --tunnel-gro: the write tasks gather each model's native super-packets (every
    # decoded column kept for them), one task per model runs the gro_cells stage and
    # counts egress after it (the GRO tasks do not: run.stream does the same)
    cells_on = config.tunnel_gro is not None
    gro_egress = None if cells_on else egress
    stages = []         # the --out staging directory, once made
    made = []           # out_dir, when this run made it (removed again if left empty)

    def make_stage():
        # beside the targets (same file system: renamed, not copied); the workers see
        # it as they see the scratch directory
        if not out_dir:
            return None
        import tempfile
        if not os.path.exists(out_dir):
            made.append(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        stages.append(tempfile.mkdtemp(prefix=".gropcap-parts-", dir=out_dir))
        os.chmod(stages[-1], 0o755)
        # made here, not by the tasks: a task still running after the run ended
        # cannot recreate them (run.dask_tasks._part_writer)
        for name in (*DATASET_DIRS, STAGE_TMP):
            os.mkdir(os.path.join(stages[-1], name))
        return stages[-1]

    def metadata(infos, mtu):
        meta_of = Analysis(PACKET_SCHEMA.empty_table(), infos, config,
                           {m: None for m in models}, decode_options)
        meta_of.mtu = mtu
        meta_of.receiver = receiver
        meta_of.captures = captures
        return meta_of.metadata()

    with open_client(client, jobs=jobs, scheduler=scheduler) as c:
        try:
            with _scratch_dir(c, scratch) as tmp:
                if tmp is None:
                    raise _Fallback("the workers share no scratch directory")
                acks = None
                if config.poll_acks and "napi" in models:
                    from gropcap.run.dask_tasks import ack_task
                    from gropcap.run.progress import phase
                    with phase(progress, "ACK polls (--poll-acks, one task)", 1,
                               "tasks") as advance:
                        acks = c.submit(ack_task, files, decode_options, batch_records,
                                        os.path.join(tmp, "acks"), config, captures,
                                        decoder, pure=False).result()
                        advance(1)
                scfg = config.replace(model=split_model)
                nworkers = _nworkers(c)
                nparts = _nparts(scfg, nworkers)
                split = "joint"
                cells_dir = None
                if cells_on:
                    cells_dir = os.path.join(tmp, "cells")
                    os.makedirs(cells_dir, exist_ok=True)
                import time
                clock, tm = time.perf_counter, {}
                works = [os.path.join(tmp, f"core-{k}") for k in range(nparts)]
                check = nparts > 1 and split_model == "napi" and "ideal" in models
                from gropcap.run.stream import _TunnelHint
                how = exchange_rule(exchange, nparts, nworkers, _workers_local(c), separate)
                # one receiver run on fewer RX-queue partitions than workers: cut in time
                # (the exchange: the client reads the decoded rows' times first)
                cut_pieces = _cut_pieces(scfg, models, nparts, nworkers, how, exchange,
                                         separate, plot, cells_on)
                if cut_pieces:
                    how = "exchange"
                nruns = 1
                ngroups, cut_run = None, False    # time pieces (the exchange below)
                fused = ran = None
                from gropcap.run.dask_tasks import write_columns
                # the columns a fused task keeps for the output pass (the gro_cells
                # stage reads whole first rows)
                kept = list(PACKET_SCHEMA.names) if cells_on else \
                    write_columns(out_dir, packet_columns, models, plot)
                if how == "runs":
                    ran = _runs_stage(c, files, config, models, decode_options, scfg,
                                      nparts, nworkers, tmp, batch_records, kept,
                                      out_dir, make_stage, metadata, packet_columns,
                                      captures, progress, tm, gro_egress, acks, plot,
                                      cells_dir, decoder)
                    if isinstance(ran, str):
                        if progress is not None:
                            progress.note(f"{ran}: the decoded rows are exchanged "
                                          "through the scratch directory")
                        how, ran = "exchange", None
                if how == "fused":
                    t0 = clock()
                    fused = _fused_stage(c, files, config, models, decode_options, scfg,
                                         nparts, works, batch_records, check, kept,
                                         not out_dir and not cells_on, progress,
                                         gro_egress, acks, plot, decoder)
                    tm["fused"] = clock() - t0
                    if not isinstance(fused, str) and len(files) > 1:
                        # the fused tasks replay the files as one receiver run; the
                        # files' timestamps (counted by the tasks) may say otherwise
                        from gropcap.run.summary import inputs_of
                        if max(inputs_of(fused[1], fused[3], captures)["run_of_file"],
                               default=0) > 0:
                            fused = "the files are separate receivers (--captures)"
                    if isinstance(fused, str):
                        if progress is not None:
                            progress.note(f"{fused}: the decoded rows are exchanged "
                                          "through the scratch directory")
                        how, fused = "exchange", None
                if ran is not None:
                    done, capture, stats, infos = (ran[k] for k in ("done", "capture",
                                                                    "stats", "infos"))
                    n, nruns, hint = ran["n"], ran["nruns"], ran["hint"]
                    decoded, failures = None, []
                    t0 = clock()
                elif fused is not None:
                    done, capture, stats, infos, n = fused
                    capture.verify = config.verify_checksums
                    decoded, failures = None, []
                    hint = _TunnelHint(capture.udp_tunnels, config, models)
                    # each attempt writes a directory of its own: read the one that answered
                    works = [d["work"] for d in done]
                    pieces = [os.path.join(w, "rows.arrow") for w in works]
                    tm["decode"] = max(d["timings"]["decode"] for d in done)
                    tm["gro"] = tm["fused"] - tm["decode"]
                    t0 = clock()
                else:
                    t0 = clock()
                    decoded, infos, failures = _decode_all(
                        c, files, decode_options, decoder,
                        SPLIT_BYTES if split_bytes is None else split_bytes, BATCH_RECORDS,
                        tmp, progress, ((split, scfg, nparts),) if nparts > 1 else ())
                    n = sum(p.rows for d in decoded for p in d.pieces)
                    tm["decode"] = clock() - t0
                    t0 = clock()
                    capture = _merged_capture(decoded)
                    capture.verify = config.verify_checksums
                    stats = None
                    for d in decoded:
                        for p in d.pieces:
                            stats = p.stats if stats is None else stats.merge(p.stats)
                    if stats is not None:
                        stats.set_mtu(config.mtu).mtu_inference()
                    # recomputed if its worker dies: the GRO task re-run elsewhere
                    # needs it
                    stats_arg = shared(c, stats) \
                        if stats is not None and stats.num else None
                    pieces = [(p.ref, d.index, d.new_index, p.offset)
                              for d in decoded for p in d.pieces]
                    # receiver runs: partition j holds RX-queue partition j % nparts of run
                    # j // nparts (its files' pieces only), so no partition mixes runs
                    from gropcap.run.summary import inputs_of
                    run_of_file = inputs_of(capture, infos, captures)["run_of_file"]
                    nruns = max(run_of_file, default=0) + 1
                    run_pieces = [[p for p in pieces if run_of_file[p[2]] == r]
                                  for r in range(nruns)]
                    cuts = _core_time_cuts(decoded, scfg, cut_pieces, progress) \
                        if cut_pieces and nruns == 1 and n else None
                    from gropcap.run.stream import _TunnelHint
                    hint = _TunnelHint(capture.udp_tunnels, config, models)
                    while True:
                        if cuts is not None:
                            # time pieces play the part of receiver runs: partition j
                            # holds RX-queue partition j % nparts of time piece
                            # j // nparts (delivery is piece after piece)
                            from gropcap.run.dask_tasks import time_windowed
                            timed = time_windowed(
                                [(p.ref, d.index, d.new_index, p.offset, p.rows)
                                 for d in decoded for p in d.pieces],
                                [0, *cuts.tolist(), n])
                            ngroups = len(timed)
                        else:
                            timed, ngroups = run_pieces, nruns
                        part_pieces = [timed[k // nparts] for k in range(ngroups * nparts)]
                        name = "core" if cuts is None else "core-timed"
                        works = [os.path.join(tmp, f"{name}-{k}")
                                 for k in range(ngroups * nparts)]
                        tasks = []
                        for k in range(ngroups * nparts):
                            args = (part_pieces[k], config, tuple(models), split, nparts,
                                    k, stats_arg, works[k], n, batch_records, check,
                                    hint.pairs if hint.collect else (), gro_egress,
                                    None if acks is None else (acks, 0), plot)
                            tasks.append((c.submit(gro_partition_task, *args, pure=False),
                                          args))
                        if progress is not None:
                            # the decoded rows, shared by the partitions (the decode
                            # counted them): its rate is packets/s
                            progress.track_shares(f"GRO {'+'.join(models)}",
                                                  [f for f, _ in tasks], n, "packets")
                        done = _results(c, tasks, gro_partition_task)
                        why = None if cuts is None else _cuts_refused(
                            done, (ngroups - 1) * nparts)
                        if why is None:
                            break
                        if progress is not None:
                            progress.note(f"{why}: replayed without time cuts")
                        cuts = None
                    cut_run = cuts is not None
                    # each attempt writes a directory of its own: read the one that answered
                    works = [d["work"] for d in done]
                    if stats_arg is not None:
                        stats_arg.release()
                    tm["gro"] = clock() - t0
                t0 = clock()
                if ran is None:
                    from gropcap.run.spill import CausesSpill, Spill
                    # (a flow key in two runs is two flows; time pieces share flows)
                    for r in range(ngroups or nruns):
                        _check_disjoint(works[r * nparts:(r + 1) * nparts])
                    tot = Totals(models, config.verify_checksums,
                                 spill=Spill(os.path.join(tmp, "flows.arrow")))
                    _merge_run(tot, done)
                    # flows numbered over the capture: nothing per flow on the client
                    # (time pieces: one row per flow from every piece's, run.spill)
                    nflows = _add_flows_merged(tot, works, models) if cut_run else \
                        _add_flows(tot, works, 0)
                else:
                    tot = ran["tot"]        # merged run by run
                tot.capture = capture
                if stats is not None and stats.num and tot.coalesced is None:
                    from gropcap.run.accumulators import CoalescedCounts
                    tot.coalesced = CoalescedCounts()
                from gropcap.gro.coalesced import CoalescedStats
                mtu = (stats or CoalescedStats(config.mtu)).mtu_inference()
                if ran is None:
                    meta = metadata(infos, mtu)
                    stage = make_stage()
                else:
                    meta, stage = ran["meta"], (stages[-1] if stages else None)
                wtasks = []
                for k, d in enumerate(done if ran is None else ()):
                    if "local" in d:
                        continue        # summary only: counted already (runs: written)
                    args = (pieces[k] if fused else part_pieces[k], config,
                            tuple(models), split, nparts, k, works,
                            d["info"], stage, meta, packet_columns, batch_records,
                            hint.pairs, None, plot, cells_dir)
                    wtasks.append((c.submit(write_partition_task, *args, pure=False),
                                   args))
                if progress is not None and wtasks:
                    line = progress.track("packets.parquet" if out_dir else "verdicts", [],
                                          total=n, unit="packets")
                    for (f, _), d in zip(wtasks, (d for d in done if "local" not in d)):
                        progress.follow(line, f, d["rows"])
                tm["merge"] = clock() - t0
                t0 = clock()
                if ran is None:
                    causes = CausesSpill(os.path.join(tmp, "causes.arrow"))
                    wrote = _results(c, wtasks, write_partition_task)
                    wrote += [d["local"] for d in done if "local" in d]
                    cells = {}
                    for w in wrote:
                        _fold_wrote(w, tot, hint, cells)
                    if cut_run:
                        from gropcap.run.spill import merged_causes
                        causes.add(merged_causes(works, 0, nflows))
                    else:
                        _add_causes(causes, works, 0, nflows)
                    parts = None
                    if plot:
                        from gropcap.run.plotdata import PlotParts
                        parts = PlotParts.of_capture(models, capture)
                        for w in works:
                            parts.add(w)
                else:
                    causes = ran["causes"]  # folded in run by run
                    parts = ran["plots"]
                    cells = ran["cells"]
                tm["write"] = clock() - t0
                t0 = clock()
                extra = {}
                if cells_on:
                    extra["stages"] = _cells_stages(c, cells_dir, config, models, cells, tot,
                                                    infos, captures, egress, progress)
                    tm["gro_cells"] = clock() - t0
                    t0 = clock()
                from gropcap.run.stream import egress_extra
                extra.update(egress_extra(tot))
                summary = render_summary(tot, infos=infos, config=config, mtu=mtu,
                                         receive=receive or ReceiveContext.from_config(config),
                                         extra=extra, captures=captures)
                tunnel_hint = _finish_hint(
                    hint, done, summary, tot, decoded if decoded is not None else
                    (lambda: [decode_table(f, i, decode_options)[0]
                              for i, f in enumerate(files)]), stats)
                if failures:
                    summary["failed_inputs"] = [f.as_dict() for f in failures]
                flows = tot.flows_table()
                plot_out = None
                if parts is not None:
                    from gropcap.run.plotdata import plot_data, title_of
                    primary = "napi" if "napi" in models else models[0]
                    plot_out = plot_data(models, primary, title_of(infos, config),
                                         {m: tot.models[m].seg_hist for m in models},
                                         parts.series(), flows, parts.reason_keys())
                # (a spill is mapped here, before its scratch directory goes)
                flow_causes = causes.result(flows.num_rows)
                written = []
                if out_dir:
                    from gropcap.io.parquet import summary_metadata, write_table
                    for name in DATASET_DIRS:
                        if not os.listdir(os.path.join(stage, name)):
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
            for st in stages:
                shutil.rmtree(st, ignore_errors=True)
                # again once open_client's workers are gone (a task still running)
                getattr(c, "gropcap_after_close", []).append(
                    lambda st=st: shutil.rmtree(st, ignore_errors=True))
            for d in made:
                try:
                    os.rmdir(d)         # only if nothing was written (a fallback, an error)
                except OSError:
                    pass
    return PartitionedResult(summary=summary, flows=flows, paths=written, metadata=meta,
                             totals=tot, flow_causes=flow_causes,
                             udp_tunnel_hint=tunnel_hint, failures=failures,
                             plot_data=plot_out,
                             timings={**tm, "finish": clock() - t0}, exchange=how,
                             task_timings=[d["timings"] for d in done]
                             if fused is not None else [])


def _finish_hint(hint, done: list, summary: dict, tot, decoded: list, stats):
    """``report.receive.tunnel_hint`` of the run (None without one): the partitions'
    tunnel rows in capture order for the ideal model, the whole decoded table (small by
    ``HINT_NAPI_MAX_ROWS``) read back from the scratch pieces for the napi model
    (``decoded()``: the tables, decoded again, after the fused exchange)."""
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
        if callable(decoded):           # the fused exchange: no pieces, decode again
            tables = decoded()
        else:
            tables = [file_table(d.kind, [p.ref for p in d.pieces], d.index, d.new_index)
                      for d in decoded]
        table = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
        co = stats.infer(table) if stats is not None and stats.num else None
        return table, (co if co is not None and co.num_coalesced else None)
    seg_in = tot.coalesced.segs_total if tot.coalesced else tot.capture.packets
    return hint.finish(summary["models"], seg_in, tot.capture.packets, whole,
                       summary["inputs"]["run_of_file"])


def _merge_run(tot, done: list) -> None:
    """Fold GRO results (``done``: their counts without per-flow parts, which the
    partitions keep on disk: ``run.spill``) into ``tot``: model counts, coalesced input.
    Their counts are dropped from ``done``: the delivery info, tunnel rows and
    output-pass counts stay."""
    for d in done:
        for m, mc in d.pop("models").items():
            tot.models[m].merge(mc)
        co = d.pop("coalesced")
        if co is not None:
            tot.coalesced = co if tot.coalesced is None else tot.coalesced.merge(co)


def _fold_wrote(w: dict, tot, hint, cells: dict | None = None) -> None:
    """A write task's counts (super-packets per encapsulation, the tunnel hint's rows
    before) into the run's totals; its gathered native super-packets (``--tunnel-gro``)
    onto ``cells``' list of each model."""
    for m, enc in w["encap"].items():
        _merge_encap(tot.models[m], enc)
        hint.before[m] += w["before"][m]
    if cells is not None:
        for m, part in w.get("cells", {}).items():
            cells.setdefault(m, []).append(part)


def _cells_stages(c, cells_dir: str, config, models, cells: dict, tot, infos,
                  captures: str, egress, progress) -> dict:
    """``--tunnel-gro``: the gro_cells stage of each model over the native super-packets
    the write tasks gathered (``cells``: per model their ``CellsPart`` files), one task
    per model (``run.dask_tasks.cells_task``); its egress counts go to ``tot``. Returns
    the summary's ``stages``."""
    from gropcap.gro.stages import stages_summary
    from gropcap.run.dask_tasks import cells_task
    from gropcap.run.summary import inputs_of
    run_of_file = np.asarray(inputs_of(tot.capture, infos, captures)["run_of_file"],
                             np.int64)
    seg_in = tot.coalesced.segs_total if tot.coalesced else tot.capture.packets
    tasks = [(c.submit(cells_task, cells_dir, config, m, cells.get(m, []), run_of_file,
                       tot.capture.packets, seg_in, egress, pure=False),
              (cells_dir, config, m)) for m in models]
    if progress is not None:
        progress.track(f"gro_cells {'+'.join(models)}", [f for f, _ in tasks])
    out = {}
    for m, (got, counts) in zip(models, _results(c, tasks, cells_task)):
        out[m] = stages_summary(got)
        tot.models[m].egress = counts
    return out


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
           "DATASET_DIRS"]
