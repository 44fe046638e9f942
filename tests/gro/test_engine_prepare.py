"""engine.prepare's fused numba helpers against plain oracles.

The preparation numbers same-flow, loose and flow keys in one numba pass over persistent
key tables (``fast.keys.classify``), hashes RSS in one pass (``rss._rss_select_kernel``),
compares TCP option areas without materialised copies
(``fast.tcp._options_differ_beyond_ts``) and keeps held headers in narrow dtypes. Each
is checked here against an independent definition: Python tuples of the fields the
kernel compares, ``flows.assign_flow_ids``, ``rss.rss_inputs`` + ``_rss_kernel``,
``fast.tcp.zero_timestamps``, the numpy formulation of the bypass checks
(``naive_pre_and_flush``, the engine's code before its numba pass), and the reference
GRO model on extreme header values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap.constants import (
    ETH_P_8021AD, ETH_P_8021Q, ETH_P_QINQ1, GRE_CSUM, GRE_KEY, IP6_EXT_FRAGMENT,
    IP6_EXT_OTHER, IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP,
    TUN_GENEVE, TUN_GRE, TUN_GRE_TEB, TUN_IP4IP6, TUN_IP6IP6, TUN_IPIP, TUN_SIT, TUN_VXLAN,
    TUN_VXLAN_GPE,
)
from gropcap.decode.schema import (
    CSUM_BAD, CSUM_PARTIAL, PACKET_SCHEMA, STATUS_BAD_L4_HEADER, STATUS_BAD_TUNNEL_HEADER,
    STATUS_ENCAP_TOO_DEEP, STATUS_NOT_IP, STATUS_OK, STATUS_UNSUPPORTED_ENCAP,
    STATUS_UNSUPPORTED_LINKTYPE,
)
from gropcap.gro.fast import state, tcp
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import (
    EngineState, _flow_ids, _same_flow_ids, simulate, simulate_batch, assemble,
)
from gropcap.gro.flows import assign_flow_ids
from gropcap.gro.reasons import (
    BYPASS_DECODE, BYPASS_GRO_DISABLED, BYPASS_IP_CSUM, BYPASS_IP_FRAGMENT, BYPASS_IP_OPTIONS,
    BYPASS_IPV6_EXTHDR, BYPASS_L4_CSUM, BYPASS_NO_L4_OFFLOAD, BYPASS_NO_VLAN_GRO,
    BYPASS_NOT_IP, BYPASS_TCP_HEADER, BYPASS_TUNNEL, BYPASS_UDP_NO_GRO, NOT_HELD_IP_RF,
    NOT_HELD_LENGTH,
)
from gropcap.gro.rss import (_rss_kernel, column_bytes, column_numpy, rss_hash, rss_inputs,
                             toeplitz_table)
from gropcap.gro.result import GroResult
from tests.gro.test_gro_engine_traffic import packet_table, tcp_row

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
        # vlan_gro_receive on GRE-TEB's inner tags
        key += [d["inner_vlan_" + f][r] if teb else 0
                for f in ("depth", "tci0", "tpid1", "tci1")]
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
    ts_only_want = (tcp.zero_timestamps(ma, lens_a)
                    == tcp.zero_timestamps(mb, lens_b)).all(axis=1)
    # packet side: the option column and its length; held side: State.e_opt layout
    C = namedtuple("C", "opt opt_len")
    S = namedtuple("S", "e_opt ent")
    c = C(np.ascontiguousarray(ma[:, :40]).view(np.uint64), lens_a)
    e = np.zeros((n, state.OPT_WORDS + 1), np.uint64)
    e[:, :state.OPT_WORDS] = np.ascontiguousarray(mb[:, :40]).view(np.uint64)
    e[:, state.OPT_WORDS] = ((lens_b & 0xFF)
                             | (np.minimum(lens_b, 48) << 8)).astype(np.uint64)
    ent = np.zeros(n, state.ENTRY)          # the kernels read State.ent, the record array
    ent["e_opt"] = e
    s = S(ent["e_opt"], ent)
    got_same = np.array([tcp._same_options(i, i, c, s) for i in range(n)])
    got_beyond = np.array([tcp._options_differ_beyond_ts(i, i, c, s) for i in range(n)])
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


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_shared_constant_inputs_stay_constant(model):
    """engine._constant hands the same arrays to every batch (queue 0, no poll windows,
    no UDP, rows 0..n-1): after runs of both models, batch by batch, and a stream with
    coalesced input (its own arrays), each still holds its value."""
    from gropcap.gro import engine
    from gropcap.gro.coalesced import CoalescedInput

    rows = [tcp_row(4, f"10.0.0.{f + 1}", "10.9.9.9", 1000 + f, 80, seq=1 + 1000 * k,
                    payload=1000, ts_ns=1000 * (4 * k + f + 1), flags=0x18 if k == 5 else 0x10)
            for k in range(6) for f in range(4)]
    t = packet_table(rows)
    cfg = GroConfig(model=model)
    engine._CONSTANTS.clear()
    st = None
    for i, idx in enumerate(np.array_split(np.arange(t.num_rows), 3)):
        _part, st = simulate_batch(t.take(pa.array(idx)), cfg, st, final=i == 2)
    n = t.num_rows
    gso = CoalescedInput(is_gso=np.arange(n) % 5 == 0, gso_size=np.full(n, 500),
                         segs=np.full(n, 2), source=np.zeros(n, np.uint8))
    simulate(t, cfg, coalesced=gso)
    assert engine._CONSTANTS                       # the batches did share arrays
    for (m, dt, value, arange), a in engine._CONSTANTS.items():
        assert a.shape == (m,) and a.dtype == np.dtype(dt)
        want = np.arange(m) if arange else np.full(m, value)
        assert np.array_equal(a, want), (m, dt, value, arange)


@pytest.mark.parametrize("kernel", ["6.18", "5.4"])
def test_flow_fallback_numbers_like_the_packed_kernel(monkeypatch, kernel):
    """When flows.FLOW_KEY_COLUMNS is not what ``fast.keys._flow_row`` packs, flow ids
    come from the byte matrix (flow_key_matrix, dedup_reps, gather_rows): same ids, and
    the same-flow classes do not change."""
    import gropcap.gro.engine as E

    t = random_table(2500, 21)
    rng = np.random.default_rng(21)
    hash_ = rng.integers(0, 3, t.num_rows).astype(np.uint32)
    use = rng.random(t.num_rows) < 0.85
    cfg = GroConfig(kernel=KernelProfile.parse(kernel))
    fused = _same_flow_ids(t, cfg, hash_, use, EngineState.new(cfg))
    fused_flow = _flow_ids(t, EngineState.new(cfg))
    monkeypatch.setattr(E, "_FLOW_PACKED", set())
    st = EngineState.new(cfg)
    key, loose = _same_flow_ids(t, cfg, hash_, use, st)
    assert np.array_equal(key, fused[0]) and np.array_equal(loose, fused[1])
    assert np.array_equal(_flow_ids(t, st), fused_flow)
    assert np.array_equal(fused_flow, assign_flow_ids(t))
    # and a whole simulation through that path equals the reference
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 80, seq=1 + 1000 * k, payload=1000,
                    ts_ns=1000 * k) for k in range(6)]
    small = packet_table(rows)
    _assert_same(simulate(small, cfg), reference.simulate(small, cfg), "fallback")


# --- bypass codes: the numba pass against the numpy formulation ---------------------------

_L3_HANDLERS = (IPPROTO_TCP, IPPROTO_UDP, IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6)
_NATIVE_TUNNELS = (TUN_GRE, TUN_GRE_TEB, TUN_IPIP, TUN_SIT, TUN_IP6IP6, TUN_IP4IP6)
_UDP_TUNNELS = (TUN_VXLAN, TUN_VXLAN_GPE, TUN_GENEVE)


def naive_pre_and_flush(t: pa.Table, config: GroConfig, no_gro=None, sfl_fl=None):
    """The bypass codes and skb flushes as numpy masks, one check after another in the
    kernel's evaluation order (the engine's formulation before its numba pass)."""
    n = t.num_rows
    g = lambda name, dt=np.int64: column_numpy(t, name, dt)  # noqa: E731
    status = g("status", np.uint8)
    pre = np.zeros(n, np.uint8)

    def bail(mask, code):
        pre[(pre == 0) & mask] = code

    wire = g("wire_len")
    # dev_gro_receive: netif_elide_gro (GRO off on the receiving device)
    if not config.native_gro:
        bail(np.ones(n, np.bool_), BYPASS_GRO_DISABLED)
    if no_gro is not None:
        bail(np.asarray(no_gro, np.bool_), BYPASS_GRO_DISABLED)
    dsa = g("dsa_tag", np.uint8) != 0
    if config.tunnel_gro is not None:
        # gro_cells stage modelled: eth_type_trans gives ETH_P_XDSA on the conduit, which
        # has no packet_offload; the user port's gro_cells runs GRO (gro/stages.py)
        bail(dsa, BYPASS_NOT_IP)
    if not config.kernel.dsa_gro:
        # before e131a5634830 (v5.8) DSA user ports delivered with netif_receive_skb
        bail(dsa, BYPASS_GRO_DISABLED)
    if not config.vlan_gro:
        # kernel without CONFIG_VLAN_8021Q: vlan_offload_init (vlan_core.c) never ran, so
        # dev_gro_receive finds no packet_offload for an in-band 0x8100 / 0x88A8 tag
        et = g("eth_type", np.uint16)
        bail((et == ETH_P_8021Q) | (et == ETH_P_8021AD), BYPASS_NO_VLAN_GRO)
    # dev_gro_receive: no packet_offload for skb->protocol; decode status
    bail((status == STATUS_NOT_IP) | (status == STATUS_UNSUPPORTED_LINKTYPE), BYPASS_NOT_IP)
    l4 = g("l4_proto", np.uint8)
    bail((status == STATUS_BAD_L4_HEADER) & (l4 == IPPROTO_TCP), BYPASS_TCP_HEADER)
    bail(np.isin(status, (STATUS_UNSUPPORTED_ENCAP, STATUS_BAD_TUNNEL_HEADER,
                          STATUS_ENCAP_TOO_DEEP)), BYPASS_TUNNEL)
    bail(status != STATUS_OK, BYPASS_DECODE)
    # vlan_gro_receive: TPID 0x9100 has no packet_offload
    depth = g("vlan_depth", np.uint8)
    bad_tpid = ((g("eth_type", np.uint16) == ETH_P_QINQ1)
                | ((depth >= 1) & (g("vlan_tpid0", np.uint16) == ETH_P_QINQ1))
                | ((depth >= 2) & (g("vlan_tpid1", np.uint16) == ETH_P_QINQ1)))
    bail(bad_tpid, BYPASS_NOT_IP)
    in_v = g("ip_version", np.uint8)
    out_v = g("outer_ip_version", np.uint8)
    bail((in_v == 0) & (out_v == 0), BYPASS_NOT_IP)
    sfl_out = np.zeros(n, np.uint8)
    sfl_in = np.zeros(n, np.uint8)

    def ip_layer(prefix, present, sfl):
        v = g(prefix + "version", np.uint8)
        proto = g(prefix + "proto", np.uint8)
        ext = g(prefix + "ext_mask", np.uint8)
        v4 = present & (v == 4)
        v6 = present & (v == 6)
        # ipv6_gro_receive: only HBH/Routing/DstOpts are skipped; a Fragment header (or
        # AH, ...) leaves a next header without gro_receive
        bail(v6 & ((ext & (IP6_EXT_FRAGMENT | IP6_EXT_OTHER)) != 0), BYPASS_IPV6_EXTHDR)
        # inet_gro_receive / ipv6_gro_receive: no gro_receive for the protocol
        bail(present & ~np.isin(proto, _L3_HANDLERS), BYPASS_NO_L4_OFFLOAD)
        # inet_gro_receive: *(u8 *)iph != 0x45, ip_is_fragment, ip_fast_csum
        bail(v4 & (g(prefix + "hdr_len") != 20), BYPASS_IP_OPTIONS)
        frag = g(prefix + "mf", np.bool_) | (g(prefix + "frag_off") != 0)
        bail(v4 & frag, BYPASS_IP_FRAGMENT)
        bail(v4 & ~g(prefix + "csum_ok", np.bool_), BYPASS_IP_CSUM)
        # skb flush: IP length != bytes from this header to the end of the frame
        # (padding, trailer, FCS): inet_gro_receive (u16 compare) / ipv6_gro_receive;
        # else the IPv4 reserved bit
        tot = g(prefix + "tot_len")
        got = wire - g(prefix + "offset")
        bad_len = np.where(v == 4, ((tot ^ got) & 0xFFFF) != 0, tot != got)
        sfl[(sfl == 0) & present & bad_len] = NOT_HELD_LENGTH
        sfl[(sfl == 0) & v4 & g(prefix + "rf", np.bool_)] = NOT_HELD_IP_RF

    enc = out_v != 0
    # layer 0: the outer header of a tunnel, else the only one
    ip_layer("outer_ip_", enc, sfl_out)
    ip_layer("ip_", ~enc & (in_v != 0), sfl_in)
    # tunnel layer, right after the outer header (gre/ipip/sit/udp gro_receive)
    tun = g("tun_type", np.uint8)
    tflags = g("tun_flags", np.uint32)
    has_tun = tun != 0
    bail(has_tun & np.isin(tun, _UDP_TUNNELS), BYPASS_UDP_NO_GRO)   # no tunnel socket
    bail(has_tun & ~np.isin(tun, _NATIVE_TUNNELS), BYPASS_TUNNEL)    # ERSPAN, FOU, GUE
    # "tunnels: Do not apply GRO to multiple layers of encapsulation" (encap_mark)
    bail(has_tun & ((g("encap_depth", np.uint8) > 1) | ~enc | (in_v == 0)), BYPASS_TUNNEL)
    gre = (tun == TUN_GRE) | (tun == TUN_GRE_TEB)
    # gre_gro_receive: only K and C flags, version 0; a bad GRE checksum
    bail(gre & ((tflags & (0xFFFF ^ (GRE_KEY | GRE_CSUM))) != 0), BYPASS_TUNNEL)
    bail(gre & ((tflags & GRE_CSUM) != 0) & ~g("tun_csum_ok", np.bool_), BYPASS_TUNNEL)
    # layer 1: the inner header of a native tunnel
    ip_layer("ip_", enc & (in_v != 0), sfl_in)
    bail(l4 == IPPROTO_UDP, BYPASS_UDP_NO_GRO)     # udp4/6_gro_receive: no UDP GRO mode
    bail(l4 != IPPROTO_TCP, BYPASS_NO_L4_OFFLOAD)
    if config.verify_checksums:
        # tcp4/6_gro_receive: skb_gro_checksum_validate, skipped when already flushing
        cs = g("l4_csum_state", np.uint8)
        flushing = (sfl_out != 0) | (sfl_in != 0)
        if sfl_fl is not None:
            flushing |= sfl_fl != 0
        bail(((cs == CSUM_BAD) | (cs == CSUM_PARTIAL)) & ~flushing, BYPASS_L4_CSUM)
    bail(g("tcp_doff", np.uint8) < 5, BYPASS_TCP_HEADER)   # tcp_gro_pull_header
    return pre, sfl_out, sfl_in


def bypass_table(n: int, seed: int) -> pa.Table:
    """random_table with the fields the bypass checks read drawn to hit every branch."""
    t = random_table(n, seed, templates=200)
    rng = np.random.default_rng(seed + 100)

    def pick(vals, dt):
        return pa.array(np.array(vals)[rng.integers(0, len(vals), n)].astype(dt))

    plain = [STATUS_OK] * 6 + [STATUS_NOT_IP, STATUS_UNSUPPORTED_LINKTYPE, STATUS_BAD_L4_HEADER,
                               STATUS_UNSUPPORTED_ENCAP, STATUS_BAD_TUNNEL_HEADER,
                               STATUS_ENCAP_TOO_DEEP, 99]
    cols = {
        "status": pick(plain, np.uint8),
        "tun_type": pick([0, 0, 0, TUN_GRE, TUN_GRE_TEB, TUN_IPIP, TUN_SIT, TUN_IP6IP6,
                          TUN_IP4IP6, TUN_VXLAN, TUN_GENEVE, 3, 12], np.uint8),
        "l4_proto": pick([IPPROTO_TCP] * 4 + [IPPROTO_UDP, 1, 47], np.uint8),
        "ip_proto": pick([IPPROTO_TCP] * 4 + [IPPROTO_UDP, 1, 47, 4, 41, 50], np.uint8),
        "outer_ip_proto": pick([47, 4, 41, 17, 1], np.uint8),
        "ip_hdr_len": pick([20, 20, 20, 40, 24], np.uint16),
        "outer_ip_hdr_len": pick([20, 20, 40, 28], np.uint16),
        "ip_frag_off": pick([0, 0, 0, 0, 185], np.uint16),
        "outer_ip_frag_off": pick([0, 0, 0, 0, 9], np.uint16),
        "ip_ext_mask": pick([0, 0, 0, IP6_EXT_FRAGMENT, IP6_EXT_OTHER, 1], np.uint8),
        "outer_ip_ext_mask": pick([0, 0, 0, IP6_EXT_FRAGMENT, 2], np.uint8),
        "tcp_doff": pick([5, 8, 8, 8, 4, 0], np.uint8),
        "l4_csum_state": pick([0, 1, 2, CSUM_BAD, CSUM_PARTIAL], np.uint8),
        "eth_type": pick([0x0800, 0x86DD, ETH_P_8021Q, ETH_P_8021AD, ETH_P_QINQ1], np.uint16),
        "vlan_tpid0": pick([0x8100, ETH_P_QINQ1], np.uint16),
        "vlan_tpid1": pick([0x8100, ETH_P_QINQ1], np.uint16),
        "vlan_depth": pick([0, 0, 1, 2, 3], np.uint8),
        "dsa_tag": pick([0, 0, 0, 1], np.uint8),
        "encap_depth": pick([0, 1, 1, 2], np.uint8),
        "tun_flags": pick([0, 0x2000, 0x8000, 0xA000, 0x1000, 0x0001, 0x10000], np.uint32),
        "wire_len": pick([100, 120, 66000, 65636], np.uint32),
        "ip_offset": pick([14, 34, 54], np.uint16),
        "outer_ip_offset": pick([14, 18], np.uint16),
        "ip_tot_len": pick([86, 66, 100, 130], np.uint32),
        "outer_ip_tot_len": pick([106, 102, 100, 65622], np.uint32),
    }
    for name, arr in cols.items():
        t = t.set_column(t.schema.get_field_index(name), name, arr)
    return t


PRE_CONFIGS = [
    GroConfig(), GroConfig(verify_checksums=True), GroConfig(native_gro=False),
    GroConfig(vlan_gro=False), GroConfig(kernel=KernelProfile.parse("5.4")),
    GroConfig(tunnel_gro=True, verify_checksums=True),
]


@pytest.mark.parametrize("cfg", PRE_CONFIGS, ids=range(len(PRE_CONFIGS)))
@pytest.mark.parametrize("extra", ["none", "no_gro", "sfl_fl"])
def test_pre_and_flush_pass_equals_numpy_masks(cfg, extra):
    from gropcap.gro.engine import _pre_and_flush

    t = bypass_table(6000, 31)
    rng = np.random.default_rng(2)
    no_gro = rng.random(t.num_rows) < 0.1 if extra == "no_gro" else None
    sfl_fl = np.where(rng.random(t.num_rows) < 0.2, 38, 0).astype(np.uint8) \
        if extra == "sfl_fl" else None
    got = _pre_and_flush(t, cfg, no_gro, sfl_fl)
    want = naive_pre_and_flush(t, cfg, no_gro, sfl_fl)
    for name, a, b in zip(("pre", "sfl_out", "sfl_in"), got, want):
        assert np.array_equal(a, b), (name, np.nonzero(a != b)[0][:5])
    if cfg.native_gro:
        codes = set(np.unique(got[0]).tolist())
        assert len(codes) >= 10 and 0 in codes          # most branches taken
        assert {NOT_HELD_LENGTH, NOT_HELD_IP_RF} <= set(got[1].tolist()) | set(got[2].tolist())


def naive_size_limit(t: pa.Table, config: GroConfig) -> np.ndarray:
    """skb_gro_receive's limit per packet, the engine's numpy code before
    ``fast.columns.derive_lengths`` took it over: netif_get_gro_max_size by the outermost
    header's family (an in-band VLAN tag: not IPv6), the legacy 64 KB before 5.16, and
    above 64 KB only BIG TCP (any TCP from 6.3; 5.19-6.2 plain IPv6 without extension
    headers, not encapsulated)."""
    col = lambda name: t.column(name).to_numpy().astype(np.int64)  # noqa: E731
    out_v, in_v = col("outer_ip_version"), col("ip_version")
    enc = out_v != 0
    v = np.where(enc, out_v, in_v)
    kp = config.kernel
    if kp.version < (5, 16):
        return np.full(t.num_rows, 65536, np.int64)
    proto_v6 = (v == 6) & (col("vlan_depth") == 0)
    limit = np.where(proto_v6, config.max_size(6), config.max_size(4)).astype(np.int64)
    if kp.big_tcp_ipv4:
        big_ok = np.ones(t.num_rows, np.bool_)
    elif kp.version >= (5, 19):
        big_ok = proto_v6 & ~enc & (col("ip_ext_len") == 0)
    else:
        big_ok = np.zeros(t.num_rows, np.bool_)
    return np.where((limit > 65536) & ~big_ok, 65536, limit)


@pytest.mark.parametrize("kernel", ["5.4", "5.17", "6.1", "6.18"])
@pytest.mark.parametrize("sizes", [(65536, 65536), (185000, 150000), (6000, 3000),
                                   (150000, 65536)])
def test_size_limit_in_the_length_pass_equals_numpy(kernel, sizes):
    from gropcap.gro.engine import prepare
    cfg = GroConfig(kernel=KernelProfile.parse(kernel), gro_max_size=sizes[0],
                    gro_ipv4_max_size=sizes[1])
    t = random_table(3000, 7)
    cols, _ = prepare(t, cfg, EngineState.new(cfg))
    want = naive_size_limit(t, cfg)
    assert np.array_equal(cols.limit, want), np.nonzero(cols.limit != want)[0][:5]
    # the cases where the families or BIG TCP give packets of one table different limits
    # (per-family sizes from 6.3; above 64 KB only with BIG TCP, from 5.19)
    mixed = (kernel == "6.18" and sizes != (65536, 65536)) or \
        (kernel == "6.1" and sizes[0] > 65536)
    assert (len(np.unique(want)) > 1) == mixed


def _changed(t: pa.Table, name: str, how) -> pa.Table:
    """``t`` with column ``name`` replaced by ``how(values)`` (fixed-size binary columns
    as an (n, width) uint8 matrix)."""
    f = t.schema.field(name)
    if pa.types.is_fixed_size_binary(f.type):
        vals = how(column_bytes(t, name).copy())
        col = pa.FixedSizeBinaryArray.from_buffers(
            f.type, t.num_rows, [None, pa.py_buffer(np.ascontiguousarray(vals).tobytes())])
    else:
        col = pa.array(how(column_numpy(t, name, f.type.to_pandas_dtype()).copy()), f.type)
    return t.set_column(t.schema.get_field_index(name), f, col)


def _flip(byte):
    def how(m):
        m[:, byte] ^= 0x5A
        return m
    return how


# one hash input changed at a time: what the one-pass kernel must not take for the same
_RSS_CHANGES = [
    ("sport", lambda a: a ^ 1), ("dport", lambda a: a ^ 0x100),
    ("ip_src", _flip(15)), ("ip_src", _flip(2)), ("ip_dst", _flip(13)),
    ("ip_dst", _flip(7)), ("ip_mf", lambda a: ~a), ("ip_frag_off", lambda a: a ^ 8),
    ("ip_ext_mask", lambda a: a ^ IP6_EXT_FRAGMENT), ("l4_proto", lambda a: a ^ 23),
    ("ip_version", lambda a: np.where(a == 4, 6, 4)),
    ("outer_ip_version", lambda a: np.where(a == 0, 4, 0)),
    ("outer_ip_src", _flip(14)), ("outer_sport", lambda a: a ^ 2),
    ("outer_l4_proto", lambda a: np.where(a == 17, 6, 17)), ("outer_ip_mf", lambda a: ~a),
]


@pytest.mark.parametrize("seed", [6, 7])
def test_rss_hash_of_bursts_equals_selected_inputs(seed):
    """Each row twice, then the same row with one hash input changed: the one-pass
    kernel reuses the previous row's hash for the same tuple only."""
    t = random_table(600, seed)
    t = t.filter(pa.array(column_numpy(t, "ip_version", np.int64) != 0))
    n = t.num_rows
    tables = [t] + [_changed(t, name, how) for name, how in _RSS_CHANGES]
    rows = np.arange(n)
    which = 1 + rows % len(_RSS_CHANGES)
    order = np.stack([rows, rows, which * n + rows], axis=1).ravel()
    burst = pa.concat_tables(tables).take(order)
    key = GroConfig().rss_key
    want = np.zeros(burst.num_rows, np.uint32)
    _rss_kernel(toeplitz_table(bytes(key).ljust(40, b"\0")), *rss_inputs(burst), want)
    got = rss_hash(burst, key)
    assert np.array_equal(got, want)
    # many changes change the hash (not all: an outer field of a plain packet, the upper
    # bytes of an IPv4 address, ports of a fragment)
    assert (want[2::3] != want[1::3]).mean() > 0.2
