"""The pipeline over partitions on Dask: local worker processes or a ``tcp://`` cluster.

Layer: same inputs and output as :func:`gropcap.pipeline.analyze` (paths -> an
:class:`~gropcap.pipeline.Analysis`); the work is cut into partitions that keep the result
exact, run as Dask tasks, and merged by one deterministic reduction on the client:

1. **decode**: one task per input file (``decode_batch`` with the file's position as
   ``file_index``); a plain file above ``split_bytes`` is scanned for its record framing
   and decoded in byte ranges of whole scan batches. Tables stay on the workers; the
   client fetches each once and concatenates them in input order, as
   ``pipeline.decode_files`` does.
2. **GRO**: the kernel keeps GRO state per RX queue (``napi_struct`` per queue,
   ``dev_gro_receive`` works on ``napi->gro_hash``), so in the ``napi`` model whole
   queues' rows (in capture order) are one task of ``engine.simulate_batch``; the per-queue
   :class:`~gropcap.gro.engine.BatchResult` s are mapped back to global row, flow, poll
   and super-packet numbers and :func:`engine.assemble` orders delivery by (poll time,
   queue, poll order) exactly as in one process (docs/gro-model.md: queues are
   independent); frames captured already coalesced take their per-row GSO input along. The
   ``ideal`` model, configurations that run the reference model, and the gro_cells stage
   run as one task per model.

Coalesced-input detection and flow numbering need every row: one task each.
See docs/scale.md for figures and limits.

Failures: a file that fails to parse, or whose task is lost with its worker twice, is
left out and recorded in :attr:`DistributedAnalysis.failures` (path, byte range, error); the
summary lists them under ``failed_inputs``. Nothing else is dropped silently.

>>> # from gropcap.runner import analyze_distributed
>>> # a = analyze_distributed(["a.pcap", "b.pcap"], jobs=2)
>>> # a.summary() == gropcap.analyze(["a.pcap", "b.pcap"]).summary()
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os

import numpy as np
import pyarrow as pa

from gropcap.capture.scan import iter_scan_batches
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.errors import ConfigError
from gropcap.gro.config import MODELS, GroConfig
from gropcap.pipeline import DECODERS, ENGINES, Analysis, EgressOptions


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
# records per batch of a one-process run (capture.scan.iter_scan_batches' default)
PIPELINE_BATCH = inspect.signature(iter_scan_batches).parameters["batch_records"].default


# ---- tasks (run on workers; module-level so they pickle by reference) ----

def decode_file_task(path: str, file_index: int, options: DecodeOptions,
                     decoder: str = "fast"):
    """Decode one whole capture file: ``(table, CaptureInfo)`` (PACKET_SCHEMA rows with
    ``file_index``), the per-file part of ``pipeline.decode_files``."""
    if decoder == "fast":
        from gropcap.capture.scan import iter_scan_batches as batches_of
        from gropcap.decode.fast import decode_batch
    else:
        from gropcap.capture import iter_batches
        from gropcap.decode.reference import decode_batch

        def batches_of(p):
            return iter_batches(p, engine="reference")
    batches = []
    info = None
    for info, batch in batches_of(path):
        if len(batch):
            batches.append(decode_batch(batch, options, file_index=file_index))
    table = pa.Table.from_batches(batches, schema=PACKET_SCHEMA) if batches \
        else PACKET_SCHEMA.empty_table()
    return table, info


def plan_ranges_task(path: str, split_bytes: int, batch_records: int):
    """Scan one file's record framing (no decoding) and cut it into byte ranges of whole
    scan batches, each at least ``split_bytes`` long: ``(ranges, CaptureInfo)`` with
    ``ranges`` a list of ``(first_batch, end_batch, byte_start, byte_end)``."""
    starts = []
    info = None
    for info, batch in iter_scan_batches(path, batch_records=batch_records):
        if len(batch):
            starts.append(int(batch.file_offset[0]))
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


def coalesced_task(sources):
    """``gso.coalesced_input`` of the whole decoded table (None when no frame is
    coalesced), on a worker."""
    from gropcap.gso import coalesced_input
    co = coalesced_input(_packets_of(sources))
    return co if co.num_coalesced else None


def _take_coalesced(co, rows: np.ndarray):
    """The per-row arrays of a CoalescedInput for ``rows`` only (None stays None)."""
    if co is None:
        return None
    from gropcap.gso import CoalescedInput
    part = CoalescedInput(co.is_gso[rows], co.gso_size[rows], co.segs[rows], co.source[rows])
    fl = getattr(co, "frag_list", None)
    if fl is not None:
        part.frag_list = np.asarray(fl)[rows]
    return part if part.num_coalesced else None


def flow_ids_task(sources) -> np.ndarray:
    """``flows.assign_flow_ids`` of the whole decoded table, on a worker."""
    from gropcap.gro.flows import assign_flow_ids
    return assign_flow_ids(_packets_of(sources))


def queue_task(sources, queues: list[int], config: GroConfig, coalesced=None):
    """GRO of the rows of some RX queues (capture order) of the whole decoded table
    (rebuilt here from the decode results ``sources``, so the client never uploads it):
    ``(BatchResult, rows)`` with the result numbered locally and ``rows`` the global row
    numbers of its packets."""
    from gropcap.gro.engine import simulate_batch
    from gropcap.gro.rss import rss_hash, rx_queue
    packets = _packets_of(sources)
    h = rss_hash(packets, config.rss_key, enabled=config.rss == "toeplitz")
    rows = np.nonzero(np.isin(np.asarray(rx_queue(h, config.queues)), queues))[0]
    part, _ = simulate_batch(packets.take(pa.array(rows)), config, None, final=True,
                             coalesced=_take_coalesced(coalesced, rows))
    return part, rows


def model_task(sources, config: GroConfig, engine: str, coalesced):
    """One model over the whole table (``pipeline.simulate`` and, when configured, the
    gro_cells stage): ``(GroResult, stages or None)``."""
    from gropcap.pipeline import simulate
    packets = _packets_of(sources)
    result = simulate(packets, config, engine=engine, coalesced=coalesced)
    stages = None
    if config.tunnel_gro is not None:
        from gropcap.gro.stages import simulate_stages
        stages = simulate_stages(packets, config, native=result, engine=engine,
                                 coalesced=coalesced)
    return result, stages


# ---- the reduction ----

def merge_queue_parts(parts: list, rows: list[np.ndarray], flow_id: np.ndarray,
                      queue: np.ndarray, config: GroConfig):
    """Map per-queue BatchResults to global numbering and assemble one GroResult.

    ``rows[i]``: global row numbers of partition ``i`` (ascending); ``flow_id``: global
    flow ids (first appearance over the whole table, ``flows.assign_flow_ids``);
    ``queue``: RX queue per row. Polls keep their order within a queue, and
    :func:`engine.assemble` ranks them by (time, queue, order), so the merge is the
    one-process delivery order.
    """
    from gropcap.gro.engine import BatchResult, assemble
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    p_row, p_reason, p_inst, p_poll = [], [], [], []
    segs: dict[str, list] = {}
    p_time, p_queue = [], []
    poll_off = 0
    inst_off = 0
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
    merged = BatchResult(
        row_start=0, flow_id=flow_id,
        rx_queue=queue.astype(np.uint16), p_row=cat(p_row),
        p_reason=cat(p_reason).astype(np.uint8), p_inst=cat(p_inst), p_poll=cat(p_poll),
        segs={f: cat(v) for f, v in segs.items()}, poll_base=0,
        poll_time=cat(p_time), poll_queue=cat(p_queue))
    return assemble([merged], config)


def _queue_split_ok(config: GroConfig, engine: str) -> bool:
    from gropcap.gro.reference import needs_reference
    return (config.model == "napi" and engine == "fast" and config.tunnel_gro is None
            and not needs_reference(config))


@contextlib.contextmanager
def open_client(client=None, *, jobs: int | None = None, scheduler: str | None = None):
    """The Dask client to use: ``client`` as given, else one connected to ``scheduler``
    (``tcp://HOST:PORT``), else a LocalCluster of ``jobs`` single-threaded worker
    processes. Clients and clusters made here are closed on exit."""
    if client is not None:
        yield client
        return
    from dask.distributed import Client, LocalCluster
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
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def _err_text(exc: BaseException) -> str:
    one = getattr(exc, "one_line", None)
    return one() if callable(one) else f"{type(exc).__name__}: {exc}"


def analyze_distributed(paths, config: GroConfig | None = None, *, client=None,
                        jobs: int | None = None, scheduler: str | None = None,
                        models=MODELS, decode_options: DecodeOptions | None = None,
                        engine: str = "fast", decoder: str = "fast",
                        egress: EgressOptions | None = None,
                        split_bytes: int | None = SPLIT_BYTES,
                        batch_records: int = BATCH_RECORDS) -> DistributedAnalysis:
    """:func:`gropcap.pipeline.analyze` on Dask, with the same result.

    Args:
        paths: capture file(s) or directories.
        config, models, decode_options, engine, decoder, egress: as ``pipeline.analyze``.
        client: a ``dask.distributed.Client`` to run on (not closed here).
        jobs: without ``client``/``scheduler``: local worker processes (default: CPUs).
        scheduler: ``tcp://HOST:PORT`` of a running Dask scheduler.
        split_bytes: plain (uncompressed) files larger than this are decoded in byte
            ranges of at least this size, cut at scan-batch boundaries (None: whole files).
        batch_records: records per scan batch (the unit ranges are made of).

    Returns:
        A :class:`DistributedAnalysis`: verdicts, tables and summary equal to the
        one-process ``analyze`` when every input parses; otherwise the failed inputs are
        in ``failures`` and the summary's ``failed_inputs``, the rest is analysed.

    Example:
        >>> a = analyze_distributed("sample_pcaps", jobs=2)  # doctest: +SKIP
    """
    from gropcap.capture import expand_inputs
    config = config or GroConfig()
    decode_options = decode_options or DecodeOptions()
    models = list(models)
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"unknown model {m!r}", hint=f"use one of {MODELS}")
    if decoder not in DECODERS:
        raise ConfigError(f"unknown decoder {decoder!r}", hint=f"use one of {DECODERS}")
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}", hint=f"use one of {ENGINES}")
    if egress is not None:
        egress.features  # validate before any work
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    files = expand_inputs([str(p) for p in paths])
    with open_client(client, jobs=jobs, scheduler=scheduler) as c:
        tables, infos, failures, sources = _decode_all(
            c, files, decode_options, decoder, split_bytes, batch_records)
        packets = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
        # the inference of gso_size needs every row (SYNs, per-direction statistics): one
        # task, whose result the GRO tasks take straight from its worker
        co_fut = c.submit(coalesced_task, sources, pure=False)
        results, stages = _simulate_models(c, packets, sources, config, models, engine,
                                           co_fut)
        coalesced = _result_or_retry(c, co_fut, coalesced_task, sources)[0]
    a = DistributedAnalysis(packets=packets, infos=infos, config=config, results=results,
                            decode_options=decode_options, stages=stages, egress=egress)
    a.coalesced = coalesced
    a.failures = failures
    return a


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


def _decode_all(c, files, options, decoder, split_bytes, batch_records):
    """Decode every file (whole, or in byte ranges for large plain files); returns
    ``(tables, infos, failures, sources)`` in input order (``sources``: the decode
    futures per file),
    ``file_index`` renumbered over the
    files that succeeded (as one process would number them)."""
    from gropcap.capture.compress import sniff_compression

    def splittable(path):
        if decoder != "fast" or not split_bytes or os.path.getsize(path) <= split_bytes:
            return False
        with open(path, "rb") as f:
            return not sniff_compression(f.read(8))

    jobs = []
    for i, path in enumerate(files):
        if splittable(path):
            args = (path, split_bytes, batch_records)
            jobs.append(("plan", args, c.submit(plan_ranges_task, *args, pure=False)))
        else:
            args = (path, i, options, decoder)
            jobs.append(("file", args, c.submit(decode_file_task, *args, pure=False)))
    # every plan is waited for only after all tasks are queued, so plans overlap decoding
    for i, (kind, args, fut) in enumerate(jobs):
        if kind != "plan":
            continue
        path = files[i]
        try:
            (ranges, info), _ = _result_or_retry(c, fut, plan_ranges_task, *args)
        except Exception as exc:
            jobs[i] = ("failed", InputFailure(path, 0, None, _err_text(exc)), None)
            continue
        futs = []
        for b0, b1, lo, hi in ranges:
            rargs = (path, i, b0, b1, options, batch_records)
            futs.append(((lo, hi), rargs, c.submit(decode_range_task, *rargs, pure=False)))
        jobs[i] = ("ranges", info, futs)
    tables, infos, failures, sources = [], [], [], []
    for i, (kind, args, fut) in enumerate(jobs):
        path = files[i]
        if kind == "failed":
            failures.append(args)
            continue
        try:
            if kind == "file":
                (table, info), done = _result_or_retry(c, fut, decode_file_task, *args)
                parts, futs = [table], [done]
            else:
                info, parts, futs = args, [], []
                for (lo, hi), rargs, rfut in fut:
                    try:
                        table, done = _result_or_retry(c, rfut, decode_range_task, *rargs)
                        parts.append(table)
                        futs.append(done)
                    except Exception as exc:
                        raise _RangeFailed(lo, hi, exc) from exc
        except _RangeFailed as rf:
            # the file is left out whole: one process would have none of it either
            failures.append(InputFailure(path, rf.start, rf.end, _err_text(rf.exc)))
            continue
        except Exception as exc:   # parse error, or the worker died again
            failures.append(InputFailure(path, 0, None, _err_text(exc)))
            continue
        sources.append((kind, futs, i, len(infos)))
        tables.append(file_table(kind, parts, i, len(infos)))
        infos.append(info)
    return tables, infos, failures, sources


def file_table(kind: str, parts: list, index: int, new_index: int) -> pa.Table:
    """One file's decoded table from its task results (``kind`` ``"file"``: one
    ``(table, info)``; ``"ranges"``: tables in byte order), laid out as one process
    lays it out; ``file_index`` renumbered from ``index`` to ``new_index`` when an
    earlier input failed."""
    if kind == "file":
        parts = [p[0] if isinstance(p, tuple) else p for p in parts]
    table = pa.concat_tables(parts)
    if kind == "ranges" and table.num_rows:
        table = _encap_as_one_process(table)
    if table.num_rows and index != new_index:
        table = table.set_column(
            table.schema.get_field_index("file_index"), PACKET_SCHEMA.field("file_index"),
            pa.array(np.full(table.num_rows, new_index),
                     PACKET_SCHEMA.field("file_index").type))
    return table


def _packets_of(sources) -> pa.Table:
    """The whole decoded table, on a worker, from the decode tasks' results (Dask passes
    them in place of the futures)."""
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


def _simulate_models(c, packets: pa.Table, sources, config: GroConfig, models, engine,
                     coalesced):
    """Submit every model's GRO tasks, then reduce: ``(results, stages)``.

    napi: the RX queues are dealt round-robin into one partition per worker (a partition
    of several whole queues is as exact as one queue: they share no state)."""
    from gropcap.gro.rss import rss_hash, rx_queue
    nworkers = max(1, len(c.scheduler_info().get("workers", {})))
    pending = {}
    for m in models:
        cfg = config.replace(model=m)
        if _queue_split_ok(cfg, engine) and packets.num_rows:
            nparts = min(cfg.queues, nworkers)
            groups = [list(range(p, cfg.queues, nparts)) for p in range(nparts)]
            futs = [(c.submit(queue_task, sources, g, cfg, coalesced, pure=False),
                     (sources, g, cfg, coalesced)) for g in groups]
            pending[m] = ("queues", cfg, futs)
        else:
            args = (sources, cfg, engine, coalesced)
            pending[m] = ("model", cfg, (c.submit(model_task, *args, pure=False), args))
    flow_fut = c.submit(flow_ids_task, sources, pure=False) if any(
        p[0] == "queues" for p in pending.values()) else None
    results, stages = {}, {}
    flow_id = queue = None
    for m in models:
        kind, cfg, fut = pending[m]
        if kind == "queues":
            if flow_id is None:
                flow_id, _ = _result_or_retry(c, flow_fut, flow_ids_task, sources)
                h = rss_hash(packets, cfg.rss_key, enabled=cfg.rss == "toeplitz")
                queue = np.asarray(rx_queue(h, cfg.queues)).astype(np.int64)
            done = [_result_or_retry(c, f, queue_task, *args)[0] for f, args in fut]
            results[m] = merge_queue_parts([d[0] for d in done], [d[1] for d in done],
                                           flow_id, queue, cfg)
        else:
            (results[m], st), _ = _result_or_retry(c, fut[0], model_task, *fut[1])
            if st is not None:
                stages[m] = st
    return results, stages
