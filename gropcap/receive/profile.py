"""Receiver profiles: the receive context of one host, in a small TOML file.

A capture does not show how the receiving host polled (NAPI budget, where polls ended,
HZ, ``gro_flush_timeout`` / ``napi_defer_hard_irqs``), how many RX queues it had or its
MTU. A receiver profile states them; ``gropcap calibrate`` (:mod:`gropcap.calibrate`)
fits them to the kernel's own post-GRO view and writes one. ``--receiver PROFILE`` (and
``gropcap.analyze(..., receiver=...)``) applies it to other captures of that host; an
explicit option still wins over the profile.

Layer: configuration (beside ``gro/config.py``): file -> ``{option_name: value}`` ->
GroConfig changes; hands the CLI and pipeline plain dicts and a :class:`ReceiverInfo`.

Public API::

    load_profile(path) -> {option_name: value}        # e.g. {"poll_gap_us": 2000.0, ...}
    read_profile(path) -> {"receiver": {...}, "fit": {...}}
    save_profile(path, values, fit=None, force=False)
    apply_options(options, profile, explicit) -> (options, applied, unapplied)
    apply_profile(config, profile_or_path, explicit=None) -> (config, ReceiverInfo)
    resolve_receiver(config, receiver) -> (config, ReceiverInfo | None)
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from gropcap.errors import ConfigError

PROFILE_FORMAT = 1

# A receive parameter the napi model gains is one entry here (and in calibrate.GRID and
# calibrate.FIT_KEYS for calibrate to fit it).
# What a profile may hold: option name (as the CLI spells it, without "--" and with "_")
# -> (GroConfig field, option value -> field value, field value -> option value, type).
# The napi model's receive parameters first (what calibrate fits), then receive-path
# switches a user may state for the host.
_US = (lambda v: int(round(float(v) * 1000)), lambda v: v / 1000)
_SAME = (lambda v: v, lambda v: v)
PROFILE_KEYS = {
    "queues": ("queues", *_SAME, int),
    "budget": ("budget", *_SAME, int),
    "poll_gap_us": ("poll_gap_ns", *_US, float),
    "poll_acks": ("poll_acks", *_SAME, bool),
    "hz": ("hz", *_SAME, int),
    "gro_flush_timeout_us": ("gro_flush_timeout_ns", *_US, float),
    "napi_defer_hard_irqs": ("napi_defer_hard_irqs", *_SAME, int),
    "mtu": ("mtu", *_SAME, int),
    "gro_max_size": ("gro_max_size", *_SAME, int),
    "gro_ipv4_max_size": ("gro_ipv4_max_size", *_SAME, int),
    "rss": ("rss", *_SAME, str),
    "udp_gro": ("udp_gro", *_SAME, str),
    "udp_tunnels": ("udp_tunnels", *_SAME, str),
    "native_gro": ("native_gro", *_SAME, bool),
    "tunnel_gro": ("tunnel_gro", *_SAME, bool),
}
_COMMENTS = {
    "queues": "RX queues (RSS spreads flows over them)",
    "budget": "NAPI budget: frames per poll",
    "poll_gap_us": "a gap longer than this between frames of a queue ends a poll",
    "poll_acks": "a poll also ends where the receiver's ACKs show a delivery",
    "hz": "CONFIG_HZ (jiffy of the old-packet flush after a full-budget poll)",
    "gro_flush_timeout_us": "device gro_flush_timeout",
    "napi_defer_hard_irqs": "device napi_defer_hard_irqs",
    "mtu": "receiving device MTU: frames above it were captured already coalesced",
}
# bounds checked here for keys GroConfig may not know (gro/config.py checks the rest)
_RANGES = {"mtu": (68, 65536)}


# --- the profile file ------------------------------------------------------------------

def _check_value(path, key: str, value, typ):
    where = f"[receiver] {key}"
    if typ is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, found {value!r}", path=path)
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, found {value!r}", path=path)
        if value < 0:
            raise ConfigError(f"{where}: must not be negative, found {value}", path=path)
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: expected a non-negative number, found {value!r}",
                              path=path)
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, found {value!r}", path=path)
    return value


def read_profile(path) -> dict:
    """The whole profile: ``{"format": 1, "receiver": {...}, "fit": {...}}``, checked.

    Raises :class:`ConfigError` naming the file and the key for anything malformed (not
    TOML, no ``[receiver]`` table, an unknown key, a value of the wrong type, or values
    GroConfig refuses)."""
    import tomllib

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("receiver profile not found", path=path,
                          hint="write one with `gropcap calibrate WIRE POSTGRO -o FILE`") \
            from None
    except OSError as e:
        raise ConfigError(f"cannot read receiver profile: {e.strerror}", path=path) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not a TOML receiver profile: {e}", path=path) from None
    fmt = doc.get("format", PROFILE_FORMAT)
    if fmt != PROFILE_FORMAT:
        raise ConfigError(f"format: profile format {fmt!r} is not {PROFILE_FORMAT}",
                          path=path, hint="re-run gropcap calibrate with this version")
    rec = doc.get("receiver")
    if not isinstance(rec, dict):
        raise ConfigError("[receiver]: no [receiver] table", path=path,
                          hint="a profile lists its values under [receiver]")
    for key, value in rec.items():
        if key not in PROFILE_KEYS:
            raise ConfigError(f"[receiver] {key}: unknown key", path=path,
                              hint=f"use {', '.join(PROFILE_KEYS)}")
        rec[key] = _check_value(path, key, value, PROFILE_KEYS[key][3])
        lo, hi = _RANGES.get(key, (None, None))
        if lo is not None and not lo <= rec[key] <= hi:
            raise ConfigError(f"[receiver] {key}: {rec[key]} out of range {lo}..{hi}",
                              path=path)
    # the values must make a valid configuration, one key at a time so the error names it
    from gropcap.gro.config import GroConfig
    fields = {f.name for f in dataclasses.fields(GroConfig)}
    base = GroConfig()
    for key, value in rec.items():
        fname, to_field = PROFILE_KEYS[key][:2]
        if fname not in fields:
            continue
        try:
            base.replace(**{fname: to_field(value)})
        except ConfigError as e:
            raise ConfigError(f"[receiver] {key}: {e.message}", path=path) from None
    if "fit" in doc and not isinstance(doc["fit"], dict):
        raise ConfigError("fit: expected a [fit] table", path=path)
    return doc


def load_profile(path) -> dict:
    """``{option_name: value}`` of a receiver profile (``[receiver]``), checked.

    >>> # load_profile("host.toml") -> {"budget": 64, "poll_gap_us": 2000.0, ...}
    """
    return dict(read_profile(path)["receiver"])


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else '"nan"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if v is None:
        return '""'
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def profile_text(values: dict, fit: dict | None = None) -> str:
    """The TOML text of a profile (:func:`save_profile` writes it)."""
    lines = ["# gropcap receiver profile: the receive context of one host.",
             "# `gropcap analyze|compare|explain|baseline --receiver FILE` applies [receiver];",
             "# an option given on the command line overrides the value here.",
             f"format = {PROFILE_FORMAT}", "", "[receiver]"]
    for key, v in values.items():
        if key not in PROFILE_KEYS:
            raise ConfigError(f"{key!r} is not a receiver profile key",
                              hint=f"use {', '.join(PROFILE_KEYS)}")
        c = _COMMENTS.get(key)
        item = f"{key} = {_toml_value(v)}"
        lines.append(f"{item:<30} # {c}" if c else item)
    if fit:
        lines += ["", "# how the values above were fitted (gropcap calibrate)", "[fit]"]
        flows = fit.get("flows", [])
        for key, v in fit.items():
            if key != "flows":
                lines.append(f"{key} = {_toml_value(v)}")
        for fl in flows:
            lines += ["", "[[fit.flows]]"] + [f"{k} = {_toml_value(v)}" for k, v in fl.items()]
    return "\n".join(lines) + "\n"


def save_profile(path, values: dict, fit: dict | None = None, *, force: bool = False) -> None:
    """Write a profile (TOML, atomically). ``values``: ``{option_name: value}``; ``fit``:
    what it was fitted on (scalars, lists, and ``flows``: a list of per-flow dicts)."""
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise ConfigError("output exists", path=path, hint="use --force to replace it")
    text = profile_text(values, fit)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# --- applying a profile ----------------------------------------------------------------

@dataclass(frozen=True)
class ReceiverInfo:
    """Which profile was used and what it set: ``applied`` keys took the profile's value,
    ``overridden`` keys were given explicitly, ``unapplied`` keys this build has no
    setting for (their values are kept in ``values``)."""

    path: str
    values: dict
    applied: tuple = ()
    overridden: tuple = ()
    unapplied: tuple = ()

    def as_dict(self) -> dict:
        return {"path": self.path, "values": dict(self.values), "applied": list(self.applied),
                "overridden": list(self.overridden), "unapplied": list(self.unapplied)}


def apply_options(options: dict, profile: dict, explicit=()) -> tuple[dict, list, list]:
    """Profile values into a dict of option values (the CLI's keyword arguments).

    Returns ``(options, applied, unapplied)``: a key in ``explicit`` keeps the option's
    value; a key ``options`` does not have is returned in ``unapplied``."""
    out = dict(options)
    applied, unapplied = [], []
    for key, value in profile.items():
        if key in explicit:
            continue
        if key not in out:
            unapplied.append(key)
            continue
        out[key] = value
        applied.append(key)
    return out, applied, unapplied


def apply_profile(config, profile, explicit=None):
    """Apply a profile (a path or a ``load_profile`` dict) to a :class:`GroConfig`.

    ``explicit``: option names that were given explicitly and win over the profile; None
    (the notebook API): every field where ``config`` differs from ``GroConfig()`` counts
    as given. Returns ``(config, ReceiverInfo)``.

    >>> # cfg, info = apply_profile(GroConfig(model="napi"), "host.toml")
    """
    from gropcap.gro.config import GroConfig

    path = "<dict>"
    if not isinstance(profile, dict):
        path = os.fspath(profile)
        profile = load_profile(path)
    fields = {f.name for f in dataclasses.fields(GroConfig)}
    default = GroConfig()
    changes, applied, overridden, unapplied = {}, [], [], []
    for key, value in profile.items():
        fname, to_field = PROFILE_KEYS[key][:2]
        if fname not in fields:
            unapplied.append(key)
            continue
        given = (key in explicit) if explicit is not None else \
            getattr(config, fname) != getattr(default, fname)
        if given:
            overridden.append(key)
            continue
        changes[fname] = to_field(value)
        applied.append(key)
    try:
        config = config.replace(**changes)
    except ConfigError as e:
        raise ConfigError(e.message, path=path) from None
    return config, ReceiverInfo(path, dict(profile), tuple(applied), tuple(overridden),
                                tuple(unapplied))


def resolve_receiver(config, receiver):
    """``receiver=`` of the pipeline entry points: None, a profile (path or dict) to apply
    to ``config``, or the :class:`ReceiverInfo` of one already applied (the CLI).
    Returns ``(config, ReceiverInfo | None)``."""
    if receiver is None or isinstance(receiver, ReceiverInfo):
        return config, receiver
    return apply_profile(config, receiver)
