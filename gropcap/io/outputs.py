"""Output targets of one command: checked before any packet is read, renamed into place
together at the end, removed when the run fails or is interrupted.

``with Outputs(force=...) as out:`` then :meth:`Outputs.directory` (``--out DIR`` and the
file names it will hold) and :meth:`Outputs.file` (``--plot``, ``decode -o``, ``baseline
save -o``) check each target at once and create its staging entry beside it: a hidden
directory (``DIR/.gropcap-XXXX`` when DIR exists, else ``PARENT/.DIR.gropcap-XXXX``) or a
hidden file with the same extension in the target's directory. Creating it is the
writability check (permissions, read-only file systems, a parent that is a file or does
not exist), so a run that could not write its results fails before it starts, with one
line naming the target. The command writes into the staging paths;
:meth:`Outputs.commit` renames them over their targets with interrupts deferred
(``gropcap.interrupt.deferred``). Leaving the block without a commit (an error, Ctrl-C)
removes every staging entry, so no empty ``--out`` directory or half-written file stays.

Rules: a missing ``--out`` directory is created (its parent must exist); every other
target's directory must exist; an existing target is replaced only with ``force``; a
directory target that exists must be a directory, a file target must not be one. In
an ``--out`` directory, every name of the command's set is replaced together: a name
the run did not write (``packets.parquet`` of a one-process run when ``--jobs`` wrote the
``packets/`` dataset, or the reverse) is removed, so no stale output is read as new.

Layer: io/, below run/ and cli/; knows paths only.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

from gropcap.errors import OutputError   # not io.parquet: no pyarrow.parquet at start
from gropcap.interrupt import deferred

_PREFIX = ".gropcap-"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _os_error(path: str, e: OSError) -> OutputError:
    parent = os.path.dirname(os.path.abspath(path))
    if e.errno == errno.ENOENT and os.path.isdir(parent):
        return OutputError(f"cannot write: {parent} does not accept new files", path=path,
                           hint="choose a directory you can write to")
    if e.errno == errno.ENOENT:
        return OutputError(f"cannot write: directory {parent} does not exist", path=path,
                           hint="create it first or choose another path")
    if e.errno == errno.ENOTDIR:
        return OutputError(f"cannot write: {parent} is not a directory", path=path,
                           hint="choose another path")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write: {e.strerror} in {parent}", path=path,
                           hint="choose a directory you can write to")
    return OutputError(f"cannot write: {e.strerror or e}", path=path,
                       hint="check free space and permissions")


class Outputs:
    """Staged output targets; see the module docstring."""

    def __init__(self, *, force: bool = False):
        self.force = force
        # (staging path, target path, kind) with kind "dir-new", "dir-into" or "file"
        self._staged: list[tuple[str, str, str, tuple[str, ...]]] = []
        self._targets: dict[str, str] = {}     # staging path -> target, kept after discard
        self.written: list[str] = []

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def directory(self, path: str, names) -> str:
        """Check ``path`` as a directory that will hold ``names``; returns the staging
        directory to write them into."""
        path = os.fspath(path)
        names = tuple(names)
        if os.path.exists(path):
            if not os.path.isdir(path):
                raise OutputError("exists and is not a directory", path=path,
                                  hint="give a directory for --out")
            if not self.force:
                for n in names:
                    if os.path.lexists(os.path.join(path, n)):
                        raise OutputError("output exists", path=os.path.join(path, n),
                                          hint="use --force to replace it")
            with deferred():     # an interrupt cannot fall between creating and noting it
                try:
                    stage = tempfile.mkdtemp(prefix=_PREFIX, dir=path)
                except OSError as e:
                    raise _os_error(os.path.join(path, names[0] if names else "x"),
                                    e) from None
                self._note(stage, path, "dir-into", names)
            return stage
        parent = os.path.dirname(os.path.abspath(path))
        with deferred():
            try:
                stage = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(path))}"
                                                f"{_PREFIX}", dir=parent)
            except OSError as e:
                raise _os_error(path, e) from None
            self._note(stage, path, "dir-new", names)
            os.chmod(stage, 0o777 & ~_umask())   # it becomes DIR: mkdir's mode, not 0700
        return stage

    def file(self, path: str) -> str:
        """Check ``path`` as a file target; returns the staging file to write (same
        extension, same directory, created empty)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            raise OutputError("is a directory", path=path, hint="give a file name")
        if os.path.lexists(path) and not self.force:
            raise OutputError("output exists", path=path, hint="use --force to replace it")
        parent = os.path.dirname(os.path.abspath(path))
        base = os.path.basename(path)
        with deferred():
            try:
                fd, stage = tempfile.mkstemp(prefix=_PREFIX, suffix=f"-{base}", dir=parent)
            except OSError as e:
                raise _os_error(path, e) from None
            self._note(stage, path, "file", ())
            os.close(fd)
            os.chmod(stage, 0o666 & ~_umask())   # it becomes the target: open()'s mode
        return stage

    def _note(self, stage: str, target: str, kind: str, names: tuple[str, ...]) -> None:
        self._staged.append((stage, target, kind, names))
        self._targets[stage] = target

    def real_path(self, path):
        """The target a staging path stands for (errors name what the user asked for):
        a staged file -> its target, ``STAGE/.../name`` -> ``DIR/name``."""
        if path is None:
            return path
        p = os.fspath(path)
        for stage, target in self._targets.items():
            if p == stage:
                return target
            if p.startswith(stage + os.sep):
                return os.path.join(target, os.path.basename(p))
        return path

    def commit(self) -> list[str]:
        """Rename every staged output over its target (interrupts wait); returns the
        targets written (directories as ``DIR/name``)."""
        with deferred():
            for stage, target, kind, names in self._staged:
                if kind == "file":
                    os.replace(stage, target)
                    self.written.append(target)
                    continue
                if kind == "dir-new" and not os.path.exists(target):
                    os.rename(stage, target)
                else:   # the directory exists (or appeared meanwhile): file by file
                    for n in names:
                        new, old = os.path.join(stage, n), os.path.join(target, n)
                        if os.path.isdir(old) and not os.path.islink(old):
                            shutil.rmtree(old)       # a dataset directory (--jobs)
                        if os.path.exists(new):
                            os.replace(new, old)
                        elif os.path.lexists(old):
                            # the run replaced it with another layout (packets.parquet
                            # <-> packets/): a stale name would be read as this run's
                            os.unlink(old)
                    shutil.rmtree(stage, ignore_errors=True)
                self.written.extend(os.path.join(target, n) for n in names
                                    if os.path.exists(os.path.join(target, n)))
            self._staged = []
        return self.written

    def discard(self) -> None:
        """Remove every staging entry not committed (an interrupt waits: it would leave
        the rest behind)."""
        with deferred():
            for stage, _target, kind, _names in self._staged:
                if kind == "file":
                    try:
                        os.unlink(stage)
                    except OSError:
                        pass
                else:
                    shutil.rmtree(stage, ignore_errors=True)
            self._staged = []


__all__ = ["Outputs", "OutputError"]
