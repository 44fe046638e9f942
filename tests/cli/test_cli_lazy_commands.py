"""The CLI starts without importing the layers of commands it does not run: the replay
layer (`kernel-replay`) and cli/report.py (`explain`, `baseline`, `compare`, `tune`) are
registered by name (`cli.help.Group.add_lazy`) and imported when looked up (issue 14: a warm
run spends its time on imports). Each is still listed in the help and runs."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

LAZY = {"kernel-replay": "gropcap.cli.replay",
        "explain": "gropcap.cli.report", "baseline": "gropcap.cli.report",
        "compare": "gropcap.cli.report", "tune": "gropcap.cli.report"}


def _imported_after(code: str) -> set[str]:
    code += "\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def test_importing_the_cli_leaves_the_lazy_layers_out():
    mods = _imported_after("import gropcap.cli")
    assert "gropcap.cli" in mods
    assert not set(LAZY.values()) & mods
    assert "pyarrow.parquet" not in mods


def test_lazy_commands_are_listed_and_resolve():
    from gropcap.cli import main
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for name in LAZY:
        assert f"  {name} " in r.output
    import click
    ctx = click.Context(main)
    for name, module in LAZY.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.callback.__module__ == module
    assert main.get_command(ctx, "no-such-command") is None
