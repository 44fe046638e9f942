"""The notebook API: ``gropcap.analyze(path, kernel="6.1", queues=4)``.

Layer: an entry point beside the command line (cli/app.py). The keywords are the options of ``gropcap analyze``
(read from its click parameters, so the two cannot drift): each is named after its long
option (``--gro-flush-timeout-us`` -> ``gro_flush_timeout_us``, ``--udp-tunnel`` ->
``udp_tunnel``) and converted and checked exactly as on the command line, then handed to
:func:`gropcap.run.core.analyze_run` with ``in_memory=True``. Options that only steer the command's output or the way
it runs (``--out``, ``--format``, ``--plot``, ``--jobs``, ...) are not keywords: a notebook
gets the :class:`~gropcap.analysis.Analysis` back and writes or plots it itself. The run
is the one core's (``run.core.analyze_run``) with the collecting sink.
"""

from __future__ import annotations

import contextlib

from gropcap.errors import ConfigError

# options of `gropcap analyze` a notebook does not pass: it gets the Analysis object back
CLI_ONLY = ("files", "fmt", "out_dir", "force", "plot", "stream", "quiet", "top", "jobs",
            "parallel", "scheduler", "scratch", "packet_columns", "threads")
# analyze's own options :func:`analyze` hands on (besides cli._GRO_KEYS, cli._DECODE_KEYS)
RUN_KEYS = ("model", "engine", "decoder", "egress_scenario", "egress_features", "egress_mtu",
            "captures")


def _keyword(param) -> str:
    """``--gro-flush-timeout-us`` -> ``gro_flush_timeout_us`` (the first long option)."""
    long = [o for o in param.opts if o.startswith("--")]
    return long[0][2:].replace("-", "_") if long else param.name


def keyword_params() -> dict:
    """``{keyword: click.Parameter}`` of every `gropcap analyze` option a notebook can pass
    (also under the parameter's own name where it differs, e.g. ``udp_tunnels``)."""
    import click

    from gropcap.cli import app as cli

    handled = set(cli._GRO_KEYS) | set(cli._DECODE_KEYS) | set(RUN_KEYS)
    out = {}
    for p in cli.analyze.params:
        # an option nobody hands on is not a keyword (tests/run/test_notebook_api.py fails)
        if not isinstance(p, click.Argument) and p.name in handled:
            out[_keyword(p)] = p
    for p in list(out.values()):
        out.setdefault(p.name, p)
    return out


def keywords() -> list[str]:
    """The option keywords :func:`analyze` accepts, sorted."""
    return sorted({_keyword(p) for p in keyword_params().values()})


def _convert(options: dict) -> dict:
    """Keyword values -> ``{parameter name: value}`` for every option, as click would parse
    them (defaults filled in); raises TypeError (unknown keyword) or ConfigError."""
    import click

    from gropcap.cli import app as cli

    params = keyword_params()
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise TypeError(f"analyze() got unexpected keyword argument(s) "
                        f"{', '.join(map(repr, unknown))}; option keywords: "
                        f"{', '.join(keywords())} (and models, config, decode_options, "
                        f"progress)")
    given = {params[k].name: (k, v) for k, v in options.items()}
    # under the group's context settings: click caches a command's help option on the
    # first context made for it, and a bare context would leave it without -h
    parent = click.Context(cli.main, info_name="gropcap", **cli.main.context_settings)
    ctx = click.Context(cli.analyze, info_name="analyze", parent=parent)
    values = {}
    for p in {id(p): p for p in params.values()}.values():
        key, given_value = given.get(p.name, (None, None))
        raw = given_value
        if key is None:
            raw = p.get_default(ctx)
        elif p.multiple and (isinstance(raw, (str, bytes, int)) or raw is None):
            raw = () if raw is None else (raw,)
        try:
            values[p.name] = p.process_value(ctx, raw)
        except click.BadParameter as e:
            raise ConfigError(f"{key or p.name}={given_value!r}: {e.message}") from None
    return values


def analyze(paths, config=None, *, models=None, decode_options=None, progress=None,
            **options):
    """Decode captures and simulate GRO; the keywords are `gropcap analyze`'s options.

    Args:
        paths: a capture file, a directory, or a list of them.
        config: a :class:`~gropcap.gro.config.GroConfig`, instead of the receive and
            kernel keywords (``kernel``, ``queues``, ``budget``, ``hz``, ...).
        models: ``("ideal", "napi")`` by default; or the CLI's ``model="napi"``.
        decode_options: a :class:`~gropcap.decode.options.DecodeOptions`, instead of the
            tunnel-port keywords (``vxlan_port``, ``geneve_port``, ``dsa_tag``, ...).
        progress: a :class:`gropcap.run.progress.Progress`. None: no bar, and the
            command line's notes on stderr ("compiling GRO kernels, first run only";
            a first call on the reference path).
        **options: any option of ``gropcap analyze`` that changes the result, named after
            its long option: ``kernel="6.1"``, ``model="napi"``, ``queues=4``,
            ``gro_flush_timeout_us=50``, ``udp_tunnel="vxlan:4789"`` (repeatable options
            take one value or a list), ``native_gro=False``, ``engine="reference"``,
            ``egress="decap"``, ... (:func:`keywords` lists them).

    Returns:
        An :class:`~gropcap.analysis.Analysis`. A first call on a cold kernel cache with
        a capture of at most ``gro.engine.COLD_REFERENCE_MAX_BYTES`` (4 MiB), naming
        neither ``engine`` nor ``decoder``, runs on the reference decoder and engine
        (the same results, nothing compiled, in seconds; ``Analysis.engine`` is
        ``"reference"``), as the command line does, and fills the Analysis' summary
        and tables there too (``run/cold.py``).

    Raises:
        TypeError: an unknown keyword (the message lists the valid ones).
        ConfigError: a bad value (the message names the keyword), or ``config`` /
            ``decode_options`` given together with keywords they would override.

    Example:
        >>> a = gropcap.analyze("sample_pcaps/real_ipv4.pcap", kernel="6.1")  # doctest: +SKIP
        >>> a.summary()["models"]["napi"]["aggregation_ratio"]                # doctest: +SKIP
    """
    import click

    from gropcap.cli import app as cli
    from gropcap.run.options import EgressOptions

    if "model" in options and models is not None:
        raise ConfigError("give models=... or model=..., not both")
    egress_obj = options.pop("egress") if isinstance(options.get("egress"),
                                                      EgressOptions) else None
    values = _convert(options)
    given = {keyword_params()[k].name for k in options}
    # a receiver profile goes with config= too: pipeline.analyze applies it where the
    # config keeps a default
    receiver = values.pop("receiver", None)
    given.discard("receiver")
    gro_keys = tuple(k for k in cli._GRO_KEYS if k != "receiver")
    for obj, keys, what in ((config, gro_keys, "config"),
                            (decode_options, cli._DECODE_KEYS, "decode_options")):
        clash = sorted(given & set(keys))
        if obj is not None and clash:
            raise ConfigError(f"{what}= and the keyword(s) {', '.join(clash)} both set it",
                              hint=f"pass one of them (keywords build the {what})")
    try:
        if config is None:
            config = cli._make_gro_config(**cli._split(values, gro_keys))
        if decode_options is None:
            decode_options = cli._make_decode_options(**cli._split(values, cli._DECODE_KEYS))
    except click.BadParameter as e:   # the shared converters speak click
        raise ConfigError(e.message) from None
    if models is None:
        model = values["model"]
        models = ("ideal", "napi") if model == "both" else (model,)
    egress = egress_obj
    if egress is None and (values.get("egress_scenario") or values.get("egress_mtu")):
        egress = EgressOptions(values["egress_scenario"] or "encap",
                               values["egress_features"], values["egress_mtu"])
    engine, decoder = values["engine"], values["decoder"]
    # a first call on a cold kernel cache with a small capture: the reference decoder and
    # engine, nothing compiled (run/cold.py), unless the caller named one of them
    from gropcap.run import cold
    reference = not given & {"engine", "decoder"} and cold.takes_reference_path(paths)
    if reference:
        engine = decoder = "reference"
    # without a progress of the caller's: no bar, but the command line's notes on stderr
    # (the kernels compiling, a first run on the reference path): a notebook's first call
    # is otherwise a minute of silence
    from gropcap.run.progress import Progress
    own = Progress(False, quiet=False, compile_note=not reference) if progress is None \
        else contextlib.nullcontext(progress)
    # the one core (run/core.py) with the collecting sink: an Analysis in memory
    from gropcap.run.core import analyze_run
    with own as progress, cold.reference_path() if reference else contextlib.nullcontext():
        if reference:
            progress.note(cold.note())
        a = analyze_run(paths, config, models=models, decode_options=decode_options,
                        engine=engine, decoder=decoder, egress=egress, progress=progress,
                        receiver=receiver, in_memory=True, captures=values["captures"])
        if reference:
            cold.fill(a)
    return a


__all__ = ["analyze", "keywords", "keyword_params", "CLI_ONLY", "RUN_KEYS"]
