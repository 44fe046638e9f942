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


def _direction_keys(table) -> tuple[np.ndarray, np.ndarray]:
    """Per row: an int id of its (addresses, ports) direction and of the reverse one
    (-1 for rows that are not TCP)."""
    n = table.num_rows
    col = lambda name: table.column(name).to_pylist()  # noqa: E731
    src, dst = col("ip_src"), col("ip_dst")
    sport, dport, proto = col("sport"), col("dport"), col("l4_proto")
    ids: dict = {}
    fwd = np.full(n, -1, np.int64)
    rev = np.full(n, -1, np.int64)
    for i in range(n):
        if proto[i] != TCP:
            continue
        a = (bytes(src[i] or b""), sport[i], bytes(dst[i] or b""), dport[i])
        b = (a[2], a[3], a[0], a[1])
        fwd[i] = ids.setdefault(a, len(ids))
        rev[i] = ids.setdefault(b, len(ids))
    return fwd, rev


def ack_evidence(table) -> AckEvidence:
    """Which frames of ``table`` (capture order) an ACK of the other direction closes."""
    n = table.num_rows
    ends = np.zeros(n, bool)
    counted = np.ones(n, bool)
    if not n:
        return AckEvidence(ends, counted, 0, 0)
    fwd, rev = _direction_keys(table)
    num = lambda name: table.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
    proto = num("l4_proto").astype(np.int64)
    seq = num("tcp_seq").astype(np.int64)
    ackno = num("tcp_ack").astype(np.int64)
    flags = num("tcp_flags").astype(np.int64)
    payload = num("payload_len").astype(np.int64)
    tcp = proto == TCP
    span = payload + ((flags & SYN) != 0) + ((flags & FIN) != 0)
    data = tcp & (span > 0)
    end = (seq + span) & 0xFFFFFFFF
    has_data = set(fwd[data].tolist())
    # the receiver's own pure ACKs, not frames it polled: those of a direction without
    # payload whose other direction carries payload
    carries = np.isin(np.arange(max(int(fwd.max()), int(rev.max())) + 2),
                      np.unique(fwd[tcp & (payload > 0)]))
    counted &= ~(tcp & (span == 0) & carries[rev] & ~carries[fwd])
    last: dict = {}        # (direction, end sequence) -> latest data row ending there
    high: dict = {}        # direction -> highest acknowledgement number seen
    acks, answered = 0, set()
    for i in range(n):
        if not tcp[i]:
            continue
        if data[i]:
            last[(int(fwd[i]), int(end[i]))] = i
        if not flags[i] & ACK:
            continue
        d, a = int(rev[i]), int(ackno[i])
        if d not in has_data:
            continue
        h = high.get(d)
        if h is not None and ((a - h + (1 << 31)) & 0xFFFFFFFF) - (1 << 31) <= 0:
            continue           # not advancing: a duplicate or an old ACK
        high[d] = a
        j = last.get((d, a))
        if j is not None:
            ends[j] = True
            acks += 1
            answered.add(d)
    return AckEvidence(ends, counted, acks, len(answered))


def poll_ids(ts_ns, evidence: AckEvidence, gap_ns: int, budget: int) -> np.ndarray:
    """A poll number per frame (capture order, non-decreasing): a poll ends after a frame
    an ACK closes, before a frame that arrives more than ``gap_ns`` after the previous
    one (arrival: the running maximum of ``ts_ns``), and once it holds ``budget``
    counted frames."""
    ts = np.asarray(ts_ns, np.int64)
    n = len(ts)
    out = np.empty(n, np.int64)
    ends, counted = evidence.ends, evidence.counted
    poll, held, arrival, closed = 0, 0, None, True
    for i in range(n):
        t = int(ts[i]) if arrival is None else max(int(ts[i]), arrival)
        if not closed and (t > arrival + gap_ns or (held >= budget and counted[i])):
            poll += 1
            held = 0
        out[i] = poll
        held += int(counted[i])
        arrival, closed = t, bool(ends[i])
        if closed:
            poll += 1
            held = 0
    return out


def poll_times(ts_ns, polls) -> np.ndarray:
    """Every frame of a poll gets the arrival time of the poll's last frame, at least
    1 ns after the previous poll's: with ``poll_gap_ns=0`` the napi model then joins
    exactly one poll's frames."""
    ts = np.maximum.accumulate(np.asarray(ts_ns, np.int64))
    polls = np.asarray(polls, np.int64)
    if not len(ts):
        return ts.copy()
    starts = np.flatnonzero(np.r_[True, polls[1:] != polls[:-1]])
    last = np.maximum.reduceat(ts, starts)
    # strictly increasing per poll: t_k = max(last_k, t_{k-1} + 1)
    k = np.arange(len(last), dtype=np.int64)
    when = np.maximum.accumulate(last - k) + k
    return np.repeat(when, np.diff(np.r_[starts, len(ts)]))


def engine_config(config):
    """The configuration the engine runs with on :func:`poll_times`' arrivals (the
    inference applied ``poll_acks``, the gap and the budget)."""
    return config.replace(poll_gap_ns=0, budget=NO_BUDGET, poll_acks=False)


def retimed(table, config):
    """``table`` with ``ts_ns`` replaced by the ACK-inferred polls' times (``config``:
    its ``poll_gap_ns`` and ``budget``), and the evidence. Without evidence (no ACK of a
    data direction in the capture) the table comes back unchanged."""
    import pyarrow as pa

    ev = ack_evidence(table)
    if not ev:
        return table, ev
    ts = table.column("ts_ns").to_numpy(zero_copy_only=False)
    new = poll_times(ts, poll_ids(ts, ev, config.poll_gap_ns, config.budget))
    i = table.schema.get_field_index("ts_ns")
    return table.set_column(i, table.schema.field(i), pa.array(new, pa.int64())), ev


__all__ = ["AckEvidence", "ack_evidence", "poll_ids", "poll_times", "engine_config",
           "retimed", "NO_BUDGET"]
