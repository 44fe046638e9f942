"""The click application: the ``gropcap`` group and its core commands (``decode``,
``analyze``, ``calibrate``): options -> configuration -> ``run.core`` -> rendering.

Exit status: 0 success, 1 a gropcap error (bad capture, a capture with no frame of a
supported link type, an output target that cannot be written, failed check) reported as
one line, 2 bad usage (click), 130 interrupted (Ctrl-C/SIGTERM: "gropcap: interrupted",
nothing left behind). Output targets are checked before any packet is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import click

from gropcap import __version__
from gropcap.cli.help import HELP_OPTION_NAMES, Group, capture_files, option
# the options shared by every command, and their converters (cliopts.py; the names stay
# importable from here: api.py and the tests read cli._GRO_KEYS, cli._make_gro_config)
from gropcap.cli.options import (_DECODE_KEYS, _GRO_KEYS, _apply_receiver,  # noqa: F401
                             _decode_options, _decoder_option, _default_poll_gap_us,
                             _gro_options, _packet_columns_option, _make_decode_options, _make_gro_config,
                             _receiver_info, _split, _threads_option, staged_outputs,
                             _captures_option)
from gropcap.errors import GropcapError


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
    ``gropcap`` prints the help and exits 0 (:class:`gropcap.cli.help.Group`)."""

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if name != "analyze":       # (analyze releases it where its run starts)
            from gropcap import collector
            collector.release()
        return name, cmd, rest

    def invoke(self, ctx):
        import signal

        from gropcap.interrupt import handling_interrupts, interrupt_raised

        previous = _sigterm_as_interrupt()
        try:
            try:
                with handling_interrupts():
                    return super().invoke(ctx)
            except (click.exceptions.Exit, click.exceptions.Abort):
                raise
            except Exception:
                # the interrupt came first: C code that caught its KeyboardInterrupt
                # raised this in its place (interrupt.interrupt_raised)
                if interrupt_raised():
                    raise KeyboardInterrupt from None
                raise
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
                       "--no-stream, tunnel GRO or the reference "
                       "engine: drop them for a bounded-memory run", err=True)
            sys.exit(1)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


@click.group(cls=_Group, context_settings={"help_option_names": HELP_OPTION_NAMES,
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
    from gropcap.run.memory import decode_files

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
            {"path": i.path, "digest": i.digest, "format": i.format, "linktypes": i.linktypes,
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
@_packet_columns_option
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
                   "or $TMPDIR; --plot, --poll-acks, --tunnel-gro and --decoder "
                   "reference too); what only the whole-table model runs (--engine "
                   "reference) is held in memory by itself. --no-stream: hold the whole "
                   "run in memory.")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress bar (it only shows on a terminal anyway), no note while "
                   "kernels compile, no closing line (packets, time, files written).")
@click.option("--top", "top", type=click.IntRange(0, None), default=5, show_default=True,
              metavar="N", help="Flows listed in the report (text and JSON), most "
                                "super-packets first.")
@click.option("--jobs", type=click.IntRange(1, None), default=None, metavar="N",
              help="Use N cores, the same results as one process: Dask worker processes "
                   "when the run cuts into partitions of one receiver run (RX queues: "
                   "--queues), else threads in one process; one line on stderr says "
                   "which and why. --parallel chooses.")
@click.option("--parallel", type=click.Choice(["auto", "workers", "threads"]),
              default="auto", show_default=True,
              help="How --jobs uses its cores: auto (as measured fastest, see --jobs), "
                   "workers (N local Dask worker processes) or threads (in one process).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run on an existing Dask cluster through its scheduler.")
@click.option("--scratch", default=None, type=click.Path(file_okay=False, exists=True),
              help="With --jobs/--scheduler: a directory every worker and this host can "
                   "read (shared file system); decoded pieces are exchanged there as "
                   "memory-mapped files instead of Dask transfers. Default: a temporary "
                   "directory when all workers run on this host.")
@_threads_option
@_captures_option
@_decoder_option
@_gro_options
@_decode_options
def analyze(files, model, fmt, out_dir, packet_columns, force, engine, plot, decoder, egress_scenario,
            egress_features, egress_mtu, stream, quiet, top, jobs, parallel, scheduler, scratch,
            threads, captures, **kw):
    """Simulate GRO over captures and summarise how far it aggregates and why it stops.

    Every output target (--out, --plot) is checked before the first packet is read; files
    are written under hidden names beside their targets and renamed into place at the
    end, so a failed or interrupted run (Ctrl-C: "gropcap: interrupted", exit 130)
    leaves none. A capture none of whose frames has a supported link type is an error
    (exit 1); a capture cut short inside a record is analysed up to its last complete
    record, with a warning naming the record and byte offset (exit 0)."""
    import time

    from gropcap.run.progress import Progress
    from gropcap.run.hints import tunnel_hint
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
    if parallel != "auto" and jobs is None:
        raise click.UsageError("--parallel says how --jobs N uses its cores: give --jobs")
    if scratch and not distributed:
        raise click.UsageError("--scratch is for --jobs/--scheduler runs")
    if packet_columns != "default" and not out_dir:
        raise click.UsageError("--packet-columns chooses the columns of --out DIR's "
                               "packets.parquet: give --out")
    if plot:
        from gropcap.report.plots import FORMATS
        if os.path.splitext(plot)[1].lower() not in FORMATS:
            raise click.BadParameter(f"{plot}: use a .png or .svg file name",
                                     param_hint="--plot")
    outs = staged_outputs(force)
    # every target is checked (and its staging entry made) before any packet is read
    stage_dir = outs.directory(out_dir, _OUT_NAMES) if out_dir else None
    stage_plot = outs.file(plot) if plot else None
    cold = not distributed and _cold_start(files, engine, decoder)
    if cold:
        engine = decoder = "reference"
    from gropcap.run import cold as cold_path
    with Progress(None if not quiet else False, compile_note=not cold) as progress, \
            (cold_path.reference_path() if cold else contextlib.nullcontext()):
        if cold:
            progress.note(cold_path.note())
        result = analyze_run(list(files), config, models=models, decode_options=options,
                             engine=engine, decoder=decoder, egress=egress,
                             out_dir=stage_dir, plot=_plot_sink(stage_plot), force=True,
                             in_memory=stream is False, jobs=jobs, scheduler=scheduler,
                             scratch=scratch, progress=progress, receiver=_receiver_info(),
                             receive=_receive_ctx(config), packet_columns=packet_columns,
                             threads=threads, captures=captures, parallel=parallel,
                             compile_helper=True)
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
            click.echo(_done_line(summary, time.perf_counter() - t_start, written,
                                  _ran_on(result, jobs)), err=True)
    if failures:
        sys.exit(1)   # results are complete for the other inputs, but not for these


_OUT_NAMES = ("packets.parquet", "superpackets.parquet", "flows.parquet",
              "packets", "superpackets")     # the last two: --jobs's Parquet datasets


def _cold_start(files, engine, decoder) -> bool:
    """Whether this run takes the reference decoder and engine because the kernels are not
    compiled yet and the capture is small (``gro.engine.cold_start_reference``): only when
    neither --engine nor --decoder was given."""
    src = click.get_current_context().get_parameter_source
    if any(src(p) is not click.core.ParameterSource.DEFAULT for p in ("engine", "decoder")):
        return False
    from gropcap.run.cold import takes_reference_path
    return takes_reference_path(list(files))


def _plot_sink(path):
    """The run's plot sink: ``report.plots.save_plots`` into ``path`` (None: no plots)."""
    if path is None:
        return None

    def sink(analysis):
        from gropcap.report.plots import save_plots
        save_plots(analysis, path)
    return sink


def _ran_on(result, jobs) -> str | None:
    """What the run ran on, for the closing line: ``2 workers`` (Dask), ``2 threads``
    (a bounded-memory run), None (in memory)."""
    if hasattr(result, "failures"):     # (run.dask_core.PartitionedResult too: not imported,
        #                                  its Parquet import is 7 ms of a warm run)
        return f"{jobs} workers" if jobs else "Dask"
    n = getattr(result, "threads", None)
    return f"{n} thread{'s' if n > 1 else ''}" if n else None


def _done_line(summary: dict, seconds: float, written: list,
               ran_on: str | None = None) -> str:
    """The last line of a run (stderr): packets, wall time, rate (and the threads of a
    bounded-memory run), what was written."""
    n = summary.get("packets", 0)
    rate = n / seconds if seconds > 0 else 0.0
    rate_text = (f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.1f} k"
                 if rate >= 1e3 else f"{rate:.0f}")
    if ran_on:
        rate_text += f" packets/s, {ran_on}"
    else:
        rate_text += " packets/s"
    where = "wrote " + ", ".join(written) if written else "nothing written"
    return f"gropcap: {n} packets in {seconds:.1f} s ({rate_text}), {where}"


def _receive_ctx(config):
    """The receive context of this command: each parameter's source (an option typed, a
    --receiver profile's value, or the default)."""
    from gropcap.receive.context import PARAMS, ReceiveContext
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
    from gropcap.receive.profile import PROFILE_KEYS, save_profile

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
    """Commands owned by other layers, imported when they are looked up (the replay layer
    and report/commands cost a tenth of a second of every start)."""
    main.add_lazy("kernel-replay", "gropcap.cli.replay:kernel_replay")
    for name in ("explain", "baseline", "compare", "tune"):
        main.add_lazy(name, f"gropcap.cli.report:{name}")


_register_optional()
