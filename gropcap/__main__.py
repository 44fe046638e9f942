"""``python -m gropcap`` (and the ``gropcap`` script) runs the command line."""


def main() -> None:
    """The ``gropcap`` console script: Ctrl-C handled from the first moment
    (``gropcap.interrupt``), then the click command line.

    OpenBLAS gets one thread unless the caller chose: gropcap makes no BLAS call, and
    numpy's import otherwise starts a thread per core that spins for about 0.1 s of CPU
    (a fifth of a warm run's, measured with perf) while the run imports the rest.

    numpy's transparent huge-page advice is off unless the caller chose: numpy asks for
    huge pages on every array of 4 MiB or more, and each batch's arrays are fresh ones,
    so the run faults in and zeroes 2 MiB pages batch after batch. With two threads
    that cost a sixth of the wall time on the benchmark capture (json, 1.37-1.43 s
    against 1.16-1.21 s, `bench_targets.py --only threads`, alternating); one thread's
    runs measured the same either way (docs/performance.md, "numpy's huge pages").
    Both are set before numpy is imported, so they also hold for the Dask workers the
    run starts. glibc's malloc keeps the batches' blocks (:func:`tune_malloc`, this
    process only), and Arrow's buffers come from it too (:func:`arrow_pool`).

    The garbage collector is held while the command starts (``gropcap.collector``)."""
    from gropcap import collector
    collector.hold()
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    tuned = tune_malloc()
    from gropcap.interrupt import run_command

    def cli():
        if tuned:
            arrow_pool()
        from gropcap.cli import main as click_main
        click_main()
    run_command(cli)


def arrow_pool() -> bool:
    """Arrow's buffers from glibc's malloc in this process (``pyarrow.system_memory_pool``)
    instead of its bundled mimalloc, unless the caller chose a pool
    (``ARROW_DEFAULT_MEMORY_POOL``). Returns whether it did.

    With :func:`tune_malloc` glibc keeps the blocks a batch frees for the next one;
    mimalloc hands Arrow's (IPC spills read back, Parquet pages, takes) back and the
    next batch faults in fresh zeroed pages. ``--out`` on the real capture, one thread:
    2.65-2.72 s of CPU against 2.79-2.91 s, peak RSS 390 against 437 MB; on the 20
    M-packet capture, two threads: 25.3-25.5 s against 26.0-28.1 s wall, system time
    6.4-6.6 against 7.1-9.6 s; summary only the same (docs/performance.md, "Writing
    Parquet").
    This process only: the Dask workers keep Arrow's default, as they keep glibc's."""
    import os
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    import pyarrow as pa
    pa.set_memory_pool(pa.system_memory_pool())
    return True


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = 1 << 30
ARENA_MAX = 2


def tune_malloc() -> bool:
    """This process's glibc malloc for a run, unless the caller set any ``MALLOC_*``
    variable or ``GLIBC_TUNABLES``: blocks up to :data:`MMAP_THRESHOLD` from the heap
    rather than each its own mapping, the heap's free top kept up to
    :data:`TRIM_THRESHOLD`, at most :data:`ARENA_MAX` arenas. Returns whether it did.

    A run allocates the same arrays batch after batch, and the statistics' folds
    allocate arrays of hundreds of MB; glibc maps every block above its threshold (at
    most 32 MiB by default) afresh and unmaps it when freed, and trims the heap, so the
    next batch faults in and zeroes the same pages again. With the bounded-memory run's
    batches of 131072 records (``run.stream.STREAM_BATCH``) that was about a million
    page faults on the 20 M-packet capture; with this, 220 000 (docs/performance.md,
    "Larger batches"). Set here, in the command line's own process only: the Dask
    workers it starts keep glibc's defaults (their peak is held to issue 15's 1.5 GB).
    Linux with glibc only; elsewhere nothing changes."""
    import os
    import sys
    if not sys.platform.startswith("linux") or os.environ.get("GLIBC_TUNABLES") or \
            any(k.startswith("MALLOC_") for k in os.environ):
        return False
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = [mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (_M_ARENA_MAX, ARENA_MAX))]
    return all(done)


if __name__ == "__main__":
    main()
