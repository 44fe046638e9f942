"""Which GRO engine runs a whole table: the numba engine, or the plain-Python reference
model (asked for, or the only one that implements the configuration).

Layer: run/, calls gro/ only.
"""

from __future__ import annotations

import pyarrow as pa

from gropcap.gro.config import GroConfig
from gropcap.gro.result import GroResult
from gropcap.run.options import check_engine


def simulate(packets: pa.Table, config: GroConfig, *, engine: str = "fast",
             polls=None, coalesced=None) -> GroResult:
    """Run one GRO engine (``"fast"`` numba or ``"reference"`` plain Python).

    Configurations that use a receive-path feature only the reference model implements
    (``gro.reference.needs_reference``: UDP GRO modes, UDP tunnel sockets) run on the
    reference model even when ``engine="fast"``; the results are the same by definition of
    the reference, only slower.

    ``coalesced``: a :class:`gropcap.gso.CoalescedInput` (frames captured after TSO/GRO
    arrive as GSO packets, ``count`` = their segments); None: every frame is one segment.
    """
    from gropcap.gro.reference import needs_reference

    check_engine(engine)
    if engine == "reference" or needs_reference(config):
        from gropcap.gro.reference import simulate as run
    else:
        from gropcap.gro.engine import simulate as run
    if coalesced is not None and coalesced.num_coalesced:
        return run(packets, config, polls=polls, coalesced=coalesced)
    return run(packets, config, polls=polls)


__all__ = ["simulate"]
