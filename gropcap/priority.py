"""Scheduling priority of a run's helper threads.

A run with ``--threads 2`` has more busy threads than the machine has cores: the calling
thread runs GRO (the critical path: every batch goes through it in order), and helpers
decode ahead, spill behind, hash the file and run a second model (a run of the single
pass, ``run/single.py``, runs GRO in the decode-ahead thread instead: that thread is the
critical path then, and keeps the caller's priority). When they all want a
core, Linux shares the cores evenly between threads, so the critical one got a fraction
of a core while helpers that had batches in hand ran. Each helper lowers its own
priority a few nice steps when it starts (:func:`lower_this_thread`); the hash, which
only has to be done by the end of the run, goes to the lowest. The work and the results
are the same; only the order in which the scheduler serves the threads changes
(``docs/performance.md``, "Two threads: the critical path served first").

Linux only (a thread's nice value is its own there: ``setpriority(PRIO_PROCESS, tid)``);
elsewhere, or if the call fails, nothing changes. A nice value is only ever raised
(lower priority), never lowered, so no privilege is needed, and it is counted from the
process's own: a run started under ``nice`` keeps its helpers below its main thread.

Layer: rank 0 (imports nothing of gropcap).
"""

from __future__ import annotations

import os
import sys
import threading

# nice steps below the main thread: helpers that keep the pipeline fed, and the file's
# digest (docs/performance.md: measured on a 2-core machine, 20 M packets)
HELPER = 5
BACKGROUND = 19

_MAX_NICE = 19


def lower_this_thread(steps: int) -> int | None:
    """Lower the calling thread's priority to ``steps`` nice values below the process's
    main thread (capped at 19; never raised). Returns the thread's nice value after,
    None where threads have no priority of their own (not Linux) or the call failed."""
    if not sys.platform.startswith("linux") or steps <= 0:
        return None
    try:
        tid = threading.get_native_id()
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())   # the main thread's
        now = os.getpriority(os.PRIO_PROCESS, tid)
        want = min(_MAX_NICE, base + steps)
        if want > now:
            os.setpriority(os.PRIO_PROCESS, tid, want)
            now = want
        return now
    except (OSError, AttributeError):
        return None


__all__ = ["lower_this_thread", "HELPER", "BACKGROUND"]
