"""Streaming: feeding a capture to the engine batch by batch (state carried, pickled
between batches) gives exactly the GroResult of one call on the whole table."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.errors import ConfigError
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import EngineState, assemble, simulate, simulate_batch
from gropcap.gro.result import GroResult
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic

CONFIGS = [
    GroConfig(),
    GroConfig(kernel=KernelProfile.parse("5.10")),
    GroConfig(model="napi"),
    GroConfig(model="napi", queues=3, budget=4, hz=1000),
    GroConfig(model="napi", queues=2, budget=8, hz=250, poll_gap_ns=20_000),
    GroConfig(model="napi", gro_flush_timeout_ns=200_000, napi_defer_hard_irqs=2),
    GroConfig(model="napi", gro_flush_timeout_ns=50_000, napi_defer_hard_irqs=0, budget=4),
    GroConfig(model="napi", rss="none", kernel=KernelProfile.parse("4.14")),
    # napi_complete_done before 605108acfe62 (4.19) / napi_watchdog before 5.7 (4.20)
    GroConfig(model="napi", hz=1000, gro_flush_timeout_ns=200_000,
              kernel=KernelProfile.parse("4.19")),
    GroConfig(model="napi", hz=1000, gro_flush_timeout_ns=200_000, budget=4,
              kernel=KernelProfile.parse("4.20")),
]


def streamed(table, config, cuts, polls=None, roundtrip=True):
    state = None
    parts = []
    bounds = [0] + sorted(cuts) + [table.num_rows]
    last = len(bounds) - 2
    for x, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        # empty batches are allowed too
        part, state = simulate_batch(table.slice(a, b - a), config, state, final=x == last,
                                     polls=None if polls is None else polls[a:b])
        parts.append(part)
        if roundtrip:
            state = pickle.loads(pickle.dumps(state))
    return assemble(parts, config)


def assert_equal(a: GroResult, b: GroResult):
    for name in GroResult.__dataclass_fields__:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300),
       cfg=st.sampled_from(CONFIGS), nbatch=st.integers(1, 8), tunnels=st.booleans())
def test_batches_equal_one_call(seed, n, cfg, nbatch, tunnels):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, int(rng.integers(1, 10)), tunnels))
    cuts = sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist()))
    whole = simulate(table, cfg)
    assert_equal(streamed(table, cfg, cuts), whole)


ONE_QUEUE_NAPI = [c for c in CONFIGS if c.model == "napi" and c.queues == 1]


def _with_head(rows, fn):
    from gropcap.gro import engine
    real = engine.HEAD_ROWS
    engine.HEAD_ROWS = rows
    try:
        return fn()
    finally:
        engine.HEAD_ROWS = real


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300),
       cfg=st.sampled_from(ONE_QUEUE_NAPI), nbatch=st.integers(1, 8), tunnels=st.booleans(),
       head=st.integers(1, 6))
def test_batches_that_go_in_after_a_short_head_equal_one_call(seed, n, cfg, nbatch,
                                                               tunnels, head):
    # one RX queue: a batch's first HEAD_ROWS rows go in with the undecided rows of the
    # batch before, the rest as views of its columns (no copy); a head too short to
    # decide a poll takes the copy
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, int(rng.integers(1, 10)), tunnels))
    cuts = sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist()))
    whole = simulate(table, cfg)
    assert_equal(_with_head(head, lambda: streamed(table, cfg, cuts)), whole)


def test_the_uncopied_rest_of_a_batch_is_used(monkeypatch):
    from gropcap.gro import engine
    rng = np.random.default_rng(5)
    table = packet_table(random_traffic(rng, 400, 4, False))
    cfg = GroConfig(model="napi", budget=4)
    views = []
    real = engine._slice_cols

    def spy(c, lo, hi):
        views.append(lo)
        return real(c, lo, hi)
    monkeypatch.setattr(engine, "_slice_cols", spy)
    got = _with_head(3, lambda: streamed(table, cfg, list(range(40, 400, 40))))
    assert_equal(got, simulate(table, cfg))
    assert any(lo > 0 for lo in views), views


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200), nbatch=st.integers(1, 6))
def test_batches_equal_explicit_polls(seed, n, nbatch):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, 4))
    polls = np.sort(rng.integers(0, 6, n)).astype(np.int64)
    cfg = GroConfig(model="napi", queues=2)
    cuts = sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist()))
    assert_equal(streamed(table, cfg, cuts, polls), simulate(table, cfg, polls=polls))


def test_state_is_bounded_by_flows_not_packets():
    rng = np.random.default_rng(7)
    table = packet_table(random_traffic(rng, 3000, 3))
    cfg = GroConfig(model="napi", queues=2)
    state = None
    for a in range(0, 3000, 500):
        _, state = simulate_batch(table.slice(a, 500), cfg, state, final=a == 2500)
    # held-entry arrays are sized by GRO keys (a few per flow), never by packets
    assert state.kernel.e_first.shape[0] < 200
    assert len(state.key_ids) < 50
    assert state.pending is None


def test_misuse_is_refused():
    table = packet_table(random_traffic(np.random.default_rng(1), 20, 2))
    part, state = simulate_batch(table, GroConfig(), None, final=True)
    with pytest.raises(ConfigError):
        simulate_batch(table, GroConfig(), state)                # already finished
    _, state = simulate_batch(table, GroConfig(), None)
    with pytest.raises(ConfigError):
        simulate_batch(table, GroConfig(model="napi"), state)    # another config
    assert isinstance(EngineState.new(GroConfig()), EngineState)


def test_udp_configs_run_on_the_numba_engine():
    """UDP GRO and UDP tunnel sockets were reference-only; the engine runs them now
    (equality with the reference: tests/gro/test_gro_engine_udp.py)."""
    table = packet_table(random_traffic(np.random.default_rng(2), 10, 2, tunnels=True))
    for cfg in (GroConfig(udp_tunnels="vxlan:4789"), GroConfig(udp_gro="forward")):
        assert simulate(table, cfg).gro_seg.shape == (10,)


# --- several models from one preparation per batch (simulate_batch_models) -------------

MODEL_PAIRS = [
    ("6.18", {}),
    ("5.4", {}),                                      # IPv6 hop limit in the key
    ("4.14", {"queues": 3, "budget": 4, "rss": "none"}),
    ("6.18", {"queues": 2, "gro_flush_timeout_ns": 200_000, "napi_defer_hard_irqs": 2}),
]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), pair=st.sampled_from(MODEL_PAIRS),
       nbatch=st.integers(1, 6), tunnels=st.booleans())
def test_models_from_one_preparation_equal_separate_runs(seed, n, pair, nbatch, tunnels):
    """Both models prepared once per batch (shared union-key and flow tables, one RSS
    hash) give each model's own simulate() result, bit for bit; with the states pickled
    between batches together (the sharing is kept) or one by one (it is lost: each model
    is then prepared on its own) too."""
    from gropcap.gro.engine import new_states, simulate_batch_models, simulate_models
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, int(rng.integers(1, 10)), tunnels))
    kernel, extra = pair
    cfgs = [GroConfig(kernel=KernelProfile.parse(kernel), **extra).replace(model=m)
            for m in ("ideal", "napi")]
    want = [simulate(table, c) for c in cfgs]
    for got, w in zip(simulate_models(table, cfgs), want):
        assert_equal(got, w)
    cuts = [0] + sorted(set(rng.integers(0, n + 1, nbatch - 1).tolist())) + [n]
    for roundtrip in (None, "together", "apart"):
        states, parts = new_states(cfgs), [[], []]
        assert states[1].union_ids is states[0].union_ids
        for x, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            got, states = simulate_batch_models(table.slice(a, b - a), cfgs, states,
                                                final=x == len(cuts) - 2)
            for acc, part in zip(parts, got):
                acc.append(part)
            if roundtrip == "together":
                states = pickle.loads(pickle.dumps(states))
                assert states[1].union_ids is states[0].union_ids
            elif roundtrip == "apart":
                states = [pickle.loads(pickle.dumps(s)) for s in states]
        for p, c, w in zip(parts, cfgs, want):
            assert_equal(assemble(p, c), w)


def test_models_that_differ_beyond_the_model_run_separately():
    """Configs that differ in more than ``model`` (here the kernel) cannot share a
    preparation: each runs on its own, same results; a list of one config works."""
    from gropcap.gro.engine import simulate_models
    table = packet_table(random_traffic(np.random.default_rng(3), 200, 4))
    cfgs = [GroConfig(), GroConfig(model="napi", kernel=KernelProfile.parse("5.10"))]
    for got, c in zip(simulate_models(table, cfgs), cfgs):
        assert_equal(got, simulate(table, c))
    assert_equal(simulate_models(table, cfgs[:1])[0], simulate(table, cfgs[0]))
