"""Which GRO engine runs, and GRO over a run's batches with the engine state carried.

:func:`simulate`: a whole table on the numba engine, or the plain-Python reference model
(asked for, or the only one that implements the configuration). :class:`BatchGro`: one
model over the batches of a run (``engine.simulate_batch``, the state carried from batch
to batch): the bounded-memory core spills its parts, :func:`simulate_batches` (the
in-memory run) assembles them (``engine.assemble``). :class:`BatchGroModels`: several
models over the same batches from one preparation per batch (the bounded-memory core).

Layer: run/, calls gro/ only.
"""

from __future__ import annotations

import pyarrow as pa

from gropcap.gro.config import GroConfig
from gropcap.gro.result import GroResult
from gropcap.run.options import check_engine


def simulate(packets: pa.Table, config: GroConfig, *, engine: str = "fast",
             polls=None, coalesced=None, runs=None) -> GroResult:
    """Run one GRO engine (``"fast"`` numba or ``"reference"`` plain Python).

    Configurations that use a receive-path feature only the reference model implements
    (``gro.reference.needs_reference``; none today: UDP GRO modes and UDP tunnel sockets
    are in the numba engine too) run on the reference model even when ``engine="fast"``;
    the results are the same by definition of the reference, only slower.

    ``coalesced``: a :class:`gropcap.gro.coalesced.CoalescedInput` (frames captured after TSO/GRO
    arrive as GSO packets, ``count`` = their segments); None: every frame is one segment.

    ``config.poll_acks`` (napi model, no explicit ``polls``): the polls the receiver's
    ACKs show reach the engine as arrival times (:mod:`gropcap.receive.ackpolls`).

    ``runs``: the receiver run of each row (``run/receivers.py``; None: one run).
    """
    from gropcap.gro.config import needs_reference

    check_engine(engine)
    if config.poll_acks and config.model == "napi" and polls is None:
        from gropcap.receive import ackpolls
        packets, evidence = ackpolls.retimed(packets, config)
        if evidence:
            config = ackpolls.engine_config(config)
    if engine == "reference" or needs_reference(config):
        from gropcap.gro.reference import simulate as run
    else:
        from gropcap.gro.engine import simulate as run
    more = {} if runs is None else {"runs": runs}
    if coalesced is not None and coalesced.num_coalesced:
        return run(packets, config, polls=polls, coalesced=coalesced, **more)
    return run(packets, config, polls=polls, **more)


class BatchGro:
    """One model's numba GRO over the batches of a run, in capture order: the engine
    state (held super-packets, flows, polls, counters) carried from one batch to the
    next (``engine.simulate_batch``)."""

    def __init__(self, config: GroConfig):
        self.config = config
        self.state = None

    def feed(self, table: pa.Table, *, final: bool = False, coalesced=None):
        """The next batch (``final``: the last one, flushes what is held): its
        ``engine.BatchResult``."""
        from gropcap.gro.engine import simulate_batch
        part, self.state = simulate_batch(table, self.config, self.state, final=final,
                                          coalesced=coalesced)
        return part

    def next_run(self) -> None:
        """The next receiver run on fresh receivers (``engine.next_run``; the run
        before was fed ``final``)."""
        from gropcap.gro.engine import next_run
        self.state = next_run(self.state)


class BatchGroModels:
    """Several models' numba GRO over the batches of a run (configs differing only in
    ``model``), each batch prepared once for all of them
    (``engine.simulate_batch_models``: column reads, bypass codes, lengths, key classes
    and flow ids shared; each model's results equal its own :class:`BatchGro`'s).

    ``threaded``: the models after the first run in a thread of their own while the
    calling thread runs the first (``simulate_batch_models``' ``pool``; the same
    results). It runs at the caller's priority (``gropcap.priority``): the caller
    waits for it. :meth:`close` stops it."""

    def __init__(self, configs: list[GroConfig], *, threaded: bool = False):
        self.configs = list(configs)
        self.states = None
        self._pool = None
        if threaded and len(self.configs) > 1:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(len(self.configs) - 1,
                                            thread_name_prefix="gropcap-model")

    def feed(self, table: pa.Table, *, final: bool = False, coalesced=None) -> list:
        """The next batch (``final``: the last one): one ``engine.BatchResult`` per
        config."""
        from gropcap.gro.engine import simulate_batch_models
        parts, self.states = simulate_batch_models(table, self.configs, self.states,
                                                   final=final, coalesced=coalesced,
                                                   pool=self._pool)
        return parts

    def instances(self) -> list[int]:
        """Per config, the super-packet instances numbered so far (every receiver run's)."""
        return [int(s.kernel.ctr[1]) for s in self.states or []]

    def close(self) -> None:
        """Stop the models' thread (``threaded``; a batch in it is finished first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def next_run(self) -> None:
        """The next receiver run on fresh receivers (``engine.next_run``; the run
        before was fed ``final``)."""
        from gropcap.gro.engine import next_run
        self.states = next_run(self.states)


def simulate_batches(tables: list, config: GroConfig, *, engine: str = "fast",
                     coalesced=None, runs=None) -> GroResult:
    """GRO over a run's decoded batches (tables in capture order): :class:`BatchGro`
    fed batch by batch, the parts assembled (``engine.assemble``). The reference model
    (asked for, or the only one that implements ``config``) runs on the whole table.
    ``coalesced``: the whole run's ``gso.CoalescedInput`` (None: none). ``runs``: the
    receiver run of each row (``run/receivers.py``; None: one run): each run's last
    rows are fed ``final`` and the next run starts on fresh receivers."""
    from gropcap.decode.schema import PACKET_SCHEMA
    from gropcap.gro.config import needs_reference

    check_engine(engine)
    if engine == "reference" or needs_reference(config):
        whole = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
        return simulate(whole, config, engine=engine, coalesced=coalesced, runs=runs)
    from gropcap.gro.engine import assemble
    from gropcap.gro.coalesced import CoalescedInput
    from gropcap.gro.result import run_bounds
    run = BatchGro(config)
    parts = []
    lo = 0
    ends = [hi for _, hi in run_bounds(runs, sum(t.num_rows for t in tables))][:-1]
    flushed: set = set()
    for t in tables:
        hi = lo + t.num_rows
        # a batch across a run's end is fed in two, the run flushed between them
        cuts = [lo] + [e for e in ends if lo < e < hi] + [hi]
        for a, b in zip(cuts, cuts[1:]):
            if a in ends and a not in flushed:
                flushed.add(a)
                parts.append(run.feed(PACKET_SCHEMA.empty_table(), final=True))
                run.next_run()
            co = None if coalesced is None else CoalescedInput(
                coalesced.is_gso[a:b], coalesced.gso_size[a:b], coalesced.segs[a:b],
                coalesced.source[a:b])
            parts.append(run.feed(t.slice(a - lo, b - a), coalesced=co))
        lo = hi
    parts.append(run.feed(PACKET_SCHEMA.empty_table(), final=True))
    return assemble(parts, config)


__all__ = ["simulate", "simulate_batches", "BatchGro", "BatchGroModels"]
