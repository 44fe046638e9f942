"""NAPI poll ends inferred from the receiver's ACKs (``poll_acks``; issue 12).

A capture taken on a link (a tap, a port mirror, ``tcpdump`` on the sending device) holds
the receiver's ACKs next to the data. They show where the receiver's polls ended: GRO
holds a super-packet until the poll that built it ends (``napi_complete_done`` ->
``gro_flush_normal`` -> ``gro_normal_list``; or earlier, once ``gro_normal_batch``
segments wait), the stack then hands it to TCP, and only then does
``tcp_rcv_established`` -> ``__tcp_ack_snd_check`` send the ACK. So an ACK acknowledging
up to sequence S says: the data frame that ends at S was delivered, its poll ended
after it (docs/gro-model.md, "Poll ends from the receiver's ACKs").

What is used, per TCP direction that carries data:

* the ACKs of the other direction whose acknowledgement number advances (a duplicate
  ACK, sent for an out-of-order segment, names no new frame);
* the data frame that ends exactly at that number (SYN and FIN count one), the latest
  one before the ACK in the capture (a retransmission ends where the original did);
* a poll ends after that frame.

Polls that sent no ACK (delayed ACKs; a socket its reader held, whose backlog is ACKed
from process context later) are found as before: a gap longer than ``poll_gap_ns``
between frames ends a poll, and a poll takes at most ``budget`` frames. The receiver's
own pure ACKs (of a direction without payload whose other direction carries payload) are
not frames that receiver polled: they do not count towards the budget.

The inferred polls reach the napi model as arrival times, outside the engine: every
frame of a poll gets the arrival time of the poll's last frame (at least 1 ns after the
previous poll), and the model runs with ``poll_gap_ns=0`` (a poll joins only frames with
equal times) and no budget of its own (the inference applied it; a full-budget poll then
ends with the complete flush ``__napi_poll`` does when HZ < 1000).

Layer: packet table (``decode.schema.PACKET_SCHEMA``) -> numpy arrays; used before the
engine runs by ``run.engines.simulate`` (whole tables: ``run.engines.simulate``, calibrate's
reference runs), ``pipeline.analyze`` and ``calibrate`` (its re-runs).

Public API::

    ack_evidence(table) -> AckEvidence               # which frames an ACK closes
    poll_ids(ts_ns, evidence, gap_ns, budget) -> np.ndarray
    poll_times(ts_ns, poll_ids) -> np.ndarray        # the retimed arrival times
    engine_config(config) -> GroConfig               # what the engine runs with
    retimed(table, config) -> (table, AckEvidence)   # the table the napi model reads
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TCP = 6
SYN, FIN, ACK = 0x02, 0x01, 0x10
# the engine's budget when the inference applied the budget already (no engine cut)
NO_BUDGET = 1 << 30
# AckScan drops the frames an ACK has passed once this many wait for one
PRUNE_AT = 1 << 18


@dataclass(frozen=True)
class AckEvidence:
    """``ends[i]``: an ACK of the other direction closes frame ``i`` (a poll ended after
    it); ``counted[i]``: frame ``i`` counts towards the poll budget (not one of the
    receiver's own pure ACKs); ``acks``: the advancing ACKs that closed a frame;
    ``directions``: the TCP directions with data that such ACKs answered."""

    ends: np.ndarray
    counted: np.ndarray
    acks: int
    directions: int

    def __bool__(self) -> bool:
        return self.acks > 0


def _direction_keys(table, ids: dict | None = None, runs=None) -> tuple[np.ndarray, np.ndarray]:
    """Per row: an int id of its (addresses, ports) direction and of the reverse one
    (-1 for rows that are not TCP); ``ids``: the numbering so far (earlier batches);
    ``runs``: each row's receiver run (``run/receivers.py``; None: one run): a
    direction of one run is not the same direction in another (another receiver, or
    another copy of one capture)."""
    n = table.num_rows
    col = lambda name: table.column(name).to_pylist()  # noqa: E731
    src, dst = col("ip_src"), col("ip_dst")
    sport, dport, proto = col("sport"), col("dport"), col("l4_proto")
    ids = {} if ids is None else ids
    run = [0] * n if runs is None else np.asarray(runs).tolist()
    fwd = np.full(n, -1, np.int64)
    rev = np.full(n, -1, np.int64)
    for i in range(n):
        if proto[i] != TCP:
            continue
        r = run[i]
        a = (r, bytes(src[i] or b""), sport[i], bytes(dst[i] or b""), dport[i])
        b = (r, a[3], a[4], a[1], a[2])
        fwd[i] = ids.setdefault(a, len(ids))
        rev[i] = ids.setdefault(b, len(ids))
    return fwd, rev


class AckScan:
    """:func:`ack_evidence` over the batches of a capture, in order (a bounded-memory
    run's pre-pass: ``run/stream.py``). :meth:`add` sets ``ends[j]`` for every frame ``j``
    (a row number over the whole capture, in this batch or an earlier one) an advancing
    ACK of the batch closes, and returns the batch's direction ids and pure-ACK flags;
    :meth:`counted` needs every batch seen (a pure ACK counts unless its direction
    carries no payload anywhere and the other one does).

    An ACK of a direction that never carries data can close nothing: the whole-table
    scan skipped such ACKs, this one looks them up and finds no frame, the same.

    Memory: the frames waiting for an ACK, per direction (one entry per data frame not
    acknowledged yet) and a few ids per direction. Once :data:`PRUNE_AT` frames wait,
    those whose end an ACK has passed go (a later ACK must advance past that ACK, so
    it cannot name them; the threshold doubles while half of them stay). The rule
    depends on the rows only, not on how they are cut into batches."""

    def __init__(self):
        self.ids: dict = {}
        self.last: dict = {}     # (direction, end sequence) -> latest data row ending there
        self.high: dict = {}     # direction -> highest acknowledgement number seen
        self.carries: set = set()     # directions with payload
        self.acks = 0
        self.answered: set = set()
        self.rows = 0
        self.prune_at = PRUNE_AT

    def _prune(self) -> None:
        high = self.high
        self.last = {k: j for k, j in self.last.items()
                     if (h := high.get(k[0])) is None
                     or ((k[1] - h + (1 << 31)) & 0xFFFFFFFF) - (1 << 31) > 0}
        while len(self.last) * 2 > self.prune_at:
            self.prune_at *= 2

    def add(self, table, ends, runs=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The next rows (``runs``: each one's receiver run, an int for all of them, or
        None: run 0); returns ``(fwd, rev, pure)`` per row (``pure``: TCP without
        sequence space, a pure-ACK candidate). Directions are per receiver run."""
        n = table.num_rows
        base, self.rows = self.rows, self.rows + n
        if runs is not None and np.ndim(runs) == 0:
            runs = np.full(n, int(runs), np.int64)
        fwd, rev = _direction_keys(table, self.ids, runs)
        num = lambda name: table.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
        tcp = num("l4_proto").astype(np.int64) == TCP
        seq = num("tcp_seq").astype(np.int64)
        ackno = num("tcp_ack").astype(np.int64)
        flags = num("tcp_flags").astype(np.int64)
        payload = num("payload_len").astype(np.int64)
        span = payload + ((flags & SYN) != 0) + ((flags & FIN) != 0)
        data = tcp & (span > 0)
        end = (seq + span) & 0xFFFFFFFF
        self.carries.update(fwd[tcp & (payload > 0)].tolist())
        last, high = self.last, self.high
        for i in np.flatnonzero(tcp).tolist():
            if data[i]:
                last[(int(fwd[i]), int(end[i]))] = base + i
                if len(last) >= self.prune_at:
                    self._prune()
                    last = self.last
            if not flags[i] & ACK:
                continue
            d, a = int(rev[i]), int(ackno[i])
            h = high.get(d)
            if h is not None and ((a - h + (1 << 31)) & 0xFFFFFFFF) - (1 << 31) <= 0:
                continue           # not advancing: a duplicate or an old ACK
            high[d] = a
            j = last.get((d, a))
            if j is not None:
                ends[j] = True
                self.acks += 1
                self.answered.add(d)
        return fwd, rev, tcp & (span == 0)

    def counted(self, fwd: np.ndarray, rev: np.ndarray, pure: np.ndarray) -> np.ndarray:
        """``AckEvidence.counted`` of rows with these :meth:`add` results: the
        receiver's own pure ACKs (of a direction without payload whose other direction
        carries payload) are not frames it polled."""
        carries = np.fromiter(self.carries, np.int64, len(self.carries))
        return ~(pure & np.isin(rev, carries) & ~np.isin(fwd, carries))


def ack_evidence(table, runs=None) -> AckEvidence:
    """Which frames of ``table`` (capture order) an ACK of the other direction closes;
    ``runs``: each row's receiver run (None: one run)."""
    n = table.num_rows
    ends = np.zeros(n, bool)
    if not n:
        return AckEvidence(ends, np.ones(n, bool), 0, 0)
    scan = AckScan()
    fwd, rev, pure = scan.add(table, ends, runs)
    return AckEvidence(ends, scan.counted(fwd, rev, pure), scan.acks, len(scan.answered))


class PollClock:
    """:func:`poll_ids` and :func:`poll_times` over the slices of a capture, in order
    (state carried): :meth:`ids` numbers the polls of the next rows, :meth:`times` gives
    the retimed arrivals of the rows whose poll has ended (the rows of the poll still
    open wait for the next slice, or ``final``)."""

    def __init__(self, gap_ns: int, budget: int):
        self.gap, self.budget = gap_ns, budget
        self.poll, self.held, self.arrival, self.closed = 0, 0, None, True
        self.peak = None          # running maximum of the timestamps so far
        self.when = None          # the last ended poll's time
        self.wait_ts = np.zeros(0, np.int64)
        self.wait_polls = np.zeros(0, np.int64)

    def new_run(self) -> list:
        """A new receiver run starts (another receiver or another copy: its own time
        line): the rows still waiting get their times (returned), the clock restarts;
        poll numbers go on."""
        done = self.times(np.zeros(0, np.int64), np.zeros(0, np.int64), final=True)
        if not self.closed:
            self.poll += 1
        self.held, self.arrival, self.closed = 0, None, True
        self.peak = self.when = None
        return done

    def ids(self, ts_ns, ends, counted) -> np.ndarray:
        """A poll number per frame (non-decreasing): a poll ends after a frame an ACK
        closes, before a frame that arrives more than ``gap_ns`` after the previous one
        (arrival: the running maximum of ``ts_ns``), and once it holds ``budget`` counted
        frames."""
        ts = np.asarray(ts_ns, np.int64)
        out = np.empty(len(ts), np.int64)
        poll, held, arrival, closed = self.poll, self.held, self.arrival, self.closed
        budget, gap = self.budget, self.gap
        for i in range(len(ts)):
            t = int(ts[i]) if arrival is None else max(int(ts[i]), arrival)
            if not closed and (t > arrival + gap or (held >= budget and counted[i])):
                poll += 1
                held = 0
            out[i] = poll
            held += int(counted[i])
            arrival, closed = t, bool(ends[i])
            if closed:
                poll += 1
                held = 0
        self.poll, self.held, self.arrival, self.closed = poll, held, arrival, closed
        return out

    def times(self, ts_ns, polls, final: bool = False) -> np.ndarray:
        """Every frame of a poll gets the arrival time of the poll's last frame, at
        least 1 ns after the previous poll's: with ``poll_gap_ns=0`` the napi model then
        joins exactly one poll's frames. Returns the times of the rows that waited and
        of these, up to the last poll that has ended (all with ``final``)."""
        ts = np.concatenate([self.wait_ts, np.asarray(ts_ns, np.int64)])
        polls = np.concatenate([self.wait_polls, np.asarray(polls, np.int64)])
        if not len(ts):
            return ts
        if self.peak is not None:
            ts[0] = max(int(ts[0]), self.peak)
        ts = np.maximum.accumulate(ts)
        self.peak = int(ts[-1])
        starts = np.flatnonzero(np.r_[True, polls[1:] != polls[:-1]])
        done = len(ts) if final else int(starts[-1])
        self.wait_ts, self.wait_polls = ts[done:], polls[done:]
        starts = starts[starts < done]
        if not done:
            return np.zeros(0, np.int64)
        last = np.maximum.reduceat(ts[:done], starts)
        # strictly increasing per poll: t_k = max(last_k, t_{k-1} + 1)
        k = np.arange(len(last), dtype=np.int64)
        step = last - k
        if self.when is not None:
            step[0] = max(int(step[0]), self.when + 1)
        when = np.maximum.accumulate(step) + k
        self.when = int(when[-1])
        return np.repeat(when, np.diff(np.r_[starts, done]))


def _run_slices(n: int, runs) -> list:
    """``(start, end)`` of each receiver run's rows (``runs`` None: one run)."""
    if runs is None or not n:
        return [(0, n)]
    cut = np.flatnonzero(np.diff(np.asarray(runs)) != 0) + 1
    bounds = [0, *cut.tolist(), n]
    return list(zip(bounds, bounds[1:]))


def poll_ids(ts_ns, evidence: AckEvidence, gap_ns: int, budget: int,
             runs=None) -> np.ndarray:
    """:meth:`PollClock.ids` of a whole capture (``runs``: each row's receiver run)."""
    ts = np.asarray(ts_ns, np.int64)
    clock = PollClock(gap_ns, budget)
    out = []
    for k, (a, b) in enumerate(_run_slices(len(ts), runs)):
        if k:
            clock.new_run()
        out.append(clock.ids(ts[a:b], evidence.ends[a:b], evidence.counted[a:b]))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def poll_times(ts_ns, polls, runs=None) -> np.ndarray:
    """:meth:`PollClock.times` of a whole capture (``runs``: each row's receiver run,
    each on its own time line)."""
    ts = np.asarray(ts_ns, np.int64)
    clock = PollClock(0, 0)
    out = []
    for k, (a, b) in enumerate(_run_slices(len(ts), runs)):
        if k:
            out.append(clock.new_run())
        out.append(clock.times(ts[a:b], np.asarray(polls)[a:b]))
    out.append(clock.times(np.zeros(0, np.int64), np.zeros(0, np.int64), final=True))
    return np.concatenate(out)


def engine_config(config):
    """The configuration the engine runs with on :func:`poll_times`' arrivals (the
    inference applied ``poll_acks``, the gap and the budget)."""
    return config.replace(poll_gap_ns=0, budget=NO_BUDGET, poll_acks=False)


def retimed(table, config, runs=None):
    """``table`` with ``ts_ns`` replaced by the ACK-inferred polls' times (``config``:
    its ``poll_gap_ns`` and ``budget``), and the evidence. Without evidence (no ACK of a
    data direction in the capture) the table comes back unchanged. ``runs``: each row's
    receiver run (``run/receivers.py``; None: one run): the ACKs, the polls and their
    times of each run are its own."""
    import pyarrow as pa

    ev = ack_evidence(table, runs)
    if not ev:
        return table, ev
    ts = table.column("ts_ns").to_numpy(zero_copy_only=False)
    new = poll_times(ts, poll_ids(ts, ev, config.poll_gap_ns, config.budget, runs), runs)
    i = table.schema.get_field_index("ts_ns")
    return table.set_column(i, table.schema.field(i), pa.array(new, pa.int64())), ev


__all__ = ["AckEvidence", "ack_evidence", "poll_ids", "poll_times", "engine_config",
           "retimed", "NO_BUDGET"]
