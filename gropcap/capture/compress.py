"""Byte sources for capture files: memory-mapped plain files or stream-decompressed ones.

Layer: the bottom of the capture layer. Hands raw capture bytes (a window the record
scanners parse) to ``pcap.py`` / ``pcapng.py``; knows nothing about records.

Compression is detected from the file's first bytes, never from its name:
gzip ``1f 8b`` (RFC 1952 2.3.1), zstd ``28 b5 2f fd`` (RFC 8878 3.1.1), xz
``fd 37 7a 58 5a 00`` (xz file format 2.1.1.1), bzip2 ``42 5a 68 '1'..'9'``.
The sha256 is always of the file as stored (compressed bytes when compressed).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import mmap
import os

import zstandard

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
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.sha.update(data)
        return data

    def readinto(self, b) -> int:
        n = self._fh.readinto(b)
        if n:
            self.sha.update(memoryview(b)[:n])
        return n

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        """Hash whatever the decompressor left unread (trailing garbage, or early stop)."""
        while self.read(CHUNK):
            pass

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
        self._sha_hex = ""
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
            head = fh.read(8)
            fh.seek(0)
        except OSError as exc:
            fh.close()
            raise CaptureError(f"cannot read capture: {exc.strerror or exc}", path=path,
                               hint="is it a directory or a device?") from None
        src.compression = sniff_compression(head)
        if src.compression:
            src._raw = _HashingReader(fh)
            src._stream = _decompressor(src.compression, src._raw)
            src.window = bytearray()
            return src
        src._fh = fh
        try:
            size = os.fstat(fh.fileno()).st_size
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except (OSError, ValueError):
            # Not mappable (a pipe or special file): read it as a stream instead.
            src._raw = _HashingReader(fh)
            src._stream = src._raw
            src.window = bytearray()
            return src
        fh.close()          # the map keeps its own reference to the file
        src._fh = None
        src.mapped = True
        src.window = mm
        src.eof = True
        src._sha_hex = hashlib.sha256(mm).hexdigest()
        return src

    def read(self) -> bool:
        """Append the next decompressed chunk to ``window``; False (and ``eof``) at the end."""
        if self.eof:
            return False
        try:
            chunk = self._stream.read(CHUNK)
        except EOFError:
            # Compressed stream cut short: keep what was decompressed, like a cut capture.
            self.warnings.append(
                f"{self.compression} stream ends early after {self._decompressed} "
                "decompressed bytes (file still being written or copied?)")
            chunk = b""
        except (OSError, lzma.LZMAError, zstandard.ZstdError, ValueError) as exc:
            raise CaptureError(f"corrupt {self.compression} data: {exc}", path=self.path,
                               offset=self._decompressed,
                               hint="the compressed file is damaged; re-copy or "
                                    "recompress it") from None
        if not chunk:
            self.eof = True
            return False
        self._decompressed += len(chunk)
        self.window += chunk
        return True

    def discard(self, n: int) -> None:
        """Forget the first ``n`` bytes of a streamed window (they are in yielded batches)."""
        if not self.mapped and n:
            del self.window[:n]

    @property
    def sha256(self) -> str:
        """Hex sha256 of the stored file; complete once the source is closed."""
        return self._sha_hex

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
            self._sha_hex = self._raw.sha.hexdigest()
            self._raw.close()
            self._raw = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _decompressor(kind: str, raw):
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "zstd":
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True,
                                                          closefd=False)
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb")
    if kind == "bzip2":
        return bz2.BZ2File(raw, "rb")
    raise ValueError(kind)


def peek_decompressed(path: str, n: int = 8) -> bytes:
    """The first ``n`` bytes of ``path`` after decompression ("" if unreadable)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            kind = sniff_compression(head)
            if not kind:
                return head[:n]
            fh.seek(0)
            return _decompressor(kind, fh).read(n)
    except (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError, ValueError):
        return b""
