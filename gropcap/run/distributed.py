"""The pipeline over partitions on Dask: local worker processes or a ``tcp://`` cluster.

Layer: same inputs and output as :func:`gropcap.run.memory.analyze` (paths -> an
:class:`~gropcap.analysis.Analysis`); the work is cut into partitions that keep the result
exact, run as Dask tasks, and merged by one deterministic reduction on the client:

1. **decode**: one task per input file (``decode_batch`` with the file's position as
   ``file_index``); a plain file above ``split_bytes`` is scanned for its record framing
   and decoded in byte ranges of whole scan batches. Tables stay on the workers; a small
   task per piece returns its row count and its coalesced-input statistics
   (``gso.CoalescedStats``, merged on the client in input order).
2. **GRO**: :func:`engine.partition_of` gives every row a partition such that partitions
   share no GRO state: whole RX queues in the ``napi`` model (``napi->gro_hash`` per
   queue; with fewer queues than workers, also time pieces cut at idle gaps, where every
   queue is idle and empty: :func:`time_pieces`, ``engine.time_cuts``, from the client's
   copy of the table, fetched first then), whole loose same-flow classes in the
   ``ideal`` model. Each piece is split
   where it lies (``split_task``); a partition task (``partition_task``) fetches its
   share of every piece and replays it in capture order with ``engine.simulate_batch``.
   :func:`merge_parts` numbers flows over the whole capture and restores the one-process
   delivery order: (poll time, queue, poll order) in the napi model, (trigger row,
   emission order) then the end-of-capture flush by first row in the ideal model. The
   gro_cells stage and configurations only the reference model runs are one task per
   model over the whole table.
3. The client fetches the decoded tables while the workers run GRO (the
   :class:`~gropcap.analysis.Analysis` holds them) and concatenates them in input order,
   as ``run.memory.decode_files`` does.

See docs/scale.md for figures and limits.

Failures: a file that fails to parse, or whose task is lost with its worker twice, is
left out and recorded in :attr:`DistributedAnalysis.failures` (path, byte range, error); the
summary lists them under ``failed_inputs``. Nothing else is dropped silently.

>>> # from gropcap.run.distributed import analyze_distributed
>>> # a = analyze_distributed(["a.pcap", "b.pcap"], jobs=2)
>>> # a.summary() == gropcap.analyze(["a.pcap", "b.pcap"]).summary()
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np
import pyarrow as pa

from gropcap.capture.scan import BATCH_RECORDS as PIPELINE_BATCH
from gropcap.capture.scan import iter_scan_batches
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.errors import ConfigError
from gropcap.gro.config import MODELS, GroConfig
from gropcap.analysis import Analysis
from gropcap.run.options import EgressOptions, run_options


@dataclasses.dataclass(frozen=True)
class InputFailure:
    """One input that produced no rows: its path, the byte range tried ``[start, end)``
    (``end`` None: to the end of the file) and the error text."""

    path: str
    start: int
    end: int | None
    error: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class DistributedAnalysis(Analysis):
    """An :class:`Analysis` plus the inputs that failed (``failures``); ``summary()``
    carries ``failed_inputs`` only when there are some, so a run without failures has
    exactly the one-process summary."""

    failures: list[InputFailure]

    def summary(self) -> dict:
        out = super().summary()
        if self.failures:
            out["failed_inputs"] = [f.as_dict() for f in self.failures]
        return out


SPLIT_BYTES = 1 << 30          # a byte range per GiB of a large file
BATCH_RECORDS = 262144         # records per scan batch in byte-range decoding
# records per batch of a one-process run: PIPELINE_BATCH (capture.scan.BATCH_RECORDS,
# iter_scan_batches' default), imported above


# ---- tasks (run on workers; module-level so they pickle by reference) ----

def decode_file_task(path: str, file_index: int, options: DecodeOptions,
                     decoder: str = "fast"):
    """Decode one whole capture file: ``(table, CaptureInfo)`` (PACKET_SCHEMA rows with
    ``file_index``), the per-file part of ``run.memory.decode_files``."""
    from gropcap.run.inputs import decode_table
    return decode_table(path, file_index, options, decoder=decoder)


def plan_ranges_task(path: str, split_bytes: int, batch_records: int):
    """Scan one file's record framing (no decoding) and cut it into byte ranges of whole
    scan batches, each at least ``split_bytes`` long: ``(ranges, CaptureInfo)`` with
    ``ranges`` a list of ``(first_batch, end_batch, byte_start, byte_end)``."""
    from gropcap.decode.support import LinktypeCheck
    starts = []
    info = None
    linktypes = LinktypeCheck()
    for info, batch in iter_scan_batches(path, batch_records=batch_records):
        if len(batch):
            linktypes.add(batch)
            starts.append(int(batch.file_offset[0]))
    linktypes.finish(info)
    size = os.path.getsize(path)
    ranges = []
    b0 = 0
    for k in range(1, len(starts) + 1):
        end = starts[k] if k < len(starts) else size
        if end - starts[b0] >= split_bytes or k == len(starts):
            ranges.append((b0, k, starts[b0] if b0 else 0, end))
            b0 = k
    return ranges, info


def decode_range_task(path: str, file_index: int, first_batch: int, end_batch: int,
                      options: DecodeOptions, batch_records: int) -> pa.Table:
    """Decode scan batches ``[first_batch, end_batch)`` of one file (the framing before
    them is scanned again, not decoded: records are only findable from the file head)."""
    from gropcap.decode.fast import decode_batch
    out = []
    k = 0
    for _, batch in iter_scan_batches(path, batch_records=batch_records):
        if not len(batch):
            continue
        if k >= end_batch:
            break
        if k >= first_batch:
            out.append(decode_batch(batch, options, file_index=file_index))
        k += 1
    return pa.Table.from_batches(out, schema=PACKET_SCHEMA) if out \
        else PACKET_SCHEMA.empty_table()


def piece_meta_task(decoded):
    """What the client needs of one decoded piece without fetching its rows:
    ``(rows, CaptureInfo or None, gso.CoalescedStats, run.accumulators.CaptureCounts)``
    (both merged on the client in input order)."""
    from gropcap.gro.coalesced import CoalescedStats
    from gropcap.run.accumulators import CaptureCounts
    table, info = decoded if isinstance(decoded, tuple) else (decoded, None)
    stats = CoalescedStats()
    stats.add(table)
    counts = CaptureCounts()
    counts.add(table)
    return table.num_rows, info, stats, counts


def store_task(fn, args: tuple, path: str, splits: tuple = ()):
    """Run a decode task and write its table to ``path`` (Arrow IPC stream, which keeps
    each batch's ``encap`` dictionary) in the shared scratch directory; returns what
    :func:`piece_meta_task` returns. Readers memory-map the file: no copy through the
    scheduler's transfers. ``splits``: ``(name, config, parts)`` for which the row's GRO
    partition (``engine.partition_of``) is computed here, once, and written beside it
    (``path.name.part``), so partition tasks only select rows."""
    from gropcap.gro.engine import partition_of
    out = fn(*args)
    table = out[0] if isinstance(out, tuple) else out
    _write_ipc(path, table, stream=True)
    for name, config, parts in splits:
        part = partition_of(table, config, parts).astype(np.uint16)
        _write_ipc(f"{path}.{name}.part", pa.table({"part": part}))
    rows, info, stats, counts = piece_meta_task(out)
    # its statistics per TCP direction stay beside it (gro.coalesced.CoalescedStats.spill)
    return rows, info, stats.spill(f"{path}.coalesced"), counts


def _write_ipc(path: str, table: pa.Table, stream: bool = False) -> None:
    """``table`` to ``path`` (Arrow IPC file, or stream format), renamed into place (from
    a name of this attempt's own: a task re-run after its worker died never shares it)."""
    import uuid
    tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(tmp, "wb") as sink, new(sink, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def _table_of(piece) -> pa.Table:
    """A decoded piece as a task receives it: a table, ``(table, info)`` from
    :func:`decode_file_task`, or the path of a file :func:`store_task` wrote (mapped,
    not read)."""
    if isinstance(piece, str):
        with pa.memory_map(piece) as src:
            return pa.ipc.open_stream(src).read_all()
    return piece[0] if isinstance(piece, tuple) else piece


def split_task(decoded, index: int, new_index: int, offset: int, config: GroConfig,
               parts: int, only: int | None = None, part_file: str | None = None,
               cuts: np.ndarray | None = None) -> list:
    """Cut one decoded piece into the GRO partitions of ``config``'s model
    (``engine.partition_of``): ``[(table, global_rows), ...]`` per partition, rows in
    capture order; ``offset`` is the piece's first global row. ``only``: just that
    partition's ``(table, global_rows)``. ``part_file``: the partitions
    :func:`store_task` computed already. ``cuts``: the napi model's time cuts (global
    rows, ``engine.time_cuts``)."""
    from gropcap.gro.engine import partition_of
    table = _table_of(decoded)
    if index != new_index and table.num_rows:
        table = _renumber_file(table, new_index)
    if parts == 1:
        out = [(table, np.arange(offset, offset + table.num_rows, dtype=np.int64))]
        return out[0] if only is not None else out
    if part_file is not None:
        with pa.memory_map(part_file) as src:
            part = pa.ipc.open_file(src).read_all().column("part").to_numpy()
    else:
        part = partition_of(table, config, parts, cuts=cuts, first_row=offset)
    out = []
    for p in range(parts) if only is None else [only]:
        idx = np.flatnonzero(part == p)
        out.append((table.take(pa.array(idx)), idx + offset))
    return out[0] if only is not None else out


def partition_task(pieces: list, config: GroConfig, stats):
    """GRO of one partition: the rows of every piece that fall in it, in capture order
    (``pieces``: ``(table, global_rows)`` in input order). Returns
    ``(BatchResult, rows, flow_keys)``: the result numbered locally, the global row of
    each of its rows, and the same-flow key of each local flow id (to number flows over
    the whole capture)."""
    from gropcap.gro.engine import simulate_batch
    tables = [t for t, _ in pieces if t.num_rows]
    rows = np.concatenate([r for _, r in pieces]) if pieces else np.zeros(0, np.int64)
    table = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
    co = stats.infer(table) if stats is not None and stats.num and table.num_rows else None
    if co is not None and not co.num_coalesced:
        co = None
    part, state = simulate_batch(table, config, None, final=True, coalesced=co)
    kt = state.flow_ids
    keys = np.zeros(0, np.uint64) if kt.sorted_keys is None else \
        kt.sorted_keys[np.argsort(kt.sorted_ids)]
    return part, rows.astype(np.int64), keys


def partition_files_task(pieces: list, config: GroConfig, parts: int, k: int, stats,
                         out: str | None = None, cuts: np.ndarray | None = None):
    """:func:`partition_task` of partition ``k`` over pieces in the shared scratch
    directory (``pieces``: ``(path, index, new_index, offset)`` in input order): each
    file is mapped and only this partition's rows are copied out. ``out``: write the
    result there as Arrow files (a directory) and return only its name
    (:func:`load_part` maps it). ``cuts``: as :func:`split_task` (the partitions are
    then computed here, not read from the decode's ``.part`` file)."""
    timed = cuts is not None and len(cuts)
    res = partition_task([split_task(path, i, j, off, config, parts, only=k,
                                     part_file=f"{path}.{config.model}.part"
                                     if parts > 1 and not timed else None, cuts=cuts)
                          for path, i, j, off in pieces], config, stats)
    if out is None:
        return res
    part, rows, keys = res
    groups = {
        "rows": {"rows": rows, "flow_id": part.flow_id, "rx_queue": part.rx_queue},
        "verdicts": {"p_row": part.p_row, "p_reason": part.p_reason,
                     "p_inst": part.p_inst, "p_poll": part.p_poll},
        "segs": dict(part.segs),
        "polls": {"poll_time": part.poll_time, "poll_queue": part.poll_queue},
        "scalars": {"row_start": np.array([part.row_start], np.int64),
                    "poll_base": np.array([part.poll_base], np.int64)},
    }
    width = keys.dtype.itemsize if len(keys) else 0
    key_arr = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(max(width, 1)), len(keys), [None, pa.py_buffer(keys.tobytes())])
    tables = {g: pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in cols.items()})
              for g, cols in groups.items()}
    tables["keys"] = pa.table({"key": key_arr})
    mkdir_in_place(out)
    for g, t in tables.items():
        _write_ipc(os.path.join(out, g + ".arrow"), t)
    return ("arrow", out)


def load_part(ref):
    """A :func:`partition_task` result, given as it is or as the ``("arrow", dir)`` a
    scratch-directory run returns (Arrow files of plain arrays, memory-mapped)."""
    if not (isinstance(ref, tuple) and len(ref) == 2 and ref[0] == "arrow"):
        return ref
    from gropcap.gro.engine import BatchResult

    def group(name):
        with pa.memory_map(os.path.join(ref[1], name + ".arrow")) as src:
            t = pa.ipc.open_file(src).read_all()
        return {c: t.column(c).to_numpy() for c in t.column_names if c != "key"} | (
            {"key": t.column("key")} if "key" in t.column_names else {})
    rows, verdicts, segs = group("rows"), group("verdicts"), group("segs")
    polls, scalars = group("polls"), group("scalars")
    key_col = group("keys")["key"].combine_chunks()
    width = key_col.type.byte_width
    buf = key_col.buffers()[1]
    keys = np.frombuffer(buf, np.uint8, len(key_col) * width, key_col.offset * width) \
        .view(np.dtype((np.void, width))) if len(key_col) else np.zeros(0, np.uint64)
    part = BatchResult(
        row_start=int(scalars["row_start"][0]), flow_id=rows["flow_id"],
        rx_queue=rows["rx_queue"], p_row=verdicts["p_row"], p_reason=verdicts["p_reason"],
        p_inst=verdicts["p_inst"], p_poll=verdicts["p_poll"], segs=segs,
        poll_base=int(scalars["poll_base"][0]), poll_time=polls["poll_time"],
        poll_queue=polls["poll_queue"])
    return part, rows["rows"], keys


def model_task(sources, config: GroConfig, engine: str, stats, run_of_file=None):
    """One model over the whole table (``run.engines.simulate`` and, when configured, the
    gro_cells stage): ``(GroResult, stages or None)``; ``run_of_file``: the receiver run
    of each file (None: one run)."""
    from gropcap.run.engines import simulate
    packets = _packets_of(sources)
    coalesced = stats.infer(packets) if stats is not None and stats.num else None
    runs = None
    if run_of_file is not None and max(run_of_file, default=0):
        from gropcap.run.receivers import row_runs
        runs = row_runs(packets, np.asarray(run_of_file, np.int64))
    result = simulate(packets, config, engine=engine, coalesced=coalesced, runs=runs)
    stages = None
    if config.tunnel_gro is not None:
        from gropcap.gro.stages import simulate_stages
        stages = simulate_stages(packets, config, native=result, engine=engine,
                                 coalesced=coalesced, runs=runs)
    return result, stages


# ---- the reduction ----

def global_flow_ids(parts: list, rows: list[np.ndarray], keys: list[np.ndarray],
                    n: int) -> np.ndarray:
    """Flow id per global row, numbered by first appearance over the whole capture (what
    ``flows.assign_flow_ids`` and a one-process engine give): each partition numbered its
    flows locally and sent each local flow's key; a flow seen by several partitions gets
    the first row of any of them."""
    flow_id = np.zeros(n, np.int64)
    all_keys, all_first, spans = [], [], []
    for part, r, k in zip(parts, rows, keys):
        if not len(r):
            spans.append(0)
            continue
        _, first = np.unique(part.flow_id, return_index=True)
        all_keys.append(k)
        all_first.append(r[first])
        spans.append(len(k))
    if not all_keys:
        return flow_id
    cat_keys = np.concatenate(all_keys)
    firsts = np.concatenate(all_first)
    uniq, inv = np.unique(cat_keys, return_inverse=True)
    inv = inv.ravel()
    first_of = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_of, inv, firsts)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first_of)] = np.arange(len(uniq))
    off = 0
    for part, r, span in zip(parts, rows, spans):
        if len(r):
            flow_id[r] = rank[inv[off:off + span]][part.flow_id]
        off += span
    return flow_id


def run_keys(keys: np.ndarray, run: int) -> np.ndarray:
    """A partition's flow keys (``np.void`` rows) prefixed by its receiver run
    (``run/receivers.py``): the same flow in two runs is two flows."""
    if not len(keys):
        return keys
    raw = keys.view(np.uint8).reshape(len(keys), keys.dtype.itemsize)
    both = np.concatenate([np.full((len(keys), 1), run, np.int64).view(np.uint8), raw],
                          axis=1)
    return np.ascontiguousarray(both).view(np.dtype((np.void, both.shape[1]))).ravel()


def merge_parts(parts: list, rows: list[np.ndarray], keys: list[np.ndarray], n: int,
                config: GroConfig, runs: list[int] | None = None):
    """Map per-partition BatchResults (``engine.partition_of``) to global numbering and
    assemble the one GroResult a one-process run gives.

    ``rows[i]``: global row numbers of partition ``i`` (ascending); ``keys[i]``: its
    local flows' keys. Instances and polls are renumbered by partition offsets (they
    only name things). Delivery order:

    * ``napi``: polls keep their order within a queue and :func:`engine.assemble` ranks
      them by (time, queue, order), the one-process rule;
    * ``ideal``: a super-packet goes up while some row is received (``trig``) or in the
      end-of-capture flush, oldest hold first. Every row belongs to one partition, so the
      one-process order is (trigger row, emission order within it), then the flushed
      ones by their first row (hold order is row order).

    ``runs[i]``: the receiver run of partition ``i`` (``run/receivers.py``; None: one
    run; partitions run-major): flows are keyed by run, and each run is delivered after
    the one before it (one merged part per run, ``BatchResult.run``).
    """
    from gropcap.gro.engine import assemble
    runs = [0] * len(parts) if runs is None else list(runs)
    if max(runs, default=0):
        keys = [run_keys(k, r) for k, r in zip(keys, runs)]
    flow_id = global_flow_ids(parts, rows, keys, n)
    queue = np.zeros(n, np.uint16)
    for part, r in zip(parts, rows):
        queue[r] = part.rx_queue
    merged, off = [], [0, 0]       # polls and instances numbered over every run
    lo = 0
    for run in sorted(set(runs)):
        mine = [i for i, x in enumerate(runs) if x == run]
        hi = max([lo] + [int(rows[i].max()) + 1 for i in mine if len(rows[i])])
        merged.append(_merge_run([parts[i] for i in mine], [rows[i] for i in mine],
                                 flow_id, queue, lo, hi, n, config, run, off))
        lo = hi
    return assemble(merged, config)


def _merge_run(parts, rows, flow_id, queue, lo: int, hi: int, n: int, config, run: int,
               off: list):
    """One receiver run's partitions (global rows ``lo:hi``) as one BatchResult of
    global numbering (``off``: polls and instances of the runs before, advanced)."""
    from gropcap.gro.engine import BatchResult
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    p_row, p_reason, p_inst, p_poll = [], [], [], []
    segs: dict[str, list] = {}
    p_time, p_queue = [], []
    poll_off, inst_off = off
    for part, r in zip(parts, rows):
        nseg_inst = int(part.segs["inst"].max()) + 1 if len(part.segs["inst"]) else 0
        ninst = max(nseg_inst, int(part.p_inst.max()) + 1 if len(part.p_inst) else 0)
        p_row.append(r[part.p_row])
        p_reason.append(part.p_reason)
        p_inst.append(part.p_inst + inst_off)
        # -1 (no poll) stays -1; poll numbers are local from part.poll_base
        pp = part.p_poll - part.poll_base + poll_off
        p_poll.append(np.where(part.p_poll < 0, part.p_poll, pp))
        for f, v in part.segs.items():
            if f in ("first", "last"):
                v = r[v]
            elif f == "trig":
                v = np.where(v < 0, -1, r[np.maximum(v, 0)]) if len(v) else v
            elif f == "inst":
                v = v + inst_off
            elif f == "poll":
                v = np.where(v < 0, v, v - part.poll_base + poll_off)
            elif f == "flow":
                v = flow_id[r[part.segs["first"]]] if len(v) else v
            segs.setdefault(f, []).append(v)
        p_time.append(part.poll_time)
        p_queue.append(part.poll_queue)
        poll_off += len(part.poll_time)
        inst_off += ninst
    seg = {f: cat(v) for f, v in segs.items()}
    if config.model != "napi" and len(seg.get("trig", ())):
        trig = seg["trig"]
        when = np.where(trig >= 0, trig, n + seg["first"])
        order = np.lexsort((np.arange(len(trig)), when))
        seg = {f: v[order] for f, v in seg.items()}
    base = off[0]
    off[:] = [poll_off, inst_off]
    return BatchResult(
        row_start=lo, flow_id=flow_id[lo:hi], rx_queue=queue[lo:hi], p_row=cat(p_row),
        p_reason=cat(p_reason).astype(np.uint8), p_inst=cat(p_inst), p_poll=cat(p_poll),
        segs=seg, poll_base=base, poll_time=cat(p_time), poll_queue=cat(p_queue), run=run)


def _nworkers(c) -> int:
    return max(1, len(c.scheduler_info().get("workers", {})))


def _nparts(config: GroConfig, nworkers: int) -> int:
    """Partitions of a split model: one per worker (at most one per RX queue)."""
    return min(config.queues, nworkers) if config.model == "napi" else nworkers


def _ignore_sigint() -> None:
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _quiet_worker() -> None:
    """A worker of an interrupted run: what it prints while the cluster is torn down
    (lost heartbeats, closed streams) is noise after "gropcap: interrupted"."""
    import logging
    logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)


def _local_cluster(n: int):
    """A LocalCluster of ``n`` worker processes and its client. The workers ignore
    SIGINT once started: a terminal's Ctrl-C reaches the whole process group, and only
    this process should act on it (it stops the run and closes the cluster) instead of
    every worker printing a traceback of its own."""
    import dask
    from dask.distributed import Client, LocalCluster
    # ":0": the scheduler's HTTP server on a free port (None still tries 8787 and warns
    # on stderr when another cluster holds it)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ()}):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
    c = None
    try:
        c = Client(cluster)
        c.run(_ignore_sigint)
        return cluster, c
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            _quiet_cluster(c)
        cluster.close()
        raise


def worker_environ() -> dict:
    """The environment Dask's nannies give the worker processes they start, without
    ``MALLOC_TRIM_THRESHOLD_`` (Dask sets 65536 to hand freed memory back at once):
    with it glibc returns the engine's large per-batch arrays to the kernel after each
    batch and takes fresh pages for the next; a fused partition task over 2 M rows
    took 1.29 M page faults and 7.4 s of CPU instead of 4.7 s (docs/scale.md). Memory
    stays bounded: the batches are.

    The workers' ``distributed`` log level is WARNING from their start (unless the
    environment sets ``DASK_LOGGING__DISTRIBUTED``): their INFO lines are noise on the
    user's terminal, and a run interrupted before :func:`_quiet_cluster` reached a
    worker printed its teardown ("Received 'close-stream' ... closing.") after "gropcap:
    interrupted" (``tests/run/test_interrupt.py``, seen once in a run of the suite)."""
    import dask
    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if "DASK_LOGGING__DISTRIBUTED" not in os.environ:
        env.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    return env


def _quiet_cluster(c) -> None:
    """An interrupted run's cluster is closed next: no log lines from its teardown, here
    (the scheduler and nannies run in this process) or in the workers."""
    import logging
    logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
    if c is not None:
        try:
            c.run(_quiet_worker)
        except Exception:
            pass


def _split_ok(config: GroConfig, engine: str) -> bool:
    """The numba engine runs this model by partitions (the gro_cells stage and the
    configurations only the reference model implements run as one task)."""
    from gropcap.gro.config import needs_reference
    return engine == "fast" and config.tunnel_gro is None and not needs_reference(config)


@contextlib.contextmanager
def open_client(client=None, *, jobs: int | None = None, scheduler: str | None = None):
    """The Dask client to use: ``client`` as given, else one connected to ``scheduler``
    (``tcp://HOST:PORT``), else a LocalCluster of ``jobs`` single-threaded worker
    processes. Clients and clusters made here are closed on exit; on a client given,
    every task the run submitted is cancelled on exit (:class:`_RunClient`). pyarrow's
    pandas shim is made ready first (``arrays.pandas_shim_ready``)."""
    from gropcap.arrays import pandas_shim_ready
    pandas_shim_ready()
    if client is not None:
        run = _RunClient(client)
        try:
            yield run
        finally:
            run.release()
        return
    from dask.distributed import Client
    if scheduler is not None:
        c = Client(scheduler)
        try:
            yield c
        finally:
            c.close()
        return
    n = int(jobs or os.cpu_count() or 1)
    if n < 1:
        raise ConfigError("--jobs must be at least 1")
    cluster, c = _local_cluster(n)
    # run once the workers are gone (an interrupted worker may still write scratch files)
    c.gropcap_after_close = []
    try:
        yield c
    except KeyboardInterrupt:
        _quiet_cluster(c)
        raise
    finally:
        c.close()
        cluster.close()
        for fn in c.gropcap_after_close:
            fn()


class _RunClient:
    """A client given by the caller, as one run sees it: ``submit`` remembers every
    future, and :meth:`release` cancels them all when the run ends, whatever ended it.

    A run that met a failed task would otherwise leave its tasks on a long-lived client
    (a notebook's, a test module's): the failed future's traceback holds the frame that
    holds the run's futures, and the client holds the failed future's state, so nothing
    is ever released. When a worker later dies, the scheduler recomputes what it held of
    that old run, against scratch files removed when the run ended. Everything else is
    the client's own."""

    def __init__(self, client):
        self._client = client
        self._futures: list = []

    def submit(self, *args, **kwargs):
        fut = self._client.submit(*args, **kwargs)
        self._futures.append(fut)
        return fut

    def release(self) -> None:
        futures, self._futures = self._futures, []
        if futures and self._client.status not in ("closing", "closed"):
            with contextlib.suppress(Exception):   # the client may be going away
                self._client.cancel(futures)

    def __getattr__(self, name):
        return getattr(self._client, name)


def _err_text(exc: BaseException) -> str:
    one = getattr(exc, "one_line", None)
    return one() if callable(one) else f"{type(exc).__name__}: {exc}"


def analyze_distributed(paths, config: GroConfig | None = None, *, client=None,
                        jobs: int | None = None, scheduler: str | None = None,
                        models=MODELS, decode_options: DecodeOptions | None = None,
                        engine: str = "fast", decoder: str = "fast",
                        egress: EgressOptions | None = None,
                        split_bytes: int | None = SPLIT_BYTES,
                        batch_records: int = BATCH_RECORDS,
                        scratch: str | bool | None = None,
                        progress=None, captures: str = "auto") -> DistributedAnalysis:
    """:func:`gropcap.run.memory.analyze` on Dask, with the same result.

    Args:
        paths: capture file(s) or directories.
        config, models, decode_options, engine, decoder, egress: as ``run.memory.analyze``.
        client: a ``dask.distributed.Client`` to run on (not closed here).
        jobs: without ``client``/``scheduler``: local worker processes (default: CPUs).
        scheduler: ``tcp://HOST:PORT`` of a running Dask scheduler.
        split_bytes: plain (uncompressed) files larger than this are decoded in byte
            ranges of at least this size, cut at scan-batch boundaries (None: whole files).
        batch_records: records per scan batch (the unit ranges are made of).
        scratch: how decoded pieces move between tasks. A directory the client and every
            worker can read and write (a shared file system): pieces are written there
            once as Arrow files and memory-mapped by every reader. None: a temporary
            directory when every worker runs on this host (``--jobs``, or a cluster of
            local workers), else Dask's own transfers. False: always Dask's transfers.
            Scratch files are removed before returning.
        progress: a :class:`gropcap.run.progress.Progress`: one line per stage counts
            its finished tasks.
        captures: how several files map to receiver runs (``run/receivers.py``): a
            GRO partition holds one run's rows, flows are keyed by run, delivery is run
            after run (:func:`merge_parts`).

    Returns:
        A :class:`DistributedAnalysis`: verdicts, tables and summary equal to the
        one-process ``analyze`` when every input parses; otherwise the failed inputs are
        in ``failures`` and the summary's ``failed_inputs``, the rest is analysed.

    Example:
        >>> a = analyze_distributed("sample_pcaps", jobs=2)  # doctest: +SKIP
    """
    from gropcap.run.inputs import input_files
    config, decode_options, models = run_options(config, decode_options, models,
                                                 decoder=decoder, engine=engine,
                                                 egress=egress, captures=captures)
    files = input_files(paths)
    with open_client(client, jobs=jobs, scheduler=scheduler) as c, \
            _scratch_dir(c, scratch) as tmp:
        nworkers = _nworkers(c)
        timed = time_pieces(config, models, engine, nworkers)
        # (the decode tasks write each row's RX-queue partition; a model cut in time
        # as well computes its partitions in the GRO tasks instead)
        splits = tuple((m, config.replace(model=m), _nparts(config.replace(model=m),
                                                             nworkers))
                       for m in models if _split_ok(config.replace(model=m), engine))
        decoded, infos, failures = _decode_all(c, files, decode_options, decoder,
                                               split_bytes, batch_records, tmp, progress,
                                               tuple(s for s in splits if s[2] > 1))
        from gropcap.run.summary import inputs_of
        # receiver runs (run/receivers.py): partitions per run, the run leads delivery
        run_of_file = inputs_of(_merged_capture(decoded), infos, captures)["run_of_file"]
        n = sum(p.rows for d in decoded for p in d.pieces)
        packets, cuts = None, {}
        if timed and n and not max(run_of_file, default=0):
            # the napi model cut in time at idle gaps (engine.time_cuts): every row's
            # time first, from the client's copy of the decoded table
            from gropcap.gro.engine import time_cuts
            packets = _client_table(c, decoded, tmp)
            ts = packets.column("ts_ns").to_numpy()
            for m, pieces in timed.items():
                mc = time_cuts(ts, config.replace(model=m), pieces)
                if len(mc):
                    cuts[m] = mc
                if progress is not None:
                    from gropcap.gro.engine import quiet_gap_ns
                    gap = quiet_gap_ns(config.replace(model=m)) / 1000
                    progress.note(
                        f"{m} model: cut in time at {len(mc)} idle gap(s) longer than "
                        f"{gap:g} us, {len(mc) + 1} pieces per RX-queue partition" if
                        len(mc) else f"{m} model: no idle gap longer than {gap:g} us to "
                        "cut it at: one task per RX-queue partition")
        # gso_size inference needs every row (SYNs, per-direction statistics): the
        # pieces' statistics, merged in input order
        stats = None
        for d in decoded:
            for p in d.pieces:
                stats = p.stats if stats is None else stats.merge(p.stats)
        if stats is not None:
            stats.set_mtu(config.mtu).mtu_inference()   # resolved once, shipped resolved
        pending = _submit_models(c, decoded, n, config, models, engine, stats, tmp,
                                 run_of_file, cuts)
        if progress is not None:
            for m, (_, _, tasks) in pending.items():
                progress.track(f"GRO {m}", [t[0] for t in tasks])
        if packets is None:
            # the client's copy of the decoded table while the workers run GRO
            packets = _client_table(c, decoded, tmp)
        results, stages, partitions = _gather_models(c, pending, n)
    a = DistributedAnalysis(packets=packets, infos=infos, config=config, results=results,
                            decode_options=decode_options, stages=stages, egress=egress)
    a.coalesced = stats.infer(packets) if stats is not None and stats.num else None
    from gropcap.gro.coalesced import CoalescedStats
    a.mtu = (stats or CoalescedStats(config.mtu)).mtu_inference()
    a.failures = failures
    a.captures = captures
    a._cache["totals"] = _merged_totals(a, decoded, partitions)
    return a


def _client_table(c, decoded: list, tmp) -> pa.Table:
    """The client's copy of the decoded table: mapped from the scratch files, or
    fetched."""
    tables = [file_table(d.kind, [p.ref for p in d.pieces] if tmp else
                         c.gather([p.ref for p in d.pieces]), d.index, d.new_index)
              for d in decoded]
    return pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()


def time_pieces(config: GroConfig, models, engine: str, nworkers: int) -> dict:
    """``{model: time pieces}`` for the split models with fewer RX-queue partitions than
    workers that can be cut in time (``engine.quiet_gap_ns``: the napi model at HZ <
    1000): each queue partition is cut into ``nworkers // queue partitions`` pieces
    where the capture has idle gaps (``engine.time_cuts``), so one RX queue uses every
    worker."""
    from gropcap.gro.engine import quiet_gap_ns
    out = {}
    for m in models:
        cfg = config.replace(model=m)
        if not _split_ok(cfg, engine) or quiet_gap_ns(cfg) is None:
            continue
        pieces = nworkers // _nparts(cfg, nworkers)
        if pieces >= 2:
            out[m] = pieces
    return out


def _merged_totals(a, decoded: list, partitions: dict):
    """The run's ``run.accumulators.Totals`` merged from its pieces and partitions: the
    capture counts each decode task made (file indexes moved past failed inputs), and
    per split model one ``ModelCounts`` per GRO partition (flows and rows numbered over
    the whole capture). The flows table and the coalesced-input counts are made once
    over the client's table (flow keys come from each flow's first row)."""
    from gropcap.run.accumulators import file_index_of, model_counts, totals_of_analysis
    capture = _merged_capture(decoded)
    fidx = file_index_of(a.decoded)
    models = {}
    for m, parts in partitions.items():
        for part, rows in parts:
            s = part.segs
            first = rows[s["first"]]
            mc = model_counts(m, a.decoded, fidx, reasons=part.p_reason, count=s["count"],
                              end=s["end"], payload=s["payload"],
                              flow=a.results[m].flow_id[first], first=first)
            models[m] = mc if m not in models else models[m].merge(mc)
    return totals_of_analysis(a, capture=capture, models=models)


def _merged_capture(decoded: list):
    """The ``CaptureCounts`` of every decoded piece, merged in input order (file indexes
    moved past failed inputs)."""
    import copy

    from gropcap.run.accumulators import CaptureCounts
    capture = CaptureCounts()
    for d in decoded:
        for p in d.pieces:
            # renumbered on a copy: the pieces' counts may be merged again
            capture.merge(p.counts if d.index == d.new_index else
                          copy.copy(p.counts).renumber_file(d.index, d.new_index))
    return capture


@contextlib.contextmanager
def _scratch_dir(c, scratch):
    """The directory pieces are exchanged through (None: Dask transfers); a fresh
    subdirectory, removed on exit (the client's mapped tables stay valid: Linux keeps an
    unlinked file's pages while they are mapped)."""
    import shutil
    import tempfile
    if scratch is False or (scratch is None and not _workers_local(c)):
        yield None
        return
    d = tempfile.mkdtemp(prefix="gropcap-dask-", dir=None if scratch is None else scratch)
    after_close = getattr(c, "gropcap_after_close", None)   # a cluster this run owns
    try:
        yield d
    except BaseException:
        # an interrupt or an error: tasks may still be running on the workers. On a
        # cluster of this run the directory goes once the workers are gone, so no task
        # fails on a missing file and logs it on the terminal after "gropcap:
        # interrupted" (tests/run/test_interrupt.py, seen once in a run of the suite)
        if after_close is None:
            shutil.rmtree(d, ignore_errors=True)
        else:
            after_close.append(lambda: shutil.rmtree(d, ignore_errors=True))
        raise
    shutil.rmtree(d, ignore_errors=True)
    if after_close is not None:
        # again after open_client closed its cluster: a task still running then (none
        # should be) recreates nothing but its own directory
        after_close.append(lambda: shutil.rmtree(d, ignore_errors=True))


def mkdir_in_place(path: str) -> str:
    """``path`` made if missing, but not its parent: a task's directory in the scratch
    directory. A task still running after an interrupt or an error ended the run (its
    worker not yet gone) then fails instead of recreating the scratch directory the
    client removed (``os.makedirs`` would)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    return path


def _workers_local(c) -> bool:
    """Every worker runs on this host (so it sees this host's temporary directory)."""
    import socket
    from urllib.parse import urlsplit
    workers = c.scheduler_info().get("workers", {})
    if not workers:
        return False
    mine = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    with contextlib.suppress(OSError):
        mine.update(socket.gethostbyname_ex(socket.gethostname())[2])
    hosts = {urlsplit(a).hostname for a in workers}
    return hosts <= mine


def shared(c, value):
    """A future holding ``value`` for tasks to take as an argument, which the scheduler
    recomputes if the worker holding it dies: a task that returns it (the value travels
    in the task graph).

    Not ``Client.scatter``: scattered data lost with its worker cannot be recomputed, so
    every task depending on it is cancelled ("lost dependencies"), and broadcasting it
    does not help, since the scheduler's active memory manager (``ReduceReplicas``, on by
    default) drops the extra copies once no task waits for them on that worker."""
    return c.submit(_given, value, pure=False)


def _given(value):
    return value


def _result_or_retry(c, fut, fn, *args):
    """``(result, future)``: ``fut``'s result; a task lost with a dying worker
    (KilledWorker, possibly through no fault of its own: it shared the worker) runs once
    more on its own first."""
    from dask.distributed import KilledWorker
    try:
        return fut.result(), fut
    except KilledWorker:
        fut = c.submit(fn, *args, pure=False)
        return fut.result(), fut


@dataclasses.dataclass
class _Piece:
    """One decode task's output, left on its worker: the future, its byte range, and
    what :func:`piece_meta_task` told the client."""

    ref: object          # the decode future, or the scratch file's path
    args: tuple
    task: object
    start: int = 0
    end: int | None = None
    rows: int = 0
    stats: object = None
    counts: object = None      # run.accumulators.CaptureCounts of its rows
    offset: int = 0


@dataclasses.dataclass
class _Decoded:
    """One input file that decoded: its pieces in byte order."""

    kind: str
    index: int
    new_index: int
    pieces: list


def _decode_all(c, files, options, decoder, split_bytes, batch_records, scratch=None,
                progress=None, splits=()):
    """Decode every file (whole, or in byte ranges for large plain files), leaving the
    tables on the workers (or in ``scratch`` files); returns ``(decoded, infos,
    failures)`` in input order with ``file_index`` renumbered over the files that
    succeeded (as one process would number them) and every piece's global row offset
    set."""
    from dask.distributed import KilledWorker

    from gropcap.capture.compress import sniff_compression

    def splittable(path):
        if decoder != "fast" or not split_bytes or os.path.getsize(path) <= split_bytes:
            return False
        with open(path, "rb") as f:
            return not sniff_compression(f.read(8))

    count = iter(range(1 << 62))

    def submit(fn, args, path=None):
        if scratch:
            path = path or os.path.join(scratch, f"piece{next(count)}.arrow")
            return path, c.submit(store_task, fn, args, path, splits, pure=False)
        fut = c.submit(fn, *args, pure=False)
        return fut, c.submit(piece_meta_task, fut, pure=False)

    jobs = []
    for i, path in enumerate(files):
        if splittable(path):
            args = (path, split_bytes, batch_records)
            jobs.append(("plan", args, c.submit(plan_ranges_task, *args, pure=False)))
        else:
            args = (path, i, options, decoder)
            fut, meta = submit(decode_file_task, args)
            jobs.append(("file", None, [(_Piece(fut, args, decode_file_task), meta)]))
    # every plan is waited for only after all tasks are queued, so plans overlap decoding
    for i, (kind, args, fut) in enumerate(jobs):
        if kind != "plan":
            continue
        try:
            (ranges, info), _ = _result_or_retry(c, fut, plan_ranges_task, *args)
        except Exception as exc:
            jobs[i] = ("failed", InputFailure(files[i], 0, None, _err_text(exc)), None)
            continue
        pieces = []
        for b0, b1, lo, hi in ranges:
            rargs = (files[i], i, b0, b1, options, batch_records)
            rfut, meta = submit(decode_range_task, rargs)
            pieces.append((_Piece(rfut, rargs, decode_range_task, lo, hi), meta))
        jobs[i] = ("ranges", info, pieces)
    if progress is not None:
        # in input bytes (a range's bytes, a whole file's size): the line's rate is MB/s
        def nbytes(piece):
            a = piece.args
            return a[3] - a[2] if piece.task is decode_range_task else os.path.getsize(a[0])
        line = progress.track("decode", [], total=sum(
            nbytes(p) for kind, _, pieces in jobs if kind != "failed" for p, _ in pieces),
            unit="bytes")
        for kind, _, pieces in jobs:
            for p, m in pieces if kind != "failed" else ():
                progress.follow(line, m, nbytes(p))
    decoded, infos, failures = [], [], []
    offset = 0
    for i, (kind, info, pieces) in enumerate(jobs):
        path = files[i]
        if kind == "failed":
            failures.append(info)
            continue
        failed = None
        for piece, meta in pieces:
            try:
                try:
                    rows, pinfo, stats, counts = meta.result()
                except KilledWorker:
                    # lost with a dying worker, maybe not by its own fault: once more alone
                    piece.ref, meta = submit(piece.task, piece.args,
                                             piece.ref if scratch else None)
                    rows, pinfo, stats, counts = meta.result()
            except Exception as exc:   # parse error, or the worker died again
                failed = InputFailure(path, piece.start if kind == "ranges" else 0,
                                      piece.end if kind == "ranges" else None,
                                      _err_text(exc))
                break
            piece.rows, piece.stats, piece.counts = rows, stats, counts
            if kind == "file":
                info = pinfo
        if failed is not None:
            # the file is left out whole: one process would have none of it either
            failures.append(failed)
            continue
        d = _Decoded(kind, i, len(infos), [p for p, _ in pieces])
        for p in d.pieces:
            p.offset = offset
            offset += p.rows
        decoded.append(d)
        infos.append(info)
    return decoded, infos, failures


def file_table(kind: str, parts: list, index: int, new_index: int) -> pa.Table:
    """One file's decoded table from its task results (``kind`` ``"file"``: one
    ``(table, info)``; ``"ranges"``: tables in byte order), laid out as one process
    lays it out; ``file_index`` renumbered from ``index`` to ``new_index`` when an
    earlier input failed."""
    table = pa.concat_tables([_table_of(p) for p in parts])
    if kind == "ranges" and table.num_rows:
        table = _encap_as_one_process(table)
    if table.num_rows and index != new_index:
        table = _renumber_file(table, new_index)
    return table


def _renumber_file(table: pa.Table, new_index: int) -> pa.Table:
    return table.set_column(
        table.schema.get_field_index("file_index"), PACKET_SCHEMA.field("file_index"),
        pa.array(np.full(table.num_rows, new_index), PACKET_SCHEMA.field("file_index").type))


def _packets_of(sources) -> pa.Table:
    """The whole decoded table, on a worker, from the decode tasks' results (Dask passes
    them in place of the futures): ``sources`` is ``[(kind, results, index, new_index)]``
    per file."""
    tables = [file_table(kind, parts, i, j) for kind, parts, i, j in sources]
    return pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()


def _encap_as_one_process(table: pa.Table) -> pa.Table:
    """Re-encode the ``encap`` dictionary column as one process builds it: one dictionary
    per scan batch of ``PIPELINE_BATCH`` records, in first-occurrence order (values are
    the same whatever the cut; only the dictionaries depend on it)."""
    i = table.schema.get_field_index("encap")
    field = PACKET_SCHEMA.field("encap")
    strings = table.column(i).cast(pa.string())
    chunks = [strings.slice(o, PIPELINE_BATCH).combine_chunks().dictionary_encode()
              .cast(field.type) for o in range(0, table.num_rows, PIPELINE_BATCH)]
    return table.set_column(i, field, pa.chunked_array(chunks, field.type))


class _RangeFailed(Exception):
    def __init__(self, start, end, exc):
        super().__init__(start, end)
        self.start, self.end, self.exc = start, end, exc


def _submit_models(c, decoded: list, n: int, config: GroConfig, models, engine, stats,
                   scratch=None, run_of_file=None, cuts: dict | None = None):
    """Submit every model's GRO tasks: ``{model: (kind, cfg, tasks)}``.

    A model the numba engine runs (``_split_ok``) is cut into one partition per worker
    (``engine.partition_of``: whole RX queues in the napi model, whole same-flow classes
    in the ideal model): each decoded piece is split where it lies, and each partition
    task fetches only its share of every piece (with a scratch directory, each partition
    task maps every piece's file and copies its own rows out). Others run as one task
    over the whole table. ``run_of_file``: the receiver run of each file (None: one
    run); a partition holds one run's pieces (tasks run-major). ``cuts``: per model its
    time cuts (:func:`time_pieces`), each queue partition cut into time pieces."""
    import operator
    nworkers = _nworkers(c)
    stats_arg = shared(c, stats) if stats is not None and stats.num else None
    sources = [(d.kind, [p.ref for p in d.pieces], d.index, d.new_index) for d in decoded]
    pending = {}
    run_of = (lambda d: 0) if run_of_file is None else \
        (lambda d: run_of_file[d.new_index])  # noqa: E731
    nruns = 1 + max((run_of(d) for d in decoded), default=0)
    for m in models:
        cfg = config.replace(model=m)
        if _split_ok(cfg, engine) and n:
            nparts = _nparts(cfg, nworkers)
            mc = (cuts or {}).get(m)
            if mc is not None:
                nparts *= len(mc) + 1
            tasks = []
            for r in range(nruns):
                mine = [d for d in decoded if run_of(d) == r]
                if scratch:
                    refs = [(p.ref, d.index, d.new_index, p.offset)
                            for d in mine for p in d.pieces]
                    for k in range(nparts):
                        args = (refs, cfg, nparts, k, stats_arg,
                                os.path.join(scratch, f"gro-{m}-{r}-{k}"), mc)
                        tasks.append((c.submit(partition_files_task, *args, pure=False),
                                      args, partition_files_task, r))
                else:
                    splits = [c.submit(split_task, p.ref, d.index, d.new_index, p.offset,
                                       cfg, nparts, None, None, mc, pure=False)
                              for d in mine for p in d.pieces]
                    for k in range(nparts):
                        picks = [c.submit(operator.getitem, sp, k, pure=False)
                                 for sp in splits]
                        args = (picks, cfg, stats_arg)
                        tasks.append((c.submit(partition_task, *args, pure=False), args,
                                      partition_task, r))
            pending[m] = ("parts", cfg, tasks)
        else:
            args = (sources, cfg, engine, stats_arg, run_of_file)
            pending[m] = ("model", cfg, [(c.submit(model_task, *args, pure=False), args)])
    return pending


def _gather_models(c, pending: dict, n: int):
    """Wait for the GRO tasks and reduce: ``(results, stages, partitions)`` (per split
    model its ``(BatchResult, global rows)`` per partition). A task lost with a
    dying worker is retried once; a second loss fails the run (a GRO partition cannot be
    left out without changing every count)."""
    results, stages, partitions = {}, {}, {}
    for m, (kind, cfg, tasks) in pending.items():
        if kind == "parts":
            done = [load_part(_result_or_retry(c, f, fn, *args)[0])
                    for f, args, fn, _ in tasks]
            results[m] = merge_parts([d[0] for d in done], [d[1] for d in done],
                                     [d[2] for d in done], n, cfg,
                                     runs=[t[3] for t in tasks])
            partitions[m] = [(d[0], d[1]) for d in done]
        else:
            fut, args = tasks[0]
            (results[m], st), _ = _result_or_retry(c, fut, model_task, *args)
            if st is not None:
                stages[m] = st
    return results, stages, partitions
