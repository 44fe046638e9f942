"""Click building blocks shared by every gropcap command: help sections, hidden aliases,
capture arguments that accept ``-`` (stdin).

Layer: CLI (below cli/app.py, cli/report.py and cli/replay.py, which declare their
options with these classes). click has no option groups, so :class:`Command` overrides
``format_options`` and prints one section per :data:`SECTIONS` entry; an option's section
comes from its ``section=`` keyword or, for the shared options, from :data:`SECTION_OF`
(keyed by parameter name, so an option declared anywhere lands in the same section).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import click

# help sections, in the order they are printed
SECTIONS = ("input", "kernel", "receiver", "tunnels", "egress", "output", "run")
_TITLES = {"input": "Input", "kernel": "Kernel", "receiver": "Receiver", "tunnels": "Tunnel",
           "egress": "Egress", "output": "Output", "run": "Run"}

# parameter name -> section, for options declared without section=
SECTION_OF = {
    # input: what is read and how it is framed
    "dsa_tag": "input", "decoder": "input", "flow_spec": "input", "against": "input",
    "set_a": "input", "set_b": "input", "captures": "input",
    # kernel: the release and its build configuration
    "kernel": "kernel", "hz": "kernel", "vlan_gro": "kernel",
    # receiver: the receiving device and its NAPI context (what the capture does not show)
    "receiver": "receiver", "mtu": "receiver", "verify_checksums": "receiver",
    "rss": "receiver", "rss_key": "receiver", "queues": "receiver", "budget": "receiver",
    "poll_gap_us": "receiver", "poll_acks": "receiver", "gro_flush_timeout_us": "receiver",
    "napi_defer_hard_irqs": "receiver", "gro_max_size": "receiver",
    "gro_ipv4_max_size": "receiver", "udp_gro": "receiver", "native_gro": "receiver",
    "rx_gro_list": "receiver", "tcp_forwarded": "receiver",
    # tunnels: ports decoded as tunnels, tunnel sockets, the gro_cells stage
    "vxlan_ports": "tunnels", "geneve_ports": "tunnels", "vxlan_gpe_ports": "tunnels",
    "fou_ports": "tunnels", "gue_ports": "tunnels", "udp_tunnels": "tunnels",
    "udp_tunnel": "tunnels", "tunnel_gro": "tunnels",
    # egress: segmentation on the way out
    "egress_scenario": "egress", "egress_features": "egress", "egress_mtu": "egress",
    # output: what is written where
    "output": "output", "out_dir": "output", "out": "output", "fmt": "output",
    "force": "output", "plot": "output", "quiet": "output", "breaks_only": "output",
    "top": "output", "packet_columns": "output",
    # run: how the work is done
    "model": "run", "engine": "run", "stream": "run", "jobs": "run", "parallel": "run",
    "scheduler": "run",
    "scratch": "run", "tolerance": "run", "threads": "run",
}


class Option(click.Option):
    """A click option with a help ``section`` and ``aliases``: extra spellings that parse
    like the others but are left out of ``--help`` and of error messages (old names kept
    so scripts do not break)."""

    def __init__(self, param_decls, section: str | None = None, aliases=(), **kwargs):
        decls = list(param_decls) + [a for a in aliases if a not in param_decls]
        super().__init__(decls, **kwargs)
        if section is not None and section not in SECTIONS:
            raise ValueError(f"unknown help section {section!r}")
        self.section = section
        self.aliases = tuple(aliases)

    def _shown(self) -> tuple[list[str], list[str]]:
        """(opts, secondary_opts) without the aliases: the spellings help shows."""
        return ([o for o in self.opts if o not in self.aliases],
                [o for o in self.secondary_opts if o not in self.aliases])

    def get_help_record(self, ctx):
        opts, secondary = self.opts, self.secondary_opts
        self.opts, self.secondary_opts = self._shown()
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.secondary_opts = opts, secondary

    def get_error_hint(self, ctx):
        shown = self._shown()[0] or self.opts
        return " / ".join(f"'{x}'" for x in shown)


def shown_opts(param) -> tuple[list[str], list[str]]:
    """(opts, secondary_opts) of any click option as ``--help`` shows them."""
    if isinstance(param, Option):
        return param._shown()
    return list(param.opts), list(param.secondary_opts)


def section_of(param) -> str | None:
    """The help section of a parameter (None: the trailing "Other options")."""
    return getattr(param, "section", None) or SECTION_OF.get(param.name)


HELP_OPTION_NAMES = ["-h", "--help"]


class Command(click.Command):
    """Options printed in sections (input, kernel, receiver, tunnels, egress, output, run)
    instead of one flat list; options with no section go last, under "Other options".

    ``-h`` and ``--help`` on the command itself, not only through the ``gropcap``
    group: click keeps a command's help option once made, so a command first run on
    its own (``CliRunner().invoke(kernel_replay, ...)``) kept ``--help`` alone for
    every later run through the group."""

    def __init__(self, *args, **kwargs):
        settings = dict(kwargs.get("context_settings") or {})
        settings.setdefault("help_option_names", HELP_OPTION_NAMES)
        kwargs["context_settings"] = settings
        super().__init__(*args, **kwargs)

    def format_options(self, ctx, formatter):
        groups: dict[str | None, list] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Argument):
                continue
            record = param.get_help_record(ctx)
            if record is not None:
                groups.setdefault(section_of(param), []).append(record)
        for key in (*SECTIONS, None):
            if key in groups:
                with formatter.section(f"{_TITLES[key]} options" if key else "Other options"):
                    formatter.write_dl(groups[key])


class Group(click.Group):
    """Commands listed with their whole first sentence (click cuts them to the terminal
    width with "..."), and no arguments prints the help and exits 0."""

    command_class = Command
    group_class = type   # subgroups are Groups too

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = {}

    def add_lazy(self, name: str, target: str) -> None:
        """Register command ``name`` as ``"module:attribute"``, imported when the command
        is looked up (run, or listed in the help): a start does not import every layer."""
        self.lazy[name] = target

    def list_commands(self, ctx):
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy:
            import importlib
            module, _, attr = self.lazy[name].partition(":")
            try:
                cmd = getattr(importlib.import_module(module), attr)
            except ImportError:  # pragma: no cover - layer not installed
                return None
            self.add_command(cmd, name=name)
        return super().get_command(ctx, name)

    def parse_args(self, ctx, args):
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def option(*decls, **kwargs):
    """``click.option`` with :class:`Option` (``section=``, ``aliases=``)."""
    kwargs.setdefault("cls", Option)
    return click.option(*decls, **kwargs)


# --- option checks (the error names the option) ----------------------------------------

def check_kernel(ctx, param, value):
    """--kernel: a modelled release, checked at parse time so the error names the option."""
    from gropcap.errors import ConfigError
    from gropcap.gro.config import KernelProfile

    if value is not None:
        try:
            KernelProfile.parse(value)
        except ConfigError as e:
            raise click.BadParameter(e.one_line()) from None
    return value


def check_udp_tunnels(ctx, param, value):
    """--udp-tunnel KIND:PORT[,...] (repeatable), checked at parse time."""
    from gropcap.errors import ConfigError
    from gropcap.gro.config import parse_udp_tunnels

    try:
        parse_udp_tunnels(",".join(value) if isinstance(value, tuple) else value)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None
    return value


# --- capture arguments -----------------------------------------------------------------

class CapturePath(click.Path):
    """A capture file or directory; ``-`` reads the capture from stdin.

    The readers memory-map their input, so stdin is spooled to a temporary file (in
    $TMPDIR), removed when the command ends. Only one ``-`` per command: stdin is read once.
    """

    name = "capture"

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_dash", True)
        super().__init__(**kwargs)

    def convert(self, value, param, ctx):
        if value != "-" and not (isinstance(value, bytes) and value == b"-"):
            return super().convert(value, param, ctx)
        if ctx is None:
            self.fail("'-' (stdin) needs a command context", param, ctx)
        if ctx.meta.get("gropcap.stdin_spooled"):
            self.fail("'-' given twice: stdin holds one capture", param, ctx)
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        if getattr(stdin, "isatty", lambda: False)():
            self.fail("'-' reads a capture from stdin, but stdin is a terminal: pipe a "
                      "capture in (e.g. tcpdump -w - ... | gropcap analyze -)", param, ctx)
        path = spool_stdin(stdin)
        ctx.meta["gropcap.stdin_spooled"] = path
        ctx.call_on_close(lambda: _remove(path))
        return path


def spool_stdin(stream) -> str:
    """Copy a binary stream to ``$TMPDIR/gropcap-stdin-XXXX/stdin`` (reports and errors then
    name "stdin"); returns the path."""
    path = os.path.join(tempfile.mkdtemp(prefix="gropcap-stdin-"), "stdin")
    try:
        with open(path, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    except BaseException:
        _remove(path)
        raise
    return path


def _remove(path: str) -> None:
    """Remove a spooled capture and its directory."""
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def capture_files(**kwargs):
    """The ``FILES...`` argument of a command that reads captures (``-``: stdin)."""
    kwargs.setdefault("nargs", -1)
    kwargs.setdefault("required", True)
    return click.argument("files", type=CapturePath(), **kwargs)


__all__ = ["Command", "Group", "Option", "CapturePath", "SECTIONS", "SECTION_OF",
           "capture_files", "check_kernel", "check_udp_tunnels", "option", "section_of",
           "shown_opts", "spool_stdin"]
