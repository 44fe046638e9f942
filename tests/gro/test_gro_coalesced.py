"""Input that arrives as GSO packets (captured after TSO/GRO, or the gro_cells stage):
numba engine == reference bit for bit, the segment invariants, and the pipeline turning
it on by itself for a capture of TSO-sized frames."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap.gro import coalesced
from gropcap.gro import gso
from gropcap.gro import reasons as R
from gropcap.gro import reference
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import simulate as fast_simulate
from tests.gro.test_gro_engine_equal import CONFIGS, KERNELS, assert_same
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic, tcp_row

from where import TESTS


def random_coalesced(rng, table, share: float = 0.3) -> coalesced.CoalescedInput:
    """Mark a random share of the data segments as arriving GSO packets: gso_size mostly
    a divisor-ish of the payload (so count*gso_size == len or not), sometimes another
    flow's size; some carry a frag_list."""
    n = table.num_rows
    pay = table.column("payload_len").to_numpy().astype(np.int64)
    l4 = table.column("l4_proto").to_numpy()
    is_gso = (rng.random(n) < share) & (pay > 1) & (l4 == 6)
    size = np.zeros(n, np.int32)
    segs = np.ones(n, np.int32)
    for i in np.flatnonzero(is_gso):
        k = int(rng.integers(2, 5))
        s = int(pay[i]) // k if rng.random() < 0.7 else int(rng.choice([536, 1000, 1448]))
        s = max(s, 1)
        size[i] = s
        segs[i] = gso.gso_segs(int(pay[i]), s)
    co = coalesced.CoalescedInput(is_gso, size, segs, np.where(is_gso, 3, 0).astype(np.uint8))
    co.frag_list = is_gso & (rng.random(n) < 0.1)
    return co


def run_both(table, config, **kw):
    f = fast_simulate(table, config, **kw)
    r = reference.simulate(table, config, **kw)
    return f, r


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 250), flows=st.integers(1, 10),
       kernel=st.sampled_from(KERNELS), cfg=st.sampled_from(CONFIGS), tunnels=st.booleans(),
       extras=st.booleans())
def test_equal_with_gso_input(seed, n, flows, kernel, cfg, tunnels, extras):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, flows, tunnels))
    config = cfg.replace(kernel=KernelProfile.parse(kernel))
    co = random_coalesced(rng, table)
    kw = {"coalesced": co}
    if extras:
        # what the gro_cells stage passes: the RX hash left after decapsulation and rows
        # whose device has no cells
        kw["hashes"] = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        kw["no_gro"] = rng.random(n) < 0.1
    f, r = run_both(table, config, **kw)
    f.check_invariants(table.column("payload_len").to_numpy(), segments=co.segs)
    assert_same(f, r, f"seed={seed} n={n} kernel={kernel} {config} extras={extras}")


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 150), windows=st.integers(1, 15))
def test_equal_with_gso_input_explicit_windows(seed, n, windows):
    rng = np.random.default_rng(seed)
    table = packet_table(random_traffic(rng, n, 5, tunnels=True))
    polls = np.sort(rng.integers(0, windows, n)).astype(np.int64)
    co = random_coalesced(rng, table, 0.5)
    f, r = run_both(table, GroConfig(model="napi", queues=2), polls=polls, coalesced=co,
                    hashes=np.zeros(n, np.uint32))
    f.check_invariants(table.column("payload_len").to_numpy(), segments=co.segs)
    assert_same(f, r, f"seed={seed} windows")


def _tso_flow(mss=1448, chunks=(3, 3, 1, 2, 5), tail=700):
    """One IPv4 flow captured after TSO: super-frames of ``k`` segments (IPv4 total
    length above the MTU), plain single segments between them, a short tail."""
    rows, seq, ip_id, t = [], 0, 0, 1_000_000
    for k in chunks:
        rows.append(tcp_row(4, "10.0.0.1", "10.0.0.2", 40000, 5201, seq=seq, payload=k * mss,
                            ip_id=ip_id, ts_ns=t))
        seq += k * mss
        ip_id += k
        t += 1000
    rows.append(tcp_row(4, "10.0.0.1", "10.0.0.2", 40000, 5201, seq=seq, payload=tail,
                        ip_id=ip_id, ts_ns=t))
    return rows


@pytest.mark.parametrize("model", ["ideal", "napi"])
@pytest.mark.parametrize("kernel", ["4.14", "6.6", "6.18"])
def test_tso_frames_detected_and_equal(model, kernel):
    table = packet_table(_tso_flow())
    co = coalesced.coalesced_input(table)
    # every super-frame (IP length above the MTU) is detected; gso_size is the flow's most
    # common single segment, the largest on ties (1448 and the 700-byte tail: once each)
    assert co.is_gso.tolist() == [True, True, False, True, True, False]
    assert co.gso_size[co.is_gso].tolist() == [1448] * 4
    assert co.segs.tolist() == [3, 3, 1, 2, 5, 1]
    config = GroConfig(model=model, kernel=KernelProfile.parse(kernel))
    f, r = run_both(table, config, coalesced=co)
    assert_same(f, r, f"tso {model} {kernel}")
    f.check_invariants(table.column("payload_len").to_numpy(), segments=co.segs)
    # 3+3+1+2+5 segments + tail: all continue the same sequence, so GRO merges them
    assert int(f.seg_count.sum()) == 3 + 3 + 1 + 2 + 5 + 1


def test_gso_size_mismatch_and_short_gso_in_numba():
    # head: 3 x 1000 bytes; a GSO frame of gso_size 1448 is refused (FLUSH_GSO_SIZE); a GSO
    # frame whose length is not count * gso_size, with nothing held, goes up at once
    # (NOT_HELD_GSO_SHORT; another flow here)
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=0, payload=3000, ip_id=0),
            tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=3000, payload=2 * 1448, ip_id=3),
            tcp_row(4, "10.0.0.1", "10.0.0.2", 3, 2, seq=0, payload=1500, ip_id=5)]
    table = packet_table(rows)
    co = coalesced.CoalescedInput(np.array([True, True, True]), np.array([1000, 1448, 1000]),
                            np.array([3, 2, 2]), np.array([3, 3, 3], np.uint8))
    f = fast_simulate(table, GroConfig(), coalesced=co)
    assert f.reason.tolist() == [R.NO_HELD_PACKET, R.FLUSH_GSO_SIZE, R.NOT_HELD_GSO_SHORT]
    # delivery order: the short frame at once, then the two held ones at the end
    assert f.seg_first_packet.tolist() == [0, 2, 1]
    assert f.seg_count.tolist() == [3, 2, 2]
    assert f.seg_gso_size.tolist() == [1000, 1000, 1448]
    f.check_invariants(table.column("payload_len").to_numpy(), segments=co.segs)


def test_frag_list_row_never_merges_in_numba():
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=0, payload=1448, ip_id=0),
            tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=1448, payload=2 * 1448, ip_id=1),
            tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=3 * 1448, payload=2 * 1448,
                    ip_id=3)]
    table = packet_table(rows)
    co = coalesced.CoalescedInput(np.array([False, True, True]), np.array([0, 1448, 1448]),
                            np.array([1, 2, 2]), np.zeros(3, np.uint8))
    co.frag_list = np.array([False, True, False])
    f = fast_simulate(table, GroConfig(), coalesced=co)
    assert f.reason.tolist() == [R.NO_HELD_PACKET, R.FLUSH_FRAG_LIST, R.NO_HELD_PACKET]
    assert f.seg_count.tolist() == [1, 2, 2]


def test_no_gro_rows_bypass_in_numba():
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=i * 1448, ip_id=i) for i in range(4)]
    table = packet_table(rows)
    f = fast_simulate(table, GroConfig(), no_gro=np.array([False, False, True, False]))
    # the bypassing row overtakes the held entry; the next one finds a gap (its IP ID is
    # checked before the sequence)
    assert f.reason.tolist() == [R.NO_HELD_PACKET, R.MERGED, R.BYPASS_GRO_DISABLED,
                                 R.FLUSH_IP_ID]
    f = fast_simulate(table, GroConfig(native_gro=False))
    assert set(f.reason.tolist()) == {R.BYPASS_GRO_DISABLED}


# --- the pipeline: a capture taken after TSO (frames above the MTU) -----------------------

def _write_tso_capture(path, mss=1400):
    """A connection captured on the sending host after TSO: SYN with MSS, SYN-ACK with
    MSS ``mss + 12``, then super-frames of 4, 4, 2 segments (IP length above the MTU),
    single segments, a short tail with PSH; timestamps on every data segment."""
    from craft import eth, ipv4, tcp, tcp_ts

    from gropcap import constants as C
    from gropcap.capture.writer import write_pcap

    a, b = "10.1.0.1", "10.1.0.2"
    ts = tcp_ts(7, 9)
    frames = [
        eth(ipv4(a, b, 6, tcp(40000, 5201, seq=0, flags=C.TCP_FLAG_SYN,
                              options=b"\x02\x04" + (1460).to_bytes(2, "big")))),
        eth(ipv4(b, a, 6, tcp(5201, 40000, seq=0, ack=1,
                              flags=C.TCP_FLAG_SYN | C.TCP_FLAG_ACK,
                              options=b"\x02\x04" + (mss + 12).to_bytes(2, "big")))),
    ]
    seq, ident = 1, 1
    for k in (4, 4, 2, 1, 1, 3):
        frames.append(eth(ipv4(a, b, 6, tcp(40000, 5201, seq=seq, ack=1, options=ts,
                                            payload=bytes(k * mss)), ident=ident)))
        seq += k * mss
        ident += k
    frames.append(eth(ipv4(a, b, 6, tcp(40000, 5201, seq=seq, ack=1, options=ts,
                                        flags=C.TCP_FLAG_ACK | C.TCP_FLAG_PSH,
                                        payload=bytes(300)), ident=ident)))
    t0 = 1_700_000_000_000_000_000
    write_pcap(str(path), frames, [t0 + i * 2000 for i in range(len(frames))])
    return frames


def test_pipeline_treats_tso_frames_as_gso_packets(tmp_path):
    from gropcap.run.memory import analyze

    path = tmp_path / "tso.pcap"
    _write_tso_capture(path)
    runs = {eng: analyze(str(path), GroConfig(), engine=eng) for eng in ("fast", "reference")}
    for model in ("ideal", "napi"):
        assert_same(runs["fast"].results[model], runs["reference"].results[model],
                    f"tso capture {model}")
    a = runs["fast"]
    co = a.coalesced
    # the four frames above the MTU, gso_size from the peer's SYN MSS minus the 12 option
    # bytes each segment carries
    assert co is not None and co.num_coalesced == 4
    assert co.gso_size[co.is_gso].tolist() == [1400] * 4
    assert co.segs[co.is_gso].tolist() == [4, 4, 2, 3]
    payload = a.decoded.column("payload_len").to_numpy()
    for model, res in a.results.items():
        res.check_invariants(payload, segments=co.segs)
        # one in-sequence flow: every data segment ends in one super-packet (the PSH tail)
        data = res.seg_payload_len > 0
        assert res.seg_count[data].tolist() == [4 + 4 + 2 + 1 + 1 + 3 + 1], model
        assert res.seg_gso_size[data].tolist() == [1400]
    s = a.summary()
    for model in ("ideal", "napi"):
        m = s["models"][model]
        assert m["packets_in"] == 9 and m["segments_in"] == 2 + 16
        assert m["superpackets_out"] == 3
        assert m["aggregation_ratio"] == 6.0   # 18 segments / 3
    warn = [w for w in s["warnings"] if "already coalesced" in w]
    assert len(warn) == 1
    assert ("4 TCP frames are treated as arriving GSO packets of 13 segments with the "
            "gso_size inferred from their flow (1400 bytes") in warn[0]


def test_pipeline_plain_capture_has_no_coalesced(tmp_path):
    from gropcap.run.memory import analyze

    path = tmp_path / "plain.pcap"
    from craft import eth, ipv4, tcp

    from gropcap.capture.writer import write_pcap
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1, 2, seq=i * 1000,
                                                        payload=bytes(1000)), ident=i))
              for i in range(5)]
    write_pcap(str(path), frames, [i * 1000 for i in range(5)])
    a = analyze(str(path), GroConfig(), models=["ideal"])
    assert a.coalesced is None
    m = a.summary()["models"]["ideal"]
    assert m["segments_in"] == m["packets_in"] == 5
    assert m["aggregation_ratio"] == 5.0


# --- the gro_cells stage on the numba engine ------------------------------------------------

@pytest.mark.parametrize("model", ["ideal", "napi"])
@pytest.mark.parametrize("kernel", ["4.14", "6.18"])
@pytest.mark.parametrize("tunnel_gro", [True, False])
def test_stages_fast_equals_reference(model, kernel, tunnel_gro):
    import glob
    import os

    from gropcap.gro.stages import simulate_stages
    from gropcap.run.memory import decode_files

    here = TESTS
    paths = sorted(glob.glob(os.path.join(here, "..", "sample_pcaps", "*gre*.pcap*"))
                   + glob.glob(os.path.join(here, "..", "sample_pcaps", "*dsa*.pcap*")))
    if not paths:
        pytest.skip("no GRE / DSA sample captures")
    config = GroConfig(model=model, kernel=KernelProfile.parse(kernel), tunnel_gro=tunnel_gro)
    checked = 0
    for path in paths:
        table, _ = decode_files([path])
        fast = simulate_stages(table, config, engine="fast")
        ref = simulate_stages(table, config, engine="reference")
        assert [s.name for s in fast] == ["native", "gro_cells"]
        for a, b in zip(fast, ref):
            assert_same(a.result, b.result, f"{os.path.basename(path)} {a.name}")
            a.check_invariants()
        checked += fast[1].packets_in
    assert checked > 0


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_streamed_batches_with_gso_input_equal_one_call(model):
    from gropcap.gro.engine import assemble, simulate_batch

    rng = np.random.default_rng(11)
    table = packet_table(random_traffic(rng, 240, 6, tunnels=True))
    co = random_coalesced(rng, table, 0.4)
    n = table.num_rows
    hashes = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    no_gro = rng.random(n) < 0.05
    config = GroConfig(model=model, queues=2)
    whole = fast_simulate(table, config, coalesced=co, hashes=hashes, no_gro=no_gro)
    cuts = [0, 70, 71, 180, n]
    state, parts = None, []
    for a, b in zip(cuts, cuts[1:]):
        part_co = coalesced.CoalescedInput(co.is_gso[a:b], co.gso_size[a:b], co.segs[a:b],
                                     co.source[a:b])
        part_co.frag_list = co.frag_list[a:b]
        part, state = simulate_batch(table.slice(a, b - a), config, state,
                                     final=b == n, coalesced=part_co, hashes=hashes[a:b],
                                     no_gro=no_gro[a:b])
        parts.append(part)
    assert_same(assemble(parts, config), whole, f"streamed {model}")
    whole.check_invariants(table.column("payload_len").to_numpy(), segments=co.segs)
