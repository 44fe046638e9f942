"""A progress bar for long runs: rich on a terminal (stderr), nothing otherwise.

The pipeline calls :meth:`Progress.batch` once per decoded batch; the bar shows how far
into each input file the reader is (stored bytes for plain files, records for compressed
ones whose decompressed size is unknown).
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
            from rich.progress import (BarColumn, DownloadColumn, Progress as Bar,
                                       TextColumn, TimeRemainingColumn)
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TextColumn("{task.fields[records]} records"),
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
                                                   records=0)
        done = None
        if not compressed and len(batch):
            done = int(batch.file_offset[-1]) + 16 + int(batch.cap_len[-1])
        self._bar.update(self._tasks[path], completed=done, records=n)
