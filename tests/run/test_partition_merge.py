"""The runner's exactness argument without Dask: cut a capture into pieces (files, byte
ranges), split every piece by ``engine.partition_of`` (RX queue in the napi model, also
time pieces at idle gaps, ``engine.time_cuts``; loose same-flow class in the ideal
model), replay each partition alone, merge with ``run.distributed.merge_parts``: the
GroResult equals one pass over the whole table, for random traffic on every kernel era
and receive model. And the ideal model cut where it holds nothing (what the core per
partition, ``run.dask_core``, checks before it keeps a time cut) replays exactly."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.gro import coalesced
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import partition_of, quiet_gap_ns, simulate, time_cuts
from gropcap.run.memory import decode_files
from gropcap.run.distributed import merge_parts, partition_task, split_task
from tests.gro.test_coalesced_stats import disturbed
from tests.gro.test_gro_engine_equal import CONFIGS, KERNELS
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic

from where import TESTS

SAMPLES = sorted(glob.glob(os.path.join(TESTS, os.pardir,
                                        "sample_pcaps", "*.pcap*")))


def by_partitions(table, config, parts: int, cuts=(), stats=None, time=None):
    """What the runner does, in one process: pieces -> split -> partitions -> merge.
    ``time``: the napi model's time cuts (global rows)."""
    bounds = [0, *sorted(cuts), table.num_rows]
    pieces = [table.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
    splits = [split_task(p, 0, 0, lo, config, parts, cuts=time)
              for p, lo in zip(pieces, bounds)]
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


NAPI_CONFIGS = [c for c in CONFIGS if c.model == "napi"]


def with_idle_gaps(table, at: list[int], extra: list[int], quiet: int):
    """``table`` with every row from ``at[i]`` on moved ``quiet + extra[i]`` ns later:
    an idle gap just longer (``extra`` >= 1) than ``quiet`` before each of those rows."""
    import pyarrow as pa
    ts = table.column("ts_ns").to_numpy().copy()
    for row, more in zip(at, extra):
        ts[row:] += quiet + more
    i = table.schema.get_field_index("ts_ns")
    return table.set_column(i, table.schema.field(i), pa.array(ts, pa.int64()))


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 300), flows=st.integers(1, 12),
       kernel=st.sampled_from(KERNELS), cfg=st.sampled_from(NAPI_CONFIGS),
       tunnels=st.booleans(), pieces=st.integers(2, 5), qparts=st.integers(1, 3),
       gaps=st.lists(st.tuples(st.integers(1, 299), st.sampled_from([1, 2, 1000, 10**9])),
                     min_size=1, max_size=5), byte_cuts=st.lists(st.integers(0, 300),
                                                               max_size=2))
def test_time_cuts_merge_to_one_pass(seed, n, flows, kernel, cfg, tunnels, pieces, qparts,
                                     gaps, byte_cuts):
    """The napi model cut in time at idle gaps just longer than ``quiet_gap_ns`` (and by
    RX queue, and the pieces in byte ranges): each time piece replayed from a fresh
    receiver, merged, equals one pass; with HZ >= 1000 nothing is cut."""
    rng = np.random.default_rng(seed)
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    table = packet_table(random_traffic(rng, n, flows, tunnels))
    n = table.num_rows
    quiet = quiet_gap_ns(config)
    gaps = [(r, more) for r, more in gaps if r < n]
    table = with_idle_gaps(table, [r for r, _ in gaps], [m for _, m in gaps],
                           quiet if quiet is not None else 10**6)
    cuts = time_cuts(table.column("ts_ns").to_numpy(), config, pieces)
    if quiet is None:
        assert config.hz >= 1000 and not len(cuts)
        return
    if gaps:
        assert len(cuts) >= 1
    assert len(cuts) <= pieces - 1 and set(cuts.tolist()) <= {r for r, _ in gaps} | set(
        np.flatnonzero(np.diff(table.column("ts_ns").to_numpy()) > quiet) + 1)
    q = min(qparts, config.queues)
    parts = q * (len(cuts) + 1)
    byte_cuts = [c for c in byte_cuts if c <= n]
    assert by_partitions(table, config, parts, byte_cuts, time=cuts).equals(
        simulate(table, config))


@pytest.mark.parametrize("kernel", ["4.14", "5.4", "6.18"])
@pytest.mark.parametrize("timeout,defer", [(200_000, 2), (20_000, 0), (50_000, 1),
                                           (30_000, 5)])
def test_time_cuts_at_the_quiet_bound(kernel, timeout, defer):
    """Idle gaps of ``quiet_gap_ns`` + 1 ns in random traffic, with the timer rules of
    each era (before 4.20 a poll that arms the timer flushes nothing; before 5.7 no
    defer and no empty timer poll): cut there, the merge equals one pass. (With one
    timeout less the 6.18 case with D = 2 differs in about half the seeds.)"""
    config = GroConfig(model="napi", gro_flush_timeout_ns=timeout,
                       napi_defer_hard_irqs=defer, kernel=KernelProfile.parse(kernel))
    quiet = quiet_gap_ns(config)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        table = packet_table(random_traffic(rng, 100, 3))
        table = with_idle_gaps(table, [35, 70], [1, 1], quiet)
        ts = table.column("ts_ns").to_numpy()
        assert {35, 70} <= set(time_cuts(ts, config, table.num_rows).tolist())
        want = simulate(table, config)
        for cuts in (np.array([35, 70]), time_cuts(ts, config, 3)):
            assert len(cuts) == 2
            assert by_partitions(table, config, 3, time=cuts).equals(want), seed


@pytest.mark.parametrize("extra", [
    dict(udp_gro="forward"), dict(udp_gro="fraglist", queues=4),
    dict(udp_tunnels="vxlan:4789", udp_gro="forward"),
    dict(udp_tunnels="geneve:6081,vxlan-gpe:4790", gro_flush_timeout_ns=50_000,
         napi_defer_hard_irqs=1)])
def test_time_cuts_with_udp_gro_and_tunnel_sockets(extra):
    """UDP GRO and UDP tunnel sockets hold their entries in the same per-queue table:
    cut at idle gaps (the traffic's own 5 ms pauses), the merge equals one pass."""
    from tests.gro.test_gro_engine_udp import udp_traffic
    config = GroConfig(model="napi", **extra)
    for seed in range(4):
        table = udp_traffic(seed, 400, 6)
        cuts = time_cuts(table.column("ts_ns").to_numpy(), config, 3)
        assert len(cuts) == 2, seed
        q = min(2, config.queues)
        assert by_partitions(table, config, q * 3, (table.num_rows // 2,),
                             time=cuts).equals(simulate(table, config)), seed


def test_a_gap_shorter_than_the_quiet_time_is_not_a_cut():
    """The bound matters: with gro_flush_timeout and napi_defer_hard_irqs a queue keeps a
    segment held across a gap of a few timeouts, and the next segment of its flow
    merges with it; cut there, the two go up apart. ``time_cuts`` does not cut there;
    at a gap one ns longer than ``quiet_gap_ns`` it does, and exactly."""
    config = GroConfig(model="napi", gro_flush_timeout_ns=100_000, napi_defer_hard_irqs=2)
    quiet = quiet_gap_ns(config)
    assert quiet == config.poll_gap_ns + 3 * 100_000
    # the models and configurations that are not cut in time
    for other in (config.replace(model="ideal"), config.replace(hz=1000),
                  config.replace(poll_acks=True)):
        assert quiet_gap_ns(other) is None
    table, _ = decode_files([p for p in SAMPLES if p.endswith("real_ipv4.pcap")])
    table = table.slice(0, 400)
    shown = 0
    for row in range(1, table.num_rows):
        short = with_idle_gaps(table, [row], [150_000 - quiet], quiet)
        whole = simulate(short, config)
        if whole.gro_seg[row] != whole.gro_seg[row - 1] or whole.gro_seg[row] < 0:
            continue            # the row does not merge across the gap
        every = table.num_rows      # as many pieces as rows: every possible cut
        assert row not in time_cuts(short.column("ts_ns").to_numpy(), config, every)
        assert not by_partitions(short, config, 2, time=np.array([row])).equals(whole)
        long = with_idle_gaps(table, [row], [1], quiet)
        assert row in time_cuts(long.column("ts_ns").to_numpy(), config, every)
        assert by_partitions(long, config, 2, time=np.array([row])).equals(
            simulate(long, config))
        shown += 1
        if shown == 3:
            break
    assert shown == 3


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
    if model == "napi":
        # and each queue partition cut in time at the table's idle gaps
        cuts = time_cuts(table.column("ts_ns").to_numpy(), config, 3)
        assert by_partitions(table, config, parts * (len(cuts) + 1), (n // 3,), stats,
                             time=cuts).equals(want)


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


def test_flows_are_numbered_by_first_row_over_partitions(tmp_path, monkeypatch):
    """The core per partition (run.dask_core, run.spill.number_flows): each partition's
    local flow ids map to the one-process numbering (first appearance over the whole
    capture, from a run's base), slice by slice; the rows then come in that order."""
    import pyarrow as pa

    from gropcap import arrays
    from gropcap.run.spill import (FLOWS, GIDS, in_flow_order, number_flows, read_array,
                                   save_partition_flows)
    rng = np.random.default_rng(7)
    for trial in range(30):
        monkeypatch.setattr(arrays, "SLICE_ROWS", int(rng.integers(1, 6)))
        n, parts = int(rng.integers(0, 40)), int(rng.integers(1, 5))
        firsts = np.sort(rng.choice(1000, n, replace=False))
        owner = rng.integers(0, parts, n)
        base = int(rng.integers(0, 100))
        works = []
        for k in range(parts):
            mine = firsts[owner == k]
            w = tmp_path / f"{trial}-{k}"
            w.mkdir()
            save_partition_flows(str(w), pa.table({
                "flow_id": np.arange(len(mine), dtype=np.int64), "first": mine}),
                mine, np.arange(len(mine), dtype=np.uint64), None)
            works.append(str(w))
        assert number_flows(works, base) == n
        for k, w in enumerate(works):
            # the global id of a flow: the flows first seen before it, from ``base``
            want = base + np.searchsorted(firsts, firsts[owner == k])
            assert read_array(os.path.join(w, GIDS)).tolist() == want.tolist()
        rows = pa.concat_tables(list(in_flow_order(works, FLOWS, base, n))) if n else None
        if n:
            assert rows.column("first").to_pylist() == firsts.tolist()
            assert rows.column("flow_id").to_pylist() == list(range(base, base + n))
    with pytest.raises(ValueError, match="first appearance"):
        save_partition_flows(str(tmp_path), pa.table({"x": [1, 2]}), np.array([5, 3]),
                             np.arange(2, dtype=np.uint64), None)

IDEAL_CONFIGS = [c for c in CONFIGS if c.model == "ideal"]


def _piece_rows(res, lo: int):
    """A piece's per-row reasons and its super-packets (rows moved by ``lo``), in
    delivery order."""
    return (np.asarray(res.reason), lo + np.asarray(res.seg_first_packet),
            lo + np.asarray(res.seg_last_packet), np.asarray(res.seg_count),
            np.asarray(res.seg_end_reason), np.asarray(res.seg_payload_len),
            np.asarray(res.seg_gso_size))


@pytest.mark.parametrize("cfg", IDEAL_CONFIGS, ids=range(len(IDEAL_CONFIGS)))
@pytest.mark.parametrize("kernel", ["4.14", "6.18"])
def test_ideal_model_cut_where_it_holds_nothing(cfg, kernel):
    """The core per partition keeps a time cut only where the ideal model held nothing
    (``run.dask_core._cuts_refused``: no ``END_CAPTURE`` super-packet at the end of the
    piece before it). The claim behind it: such a piece and the one after it, each
    replayed from a fresh ideal model, are the one pass over both, row for row and
    super-packet for super-packet, in delivery order. Random traffic, every row a
    candidate cut; some of them are clean (asserted), and every clean one is exact."""
    from gropcap.gro.reasons import END_CAPTURE
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    clean = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        table = packet_table(random_traffic(rng, 60, 2, seed % 2 == 1))
        whole = _piece_rows(simulate(table, config), 0)
        for c in range(1, table.num_rows):
            first = simulate(table.slice(0, c), config)
            if np.any(np.asarray(first.seg_end_reason) == END_CAPTURE):
                continue        # held across the cut: the core replays such a run uncut
            clean += 1
            got = [np.concatenate(pair) for pair in zip(
                _piece_rows(first, 0),
                _piece_rows(simulate(table.slice(c), config), c))]
            for a, b in zip(got, whole):
                assert np.array_equal(a, b), (seed, c)
    assert clean >= 30, clean
