"""One exception tree for gropcap. Every user-facing error carries its location.

The CLI turns any :class:`GropcapError` into one line on stderr and exit status 1
(``gropcap baseline`` maps :class:`BaselineError` to its own exit code). The whole tree::

    GropcapError                  path, byte offset, record, hint -> one line
    +-- CaptureError              the capture file is malformed
    |   +-- CaptureTruncatedError     it ends inside a header or record
    +-- DecodeError               a decoder asked for what it cannot do
    +-- ConfigError               an option or configuration value is invalid
    +-- OutputError               an output target cannot be written
    +-- LoadError                 a directory is not a complete gropcap analysis
    +-- BaselineError             a baseline file is missing, unreadable or unknown
    +-- ReplayEnvironmentError    this machine cannot run a live-kernel replay

Not in the tree: Ctrl-C (``KeyboardInterrupt``, exit 130 in ``interrupt.py``) and bugs.
"""

from __future__ import annotations


class GropcapError(Exception):
    """Base of every error gropcap raises on purpose."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 record: int | None = None, hint: str | None = None):
        self.message = message
        self.path = path
        self.offset = offset
        self.record = record
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``path: offset N (record M): message; hint`` with the parts that are known."""
        where = []
        if self.path is not None:
            where.append(str(self.path))
        loc = []
        if self.offset is not None:
            loc.append(f"byte offset {self.offset}")
        if self.record is not None:
            loc.append(f"record {self.record}")
        text = ": ".join(where + ([", ".join(loc)] if loc else []) + [self.message])
        if self.hint:
            text += f"; {self.hint}"
        return text


class CaptureError(GropcapError):
    """The capture file itself is malformed (bad magic, corrupt block, absurd length)."""


class CaptureTruncatedError(CaptureError):
    """The capture file ends in the middle of a header or record."""


class DecodeError(GropcapError):
    """A decoder was asked for something it cannot do (not raised for bad packets)."""


class ConfigError(GropcapError):
    """Invalid configuration or option values."""


class OutputError(GropcapError):
    """An output file could not be written."""


class LoadError(GropcapError):
    """A directory does not hold a complete, readable gropcap analysis."""


class BaselineError(GropcapError):
    """A baseline file is missing, unreadable or of an unknown format."""


class ReplayEnvironmentError(GropcapError):
    """This machine cannot run the replay at all (no root, a missing kernel feature): no
    file can be replayed, so a multi-file run stops instead of skipping file by file."""
