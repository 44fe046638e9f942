"""CLI commands of the report layer: `explain`, `baseline save|check`, `compare`, `tune`.

Thin, like cli/app.py: options -> configuration -> run -> report functions. The shared
option decorators and their converters live in :mod:`gropcap.cli.options`; :func:`register`
adds these commands to a group (cli/app.py registers them on its ``main``; idempotent).

Exit status: 0 success; 1 a gropcap error; 2 bad usage. `baseline check` has its own
codes, one per outcome (report.baseline.EXIT_CODES): 0 within tolerance, 1 metrics moved,
2 bad usage, 3 baseline file unusable, 4 nothing compared, 5 capture unreadable.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from gropcap.cli.help import (CapturePath, Command, Group, capture_files, option,
                              shown_opts)
from gropcap.cli.options import (_DECODE_KEYS, _GRO_KEYS, _decode_options, _gro_options,
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
    from gropcap.run.memory import analyze

    return [analyze(path, config, models=models, decode_options=options, engine=engine)
            for path in expand_inputs(list(files))]


@click.command(cls=Command)
@capture_files()
@click.option("--flow", "flow_spec", required=True, metavar="ID|5-TUPLE",
              help="Flow id (as in `gropcap analyze`) or SRC:SPORT>DST:DPORT "
                   "(IPv6 as [ADDR]:PORT; optionally 'tcp'/'udp').")
@click.option("--model", type=click.Choice(["napi", "ideal"]), default="napi",
              show_default=True, help="Batch model whose verdicts are walked.")
@click.option("--breaks-only", is_flag=True,
              help="Only packets that did not merge, and super-packet ends.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format (json: one document, every matching "
                                      "flow with every packet's verdict and the breaks).")
@_ENGINE
@_gro_options
@_decode_options
def explain(files, flow_spec, model, breaks_only, fmt, engine, **kw):
    """Walk one flow packet by packet: which super-packet each packet joined and, at every
    break, the header field that differed (held value -> new value, expected value)."""
    from gropcap.run.memory import analyze
    from gropcap.report.explain import explain_flow, find_flows, parse_flow_spec

    options, config = _configs(kw)
    spec = parse_flow_spec(flow_spec)
    analysis = analyze(list(files), config, models=(model,), decode_options=options,
                       engine=engine)
    fids = find_flows(analysis.flows, spec)
    if fmt == "json":
        from gropcap.report.explain import explain_dict
        flows = [explain_dict(analysis, fid, model=model, breaks_only=breaks_only)
                 for fid in fids]
        click.echo(json.dumps({"flows": flows}, indent=2))
        return
    texts = [explain_flow(analysis, fid, model=model, breaks_only=breaks_only)
             for fid in fids]
    click.echo("\n".join(texts), nl=False)


@click.group(cls=Group)
def baseline():
    """Regression baselines: record GRO metrics of captures, check later runs against them."""


@baseline.command("save")
@capture_files()
@option("-o", "--out", "output", required=True, type=click.Path(dir_okay=False),
        aliases=("--output",), help="Baseline JSON file to write.")
@click.option("--force", is_flag=True, help="Replace an existing baseline.")
@click.option("--model", type=click.Choice(["ideal", "napi", "both"]), default="both",
              show_default=True, help="Batch model(s) to record.")
@_ENGINE
@_gro_options
@_decode_options
def baseline_save(files, output, force, model, engine, **kw):
    """Record, per capture: aggregation ratio, super-packets, segments and end reasons per
    model (and stage), with the configuration and each capture's digest."""
    from gropcap.report.baseline import make_baseline, save_baseline

    from gropcap.cli.options import staged_outputs
    from gropcap.interrupt import deferred

    options, config = _configs(kw)
    staged = staged_outputs(force).file(output)   # checked before any packet is read
    models = ("ideal", "napi") if model == "both" else (model,)
    base = make_baseline(_each_file(files, config, models, options, engine))
    save_baseline(base, staged, force=True)
    with deferred(drop=True):
        staged_outputs(force).commit()
        click.echo(f"baseline of {len(base['captures'])} capture(s), models "
                   f"{', '.join(base['models'])}, kernel {base['config']['kernel']} -> "
                   f"{output}")


@baseline.command("check")
@capture_files()
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


def _gro_params(ctx) -> dict:
    """This command's receive-configuration options by CLI name (``poll-gap-us``,
    ``no-native-gro``): ``{name: (click.Parameter, is_negative_form)}``."""
    out = {}
    for p in ctx.command.params:
        if p.name in _GRO_KEYS:
            out.update({o.lstrip("-"): (p, False) for o in p.opts})
            out.update({o.lstrip("-"): (p, True) for o in p.secondary_opts})
    return out


def _shown_names(params: dict) -> list[str]:
    """The names ``--help`` shows (hidden aliases left out), sorted."""
    return sorted(k for k, (p, neg) in params.items() if "--" + k in shown_opts(p)[neg])


def _config_for(ctx, gro_kw: dict, settings, option: str):
    """The GroConfig of one compare side: this run's options, changed by ``KEY=VALUE``
    settings. KEY is an option name of this command (``gro-flush-timeout-us=50``,
    ``udp-tunnel=vxlan:4789``, converted and checked exactly as on the command line) or a
    GroConfig field name (``poll_gap_ns=50000``, as in baselines and Parquet metadata)."""
    from gropcap.gro.config import GroConfig

    fields = {f.name for f in dataclasses.fields(GroConfig)} - {"model"}
    params = _gro_params(ctx)
    kw = dict(gro_kw)
    internal = []
    for text in settings:
        key, sep, value = text.partition("=")
        key = key.strip().lstrip("-")
        if sep and key.replace("-", "_") in fields:
            internal.append(f"{key.replace('-', '_')}={value}")
            continue
        found = params.get(key) or params.get(key.replace("_", "-"))
        if not sep or found is None:
            raise click.BadParameter(
                f"{text!r} is not KEY=VALUE with KEY one of: {', '.join(_shown_names(params))} "
                f"(GroConfig field names such as poll_gap_ns are accepted too)",
                param_hint=f"'{option}'")
        param, negative = found
        try:
            v = param.process_value(ctx, (value,) if param.multiple else value)
        except click.BadParameter as e:
            raise click.BadParameter(f"{text!r}: {e.message}",
                                     param_hint=f"'{option}'") from None
        kw[param.name] = (not v) if negative else v
    return _apply_settings(_make_gro_config(**kw), internal, option)


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
                                     param_hint=f"'{option}'")
        default = getattr(GroConfig(), key)
        try:
            if key == "kernel":
                changes[key] = KernelProfile.parse(value)
            elif key == "rss_key":
                changes[key] = bytes.fromhex(value.replace(":", ""))
            elif key in ("tunnel_gro", "mtu"):
                v = value.strip().lower()
                changes[key] = None if v in ("none", "", "auto") else \
                    int(v) if key == "mtu" else v in ("1", "true", "yes", "on")
            elif isinstance(default, bool):
                changes[key] = value.lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                changes[key] = int(value)
            else:
                changes[key] = value
            config = config.replace(**changes)
        except (ValueError, ConfigError) as e:
            msg = e.one_line() if isinstance(e, ConfigError) else str(e)
            raise click.BadParameter(f"{text!r}: {msg}", param_hint=f"'{option}'") from None
    return config


@click.command(cls=Command)
@click.argument("a", type=CapturePath())
@click.argument("b", required=False, type=CapturePath())
@click.option("--set-a", "set_a", multiple=True, metavar="KEY=VALUE",
              help="Configuration change for side A: an option below without its dashes, "
                   "e.g. kernel=6.1, gro-flush-timeout-us=50, no-native-gro=true "
                   "(repeatable).")
@click.option("--set-b", "set_b", multiple=True, metavar="KEY=VALUE",
              help="Configuration change for side B (e.g. kernel=5.15, queues=4, "
                   "udp-tunnel=vxlan:4789).")
@click.option("--model", type=click.Choice(["ideal", "napi", "both"]), default="both",
              show_default=True, help="Batch model(s) to run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@_ENGINE
@_gro_options
@_decode_options
@click.pass_context
def compare(ctx, a, b, set_a, set_b, model, fmt, engine, **kw):
    """Two captures side by side (A B), or one capture under two configurations
    (A --set-b kernel=6.1)."""
    from gropcap.run.memory import analyze
    from gropcap.report.compare import compare_dict, render_compare

    options = _make_decode_options(**_split(kw, _DECODE_KEYS))
    gro_kw = _split(kw, _GRO_KEYS)
    models = ("ideal", "napi") if model == "both" else (model,)
    cfg_a = _config_for(ctx, gro_kw, set_a, "--set-a")
    cfg_b = _config_for(ctx, gro_kw, set_b, "--set-b")
    from gropcap.gro.config import needs_reference

    # rules only the reference model has (gro.reference.needs_reference; none today)
    eng_a = "reference" if needs_reference(cfg_a) else engine
    eng_b = "reference" if needs_reference(cfg_b) else engine
    ra = analyze(a, cfg_a, models=models, decode_options=options, engine=eng_a)
    rb = analyze(b or a, cfg_b, models=models, decode_options=options, engine=eng_b)
    if fmt == "json":
        click.echo(json.dumps(compare_dict(ra, rb), indent=2))
    else:
        click.echo(render_compare(ra, rb, color=sys.stdout.isatty()), nl=False)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--dev", default="DEV", show_default=True, metavar="NAME",
              help="The receiving device's name in the printed commands.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@_ENGINE
@_gro_options
@_decode_options
def tune(files, dev, fmt, engine, **kw):
    """Rank the receive-side changes (gro_flush_timeout + napi_defer_hard_irqs, BIG TCP,
    RX queues, rx-gro-list, GRO on tunnel devices, UDP tunnel sockets) by the napi
    model's aggregation on the captures, with the command for each. The options describe
    the receiver as it is now."""
    from gropcap.report.tune import render_tune
    from gropcap.report.tune import tune as run

    options, config = _configs(kw)
    result = run(list(files), config, decode_options=options, dev=dev, engine=engine)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(render_tune(result), nl=False)


COMMANDS = {"explain": explain, "baseline": baseline, "compare": compare, "tune": tune}


def register(group: click.Group) -> None:
    """Add `explain`, `baseline` and `compare` to a click group (no-op if present)."""
    for name, cmd in COMMANDS.items():
        if name not in group.commands:
            group.add_command(cmd, name=name)


__all__ = ["explain", "baseline", "compare", "tune", "register", "COMMANDS"]
