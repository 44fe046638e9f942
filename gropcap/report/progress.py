"""A progress bar for long runs: rich on a terminal (stderr), nothing otherwise.

The pipeline calls :meth:`Progress.batch` once per decoded batch; the bar shows how far
into each input file the reader is (stored bytes for plain files, records for compressed
ones whose decompressed size is unknown). The Dask runner calls :meth:`Progress.track`
with each stage's task futures: one line per stage counts finished tasks.
"""

from __future__ import annotations

import os
import sys


class Progress:
    """``with Progress(enabled) as p: ... p.batch(path, info, batch)``."""

    def __init__(self, enabled: bool | None = None):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.enabled = enabled
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._records: dict[str, int] = {}

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, Progress as Bar, TextColumn,
                                       TimeRemainingColumn)
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[detail]}"),
                            TimeRemainingColumn(), console=Console(stderr=True),
                            transient=True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def batch(self, path: str, info, batch) -> None:
        """Account for one batch of records read from ``path``."""
        if self._bar is None:
            return
        n = self._records.get(path, 0) + len(batch)
        self._records[path] = n
        compressed = bool(getattr(info, "compression", ""))
        if path not in self._tasks:
            total = None if compressed else os.path.getsize(path)
            self._tasks[path] = self._bar.add_task(os.path.basename(path), total=total,
                                                   records=0, detail="")
        done = None
        if not compressed and len(batch):
            done = int(batch.file_offset[-1]) + 16 + int(batch.cap_len[-1])
        task = self._tasks[path]
        self._bar.update(task, completed=done, records=n)
        t = self._bar.tasks[task]
        size = f"{t.completed / 1e6:.1f}/{t.total / 1e6:.1f} MB, " if t.total else ""
        self._bar.update(task, detail=f"{size}{n} records")

    def track(self, label: str, futures: list) -> None:
        """Count finished tasks among ``futures`` (Dask futures) on a line of its own;
        safe to call from the client while the futures run."""
        if self._bar is None or not futures:
            return
        total = len(futures)
        task = self._bar.add_task(label, total=total, detail=f"0/{total} tasks")
        bar = self._bar

        def done(_fut):
            bar.advance(task)
            t = bar.tasks[task]
            bar.update(task, detail=f"{int(t.completed)}/{total} tasks")
        for f in futures:
            f.add_done_callback(done)
