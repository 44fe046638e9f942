"""The options of an analysis run, defined and checked in one place.

Every entry point (``gropcap analyze``, ``gropcap.analyze``, the Dask runner, ``tune``)
resolves its options through :func:`run_options` before any packet is read, and asks
:func:`memory_reason` whether a run needs the whole decoded table in memory.

Layer: below the core (``run/core.py``) and the entry points; imports gro/ and decode/
only.
"""

from __future__ import annotations

import dataclasses

from gropcap.decode.options import DecodeOptions
from gropcap.errors import ConfigError
from gropcap.gro.config import MODELS, GroConfig

DECODERS = ("fast", "reference")
ENGINES = ("reference", "fast")


@dataclasses.dataclass(frozen=True)
class EgressOptions:
    """Where the super-packets leave: ``scenario`` ``"encap"`` (forwarded still
    encapsulated) or ``"decap"`` (decapsulated, then forwarded), the egress device's
    offload features (``"tso,tx-gre-segmentation"``), and its MTU (None: segments fit)."""

    scenario: str = "encap"
    feature_text: str = "tso,tx-tcp6-segmentation"
    mtu: int | None = None

    @property
    def features(self) -> int:
        from gropcap.egress import parse_features
        return parse_features(self.feature_text)


def check_decoder(decoder: str) -> None:
    if decoder not in DECODERS:
        raise ConfigError(f"unknown decoder {decoder!r}", hint=f"use one of {DECODERS}")


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}", hint=f"use one of {ENGINES}")


def run_options(config, decode_options, models, *, decoder: str | None = None,
                engine: str | None = None, egress=None, captures: str | None = None):
    """Defaults and checks shared by every entry point: ``(config, decode_options,
    models)``; a bad model, decoder, engine, egress feature name or ``captures``
    (``run.receivers.CAPTURES``) raises :class:`ConfigError` before any work starts."""
    config = config or GroConfig()
    decode_options = decode_options or DecodeOptions()
    models = list(models)
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"unknown model {m!r}", hint=f"use one of {MODELS}")
    if decoder is not None:
        check_decoder(decoder)
    if engine is not None:
        check_engine(engine)
    if egress is not None:
        egress.features  # validate the feature names before any work is reported
    if captures is not None:
        from gropcap.run.receivers import check_captures
        check_captures(captures)
    return config, decode_options, models


def memory_reason(config: GroConfig, *, engine: str = "fast", decoder: str = "fast",
                  egress=None) -> str | None:
    """None when the core runs batch by batch in bounded memory, else why this run needs
    the whole decoded table (one line): what only the in-memory models implement today
    (the reference engine, whose plain-Python model replays a whole table; a rule only
    the reference model implements (none today: gro.reference.needs_reference)) or what
    reads the whole table (none today). Either decoder (the reference one reads and
    decodes batch by batch too), egress accounting, the plots' counts
    (``run.plotdata``), ``--poll-acks`` (a pass over the capture before GRO,
    ``run.stream``) and the gro_cells stage (``run.cells``, egress after it included)
    run batch by batch."""
    from gropcap.gro.config import needs_reference
    check_decoder(decoder)
    if engine != "fast":
        return "only the fast engine runs batch by batch"
    if needs_reference(config):
        return "the configuration uses a rule only the reference model implements"
    return None


__all__ = ["DECODERS", "ENGINES", "EgressOptions", "run_options", "memory_reason",
           "check_decoder", "check_engine"]
