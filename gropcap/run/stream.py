"""Streaming analysis: capture files -> Parquet and the summary, in bounded memory.

The in-memory :func:`gropcap.run.memory.analyze` holds the whole decoded table and every
GroResult array at once (a 4 M-packet capture peaked at 4.9 GB). :func:`stream_analyze`
gives the same ``packets.parquet`` / ``superpackets.parquet`` / ``flows.parquet`` and the
same summary dict, batch by batch:

1. **decode + GRO pass**: fast scan -> fast decode -> ``gro.engine.simulate_batch_models``
   (every model from one preparation per batch; state carried across batches and
   files), each batch as soon as it is decoded; the columns the packets pass reads back
   go to a temporary Arrow file, the engine's partial results (``BatchResult``) to spill
   files; the summary counters are accumulated. A frame captured already coalesced (its
   gso_size needs the whole capture first) ends this fused pass, and the run starts
   over unfused: the whole decoded table to the temporary file, then GRO over it as a
   second sweep. UDP tunnels on ports without a tunnel socket (the tunnel hint) keep the
   fused pass: their rows are gathered as they come (``_FusedTunnels``); only a capture
   small enough for the hint's napi part, which replays the whole table, starts over.
2. **super-packets pass**: the napi model's delivery order is known only when every poll
   is in (``engine.assemble``: polls ordered by time, queue, number). With the poll ranks
   and the super-packets per poll, each super-packet's delivery position is
   ``offset[rank[poll]] + its index within the poll``; a small reorder buffer writes them
   in that order (a queue's polls are already in time order, so the buffer stays small).
   With two threads the rows are built and written from a second sweep over the spill in
   a thread of their own (:class:`_SegWriter`), which the packets pass does not wait for.
3. **packets pass**: the temporary decoded Parquet is read back batch by batch and joined
   with the spilled verdicts (``gro_seg`` from the instance -> position map).

A fused run does the packets pass inside the first pass (:class:`_Inline`): each batch is
held until its rows are decided, then counted. Summary only, that is the whole run.
With ``--out`` and one RX queue the delivery positions are known as the super-packets
come (:class:`_OnlineOrder`, which starts the run over where its order would not be the
super-packets pass's), so ``packets.parquet`` is written from the held batches too.
Only the super-packets are spilled, for ``superpackets.parquet``. The ideal model can
hold rows until the end, so rows that wait past :data:`INLINE_HOLD_ROWS` are handed
on, with every later row, to the temporary files and the packets pass.

With ``--poll-acks`` a pass before these finds the frames the receiver's ACKs close
(:func:`_ack_times`, ``receive.ackpolls.AckScan`` / ``PollClock``); the napi model then
reads the retimed arrivals. With ``plot`` each row's time and file and each super-packet's
first row go to temporary files too (``run.plotdata.PlotRows``).

Memory that stays in RAM, per model: 5 bytes per super-packet (instance -> delivery
position, int32 with the sign telling single packets, and a "head seen" byte) and 32
bytes per NAPI poll (time, queue, receiver run, rank); per flow: its key row and counters
(with ``--poll-acks``, per TCP direction a few ids and the frames waiting for an ACK).
Nothing per packet: the per-packet arrays go through the spill files, or wait in the
held batches of an inline run (at most :data:`INLINE_HOLD_ROWS` rows with ``--out``).
With ``--out`` inline, 8 bytes per instance (its position). Batches are
``batch_records`` rows.

Layer: takes paths, calls capture/ (scan), decode/ (fast), gro/ (engine) and writes
Parquet through pyarrow; hands back a :class:`StreamResult` (summary dict, flows table,
paths written).
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import os
import shutil
import tempfile
import threading

import numpy as np
import pyarrow as pa

from gropcap import collector
from gropcap.decode.options import DecodeOptions
from gropcap.arrays import (ArraySpill, RowFile, arrow_of, arrow_repeated, arrow_strings,
                            arrow_table, numpy_of, take_rows)
from gropcap.decode.schema import PACKET_SCHEMA, empty_packet_table
from gropcap.errors import ConfigError
from gropcap.gro.config import MODELS, GroConfig
from gropcap.gro.reasons import ROLE_ALONE, ROLE_HEAD, ROLE_MERGED
from gropcap.io.columns import readable
from gropcap.gro._batch_kernels import first_rows, verdict_codes
from gropcap.priority import HELPER
from gropcap.run.single import Uncovered

OUT_NAMES = ("packets.parquet", "superpackets.parquet", "flows.parquet")
# records per batch of a bounded-memory run: per-batch costs that grow with the flows
# (statistics, counters, the key tables' bookkeeping) paid half as often as at 65536,
# with glibc keeping the batches' blocks (gropcap.__main__.tune_malloc; docs/
# performance.md, "Larger batches")
STREAM_BATCH = 131072
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@dataclasses.dataclass
class StreamResult:
    """What :func:`stream_analyze` hands back.

    Attributes:
        summary: the same dict as ``Analysis.summary()`` (``gropcap analyze --format json``
            adds ``top_flows``: ``report.summary.report_dict``).
        flows: the flows table (one row per flow; in memory, it grows with flows only).
        paths: the Parquet files written (empty when ``out_dir`` was None).
        metadata: the provenance written into every Parquet file.
        peak_spill_bytes: largest size of the temporary files (decoded table + verdicts).
        timings: wall seconds per phase (``decode``, ``gro`` of which ``engine`` and
            ``coalesced``, ``superpackets``, ``packets``, ``flows``; the single pass,
            which runs in the decode step, counts as ``engine``).
        flow_causes: per flow, the probable cause of its breaks
            (``report.explain.flow_causes``).
    """

    summary: dict
    flows: pa.Table
    paths: list
    metadata: dict
    peak_spill_bytes: int = 0
    # UDP tunnels on ports without a tunnel socket (report.receive.tunnel_hint), or None
    udp_tunnel_hint: dict | None = None
    timings: dict = dataclasses.field(default_factory=dict)
    flow_causes: list = dataclasses.field(default_factory=list)
    # the run's finished accumulators (run.accumulators.Totals) the summary renders
    totals: object = None
    # the threads the run used (run.threads: 1, or 2 with decode and spills in threads)
    threads: int = 1
    # what --plot draws (run.plotdata.PlotData), when asked for (``plot=True``)
    plot_data: object = None
    # the models ran in gro/fused.py's single pass (run.single.SinglePass), not
    # on the engine; ``engine_why``: why not (None when they did)
    single_pass: bool = False
    engine_why: str | None = None

    @property
    def primary_model(self) -> str:
        """The model whose verdicts fill the unprefixed packet columns (napi if run)."""
        models = list(self.summary["models"])
        return "napi" if "napi" in models else models[0]

    @property
    def models(self) -> list[str]:
        return list(self.summary["models"])


def streamable(config: GroConfig, *, engine: str = "fast", decoder: str = "fast",
               egress=None) -> str | None:
    """None when :func:`stream_analyze` models this run, else why not (one line):
    ``run.options.memory_reason``."""
    from gropcap.run.options import memory_reason
    return memory_reason(config, engine=engine, decoder=decoder, egress=egress)


class _NoSpill:
    """A :class:`ArraySpill` that keeps nothing (what an inline run never reads back)."""

    path = None

    def put(self, *arrays) -> None:
        pass

    def put_segs(self, s: dict) -> None:
        pass

    def size(self) -> int:
        return 0

    def close(self) -> None:
        pass


class RowCodes(RowFile):
    """One int64 per decoded row (``egress.header_codes``), appended in row order to a
    temporary file and looked up by row (``arrays.RowFile``): what egress reads of each
    super-packet's first packet, without the decoded table (a super-packet's first packet
    is usually recent, so only recent pages are read)."""

    def __init__(self, path: str, scenario: str):
        super().__init__(path, np.int64)
        self.scenario = scenario

    def add(self, t: pa.Table) -> None:
        """The next rows."""
        from gropcap.egress import header_codes
        if t.num_rows:
            self.append(header_codes(t, self.scenario))


# the super-packet fields a spill stores narrower than the engine's int64 (values that fit
# 32 bits: segments, bytes, sizes, codes, queues); read back as int64. Temporary files
# cost about 3-5 s of system time a GB on the machine this was measured on, and the
# super-packets were two thirds of a --out run's (docs/performance.md)
_SEG_NARROW = frozenset(("count", "payload", "gso", "end", "queue", "fixed", "gcode"))


def _fits32(a: np.ndarray) -> bool:
    return not len(a) or (int(a.min()) >= -2 ** 31 and int(a.max()) < 2 ** 31)


class SegSpill(ArraySpill):
    """An :class:`ArraySpill` of a model's super-packets: :meth:`put_segs` stores the
    :data:`_SEG_NARROW` fields as int32, :meth:`get_segs` returns every field of
    ``engine._SEG_FIELDS`` as int64 again (what the engine produced)."""

    def put_segs(self, s: dict) -> None:
        from gropcap.gro.engine import _SEG_FIELDS
        # (a field whose values do not fit stays int64: each array keeps its dtype)
        self.put(*[s[f].astype(np.int32) if f in _SEG_NARROW and _fits32(s[f]) else s[f]
                   for f in _SEG_FIELDS])

    def get_segs(self) -> dict:
        from gropcap.gro.engine import _SEG_FIELDS
        return {f: a.astype(np.int64) if f in _SEG_NARROW else a
                for f, a in zip(_SEG_FIELDS, self.get(len(_SEG_FIELDS)))}


class _ModelRun:
    """One model's engine state, spill files and counts (``run.accumulators``);
    ``egress_rows``: the run's :class:`RowCodes` when it counts egress
    (``counts.egress``)."""

    def __init__(self, model: str, config: GroConfig, tmp: str, counts, row_arrays: int = 2,
                 inline: bool = False, egress_rows: RowCodes | None = None,
                 order: "_OnlineOrder | None" = None):
        self.model = model
        self.egress_rows = egress_rows
        self.config = config.replace(model=model)
        self.instances = 0                # the super-packets numbered, once GRO is done
        # inline (a fused run's packets pass in its first pass, _Inline): the verdicts
        # stay in memory until their batch is counted, nothing reads rows back, and only
        # a run with --out (``order``: the delivery positions as they come) reads its
        # super-packets back, for superpackets.parquet
        self.order = order
        self.rows = _NoSpill() if inline else ArraySpill(os.path.join(tmp, f"{model}.rows"))
        # per-row arrays the packets pass reads back: flow_id and rx_queue (--out), the
        # flow_id only (the primary model's, for the flow causes), or none
        self.row_arrays = 0 if inline else row_arrays
        self.verdicts = _VerdictBuffer() if inline else \
            ArraySpill(os.path.join(tmp, f"{model}.verdicts"))
        self.segs = _NoSpill() if inline and order is None else \
            SegSpill(os.path.join(tmp, f"{model}.segs"))
        self.parts = 0
        self.nseg = 0
        self.counts = counts            # run.accumulators.ModelCounts
        self.poll_time: list = []
        self.poll_queue: list = []
        self.poll_run: list = []        # the receiver run of each poll (run/receivers.py)

    def take(self, part, file_of=None):
        """Spill and count this model's BatchResult of the next batch (the engine state
        is carried by the run's ``run.engines.BatchGroModels``)."""
        self.parts += 1
        if self.order is not None:
            self.order.take(part)
        self.rows.put(*(part.flow_id, part.rx_queue)[:self.row_arrays])
        self.verdicts.put(part.p_row, part.p_reason, part.p_inst, part.p_poll)
        s = part.segs
        self.segs.put_segs(s)
        self.counts.add_reasons(part.p_reason)
        self.nseg += len(s["first"])
        self.counts.add_segs(count=s["count"], end=s["end"], payload=s["payload"],
                             flow=s["flow"], file=file_of(s["first"]))
        if self.counts.egress is not None and self.egress_rows is not None:
            self._egress(s)
        if self.poll_time or len(part.poll_time):
            assert part.poll_base == sum(len(t) for t in self.poll_time)
        self.poll_time.append(part.poll_time)
        self.poll_queue.append(part.poll_queue)
        self.poll_run.append(np.full(len(part.poll_time), part.run, np.int64))
        return part


    def _egress(self, s) -> None:
        """Egress of the part's super-packets (``counts.egress``), their first packets'
        header codes from :attr:`egress_rows`."""
        from gropcap.gro.engine import _gso_table, gso_types     # (cached per config)
        self.counts.egress.add(s["count"], s["gso"], gso_types(s, _gso_table(self.config)),
                               s["payload"], self.egress_rows.take(s["first"]))


class _SegOrder:
    """Delivery position of every super-packet (engine.assemble's order, online)."""

    def __init__(self, run: _ModelRun):
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        p_time, p_queue = cat(run.poll_time), cat(run.poll_queue)
        p_run = cat(run.poll_run)
        self.napi = run.config.model == "napi"
        self.inferred = self.napi and len(p_time) > 0
        run.poll_time = run.poll_queue = run.poll_run = None
        if self.inferred:
            # engine.assemble's order: receiver run, time, queue, number
            order = np.lexsort((np.arange(len(p_time)), p_queue, p_time, p_run))
            self.rank = np.empty(len(order), np.int64)
            self.rank[order] = np.arange(len(order))
            self.poll_segs = np.zeros(len(p_time), np.int64)

    def count(self, polls: np.ndarray) -> None:
        """First sweep: super-packets per poll."""
        if self.inferred and len(polls):
            self.poll_segs += np.bincount(polls, minlength=len(self.poll_segs))

    def start(self) -> None:
        if self.inferred:
            by_rank = np.zeros(len(self.rank), np.int64)
            by_rank[self.rank] = self.poll_segs
            start = np.concatenate([[0], np.cumsum(by_rank)[:-1]])
            self.offset = start[self.rank]          # first position of each poll
            self.seen = np.zeros(len(self.rank), np.int64)
        self.next = 0

    def positions(self, polls: np.ndarray) -> np.ndarray:
        """Second sweep (same order): positions of the next super-packets."""
        m = len(polls)
        if not self.inferred:
            pos = np.arange(self.next, self.next + m, dtype=np.int64)
            self.next += m
            return pos
        if not m:
            return np.zeros(0, np.int64)
        o = np.argsort(polls, kind="stable")
        ps = polls[o]
        starts = np.concatenate([[0], np.nonzero(np.diff(ps))[0] + 1])
        within_sorted = np.arange(m) - np.repeat(starts, np.diff(np.append(starts, m)))
        within = np.empty(m, np.int64)
        within[o] = within_sorted
        pos = self.offset[polls] + self.seen[polls] + within
        self.seen += np.bincount(polls, minlength=len(self.seen))
        return pos

    def copy(self) -> "_SegOrder":
        """A cursor of its own over the same order, from where this one is (a second
        sweep over the same spill: ``_SegWriter``)."""
        other = copy.copy(self)
        if self.inferred:
            other.seen = self.seen.copy()
        return other

    def poll_ids(self, polls: np.ndarray) -> np.ndarray:
        if self.inferred:
            return self.rank[polls]
        return polls if self.napi else np.full(len(polls), -1, np.int64)


# rows an inline run with --out holds while they wait for their super-packets'
# positions (the columns the packets pass reads and the verdicts: ~25 MB a batch of
# 131072) before it hands them and the rest on to the packets pass: _Inline.held
INLINE_HOLD_ROWS = 1 << 19
_NO_POSITION = np.iinfo(np.int64).min


class _OnlineOrder:
    """Each super-packet's delivery position (:class:`_SegOrder`'s) as its part comes:
    what an inline run with ``--out`` (:class:`_Inline`) writes in ``packets.parquet``
    before the run has ended. Delivery order is spill order when the polls are numbered
    in the order they are delivered (receiver run, time: one RX queue) and no part's
    super-packets come from a poll before the last part's (within a part, by poll as
    ``_SegOrder.positions`` orders them). :meth:`take` checks both and raises
    :class:`_Unfused` where either fails: the run starts again with the two passes.
    ``ipos``: per instance the position, ``-(pos + 1)`` for a super-packet of one
    packet, as the super-packets pass maps them."""

    def __init__(self, napi: bool):
        self.napi = napi
        self.next = 0
        self.ipos = np.zeros(0, np.int64)
        self.known = 0              # every instance before this one has its position
        self.top = 0                # the instances delivered are all before this one
        self.last_poll = -1         # the latest poll a super-packet came from
        self.last_key = None        # (receiver run, time) of the latest poll
        self.queue = None           # the queue of the polls

    def take(self, part) -> None:
        """The positions of ``part``'s super-packets (a BatchResult)."""
        if self.napi:
            self._polls(part)
        s = part.segs
        m = len(s["first"])
        if not m:
            return
        pos = np.arange(self.next, self.next + m, dtype=np.int64)
        if self.napi:
            polls = np.asarray(s["poll"])
            if int(polls.min()) < self.last_poll:
                raise _Unfused
            self.last_poll = int(polls.max())
            if m > 1 and not bool(np.all(polls[1:] >= polls[:-1])):
                o = np.argsort(polls, kind="stable")
                pos = np.empty(m, np.int64)
                pos[o] = np.arange(self.next, self.next + m)
        self.next += m
        inst = np.asarray(s["inst"], np.int64)
        top = int(inst.max()) + 1
        if top > len(self.ipos):
            grown = np.full(max(top, 2 * len(self.ipos)), _NO_POSITION, np.int64)
            grown[:len(self.ipos)] = self.ipos
            self.ipos = grown
        self.ipos[inst] = np.where(s["count"] > 1, pos, -pos - 1)
        self.top = max(self.top, top)
        if inst.min() <= self.known:
            # an instance is numbered when its first packet comes, and delivered when
            # its flow's super-packet ends: positions fill in out of order
            unknown = np.flatnonzero(self.ipos[self.known:self.top] == _NO_POSITION)
            self.known = int(self.known + unknown[0]) if len(unknown) else self.top

    def _polls(self, part) -> None:
        # the part's new polls follow the ones before in (receiver run, time), on one
        # queue: their numbers are then their delivery order (_SegOrder's rank)
        t = np.asarray(part.poll_time)
        if not len(t):
            return
        q = np.asarray(part.poll_queue)
        if (self.last_key is not None and (part.run, int(t[0])) < self.last_key) or \
                (self.queue is not None and int(q[0]) != self.queue) or \
                bool(np.any(q != q[0])) or \
                (len(t) > 1 and not bool(np.all(t[1:] >= t[:-1]))):
            raise _Unfused
        self.last_key = (part.run, int(t[-1]))
        self.queue = int(q[0])

    def poll_ids(self, polls: np.ndarray) -> np.ndarray:
        """``poll_id`` of rows decided in ``polls`` (``_SegOrder.poll_ids``)."""
        return polls if self.napi else np.full(len(polls), -1, np.int64)


def _verdict_columns(fid, rxq, reason, poll_id, inst, ipos, first) -> dict:
    """One model's verdict columns of ``packets.parquet`` for a batch's rows: ``ipos``
    each instance's super-packet position (``-(pos + 1)`` for one packet alone),
    ``first`` whether a row is its instance's first (``gro_role`` HEAD)."""
    n = len(inst)
    seg, role, reason8 = np.empty(n, np.int64), np.empty(n, np.uint8), np.empty(n, np.uint8)
    verdict_codes(inst, ipos, first, reason, ROLE_ALONE, ROLE_HEAD, ROLE_MERGED, seg, role,
                  reason8)
    return {"flow_id": fid.astype(np.int64, copy=False), "gro_seg": seg, "gro_role": role,
            "reason": reason8, "rx_queue": rxq.astype(np.uint16, copy=False),
            "poll_id": poll_id.astype(np.int64, copy=False)}


def _with_model(cols: dict, c: dict, model: str, primary: str) -> dict:
    """``cols`` with ``model``'s :func:`_verdict_columns` ``c``: the primary model's
    unprefixed and first, every other's prefixed with its name, without ``flow_id``."""
    if model == primary:
        return {**c, **cols}
    cols.update({f"{model}_{k}": v for k, v in c.items() if k != "flow_id"})
    return cols


class _SegRows:
    """superpackets.parquet's rows of one model in delivery order (``seg_id``), from its
    spilled super-packets in spill order and their positions (:class:`_SegOrder`): rows
    wait until every position before theirs has come."""

    def __init__(self, model: str, gtable: np.ndarray):
        self.model = model
        self.gtable = gtable
        self.pend: dict[str, np.ndarray] | None = None
        self.next_pos = 0

    def add(self, s: dict, pos: np.ndarray, poll_ids: np.ndarray,
            last: bool) -> pa.Table | None:
        """The next spilled part ``s`` with its positions and poll ids; returns the rows
        that are next in delivery order (readable columns), or None. ``last``: the
        model's last part (every row is returned)."""
        from gropcap.gro.engine import gso_types
        rows = {
            "seg_id": pos, "flow_id": s["flow"], "first_packet": s["first"],
            "last_packet": s["last"], "count": s["count"].astype(np.int32),
            "payload_len": s["payload"], "gso_size": s["gso"].astype(np.int32),
            "gso_type": gso_types(s, self.gtable), "end_reason": s["end"].astype(np.uint8),
            "rx_queue": s["queue"].astype(np.uint16),
            "poll_id": poll_ids.astype(np.int64, copy=False),
        }
        pend = rows if self.pend is None else {k: np.concatenate([self.pend[k], rows[k]])
                                                for k in rows}
        o = np.argsort(pend["seg_id"], kind="stable")
        pend = {k: v[o] for k, v in pend.items()}
        exp = self.next_pos + np.arange(len(o))
        ready = len(o) if last else int(np.argmin(np.append(pend["seg_id"] == exp, False)))
        self.pend = {k: v[ready:] for k, v in pend.items()}
        if not ready:
            return None
        self.next_pos += ready
        chunk = {k: v[:ready] for k, v in pend.items()}
        return readable(arrow_table(chunk).append_column(
            "model", arrow_repeated(self.model, ready)))


class _SegWriter:
    """superpackets.parquet's writer: each model's rows (:class:`_SegRows`) from a sweep
    over its spilled super-packets, written by ``write`` (a row group at a time).

    ``threaded``: the sweeps run one after another (the file's model order) in a thread
    of their own, each over the spill opened again (its own cursor: the caller sweeps
    the same file for the positions and goes on to the packets pass, the next stage
    that uses both cores, instead of waiting for the Parquet writes); ``drain`` waits
    for them, ``close`` stops them after the part they are in. Not threaded: the caller
    sweeps and writes in line (:meth:`sweep` is not called)."""

    def __init__(self, write, *, threaded: bool):
        self.threaded = threaded
        self._write = write
        self._stop = threading.Event()
        self._jobs: list = []
        self._spills: list = []     # each sweep's spill, closed by the sweep or by close
        self._pool = None
        if threaded:
            from concurrent.futures import ThreadPoolExecutor

            from gropcap.priority import HELPER, lower_this_thread
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gropcap-spwrite",
                                            initializer=lower_this_thread,
                                            initargs=(HELPER,))

    def sweep(self, path: str, parts: int, order: "_SegOrder", rows: _SegRows) -> None:
        """Queue the sweep of the model spilled at ``path`` (``parts`` parts, flushed),
        with ``order`` a cursor of its own (:meth:`_SegOrder.copy`)."""
        spill = SegSpill.reopen(path)       # open now: the caller unlinks it after its sweep
        self._spills.append(spill)
        self._jobs.append(self._pool.submit(self._sweep, spill, parts, order, rows))

    def _sweep(self, spill, parts: int, order: "_SegOrder", rows: _SegRows) -> None:
        try:
            for i in range(parts):
                if self._stop.is_set():
                    return
                s = spill.get_segs()
                tbl = rows.add(s, order.positions(s["poll"]), order.poll_ids(s["poll"]),
                               i == parts - 1)
                if tbl is not None:
                    self._write(tbl)
        finally:
            spill.close()

    def check(self) -> None:
        """Raise the exception of a sweep that has failed, if any (the caller need not
        finish the packets pass to learn of it)."""
        while self._jobs and self._jobs[0].done():
            self._jobs.pop(0).result()

    def drain(self) -> None:
        """Wait for every sweep queued (raises the first exception)."""
        while self._jobs:
            self._jobs.pop(0).result()

    def close(self) -> None:
        """Stop the sweeps (after the part each is in) and wait for the thread."""
        if self._pool is None:
            return
        self._stop.set()
        for f in self._jobs:
            f.cancel()
        self._jobs.clear()
        self._pool.shutdown(wait=True)
        self._pool = None
        for spill in self._spills:          # (those of sweeps that never started)
            spill.close()


class _Coalesced:
    """gso.CoalescedStats over a stream: the first pass :meth:`add` s every batch, the
    GRO pass then gives each batch its :class:`gso.CoalescedInput` (gso_size needs the
    whole capture: the peer's SYN or the direction's most common segment may come later)
    and counts it (``run.accumulators.CoalescedCounts``)."""

    def __init__(self, mtu: int | None = None):
        from gropcap.gro.coalesced import CoalescedStats
        from gropcap.run.accumulators import CoalescedCounts
        self.stats = CoalescedStats(mtu)
        self.counts = CoalescedCounts()
        self.looks = 0

    @property
    def num(self) -> int:
        """Coalesced frames."""
        return self.stats.num

    def seen_coalesced(self) -> bool:
        """Whether the batches added so far show a coalesced frame, for the fused pass to
        stop early: a frame marked coalesced whatever the MTU at once, one above the MTU
        inferred so far at the 1st, 2nd, 4th, 8th... call. The inference folds every
        direction's statistics: on every batch it was 0.89 s of CPU of a one-thread
        20 M-packet run with 16 000 flows (310 calls). What the pass did is right only
        if :attr:`num` is 0 at its end, which the pass checks whatever this said."""
        self.looks += 1
        if self.stats.hard:
            return True
        return not self.looks & (self.looks - 1) and self.num > 0

    def add(self, t: pa.Table, flow_id=None) -> None:
        self.stats.add(t, flow_id)

    def batch(self, t: pa.Table):
        """The batch's gso.CoalescedInput (after every batch went through :meth:`add`)."""
        co = self.stats.infer(t)
        self.counts.add(t, co)
        return co


def _tunnel_firsts(t: pa.Table, pairs: tuple, first: np.ndarray) -> int:
    """Rows of ``t`` that start a super-packet (``first``) and are UDP tunnels of
    ``pairs``."""
    if not pairs:
        return 0
    from gropcap.run.hints import tunnel_mask
    return int(np.count_nonzero(tunnel_mask(t, pairs) & first))


class _TunnelHint:
    """``report.receive.tunnel_hint`` for a streamed run: UDP tunnels on ports without a
    tunnel socket are known after the decode pass (their counts); the ideal model is run
    again on their rows, collected in the GRO pass (up to ``HINT_MAX_ROWS``), the napi
    model on the whole capture read back (up to ``HINT_NAPI_MAX_ROWS`` rows), as the
    in-memory hint does."""

    def __init__(self, counts: dict, config: GroConfig, models):
        from gropcap.run.hints import HINT_MAX_ROWS, missing_tunnels
        self.config = config
        self.hint = missing_tunnels(counts, config)
        tunnels = self.hint["tunnels"] if self.hint else []
        self.pairs = tuple((m["kind"], m["port"]) for m in tunnels)
        self.collect = bool(self.pairs) and sum(m["packets"] for m in tunnels) <= HINT_MAX_ROWS
        self.rows: list[pa.Table] = []
        self.co: list = []
        self.before = {m: 0 for m in models}

    def gro_batch(self, t: pa.Table, co) -> None:
        """The tunnel rows of a batch and their coalesced input."""
        if not self.collect:
            return
        from gropcap.run.hints import tunnel_mask
        idx = np.flatnonzero(tunnel_mask(t, self.pairs))
        self.rows.append(take_rows(t, idx))
        self.co.append(None if co is None else
                       (co.is_gso[idx], co.gso_size[idx], co.segs[idx], co.source[idx]))

    def packets_batch(self, t: pa.Table, model: str, first: np.ndarray) -> None:
        """Count ``model``'s super-packets that start at a tunnel row (``first``: rows
        that start a super-packet)."""
        self.before[model] += _tunnel_firsts(t, self.pairs, first)

    def finish(self, models: dict, segments: int, packets: int, whole,
               run_of_file=None) -> dict | None:
        """The hint (None without one); ``models``: the summary's; ``whole()``: the
        whole decoded table and its coalesced input, read back; ``run_of_file``: the
        summary's receiver runs (``hints.sockets_models``)."""
        if self.hint is None:
            return None
        from gropcap.gro.coalesced import CoalescedInput
        from gropcap.run.hints import HINT_NAPI_MAX_ROWS, sockets_models
        tunnel_rows = None
        if self.collect:
            table = pa.concat_tables(self.rows) if self.rows else \
                empty_packet_table()
            co = None
            if self.co and all(c is not None for c in self.co):
                co = CoalescedInput(*[np.concatenate([c[k] for c in self.co])
                                      for k in range(4)])
                co = co if co.num_coalesced else None
            tunnel_rows = (table, co)
        big = packets > HINT_NAPI_MAX_ROWS or all(m == "ideal" for m in models)
        self.hint["models"] = sockets_models(
            self.config, self.pairs, models, segments, tunnel_rows=tunnel_rows,
            before=self.before, whole=None if big else whole(), run_of_file=run_of_file)
        self.hint["left_out"] = [m for m in models if m not in (self.hint["models"] or {})]
        return self.hint


class _RowCursor:
    """Per-row arrays spilled in row order (``k`` of flow_id, rx_queue), served in row
    ranges as both (None for one not spilled)."""

    def __init__(self, spill: ArraySpill, k: int):
        self.spill, self.k = spill, k
        self.buf = [np.zeros(0, np.int64)] * k

    def take(self, n: int) -> list:
        if not self.k:
            return [None, None]
        while len(self.buf[0]) < n:
            got = self.spill.get(self.k)
            self.buf = [np.concatenate([b, g]) for b, g in zip(self.buf, got)]
        out = [b[:n] for b in self.buf]
        self.buf = [b[n:] for b in self.buf]
        return (out + [None, None])[:2]


class _VerdictCursor:
    """Verdicts spilled in processing order (a NAPI queue's rows may be decided a batch
    later), served by row range. Ranges are asked in order and every row has one
    verdict, so whatever is buffered is at or after the range's first row."""

    def __init__(self, spill: ArraySpill):
        self.spill = spill
        self.buf = [np.zeros(0, np.int64) for _ in range(4)]

    def take(self, r0: int, r1: int) -> list[np.ndarray]:
        while int(np.count_nonzero(self.buf[0] < r1)) < r1 - r0:
            got = self.spill.get(4)
            self.buf = [np.concatenate([b, g]) if len(b) else g
                        for b, g in zip(self.buf, got)]
        n, b0 = r1 - r0, self.buf[0]
        if n and len(b0) >= n and b0[0] == r0 and b0[n - 1] == r1 - 1 and \
                bool(np.all(b0[1:n] > b0[:n - 1])):
            # in row order (one RX queue, or the ideal model): the first n, as they are
            out = [b[:n].astype(np.int64, copy=False) for b in self.buf[1:]]
            self.buf = [b[n:] for b in self.buf]
            return out
        inside = self.buf[0] < r1
        if inside.all():
            rows, rest = self.buf[0] - r0, None
        else:
            rows, rest = self.buf[0][inside] - r0, ~inside
        out = []
        for b in self.buf[1:]:
            a = np.empty(r1 - r0, np.int64)     # every row of the range is written
            a[rows] = b if rest is None else b[inside]
            out.append(a)
        self.buf = [b[:0] if rest is None else b[rest] for b in self.buf]
        return out


class _VerdictBuffer(_VerdictCursor):
    """The verdicts of an inline run (:class:`_Inline`), kept in memory from the engine
    (``put``, as :class:`ArraySpill`) until their batch's rows are all decided."""

    def __init__(self):
        super().__init__(None)
        self.chunks: list[list[np.ndarray]] = []    # as put, in order; self.buf unused
        self.bounds: list[tuple[int, int]] = []     # each chunk's least and largest row

    def put(self, row, reason, inst, poll) -> None:
        # kept as given, not joined: a put comes a batch ahead of the take of the batch
        # before, and joining them copied two batches of verdicts per put (370 MB a run
        # of the 3 M-frame capture)
        if len(row):
            self._keep([[np.asarray(a, np.int64) for a in (row, reason, inst, poll)]])

    def _keep(self, chunks: list) -> None:
        self.chunks += chunks
        self.bounds += [(int(c[0].min()), int(c[0].max())) for c in chunks]

    def complete(self, r0: int, r1: int) -> bool:
        """Whether every row of ``r0..r1`` has its verdict (earlier ranges taken): a
        chunk's rows are counted by its bounds where they lie on one side of ``r1`` (a
        comparison of every row, each drain, was 2% of a summary-only run)."""
        have = 0
        for c, (lo, hi) in zip(self.chunks, self.bounds):
            if hi < r1:
                have += len(c[0])
            elif lo < r1:
                have += int(np.count_nonzero(c[0] < r1))
        return have == r1 - r0

    def take(self, r0: int, r1: int) -> list[np.ndarray]:
        n = r1 - r0
        pieces, got = [], 0       # (chunk, rows of it) covering the first n rows
        for c in self.chunks:
            k = min(len(c[0]), n - got)
            pieces.append((c, k))
            got += k
            if got == n:
                break
        start = r0
        for c, k in pieces:       # rows start.. in increasing order: exactly the range
            rows = c[0][:k]
            if not k or rows[0] != start or rows[-1] != start + k - 1 or \
                    (k > 1 and not bool(np.all(rows[1:] > rows[:-1]))):
                break
            start += k
        if got == n and start == r1:
            # in row order (the ideal model; a NAPI queue mostly): views of one chunk,
            # or the n rows of two joined
            parts = [[c[a][:k] for c, k in pieces] for a in (1, 2, 3)]
            out = [p[0] if len(p) == 1 else np.concatenate(p) for p in parts]
            last, k = pieces[-1]
            rest = [[b[k:] for b in last]] if k < len(last[0]) else []
            kept = self.chunks[len(pieces):], self.bounds[len(pieces):]
            self.chunks, self.bounds = [], []
            self._keep(rest)
            self.chunks += kept[0]
            self.bounds += kept[1]
            return out
        # out of order: every chunk joined, taken as from a spill
        self.buf = [np.concatenate([c[a] for c in self.chunks]) if self.chunks else
                    np.zeros(0, np.int64) for a in range(4)]
        out = super().take(r0, r1)
        self.chunks, self.bounds = [], []
        if len(self.buf[0]):
            self._keep([self.buf])
        return out

    def size(self) -> int:
        return 0

    def close(self) -> None:
        pass


class _FirstRows:
    """Per row of a model's verdicts, whether it is the first row of its instance (a
    super-packet's first packet: role HEAD, or ALONE for a super-packet of one packet);
    rows come in row order, an instance's rows may span batches."""

    def __init__(self, ninst: int = 0):
        self.seen = np.zeros(ninst, np.bool_)

    def __call__(self, inst: np.ndarray) -> np.ndarray:
        if len(inst) and int(inst.max()) >= len(self.seen):
            grown = np.zeros(max(int(inst.max()) + 1, 2 * len(self.seen)), np.bool_)
            grown[:len(self.seen)] = self.seen
            self.seen = grown
        first = np.zeros(len(inst), np.bool_)
        first_rows(np.asarray(inst, np.int64), self.seen, first)
        return first


class _Inline:
    """The packets pass of a summary-only run whose first pass is fused, done in that pass
    (the sidecar) instead of after it: each decoded batch is held until every model has
    decided its rows (a NAPI poll can be decided a batch later), then counted as the
    packets pass counts it: per model the encapsulations of the rows that start a
    super-packet (the first row of each instance: a HEAD or ALONE role in
    ``packets.parquet``), the flow causes from the primary model's verdicts. No
    decoded rows, verdicts or super-packets go through temporary files.

    ``tunnels``: what counts the tunnel hint's super-packets (``firsts(t, model,
    first)``: the fused pass's :class:`_FusedTunnels`, a Dask partition's
    ``run.dask_tasks._PairFirsts``); ``encap``: per model the ``ModelCounts`` to count
    the encapsulations in (None: each run's own counts); ``out``: with ``--out``,
    called with each batch and its verdict columns (:func:`_verdict_columns` of every
    model, by :func:`_with_model`), the positions from each run's ``order``
    (:class:`_OnlineOrder`)."""

    def __init__(self, runs, primary: str, causes, plots=None, tunnels=None, encap=None,
                 out=None, rest=None):
        import collections
        self._rest = rest
        self.rest = None            # the first row of the rest once handed on
        self.runs, self.primary, self.causes, self.plots = runs, primary, causes, plots
        self.tunnels = tunnels
        self.encap = encap or {r.model: r.counts for r in runs}
        self.out = out
        # (table, first row, primary flow ids, each model's RX queues with out)
        self.batches = collections.deque()
        self.next_row = 0
        self.first = {r.model: _FirstRows() for r in runs}

    def batch(self, t: pa.Table, flow_id: np.ndarray, rx_queues=None) -> None:
        """The next decoded batch and its flow ids (after its models' parts went in);
        with ``out``, ``rx_queues``: each model's RX queue of each row."""
        if t.num_rows:
            self.batches.append([t, self.next_row, flow_id, rx_queues])
            self.next_row += t.num_rows
        self.drain()

    @staticmethod
    def _take(run, r0: int, r1: int) -> tuple:
        reason, inst, poll = run.verdicts.take(r0, r1)
        return reason, inst, poll, int(inst.max()) if len(inst) else -1

    def held(self) -> None:
        """With ``out``: once more than :data:`INLINE_HOLD_ROWS` rows wait for their
        super-packets' positions, hand them and every later row on to the packets pass
        (``rest(batches)``; :attr:`rest` is then the first of them), so that memory
        stays bounded."""
        if sum(b[0].num_rows for b in self.batches) > INLINE_HOLD_ROWS:
            self.rest = self.batches[0][1]
            self._rest(list(self.batches))
            self.batches.clear()

    def drain(self, final: bool = False) -> None:
        """Count every leading batch whose rows are all decided (``final``: all are);
        with ``out``, whose rows' super-packets all have their positions too."""
        while self.batches:
            t, r0, fid, rxqs = self.batches[0][:4]
            r1 = r0 + t.num_rows
            if len(self.batches[0]) == 4:
                if not all(r.verdicts.complete(r0, r1) for r in self.runs):
                    assert not final, "rows without a verdict at the end of the run"
                    return
                # taken once: (reason, inst, poll) and the latest instance, per model
                self.batches[0].append({r.model: self._take(r, r0, r1) for r in self.runs})
            got = self.batches[0][4]
            if self.out is not None and \
                    not all(got[r.model][3] < r.order.known for r in self.runs):
                # a super-packet of these rows not delivered yet: the ideal model holds
                # a flow's packets until that flow sends one it cannot merge
                assert not final, "super-packets without a position at the end of the run"
                self.held()
                return
            self.batches.popleft()
            cols: dict = {}
            for run in self.runs:
                reason, inst, poll = got[run.model][:3]
                first = self.first[run.model](inst)
                self.encap[run.model].add_encap(t, first)
                if self.plots is not None:
                    self.plots.add_firsts(run.model, t, first)
                if self.tunnels is not None:
                    self.tunnels.firsts(t, run.model, first)
                if run.model == self.primary:
                    self.causes.add(fid, numpy_of(t.column("tcp_seq")),
                                    numpy_of(t.column("payload_len")),
                                    numpy_of(t.column("l4_proto")), reason)
                if self.out is not None:
                    c = _verdict_columns(fid, rxqs[run.model], reason,
                                         run.order.poll_ids(poll), inst, run.order.ipos,
                                         first)
                    cols = _with_model(cols, c, run.model, self.primary)
            if self.out is not None:
                self.out(t, cols)


def stream_analyze(paths, config: GroConfig | None = None, *, models=MODELS,
                   decode_options: DecodeOptions | None = None, out_dir: str | None = None,
                   force: bool = False, batch_records: int = STREAM_BATCH,
                   engine: str = "fast", decoder: str = "fast", egress=None,
                   tmp_dir: str | None = None, progress=None,
                   receiver=None, receive=None, packet_columns="default",
                   threads: int | None = None, captures: str = "auto",
                   plot: bool = False, _fused: bool = True,
                   _acks: list | None = None, _single: bool | str = True) -> StreamResult:
    """Analyse captures batch by batch in bounded memory (see the module docstring).

    Args:
        paths: capture file(s) or directories (as :func:`gropcap.run.memory.analyze`).
        config: GRO configuration; ``model`` is overridden per entry of ``models``.
        models: batch models to run.
        decode_options: decoder options.
        out_dir: write ``packets.parquet``, ``superpackets.parquet``, ``flows.parquet``
            there (temporary name + rename; existing files need ``force``); None: only the
            summary and the flows table.
        batch_records: records per batch: transient memory ~1.8 kB x batch_records
            (:data:`STREAM_BATCH`, 131072: ~240 MB) on top of ~330 MB of code, JIT and
            Arrow pools.
        tmp_dir: where the temporary decoded table and verdicts go (default: ``out_dir``,
            else the system temporary directory); about the size of the packets output
            when the packets pass runs after the first (``--out`` with several RX queues,
            or rows the first pass handed on), the super-packets' spill alone otherwise.
        receiver: a receiver profile (path) or the ``receiver.ReceiverInfo`` of one
            already applied to ``config``, as :func:`gropcap.run.memory.analyze` takes it.
        receive: the :class:`gropcap.receive.context.ReceiveContext` the summary reports (the
            CLI's, which knows what was typed); None: from ``config``.
        packet_columns: the columns of ``packets.parquet`` (``"default"``, ``"all"`` or
            a list: ``io.columns.parse_packet_columns``), as ``io.parquet.write_analysis``.
        threads: 1: the whole run on the calling thread; 2 (None: 2 where two CPUs are
            available, ``run.threads.default_threads``): decode runs ahead in a thread of
            its own and the spills of the engine's results in another
            (``run.threads``); the same results. More than 2 run as 2.
        captures: how several files map to receiver runs (``run/receivers.py``): a
            batch that starts a new run first flushes the run before it
            (``BatchGroModels.next_run``).

    Returns:
        A :class:`StreamResult`; ``summary`` equals ``analyze(...).summary()`` and the
        Parquet files hold the same rows as ``io.parquet.write_analysis``.

    Raises:
        ConfigError for what only the in-memory path models (``run.options.memory_reason``:
        the reference engine).

    Example:
        >>> r = stream_analyze("big.pcap", out_dir="out")          # doctest: +SKIP
        >>> r.summary["models"]["napi"]["aggregation_ratio"]        # doctest: +SKIP
    """
    from gropcap.errors import OutputError
    from gropcap.analysis import Analysis
    from gropcap.run.accumulators import Totals
    from gropcap.run.inputs import input_files
    from gropcap.run.options import memory_reason, run_options

    config, decode_options, models = run_options(config, decode_options, models,
                                                 decoder=decoder, engine=engine,
                                                 egress=egress, captures=captures)
    from gropcap.receive.profile import resolve_receiver
    config, receiver = resolve_receiver(config, receiver)
    why = memory_reason(config, engine=engine, decoder=decoder, egress=egress)
    if why:
        raise ConfigError(f"not streamable: {why}",
                          hint="gropcap.analyze (or `gropcap analyze`) runs it in memory")
    from gropcap.io.columns import parse_packet_columns, select_packet_columns
    packet_columns = parse_packet_columns(packet_columns)
    from gropcap.run.threads import resolve_threads
    threads = resolve_threads(threads)
    files = input_files(paths)
    targets = [os.path.join(out_dir, n) for n in OUT_NAMES] if out_dir else []
    if not force:
        for p in targets:
            if os.path.exists(p):
                raise OutputError("output exists", path=p, hint="use --force to replace it")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gropcap-stream-", dir=tmp_dir or out_dir)
    written: list[str] = []
    owns_acks = retry = False   # --poll-acks: this call made the ACK pass's files
    from gropcap.run.threads import switching
    switch = switching(threads)         # the GIL handed over sooner between the threads
    switch.__enter__()
    try:
        tot = Totals(models, config.verify_checksums,
                     egress=None if egress is None else (egress, config.kernel.version))
        counters = tot.capture
        primary = "napi" if "napi" in models else models[0]
        # --tunnel-gro: the gro_cells stage over the native super-packets (run/cells.py),
        # gathered by the super-packets and packets passes
        cells_on = config.tunnel_gro is not None
        cells: dict = {}
        # fused: the packets pass runs inside the first pass (_Inline), summary only or
        # with --out where the delivery positions are known as the super-packets come
        # (_OnlineOrder: one RX queue; Parquet metadata given at the end, can_defer)
        inline_out = bool(_fused and out_dir and not cells_on and config.queues == 1)
        if inline_out:          # (a summary-only run imports no Parquet: start-up)
            from gropcap.io.parquet import can_defer
            inline_out = can_defer()
        inline = bool(_fused and not cells_on and (not out_dir or inline_out))
        # egress: 8 bytes per row of what it reads of a first packet (RowCodes)
        # (with --tunnel-gro the cells stage counts egress: run/cells.py)
        egress_rows = None if egress is None or cells_on else \
            RowCodes(os.path.join(tmp, "egress.rows"), egress.scenario)
        runs = [_ModelRun(m, config, tmp, tot.models[m],
                          row_arrays=2 if out_dir else int(m == primary), inline=inline,
                          egress_rows=egress_rows,
                          order=_OnlineOrder(m == "napi") if inline_out else None)
                for m in models]
        # --poll-acks: the napi model's polls from the receiver's ACKs, found by a pass
        # over the capture before GRO (an ACK follows the data it closes); the engine
        # reads the retimed arrivals (receive/ackpolls.py), the rest the capture's times
        retimed = None
        if config.poll_acks and "napi" in models:
            if _acks is None:       # (an unfused second try reuses the first one's)
                _acks = [tempfile.mkdtemp(prefix=".gropcap-acks-", dir=tmp_dir or out_dir)]
                _acks.append(_ack_times(files, decode_options, batch_records, _acks[0],
                                        config, captures, progress, decoder))
                owns_acks = True
            retimed = _acks[1]
            if retimed is not None:
                from gropcap.receive.ackpolls import engine_config
                for run in runs:
                    if run.model == "napi":
                        run.config = engine_config(run.config)
        fed = [0]

        def gro_input(t):
            # the batch the engine reads: with --poll-acks, the retimed arrivals
            r0, fed[0] = fed[0], fed[0] + t.num_rows
            if retimed is None or not t.num_rows:
                return t
            return with_arrivals(t, retimed[r0:fed[0]])
        from gropcap.run.accumulators import FlowCauses
        causes = FlowCauses()
        # --plot: every row's time and file, and each super-packet's first row's
        plots = None
        if plot:
            from gropcap.run.plotdata import PlotRows
            plots = PlotRows(tmp, models)
        # the fused try's tunnel-hint rows (UDP tunnels without a socket), as they come
        fused_tunnels = _FusedTunnels(config, models) if _fused else None
        # packets.parquet: written by the packets pass, or inline
        pk_tmp = os.path.join(tmp, "packets.parquet") if out_dir else None
        pk_out: dict = {}           # packets.parquet's "columns" and "writer"
        from gropcap.io.columns import readable_names

        def packets_table(t, cols):
            # the verdict columns and the readable ones (the packets pass's calling
            # thread, or the sidecar of an inline run, which drains the batches there)
            order = [k for k in ("flow_id", "gro_seg", "gro_role", "reason", "rx_queue",
                                 "poll_id")] + [k for k in cols if "_" in k and
                                                k.split("_", 1)[0] in models]
            for name in order:
                t = t.append_column(name, arrow_of(cols[name]))
            if not pk_out:
                pk_out["columns"] = select_packet_columns(readable_names(t.column_names),
                                                          packet_columns)
            return readable(t, columns=pk_out["columns"])

        def write_packets(t, meta=None):
            # the sidecar's part: the row group (an inline run's file has its metadata
            # given at the end: TableWriter)
            if "writer" not in pk_out:
                from gropcap.io.parquet import TableWriter
                pk_out["writer"] = TableWriter(pk_tmp, t, meta)
            pk_out["writer"].write_table(t)

        # an inline run's packets.parquet: each table built where the batch is drained
        # (the sidecar), written in a thread of its own with two threads (the Parquet
        # write is the longest stage: in the sidecar it held up the whole pipeline)
        from gropcap.run.threads import Sidecar
        pk_side = Sidecar(threaded=threads > 1 and inline_out, name="gropcap-write")
        packets_inline = _Inline(runs, primary, causes, plots, fused_tunnels,
                                 out=(lambda t, cols: pk_side.submit(
                                     write_packets, packets_table(t, cols)))
                                 if inline_out else None,
                                 rest=lambda held: two_passes(held)) if inline else None
        # the decoded columns the packets pass reads back after a fused first pass
        keep = _kept_columns(out_dir, packet_columns, models, plot) \
            if _fused and not cells_on else None
        dec_schema = PACKET_SCHEMA if keep is None else \
            pa.schema([PACKET_SCHEMA.field(c) for c in keep])
        from gropcap.run.engines import BatchGroModels
        from gropcap.run.single import SinglePass, narrow_columns, single_pass_covers
        # a run of captures the single pass covers (the probe reads the first
        # run.single.PROBE_BYTES before the run; where the pass stops later, the run
        # goes again on the engine: Uncovered): the pass takes each batch of records in
        # the decoder's place, and gives both models' results and the columns the run
        # keeps (its narrow table: the accumulators', packets.parquet's default ones,
        # the plot's), or where it keeps others or counts egress the decoder's whole
        # table (run/single.py); else the decoder and the engine, states carried
        # batch to batch, with threads the second model in a thread of its own
        why = _single if isinstance(_single, str) else \
            "--poll-acks" if retimed is not None else \
            "--tunnel-gro" if cells_on else "the run's unfused try" if not _fused else \
            "the reference engine or decoder" if (engine, decoder) != ("fast", "fast") \
            else single_pass_covers(config, models, files, decode_options)
        # (the narrow table where it has every column the run keeps: packets.parquet's
        # default ones, the plot's; else the decoder's whole table beside the pass)
        single = SinglePass(config, decode_options, batch_records, captures,
                            decoded=egress is not None or keep is None
                            or not set(keep) <= set(narrow_columns()),
                            defer=threads > 1) \
            if why is None else None
        gro = single or BatchGroModels([r.config for r in runs], threaded=threads > 1)
        from gropcap.run.receivers import RunSplit
        split = RunSplit(captures)
        file_run: dict = {}             # the receiver run of each input file seen

        def run_end(t):
            # a batch that starts a new receiver run: the run before it flushed (its
            # parts), fresh receivers for this one (run/receivers.py); else None
            if not t.num_rows:
                return None
            fi = int(numpy_of(t.column("file_index"))[0])
            new = split.starts(fi, numpy_of(t.column("ts_ns")))
            file_run[fi] = split.run
            if not new:
                return None
            if single is not None:
                # (SinglePass.records split its runs itself, fresh receivers included)
                return ended_single
            parts = gro.feed(empty_packet_table(), final=True)
            gro.next_run()
            return parts

        def take_parts(parts):
            for run, part in zip(runs, parts):
                run.take(part, file_of=counters.file_of)
        # Arrow IPC with lz4 buffers: 3-4x cheaper to write and read back than Parquet
        dec_path = os.path.join(tmp, "decoded.arrow")
        infos = []
        peak = 0
        import time
        clock = time.perf_counter
        tm = {"engine": 0.0, "coalesced": 0.0}
        t_start = clock()
        # 1. decode pass: decoded rows to a temporary Arrow file, counters, coalesced
        # stats. Fused (the first try): each batch goes through GRO as soon as it is
        # decoded, and only the columns the packets pass reads are kept; a frame captured
        # already coalesced (its gso_size needs the whole capture) ends the try, and the
        # run starts again unfused (_Unfused), as does a UDP tunnel without a socket in
        # a capture small enough for the hint's napi part (_FusedTunnels.needs_whole)
        from gropcap.run.progress import phase
        gro_phase = None
        coal = _Coalesced(config.mtu)
        dec_out: dict = {}          # the temporary decoded file's "sink" and "writer"


        def spill(t, parts):
            # the sidecar's part of a batch (run.threads.Sidecar): the capture counters
            # and coalesced-input statistics, the engine's results spilled and counted,
            # the flows, the temporary decoded file
            if egress_rows is not None:
                egress_rows.add(t)          # (before its super-packets are counted)
            if plots is not None:
                plots.add_packets(t)
            _count_batch(t, counters, coal, config, fused_tunnels,
                         parts[0].flow_id if parts else None)
            for run, part in zip(runs, parts):
                run.take(part, file_of=counters.file_of)
            if parts:
                tot.flows.add(t, parts[0].flow_id)
            if packets_inline is not None and packets_inline.rest is None:
                # (held until its rows are decided: the columns the packets pass reads)
                packets_inline.batch(t if keep is None else t.select(keep),
                                     parts[models.index(primary)].flow_id,
                                     {r.model: p.rx_queue for r, p in zip(runs, parts)}
                                     if inline_out else None)
                return
            write_decoded(t)

        def write_decoded(t):
            # the temporary decoded file, the packets pass's rows
            if keep is not None:
                t = t.select(keep)
            if not dec_out:
                dec_out["sink"] = pa.OSFile(dec_path, "wb")
                # the stream format: each batch keeps its own encap dictionary
                dec_out["writer"] = pa.ipc.new_stream(
                    dec_out["sink"], dec_schema,
                    options=pa.ipc.IpcWriteOptions(compression="lz4"))
            dec_out["writer"].write_table(t)

        def two_passes(held):
            # an inline run with --out whose held rows wait too long for their
            # positions (_Inline.held): those rows and every later one go through the
            # temporary files and the packets pass, as in a run of two passes
            for run in runs:
                buffered = run.verdicts
                run.order = None        # (the super-packets pass gives the positions)
                run.rows = ArraySpill(os.path.join(tmp, f"{run.model}.rows"))
                run.row_arrays = 2
                run.verdicts = ArraySpill(os.path.join(tmp, f"{run.model}.verdicts"))
                for t, r0, fid, rxqs, *got in held:
                    # (the flow ids of a model other than the primary are not read)
                    run.rows.put(fid, rxqs[run.model])
                    if got:
                        reason, inst, poll, _ = got[0][run.model]
                        run.verdicts.put(np.arange(r0, r0 + t.num_rows), reason, inst, poll)
                for chunk in buffered.chunks:
                    run.verdicts.put(*chunk)
            for t, *_ in held:
                write_decoded(t)

        from gropcap.run.threads import Ahead
        # (the single pass runs in the decode step: then that thread is the critical
        # path, at the calling thread's priority; the decoder's is below it)
        source = Ahead(_decode_pass(files, decode_options, batch_records, progress,
                                    decoder, single, threads), threaded=threads > 1,
                       nice=0 if single is not None else HELPER)
        side = Sidecar(threaded=threads > 1)
        ended_single = None
        for t in source:
            parts = []
            if single is not None:
                # (the single pass: its table and results, and the parts of the
                # receiver run its batch ended; with two threads the table is built
                # here while the pass goes on with the next batch: SinglePass.defer)
                t, parts, ended_single = t
                if callable(t):
                    t = t()
            if _fused:
                if gro_phase is None:
                    gro_phase = phase(progress, f"GRO {'+'.join(models)}", None)
                gro_phase.advance(t.num_rows)
                t1 = clock()
                ended = run_end(t)
                if ended is not None:
                    side.submit(take_parts, ended)
                if single is None:
                    parts = gro.feed(gro_input(t), final=False)
                tm["engine"] += clock() - t1
            side.submit(spill, t, parts)
            collector.release()     # (every kernel the run uses is loaded by now)
        side.drain()
        infos = source.value
        if _fused and fused_tunnels.needs_whole(counters.packets, models):
            # the hint's napi part replays the whole (small) capture, read back
            raise _Unfused
        if _fused and coal.num:
            # the MTU inferred from the whole capture can make earlier frames coalesced
            raise _Unfused
        if dec_out:
            dec_out["writer"].close()
            dec_out["sink"].close()

        def decoded():
            # read, not mapped: mapped pages of the temporary file would count as resident
            if counters.packets:
                with pa.OSFile(dec_path, "rb") as src:
                    yield from pa.ipc.open_stream(src)

        if single is not None:
            # (the pass ran in the decode step, in the decoder's place: its seconds are
            # the engine's, not the decoder's)
            tm["engine"] += single.seconds
        tm["decode"] = clock() - t_start - tm["engine"]
        t_start = clock()
        # 2. GRO pass: every model over the decoded rows, state carried
        if gro_phase is None:
            gro_phase = phase(progress, f"GRO {'+'.join(models)}", counters.packets)
        hint = _TunnelHint(counters.udp_tunnels, config, models)
        if _fused:
            fused_tunnels.into(hint, inline=packets_inline is not None)
        for dec in (() if _fused else decoded()):
            gro_phase.advance(dec.num_rows)
            t = pa.Table.from_batches([dec])
            t0 = clock()
            co = coal.batch(t) if coal.num else None
            t1 = clock()
            ended = run_end(t)
            if ended is not None:
                take_parts(ended)
            parts = gro.feed(gro_input(t), final=False, coalesced=co)
            take_parts(parts)
            hint.gro_batch(t, co)
            tm["coalesced"] += t1 - t0
            tm["engine"] += clock() - t1
            if parts:
                tot.flows.add(t, parts[0].flow_id)
        take_parts(gro.feed(empty_packet_table(), final=True))
        if packets_inline is not None:
            packets_inline.drain(final=True)
        pk_side.drain()             # (an inline run's last row groups)
        for run, ninst in zip(runs, gro.instances()):
            run.instances = ninst               # the super-packets each model numbered
        tot.coalesced = coal.counts if coal.num else None
        gro_phase.end()
        peak = sum(r.rows.size() + r.verdicts.size() + r.segs.size() for r in runs) + \
            (os.path.getsize(dec_path) if os.path.exists(dec_path) else 0)

        tm["gro"] = clock() - t_start + (tm["engine"] if _fused else 0.0)
        t_start = clock()
        flows = tot.flows_table()
        meta_of = Analysis(empty_packet_table(), infos, config,
                           {m: None for m in models}, decode_options)
        meta_of.mtu = coal.stats.mtu_inference()
        meta_of.receiver = receiver   # receiver.ReceiverInfo of a profile the CLI applied
        meta_of.captures = captures
        meta = meta_of.metadata()

        tm["flows"] = clock() - t_start
        t_start = clock()
        # 3. super-packets pass: delivery positions, inst -> position map, Parquet rows
        from gropcap.gro.engine import _gso_table, gso_types
        orders = {}
        inst_pos = {}
        inst_first = {}
        sp_out: dict = {}       # superpackets.parquet's "writer"
        sp_tmp = None
        if out_dir:
            sp_tmp = os.path.join(tmp, "superpackets.parquet")
        sp_runs = runs if out_dir or not inline else []   # (inline --out: for its file)
        sp_phase = phase(progress, "super-packets", sum(r.parts for r in sp_runs),
                         "batches")
        if cells_on:
            from gropcap.run.cells import CellsStage

        def write_superpackets(tbl):
            # the writer's part (_SegWriter): the row group
            if "writer" not in sp_out:
                from gropcap.io.parquet import TableWriter
                sp_out["writer"] = TableWriter(sp_tmp, tbl, meta)
            sp_out["writer"].write_table(tbl)
        # with two threads superpackets.parquet is written from a second sweep over each
        # model's spill in a thread of its own, which goes on through the packets pass
        sp_writer = _SegWriter(write_superpackets, threaded=threads > 1 and bool(out_dir))
        for run in sp_runs:
            if cells_on:
                cells[run.model] = CellsStage(tmp, config.replace(model=run.model),
                                              run.nseg)
            so = _SegOrder(run)
            run.segs.rewind()
            for _ in range(run.parts):
                s = run.segs.get_segs()
                so.count(s["poll"])
            so.start()
            ninst = run.instances
            # delivery position per instance; -(pos + 1) for a super-packet of one packet
            ipos = np.full(ninst, -1, np.int32 if run.nseg < 2 ** 31 - 1 else np.int64)
            gtable = _gso_table(run.config)
            rows = _SegRows(run.model, gtable) if out_dir else None
            if rows is not None and sp_writer.threaded:
                sp_writer.sweep(run.segs.path, run.parts, so.copy(), rows)
                rows = None
            run.segs.rewind()
            for i in range(run.parts):
                sp_phase.advance(1)
                s = run.segs.get_segs()
                pos = so.positions(s["poll"])
                if len(pos):
                    ipos[s["inst"]] = np.where(s["count"] > 1, pos, -pos - 1)
                if cells_on:
                    cells[run.model].segs(pos, s["count"], s["payload"], s["gso"],
                                          gso_types(s, gtable), s["end"],
                                          so.poll_ids(s["poll"]))
                if rows is not None:
                    tbl = rows.add(s, pos, so.poll_ids(s["poll"]), i == run.parts - 1)
                    if tbl is not None:
                        write_superpackets(tbl)
            orders[run.model] = so
            inst_pos[run.model] = ipos
            # head = the first row of an instance (a flow's rows keep their order)
            # (rows an inline run handed on: its first rows seen so far)
            inst_first[run.model] = packets_inline.first[run.model] if inline_out and \
                packets_inline.rest is not None else _FirstRows(ninst)
            run.segs.close()
            os.unlink(run.segs.path)        # (a sweep in the writer holds it open)
        sp_phase.end()
        tm["superpackets"] = clock() - t_start
        t_start = clock()
        # 4. packets pass: decoded rows + verdicts; per-model encapsulation counts (the
        # rows an inline run handed on, from its first one: _Inline.held)
        first_row = 0 if not inline else packets_inline.rest
        pk_runs = runs if first_row is not None else []
        for run in pk_runs:
            run.rows.rewind()
            run.verdicts.rewind()
        cursors = {
            r.model: (_RowCursor(r.rows, r.row_arrays), _VerdictCursor(r.verdicts))
            for r in pk_runs}

        pk_phase = phase(progress, "packets.parquet" if out_dir else "verdicts",
                         counters.packets if out_dir or pk_runs else 0)
        if out_dir and inline:
            # (the rows written in the first pass)
            pk_phase.advance(counters.packets if first_row is None else first_row)

        pk_source = Ahead(_verdict_rows(decoded() if pk_runs else (), runs, cursors,
                                        first_row or 0),
                          threaded=threads > 1, name="gropcap-read")
        if pk_runs:
            pk_side.close()
            pk_side = Sidecar(threaded=threads > 1, name="gropcap-write")
        for t, got in pk_source:
            pk_phase.advance(t.num_rows)
            cols = {}
            for run in runs:
                fid, rxq, reason, inst, poll = got[run.model]
                so = orders[run.model]
                first = inst_first[run.model](inst)
                run.counts.add_encap(t, first)
                if cells_on:
                    code = inst_pos[run.model][inst].astype(np.int64, copy=False)
                    cells[run.model].packets(t, np.where(code < 0, -code - 1, code), first)
                if plots is not None:
                    plots.add_firsts(run.model, t, first)
                hint.packets_batch(t, run.model, first)
                if run.model == primary:
                    causes.add(fid, numpy_of(t.column("tcp_seq")),
                               numpy_of(t.column("payload_len")),
                               numpy_of(t.column("l4_proto")), reason)
                if not out_dir:
                    continue        # the verdict columns are for packets.parquet only
                poll_id = so.rank[poll] if so.inferred else poll
                cols = _with_model(cols, _verdict_columns(fid, rxq, reason, poll_id, inst,
                                                          inst_pos[run.model], first),
                                   run.model, primary)
            if out_dir:
                pk_side.submit(write_packets, packets_table(t, cols), meta)
                sp_writer.check()
        pk_side.drain()
        sp_writer.drain()           # superpackets.parquet's last row groups
        pk_phase.end()
        extra = {}
        if cells_on:
            # the gro_cells stage over the gathered native super-packets (run/cells.py)
            from gropcap.gro.stages import stages_summary
            run_of_file = np.zeros(len(infos), np.int64)
            for fi, r in file_run.items():
                run_of_file[fi] = r
            seg_in = tot.coalesced.segs_total if tot.coalesced else counters.packets
            extra["stages"] = {
                m: stages_summary(cells[m].run(run_of_file, counters.packets, seg_in,
                                               egress=tot.models[m].egress,
                                               progress=progress))
                for m in models}
        extra.update(egress_extra(tot))
        from gropcap.receive.context import ReceiveContext
        from gropcap.run.summary import render_summary
        summary = render_summary(tot, infos=infos, config=config,
                                 mtu=coal.stats.mtu_inference(),
                                 receive=receive or ReceiveContext.from_config(config),
                                 extra=extra, captures=captures)

        def whole():
            table = pa.Table.from_batches(list(decoded()), schema=PACKET_SCHEMA)
            co = coal.stats.infer(table) if coal.num else None
            return table, (co if co is not None and co.num_coalesced else None)
        seg_in = tot.coalesced.segs_total if tot.coalesced else counters.packets
        tunnel_hint = hint.finish(summary["models"], seg_in, counters.packets, whole,
                                  summary["inputs"]["run_of_file"])
        tm["packets"] = clock() - t_start
        if out_dir:
            if not pk_out:
                empty = _empty_packets(models, primary)
                empty = readable(empty, columns=select_packet_columns(
                    readable_names(empty.column_names), packet_columns))
                from gropcap.io.parquet import write_table
                write_table(empty, pk_tmp, meta, force=True)    # (every file's options)
            else:
                pk_out["writer"].close(meta)
            if "writer" not in sp_out:
                empty = readable(_empty_superpackets())
                from gropcap.io.parquet import write_table
                write_table(empty, sp_tmp, meta, force=True)
            else:
                sp_out["writer"].close()
            from gropcap.io.parquet import summary_metadata, write_table
            fl_tmp = os.path.join(tmp, "flows.parquet")
            write_table(flows, fl_tmp, {**meta, **summary_metadata(summary)}, force=True)
            for src, dst in zip((pk_tmp, sp_tmp, fl_tmp), targets):
                shutil.move(src, dst) if os.path.dirname(os.path.abspath(src)) != \
                    os.path.dirname(os.path.abspath(dst)) else os.replace(src, dst)
                written.append(dst)
        plot_out = None
        if plots is not None:
            from gropcap.run.plotdata import plot_data, title_of
            plot_out = plot_data(models, primary, title_of(infos, config),
                                 {m: tot.models[m].seg_hist for m in models},
                                 plots.series(), flows,
                                 {m: (tot.models[m].top_keys, tot.models[m].top_counts)
                                  for m in models})
        return StreamResult(summary=summary, flows=flows, paths=written, metadata=meta,
                            totals=tot, plot_data=plot_out,
                            peak_spill_bytes=peak, timings=tm, threads=threads,
                            udp_tunnel_hint=tunnel_hint,
                            flow_causes=causes.result(flows.num_rows),
                            single_pass=why is None, engine_why=why)
    except OSError as e:
        # a full or read-only disk under the temporary files or the outputs: one line
        if e.errno not in _WRITE_ERRNOS:
            raise
        raise OutputError(f"cannot write: {e.strerror or e}", path=out_dir or tmp,
                          hint="check free space and permissions (--out, $TMPDIR)") from None
    except _Unfused:
        retry = True        # below: the run again, unfused
        again_fused = False
        _single = locals().get("why") or "frames captured coalesced, or a tunnel hint"
    except Uncovered as e:
        retry = True        # below: the run again, fused, on the engine
        again_fused = True
        _single = f"the single pass stopped: {e}"
    finally:
        # the worker threads stop (each finishes its batch) before the files go
        for stage in (locals().get("source"), locals().get("side"), locals().get("gro"),
                      locals().get("sp_writer"), locals().get("pk_source"),
                      locals().get("pk_side")):
            if stage is not None:
                stage.close()
        switch.__exit__(None, None, None)
        if locals().get("egress_rows") is not None:
            locals()["egress_rows"].close()
        if locals().get("plots") is not None:
            locals()["plots"].close()
        for stage in (locals().get("cells") or {}).values():
            stage.remove()
        for run in locals().get("runs", []):
            for sp in (run.rows, run.verdicts, run.segs):
                try:
                    sp.close()
                except Exception:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)
        if owns_acks and not retry:
            _drop_acks(_acks)
    if progress is not None and hasattr(progress, "restart_files"):
        progress.restart_files()
    try:
        return stream_analyze(paths, config, models=models, decode_options=decode_options,
                              out_dir=out_dir, force=force, batch_records=batch_records,
                              engine=engine, decoder=decoder, egress=egress, tmp_dir=tmp_dir,
                              progress=progress, receiver=receiver, receive=receive,
                              packet_columns=packet_columns, threads=threads,
                              captures=captures, plot=plot, _fused=again_fused,
                              _acks=_acks, _single=_single)
    finally:
        if owns_acks:
            _drop_acks(_acks)


def with_arrivals(t: pa.Table, ts: np.ndarray) -> pa.Table:
    """``t`` with ``ts_ns`` replaced by ``ts`` (``--poll-acks``' retimed arrivals, which
    the napi model reads instead of the capture's times)."""
    i = t.schema.get_field_index("ts_ns")
    return t.set_column(i, t.schema.field(i), arrow_of(np.ascontiguousarray(ts)))


def egress_extra(tot) -> dict:
    """``render_summary``'s ``extra``: the models' ``egress`` when counted."""
    got = {m: mc.egress.as_dict() for m, mc in tot.models.items() if mc.egress is not None}
    return {"egress": got} if got else {}


class _Unfused(Exception):
    """The fused first pass met what needs the whole decoded table before GRO."""


def _ack_times(files, decode_options, batch_records, tmp, config, captures="auto",
               progress=None, decoder: str = "fast"):
    """``--poll-acks`` in bounded memory: one pass over the capture finds the frames the
    receiver's ACKs close (``ackpolls.AckScan``; each batch's times, direction ids and
    pure-ACK flags spilled to ``tmp``), then the polls and their retimed arrivals are
    computed batch by batch (``ackpolls.PollClock``), each receiver run on its own
    (``captures``: ``run/receivers.py``, the batches split as the GRO pass splits them).
    Returns the retimed arrivals, one int64 per row (a read-only memmap), or None when
    no ACK closes a frame (the gap rule stays, as in memory). ``progress``: a line
    counting the pass's packets; ``decoder``: as :func:`_decode_pass`."""
    from gropcap.receive.ackpolls import AckScan, PollClock
    from gropcap.run.progress import phase
    from gropcap.run.receivers import RunSplit
    scan, split = AckScan(), RunSplit(captures)
    ends = _GrowingFlags(os.path.join(tmp, "acks.ends"))
    rows = ArraySpill(os.path.join(tmp, "acks.rows"))
    batches = []            # per batch: (its first row, whether it starts a receiver run)
    with phase(progress, "ACK polls (--poll-acks)") as advance:
        for t in _decode_pass(files, decode_options, batch_records, None, decoder):
            advance(t.num_rows)
            ts = numpy_of(t.column("ts_ns")).astype(np.int64)
            new = bool(t.num_rows) and split.starts(
                int(numpy_of(t.column("file_index"))[0]), ts)
            batches.append((scan.rows, new))
            ends.grow(t.num_rows)
            rows.put(ts, *scan.add(t, ends, split.run))
    n = scan.rows
    timed = None
    if scan.acks and n:
        clock = PollClock(config.poll_gap_ns, config.budget)
        timed = os.path.join(tmp, "acks.timed")
        rows.rewind()
        with open(timed, "wb") as f:
            for (a, new), b in zip(batches, [r for r, _ in batches[1:]] + [n]):
                ts, fwd, rev, pure = rows.get(4)
                if new:
                    f.write(clock.new_run().tobytes())
                polls = clock.ids(ts, ends.flags[a:b], scan.counted(fwd, rev, pure))
                f.write(clock.times(ts, polls).tobytes())
            f.write(clock.times(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                final=True).tobytes())
    rows.close()
    os.unlink(rows.path)
    ends.close()
    return None if timed is None else np.memmap(timed, np.int64, "r", shape=(n,))


def _drop_acks(acks: list) -> None:
    """Remove the ACK pass's directory (its retimed arrivals, mapped until now)."""
    acks[1:] = [None]
    shutil.rmtree(acks[0], ignore_errors=True)


class _GrowingFlags:
    """A bool per row in a file, mapped, grown batch by batch; an earlier row's flag can
    be set (``AckScan.add``: an ACK closes a frame of an earlier batch)."""

    def __init__(self, path: str):
        self.path, self.n = path, 0
        open(path, "wb").close()
        self.flags = np.zeros(0, bool)

    def grow(self, rows: int) -> None:
        if not rows:
            return
        self.n += rows
        with open(self.path, "r+b") as f:
            f.truncate(self.n)
        self.flags = np.memmap(self.path, np.bool_, "r+", shape=(self.n,))

    def __setitem__(self, row: int, value: bool) -> None:
        self.flags[row] = value

    def close(self) -> None:
        self.flags = np.zeros(0, bool)
        os.unlink(self.path)


def _decode_pass(files, decode_options, batch_records, progress, decoder: str = "fast",
                 single=None, threads: int = 1):
    """The decode pass (a generator, run ahead of GRO by ``run.threads.Ahead``): every
    decoded batch as a table; returns the files' ``CaptureInfo`` s. ``decoder``:
    ``"fast"`` or ``"reference"`` (the plain-Python reader and decoder, the oracle: the
    same tables, batch by batch too). ``single``: a ``run.single.SinglePass`` takes
    the records instead of the decoder: ``(narrow table, GRO parts)`` a batch (with two
    ``threads``, the record scan ahead in a thread of its own)."""
    from gropcap.run.inputs import decode_file
    infos = []
    for file_index, path in enumerate(files):
        batches = decode_file(path, file_index, decode_options, decoder=decoder,
                              batch_records=batch_records, progress=progress,
                              decode=None if single is None else single.records,
                              scan_ahead=single is not None and threads > 1)
        while True:
            try:
                dec = next(batches)
            except StopIteration as stop:
                infos.append(stop.value)
                break
            yield dec if single is not None else pa.Table.from_batches([dec])
    return infos


def _verdict_rows(decoded, runs, cursors, r0: int = 0):
    """The packets pass's inputs (a generator, run ahead by ``run.threads.Ahead``): each
    decoded batch read back as a table, with per model its rows' ``(flow_id, rx_queue,
    reason, instance, poll)`` from the spills; ``r0``: the first row read back."""
    for dec in decoded:
        n = dec.num_rows
        got = {}
        for run in runs:
            rows, verdicts = cursors[run.model]
            got[run.model] = (*rows.take(n), *verdicts.take(r0, r0 + n))
        r0 += n
        yield pa.Table.from_batches([dec]), got


def _count_batch(t: pa.Table, counters, coal: _Coalesced, config: GroConfig,
                 fused: "_FusedTunnels | None", flow_id=None) -> None:
    """A decoded batch into the capture counters and the coalesced-input statistics
    (``flow_id``: its rows' flows, when GRO ran first).
    ``fused``: in the fused first try, its :class:`_FusedTunnels` (the batch's rows of UDP
    tunnels without a socket go there); raises :class:`_Unfused` where a frame captured
    already coalesced needs the whole decoded table before GRO (its gso_size)."""
    counters.add(t)
    coal.add(t, flow_id)
    if fused is not None:
        if coal.seen_coalesced():
            raise _Unfused
        fused.add(t, counters.udp_tunnels)


class _FusedTunnels:
    """The tunnel hint's rows gathered in the fused first pass: the rows of UDP tunnels on
    ports without a socket, as the tunnels appear (a tunnel's rows come after the first
    one that shows it), up to ``HINT_MAX_ROWS`` (past that, none: the hint leaves the
    ideal model out, as after an unfused pass), and per model the super-packets that
    start at one (``before``, counted by the inline packets pass). The napi model's part
    of the hint replays the whole capture, so a capture small enough for it
    (``HINT_NAPI_MAX_ROWS``) still starts over unfused at the end of the pass
    (:meth:`needs_whole`); a larger one keeps its fused pass."""

    def __init__(self, config: GroConfig, models):
        self.config = config
        self.pairs: tuple = ()
        self.seen = 0
        self.rows: list = []
        self.n = 0
        self.before = {m: 0 for m in models}

    def add(self, t: pa.Table, counts: dict) -> None:
        from gropcap.run.hints import HINT_MAX_ROWS, missing_tunnels, tunnel_mask
        if len(counts) != self.seen:
            self.seen = len(counts)
            hint = missing_tunnels(counts, self.config)
            self.pairs = tuple((m["kind"], m["port"]) for m in hint["tunnels"]) if hint \
                else ()
        if not self.pairs or self.n > HINT_MAX_ROWS:
            return
        idx = np.flatnonzero(tunnel_mask(t, self.pairs))
        self.n += len(idx)
        if self.n > HINT_MAX_ROWS:
            self.rows = []
        elif len(idx):
            self.rows.append(take_rows(t, idx))

    def firsts(self, t: pa.Table, model: str, first: np.ndarray) -> None:
        """``_TunnelHint.packets_batch`` for the inline packets pass."""
        self.before[model] += _tunnel_firsts(t, self.pairs, first)

    def needs_whole(self, packets: int, models) -> bool:
        """Whether the hint's napi part will replay the whole capture (then the run
        starts over unfused, as it always did)."""
        from gropcap.run.hints import HINT_NAPI_MAX_ROWS
        return bool(self.pairs) and packets <= HINT_NAPI_MAX_ROWS and \
            not all(m == "ideal" for m in models)

    def into(self, hint: "_TunnelHint", inline: bool) -> None:
        """Hand the gathered rows (and, ``inline``, the counts: the same dictionary, which
        the inline pass's last batches, drained after GRO's end, still add to) to the
        run's hint."""
        if hint.collect:
            hint.rows = list(self.rows)
            hint.co = [None] * len(self.rows)
        if inline:
            hint.before = self.before


def _kept_columns(out_dir, packet_columns, models, plot=False) -> list[str] | None:
    """Decoded columns the packets pass reads back after a fused first pass (None: all):
    what ``packets.parquet`` writes (and the readable columns' sources), the encapsulation
    counts and the flow causes, and with ``plot`` each row's time and file."""
    from gropcap.decode.schema import PACKET_COLUMNS
    from gropcap.io.columns import (ADDRESS_COLUMNS, readable_names,
                                    select_packet_columns)
    # (the tunnel hint's super-packets per tunnel row: hints.tunnel_mask's columns)
    need = {"encap", "tcp_seq", "payload_len", "l4_proto", "tun_type", "outer_dport",
            "outer_l4_proto"}
    if plot:
        need |= {"ts_ns", "file_index"}
    if out_dir:
        if packet_columns == "all":
            return None
        primary = "napi" if "napi" in models else models[0]
        names = _empty_packets(models, primary).column_names
        cols = select_packet_columns(readable_names(names), packet_columns)
        need |= set(cols)
        need |= {c[:-len("_name")] for c in cols if c.endswith("_name")}
        for col, ver in ADDRESS_COLUMNS:
            if col + "_text" in cols:
                need |= {col, ver}
    return [c for c in PACKET_COLUMNS if c in need]


def _empty_packets(models, primary) -> pa.Table:
    from gropcap.gro.result import PACKET_RESULT_DTYPES
    t = empty_packet_table()
    for k, dt in PACKET_RESULT_DTYPES.items():
        t = t.append_column(k, arrow_of(np.zeros(0, dt)))
    for m in models:
        if m != primary:
            for k, dt in PACKET_RESULT_DTYPES.items():
                if k != "flow_id":
                    t = t.append_column(f"{m}_{k}", arrow_of(np.zeros(0, dt)))
    return t


def _empty_superpackets() -> pa.Table:
    from gropcap.gro.result import SEG_DTYPES
    cols = {k: arrow_of(np.zeros(0, dt)) for k, dt in SEG_DTYPES.items()}
    cols["model"] = arrow_strings([])
    return pa.table(cols)


__all__ = ["stream_analyze", "StreamResult", "streamable"]
