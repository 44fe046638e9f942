"""fast == reference: the numba engine against the plain-Python reference model, bit for
bit (every GroResult array), on generated traffic and on every sample capture."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import simulate as fast_simulate
from gropcap.gro.result import GroResult
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic

from where import TESTS

reference = pytest.importorskip("gropcap.gro.reference",
                                reason="gro/reference.py (the oracle) is not there yet")

HERE = TESTS
SAMPLES = sorted(glob.glob(os.path.join(HERE, "..", "sample_pcaps", "*.pcap*")))
KERNELS = ["4.4", "4.14", "5.4", "5.15", "6.1", "6.6", "6.12", "6.15", "6.18"]

CONFIGS = [
    GroConfig(),
    GroConfig(model="napi"),
    GroConfig(model="napi", queues=4),
    GroConfig(model="napi", rss="none", budget=8, hz=1000),
    GroConfig(model="napi", queues=2, budget=16, hz=250, poll_gap_ns=20_000),
    GroConfig(model="napi", gro_flush_timeout_ns=200_000, napi_defer_hard_irqs=2),
    GroConfig(model="napi", queues=3, gro_flush_timeout_ns=50_000, budget=4, hz=1000),
    GroConfig(model="napi", gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=0),
    GroConfig(verify_checksums=True, gro_max_size=16384, gro_ipv4_max_size=20000),
    GroConfig(gro_max_size=20000, gro_ipv4_max_size=9000),
    GroConfig(model="napi", gro_max_size=200000, gro_ipv4_max_size=100000),
]


def assert_same(fast: GroResult, ref: GroResult, what: str) -> None:
    for name in GroResult.__dataclass_fields__:
        a, b = getattr(fast, name), getattr(ref, name)
        if not np.array_equal(a, b):
            bad = np.nonzero(a != b)[0] if a.shape == b.shape else []
            first = int(bad[0]) if len(bad) else None
            raise AssertionError(
                f"{what}: {name} differs (fast {a.shape} vs ref {b.shape}); first index "
                f"{first}: fast={a[first] if first is not None else a[:10]} "
                f"ref={b[first] if first is not None else b[:10]}")


def both(table, config, polls=None):
    f = fast_simulate(table, config, polls=polls)
    r = reference.simulate(table, config, polls=polls)
    return f, r


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 12),
       kernel=st.sampled_from(KERNELS), cfg=st.sampled_from(CONFIGS), tunnels=st.booleans())
def test_equal_generated(seed, n, flows, kernel, cfg, tunnels):
    table = packet_table(random_traffic(np.random.default_rng(seed), n, flows, tunnels))
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    f, r = both(table, config)
    f.check_invariants(table.column("payload_len").to_numpy())
    assert_same(f, r, f"seed={seed} n={n} flows={flows} kernel={kernel} {config}")


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200), queues=st.integers(1, 3),
       kernel=st.sampled_from(KERNELS), windows=st.integers(1, 20))
def test_equal_explicit_polls(seed, n, queues, kernel, windows):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, 5, tunnels=True))
    polls = np.sort(rng.integers(0, windows, n)).astype(np.int64)
    config = GroConfig(model="napi", queues=queues, kernel=KernelProfile.parse(kernel))
    f, r = both(table, config, polls)
    assert_same(f, r, f"seed={seed} explicit polls")


TIMER_KERNELS = ["4.14", "4.19", "4.20", "5.6", "5.7", "6.18"]
TIMER_CONFIGS = [
    GroConfig(model="napi", rss="none", hz=1000, gro_flush_timeout_ns=200_000),
    GroConfig(model="napi", queues=2, hz=1000, gro_flush_timeout_ns=1_000_000, budget=4),
    GroConfig(model="napi", hz=250, gro_flush_timeout_ns=50_000, poll_gap_ns=1_000),
]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 12),
       kernel=st.sampled_from(TIMER_KERNELS), cfg=st.sampled_from(TIMER_CONFIGS))
def test_equal_napi_complete_done_timer_4_19_vs_4_20(seed, n, flows, kernel, cfg):
    """napi_complete_done with gro_flush_timeout and no deferral: nothing flushed when the
    timer is armed before 605108acfe62 (v4.20), old entries from it; napi_watchdog polls
    only with something held before v5.7. fast == reference on each side."""
    table = packet_table(random_traffic(np.random.default_rng(seed), n, flows, False))
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    f, r = both(table, config)
    f.check_invariants(table.column("payload_len").to_numpy())
    assert_same(f, r, f"seed={seed} n={n} flows={flows} kernel={kernel} {config}")


@pytest.mark.parametrize("kernel", ["4.19", "4.20", "5.6", "5.7"])
def test_equal_napi_complete_done_lonely_packet(kernel):
    """The crafted lonely-packet traffic of test_gro_rules_napi (4.19: END_POLL at the
    timer poll; 4.20: END_POLL_OLD at each new jiffy): fast == reference."""
    from tests.gro.test_gro_rules_napi import lonely_and_stream
    from tests.gro.test_gro_reference import frames_table
    frames, ts = lonely_and_stream()
    table = frames_table(frames, ts_ns=ts)
    config = GroConfig(model="napi", hz=1000, rss="none", poll_gap_ns=10_000,
                       gro_flush_timeout_ns=200_000, kernel=KernelProfile.parse(kernel))
    f, r = both(table, config)
    assert_same(f, r, f"lonely packet {kernel}")
    assert len(np.unique(f.seg_end_reason)) == (1 if kernel == "4.19" else 2)


@pytest.mark.skipif(not SAMPLES, reason="no sample captures in sample_pcaps/")
@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_equal_sample_captures(path):
    from gropcap.run.memory import decode_files
    table, _ = decode_files([path])
    for cfg in (GroConfig(), GroConfig(model="napi", queues=4),
                GroConfig(model="napi", gro_flush_timeout_ns=200_000,
                          napi_defer_hard_irqs=10, kernel=KernelProfile.parse("6.6")),
                GroConfig(kernel=KernelProfile.parse("4.14"), model="napi", rss="none")):
        f, r = both(table, cfg)
        f.check_invariants(table.column("payload_len").to_numpy())
        assert_same(f, r, f"{os.path.basename(path)} {cfg.model} {cfg.kernel.name}")


@pytest.mark.parametrize("kernel", ["5.15", "6.1", "6.6", "6.18"])
@pytest.mark.parametrize("v,vlan", [(4, False), (6, False), (6, True)])
def test_equal_size_limits_long_flows(kernel, v, vlan):
    # one long in-sequence flow: the per-family and BIG TCP limits decide where it ends
    from tests.gro.test_gro_engine_traffic import tcp_row
    rows = []
    for i in range(200):
        r = tcp_row(v, "10.0.0.1" if v == 4 else "fd00::1",
                    "10.0.0.2" if v == 4 else "fd00::2", 1, 2, seq=i * 1448, ip_id=i,
                    ts_ns=i * 100)
        if vlan:
            r.update(eth_type=0x8100, vlan_depth=1, vlan_tpid0=0x8100, vlan_tci0=5)
        rows.append(r)
    table = packet_table(rows)
    for cfg in (GroConfig(gro_max_size=200000, gro_ipv4_max_size=100000),
                GroConfig(gro_max_size=30000, gro_ipv4_max_size=50000)):
        cfg = cfg.replace(kernel=KernelProfile.parse(kernel))
        f, r = both(table, cfg)
        assert_same(f, r, f"size limits {kernel} v{v} vlan={vlan}")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200),
       kernel=st.sampled_from(KERNELS), model=st.sampled_from(["ideal", "napi"]),
       switch=st.sampled_from([{"vlan_gro": False}, {"native_gro": False},
                               {"tunnel_gro": True}, {"tunnel_gro": False}]))
def test_equal_receive_switches(seed, n, kernel, model, switch):
    # the switches the numba engine took over from the reference: no VLAN GRO (kernel
    # without CONFIG_VLAN_8021Q), GRO off on the device, the gro_cells stage's DSA conduit
    rng = np.random.default_rng(seed)
    rows = random_traffic(rng, n, 6, tunnels=True)
    for r in rows[::7]:
        r.update(dsa_tag=1, dsa_port=int(rng.integers(0, 4)))   # some DSA-tagged frames
    table = packet_table(rows)
    config = GroConfig(model=model, queues=2, kernel=KernelProfile.parse(kernel), **switch)
    f, r = both(table, config)
    f.check_invariants(table.column("payload_len").to_numpy())
    assert_same(f, r, f"seed={seed} {switch}")
    if switch == {"vlan_gro": False}:
        tagged = np.isin(table.column("eth_type").to_numpy(), [0x8100, 0x88A8])
        from gropcap.gro.reasons import BYPASS_NO_VLAN_GRO
        assert np.all(f.reason[tagged & (table.column("dsa_tag").to_numpy() == 0)]
                      == BYPASS_NO_VLAN_GRO)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("hz", [100, 250, 1000])
def test_equal_epoch_timestamps_jiffies(seed, hz):
    """Epoch nanoseconds times HZ pass 2**63: the engine's jiffies (``fast.napi._jiffy``)
    must not wrap, or old-only flushes (full budget, gro_flush_timeout) fall at other
    jiffy boundaries than the reference's."""
    rows = random_traffic(np.random.default_rng(seed), 300, 4)
    for row in rows:
        row["ts_ns"] += 1_700_000_000_000_000_000
    table = packet_table(rows)
    for cfg in (GroConfig(model="napi", budget=4, hz=hz),
                GroConfig(model="napi", hz=hz, gro_flush_timeout_ns=200_000,
                          napi_defer_hard_irqs=1)):
        f, r = both(table, cfg)
        assert_same(f, r, f"seed={seed} {cfg}")
