"""coalesced.coalesced_input (vectorised over CoalescedStats) == the rule stated row by row, and
CoalescedStats gathered in pieces and merged == gathered in one pass (what the streaming
and distributed runs rely on)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.gro import coalesced
from gropcap.gro import gso
from gropcap.decode.schema import STATUS_OK
from gropcap.run.memory import decode_files
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic

from where import TESTS

SAMPLES = os.path.join(TESTS, os.pardir, "sample_pcaps")


def oracle(packets, mtu: int = 1500):
    """The rule of coalesced.coalesced_input, one row at a time (the implementation before it
    was vectorised)."""
    n = packets.num_rows
    col = {name: packets.column(name).to_pylist() for name in (
        "status", "epb_flags", "l4_proto", "payload_len", "tcp_flags", "tcp_mss",
        "tcp_doff", "ip_src", "ip_dst", "sport", "dport", "ip_version", "ip_tot_len",
        "ip_offset", "outer_ip_version", "outer_ip_tot_len", "outer_ip_offset",
        "l4_offset")}
    is_gso = np.zeros(n, dtype=bool)
    for i in range(n):
        if (col["status"][i] != STATUS_OK or col["l4_proto"][i] != C.IPPROTO_TCP
                or col["payload_len"][i] == 0):
            continue
        enc = col["outer_ip_version"][i] != 0
        v = col["outer_ip_version"][i] if enc else col["ip_version"][i]
        tot = col["outer_ip_tot_len"][i] if enc else col["ip_tot_len"][i]
        is_gso[i] = bool(col["epb_flags"][i] & C.EPB_FLAG_TCP_SEG_OFFLOAD
                         or (v == 4 and tot == 0) or (v == 6 and tot == 40) or tot > mtu)
    key = [(col["ip_src"][i], col["ip_dst"][i], col["sport"][i], col["dport"][i])
           for i in range(n)]
    syn_mss: dict = {}
    sizes: dict = {}
    for i in range(n):
        if col["l4_proto"][i] != C.IPPROTO_TCP or col["status"][i] != STATUS_OK:
            continue
        if col["tcp_flags"][i] & C.TCP_FLAG_SYN and col["tcp_mss"][i]:
            syn_mss.setdefault(key[i], col["tcp_mss"][i])
        elif not is_gso[i] and col["payload_len"][i] > 0:
            d = sizes.setdefault(key[i], {})
            d[col["payload_len"][i]] = d.get(col["payload_len"][i], 0) + 1
    gso_size = np.zeros(n, dtype=np.int32)
    segs = np.ones(n, dtype=np.int32)
    source = np.zeros(n, dtype=np.uint8)
    for i in np.flatnonzero(is_gso):
        k = key[i]
        opt = col["tcp_doff"][i] * 4 - 20
        mss = syn_mss.get((k[1], k[0], k[3], k[2])) or syn_mss.get(k)
        if mss and mss - opt > 0:
            size, src = mss - opt, coalesced.GSO_SIZE_FROM_SYN
        elif sizes.get(k):
            size = max(sizes[k].items(), key=lambda kv: (kv[1], kv[0]))[0]
            src = coalesced.GSO_SIZE_FROM_FLOW
        else:
            first = col["outer_ip_offset"][i] if col["outer_ip_version"][i] else \
                col["ip_offset"][i]
            size = mtu - (col["l4_offset"][i] + col["tcp_doff"][i] * 4 - first)
            src = coalesced.GSO_SIZE_FROM_MTU
        size = max(int(size), 1)
        gso_size[i] = size
        segs[i] = gso.gso_segs(col["payload_len"][i], size)
        source[i] = src
    return coalesced.CoalescedInput(is_gso, gso_size, segs, source)


def assert_same(a, b):
    for f in ("is_gso", "gso_size", "segs", "source"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def disturbed(seed: int, n: int, flows: int) -> pa.Table:
    """Random traffic with coalesced frames in every form the rule knows: IPv4 total
    length 0, IPv6 payload length 0, above the MTU, the pcapng TSO flag; SYNs with and
    without MSS (some carrying data), bad status rows, several sizes per direction."""
    rng = np.random.default_rng(seed)
    t = packet_table(random_traffic(rng, n, flows, tunnels=bool(seed & 1)))
    m = t.num_rows

    def put(name, values):
        f = t.schema.field(name)
        return t.set_column(t.schema.get_field_index(name), f,
                            pa.array(np.asarray(values), f.type))

    col = lambda name: t.column(name).to_numpy().copy()  # noqa: E731
    tot = col("ip_tot_len")
    pick = rng.random(m)
    v = col("ip_version")
    tot = np.where((pick < 0.1) & (v == 4), 0, tot)
    tot = np.where((pick >= 0.1) & (pick < 0.2) & (v == 6), 40, tot)
    tot = np.where((pick >= 0.2) & (pick < 0.3), rng.integers(1501, 65535, m), tot)
    t = put("ip_tot_len", tot)
    epb = col("epb_flags")
    t = put("epb_flags", np.where(rng.random(m) < 0.05, epb | C.EPB_FLAG_TCP_SEG_OFFLOAD, epb))
    flags = col("tcp_flags")
    syn = rng.random(m) < 0.08
    t = put("tcp_flags", np.where(syn, flags | C.TCP_FLAG_SYN, flags))
    t = put("tcp_mss", np.where(syn & (rng.random(m) < 0.8),
                                rng.choice([0, 1, 40, 536, 1460, 9000], m), 0))
    t = put("payload_len", np.where(rng.random(m) < 0.3, rng.choice([100, 1000, 1448], m),
                                    col("payload_len")))
    t = put("status", np.where(rng.random(m) < 0.03, 3, col("status")))
    return t


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 8),
       mtu=st.sampled_from([1500, 9000, 576]))
def test_vectorised_equals_rule(seed, n, flows, mtu):
    t = disturbed(seed, n, flows)
    want = oracle(t, mtu)
    got = coalesced.coalesced_input(t, mtu)
    assert_same(got, want)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 300), cuts=st.integers(1, 5))
def test_merged_pieces_equal_one_pass(seed, n, cuts):
    t = disturbed(seed, n, 4)
    rng = np.random.default_rng(seed)
    bounds = np.unique(np.concatenate([[0, t.num_rows],
                                       rng.integers(0, t.num_rows + 1, cuts)]))
    stats = [coalesced.CoalescedStats() for _ in range(len(bounds) - 1)]
    for s, lo, hi in zip(stats, bounds[:-1], bounds[1:]):
        s.add(t.slice(lo, hi - lo))
    merged = stats[0]
    for s in stats[1:]:
        merged.merge(s)
    whole = coalesced.coalesced_input(t)
    assert merged.num == whole.num_coalesced
    assert_same(merged.infer(t), whole)
    # inferring piece by piece gives the rows of the whole
    parts = [merged.infer(t.slice(lo, hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    for f in ("is_gso", "gso_size", "segs", "source"):
        assert np.array_equal(np.concatenate([getattr(p, f) for p in parts]),
                              getattr(whole, f)), f


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(SAMPLES, "*.pcap*"))),
                         ids=os.path.basename)
def test_samples(path):
    t, _ = decode_files(path)
    assert_same(coalesced.coalesced_input(t, 1500), oracle(t))


def test_the_rule_can_fail():
    """The oracle tells rules apart: a SYN's MSS changes the inferred size."""
    t = disturbed(7, 300, 3)
    a = oracle(t)
    assert a.num_coalesced, "the disturbed traffic must contain coalesced frames"
    syn_free = t.set_column(t.schema.get_field_index("tcp_mss"), t.schema.field("tcp_mss"),
                            pa.array(np.zeros(t.num_rows), t.schema.field("tcp_mss").type))
    assert not np.array_equal(oracle(syn_free).source, a.source)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300))
def test_hash_collisions_fall_back_to_exact_keys(seed, n):
    """Directions are grouped by a 64-bit hash checked word by word: with every hash
    colliding the exact path must give the same answer."""
    import numpy as np

    t = disturbed(seed, n, 6)
    want = oracle(t)
    real = coalesced._mix_words
    try:
        coalesced._mix_words = lambda cols: np.zeros(len(cols[0]), np.uint64)
        got = coalesced.coalesced_input(t, 1500)
    finally:
        coalesced._mix_words = real
    assert_same(got, want)


def _stats_fields(s):
    return (s.hard, s.eth_frames, s.zero_mac, s.syn_mss, s.syn_mtu, s.syn_data_tot,
            s.other_tot, s.sizes, s.num, s.mtu_inference())


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), tags=st.integers(1, 3),
       shift=st.sampled_from([0, 1 << 27]))
def test_sizes_grouped_by_flow_equal_by_direction(seed, n, tags, shift):
    """The fused pass groups data-frame sizes by the GRO engine's flow ids (each flow has
    one direction; a direction may hold several flows): the same statistics and the
    same inference as grouping by direction key; ids the packing cannot hold (from
    2**27) take the direction keys."""
    t = disturbed(seed, n, 6)
    rng = np.random.default_rng(seed)
    keys = coalesced.CoalescedStats._keys(t)
    _, direction = np.unique(keys.view(np.dtype((np.void, keys.shape[1]))).ravel(),
                             return_inverse=True)
    fid = direction.ravel() * tags + rng.integers(0, tags, t.num_rows) + shift
    by_key, by_flow = coalesced.CoalescedStats(), coalesced.CoalescedStats()
    half = t.num_rows // 2
    for lo, hi in ((0, half), (half, t.num_rows)):
        by_key.add(t.slice(lo, hi - lo))
        by_flow.add(t.slice(lo, hi - lo), fid[lo:hi])
    assert _stats_fields(by_flow) == _stats_fields(by_key)
    assert_same(by_flow.infer(t), by_key.infer(t))


def test_flow_keys_remembered_across_batches(monkeypatch):
    """By flow over many batches, the flows' direction keys remembered from their first
    batch, forgotten past FLOW_KEYS_MAX: the statistics of grouping by direction key,
    and a flow's key built again only when it was not remembered."""
    t = disturbed(11, 300, 6)
    keys = coalesced.CoalescedStats._keys(t)
    _, fid = np.unique(keys.view(np.dtype((np.void, keys.shape[1]))).ravel(),
                       return_inverse=True)
    fid = fid.ravel()
    data = np.unique(fid[by_flow_data_rows(t)])
    assert len(data) > 2
    built = []
    real = coalesced.CoalescedStats._keys

    def counting(t, rows=None):
        built.append(t.num_rows if rows is None else len(rows))
        return real(t, rows=rows)
    monkeypatch.setattr(coalesced.CoalescedStats, "_keys", staticmethod(counting))
    in_loop = {}
    for keys_max in (1 << 16, 2):
        monkeypatch.setattr(coalesced, "FLOW_KEYS_MAX", keys_max)
        by_key, by_flow = coalesced.CoalescedStats(), coalesced.CoalescedStats()
        del built[:]
        for lo in range(0, t.num_rows, 37):
            hi = min(t.num_rows, lo + 37)
            by_flow.add(t.slice(lo, hi - lo), fid[lo:hi])
        in_loop[keys_max] = sum(built)
        for lo in range(0, t.num_rows, 37):
            by_key.add(t.slice(lo, min(t.num_rows, lo + 37) - lo))
        ids, kept = by_flow._fkeys
        del built[:]
        by_flow.add(t, fid)
        again = sum(built)
        del built[:]
        coalesced.CoalescedStats().add(t, fid)   # every flow new
        fresh = sum(built)
        by_key.add(t)
        assert _stats_fields(by_flow) == _stats_fields(by_key)
        assert_same(by_flow.infer(t), by_key.infer(t))
        # built again: the SYNs' keys and the keys of the flows not remembered
        assert again == fresh - np.isin(data, ids).sum()
        for f, k in zip(ids, kept):               # each flow's own key
            assert k == coalesced._as_keys(keys[fid == f][:1])[0]
    assert in_loop[2] > in_loop[1 << 16]          # forgotten past the bound, built again
    # pickled (Dask ships statistics) without the memo, the statistics equal
    import pickle
    monkeypatch.setattr(coalesced, "FLOW_KEYS_MAX", 1 << 16)
    again = pickle.loads(pickle.dumps(by_flow))
    assert not hasattr(again, "_fkeys") and hasattr(by_flow, "_fkeys")
    again.add(t, fid)
    by_flow.add(t, fid)
    assert _stats_fields(again) == _stats_fields(by_flow)


def by_flow_data_rows(t):
    """Rows whose sizes CoalescedStats.add counts by flow (data frames)."""
    from gropcap.gro import _batch_kernels as K
    col = lambda name: t.column(name).to_numpy()  # noqa: E731
    scal = np.zeros(3, np.int64)
    other, synd = np.zeros(K.TOT_BINS, np.int64), np.zeros(K.TOT_BINS, np.int64)
    codes = np.array([STATUS_OK, C.IPPROTO_TCP, C.EPB_FLAG_TCP_SEG_OFFLOAD,
                      C.LINKTYPE_ETHERNET, C.TCP_FLAG_SYN], np.int64)
    _srows, rows, *_ = K.marks(*(np.asarray(col(name), dt)
                                 for name, dt in coalesced._MARK_COLUMNS),
                               codes, scal, other, synd, np.zeros(0, np.int64))
    return rows


def _mtu_rule(stats):
    """gro.mtu.resolve_mtu stated one direction and one size at a time over the
    dictionary views (the statement the vectorised function replaced): ``(mtu, source,
    evidence, above, largest, conflict)``."""
    from gropcap.gro.mtu import ETH_MTU, JUMBO_MAX, JUMBO_MTU, MAX_MTU
    syn_mss, syn_mtu, sizes = stats.syn_mss, stats.syn_mtu, stats.sizes

    def reverse(key):
        return key[16:32] + key[:16] + key[34:36] + key[32:34]
    tots = dict(stats.other_tot)
    for k, c in stats.syn_data_tot.items():
        tots[k] = tots.get(k, 0) + c
    for d in sizes.values():
        for k, c in d.items():
            tots[k >> 20] = tots.get(k >> 20, 0) + c
    largest = max(tots) if tots else 0

    def above(mtu):
        return sum(c for t, c in tots.items() if t > mtu)
    if syn_mtu:
        mtu = max(syn_mtu.values())
        odd = sum(c for t, c in stats.other_tot.items() if t > mtu)
        odd_largest = max((t for t in stats.other_tot if t > mtu), default=0)
        odd += sum(c for t, c in stats.syn_data_tot.items() if t > mtu)
        odd_largest = max([odd_largest] + [t for t in stats.syn_data_tot if t > mtu])
        for key, d in sizes.items():
            peer = syn_mss.get(reverse(key)) or syn_mss.get(key) or 0
            for k, c in d.items():
                t, pl = k >> 20, k & 0xFFFFF
                if t > mtu and not (peer and pl > peer):
                    odd += c
                    odd_largest = max(odd_largest, t)
        mss = sorted(set(syn_mss.values()))
        return mtu, "inferred", mss[:1] + mss[1:][-1:], len(syn_mtu), above(mtu), \
            largest, (odd, odd_largest) if odd else None
    if stats.eth_frames and stats.zero_mac == stats.eth_frames:
        return MAX_MTU, "loopback", above(MAX_MTU), largest
    jumbo = []
    for d in sizes.values():
        by_tot = {}
        for k, c in d.items():
            by_tot[k >> 20] = by_tot.get(k >> 20, 0) + c
        t, c = max(by_tot.items(), key=lambda tc: (tc[1], tc[0]))
        if ETH_MTU < t <= JUMBO_MAX and c >= 2:
            pl = max(k & 0xFFFFF for k in d if k >> 20 == t)
            if not any(0 < (k & 0xFFFFF) < pl and pl % (k & 0xFFFFF) == 0 for k in d):
                jumbo.append(t)
    if jumbo:
        size = max(jumbo)
        mtu = JUMBO_MTU if size <= JUMBO_MTU else size
        return mtu, "jumbo", len(jumbo), above(mtu), largest
    return ETH_MTU, "default", above(ETH_MTU), largest


def _mtu_got(stats):
    import re
    inf = stats.mtu_inference()
    if inf.source == "inferred" and "MSS option" in inf.evidence:
        n = int(re.search(r"of (\d+) SYN", inf.evidence).group(1))
        m = re.search(r"MSS (\d+)(?:\.\.(\d+))?", inf.evidence)
        conflict = None
        if inf.conflict:
            c = re.search(r": (\d+) frames \(up to (\d+) IP bytes\)", inf.conflict)
            conflict = (int(c.group(1)), int(c.group(2)))
        mss = [int(m.group(1))] + ([int(m.group(2))] if m.group(2) else [])
        return inf.mtu, "inferred", mss, n, inf.above, inf.largest, conflict
    if "all-zero MAC" in inf.evidence:
        return inf.mtu, "loopback", inf.above, inf.largest
    if "full segments" in inf.evidence:
        n = int(re.search(r"of (\d+) TCP direction", inf.evidence).group(1))
        return inf.mtu, "jumbo", n, inf.above, inf.largest
    return inf.mtu, "default", inf.above, inf.largest


def _mtu_traffic(seed, n, flows, syn, jumbo, cuts):
    """Traffic for the MTU rules: SYNs with an MSS or none; with ``jumbo``, full
    segments of 9000-byte frames and their multiples' single segments; and up to
    ``cuts`` cut points (row bounds, 0 and the end included)."""
    t = disturbed(seed, n, flows)
    rng = np.random.default_rng(seed)
    m = t.num_rows
    if not syn:
        t = t.set_column(t.schema.get_field_index("tcp_mss"), t.schema.field("tcp_mss"),
                         pa.array(np.zeros(m), t.schema.field("tcp_mss").type))
    if jumbo:
        pick = rng.random(m) < 0.5
        tot = t.column("ip_tot_len").to_numpy().copy()
        t = t.set_column(t.schema.get_field_index("ip_tot_len"),
                         t.schema.field("ip_tot_len"),
                         pa.array(np.where(pick, rng.choice([9000, 8000, 4000], m), tot),
                                  t.schema.field("ip_tot_len").type))
    return t, np.unique(np.concatenate([[0, m], rng.integers(0, m + 1, cuts)]))


@pytest.mark.parametrize("fold_min", [1, 7, 1 << 16])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 8),
       syn=st.booleans(), jumbo=st.booleans(), cuts=st.integers(0, 4))
def test_mtu_inference_equals_the_rule(fold_min, seed, n, flows, syn, jumbo, cuts):
    """The vectorised MTU inference over the per-direction arrays equals the rule
    stated one direction at a time (SYN MTU and its conflicting frames, the peer's MSS;
    jumbo full segments; loopback; the default), with the statistics built in pieces and
    folded early or late (``FOLD_MIN``)."""
    import gropcap.gro.coalesced as co
    real = co.FOLD_MIN
    co.FOLD_MIN = fold_min
    try:
        t, bounds = _mtu_traffic(seed, n, flows, syn, jumbo, cuts)
        pieces = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            s = co.CoalescedStats()
            s.add(t.slice(lo, hi - lo))
            pieces.append(s)
        merged = pieces[0]
        for s in pieces[1:]:
            merged.merge(s)
        assert _mtu_got(merged) == _mtu_rule(merged)
        whole = co.CoalescedStats()
        whole.add(t)
        assert _stats_fields(merged) == _stats_fields(whole)
    finally:
        co.FOLD_MIN = real


@pytest.mark.parametrize("slice_keys", [1, 3, 1 << 17])
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 8),
       syn=st.booleans(), jumbo=st.booleans(), cuts=st.integers(0, 4),
       spilled=st.integers(0, 31))
def test_statistics_left_in_files_infer_what_one_pass_infers(slice_keys, seed, n, flows,
                                                             syn, jumbo, cuts, spilled):
    """A Dask task's statistics stay in its work directory (``CoalescedStats.spill``)
    and travel pickled as a path; merged with others, in memory or not, in capture
    order, they read a key range at a time (``SLICE_KEYS``) and look keys up in every
    piece. Pieces of one capture share directions (the first SYN of a direction is the
    first piece's). The MTU inference, the rule stated one direction at a time over the
    whole capture, every statistic and every row's inference equal one pass's."""
    import pickle
    import tempfile

    import gropcap.gro.coalesced as co
    real = co.SLICE_KEYS
    co.SLICE_KEYS = slice_keys
    try:
        t, bounds = _mtu_traffic(seed, n, flows, syn, jumbo, cuts)
        m = t.num_rows
        whole = co.CoalescedStats()
        whole.add(t)
        with tempfile.TemporaryDirectory() as tmp:
            pieces = []
            for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                s = co.CoalescedStats()
                s.add(t.slice(lo, hi - lo))
                if spilled >> i & 1:
                    s.spill(os.path.join(tmp, str(i)), min_entries=0)
                    assert s._parts and not len(s._syn[0]) and not len(s._size[1])
                pieces.append(pickle.loads(pickle.dumps(s)))
            merged = pieces[0]
            for s in pieces[1:]:
                merged.merge(s)
            mask = (1 << len(pieces)) - 1
            if spilled & mask:
                assert merged._parts
            if spilled & mask == mask:
                # every piece on disk: what is pickled is paths, not arrays
                assert not len(merged._syn[0]) and not len(merged._size[1])
                assert len(pickle.dumps(merged)) < 4096
            assert _mtu_got(merged) == _mtu_rule(whole)
            assert _stats_fields(merged) == _stats_fields(whole)
            got, want = merged.summary(), whole.summary()
            assert got[:2] == want[:2]
            for a, b in zip(got[2:], want[2:]):
                assert np.array_equal(a, b)
            shipped = pickle.loads(pickle.dumps(merged))
            assert_same(shipped.infer(t), whole.infer(t))
            half = co.CoalescedStats()
            half.add(t.slice(0, m // 2))
            assert merged.shares_syn(half) == whole.shares_syn(half)
    finally:
        co.SLICE_KEYS = real


def test_spilled_statistics_keep_small_ones_in_memory(tmp_path):
    """Below ``SPILL_MIN`` entries the arrays stay in memory: nothing is written."""
    t = disturbed(7, 50, 3)
    s = coalesced.CoalescedStats()
    s.add(t)
    s.spill(str(tmp_path / "p"))
    assert not s._parts and not (tmp_path / "p").exists()
    s.spill(str(tmp_path / "p"), min_entries=1)
    assert s._parts and sorted(os.listdir(tmp_path / "p")) == sorted(
        f + ".npy" for f in coalesced._Part.FILES)


def _add_rule(t):
    """CoalescedStats.add's counts stated one row at a time: hard rows, Ethernet frames,
    those with both MACs zero, and the outermost IP lengths of SYNs carrying data (not
    hard) and of IP rows without data."""
    col = {name: t.column(name).to_pylist() for name in (
        "status", "l4_proto", "payload_len", "epb_flags", "outer_ip_version", "ip_version",
        "outer_ip_tot_len", "ip_tot_len", "linktype", "eth_dst", "eth_src", "tcp_flags",
        "tcp_mss")}
    hard = eth = zero = 0
    synd: dict = {}
    other: dict = {}
    for i in range(t.num_rows):
        enc = col["outer_ip_version"][i] != 0
        v = col["outer_ip_version"][i] if enc else col["ip_version"][i]
        tot = col["outer_ip_tot_len"][i] if enc else col["ip_tot_len"][i]
        tcp = col["status"][i] == STATUS_OK and col["l4_proto"][i] == C.IPPROTO_TCP
        data = tcp and col["payload_len"][i] != 0
        is_hard = data and bool(col["epb_flags"][i] & C.EPB_FLAG_TCP_SEG_OFFLOAD
                                or (v == 4 and tot == 0) or (v == 6 and tot == 40))
        hard += is_hard
        if col["linktype"][i] == C.LINKTYPE_ETHERNET:
            eth += 1
            zero += col["eth_dst"][i] == 0 and col["eth_src"][i] == 0
        syn = tcp and bool(col["tcp_flags"][i] & C.TCP_FLAG_SYN) and col["tcp_mss"][i] != 0
        if data and not is_hard and syn:
            synd[tot] = synd.get(tot, 0) + 1
        elif not data and col["ip_version"][i] != 0:
            other[tot] = other.get(tot, 0) + 1
    return hard, eth, zero, dict(sorted(synd.items())), dict(sorted(other.items()))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), flows=st.integers(1, 8))
def test_counts_of_one_pass_equal_the_rule_row_by_row(seed, n, flows):
    """CoalescedStats.add's one-pass kernel (gro._batch_kernels.marks) against the
    rule row by row, with zero MACs, IPv6 jumbogram lengths past 65 535 on SYNs with data
    and on rows without data, and the batch added in two parts."""
    t = disturbed(seed, n, flows)
    rng = np.random.default_rng(seed)
    m = t.num_rows

    def put(t, name, values):
        f = t.schema.field(name)
        return t.set_column(t.schema.get_field_index(name), f,
                            pa.array(np.asarray(values), f.type))
    zero = rng.random(m) < 0.2
    t = put(t, "eth_dst", np.where(zero, 0, t.column("eth_dst").to_numpy()))
    t = put(t, "eth_src", np.where(zero | (rng.random(m) < 0.1), 0,
                                   t.column("eth_src").to_numpy()))
    for name in ("ip_tot_len", "outer_ip_tot_len"):
        jumbo = rng.random(m) < 0.1
        t = put(t, name, np.where(jumbo, rng.integers(65536, 1 << 20, m),
                                  t.column(name).to_numpy()))
    got = coalesced.CoalescedStats()
    half = m // 2
    got.add(t.slice(0, half))
    got.add(t.slice(half))
    hard, eth, zero_mac, synd, other = _add_rule(t)
    assert (got.hard, got.eth_frames, got.zero_mac) == (hard, eth, zero_mac)
    assert dict(sorted(got.syn_data_tot.items())) == synd
    assert dict(sorted(got.other_tot.items())) == other


@pytest.mark.parametrize("distinct", [1, 7, 300, 5000])
def test_pairs_counted_by_hashing_equal_unique(distinct):
    """coalesced._unique_counts (a hash table grown from 256 slots) gives what
    np.unique(return_index, return_counts) gives."""
    rng = np.random.default_rng(distinct)
    pairs = rng.integers(0, distinct, 20000) * (1 << 36) + rng.integers(0, 3, 20000)
    got = coalesced._unique_counts(pairs)
    want = np.unique(pairs, return_index=True, return_counts=True)
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


@pytest.mark.parametrize("collide", [False, True])
def test_distinct_keys_by_their_mix_and_on_a_collision_exactly(collide, monkeypatch):
    """``coalesced._distinct`` (what a fold groups the pending entries' keys with): every
    key is ``distinct[inverse]``, each distinct once; when two keys mix alike (forced
    here) the exact ``np.unique`` of the keys gives them."""
    import numpy as np

    from gropcap.gro import coalesced as co
    if collide:
        monkeypatch.setattr(co, "_mix_words", lambda cols: np.zeros(len(cols[0]), np.uint64))
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 256, (50, co.KEY_BYTES), dtype=np.uint8)
    pool[:, -3:] = 0                   # trailing NULs: compared as bytes all the same
    rows = pool[rng.integers(0, len(pool), 2000)]
    keys = co._as_keys(rows)
    distinct, inv = co._distinct(keys)
    assert np.array_equal(distinct[inv], keys)
    assert len(distinct) == len(np.unique(keys)) == len({r.tobytes() for r in rows})
