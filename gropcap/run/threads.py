"""Worker threads of a bounded-memory run (``run.stream.stream_analyze``).

The numba kernels (record scan, decode, GRO) release the GIL (``nogil=True``), and so do
numpy's sorts and ufunc loops, Arrow's IPC writer and the file writes: with ``threads``
>= 2 a run is a pipeline of three threads,

* :class:`Ahead`: the decode pass (scan, decode, the capture counters and the
  coalesced-input statistics) runs in its own thread, up to ``depth`` batches ahead of
* the calling thread, which runs GRO on each batch in capture order, and hands
* :class:`Sidecar`: the spills of the engine's results, the per-model counts, the flows
  accumulator and the temporary decoded file to a third thread, in order.

Each stage sees the batches in capture order and is the only one to touch its own
accumulators, so the results are the same as with ``threads=1``, where the same code
runs in line on the calling thread (no thread is started).

Interrupts: signals are delivered to the main thread only; the waits here
(``queue.Queue.get``, ``Future.result``) are interruptible. :meth:`Ahead.close` and
:meth:`Sidecar.close` (the caller's ``finally``) stop the workers and wait for the batch
they are in (milliseconds), so nothing writes into the run's temporary directory once it
is removed.

Priorities: both helper threads run :data:`gropcap.priority.HELPER` nice steps below
the calling thread (``gropcap.priority``), which is the critical path: with more busy
threads than cores, Linux would otherwise share the cores evenly between them. An
:class:`Ahead` whose generator is the critical path itself (the single pass) is asked
for ``nice=0``: its thread keeps the caller's priority.

Layer: run/ (imports gropcap.errors and gropcap.priority only).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import sys
import threading

from gropcap.priority import HELPER, lower_this_thread

# the GIL switch interval while the pipeline runs: a thread coming back from a numba
# kernel waits for the GIL until the holder drops it, at the latest after this interval;
# a GRO batch returns from ~15 kernels, so Python's default (5 ms) cost the GRO thread
# seconds per run (docs/performance.md, "Threads")
SWITCH_INTERVAL_S = 0.0005

# the measured best on the 2-core machine this was written on (docs/performance.md,
# "Threads"): the pipeline has three stages, two of them busy most of the time
MAX_USEFUL_THREADS = 2


def default_threads() -> int:
    """The threads a run uses when not told: 2 where two CPUs are available to the
    process (``os.sched_getaffinity``), else 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_USEFUL_THREADS, cpus))


def resolve_threads(threads: int | None) -> int:
    """``threads`` checked (None: :func:`default_threads`); more than
    :data:`MAX_USEFUL_THREADS` run as that many."""
    if threads is None:
        return default_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        from gropcap.errors import ConfigError
        raise ConfigError(f"threads must be a positive integer, not {threads!r}")
    return min(threads, MAX_USEFUL_THREADS)


@contextlib.contextmanager
def switching(threads: int):
    """With ``threads`` > 1: :data:`SWITCH_INTERVAL_S` as the interpreter's switch
    interval for the block (``sys.setswitchinterval``, restored after)."""
    if threads <= 1:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class Ahead:
    """Iterate a generator in a worker thread, up to ``depth`` items ahead of the
    consumer (``threaded``), or in line (not threaded). The generator's return value is
    :attr:`value` once the iteration ends; an exception it raises is raised in the
    consumer at that item."""

    _END = object()

    def __init__(self, gen, *, depth: int = 2, threaded: bool = True,
                 name: str = "gropcap-decode", nice: int = HELPER):
        self.gen = gen
        self.nice = nice
        self.value = None
        self.threaded = threaded
        self._done = False
        if threaded:
            self._q: queue.Queue = queue.Queue(depth)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._work, name=name, daemon=True)
            self._thread.start()

    def _work(self) -> None:
        # below the consumer, the pipeline's critical path (nice 0: this thread is it)
        lower_this_thread(self.nice)
        try:
            while not self._stop.is_set():
                try:
                    item = next(self.gen)
                except StopIteration as stop:
                    self._put((self._END, stop.value))
                    return
                self._put((None, item))
        except BaseException as e:      # handed to the consumer
            self._put((e, None))
        finally:
            self.gen.close()            # its finally blocks run in this thread

    def _put(self, entry) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(entry, timeout=0.05)
                return
            except queue.Full:
                continue

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if not self.threaded:
            try:
                return next(self.gen)
            except StopIteration as stop:
                self.value = stop.value
                self._done = True
                raise StopIteration from None
        err, item = self._q.get()
        if err is self._END:
            self.value = item
            self._done = True
            raise StopIteration
        if err is not None:
            self._done = True
            raise err
        return item

    def close(self) -> None:
        """Stop the worker (it finishes the item it is computing) and wait for it."""
        self._done = True
        if not self.threaded:
            self.gen.close()
            return
        self._stop.set()
        while True:
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._thread.join()


class Sidecar:
    """Calls run in order in one worker thread (``threaded``; at most ``depth`` waiting),
    or at once in the caller's thread. An exception of a call is raised by the next
    :meth:`submit` or by :meth:`drain`."""

    def __init__(self, *, threaded: bool = True, depth: int = 2,
                 name: str = "gropcap-spill"):
        self.depth = depth
        self._pending: collections.deque = collections.deque()
        self._pool = None
        if threaded:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=name,
                                            initializer=lower_this_thread,
                                            initargs=(HELPER,))

    def submit(self, fn, *args) -> None:
        if self._pool is None:
            fn(*args)
            return
        self._pending.append(self._pool.submit(fn, *args))
        while self._pending and (len(self._pending) > self.depth or self._pending[0].done()):
            self._pending.popleft().result()

    def drain(self) -> None:
        """Wait for every call submitted (raises the first exception)."""
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        """Drop the calls not started, wait for the running one."""
        if self._pool is None:
            return
        for f in self._pending:
            f.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)
        self._pool = None


__all__ = ["Ahead", "Sidecar", "default_threads", "resolve_threads", "switching",
           "MAX_USEFUL_THREADS", "SWITCH_INTERVAL_S"]
