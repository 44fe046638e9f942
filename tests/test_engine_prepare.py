"""engine.prepare's fused numba helpers against plain oracles.

The preparation packs and deduplicates keys in numba (``_kernels.same_flow_classes``,
``flow_classes``), hashes RSS in one pass (``rss._rss_select_kernel``), compares TCP
option areas without materialised copies (``_kernels._options_differ_beyond_ts``) and
keeps held headers in narrow dtypes. Each is checked here against an independent
definition: Python tuples of the fields the kernel compares, ``flows.assign_flow_ids``,
``rss.rss_inputs`` + ``_rss_kernel``, ``_kernels.zero_timestamps``, and the reference
GRO model on extreme header values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap.constants import GRE_CSUM, GRE_KEY, TUN_GRE, TUN_GRE_TEB, TUN_IPIP
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.gro import _kernels as K
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import (
    EngineState, _flow_ids, _same_flow_ids, simulate, simulate_batch, assemble,
)
from gropcap.gro.flows import assign_flow_ids
from gropcap.gro.rss import _rss_kernel, rss_hash, rss_inputs, toeplitz_table
from gropcap.gro.result import GroResult
from test_gro_engine_traffic import packet_table, tcp_row

reference = pytest.importorskip("gropcap.gro.reference")


# --- a random table with few distinct values per column (many equal keys) --------------

_CHOICES = {
    "ip_version": [0, 4, 6], "outer_ip_version": [0, 0, 4, 6],
    "tun_type": [0, 0, TUN_GRE, TUN_GRE_TEB, TUN_IPIP],
    "tun_flags": [0, GRE_KEY, GRE_KEY | GRE_CSUM, 0x8000 | 0x0001],
    "dsa_port": [-1, 0, 3, 32767], "ip_ttl": [1, 64, 255], "outer_ip_ttl": [7, 255],
    # MAC addresses are 48-bit values in their uint64 columns (decode/schema.py)
    **{m: [0, 1, 2**48 - 1] for m in ("eth_dst", "eth_src", "inner_eth_dst",
                                      "inner_eth_src")},
}


def random_table(n: int, seed: int, templates: int = 40) -> pa.Table:
    """``templates`` random rows (few values per column, range ends included), each row a
    copy of one of them with, one time in five, one column changed."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, templates, n)
    arrays = []
    names = [f.name for f in PACKET_SCHEMA]
    changed = np.where(rng.random(n) < 0.2, rng.integers(0, len(names), n), -1)
    for ci, f in enumerate(PACKET_SCHEMA):
        t = f.type

        def draw(m):
            if pa.types.is_fixed_size_binary(t):
                pool = rng.integers(0, 256, (3, t.byte_width), dtype=np.uint8)
                pool[0] = 0
                return pool[rng.integers(0, 3, m)]
            dt = np.dtype(t.to_pandas_dtype())
            if f.name in _CHOICES:
                c = _CHOICES[f.name]
                return np.array(c)[rng.integers(0, len(c), m)].astype(dt)
            if dt == np.bool_:
                return rng.random(m) < 0.5
            return np.array([0, 1, np.iinfo(dt).max], dtype=dt)[rng.integers(0, 3, m)]

        if pa.types.is_dictionary(t):
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, np.int32)), pa.array(["x"])))
            continue
        vals = draw(templates)[pick]
        mine = changed == ci
        vals[mine] = draw(int(mine.sum()))
        if pa.types.is_fixed_size_binary(t):
            arrays.append(pa.FixedSizeBinaryArray.from_buffers(
                t, n, [None, pa.py_buffer(np.ascontiguousarray(vals).tobytes())]))
        else:
            arrays.append(pa.array(vals))
    return pa.Table.from_arrays(arrays, schema=PACKET_SCHEMA)


def naive_same_flow(t: pa.Table, hash_: np.ndarray, use: np.ndarray, hops: bool):
    """Same-flow classes from Python tuples of exactly the compared fields, numbered by
    first appearance (-1 where not ``use``)."""
    d = {name: t.column(name).to_pylist() for name in t.column_names
         if name != "encap"}
    ids = np.full(t.num_rows, -1, np.int64)
    seen: dict = {}
    for r in range(t.num_rows):
        if not use[r]:
            continue
        key = [int(hash_[r]), d["iface"][r], d["dsa_port"][r] & 0xFFFF, d["eth_dst"][r],
               d["eth_type"][r], d["eth_src"][r], d["vlan_depth"][r], d["vlan_tpid0"][r],
               d["vlan_tci0"][r], d["vlan_tpid1"][r], d["vlan_tci1"][r]]
        for p in ("outer_ip_", "ip_"):
            v6 = d[p + "version"][r] == 6
            key += [d[p + "version"][r], d[p + "proto"][r],
                    d[p + "ext_mask"][r] if v6 else 0, d[p + "ext_len"][r] if v6 else 0,
                    d[p + "flow_label"][r] if v6 else 0, d[p + "ext_digest"][r] if v6 else 0,
                    d[p + "src"][r], d[p + "dst"][r]]
            if hops:
                key.append(d[p + "ttl"][r] if v6 else 0)
        tun, fl = d["tun_type"][r], d["tun_flags"][r]
        gre, teb = tun in (TUN_GRE, TUN_GRE_TEB), tun == TUN_GRE_TEB
        key += [tun, fl if gre else 0, d["tun_proto"][r] if gre else 0,
                d["tun_key"][r] if gre and fl & GRE_KEY else 0,
                d["inner_eth_dst"][r] if teb else 0, d["inner_eth_type"][r] if teb else 0,
                d["inner_eth_src"][r] if teb else 0, d["sport"][r], d["dport"][r]]
        ids[r] = seen.setdefault(tuple(key), len(seen))
    return ids


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kernel", ["6.18", "5.4"])     # 5.4: IPv6 hop limit in the key
def test_fused_same_flow_classes_equal_field_tuples(seed, kernel):
    t = random_table(3000, seed)
    rng = np.random.default_rng(seed)
    hash_ = rng.integers(0, 4, t.num_rows).astype(np.uint32) * np.uint32(0x9E3779B9)
    use = rng.random(t.num_rows) < 0.8
    cfg = GroConfig(kernel=KernelProfile.parse(kernel))
    key, loose = _same_flow_ids(t, cfg, hash_, use, EngineState.new(cfg))
    hops = kernel == "5.4"
    want_key = naive_same_flow(t, hash_, use, hops)
    assert np.array_equal(key, want_key)
    assert 40 < key.max() < 1500                       # collisions and distinct keys
    want_loose = naive_same_flow(t, hash_, use, False) if hops else want_key
    assert np.array_equal(loose, np.maximum(want_loose, 0))
    if hops:
        assert loose.max() < key.max()                 # the hop limit split classes


@pytest.mark.parametrize("batches", [1, 3, 7])
def test_key_tables_number_across_batches(batches):
    """Global ids through the KeyTables: the same as numbering the whole table at once."""
    t = random_table(2100, 11)
    rng = np.random.default_rng(5)
    hash_ = rng.integers(0, 3, t.num_rows).astype(np.uint32)
    use = rng.random(t.num_rows) < 0.9
    cfg = GroConfig(kernel=KernelProfile.parse("5.4"))
    st = EngineState.new(cfg)
    keys, flows = [], []
    for idx in np.array_split(np.arange(t.num_rows), batches):
        part = t.take(pa.array(idx))
        k, _ = _same_flow_ids(part, cfg, hash_[idx], use[idx], st)
        keys.append(k)
        flows.append(_flow_ids(part, st))
    assert np.array_equal(np.concatenate(keys), naive_same_flow(t, hash_, use, True))
    assert np.array_equal(np.concatenate(flows), assign_flow_ids(t))


def test_flow_ids_equal_assign_flow_ids():
    t = random_table(5000, 7)
    ids = _flow_ids(t, EngineState.new(GroConfig()))
    assert np.array_equal(ids, assign_flow_ids(t))
    assert ids.max() > 100


def test_flow_ids_of_a_sliced_chunked_table():
    """Column reads honour Arrow offsets (slices) and several chunks."""
    t = random_table(4000, 8)
    chunked = pa.concat_tables([t.slice(0, 1500), t.slice(1500)]).slice(700, 2500)
    assert chunked.column("ip_src").num_chunks == 2
    ids = _flow_ids(chunked, EngineState.new(GroConfig()))
    assert np.array_equal(ids, assign_flow_ids(chunked.combine_chunks()))


@pytest.mark.parametrize("seed", [4, 5])
def test_rss_hash_one_pass_equals_selected_inputs(seed):
    t = random_table(4000, seed)
    key = GroConfig().rss_key
    want = np.zeros(t.num_rows, np.uint32)
    _rss_kernel(toeplitz_table(bytes(key).ljust(40, b"\0")), *rss_inputs(t), want)
    got = rss_hash(t, key)
    assert np.array_equal(got, want)
    assert len(np.unique(got)) > 20


# --- TCP option areas: timestamp-only differences -----------------------------------------

def _option_area(rng) -> tuple[bytes, int]:
    parts = []
    for _ in range(int(rng.integers(0, 6))):
        k = rng.choice(["nop", "eol", "ts", "mss", "sack", "junk"],
                       p=[0.3, 0.05, 0.3, 0.1, 0.1, 0.15])
        if k == "nop":
            parts.append(b"\x01")
        elif k == "eol":
            parts.append(b"\x00")
        elif k == "ts":
            parts.append(b"\x08\x0a" + rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
        elif k == "mss":
            parts.append(b"\x02\x04\x05\xb4")
        elif k == "sack":
            parts.append(b"\x05\x0a" + rng.integers(0, 3, 8, dtype=np.uint8).tobytes())
        else:
            parts.append(rng.integers(0, 256, int(rng.integers(1, 5)),
                                      dtype=np.uint8).tobytes())
    body = b"".join(parts)[:40]
    ln = int(rng.choice([len(body), len(body) + 4 * int(rng.integers(0, 3)),
                         int(rng.integers(0, 41)), int(rng.integers(41, 256))],
                        p=[0.6, 0.15, 0.15, 0.1]))
    return body.ljust(40, b"\0"), ln


def _mutate(rng, body: bytes, ln: int) -> tuple[bytes, int]:
    b = bytearray(body)
    r = rng.random()
    if r < 0.4:                         # only timestamp values (where there is one)
        for x in range(len(b) - 9):
            if b[x] == 8 and b[x + 1] == 10:
                b[x + 2 + int(rng.integers(0, 8))] ^= 0xFF
                break
    elif r < 0.7:
        b[int(rng.integers(0, 40))] = int(rng.integers(0, 256))
    elif r < 0.8:
        ln = int(rng.integers(0, 256))
    return bytes(b), ln


def test_option_compare_matches_zeroed_timestamp_copies():
    """FLUSH_TCP_TS / FLUSH_TCP_OPTIONS without the per-row copies: the same decision as
    comparing the 48-byte areas and their zero_timestamps copies (the former path)."""
    from collections import namedtuple

    rng = np.random.default_rng(17)
    n = 4000
    a = [_option_area(rng) for _ in range(n)]
    b = [_mutate(rng, *x) if rng.random() < 0.9 else _option_area(rng) for x in a]

    def area48(rows):
        m = np.zeros((n, 48), np.uint8)
        for r, (body, ln) in enumerate(rows):
            m[r, :40] = np.frombuffer(body, np.uint8)
            m[r, 40] = ln & 0xFF
        return m

    lens_a = np.array([x[1] for x in a], np.int64)
    lens_b = np.array([x[1] for x in b], np.int64)
    ma, mb = area48(a), area48(b)
    same_want = (ma == mb).all(axis=1)
    ts_only_want = (K.zero_timestamps(ma, lens_a) == K.zero_timestamps(mb, lens_b)).all(axis=1)
    # packet side: the option column and its length; held side: State.e_opt layout
    C = namedtuple("C", "opt opt_len")
    S = namedtuple("S", "e_opt")
    c = C(np.ascontiguousarray(ma[:, :40]).view(np.uint64), lens_a)
    e = np.zeros((n, K.OPT_WORDS + 1), np.uint64)
    e[:, :K.OPT_WORDS] = np.ascontiguousarray(mb[:, :40]).view(np.uint64)
    e[:, K.OPT_WORDS] = ((lens_b & 0xFF) | (np.minimum(lens_b, 48) << 8)).astype(np.uint64)
    s = S(e)
    got_same = np.array([K._same_options(i, i, c, s) for i in range(n)])
    got_beyond = np.array([K._options_differ_beyond_ts(i, i, c, s) for i in range(n)])
    assert np.array_equal(got_same, same_want)
    diff = ~same_want
    assert np.array_equal(got_beyond[diff], ~ts_only_want[diff])
    # every outcome occurs
    assert same_want.sum() > 50 and (diff & ts_only_want).sum() > 300 \
        and (diff & ~ts_only_want).sum() > 300


# --- narrow held-header dtypes: extreme values, fast == reference --------------------------

def _assert_same(fast: GroResult, ref: GroResult, what: str):
    for name in GroResult.__dataclass_fields__:
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), (what, name)


@pytest.mark.parametrize("kernel", ["4.4", "5.4", "6.12", "6.18"])   # every IP ID era
@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_held_headers_at_the_top_of_their_ranges(kernel, model):
    """Sequence numbers wrapping 2**32, IP IDs wrapping 2**16, window 65535, TTL and TOS
    255, every flag bit: the held copy (uint32/uint16/uint8 fields) compares exactly as
    the reference."""
    rows = []
    seq0, id0 = 2**32 - 3000, 0xFFFE
    for f in range(4):
        v = 4 if f % 2 == 0 else 6
        src, dst = (f"10.0.0.{f + 1}", "10.0.9.9") if v == 4 else (f"fd00::{f + 1}", "fd00::9")
        for k in range(8):
            flags = 0x10 | (0x08 if k == 7 else 0) | (0x40 if f == 3 and k == 3 else 0)
            tsopt = b"\x01\x01\x08\x0a" + (2**32 - 1 - k // 4).to_bytes(4, "big") + bytes(4)
            rows.append(tcp_row(v, src, dst, 65535 - f, 65535, seq=(seq0 + 1000 * k) % 2**32,
                                payload=1000, ack=2**32 - 1, flags=flags, ttl=255,
                                tos=0xFF if f else 0xFC, window=65535, options=tsopt,
                                ip_id=(id0 + (0 if f == 2 else k)) & 0xFFFF))
    # the four flows interleaved, one segment each in turn
    rows = [dict(rows[f * 8 + k], ts_ns=1000 * (4 * k + f + 1)) for k in range(8)
            for f in range(4)]
    t = packet_table(rows)
    cfg = GroConfig(model=model, kernel=KernelProfile.parse(kernel))
    fast = simulate(t, cfg)
    _assert_same(fast, reference.simulate(t, cfg), f"{kernel} {model}")
    assert fast.num_superpackets < len(rows)                  # merges happened


def test_state_grows_by_half_and_streams_equal():
    """Many flows over many batches (state grows 1.5x at a time): streaming == one call."""
    rows = []
    for k in range(3):
        for f in range(300):
            rows.append(tcp_row(4, f"10.{f // 250}.{f % 250}.1", "10.9.9.9", 1000 + f, 80,
                                seq=1 + 1000 * k, payload=1000, ts_ns=len(rows) * 100))
    t = packet_table(rows)
    cfg = GroConfig()
    st, parts = None, []
    sizes = []
    for i, idx in enumerate(np.array_split(np.arange(t.num_rows), 9)):
        part, st = simulate_batch(t.take(pa.array(idx)), cfg, st, final=i == 8)
        parts.append(part)
        sizes.append(st.kernel.e_first.shape[0])
    _assert_same(assemble(parts, cfg), simulate(t, cfg), "stream")
    assert sizes[-1] < 2 * 300 and sizes == sorted(sizes)
    assert st.kernel.e_seq.dtype == np.uint32 and st.kernel.e_opt.shape[1] == 6


@pytest.mark.parametrize("kernel", ["6.18", "5.4"])
def test_matrix_fallback_numbers_like_the_fused_kernels(monkeypatch, kernel):
    """Batches too long for the int32 slots of the fused kernels take the (words, n)
    matrix path (pack, dedup_reps, gather_rows): same ids."""
    import gropcap.gro.engine as E

    t = random_table(2500, 21)
    rng = np.random.default_rng(21)
    hash_ = rng.integers(0, 3, t.num_rows).astype(np.uint32)
    use = rng.random(t.num_rows) < 0.85
    cfg = GroConfig(kernel=KernelProfile.parse(kernel))
    fused = _same_flow_ids(t, cfg, hash_, use, EngineState.new(cfg))
    fused_flow = _flow_ids(t, EngineState.new(cfg))
    monkeypatch.setattr(E, "_FUSED_MAX_ROWS", 0)
    st = EngineState.new(cfg)
    key, loose = _same_flow_ids(t, cfg, hash_, use, st)
    assert np.array_equal(key, fused[0]) and np.array_equal(loose, fused[1])
    assert np.array_equal(_flow_ids(t, st), fused_flow)
    # and a whole simulation through that path equals the reference
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, seq=1 + 1000 * k, payload=1000,
                    ts_ns=1000 * k) for k in range(6)]
    small = packet_table(rows)
    _assert_same(simulate(small, cfg), reference.simulate(small, cfg), "fallback")
