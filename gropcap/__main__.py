"""``python -m gropcap`` (and the ``gropcap`` script) runs the command line."""


def main() -> None:
    """The ``gropcap`` console script: Ctrl-C handled from the first moment
    (``gropcap.interrupt``), then the click command line.

    OpenBLAS gets one thread unless the caller chose: gropcap makes no BLAS call, and
    numpy's import otherwise starts a thread per core that spins for about 0.1 s of CPU
    (a fifth of a warm run's, measured with perf) while the run imports the rest. Set
    before numpy is imported, so it also holds for the Dask workers the run starts."""
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from gropcap.interrupt import run_command

    def cli():
        from gropcap.cli import main as click_main
        click_main()
    run_command(cli)


if __name__ == "__main__":
    main()
