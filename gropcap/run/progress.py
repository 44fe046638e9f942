"""A progress bar for long runs: rich on a terminal (stderr), nothing otherwise.

The pipeline calls :meth:`Progress.batch` once per decoded batch; the bar shows how far
into each input file the reader is (stored bytes for plain files, records for compressed
ones whose decompressed size is unknown), with the rate and the time left. Every later
phase (GRO per model, super-packets, writing) is a line of its own opened with
:func:`phase` (a no-op for ``progress=None``), counted in packets or files, so the bar
never sits at 100% with nothing named. The Dask runner calls :meth:`Progress.track` with
each stage's task futures: one line per stage counts finished tasks.

Notes (:meth:`Progress.note`) are single lines on stderr, printed on a terminal or not
unless the progress is ``quiet``: the one a run prints when numba compiles its kernels
(a cold cache, :data:`COMPILE_NOTE`) is the only one today.
"""

from __future__ import annotations

import os
import sys

COMPILE_NOTE = "compiling GRO kernels, first run only"
# a small capture on a cold kernel cache runs on the reference decoder and engine instead
# (run/cold.py; the CLI's choice when --engine/--decoder are not given)
COLD_REFERENCE_NOTE = ("GRO kernels not compiled yet: this small capture runs on the reference "
                       "decoder and engine (same results); the first capture over {mib} MiB "
                       "compiles them once")


def _rate_column():
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """``1.2 M packets/s`` (the task's ``unit`` field; MB/s for bytes)."""

        def render(self, task):
            speed = task.finished_speed or task.speed
            if not speed:
                return Text("")
            unit = task.fields.get("unit", "")
            if unit == "bytes":
                return Text(f"{speed / 1e6:.1f} MB/s")
            for div, pre in ((1e6, " M"), (1e3, " k"), (1, "")):
                if speed >= div or div == 1:
                    return Text(f"{speed / div:.1f}{pre} {unit}/s")
    return RateColumn()


class Progress:
    """``with Progress(enabled) as p: ... p.batch(path, info, batch)``.

    ``enabled``: draw the bar (None: when stderr is a terminal). ``quiet``: no notes
    either (``-q``)."""

    def __init__(self, enabled: bool | None = None, *, quiet: bool | None = None,
                 compile_note: bool = True):
        self.compile_note = compile_note
        if quiet is None:
            quiet = enabled is False
        if enabled is None:
            enabled = sys.stderr.isatty() and not quiet
        self.enabled = enabled
        self.quiet = quiet
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._records: dict[str, int] = {}
        self._notes: set[str] = set()
        self._listener = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, Progress as Bar, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[detail]}"), _rate_column(),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
            self._bar.__enter__()
        if not self.quiet and self.compile_note:
            self._watch_compiles()
        return self

    def __exit__(self, *exc) -> None:
        if self._listener is not None:
            from numba.core import event
            event.unregister("numba:compile", self._listener)
            self._listener = None
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def note(self, text: str, *, once: bool = True) -> None:
        """One line on stderr (above the bar when it is drawn); nothing when quiet."""
        if self.quiet or (once and text in self._notes):
            return
        self._notes.add(text)
        if self._bar is not None:
            self._bar.console.print(f"gropcap: {text}", markup=False, highlight=False)
        else:
            print(f"gropcap: {text}", file=sys.stderr, flush=True)

    def _watch_compiles(self) -> None:
        """:data:`COMPILE_NOTE` when numba starts compiling a kernel: its
        ``numba:compile`` event fires on a cache miss only (``Dispatcher.compile``), so a
        warm cache prints nothing."""
        if "numba" not in sys.modules and not _numba_importable():
            return
        from numba.core import event

        progress = self

        class _Listener(event.Listener):
            def on_start(self, ev):
                progress.note(COMPILE_NOTE)

            def on_end(self, ev):
                pass

        self._listener = _Listener()
        event.register("numba:compile", self._listener)

    def start_phase(self, label: str, total: int | None, unit: str):
        """Open a phase line; returns its task id (None when nothing is drawn)."""
        if self._bar is None:
            return None
        return self._bar.add_task(label, total=total, detail="", unit=unit)

    def advance(self, task, n: int, total: int | None = None) -> None:
        if task is None or self._bar is None:
            return
        self._bar.advance(task, n)
        t = self._bar.tasks[task]
        unit = t.fields.get("unit", "")
        done = int(t.completed)
        if unit == "bytes":
            self._bar.update(task, detail=f"{done / 1e6:.1f}/{(t.total or 0) / 1e6:.1f} MB")
            return
        self._bar.update(task, detail=f"{done}/{t.total:.0f} {unit}" if t.total
                         else f"{done} {unit}")

    def end_phase(self, task) -> None:
        if task is None or self._bar is None:
            return
        t = self._bar.tasks[task]
        self._bar.update(task, completed=t.total if t.total else t.completed,
                         total=t.total or t.completed or 1,
                         detail=f"done, {int(t.completed)} {t.fields.get('unit', '')}")

    def batch(self, path: str, info, batch) -> None:
        """Account for one batch of records read from ``path``."""
        if self._bar is None:
            return
        n = self._records.get(path, 0) + len(batch)
        self._records[path] = n
        compressed = bool(getattr(info, "compression", ""))
        if path not in self._tasks:
            total = None if compressed else os.path.getsize(path)
            self._tasks[path] = self._bar.add_task(f"decode {os.path.basename(path)}",
                                                   total=total, records=0, detail="",
                                                   unit="bytes" if total else "records")
        done = n
        if not compressed and len(batch):
            done = int(batch.file_offset[-1]) + 16 + int(batch.cap_len[-1])
        task = self._tasks[path]
        if compressed or len(batch):
            self._bar.update(task, completed=done, records=n)
        t = self._bar.tasks[task]
        size = f"{t.completed / 1e6:.1f}/{t.total / 1e6:.1f} MB, " if t.total else ""
        self._bar.update(task, detail=f"{size}{n} records")

    def restart_files(self) -> None:
        """The files are read again from their start (a bounded-memory run that starts
        over unfused, ``run.stream.stream_analyze``): their lines count from 0 again."""
        self._records.clear()

    def track(self, label: str, futures: list, *, total: int | None = None,
              unit: str = "tasks"):
        """Count finished tasks among ``futures`` (Dask futures) on a line of its own;
        safe to call from the client while the futures run. ``total`` and ``unit``
        (e.g. the packets of a stage whose tasks are submitted as it goes): a line
        that :meth:`follow` adds futures to, each worth its packets (the line's rate is
        then packets/s). Returns the line's task id (None when nothing is drawn)."""
        if self._bar is None or (not futures and total is None):
            return None
        total = len(futures) if total is None else total
        task = self._bar.add_task(label, total=total, detail=f"0/{total} {unit}",
                                  unit=unit)
        for f in futures:
            self.follow(task, f)
        return task

    def track_shares(self, label: str, futures: list, total: int, unit: str):
        """:meth:`track` for tasks that share ``total`` (e.g. the input bytes every
        fused task decodes) about evenly: the line's rate is then ``unit``/s."""
        task = self.track(label, [], total=total, unit=unit)
        n = len(futures)
        for i, f in enumerate(futures):
            self.follow(task, f, total // n + (i < total % n))
        return task

    def follow(self, task, future, weight: int = 1) -> None:
        """Advance line ``task`` (:meth:`track`) by ``weight`` when ``future`` is done."""
        if task is None or self._bar is None:
            return
        future.add_done_callback(lambda _fut: self.advance(task, weight))


def _numba_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("numba") is not None


class phase:
    """One line of the bar for a phase of the run, counted in ``unit``; ``progress`` may be
    None. ``with phase(progress, "GRO napi", n) as advance: ... advance(k)``, or
    ``ph = phase(...); ph.advance(k); ...; ph.end()`` across a loop."""

    def __init__(self, progress, label: str, total: int | None = None,
                 unit: str = "packets"):
        self.progress = progress
        self.task = progress.start_phase(label, total, unit) if progress is not None \
            else None

    def advance(self, n: int) -> None:
        if self.task is not None:
            self.progress.advance(self.task, n)

    def end(self) -> None:
        if self.task is not None:
            self.progress.end_phase(self.task)
            self.task = None

    def __enter__(self):
        return self.advance

    def __exit__(self, *exc) -> None:
        self.end()
