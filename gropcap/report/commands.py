"""CLI commands of the report layer: `explain`, `baseline save|check`, `compare`.

Thin, like cli.py: options -> configuration -> pipeline -> report functions. The shared
option decorators and their converters live in :mod:`gropcap.cli`; :func:`register` adds
these commands to its ``main`` group (idempotent).

Exit status: 0 success; 1 a gropcap error; 2 bad usage. `baseline check` has its own
codes, one per outcome (report.baseline.EXIT_CODES): 0 within tolerance, 1 metrics moved,
2 bad usage, 3 baseline file unusable, 4 nothing compared, 5 capture unreadable.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from gropcap.cli import (_DECODE_KEYS, _GRO_KEYS, _decode_options, _gro_options,
                         _make_decode_options, _make_gro_config, _split)

_ENGINE = click.option("--engine", type=click.Choice(["fast", "reference"]), default="fast",
                       show_default=True, help="GRO engine (numba, or the plain-Python oracle).")


def _configs(kw):
    options = _make_decode_options(**_split(kw, _DECODE_KEYS))
    config = _make_gro_config(**_split(kw, _GRO_KEYS))
    return options, config


def _each_file(files, config, models, options, engine):
    """One Analysis per capture file (directories expanded), in input order."""
    from gropcap.capture import expand_inputs
    from gropcap.pipeline import analyze

    return [analyze(path, config, models=models, decode_options=options, engine=engine)
            for path in expand_inputs(list(files))]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--flow", "flow_spec", required=True, metavar="ID|5-TUPLE",
              help="Flow id (as in `gropcap analyze`) or SRC:SPORT>DST:DPORT "
                   "(IPv6 as [ADDR]:PORT; optionally 'tcp'/'udp').")
@click.option("--model", type=click.Choice(["napi", "ideal"]), default="napi",
              show_default=True, help="Batch model whose verdicts are walked.")
@click.option("--breaks-only", is_flag=True,
              help="Only packets that did not merge, and super-packet ends.")
@_ENGINE
@_gro_options
@_decode_options
def explain(files, flow_spec, model, breaks_only, engine, **kw):
    """Walk one flow packet by packet: which super-packet each packet joined and, at every
    break, the header field that differed (held value -> new value, expected value)."""
    from gropcap.pipeline import analyze
    from gropcap.report.explain import explain_flow, find_flows, parse_flow_spec

    options, config = _configs(kw)
    spec = parse_flow_spec(flow_spec)
    analysis = analyze(list(files), config, models=(model,), decode_options=options,
                       engine=engine)
    texts = [explain_flow(analysis, fid, model=model, breaks_only=breaks_only)
             for fid in find_flows(analysis.flows, spec)]
    click.echo("\n".join(texts), nl=False)


@click.group()
def baseline():
    """Regression baselines: record GRO metrics of captures, check later runs against them."""


@baseline.command("save")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Baseline JSON file to write.")
@click.option("--force", is_flag=True, help="Replace an existing baseline.")
@click.option("--model", type=click.Choice(["ideal", "napi", "both"]), default="both",
              show_default=True, help="Batch model(s) to record.")
@_ENGINE
@_gro_options
@_decode_options
def baseline_save(files, output, force, model, engine, **kw):
    """Record, per capture: aggregation ratio, super-packets, segments and end reasons per
    model (and stage), with the configuration and each capture's sha256."""
    from gropcap.report.baseline import make_baseline, save_baseline

    options, config = _configs(kw)
    models = ("ideal", "napi") if model == "both" else (model,)
    base = make_baseline(_each_file(files, config, models, options, engine))
    save_baseline(base, output, force=force)
    click.echo(f"baseline of {len(base['captures'])} capture(s), models "
               f"{', '.join(base['models'])}, kernel {base['config']['kernel']} -> {output}")


@baseline.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--against", "against", required=True, type=click.Path(dir_okay=False),
              help="Baseline JSON written by `gropcap baseline save`.")
@click.option("--tolerance", default="2%", show_default=True, metavar="PCT",
              help="Allowed relative change of each metric, e.g. 2% or 0.02.")
@_ENGINE
@_gro_options
@_decode_options
@click.pass_context
def baseline_check(ctx, files, against, tolerance, engine, **kw):
    """Compare the metrics of FILES with a baseline and print what moved.

    Captures are paired by file name (one unpaired capture on each side is paired with the
    other). A capture whose bytes differ from the recorded one (a new recording) or a
    different configuration is compared anyway; one line says what differs.

    \b
    Exit codes:
      0  every compared metric is within the tolerance
      1  a metric moved by more than the tolerance (table of what moved)
      2  bad usage: unknown option, bad --tolerance
      3  the baseline file is missing, unreadable or not a baseline
      4  nothing compared: no capture pairs with the baseline's
      5  a capture could not be read or decoded
    """
    from gropcap.errors import ConfigError, GropcapError
    from gropcap.report.baseline import (EXIT_BASELINE, EXIT_CAPTURE, BaselineError,
                                         check_baseline, load_baseline, parse_tolerance,
                                         render_check)

    try:
        tol = parse_tolerance(tolerance)
    except ConfigError as e:
        raise click.BadParameter(e.one_line(), param_hint="--tolerance") from None
    try:
        base = load_baseline(against)
    except BaselineError as e:
        click.echo(f"gropcap: error: {e.one_line()}", err=True)
        ctx.exit(EXIT_BASELINE)
    models = tuple(base.get("models") or ("ideal", "napi"))
    try:
        options, config = _configs(kw)
        result = check_baseline(base, _each_file(files, config, models, options, engine),
                                tol)
    except ConfigError as e:
        # an option value or input set the configuration refuses: bad usage
        raise click.UsageError(e.one_line()) from None
    except GropcapError as e:
        click.echo(f"gropcap: error: {e.one_line()}", err=True)
        ctx.exit(EXIT_CAPTURE)
    click.echo(render_check(result), nl=False)
    ctx.exit(result.exit_code)


def _apply_settings(config, settings, option: str):
    """``KEY=VALUE`` pairs (GroConfig field names) applied to a config."""
    from gropcap.errors import ConfigError
    from gropcap.gro.config import GroConfig, KernelProfile

    fields = {f.name: f for f in dataclasses.fields(GroConfig)}
    changes = {}
    for text in settings:
        key, sep, value = text.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields or key == "model":
            names = ", ".join(sorted(k for k in fields if k != "model"))
            raise click.BadParameter(f"{text!r} is not KEY=VALUE with KEY one of: {names}",
                                     param_hint=option)
        default = getattr(GroConfig(), key)
        try:
            if key == "kernel":
                changes[key] = KernelProfile.parse(value)
            elif key == "rss_key":
                changes[key] = bytes.fromhex(value.replace(":", ""))
            elif key == "tunnel_gro":
                v = value.strip().lower()
                changes[key] = None if v in ("none", "") else v in ("1", "true", "yes", "on")
            elif isinstance(default, bool):
                changes[key] = value.lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                changes[key] = int(value)
            else:
                changes[key] = value
            config = config.replace(**changes)
        except (ValueError, ConfigError) as e:
            msg = e.one_line() if isinstance(e, ConfigError) else str(e)
            raise click.BadParameter(f"{text!r}: {msg}", param_hint=option) from None
    return config


@click.command()
@click.argument("a", type=click.Path())
@click.argument("b", required=False, type=click.Path())
@click.option("--set-a", "set_a", multiple=True, metavar="KEY=VALUE",
              help="Configuration change for side A (GroConfig field, e.g. kernel=6.1).")
@click.option("--set-b", "set_b", multiple=True, metavar="KEY=VALUE",
              help="Configuration change for side B (e.g. kernel=5.15, queues=4).")
@click.option("--model", type=click.Choice(["ideal", "napi", "both"]), default="both",
              show_default=True, help="Batch model(s) to run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@_ENGINE
@_gro_options
@_decode_options
def compare(a, b, set_a, set_b, model, fmt, engine, **kw):
    """Two captures side by side (A B), or one capture under two configurations
    (A --set-b kernel=6.1)."""
    from gropcap.pipeline import analyze
    from gropcap.report.compare import compare_dict, render_compare

    options, config = _configs(kw)
    models = ("ideal", "napi") if model == "both" else (model,)
    cfg_a = _apply_settings(config, set_a, "--set-a")
    cfg_b = _apply_settings(config, set_b, "--set-b")
    from gropcap.gro.reference import needs_reference

    # rules only the reference model has (UDP GRO, tunnel sockets, stage switches)
    eng_a = "reference" if needs_reference(cfg_a) else engine
    eng_b = "reference" if needs_reference(cfg_b) else engine
    ra = analyze(a, cfg_a, models=models, decode_options=options, engine=eng_a)
    rb = analyze(b or a, cfg_b, models=models, decode_options=options, engine=eng_b)
    if fmt == "json":
        click.echo(json.dumps(compare_dict(ra, rb), indent=2))
    else:
        click.echo(render_compare(ra, rb, color=sys.stdout.isatty()), nl=False)


COMMANDS = {"explain": explain, "baseline": baseline, "compare": compare}


def register(group: click.Group) -> None:
    """Add `explain`, `baseline` and `compare` to a click group (no-op if present)."""
    for name, cmd in COMMANDS.items():
        if name not in group.commands:
            group.add_command(cmd, name=name)


__all__ = ["explain", "baseline", "compare", "register", "COMMANDS"]


def _self_register() -> None:
    """Importing this module registers its commands on gropcap.cli's ``main``, whichever of
    the two modules is imported first (cli.py's own registration is then a no-op)."""
    from gropcap import cli

    if hasattr(cli, "main"):
        register(cli.main)


_self_register()
