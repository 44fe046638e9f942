"""Idle same-flow classes retired from the engine's tables (``gro/retire.py``): results
with a retirement before every batch equal those with none, and the tables then hold
only what is live."""

from __future__ import annotations

import contextlib
import pickle

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.gro import fast as K
from gropcap.gro import retire
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import (
    assemble, new_states, simulate, simulate_batch, simulate_batch_models,
)
from tests.gro.test_gro_engine_stream import CONFIGS, MODEL_PAIRS, assert_equal
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic


@contextlib.contextmanager
def retiring(every_batch: bool, keys_growth: int = 0):
    """Retire before every batch (``every_batch``) or never; a model's keys when they
    hold ``keys_growth`` times their live ones (0: always; 2: the default rule, so a
    model whose keys are mostly live keeps its tables while the union table retires)."""
    old = retire.RETIRE_MIN, retire.RETIRE_GROWTH, retire.KEYS_GROWTH
    retire.RETIRE_MIN, retire.RETIRE_GROWTH = (0, 0) if every_batch else (1 << 62, 2)
    retire.KEYS_GROWTH = keys_growth
    try:
        yield
    finally:
        retire.RETIRE_MIN, retire.RETIRE_GROWTH, retire.KEYS_GROWTH = old


def _counting(monkeypatch) -> list:
    """The union-table sizes before and after each retirement that happened."""
    seen = []
    real = retire.retire_idle

    def spy(states):
        before = len(states[0].union_ids) if states else 0
        done = real(states)
        if done:
            seen.append((before, len(states[0].union_ids)))
        return done
    monkeypatch.setattr("gropcap.gro.engine.retire_idle", spy)
    return seen


def _traffic(seed: int, n: int, tunnels: bool):
    rng = np.random.default_rng(seed)
    return rng, packet_table(random_traffic(rng, n, int(rng.integers(1, 12)), tunnels))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), cfg=st.sampled_from(CONFIGS),
       nbatch=st.integers(2, 12), tunnels=st.booleans(), roundtrip=st.booleans(),
       keys_growth=st.sampled_from([0, 2]))
def test_retiring_before_every_batch_changes_no_result(seed, n, cfg, nbatch, tunnels,
                                                       roundtrip, keys_growth):
    rng, table = _traffic(seed, n, tunnels)
    with retiring(False):
        want = simulate(table, cfg)
    cuts = [0] + sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist())) + [n]
    with retiring(True, keys_growth):
        state, parts = None, []
        for x, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            part, state = simulate_batch(table.slice(a, b - a), cfg, state,
                                         final=x == len(cuts) - 2)
            parts.append(part)
            if roundtrip:
                state = pickle.loads(pickle.dumps(state))
    assert_equal(assemble(parts, cfg), want)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), pair=st.sampled_from(MODEL_PAIRS),
       nbatch=st.integers(2, 12), tunnels=st.booleans(), roundtrip=st.booleans(),
       keys_growth=st.sampled_from([0, 2]))
def test_retiring_shared_tables_changes_no_result(seed, n, pair, nbatch, tunnels, roundtrip,
                                                  keys_growth):
    """Both models from one preparation: the union table they share is retired once
    for both (a class stays while either model's key for it is live)."""
    rng, table = _traffic(seed, n, tunnels)
    kernel, extra = pair
    cfgs = [GroConfig(kernel=KernelProfile.parse(kernel), **extra).replace(model=m)
            for m in ("ideal", "napi")]
    with retiring(False):
        want = [simulate(table, c) for c in cfgs]
    cuts = [0] + sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist())) + [n]
    with retiring(True, keys_growth):
        states, parts = new_states(cfgs), [[], []]
        for x, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            got, states = simulate_batch_models(table.slice(a, b - a), cfgs, states,
                                                final=x == len(cuts) - 2)
            for acc, part in zip(parts, got):
                acc.append(part)
            assert states[1].union_ids is states[0].union_ids
            if roundtrip:
                states = pickle.loads(pickle.dumps(states))
    for p, c, w in zip(parts, cfgs, want):
        assert_equal(assemble(p, c), w)


def test_retiring_models_prepared_apart_changes_no_result(monkeypatch):
    """Configs that differ in more than the model are prepared model by model but still
    share the union table (``new_states``): the ideal model's state has not looked up
    the classes the napi model's preparation added after it, and the retirement must
    not read past its class-to-key map (it did: an IndexError)."""
    seen = _counting(monkeypatch)
    table = packet_table(random_traffic(np.random.default_rng(5), 3000, 200, True))
    cfgs = [GroConfig(), GroConfig(model="napi", queues=2)]
    with retiring(False):
        want = [simulate(table, c) for c in cfgs]
    with retiring(True):
        parts = fed_in_batches(table, cfgs, 250)
    assert seen                               # it did retire, both states at once
    for p, c, w in zip(parts, cfgs, want):
        assert_equal(assemble(p, c), w)


def fed_in_batches(table, cfgs, rows: int, after=None) -> list:
    """``simulate_batch_models`` over ``table`` in batches of ``rows`` (the last one
    final), from :func:`new_states`: each model's parts. ``after(states, lo)`` runs
    after each batch and may return the states to go on with."""
    states, parts = new_states(cfgs), [[] for _ in cfgs]
    n = table.num_rows
    for a in range(0, n, rows):
        got, states = simulate_batch_models(table.slice(a, rows), cfgs, states,
                                            final=a + rows >= n)
        for acc, part in zip(parts, got):
            acc.append(part)
        if after is not None:
            states = after(states, a) or states
    return parts


def test_a_retirement_keeps_only_what_is_live(monkeypatch):
    """After a retirement each model's key table holds the keys with a held entry or a
    waiting row, the union table the classes of the napi model's live keys; results
    stay those of a run without retirement."""
    seen = _counting(monkeypatch)
    _, table = _traffic(11, 3000, True)
    cfgs = [GroConfig(), GroConfig(model="napi", queues=2)]
    with retiring(False):
        want = [simulate(table, c) for c in cfgs]
    with retiring(True, keys_growth=0):
        states, parts = new_states(cfgs), [[], []]
        for a in range(0, 3000, 100):
            got, states = simulate_batch_models(table.slice(a, 100), cfgs, states)
            for acc, part in zip(parts, got):
                acc.append(part)
            retire.retire_idle(states)     # what the next batch would find
            for s in states:
                live = np.flatnonzero(s.kernel.e_first[:len(s.key_ids)] >= 0)
                pending = set() if s.pending is None else set(s.pending.key[
                    s.pending.key >= 0].tolist())
                assert len(s.key_ids) == len(set(live.tolist()) | pending)
            # the classes kept are those of the napi model's live keys (the ideal model
            # keeps its held keys, not their classes)
            assert (states[1].union_key[:2 * len(states[1].union_ids):2] >= 0).all()
        got, states = simulate_batch_models(table.slice(0, 0), cfgs, states, final=True)
        for acc, part in zip(parts, got):
            acc.append(part)
    for p, c, w in zip(parts, cfgs, want):
        assert_equal(assemble(p, c), w)
    assert len(seen) >= 25
    # the traffic's flows all come back batch after batch: classes retired and made again
    assert max(before for before, _ in seen) > min(after for _, after in seen)


def test_not_retired_when_due_only_for_some_of_its_sharers():
    """A union table shared by two models is left alone when one model's state is fed
    on its own (its other sharer's ids would go stale), and so are UDP views."""
    _, table = _traffic(5, 200, False)
    cfgs = [GroConfig(), GroConfig(model="napi")]
    with retiring(True):
        states = new_states(cfgs)
        _, states = simulate_batch_models(table, cfgs, states)
        assert not retire.retire_idle(states[:1])
        assert retire.retire_idle(states)
        _, st_udp = simulate_batch(table, GroConfig(udp_gro="forward"))
        assert st_udp.udp_ids
        assert not retire.retire_idle([st_udp])


def test_small_tables_are_not_retired():
    """Below RETIRE_MIN classes, or before the table has grown RETIRE_GROWTH times its
    live size, nothing is retired (small captures keep every class, as before)."""
    _, table = _traffic(5, 200, False)
    _, state = simulate_batch(table, GroConfig())
    assert len(state.union_ids) < retire.RETIRE_MIN
    assert not retire.retire_idle([state])


def test_a_model_whose_keys_are_mostly_live_keeps_its_tables(monkeypatch):
    """The union table retires, the napi model's keys (few live) are copied, the ideal
    model's (an entry held for nearly every flow) stay as they are: the same table
    objects, not a copy of every key per retirement; results as without retirement."""
    copies = []
    real = retire._retire_keys

    def spy(st):
        before = st.key_ids
        out = real(st)
        copies.append((st.model, st.key_ids is not before))
        return out
    monkeypatch.setattr(retire, "_retire_keys", spy)
    _, table = _traffic(11, 3000, True)
    cfgs = [GroConfig(), GroConfig(model="napi", queues=2)]
    with retiring(False):
        want = [simulate(table, c) for c in cfgs]
    with retiring(True, keys_growth=2):
        parts = fed_in_batches(table, cfgs, 100)
    for p, c, w in zip(parts, cfgs, want):
        assert_equal(assemble(p, c), w)
    ideal = [copied for m, copied in copies if m == K.MODEL_IDEAL]
    napi = [copied for m, copied in copies if m != K.MODEL_IDEAL]
    assert ideal and napi and not all(ideal) and any(napi)
