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
    that cost a fifth of the wall time on the benchmark capture (json, 1.37-1.43 s
    against 1.16-1.21 s, `bench_targets.py --only threads`, alternating), the same with
    one (docs/performance.md, "numpy's huge pages"). Both are set before numpy is
    imported, so they also hold for the Dask workers the run starts."""
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    from gropcap.interrupt import run_command

    def cli():
        from gropcap.cli import main as click_main
        click_main()
    run_command(cli)


if __name__ == "__main__":
    main()
