"""The runner's exactness argument without Dask: cut a capture into pieces (files, byte
ranges), split every piece by ``engine.partition_of`` (RX queue in the napi model, loose
same-flow class in the ideal model), replay each partition alone, merge with
``run.distributed.merge_parts``: the GroResult equals one pass over the whole table, for random
traffic on every kernel era and receive model."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.gro import coalesced
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import partition_of, simulate
from gropcap.run.memory import decode_files
from gropcap.run.distributed import merge_parts, partition_task, split_task
from tests.gro.test_coalesced_stats import disturbed
from tests.gro.test_gro_engine_equal import CONFIGS, KERNELS
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic

from where import TESTS

SAMPLES = sorted(glob.glob(os.path.join(TESTS, os.pardir,
                                        "sample_pcaps", "*.pcap*")))


def by_partitions(table, config, parts: int, cuts=(), stats=None):
    """What the runner does, in one process: pieces -> split -> partitions -> merge."""
    bounds = [0, *sorted(cuts), table.num_rows]
    pieces = [table.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
    splits = [split_task(p, 0, 0, lo, config, parts) for p, lo in zip(pieces, bounds)]
    done = [partition_task([s[k] for s in splits], config, stats) for k in range(parts)]
    return merge_parts([d[0] for d in done], [d[1] for d in done], [d[2] for d in done],
                       table.num_rows, config)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 12),
       kernel=st.sampled_from(KERNELS), cfg=st.sampled_from(CONFIGS), tunnels=st.booleans(),
       parts=st.integers(1, 5), cuts=st.lists(st.integers(0, 300), max_size=3))
def test_partitions_merge_to_one_pass(seed, n, flows, kernel, cfg, tunnels, parts, cuts):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, flows, tunnels))
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    cuts = [c for c in cuts if c <= table.num_rows]
    assert by_partitions(table, config, parts, cuts).equals(simulate(table, config))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 300), parts=st.integers(2, 4),
       model=st.sampled_from(["ideal", "napi"]))
def test_coalesced_input_partitions(seed, n, parts, model):
    """Frames captured coalesced: each partition infers its rows' gso_size from the
    statistics of the whole capture."""
    table = disturbed(seed, n, 5)
    config = GroConfig(model=model, queues=4)
    stats = coalesced.CoalescedStats()
    stats.add(table)
    co = coalesced.coalesced_input(table)
    want = simulate(table, config, coalesced=co if co.num_coalesced else None)
    assert by_partitions(table, config, parts, (n // 3,), stats).equals(want)


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_samples(model):
    table, _ = decode_files(SAMPLES)
    config = GroConfig(model=model, queues=4, kernel=KernelProfile.parse("5.10"))
    assert by_partitions(table, config, 3, (table.num_rows // 2,)).equals(
        simulate(table, config))


def test_ideal_partitions_really_interleave():
    """The merge has work to do: flows of different partitions interleave in delivery,
    so concatenating the partitions' outputs would give another order."""
    table, _ = decode_files([p for p in SAMPLES if "real_ipv4_p4" in p])
    config = GroConfig()
    part = partition_of(table, config, 2)
    assert set(part.tolist()) == {0, 1}
    one = simulate(table, config)
    seg_part = part[one.seg_first_packet]
    naive = np.concatenate([np.flatnonzero(seg_part == 0), np.flatnonzero(seg_part == 1)])
    assert not np.array_equal(naive, np.arange(one.num_superpackets))
    assert by_partitions(table, config, 2).equals(one)


def test_partition_keeps_a_same_flow_class_together():
    """Every row of one loose same-flow class (the unit of GRO state in the ideal model)
    lands in one partition; every row of one RX queue in one partition (napi). A report
    flow can span classes (its IPv6 flow label or hop limit changed), which is why the
    ideal model is not split by ``flow_id``."""
    from gropcap.gro.engine import EngineState, prepare
    table, _ = decode_files(SAMPLES)
    for kernel in ("5.10", "6.18"):
        config = GroConfig(kernel=KernelProfile.parse(kernel))
        cols, _ = prepare(table, config, EngineState.new(config))
        part = partition_of(table, config, 4)
        held = cols.pre == 0
        assert len(set(part.tolist())) == 4
        for k in np.unique(cols.loose[held]):
            assert len(set(part[held & (cols.loose == k)].tolist())) == 1
    napi = GroConfig(model="napi", queues=6)
    q = simulate(table, napi).rx_queue
    pn = partition_of(table, napi, 4)
    assert np.array_equal(pn, q.astype(np.int64) % 4)


def test_flow_maps_number_flows_by_first_row_over_partitions():
    """The core per partition (run.dask_core): each partition's local flow ids map to the
    one-process numbering (first appearance over the whole capture); a flow seen by two
    partitions cannot be merged from per-partition counters and is refused."""
    from gropcap.run.dask_core import _Fallback, flow_maps
    keys = [np.array([5, 9], np.uint64), np.array([7], np.uint64), np.zeros(0, np.uint64)]
    firsts = [np.array([0, 10]), np.array([3]), np.zeros(0, np.int64)]
    assert [m.tolist() for m in flow_maps(keys, firsts)] == [[0, 2], [1], []]
    with pytest.raises(_Fallback, match="two partitions"):
        flow_maps([np.array([5], np.uint64)] * 2, [np.array([0]), np.array([1])])
