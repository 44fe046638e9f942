"""The receive context: the parameters a capture does not show, and where each came from.

Layer: configuration (beside ``gro/config.py``): a :class:`ReceiveContext` maps each
receive parameter (MTU, NAPI budget, HZ, gro_flush_timeout, ...) to ``(value, source)``,
source one of :data:`SOURCES`. The CLI builds it from its options
(:meth:`ReceiveContext.from_click`: an option the user typed is ``option``, else
``default``), a notebook from a :class:`GroConfig` (:meth:`ReceiveContext.from_config`:
a value other than the default is ``option``); the MTU inferred from the capture is
``inferred`` (:meth:`ReceiveContext.with_mtu`); a receiver profile marks its values
``profile`` (:meth:`ReceiveContext.apply_profile`, an option still wins). Reports render
it (``report/receive.py``); it decides nothing itself.
"""

from __future__ import annotations

SOURCES = ("default", "inferred", "profile", "option")

# name -> (GroConfig field, CLI parameter, to display unit, from display unit). Display
# values are what the options take (microseconds for the timers).
_US = (lambda ns: ns // 1000 if ns % 1000 == 0 else ns / 1000,
       lambda us: int(round(float(us) * 1000)))
_SAME = (lambda v: v, lambda v: v)
PARAMS = {
    "mtu": ("mtu", "mtu", *_SAME),
    "budget": ("budget", "budget", *_SAME),
    "hz": ("hz", "hz", *_SAME),
    "gro_flush_timeout_us": ("gro_flush_timeout_ns", "gro_flush_timeout_us", *_US),
    "napi_defer_hard_irqs": ("napi_defer_hard_irqs", "napi_defer_hard_irqs", *_SAME),
    "poll_gap_us": ("poll_gap_ns", "poll_gap_us", *_US),
    "poll_acks": ("poll_acks", "poll_acks", lambda v: "on" if v else "off",
                  lambda s: s in (True, "on")),
    "queues": ("queues", "queues", *_SAME),
    "rss": ("rss", "rss", *_SAME),
    "udp_tunnels": ("udp_tunnels", "udp_tunnels",
                    lambda t: ",".join(f"{k}:{p}" for k, p in t) or "none",
                    lambda s: "" if s == "none" else s),
    "tunnel_gro": ("tunnel_gro", "tunnel_gro",
                   lambda v: "not modelled" if v is None else ("on" if v else "off"),
                   lambda s: None if s in (None, "not modelled") else s in (True, "on")),
    "native_gro": ("native_gro", "native_gro", lambda v: "on" if v else "off",
                   lambda s: s in (True, "on")),
    "udp_gro": ("udp_gro", "udp_gro", *_SAME),
    "gro_max_size": ("gro_max_size", "gro_max_size", *_SAME),
    "gro_ipv4_max_size": ("gro_ipv4_max_size", "gro_ipv4_max_size", *_SAME),
}


class ReceiveContext:
    """``{name: (value, source)}`` for every name of :data:`PARAMS` (display units).

    >>> from gropcap.gro.config import GroConfig
    >>> rc = ReceiveContext.from_config(GroConfig(queues=4))
    >>> rc["queues"], rc["budget"]
    ((4, 'option'), (64, 'default'))
    """

    def __init__(self, values: dict[str, tuple]):
        for name, (_v, source) in values.items():
            if source not in SOURCES:
                raise ValueError(f"{name}: unknown source {source!r}")
        self.values = dict(values)

    def __getitem__(self, name: str) -> tuple:
        return self.values[name]

    def __eq__(self, other) -> bool:
        return isinstance(other, ReceiveContext) and self.values == other.values

    def __repr__(self) -> str:
        return f"ReceiveContext({self.values!r})"

    @classmethod
    def from_config(cls, config, given=None) -> "ReceiveContext":
        """Values of ``config``; ``given``: the names set by an option (None: every value
        other than the default counts as given)."""
        from gropcap.gro.config import GroConfig

        default = GroConfig()
        out = {}
        for name, (fld, _param, show, _parse) in PARAMS.items():
            value = getattr(config, fld)
            if given is None:
                src = "option" if value != getattr(default, fld) else "default"
            else:
                src = "option" if name in given else "default"
            out[name] = (show(value), src)
        return cls(out)

    @classmethod
    def from_click(cls, ctx, config) -> "ReceiveContext":
        """From a click context: a parameter typed on the command line (or taken from
        the environment) is ``option``, one left at its default is ``default``."""
        from click.core import ParameterSource

        given = set()
        for name, (_fld, param, _show, _parse) in PARAMS.items():
            try:
                src = ctx.get_parameter_source(param)
            except (KeyError, AttributeError):
                src = None
            if src in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
                given.add(name)
        return cls.from_config(config, given)

    def with_mtu(self, inference) -> "ReceiveContext":
        """A copy whose ``mtu`` is the MTU in use (an :class:`gropcap.gro.mtu.MtuInference`):
        ``inferred`` or ``default`` when the capture decided it."""
        values = dict(self.values)
        if inference is not None and (self.values.get("mtu", (None, "default"))[1]
                                      not in ("option", "profile")):
            values["mtu"] = (inference.mtu, "inferred" if inference.source == "inferred"
                             else "default")
        return ReceiveContext(values)

    def apply_profile(self, profile: dict) -> dict:
        """Mark the values of a receiver profile (``{name: value}`` in display units,
        names of :data:`PARAMS`) as coming from ``profile``; a value given as an option
        keeps its source and value. Returns the :class:`GroConfig` changes to make
        (``config.replace(**changes)``).

        >>> from gropcap.gro.config import GroConfig
        >>> rc = ReceiveContext.from_config(GroConfig(), given={"hz"})
        >>> rc.apply_profile({"hz": 1000, "budget": 32})
        {'budget': 32}
        >>> rc["budget"], rc["hz"]
        ((32, 'profile'), (250, 'option'))
        """
        changes = {}
        for name, value in profile.items():
            if name not in PARAMS:
                raise KeyError(f"unknown receive parameter {name!r}; one of "
                               f"{', '.join(PARAMS)}")
            if self.values.get(name, (None, "default"))[1] == "option":
                continue
            fld, _param, show, parse = PARAMS[name]
            changes[fld] = parse(value)
            self.values[name] = (value, "profile")
        return changes

    def as_dict(self) -> dict:
        """``{name: {"value": v, "source": s}}`` (the JSON report's ``receive``)."""
        return {k: {"value": v, "source": s} for k, (v, s) in self.values.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "ReceiveContext":
        return cls({k: (e["value"], e["source"]) for k, e in d.items()})


__all__ = ["ReceiveContext", "PARAMS", "SOURCES"]
