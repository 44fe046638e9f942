"""The identity of a capture file: a digest of its bytes as stored (the compressed bytes
of a compressed file), written ``"<algorithm>:<hex>"``.

What it is for: telling whether a result, a baseline or a saved analysis was made from
these very bytes (``report.baseline``, ``report.compare``, ``io.load``). That needs no
resistance to a deliberate collision, only a negligible chance of an accidental one, so
the algorithm is XXH3-128 (``xxhash``): about 8 GB/s on one core, where the sha256 the
first releases used runs at 1.2 GB/s even with SHA-NI. On a capture cut at 128 bytes
that was 116 ns of CPU a packet, more than half of the 200 ns that 5 M packets/s allows
(``docs/performance.md``); XXH3-128 takes 16 ns.

Results of earlier releases carry a bare 64-digit sha256 (``sha256`` fields):
:func:`legacy` names it, and :func:`matches` hashes a file again with whatever
algorithm a stored digest names, so old baselines and saved analyses still check.

Layer: capture (stdlib and xxhash only).
"""

from __future__ import annotations

import hashlib

import xxhash

ALGORITHM = "xxh3-128"
ALGORITHMS = ("xxh3-128", "sha256")
_CHUNK = 8 << 20


def new(algorithm: str = ALGORITHM):
    """A fresh incremental hasher (``update(buffer)``, ``hexdigest()``)."""
    if algorithm == "xxh3-128":
        return xxhash.xxh3_128()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown digest algorithm {algorithm!r} (known: {ALGORITHMS})")


def label(hasher, algorithm: str = ALGORITHM) -> str:
    """``"<algorithm>:<hex>"`` of a hasher made by :func:`new`."""
    return f"{algorithm}:{hasher.hexdigest()}"


def of_bytes(data, algorithm: str = ALGORITHM) -> str:
    """The digest of ``data`` (any buffer)."""
    h = new(algorithm)
    h.update(data)
    return label(h, algorithm)


def of_file(path: str, algorithm: str = ALGORITHM) -> str:
    """The digest of the file at ``path`` as stored, read in 8 MiB chunks."""
    h = new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return label(h, algorithm)


def legacy(sha256_hex: str) -> str:
    """The digest of an earlier release's ``sha256`` field ("" stays "")."""
    return f"sha256:{sha256_hex}" if sha256_hex else ""


def algorithm_of(digest: str) -> str:
    """The algorithm a digest names ("" for an empty one)."""
    return digest.partition(":")[0] if digest else ""


def short(digest: str, digits: int = 12) -> str:
    """``"xxh3-128:0123456789ab..."``, for messages."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:digits]}..."


def matches(stored: str, now: str, path: str | None) -> bool | None:
    """Whether a stored digest and the digest of the file read now (``now``, of ``path``)
    name the same bytes. Same algorithm: compared. Different ones (a result of an earlier
    release): ``path`` is hashed again with the stored one's algorithm, when it is there;
    None when that cannot be decided (no file, an empty or unknown digest)."""
    if not stored or not now:
        return None
    if algorithm_of(stored) == algorithm_of(now):
        return stored == now
    if algorithm_of(stored) not in ALGORITHMS or not path:
        return None
    try:
        return of_file(path, algorithm_of(stored)) == stored
    except OSError:
        return None


__all__ = ["ALGORITHM", "ALGORITHMS", "new", "label", "of_bytes", "of_file", "legacy",
           "algorithm_of", "short", "matches"]
