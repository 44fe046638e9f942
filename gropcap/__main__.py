"""``python -m gropcap`` (and the ``gropcap`` script) runs the command line."""


def main() -> None:
    """The ``gropcap`` console script: Ctrl-C handled from the first moment
    (``gropcap.interrupt``), then the click command line."""
    from gropcap.interrupt import run_command

    def cli():
        from gropcap.cli import main as click_main
        click_main()
    run_command(cli)


if __name__ == "__main__":
    main()
