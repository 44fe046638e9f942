"""Receiver runs: which input files one receiver replays as one timeline.

Several input files are either pieces of one capture (``tcpdump -C``/``-G`` rotation:
one receiver, its GRO and NAPI state carried from file to file) or separate captures
(copies of one capture, captures of other hosts or days: each replayed on a receiver of
its own, the counts summed). The capture does not say which, so ``--captures`` does:

* ``continuous``: every file continues one timeline (one receiver run);
* ``separate``: every file is a receiver of its own;
* ``auto`` (the default): a file starts a new receiver run when its first timestamp is
  earlier than the latest timestamp of the files before it (it cannot continue them);
  otherwise it continues the run. A file without packets joins the run before it.

A new run starts from a fresh GRO/NAPI state (``gro.engine.next_run``), after the run
before it was flushed to the end as the end of a capture is; flows are never shared
across runs (their ids differ), and super-packets are delivered run after run.

:func:`receiver_runs` decides from each file's first and latest timestamps
(``run.accumulators.CaptureCounts``), :class:`RunSplit` decides the same batch by
batch for a run that cannot look ahead (``run.stream``), and :func:`inputs_dict` is the
summary's ``inputs`` section saying which was inferred and why.

Layer: run/; numpy only.
"""

from __future__ import annotations

import numpy as np

CAPTURES = ("auto", "continuous", "separate")
NO_TS = np.iinfo(np.int64).min       # a file without packets has no timestamp


def check_captures(captures: str) -> str:
    """``captures`` checked (a :class:`ConfigError` naming the choices)."""
    if captures not in CAPTURES:
        from gropcap.errors import ConfigError
        raise ConfigError(f"unknown --captures {captures!r}", hint=f"use one of {CAPTURES}")
    return captures


def _starts(captures: str, first: int, latest: int) -> bool:
    """Whether a file whose first timestamp is ``first`` starts a new receiver run after
    files whose latest timestamp is ``latest`` (:data:`NO_TS`: none had packets)."""
    if first == NO_TS or latest == NO_TS:
        return False
    if captures == "separate":
        return True
    return captures == "auto" and first < latest


def receiver_runs(captures: str, first_ts, max_ts) -> np.ndarray:
    """The receiver run (0, 1, ...) of each input file, from each file's first timestamp
    and latest timestamp (:data:`NO_TS` for a file without packets).

    >>> receiver_runs("auto", [10, 20, 5], [15, 30, 9]).tolist()
    [0, 0, 1]
    >>> receiver_runs("separate", [10, 20], [15, 30]).tolist()
    [0, 1]
    """
    check_captures(captures)
    first = np.asarray(first_ts, np.int64)
    last = np.asarray(max_ts, np.int64)
    runs = np.zeros(len(first), np.int64)
    latest, run = NO_TS, 0
    for k in range(len(first)):
        if _starts(captures, int(first[k]), int(latest)):
            run += 1
        runs[k] = run
        latest = max(latest, int(last[k]))
    return runs


class RunSplit:
    """:func:`receiver_runs` online: told each batch (of one file, files in input order)
    before its GRO, :meth:`starts` says whether it begins a new receiver run."""

    def __init__(self, captures: str = "auto"):
        self.captures = check_captures(captures)
        self.file = -1
        self.latest = NO_TS
        self.run = 0

    def starts(self, file_index: int, ts: np.ndarray) -> bool:
        """The next batch: its file and timestamps; True when it starts a new run (the
        caller flushes the run before it and starts fresh receivers)."""
        new = False
        if file_index != self.file and len(ts):
            self.file = file_index
            if _starts(self.captures, int(ts[0]), int(self.latest)):
                self.run += 1
                new = True
        if len(ts):
            self.latest = max(self.latest, int(np.max(ts)))
        return new


def row_runs(table, run_of_file: np.ndarray) -> np.ndarray:
    """The receiver run of every row of a packet table (its ``file_index``)."""
    from gropcap.arrays import numpy_of
    if not table.num_rows:
        return np.zeros(0, np.int64)
    fidx = numpy_of(table.column("file_index")).astype(np.int64)
    return np.asarray(run_of_file, np.int64)[fidx]


def file_times(table, files: int) -> tuple[np.ndarray, np.ndarray]:
    """``(first_ts, max_ts)`` per input file of a packet table (:data:`NO_TS` for a file
    without rows)."""
    from gropcap.arrays import numpy_of
    first = np.full(files, NO_TS, np.int64)
    last = np.full(files, NO_TS, np.int64)
    if table.num_rows:
        fidx = numpy_of(table.column("file_index")).astype(np.int64)
        ts = numpy_of(table.column("ts_ns")).astype(np.int64)
        seen, at = np.unique(fidx, return_index=True)
        first[seen] = ts[at]
        np.maximum.at(last, fidx, ts)
    return first, last


def table_runs(table, files: int, captures: str = "auto") -> np.ndarray | None:
    """The receiver run of every row of a packet table of ``files`` input files under
    ``captures`` (``engine.simulate``'s ``runs``), or None when they are one run."""
    runs = receiver_runs(captures, *file_times(table, files))
    return row_runs(table, runs) if len(runs) and runs[-1] else None


def _seconds(ns: int) -> str:
    s = ns / 1e9
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.1f} s"
    return f"{s * 1e3:.3g} ms"


def _ranges(files: list[int]) -> str:
    """1-based file numbers as ``2-5, 7``."""
    out, k = [], 0
    while k < len(files):
        j = k
        while j + 1 < len(files) and files[j + 1] == files[j] + 1:
            j += 1
        out.append(str(files[k] + 1) if j == k else f"{files[k] + 1}-{files[j] + 1}")
        k = j + 1
    return ", ".join(out)


def inputs_dict(captures: str, first_ts, max_ts) -> dict:
    """The summary's ``inputs`` section: the files, ``--captures``, the receiver run of
    each file, and ``text``: one line saying what was inferred (or asked) and why."""
    first = np.asarray(first_ts, np.int64)
    last = np.asarray(max_ts, np.int64)
    runs = receiver_runs(captures, first, last)
    n, nruns = len(runs), int(runs.max()) + 1 if len(runs) else 0
    # files that start before an earlier file ends: why auto separates them
    back, latest, owner = [], NO_TS, -1
    for k in range(n):
        if first[k] != NO_TS and latest != NO_TS and first[k] < latest:
            back.append((k, owner, int(latest - first[k])))
        if last[k] != NO_TS and last[k] >= latest:
            latest, owner = int(last[k]), k
    why = ""
    if back:
        k, j, gap = back[0]
        why = f"file {k + 1} starts {_seconds(gap)} before file {j + 1} ends"
        if len(back) > 1:
            why += f"; {len(back) - 1} more file{'s' if len(back) > 2 else ''} start " \
                   f"before an earlier one ends"
    files = f"{n} file{'s' if n != 1 else ''}"
    if nruns <= 1:
        if captures == "continuous" and back:
            text = f"{files}: 1 receiver run (--captures continuous; {why})"
        elif captures == "separate" and n > 1:
            text = f"{files}: 1 receiver run (--captures separate: one file holds packets)"
        elif n > 1:
            text = f"{files}: 1 receiver run (continuous timestamps)"
        else:
            text = f"{files}: 1 receiver run"
    else:
        kind = "separate receivers" if nruns == n else "receiver runs"
        if captures == "separate":
            text = f"{files}: {nruns} {kind} (--captures separate)"
        else:
            text = f"{files}: {nruns} {kind} ({why}); --captures continuous to replay " \
                   f"them as one"
        if nruns != n:
            groups = [_ranges(np.flatnonzero(runs == r).tolist()) for r in range(nruns)]
            text += "; files " + " | ".join(groups)
    return {"files": n, "captures": captures, "receiver_runs": nruns,
            "run_of_file": runs.tolist(), "text": text}


__all__ = ["CAPTURES", "NO_TS", "check_captures", "receiver_runs", "RunSplit", "row_runs",
           "file_times", "table_runs", "inputs_dict"]
