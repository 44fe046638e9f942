"""Byte sources for capture files: memory-mapped plain files or stream-decompressed ones.

Layer: the bottom of the capture layer. Hands raw capture bytes (a window the record
scanners parse) to ``pcap.py`` / ``pcapng.py``; knows nothing about records.

Compression is detected from the file's first bytes, never from its name:
gzip ``1f 8b`` (RFC 1952 2.3.1), zstd ``28 b5 2f fd`` (RFC 8878 3.1.1), xz
``fd 37 7a 58 5a 00`` (xz file format 2.1.1.1), bzip2 ``42 5a 68 '1'..'9'``.
The digest (``capture.fingerprint``) is always of the file as stored (compressed bytes when
compressed).
"""

from __future__ import annotations

import bz2
import lzma
import mmap
import os
import stat
import zlib

import zstandard

import gropcap.capture.fingerprint as fingerprint
from gropcap.errors import CaptureError

COMPRESSION_MAGICS = (
    (b"\x1f\x8b", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\xfd7zXZ\x00", "xz"),
)
CHUNK = 1 << 20     # decompressed bytes requested per read


def sniff_compression(head: bytes) -> str:
    """Compression format from a file's first bytes: "gzip", "zstd", "xz", "bzip2" or "".

    >>> sniff_compression(b"\\x1f\\x8b\\x08\\x00")
    'gzip'
    """
    head = bytes(head[:6])
    for magic, name in COMPRESSION_MAGICS:
        if head.startswith(magic):
            return name
    # "BZh" + block size digit; the digit keeps plain text starting "BZh" out.
    if len(head) >= 4 and head[:3] == b"BZh" and 0x31 <= head[3] <= 0x39:
        return "bzip2"
    return ""


class _HashingReader:
    """A raw file object that hashes every byte read from it (the stored bytes)."""

    def __init__(self, fh):
        self._fh = fh
        self.hash = fingerprint.new()

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.hash.update(data)
        return data

    def readinto(self, b) -> int:
        n = self._fh.readinto(b)
        if n:
            self.hash.update(memoryview(b)[:n])
        return n

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        """Hash whatever the decompressor left unread (trailing garbage, or early stop)."""
        while self.read(CHUNK):
            pass

    def close(self) -> None:
        self._fh.close()


class _Prepend:
    """A file object that first returns ``head`` (bytes already read), then ``fh``."""

    def __init__(self, head: bytes, fh):
        self._head = head
        self._fh = fh

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0:
                data, self._head = self._head + self._fh.read(), b""
                return data
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._fh.read(n)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._fh.close()


class Source:
    """The bytes of one capture file.

    ``mapped`` sources expose the whole file at once (``window`` is an mmap, ``eof`` is
    true from the start). Streamed sources start with an empty ``bytearray`` window and grow
    it with :meth:`read`. ``warnings`` collects problems that still leave usable data
    (a truncated compressed stream).
    """

    def __init__(self, path: str):
        self.path = path
        self.compression = ""
        self.mapped = False
        self.window = b""
        self.eof = False
        self.warnings: list[str] = []
        self._digest = ""
        self._raw: _HashingReader | None = None
        self._stream = None
        self._fh = None
        self._decompressed = 0

    @classmethod
    def open(cls, path: str) -> "Source":
        """Open ``path``: mmap it if plain, otherwise set up stream decompression."""
        src = cls(path)
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise CaptureError(f"cannot open capture: {exc.strerror or exc}", path=path,
                               hint="check the path and its permissions") from None
        try:
            regular = stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
            head = fh.read(8)
            if regular:
                fh.seek(0)
        except OSError as exc:
            fh.close()
            raise CaptureError(f"cannot read capture: {exc.strerror or exc}", path=path,
                               hint="is it a directory or a device?") from None
        src.compression = sniff_compression(head)
        # Pipes and other special files cannot seek back: replay the sniffed bytes.
        raw = fh if regular else _Prepend(head, fh)
        if src.compression:
            src._raw = _HashingReader(raw)
            src._stream = _Decompressor(src.compression, src._raw)
            src.window = bytearray()
            return src
        src._fh = fh
        try:
            if not regular:
                raise ValueError("not a regular file")
            size = os.fstat(fh.fileno()).st_size
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except (OSError, ValueError):
            # Not mappable (a pipe or special file): read it as a stream instead.
            src._raw = _HashingReader(raw)
            src._stream = src._raw
            src.window = bytearray()
            return src
        fh.close()          # the map keeps its own reference to the file
        src._fh = None
        src.mapped = True
        src.window = mm
        src.eof = True
        src._digest = fingerprint.of_bytes(mm)
        return src

    def read(self) -> bool:
        """Append the next decompressed chunk to ``window``; False (and ``eof``) at the end."""
        if self.eof:
            return False
        try:
            chunk = self._stream.read(CHUNK)
        except (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError,
                ValueError) as exc:
            raise CaptureError(f"corrupt {self.compression} data: {exc}", path=self.path,
                               offset=self._decompressed,
                               hint="the compressed file is damaged; re-copy or "
                                    "recompress it") from None
        if not chunk:
            self.eof = True
            dec = self._stream
            if getattr(dec, "truncated", False):
                # Compressed stream cut short: keep what was decompressed, like a cut capture.
                self.warnings.append(
                    f"{self.compression} stream ends early after {self._decompressed} "
                    "decompressed bytes (file still being written or copied?)")
            if getattr(dec, "trailing", 0):
                self.warnings.append(
                    f"{dec.trailing} bytes after the end of the {self.compression} data "
                    "were ignored")
            return False
        self._decompressed += len(chunk)
        self.window += chunk
        return True

    def discard(self, n: int) -> None:
        """Forget the first ``n`` bytes of a streamed window (they are in yielded batches)."""
        if not self.mapped and n:
            del self.window[:n]

    @property
    def digest(self) -> str:
        """The stored file's digest (``fingerprint``); complete once the source is
        closed."""
        return self._digest

    def close(self, drain: bool = True) -> None:
        """Finish hashing (unless ``drain`` is false) and release file handles.

        An mmap is left to the numpy views that use it.
        """
        if self._raw is not None:
            if drain:
                try:
                    self._raw.drain()
                except OSError:
                    pass
            self._digest = fingerprint.label(self._raw.hash)
            self._raw.close()
            self._raw = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None


RAW_CHUNK = 1 << 16     # compressed bytes fed to the decompressor at a time
MIN_FEED = 64           # smallest zstd input piece: RLE blocks give ~128 KiB per 4 bytes


class _Decompressor:
    """Incremental decompression of one stored file, member after member.

    Unlike ``gzip.GzipFile`` and friends it keeps everything decompressed before a cut,
    tells a cut (``truncated``) from a clean end, and stops at trailing non-compressed
    bytes (``trailing``) instead of failing. Gzip members, bzip2 / xz streams and zstd
    frames that follow one another are read as one stream, as their tools do.
    """

    def __init__(self, kind: str, raw: _HashingReader):
        self.kind = kind
        self.raw = raw
        self.pending = b""          # compressed bytes not yet given to the decompressor
        self.ppos = 0               # ... starting at this index
        # zstd has no output limit per call: feed it less input when it expands a lot, so
        # one call returns about CHUNK bytes. Start small (RLE blocks expand 32768-fold)
        # and at most double per call, so a jump in ratio costs a bounded burst.
        self.feed = MIN_FEED if kind == "zstd" else RAW_CHUNK
        self.truncated = False
        self.trailing = 0
        self.done = False
        self.d = self._new()

    def _new(self):
        if self.kind == "gzip":
            return zlib.decompressobj(wbits=31)         # gzip wrapper only
        if self.kind == "bzip2":
            return bz2.BZ2Decompressor()
        if self.kind == "xz":
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        if self.kind == "zstd":
            return zstandard.ZstdDecompressor().decompressobj()
        raise ValueError(self.kind)

    def _input(self) -> bytes:
        if self.ppos >= len(self.pending):
            self.pending, self.ppos = self.raw.read(RAW_CHUNK), 0
        data = self.pending[self.ppos:self.ppos + self.feed]
        self.ppos += len(data)
        return data

    def _needs_input(self) -> bool:
        if self.kind == "gzip":
            return not self.d.unconsumed_tail
        if self.kind == "zstd":
            return True
        return self.d.needs_input

    def read(self, n: int) -> bytes:
        """Up to about ``n`` decompressed bytes; b"" at the end (clean, cut or trailing)."""
        while not self.done:
            data = b""
            if self._needs_input():
                data = self._input()
                if not data:
                    # End of the stored file inside a member: a cut, unless nothing of
                    # this member was started (clean end after the previous one).
                    self.truncated = self._started
                    self.done = True
                    return b""
                self._started = True
            if self.kind == "gzip":
                out = self.d.decompress(data or self.d.unconsumed_tail, n)
            elif self.kind == "zstd":
                out = self.d.decompress(data)
                ratio = len(out) // max(len(data), 1)
                self.feed = max(MIN_FEED, min(RAW_CHUNK, 2 * self.feed,
                                              CHUNK // max(ratio, 1)))
            else:
                out = self.d.decompress(data, n)
            if self.d.eof:
                self._next_member()
            if out:
                return out
        return b""

    _started = False

    def _next_member(self) -> None:
        rest = self.d.unused_data + self.pending[self.ppos:]
        self.pending, self.ppos = b"", 0
        while len(rest) < 6:
            more = self.raw.read(RAW_CHUNK)
            if not more:
                break
            rest += more
        if not rest:
            self.done = True
            return
        if sniff_compression(rest) != self.kind:
            # Trailing bytes (padding, garbage) after the last member: stop here.
            self.trailing = len(rest)
            self.done = True
            return
        self.pending, self.ppos = rest, 0
        self.d = self._new()
        self._started = False


def peek_decompressed(path: str, n: int = 8) -> bytes:
    """The first ``n`` bytes of ``path`` after decompression ("" if unreadable)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            kind = sniff_compression(head)
            if not kind:
                return head[:n]
            fh.seek(0)
            return _Decompressor(kind, _HashingReader(fh)).read(n)[:n]
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, ValueError):
        return b""
