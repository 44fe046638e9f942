"""Byte digests and Internet checksums shared by the decoders (decode layer helpers).

Both decoders (reference and fast) must produce the same values, so the functions here are
defined exactly and kept tiny.
"""

from __future__ import annotations

import struct

FNV64_OFFSET_BASIS = 0xCBF29CE484222325   # FNV-1a 64-bit (IETF draft-eastlake-fnv, section 5)
FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a over ``data``, byte by byte.

    ``h = 0xcbf29ce484222325; for b in data: h = ((h ^ b) * 0x100000001b3) mod 2**64``.
    Note that the digest of ``b""`` is the offset basis; the packet table stores 0 for an
    absent or empty byte range instead (see :func:`digest_or_zero`).

    >>> hex(fnv1a64(b"a"))
    '0xaf63dc4c8601ec8c'
    """
    h = FNV64_OFFSET_BASIS
    for b in data:
        h = ((h ^ b) * FNV64_PRIME) & _MASK64
    return h


def digest_or_zero(data: bytes) -> int:
    """The ``*_digest`` column rule: 0 for an empty range, else :func:`fnv1a64`."""
    return fnv1a64(data) if data else 0


def ones_sum(data: bytes, start: int = 0) -> int:
    """Unfolded one's-complement sum of big-endian 16-bit words (RFC 1071).

    An odd trailing byte is padded with a zero byte, as the checksum definition requires.
    ``start`` is added first (to chain a pseudo-header sum).
    """
    if len(data) & 1:
        data = bytes(data) + b"\x00"
    n = len(data) // 2
    return start + sum(struct.unpack(f"!{n}H", data))


def fold16(s: int) -> int:
    """Fold a one's-complement sum to 16 bits (end-around carry), not complemented."""
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def inet_checksum(data: bytes, start: int = 0) -> int:
    """The Internet checksum field value for ``data``: ``~fold16(sum) & 0xffff``."""
    return (~fold16(ones_sum(data, start))) & 0xFFFF
