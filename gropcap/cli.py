"""Command line: options -> configuration -> pipeline -> rendering. Nothing else lives here.

Exit status: 0 success, 1 a gropcap error (bad capture, a capture with no frame of a
supported link type, an output target that cannot be written, failed check) reported as
one line, 2 bad usage (click), 130 interrupted (Ctrl-C/SIGTERM: "gropcap: interrupted",
nothing left behind). Output targets are checked before any packet is read.
"""

from __future__ import annotations

import json
import os
import sys

import click

from gropcap import __version__
from gropcap.clihelp import Group, capture_files, check_kernel, check_udp_tunnels, option
from gropcap.errors import ConfigError, GropcapError


def _fail(err: GropcapError) -> None:
    click.echo(f"gropcap: error: {err.one_line()}", err=True)
    sys.exit(1)


def _sigterm_as_interrupt():
    """SIGTERM unwinds like Ctrl-C, so temporary files and namespaces are cleaned up.

    Returns the previous handler (None when not on the main thread)."""
    import signal
    import threading

    from gropcap.interrupt import on_signal

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, on_signal)


def _quiet_teardown() -> None:
    """After "gropcap: interrupted", the process's own stderr (fd 2) goes to /dev/null:
    what the teardown of an interrupted run prints (a Dask cluster closed at exit,
    numba/LLVM finalizers) is noise. Nothing happens under a test runner's stderr."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return
    if fd != 2:
        return
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)


class _Group(Group):
    """Turns gropcap errors into one line and exit 1; no traceback for users. Bare
    ``gropcap`` prints the help and exits 0 (:class:`gropcap.clihelp.Group`)."""

    def invoke(self, ctx):
        import signal

        from gropcap.interrupt import handling_interrupts

        previous = _sigterm_as_interrupt()
        try:
            with handling_interrupts():
                return super().invoke(ctx)
        except GropcapError as e:
            outs = ctx.meta.get("gropcap.outputs")
            if outs is not None:     # name the target, not its staging entry
                e.path = outs.real_path(e.path)
            _fail(e)
        except KeyboardInterrupt:
            click.echo("gropcap: interrupted", err=True)
            _quiet_teardown()
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(1)
        except MemoryError:
            click.echo("gropcap: error: out of memory; runs hold the capture in memory with "
                       "--no-stream, --plot, --egress, tunnel/UDP GRO or the reference "
                       "engine: drop them for a bounded-memory run", err=True)
            sys.exit(1)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"],
                                           "max_content_width": 100})
@click.version_option(__version__, prog_name="gropcap")
def main():
    """Replay Linux GRO over packet captures: how far would the kernel aggregate this
    traffic, why does each packet stop aggregating, and how many segments does each
    super-packet become again.

    \b
    Exit status: 0 success; 1 an error, reported in one line (a damaged
    capture, no frame of a supported link type, an output that cannot be
    written: checked before any packet is read); 2 bad usage; 130
    interrupted (nothing left behind)."""


def staged_outputs(force: bool):
    """The command's :class:`gropcap.io.outputs.Outputs` (one per click context): targets
    are checked and staged when named, and whatever is not committed is removed when the
    command ends (error, Ctrl-C)."""
    from gropcap.io.outputs import Outputs

    ctx = click.get_current_context()
    outs = ctx.meta.get("gropcap.outputs")
    if outs is None:
        outs = ctx.meta["gropcap.outputs"] = Outputs(force=force)
        ctx.call_on_close(outs.discard)
    return outs


# --- shared options -------------------------------------------------------------------

def _decode_options(f):
    opts = [
        click.option("--vxlan-port", "vxlan_ports", type=click.IntRange(1, 65535), multiple=True,
                     help="UDP port decoded as VXLAN (repeatable; default 4789)."),
        click.option("--geneve-port", "geneve_ports", type=click.IntRange(1, 65535),
                     multiple=True, help="UDP port decoded as Geneve (default 6081)."),
        click.option("--vxlan-gpe-port", "vxlan_gpe_ports", type=click.IntRange(1, 65535),
                     multiple=True, help="UDP port decoded as VXLAN-GPE (default 4790)."),
        click.option("--fou-port", "fou_ports", multiple=True, metavar="PORT:PROTO",
                     help="Foo-over-UDP receive port and the IP protocol it carries "
                          "(4, 41 or 47), e.g. 5555:4."),
        click.option("--gue-port", "gue_ports", type=click.IntRange(1, 65535), multiple=True,
                     help="UDP port decoded as GUE."),
        click.option("--dsa-tag", type=click.Choice(["dsa", "edsa", "brcm", "brcm-prepend"]),
                     default=None, help="Ethernet capture taken on a DSA conduit: tag to strip."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _make_decode_options(vxlan_ports, geneve_ports, vxlan_gpe_ports, fou_ports, gue_ports,
                         dsa_tag):
    from gropcap.decode.options import DecodeOptions

    kw = {}
    if vxlan_ports:
        kw["vxlan_ports"] = vxlan_ports
    if geneve_ports:
        kw["geneve_ports"] = geneve_ports
    if vxlan_gpe_ports:
        kw["vxlan_gpe_ports"] = vxlan_gpe_ports
    if gue_ports:
        kw["gue_ports"] = gue_ports
    if fou_ports:
        pairs = []
        for text in fou_ports:
            port, sep, proto = text.partition(":")
            if not sep or not port.isdigit() or not proto.isdigit():
                raise click.BadParameter(f"{text!r} is not PORT:PROTO", param_hint="--fou-port")
            pairs.append((int(port), int(proto)))
        kw["fou_ports"] = tuple(pairs)
    try:
        return DecodeOptions(dsa_tag=dsa_tag, **kw)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None


_decoder_option = click.option(
    "--decoder", type=click.Choice(["fast", "reference"]), default="fast", show_default=True,
    help="Capture reader and header decoder: numba over a memory map, or the plain-Python "
         "reference (identical tables).")


def _default_poll_gap_us() -> float:
    from gropcap.gro.config import DEFAULT_POLL_GAP_NS
    return DEFAULT_POLL_GAP_NS / 1000


def _gro_options(f):
    opts = [
        click.option("--kernel", default=None, metavar="X.Y", callback=check_kernel,
                     help="Kernel release whose GRO rules apply: 4.4-4.20, 5.0-5.19 or "
                          "6.0-6.18 (default: newest modelled, 6.18)."),
        click.option("--verify-checksums", is_flag=True,
                     help="Check TCP/UDP checksums as software GRO does (default: the NIC "
                          "validated them; captures from a sending host carry partial sums)."),
        click.option("--rss", type=click.Choice(["toeplitz", "none"]), default="toeplitz",
                     show_default=True, help="RX hash: NIC Toeplitz RSS, or none (bucket 0)."),
        click.option("--rss-key", default=None, metavar="HEX", help="Toeplitz key (40 bytes hex)."),
        click.option("--queues", type=click.IntRange(1, 4096), default=1, show_default=True,
                     help="RX queues (napi model)."),
        click.option("--budget", type=click.IntRange(1, 65536), default=64, show_default=True,
                     help="NAPI budget: frames per poll."),
        click.option("--poll-gap-us", type=click.FloatRange(0), default=_default_poll_gap_us(),
                     show_default=True,
                     help="A gap longer than this between frames of a queue ends a poll "
                          "(default: the ice/i40e RX interrupt moderation, 50 us)."),
        click.option("--hz", type=click.IntRange(1, 10000), default=250, show_default=True,
                     help="CONFIG_HZ (jiffy length for the old-packet flush)."),
        option("--gro-flush-timeout-us", type=click.FloatRange(0), default=0.0,
               show_default=True, aliases=("--flush-timeout-us",),
               help="Device gro_flush_timeout (microseconds)."),
        click.option("--napi-defer-hard-irqs", type=click.IntRange(0, 2**31 - 1), default=0,
                     show_default=True, help="Device napi_defer_hard_irqs."),
        click.option("--gro-max-size", type=click.IntRange(1, 524288), default=65536,
                     show_default=True, help="gro_max_size (IPv6; all families before 6.12)."),
        click.option("--gro-ipv4-max-size", type=click.IntRange(1, 524288), default=65536,
                     show_default=True, help="gro_ipv4_max_size (BIG TCP for IPv4)."),
        click.option("--udp-tunnel", "udp_tunnels", multiple=True, metavar="KIND:PORT[,...]",
                     callback=check_udp_tunnels,
                     help="A local UDP tunnel socket owns PORT (vxlan, vxlan-gpe, geneve, fou, "
                          "gue), so native GRO goes through the tunnel; e.g. vxlan:4789."),
        click.option("--udp-gro", type=click.Choice(["off", "socket", "forward", "fraglist"]),
                     default="off", show_default=True,
                     help="UDP GRO: UDP_GRO socket, rx-udp-gro-forwarding or rx-gro-list."),
        click.option("--rx-gro-list/--no-rx-gro-list", default=False, show_default=True,
                     help="rx-gro-list (NETIF_F_GRO_FRAGLIST) on the receiving device; for "
                          "TCP from 6.10 together with --tcp-forwarded."),
        click.option("--tcp-forwarded/--tcp-local-socket", "tcp_forwarded", default=False,
                     show_default=True,
                     help="The TCP flows are forwarded (no local socket, a router): with "
                          "--rx-gro-list, 6.10+ aggregates them as a frag_list."),
        click.option("--native-gro/--no-native-gro", default=True, show_default=True,
                     help="GRO on the receiving device (ethtool -K DEV gro on|off)."),
        click.option("--vlan-gro/--no-vlan-gro", default=True, show_default=True,
                     help="VLAN GRO (vlan_gro_receive); off for kernels built without "
                          "CONFIG_VLAN_8021Q: 802.1Q/802.1ad frames skip GRO."),
        click.option("--mtu", type=click.IntRange(68, 65536), default=None, metavar="BYTES",
                     help="MTU of the receiving device: frames with more IP bytes were "
                          "captured already coalesced (default: inferred from the SYN MSS "
                          "and frame sizes; the report says from what)."),
        click.option("--tunnel-gro/--no-tunnel-gro", default=None,
                     help="Model the gro_cells stage on tunnel/ERSPAN/DSA devices after "
                          "decapsulation, with GRO on or off there (default: not modelled)."),
        click.option("--receiver", type=click.Path(dir_okay=False), default=None,
                     metavar="PROFILE",
                     help="Receiver profile (TOML, from `gropcap calibrate`): its values "
                          "replace the defaults of the options above; an option given "
                          "here still wins."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _make_gro_config(kernel, verify_checksums, rss, rss_key, queues, budget, poll_gap_us, hz,
                     gro_flush_timeout_us, napi_defer_hard_irqs, gro_max_size,
                     gro_ipv4_max_size, udp_tunnels=(), udp_gro="off", native_gro=True,
                     tunnel_gro=None, vlan_gro=True, rx_gro_list=False, tcp_forwarded=False,
                     mtu=None, receiver=None):
    from gropcap.gro.config import GroConfig, KernelProfile

    if receiver is not None:
        # profile values replace option defaults; options given explicitly keep theirs
        opts = {k: v for k, v in locals().items() if k not in ("receiver", "GroConfig",
                                                                 "KernelProfile")}
        opts = _apply_receiver(receiver, opts)
        return _make_gro_config(**opts)
    kw = {}
    if rss_key:
        try:
            kw["rss_key"] = bytes.fromhex(rss_key.replace(":", ""))
        except ValueError:
            raise click.BadParameter("not hex", param_hint="--rss-key") from None
    try:
        profile = KernelProfile.parse(kernel)
    except ConfigError as e:
        raise click.BadParameter(e.one_line(), param_hint="--kernel") from None
    if napi_defer_hard_irqs and not profile.napi_defer_hard_irqs:
        raise click.BadParameter(f"kernel {profile.name} has no such knob (napi_defer_hard_irqs "
                                 f"arrived in 5.7, 6f8b12d661d0)",
                                 param_hint="--napi-defer-hard-irqs")
    try:
        return GroConfig(kernel=profile, verify_checksums=verify_checksums,
                         rss=rss, queues=queues, budget=budget,
                         poll_gap_ns=int(poll_gap_us * 1000), hz=hz,
                         gro_flush_timeout_ns=int(gro_flush_timeout_us * 1000),
                         napi_defer_hard_irqs=napi_defer_hard_irqs, gro_max_size=gro_max_size,
                         gro_ipv4_max_size=gro_ipv4_max_size,
                         udp_tunnels=",".join(udp_tunnels), udp_gro=udp_gro,
                         native_gro=native_gro, tunnel_gro=tunnel_gro, vlan_gro=vlan_gro,
                         rx_gro_list=rx_gro_list, tcp_local_socket=not tcp_forwarded, mtu=mtu,
                         **kw)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None


def _apply_receiver(path, options: dict) -> dict:
    """``--receiver PROFILE``: the profile's values for the options of this command left at
    their defaults. The :class:`gropcap.receiver.ReceiverInfo` (what was applied) is kept
    in the click context for :func:`_receiver_info`."""
    from click.core import ParameterSource

    from gropcap.receiver import ReceiverInfo, apply_options, load_profile

    profile = load_profile(path)
    ctx = click.get_current_context(silent=True)
    explicit = set()
    if ctx is not None:
        explicit = {k for k in profile
                    if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT)}
    opts, applied, unapplied = apply_options(options, profile, explicit)
    if isinstance(opts.get("udp_tunnels"), str):
        opts["udp_tunnels"] = (opts["udp_tunnels"],)
    if ctx is not None:
        ctx.meta["gropcap.receiver"] = ReceiverInfo(
            str(path), profile, tuple(applied), tuple(sorted(explicit)), tuple(unapplied))
    return opts


def _receiver_info():
    """The ReceiverInfo of this command's ``--receiver`` (None without one)."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get("gropcap.receiver")


_DECODE_KEYS = ("vxlan_ports", "geneve_ports", "vxlan_gpe_ports", "fou_ports", "gue_ports",
                "dsa_tag")
_GRO_KEYS = ("kernel", "verify_checksums", "rss", "rss_key", "queues", "budget", "poll_gap_us",
             "hz", "gro_flush_timeout_us", "napi_defer_hard_irqs", "gro_max_size",
             "gro_ipv4_max_size", "udp_tunnels", "udp_gro", "native_gro", "tunnel_gro",
             "vlan_gro", "rx_gro_list", "tcp_forwarded", "mtu",
             "receiver")


def _split(kw: dict, keys) -> dict:
    return {k: kw.pop(k) for k in keys}


# --- commands --------------------------------------------------------------------------

@main.command()
@capture_files()
@option("-o", "--out", "output", required=True, type=click.Path(dir_okay=False),
        aliases=("--output",), help="Parquet file to write the packet table to.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@_decoder_option
@_decode_options
def decode(files, output, force, decoder, **kw):
    """Decode captures into a packet table (Parquet), one row per frame."""
    import dataclasses

    from gropcap.interrupt import deferred
    from gropcap.io.parquet import write_table
    from gropcap.pipeline import decode_files

    options = _make_decode_options(**_split(kw, _DECODE_KEYS))
    staged = staged_outputs(force).file(output)   # checked before any packet is read
    table, infos = decode_files(list(files), options, decoder=decoder)
    for info in infos:
        for w in info.warnings:
            click.echo(f"gropcap: warning: {w}", err=True)
    meta = {
        "gropcap.version": __version__,
        "gropcap.decode_options": json.dumps(dataclasses.asdict(options)),
        "gropcap.sources": json.dumps([
            {"path": i.path, "sha256": i.sha256, "format": i.format, "linktypes": i.linktypes,
             "records": i.records} for i in infos]),
        "gropcap.linktypes": json.dumps(sorted({lt for i in infos for lt in i.linktypes})),
    }
    from gropcap.io.columns import readable
    write_table(readable(table), staged, meta, force=True)
    with deferred(drop=True):
        staged_outputs(force).commit()
        click.echo(f"{table.num_rows} packets from {len(infos)} file(s) -> {output}")


@main.command()
@capture_files()
@click.option("--model", type=click.Choice(["ideal", "napi", "both"]), default="both",
              show_default=True, help="Batch model(s) to run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Summary format on stdout.")
@option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
        aliases=("--output",),
        help="Write packets/superpackets/flows.parquet into this directory.")
@click.option("--force", is_flag=True, help="Replace existing output files.")
@click.option("--engine", type=click.Choice(["fast", "reference"]), default="fast",
              show_default=True, help="GRO engine (numba, or the plain-Python oracle).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write the report plots to FILE.png or FILE.svg.")
@click.option("--egress", "egress_scenario", type=click.Choice(["encap", "decap"]),
              default=None, help="Account for egress segmentation: forwarded still "
                                 "encapsulated, or decapsulated then forwarded.")
@click.option("--egress-features", default="tso,tx-tcp6-segmentation", show_default=True,
              help="Egress device offloads (ethtool names: tso, tx-tcp6-segmentation, "
                   "tx-gre-segmentation, tx-udp_tnl-segmentation, ...).")
@click.option("--egress-mtu", type=click.IntRange(68, 65535), default=None,
              help="Egress MTU (default: every segment fits).")
@click.option("--stream/--no-stream", "stream", default=None,
              help="--stream (the default, kept for old command lines): bounded memory, "
                   "decode, simulate and write batch by batch (temporary files in --out "
                   "or $TMPDIR); what only whole-table models run (--engine/--decoder "
                   "reference, UDP GRO, UDP tunnel sockets, tunnel GRO, --egress, --plot) "
                   "is held in memory by itself. --no-stream: hold the whole run in "
                   "memory.")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress bar (it only shows on a terminal anyway), no note while "
                   "kernels compile, no closing line (packets, time, files written).")
@click.option("--top", "top", type=click.IntRange(0, None), default=5, show_default=True,
              metavar="N", help="Flows listed in the report (text and JSON), most "
                                "super-packets first.")
@click.option("--jobs", type=click.IntRange(1, None), default=None,
              help="Run on N local Dask worker processes (same results as one process).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run on an existing Dask cluster through its scheduler.")
@click.option("--scratch", default=None, type=click.Path(file_okay=False, exists=True),
              help="With --jobs/--scheduler: a directory every worker and this host can "
                   "read (shared file system); decoded pieces are exchanged there as "
                   "memory-mapped files instead of Dask transfers. Default: a temporary "
                   "directory when all workers run on this host.")
@_decoder_option
@_gro_options
@_decode_options
def analyze(files, model, fmt, out_dir, force, engine, plot, decoder, egress_scenario,
            egress_features, egress_mtu, stream, quiet, top, jobs, scheduler, scratch, **kw):
    """Simulate GRO over captures and summarise how far it aggregates and why it stops.

    Every output target (--out, --plot) is checked before the first packet is read; files
    are written under hidden names beside their targets and renamed into place at the
    end, so a failed or interrupted run (Ctrl-C: "gropcap: interrupted", exit 130)
    leaves none. A capture none of whose frames has a supported link type is an error
    (exit 1); a capture cut short inside a record is analysed up to its last complete
    record, with a warning naming the record and byte offset (exit 0)."""
    import time

    from gropcap.report.progress import Progress
    from gropcap.report.receive import tunnel_hint
    from gropcap.report.summary import render_text, report_dict
    from gropcap.run.core import analyze_run

    t_start = time.perf_counter()
    options = _make_decode_options(**_split(kw, _DECODE_KEYS))
    config = _make_gro_config(**_split(kw, _GRO_KEYS))
    models = ("ideal", "napi") if model == "both" else (model,)
    egress = None
    if egress_scenario or egress_mtu:
        from gropcap.run.options import EgressOptions
        egress = EgressOptions(egress_scenario or "encap", egress_features, egress_mtu)
    distributed = jobs is not None or scheduler is not None
    if distributed and stream:
        raise click.UsageError("--stream runs in one process; drop --jobs/--scheduler")
    if jobs is not None and scheduler is not None:
        raise click.UsageError("--jobs starts local workers, --scheduler uses a cluster: "
                               "give one of them")
    if scratch and not distributed:
        raise click.UsageError("--scratch is for --jobs/--scheduler runs")
    if plot:
        from gropcap.report.plots import FORMATS
        if os.path.splitext(plot)[1].lower() not in FORMATS:
            raise click.BadParameter(f"{plot}: use a .png or .svg file name",
                                     param_hint="--plot")
    outs = staged_outputs(force)
    # every target is checked (and its staging entry made) before any packet is read
    stage_dir = outs.directory(out_dir, _OUT_NAMES) if out_dir else None
    stage_plot = outs.file(plot) if plot else None
    with Progress(None if not quiet else False) as progress:
        result = analyze_run(list(files), config, models=models, decode_options=options,
                             engine=engine, decoder=decoder, egress=egress,
                             out_dir=stage_dir, plot=stage_plot, force=True,
                             in_memory=stream is False, jobs=jobs, scheduler=scheduler,
                             scratch=scratch, progress=progress, receiver=_receiver_info(),
                             receive=_receive_ctx(config))
        failures = getattr(result, "failures", None) or []
        summary = report_dict(result, top=top)
        hint = tunnel_hint(result) if fmt == "json" else None
        if hint:
            summary["udp_tunnel_hint"] = hint
        if fmt == "json":
            text = json.dumps(summary, indent=2) + "\n"
        else:
            text = render_text(result, color=sys.stdout.isatty(), top_flows=top)
    from gropcap.interrupt import deferred
    # the outputs are complete from here: an interrupt now lets the run finish
    with deferred(drop=True):
        written = outs.commit()
        for f in failures:
            click.echo(f"gropcap: error: {f.path} (bytes {f.start}-{f.end or 'end'}) "
                       f"left out: {f.error}", err=True)
        click.echo(text, nl=False)
        if not quiet:
            click.echo(_done_line(summary, time.perf_counter() - t_start, written),
                       err=True)
    if failures:
        sys.exit(1)   # results are complete for the other inputs, but not for these


_OUT_NAMES = ("packets.parquet", "superpackets.parquet", "flows.parquet")


def _done_line(summary: dict, seconds: float, written: list) -> str:
    """The last line of a run (stderr): packets, wall time, rate, what was written."""
    n = summary.get("packets", 0)
    rate = n / seconds if seconds > 0 else 0.0
    rate_text = (f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.1f} k"
                 if rate >= 1e3 else f"{rate:.0f}")
    where = "wrote " + ", ".join(written) if written else "nothing written"
    return f"gropcap: {n} packets in {seconds:.1f} s ({rate_text} packets/s), {where}"


def _receive_ctx(config):
    """The receive context of this command: each parameter's source (an option typed, a
    --receiver profile's value, or the default)."""
    from gropcap.context import PARAMS, ReceiveContext
    rc = ReceiveContext.from_click(click.get_current_context(), config)
    info = _receiver_info()
    if info is not None:
        rc.apply_profile({k: info.values[k] for k in info.applied if k in PARAMS})
    return rc


@main.command(options_metavar="[OPTIONS]")
@click.argument("pair", nargs=-1, required=True, metavar="WIRE POSTGRO [WIRE POSTGRO]...",
                type=click.Path(dir_okay=False))
@option("-o", "--out", "output", required=True, type=click.Path(dir_okay=False),
        aliases=("--output",), help="Receiver profile (TOML) to write.")
@click.option("--force", is_flag=True, help="Replace an existing profile.")
@click.option("--release", default=None, metavar="TEXT",
              help="Kernel release of the receiver, recorded in the profile (default: the "
                   "'kernel' of the pair's WIRE-stem .json when there is one).")
@click.option("--engine", type=click.Choice(["fast", "reference"]), default="fast",
              show_default=True, help="GRO engine (numba, or the plain-Python oracle).")
@_decoder_option
@_gro_options
@_decode_options
def calibrate(pair, output, force, release, engine, decoder, **kw):
    """Fit a host's receive parameters to a wire view and the kernel's post-GRO view of
    the same traffic, and write a profile for --receiver.

    The parameters: NAPI budget, poll gap, HZ, gro_flush_timeout, napi_defer_hard_irqs,
    queues, MTU. WIRE holds the frames that reached the receiving device, POSTGRO the
    kernel's post-GRO view (tcpdump on the receiving device). Prints the fit and the
    remaining difference per flow. Options given here are held, not fitted. Several
    pairs of one host are fitted together."""
    from click.core import ParameterSource

    from gropcap.calibrate import FIT_KEYS, fit_receiver, render_fit
    from gropcap.receiver import PROFILE_KEYS, save_profile

    if kw.get("receiver"):
        raise click.UsageError("calibrate writes a profile; give the fixed values as options")
    if len(pair) % 2:
        raise click.UsageError("give captures in pairs: WIRE POSTGRO [WIRE POSTGRO]...")
    wires, posts = list(pair[0::2]), list(pair[1::2])
    staged = staged_outputs(force).file(output)   # checked before any packet is read
    ctx = click.get_current_context()
    given = {k for k in kw if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT)}
    options = _make_decode_options(**_split(kw, _DECODE_KEYS))
    gro_kw = _split(kw, _GRO_KEYS)
    config = _make_gro_config(**gro_kw)
    fixed = {k: gro_kw[k] for k in FIT_KEYS if k in given and k in gro_kw}
    fit = fit_receiver(wires[0] if len(wires) == 1 else wires,
                       posts[0] if len(posts) == 1 else posts, config, fixed=fixed,
                       decode_options=options, engine=engine, decoder=decoder)
    values = dict(fit.values)
    # receive-path options stated for this host go into the profile as well
    for k in PROFILE_KEYS:
        if k in given and k not in values and k in gro_kw:
            v = gro_kw[k]
            values[k] = ",".join(v) if k == "udp_tunnels" else v
    release = release or _pair_release(wires[0])
    save_profile(staged, values, fit.profile_fit(kernel_release=release or "unknown"),
                 force=True)
    from gropcap.interrupt import deferred
    with deferred(drop=True):
        staged_outputs(force).commit()
        click.echo(render_fit(fit), nl=False)
        click.echo(f"profile -> {output}")


def _pair_release(wire: str) -> str | None:
    """The ``kernel`` of a recorded pair's description (``NAME.json`` next to
    ``NAME.wire.pcap``, sample_pcaps/make_pairs.py), if there is one."""
    stem = wire[:-len(".wire.pcap")] if wire.endswith(".wire.pcap") else \
        os.path.splitext(wire)[0]
    try:
        with open(stem + ".json", encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    value = meta.get("kernel") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def _register_optional():
    """Commands owned by other layers, registered when their modules import."""
    try:
        from gropcap.replay.command import kernel_replay
    except ImportError:  # pragma: no cover - layer not installed
        return
    main.add_command(kernel_replay, name="kernel-replay")
    from gropcap.report.commands import register
    register(main)


if __name__ == "__main__":  # pragma: no cover - `python -m gropcap.cli`
    from gropcap.cli import main as _main  # the importable module, with every command
    from gropcap.interrupt import run_command
    run_command(_main)
else:
    _register_optional()
