"""GroResult: what a GRO engine hands on (see the contract in ``gropcap/gro/__init__.py``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa

PACKET_RESULT_DTYPES = {
    "flow_id": np.int64, "gro_seg": np.int64, "gro_role": np.uint8, "reason": np.uint8,
    "rx_queue": np.uint16, "poll_id": np.int64,
}
SEG_DTYPES = {
    "seg_id": np.int64, "flow_id": np.int64, "first_packet": np.int64,
    "last_packet": np.int64, "count": np.int32, "payload_len": np.int64,
    "gso_size": np.int32, "gso_type": np.uint32, "end_reason": np.uint8,
    "rx_queue": np.uint16, "poll_id": np.int64,
}


@dataclass
class GroResult:
    """Per-packet verdicts and the super-packets in delivery order (numpy arrays)."""

    # per packet
    flow_id: np.ndarray
    gro_seg: np.ndarray
    gro_role: np.ndarray
    reason: np.ndarray
    rx_queue: np.ndarray
    poll_id: np.ndarray
    # per super-packet, delivery order
    seg_flow_id: np.ndarray
    seg_first_packet: np.ndarray
    seg_last_packet: np.ndarray
    seg_count: np.ndarray
    seg_payload_len: np.ndarray
    seg_gso_size: np.ndarray
    seg_gso_type: np.ndarray
    seg_end_reason: np.ndarray
    seg_rx_queue: np.ndarray
    seg_poll_id: np.ndarray

    def __post_init__(self):
        for f in fields(self):
            name = f.name
            key = name[4:] if name.startswith("seg_") else name
            dtype = SEG_DTYPES[key] if name.startswith("seg_") else PACKET_RESULT_DTYPES[name]
            setattr(self, name, np.asarray(getattr(self, name), dtype=dtype))

    @property
    def num_packets(self) -> int:
        return len(self.gro_seg)

    @property
    def num_superpackets(self) -> int:
        return len(self.seg_count)

    def packet_columns(self) -> dict[str, np.ndarray]:
        """The columns appended to the packets table."""
        return {name: getattr(self, name) for name in PACKET_RESULT_DTYPES}

    def superpackets_table(self) -> pa.Table:
        """One row per packet the stack receives, in delivery order."""
        cols = {"seg_id": np.arange(self.num_superpackets, dtype=np.int64)}
        for key in SEG_DTYPES:
            if key != "seg_id":
                cols[key] = getattr(self, "seg_" + key)
        return pa.table(cols)

    def equals(self, other: "GroResult") -> bool:
        return all(np.array_equal(getattr(self, f.name), getattr(other, f.name))
                   for f in fields(self))

    def check_invariants(self, payload_len: np.ndarray, segments=None) -> None:
        """Raise AssertionError unless every packet is accounted for exactly once.

        ``segments``: for input that arrives as GSO packets (the gro_cells stage, frames
        captured coalesced), the segments each input row stands for; then
        ``sum(count) == sum(segments)`` and each super-packet's count is the sum of its
        rows' segments.
        """
        n = self.num_packets
        seg_in = (np.ones(n, np.int64) if segments is None
                  else np.asarray(segments, np.int64))
        assert int(self.seg_count.sum()) == int(seg_in.sum()), "sum(count) != segments in"
        assert int(self.seg_payload_len.sum()) == int(np.asarray(payload_len, np.int64).sum()), \
            "payload bytes not conserved"
        if n:
            counts = np.bincount(self.gro_seg, weights=seg_in,
                                 minlength=self.num_superpackets).astype(np.int64)
            assert np.array_equal(counts, self.seg_count), "gro_seg disagrees with count"
            assert np.array_equal(self.flow_id[self.seg_first_packet], self.seg_flow_id)
            assert np.array_equal(self.flow_id, self.seg_flow_id[self.gro_seg]), \
                "a super-packet mixes flows"
        multi = self.seg_count > 1
        gs = self.seg_gso_size[multi].astype(np.int64)
        pl = self.seg_payload_len[multi]
        cnt = self.seg_count[multi].astype(np.int64)
        assert np.all(gs * (cnt - 1) < pl) and np.all(pl <= gs * cnt), "gso_size inconsistent"


def run_bounds(runs, n: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges of the receiver runs of ``n`` rows (``runs``: the run of
    each row, non-decreasing; None: one run)."""
    if runs is None or not n:
        return [(0, n)]
    runs = np.asarray(runs, np.int64)
    if runs.shape != (n,):
        from gropcap.errors import ConfigError
        raise ConfigError(f"runs has {runs.shape} values for {n} packets")
    if np.any(np.diff(runs) < 0):
        from gropcap.errors import ConfigError
        raise ConfigError("runs must be non-decreasing", hint="one run after the other")
    cuts = np.flatnonzero(np.diff(runs)) + 1
    edges = [0, *cuts.tolist(), n]
    return list(zip(edges, edges[1:]))


def concat_runs(results: list[GroResult], polls: list[int]) -> GroResult:
    """The GroResults of consecutive receiver runs (each numbered from 0, ``polls[k]``
    polls in run ``k``) as one: rows, flows, super-packets and polls numbered run after
    run, super-packets delivered run after run."""
    rows = flows = segs = npoll = 0
    cols: dict[str, list] = {f: [] for f in GroResult.__dataclass_fields__}
    for r, p in zip(results, polls):
        shift = {"flow_id": flows, "gro_seg": segs, "poll_id": npoll,
                 "seg_flow_id": flows, "seg_first_packet": rows, "seg_last_packet": rows,
                 "seg_poll_id": npoll}
        for f in cols:
            a = getattr(r, f)
            if f in shift and shift[f]:
                a = np.where(a >= 0, a + shift[f], a) if "poll" in f else a + shift[f]
            cols[f].append(a)
        rows += r.num_packets
        segs += r.num_superpackets
        flows += int(r.flow_id.max()) + 1 if r.num_packets else 0
        npoll += p
    return GroResult(**{f: np.concatenate(v) for f, v in cols.items()})
