"""How a capture sits in the page cache, which decides what mapping it costs.

Linux 6.16 and later keep an ext4 file's page cache in large folios when they read it
from disk (readahead), and a 2 MiB folio is mapped by one page-table entry (a PMD) where
a 4 KiB one needs one a page. A capture that tcpdump has just written sits in the cache
as its writes made it: folios of 4-8 KiB. Mapping the real 422 MB capture then costs
about 0.05 s of system time (``MADV_POPULATE_READ``, 103 000 pages), read back from disk
about 0.004 s. That is 15% of the decode target's CPU time, so every benchmark that maps
a capture records the share of it that maps in 2 MiB pieces, and can put it in the state
of a file read from disk first (``settle(path, "reread")``).

    python benchmarks/page_cache.py CAPTURE            # the share, as the cache holds it
    python benchmarks/page_cache.py CAPTURE --reread   # drop the file's pages, read it once
"""

from __future__ import annotations

import argparse
import mmap
import os
import subprocess
import sys

_PMD_BYTES = 2 << 20
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
MODES = ("as-is", "reread")


def _file_pmd_mappings() -> int | None:
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                key, value = line.split()
                if key == "thp_file_mapped":
                    return int(value)
    except OSError:
        pass
    return None


def pmd_share(path: str) -> float | None:
    """The share (0..1) of ``path``'s bytes that a read-only mapping maps in 2 MiB pieces
    (``thp_file_mapped`` counted while one mapping of the whole file is populated), or
    None where the kernel does not tell (no ``/proc/vmstat`` counter, no populate advice).
    Reads the whole file into the page cache if it was not there.

    Measured in a child process: the mapping would raise this process's peak RSS, and a
    child started later inherits that peak in its ``ru_maxrss`` (Linux keeps the larger
    of the two across fork and exec), which the benchmarks report."""
    got = subprocess.run([sys.executable, os.path.abspath(__file__), path, "--share"],
                         capture_output=True, text=True)
    text = got.stdout.strip()
    return float(text) if got.returncode == 0 and text not in ("", "None") else None


def _pmd_share_here(path: str) -> float | None:
    size = os.path.getsize(path)
    before = _file_pmd_mappings()
    if before is None or size == 0:
        return None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            mm.madvise(_POPULATE_READ)
        except (OSError, ValueError):
            return None
        after = _file_pmd_mappings()
    return min(1.0, (after - before) * _PMD_BYTES / size)


def settle(path: str, mode: str = "as-is") -> dict:
    """Put ``path``'s page cache in state ``mode`` and describe it.

    ``as-is``: leave it (a capture tcpdump has just written keeps its small folios);
    ``reread``: drop the file's clean pages (``POSIX_FADV_DONTNEED``) and read it once
    with ``read``, as a capture read from disk sits in the cache. Returns ``{"mode",
    "pmd_mapped_share"}``."""
    if mode not in MODES:
        raise ValueError(f"page cache mode {mode!r}: one of {', '.join(MODES)}")
    if mode == "reread":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while os.read(fd, 8 << 20):
                pass
        finally:
            os.close(fd)
    share = pmd_share(path)
    return {"mode": mode, "pmd_mapped_share": None if share is None else round(share, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--reread", action="store_true",
                    help="drop the file's cached pages and read it once first")
    ap.add_argument("--share", action="store_true", help=argparse.SUPPRESS)  # (pmd_share)
    args = ap.parse_args(argv)
    if args.share:
        print(_pmd_share_here(args.capture))
        return 0
    state = settle(args.capture, "reread" if args.reread else "as-is")
    share = state["pmd_mapped_share"]
    print(f"{args.capture}: " + ("the kernel does not tell" if share is None else
                                 f"{share:.0%} maps in 2 MiB pieces"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
