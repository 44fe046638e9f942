"""The numba GRO engine (fast path): packet columns (Arrow) -> GroResult.

Layer: ``decode/schema.py`` packet table -> :class:`gropcap.gro.result.GroResult`, the
contract in ``gropcap/gro/__init__.py``. Same verdicts as the plain-Python reference
(``gro/reference.py``), bit for bit; the batch models are those of ``docs/gro-model.md``.

This module is the validating wrapper: it extracts the columns the kernel rules read,
decides per packet what depends on that packet alone (which layer bails before L4, which
sets an skb flush, the exact same-flow class), and hands plain arrays to the kernels in
``gro/fast/`` (``@njit(cache=True, nogil=True)``, one module per kernel area: keys,
bypass, ip/tcp/udp pair rules, dev_gro_receive, the NAPI poll loop), which run the
per-pair rules, the 8x8 table and the NAPI poll model. Results are packed into a
GroResult. UDP GRO and UDP tunnel sockets add a per-packet step of their own
(``_udp_prepare.UdpView``: the batch as the TCP preparation should see it, and the UDP
columns of ``K.Cols``).

Public API::

    simulate(packets, config, *, polls=None, runs=None) -> GroResult   # one table
    simulate_batch(packets, config, state=None, *, final=False, polls=None)
        -> (BatchResult, EngineState)                              # streaming
    assemble(parts, config) -> GroResult                           # BatchResults -> result
    next_run(state or states) -> fresh receivers for the next receiver run (after final=True)
    simulate_models(packets, configs) -> [GroResult]                # ideal + napi, one
    simulate_batch_models(packets, configs, states=None, *, final)  # preparation per batch
        -> ([BatchResult], [EngineState])
    partition_of(packets, config, parts) -> partition per row      # state-disjoint split
    prepare(packets, config, state, ...) / run_prepared(...)       # benchmarks

Streaming: the GRO state (held entries with a copy of their first packet's headers, the
8x8 tables, NAPI timers, key dictionaries) lives in an :class:`EngineState` that pickles;
a capture can be fed batch by batch in capture order with memory bounded by the number of
flows. Per-packet verdicts of a batch come back in a :class:`BatchResult`; seg ids and
NAPI poll ids are global orderings, so :func:`assemble` numbers them once all batches
are in (the result is per packet anyway).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gropcap.constants import (
    GRE_KEY, TCP_FLAG_CWR, TCP_FLAG_FIN, TCP_FLAG_PSH, TUN_GRE, TUN_GRE_TEB,
)
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.errors import ConfigError
from gropcap.gro import fast as K
from gropcap.gro import _udp_prepare
from gropcap.gro.config import GroConfig
from gropcap.gro.flows import FLOW_KEY_COLUMNS, flow_key_matrix
from gropcap.gro.reasons import NOT_HELD_FRAG_LIST
from gropcap.gro.result import GroResult, run_bounds
from gropcap.gro.retire import retire_idle
from gropcap.gro.gso import SKB_GSO_FRAGLIST, gso_type_for
from gropcap.gro.rss import (
    ColumnReader, column_bytes, column_numpy, gro_bucket, rss_hash, rx_queue,
)

GRO_LEGACY_MAX_SIZE = 65536   # include/net/gro.h: limit without BIG TCP

# numpy dtype of every fixed-width PACKET_SCHEMA column (reading a schema table in its
# own dtype is zero-copy, and the kernels see one type per field)
_SCHEMA_DT = {f.name: np.dtype(f.type.to_pandas_dtype()) for f in PACKET_SCHEMA
              if not (pa.types.is_dictionary(f.type)
                      or pa.types.is_fixed_size_binary(f.type))}


def _era(config: GroConfig) -> int:
    kp = config.kernel
    if not kp.fixed_id_support:
        return K.ERA_INNER_ID
    if kp.flush_id_era:
        return K.ERA_FLUSH_ID
    if kp.two_bit_fixedid:
        return K.ERA_TWO_BIT
    return K.ERA_ONE_BIT


def _pre_and_flush(t: pa.Table, config: GroConfig, no_gro=None, sfl_fl=None, columns=None):
    """Per-packet decisions that need no held packet, in the kernel's evaluation order
    (precedence pinned in docs/gro-model.md, "Bypass precedence").

    ``no_gro``: bool per row, its device has GRO off; ``sfl_fl``: the frag_list flush of
    rows that arrive as GSO packets (only used to skip checksum validation); ``columns``:
    a shared :class:`ColumnReader` of ``t``. The checks run in one numba pass
    (``fast.bypass.pre_and_flush``); tests hold it to the numpy formulation.

    Returns ``(pre, sfl_out, sfl_in)``: ``pre`` the BYPASS_* code of the first layer that
    bails before L4 (0 = reaches tcp_gro_receive), ``sfl_*`` the skb flush the outer /
    inner IP header sets (NOT_HELD_LENGTH for a length/padding mismatch, NOT_HELD_IP_RF
    for the reserved bit).
    """
    n = t.num_rows
    g = _reader(t, columns)
    s = lambda name: g(name, _SCHEMA_DT[name])  # noqa: E731
    x = K.PreIn(
        s("status"), s("dsa_tag"), s("eth_type"), s("vlan_depth"), s("vlan_tpid0"),
        s("vlan_tpid1"), s("wire_len"), s("l4_proto"), s("tun_type"), s("tun_flags"),
        s("tun_csum_ok"), s("encap_depth"), s("l4_csum_state"), s("tcp_doff"),
        *[s(p + f) for p in ("outer_ip_", "ip_")
          for f in ("version", "proto", "ext_mask", "hdr_len", "mf", "frag_off", "csum_ok",
                    "tot_len", "offset", "rf")],
        s("inner_eth_type"), s("inner_vlan_depth"), s("inner_vlan_tpid1"))
    cfg = K.PreCfg(native_gro=bool(config.native_gro),
                   gro_cells=config.tunnel_gro is not None,
                   dsa_gro=bool(config.kernel.dsa_gro), vlan_gro=bool(config.vlan_gro),
                   verify_checksums=bool(config.verify_checksums),
                   ip6_tunnel_gro=bool(config.kernel.ip6_tunnel_gro))
    no = np.zeros(0, np.bool_) if no_gro is None else \
        np.ascontiguousarray(np.asarray(no_gro, np.bool_))
    fl = np.zeros(0, np.uint8) if sfl_fl is None else \
        np.ascontiguousarray(np.asarray(sfl_fl, np.uint8))
    pre = np.empty(n, np.uint8)
    sfl_out = np.empty(n, np.uint8)
    sfl_in = np.empty(n, np.uint8)
    K.pre_and_flush(x, cfg, no, fl, pre, sfl_out, sfl_in)
    return pre, sfl_out, sfl_in


def _addr_words(t: pa.Table, name: str) -> list[np.ndarray]:
    """A 16-byte address column as two uint64 words per row."""
    w = np.ascontiguousarray(column_bytes(t, name)).view(np.uint64)
    return [w[:, 0], w[:, 1]]


def _reader(t, columns) -> ColumnReader:
    return columns if columns is not None else ColumnReader(t)


def _same_flow_input(t: pa.Table, hash_: np.ndarray, columns=None) -> K.SameFlowIn:
    """The columns of the same-flow key, as the packing kernels read them."""
    c = _reader(t, columns)
    i = c.ints
    return K.SameFlowIn(
        np.ascontiguousarray(hash_), i("iface"), i("dsa_port"), i("eth_dst"),
        i("eth_type"), i("eth_src"), i("vlan_depth"), i("vlan_tpid0"), i("vlan_tci0"),
        i("vlan_tpid1"), i("vlan_tci1"),
        i("outer_ip_version"), i("outer_ip_proto"), i("outer_ip_ext_mask"),
        i("outer_ip_ext_len"), i("outer_ip_flow_label"), i("outer_ip_ext_digest"),
        c.words("outer_ip_src"), c.words("outer_ip_dst"), i("outer_ip_ttl"),
        i("ip_version"), i("ip_proto"), i("ip_ext_mask"), i("ip_ext_len"),
        i("ip_flow_label"), i("ip_ext_digest"), c.words("ip_src"), c.words("ip_dst"),
        i("ip_ttl"), i("tun_type"), i("tun_flags"), i("tun_proto"), i("tun_key"),
        i("inner_eth_dst"), i("inner_eth_type"), i("inner_eth_src"), i("sport"),
        i("dport"), i("inner_vlan_depth"), i("inner_vlan_tci0"), i("inner_vlan_tpid1"),
        i("inner_vlan_tci1"))


_GRE_CONSTS = (np.uint64(TUN_GRE), np.uint64(TUN_GRE_TEB), np.uint64(GRE_KEY))


def _same_flow_ids(t: pa.Table, config: GroConfig, hash_: np.ndarray, use: np.ndarray,
                   state: "EngineState", columns=None) -> tuple[np.ndarray, np.ndarray]:
    """Global ``(key, loose)`` ids per row (-1 / 0 where ``use`` is False): the exact
    same-flow classes (fields in :func:`_classes`), numbered through ``state``."""
    key, loose, _ = _classes(t, config, hash_, use, state, columns, flows=False)
    return key, loose


def _classes(t: pa.Table, config: GroConfig, hash_: np.ndarray, use: np.ndarray,
             state: "EngineState", columns=None, flows: bool = True):
    """``(key, loose, flow)`` per row in one numba pass (``fast.keys.classify``), the ids
    global through the tables of ``state`` (first appearance first; keys among rows with
    ``use``; ``flow`` None unless ``flows``).

    key: the exact same-flow class, every field some layer compares for ``same_flow``:
    gro_list_prepare (hash, dev, MAC header; DSA port), vlan_gro_receive (tags),
    inet/ipv6_gro_receive (protocol, addresses; IPv6 flow label and extension bytes; hop
    limit before 5.18), gre_gro_receive (flags, protocol, key when K), eth_gro_receive
    (inner MACs of GRE-TEB) and vlan_gro_receive on its inner tags, TCP ports
    (tcp_gro_lookup). Each field is packed into uint64 words at its full width (an
    injective packing, so equal words <=> equal fields; ``fast.keys._same_flow_rows``):

    ====  ==============================================================
    word  fields (bit offset)
    ====  ==============================================================
    0     RSS hash (0), iface (32), DSA port (48)
    1-3   eth_dst + eth_type; eth_src + vlan_depth; both VLAN TPID/TCI
    4-10  outer IP: version, proto, v6 ext mask/len; v6 flow label;
          v6 ext digest; src (2 words); dst (2 words)
    11-17 inner / only IP, the same
    18-21 tunnel type + GRE flags; GRE proto + key (K); TEB inner MACs
    22    sport, dport
    23    TEB inner VLAN tags: depth, first TCI, second TPID and TCI
    24    IPv6 hop limits, outer and inner (only before 5.18)
    ====  ==============================================================

    loose: the same without the pre-5.18 hop limit (``key`` itself from 5.18). flow:
    flows.FLOW_KEY_COLUMNS (:func:`_flow_input`). The union key the kernel looks
    up per row is words 0-24 plus the L4 protocol and outer ports, and the whole tunnel
    key: every other key is a function of it.
    """
    uid, flow = _union_ids(t, hash_, state, columns)
    key, loose = _key_ids(uid, use, config, state, no_hash=False)
    if not flows:
        return key, loose, None
    return key, loose, flow if flow is not None else _matrix_flow_ids(t, state)


def _matrix_flow_ids(t: pa.Table, state: "EngineState") -> np.ndarray:
    """Flow ids from flows.flow_key_matrix (when FLOW_KEY_COLUMNS is not what
    ``fast.keys._flow_row`` packs)."""
    if not t.num_rows:
        return np.zeros(0, np.int64)
    return _global_ids(_bytes_as_words(flow_key_matrix(t)), np.ones(t.num_rows, np.bool_),
                       state.flow_ids)


def _union_ids(t: pa.Table, hash_: np.ndarray, state: "EngineState", columns=None):
    """``(uid, flow)``: the union class of every row (``fast.keys.classify``, through
    ``state.union_ids``; ``hash_`` goes into word 0) and its flow id (None when
    flows.FLOW_KEY_COLUMNS is not what ``fast.keys._flow_row`` packs)."""
    n = t.num_rows
    # union classes get their flow id when they are first seen, asked for or not (a later
    # call on the same state may ask)
    packed_flows = set(FLOW_KEY_COLUMNS) == _FLOW_PACKED
    uid = np.empty(n, np.int64)
    if not n:
        return uid, np.zeros(0, np.int64) if packed_flows else None
    c = _reader(t, columns)
    u = state.union_ids
    old = len(u)
    args = (_same_flow_input(t, hash_, c), c.ints("l4_proto"), c.ints("outer_sport"),
            c.ints("outer_dport"), c.ints("tun_key"), *_GRE_CONSTS)
    chunk = np.empty((K.UNION_CHUNK, K.UNION_WORDS), np.uint64)
    buf = np.empty(K.UNION_WORDS, np.uint64)
    lo = 0
    while lo < n:             # the kernel stops where the table needs room for a chunk
        u.reserve(K.UNION_CHUNK)
        lo = K.classify(*args, u.slots, u.keys, u.cnt, u.flow, uid, lo, chunk, buf)
    if not packed_flows:
        return uid, None
    if len(u) > old:          # the new classes' first rows -> their flow ids
        ft = state.flow_ids
        rows = u.flow[old:len(u)].copy()
        ft.reserve(len(rows))
        K.flow_ids_of(_flow_input(t, c), rows, ft.slots, ft.keys, ft.cnt,
                      np.empty(K.FLOW_WORDS, np.uint64), u.flow[old:len(u)])
    return uid, u.flow[uid]


def _key_ids(uid: np.ndarray, use: np.ndarray, config: GroConfig, state: "EngineState",
             no_hash: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(key, loose)`` per row from its union class (``fast.keys.key_classes``, numbered
    through ``state.key_ids`` / ``loose_ids``). ``no_hash``: word 0's RSS hash is not
    part of this model's key (the ideal model in a shared preparation)."""
    n = len(uid)
    key = np.empty(n, np.int64)
    loose = np.empty(n, np.int64)
    if n:
        u, kt, lt = state.union_ids, state.key_ids, state.loose_ids
        hops = not config.kernel.ipv6_hop_limit_flush
        nu = len(u)
        if len(state.union_key) < 2 * nu:
            grown = np.full(max(2 * nu, 2 * len(state.union_key)), -1, np.int64)
            grown[:len(state.union_key)] = state.union_key
            state.union_key = grown
        more = int(np.count_nonzero(state.union_key[0:2 * nu:2] < 0))
        kt.reserve(more)      # room for a key per union class without one
        lt.reserve(more)
        K.key_classes(uid, np.ascontiguousarray(use, np.bool_), u.keys, no_hash, hops,
                      state.union_key, kt.slots, kt.keys, kt.cnt, lt.slots, lt.keys, lt.cnt,
                      key, loose, np.empty(K.UNION_WORDS, np.uint64))
    return key, loose


_FLOW_PACKED = {"ip_version", "l4_proto", "outer_ip_version", "tun_type", "tun_key", "sport",
                "dport", "outer_sport", "outer_dport", "vlan_tci0", "vlan_tci1", "dsa_port",
                "iface", "eth_src", "eth_type", "eth_dst", "ip_src", "ip_dst",
                "outer_ip_src", "outer_ip_dst"}


def _bytes_as_words(mat: np.ndarray) -> np.ndarray:
    """(n, bytes) uint8 key matrix -> (words, n) uint64 (zero-padded to 8 bytes)."""
    n, w = mat.shape
    padded = np.zeros((n, (w + 7) // 8 * 8), np.uint8)
    padded[:, :w] = mat
    return np.ascontiguousarray(padded.view(np.uint64).T)


def _flow_input(t: pa.Table, columns=None) -> K.FlowIn:
    """flows.FLOW_KEY_COLUMNS as ``fast.keys._flow_row`` reads them: packed injectively
    into 13 uint64 words per row (same classes, hence the same first-appearance
    numbering as flows.assign_flow_ids): ip_version | l4_proto << 8 | outer_ip_version
    << 16 | tun_type << 24 | tun_key << 32; the four ports; both VLAN TCIs, DSA port,
    iface; eth_src + eth_type; eth_dst; the four addresses (2 words each)."""
    c = _reader(t, columns)
    return K.FlowIn(*[c.words(name) if name.endswith(("_src", "_dst")) and "ip" in name
                      else c.ints(name) for name in K.FlowIn._fields])


def _flow_ids(t: pa.Table, state: "EngineState", columns=None) -> np.ndarray:
    """Global flow ids per row (flows.assign_flow_ids classes, numbered through
    ``state.flow_ids``)."""
    n = t.num_rows
    return _classes(t, GroConfig(), np.zeros(n, np.uint32), np.zeros(n, np.bool_), state,
                    columns)[2]


# the packet table's column names, read once (iterating the schema makes a Field each)
_PACKET_NAMES = tuple(PACKET_SCHEMA.names)


def _check_table(packets) -> pa.Table:
    if isinstance(packets, pa.RecordBatch):
        packets = pa.Table.from_batches([packets])
    if not isinstance(packets, pa.Table):
        raise ConfigError(f"simulate() needs a pyarrow Table, got {type(packets).__name__}")
    have = set(packets.schema.names)    # (column_names makes a Field per column: 7x slower)
    missing = [name for name in _PACKET_NAMES if name not in have]
    if missing:
        raise ConfigError(f"packet table lacks columns {missing[:5]}",
                          hint="pass a table with decode.schema.PACKET_SCHEMA")
    return packets


def _cfg(config: GroConfig, model: int) -> K.Cfg:
    kp = config.kernel
    mask = TCP_FLAG_FIN | TCP_FLAG_PSH
    if not kp.cwr_in_flag_word:
        mask |= TCP_FLAG_CWR
    return K.Cfg(model=model, era=_era(config), hop_flush=kp.ipv6_hop_limit_flush,
                 flag_mask=mask, queues=config.queues, buckets=kp.hash_buckets,
                 budget=config.budget, gap_ns=config.poll_gap_ns, hz=config.hz,
                 timeout_ns=config.gro_flush_timeout_ns, defer=config.napi_defer_hard_irqs,
                 tcp_flist=config.tcp_fraglist, timer_flush_old=kp.timeout_flushes_old,
                 watchdog_empty=kp.napi_defer_hard_irqs, udp_l3=kp.udp_l3_checks)


def _model(config: GroConfig, explicit_polls: bool) -> int:
    if config.model == "ideal":
        return K.MODEL_IDEAL
    return K.MODEL_WINDOWS if explicit_polls else K.MODEL_NAPI


# --- state ---------------------------------------------------------------------------------

def _new_kernel_state(nkeys: int, nloose: int, queues: int, buckets: int) -> K.State:
    nk = max(nkeys, 1)
    qs = np.zeros((queues, K.QS_N), np.int64)
    qs[:, K.QS_LAST_POLL] = -1
    return K.State(
        **K.entry_arrays(nk), loose_held=np.zeros(max(nloose, 1), np.int32),
        tbl=np.full((queues, buckets, K.MAX_GRO_SKBS), -1, np.int64),
        tcnt=np.zeros((queues, buckets), np.int64), ctr=np.zeros(4, np.int64), qs=qs,
        win=np.zeros(3, np.int64))


def _grow(st: K.State, nkeys: int, nloose: int) -> K.State:
    """The same state with room for ``nkeys`` keys and ``nloose`` loose keys (1.5x
    growth: amortised, with at most a third of the rows unused), its held entries in one
    record array (``K.entries``: the kernels are compiled for its views; an unpickled
    state's entries are arrays of their own until they pass here)."""
    cur = st.e_first.shape[0]
    changes = {}
    rec = K.entries(st)
    if nkeys > cur or rec is None:
        changes = K.entry_arrays(max(nkeys, cur + cur // 2) if nkeys > cur else cur)
        if rec is not None:
            changes["e_first"].base[:cur] = rec
        else:
            for f in K.ENTRY_FIELDS:
                changes[f][:cur] = getattr(st, f)
    held = st.loose_held.shape[0]
    if nloose > held:
        grown = np.zeros(max(nloose, held + held // 2), np.int32)
        grown[:held] = st.loose_held
        changes["loose_held"] = grown
    return st._replace(**changes) if changes else st


@dataclass
class EngineState:
    """Everything the engine carries from one batch to the next (picklable).

    ``kernel``: held entries and counters (numpy arrays); ``*_ids``: global numbering of
    same-flow keys and flows (bytes -> id, grows with flows, not packets); ``pending``:
    packets of a NAPI queue whose poll could not be decided yet (re-fed with the next
    batch); ``q_maxts``: running maximum of arrival times per queue.
    """

    config_json: str
    model: int
    kernel: K.State
    key_ids: InternTable = field(default_factory=lambda: InternTable(K.SAME_FLOW_WORDS))
    loose_ids: InternTable = field(default_factory=lambda: InternTable(K.SAME_FLOW_WORDS))
    flow_ids: InternTable = field(default_factory=lambda: InternTable(K.FLOW_WORDS))
    union_ids: "UnionTable" = field(default_factory=lambda: UnionTable())
    union_key: np.ndarray = field(default_factory=lambda: np.full(64, -1, np.int64))
    row_base: int = 0
    pending: K.Cols | None = None
    pending_arr: np.ndarray | None = None
    q_maxts: np.ndarray | None = None
    finished: bool = False
    # UDP tunnel sockets: the TCP same-flow classes before the tunnel fields refine them
    # (gro/_udp_prepare.py: UdpView.view_state)
    udp_ids: dict = field(default_factory=dict)
    # receiver runs (next_run): this run's number, and the flows of the runs before it
    # (this run's flow ids start there)
    run: int = 0
    flow_base: int = 0

    @classmethod
    def new(cls, config: GroConfig, explicit_polls: bool = False) -> "EngineState":
        """Empty state for ``config`` (``explicit_polls``: windows given by ``polls=``)."""
        model = _model(config, explicit_polls)
        queues = config.queues if model != K.MODEL_IDEAL else 1
        buckets = config.kernel.hash_buckets if model != K.MODEL_IDEAL else 1
        st = _new_kernel_state(64, 64, queues, buckets)
        hops = not config.kernel.ipv6_hop_limit_flush
        return cls(config_json=config.to_json(), model=model, kernel=st,
                   key_ids=InternTable(K.SAME_FLOW_WORDS + hops),
                   q_maxts=np.full(queues, np.iinfo(np.int64).min, np.int64))


@dataclass
class BatchResult:
    """Partial results of one :func:`simulate_batch` call (global row numbers).

    ``row_start``/``flow_id``/``rx_queue``: the rows fed in this call (contiguous);
    ``p_*``: verdicts of the rows processed in this call (some rows of a NAPI queue may be
    processed in a later call); ``s_*``: super-packets in emission order; ``poll_*``:
    NAPI polls numbered from ``poll_base`` in simulation order (time and queue).
    """

    row_start: int
    flow_id: np.ndarray
    rx_queue: np.ndarray
    p_row: np.ndarray
    p_reason: np.ndarray
    p_inst: np.ndarray
    p_poll: np.ndarray
    segs: dict
    poll_base: int
    poll_time: np.ndarray
    poll_queue: np.ndarray
    # the receiver run of these rows and polls (next_run): delivery is run after run
    run: int = 0


class InternTable:
    """Exact keys -> ids numbered in order of first appearance, shared across batches.

    The keys are rows of ``words`` uint64 words in an open-addressing table (``slots``:
    id or -1, at most half used; ``keys[id]``; ``cnt[0]`` keys) that the numba kernels
    (``fast.keys.classify``, ``fast.keys.intern_rows``) look up and grow in place of a
    Python dict or a sorted array. Picklable; grows with flows, not packets.
    """

    def __init__(self, words: int):
        self.slots = np.full(64, -1, np.int64)
        self.keys = np.zeros((32, words), np.uint64)
        self.cnt = np.zeros(1, np.int64)

    def __len__(self) -> int:
        return int(self.cnt[0])

    @property
    def words(self) -> int:
        return self.keys.shape[1]

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """Ids of the rows of ``keys`` ((m, words) uint64), new rows numbered next in
        row order."""
        k = np.ascontiguousarray(keys, dtype=np.uint64)
        if not len(k):
            return np.zeros(0, np.int64)
        if k.shape[1] != self.words:
            if not len(self):          # the first keys set the width
                self.__init__(k.shape[1])
            else:
                raise ValueError("InternTable: key width changed between batches")
        self.reserve(len(k))
        out = np.empty(len(k), np.int64)
        K.intern_rows(k, self.slots, self.keys, self.cnt, np.empty(self.words, np.uint64),
                      out)
        return out

    def reserve(self, more: int) -> None:
        """Room for ``more`` new keys (the kernels never allocate): capacity doubled as
        often as needed, keys copied, slots rehashed (at most half of them used)."""
        n, cap = len(self), self.keys.shape[0]
        if n + more <= cap:
            return
        while n + more > cap:
            cap *= 2
        keys = np.zeros((cap, self.words), np.uint64)
        keys[:n] = self.keys[:n]
        self.slots = np.full(2 * cap, -1, np.int64)
        K.rehash(keys, n, self.slots, np.empty(self.words, np.uint64))
        self.keys = keys
        self._grew(cap)

    def _grew(self, cap: int) -> None:
        """Hook: per-key arrays of subclasses follow the capacity."""

    def kept(self, keep: np.ndarray) -> "InternTable":
        """A new table of the keys ``keep`` (ids, ascending) numbered 0.. in that order,
        with room for half as many again (``retire.retire_idle``). It replaces this one:
        this table's lookup slots are released first (a retirement's peak then holds
        one set of slots, not two) and it finds nothing afterwards."""
        self.slots = np.full(2, -1, np.int64)
        new = InternTable(self.words) if type(self) is InternTable else type(self)()
        m = len(keep)
        new.reserve(m + m // 2)
        new.keys[:m] = self.keys[keep]
        new.cnt[0] = m
        K.rehash(new.keys, m, new.slots, np.empty(self.words, np.uint64))
        return new

    # the key of each id as one fixed-width byte string (numpy ``void``), in id order:
    # what runner.partition_task sends to number flows over partitions
    @property
    def sorted_keys(self) -> np.ndarray | None:
        n = len(self)
        if not n:
            return None
        k = np.ascontiguousarray(self.keys[:n])
        return k.view(np.dtype((np.void, 8 * k.shape[1]))).ravel()

    @property
    def sorted_ids(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64)


class UnionTable(InternTable):
    """The union-key table of :func:`_classes`: an :class:`InternTable` of
    ``fast.keys.UNION_WORDS`` words plus the flow id of each union class (``flow``).
    Model independent: :func:`simulate_batch_models` shares one between the states of
    its models (each keeps its own key and loose ids per union class,
    ``EngineState.union_key``)."""

    def __init__(self):
        super().__init__(K.UNION_WORDS)
        self.flow = np.full(32, -1, np.int64)
        # the states sharing this table (new_states, next_run), and the classes live
        # after the last retirement (retire.retire_idle)
        self.sharers = 1
        self.live = 0

    def _grew(self, cap: int) -> None:
        flow = np.full(cap, -1, np.int64)
        flow[:len(self.flow)] = self.flow
        self.flow = flow

    def kept(self, keep: np.ndarray) -> "UnionTable":
        """:meth:`InternTable.kept` with the kept classes' flow ids, the same sharers,
        and ``live`` the classes kept."""
        new = super().kept(keep)
        new.flow[:len(keep)] = self.flow[keep]
        new.sharers, new.live = self.sharers, len(keep)
        return new


def _global_ids(mat: np.ndarray, use: np.ndarray, table: InternTable) -> np.ndarray:
    """Exact classes of the packets' keys (column r of the (words, n) ``mat``, where
    ``use``), numbered through ``table`` (first appearance first; shared across
    batches)."""
    local, reps = K.dedup_reps(mat, use)
    return _number(local, K.gather_rows(mat, reps), table)


def _number(local: np.ndarray, keys: np.ndarray, table: InternTable) -> np.ndarray:
    """Batch-local class ids (first appearance) and their keys -> global ids."""
    if not len(keys):
        return local
    was_empty = len(table) == 0
    mapping = table.ids(keys)
    if was_empty:
        return local            # an empty table numbers them 0..nid-1 as well
    out = np.full(len(local), -1, np.int64)
    valid = local >= 0
    out[valid] = mapping[local[valid]]
    return out


# Per-batch kernel inputs that hold one value in most runs (RX queue and bucket 0 in the
# ideal model, no poll windows, no UDP GRO, no coalesced input, rows 0..n-1), by
# (length, dtype, value, kind): the same array every batch, not a fresh one whose new
# pages are faulted in and zeroed again (the ideal engine on the real capture, under
# cProfile: 0.336 -> 0.272 s). Writable, as the kernels were compiled for (a read-only
# variant would compile again); nothing writes a Cols column or ``rows`` in place: a
# change replaces the array (``Cols._replace``, the copies of _gso_input).
_CONSTANTS: dict = {}
_CONSTANTS_MAX = 32


def _constant(n: int, dtype, value: int = 0, arange: bool = False) -> np.ndarray:
    """An array of ``n`` ``value``s (``arange``: 0..n-1) shared by every caller: never
    write into it."""
    key = (n, np.dtype(dtype).str, value, arange)
    a = _CONSTANTS.get(key)
    if a is None:
        if len(_CONSTANTS) >= _CONSTANTS_MAX:
            _CONSTANTS.clear()
        a = np.arange(n, dtype=dtype) if arange else np.full(n, value, dtype)
        _CONSTANTS[key] = a
    return a


def _gso_input(n: int, coalesced, gso_skb_gro: bool = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(segs, gso_size, frag_list flush) per row from a gso.CoalescedInput (or None).

    ``gso_skb_gro`` False (before 5eddb24901ee, v5.19): dev_gro_receive sets ``flush =
    skb_is_gso(skb) || skb_has_frag_list(skb)``, so every GSO row carries the flush."""
    if coalesced is None:
        return _constant(n, np.int64, 1), _constant(n, np.int64), _constant(n, np.uint8)
    segs = np.ones(n, np.int64)
    gsz = np.zeros(n, np.int64)
    sfl_fl = np.zeros(n, np.uint8)
    is_gso = np.asarray(coalesced.is_gso, np.bool_)
    if is_gso.shape != (n,):
        raise ConfigError(f"coalesced describes {is_gso.shape[0]} rows for {n} packets")
    segs[is_gso] = np.asarray(coalesced.segs, np.int64)[is_gso]
    gsz[is_gso] = np.asarray(coalesced.gso_size, np.int64)[is_gso]
    fl = getattr(coalesced, "frag_list", None)
    if not gso_skb_gro:
        sfl_fl[is_gso] = NOT_HELD_FRAG_LIST
    elif fl is not None:
        sfl_fl[is_gso & np.asarray(fl, np.bool_)] = NOT_HELD_FRAG_LIST
    return segs, gsz, sfl_fl


def prepare(packets: pa.Table, config: GroConfig, state: EngineState,
            polls=None, *, coalesced=None, hashes=None,
            no_gro=None) -> tuple[K.Cols, np.ndarray]:
    """Extract and derive the kernel input arrays of one batch (rows numbered from
    ``state.row_base``); returns ``(cols, ts_ns)``. Updates the key dictionaries.
    ``coalesced`` / ``hashes`` / ``no_gro``: see :func:`simulate`."""
    t = packets
    n = t.num_rows
    g = ColumnReader(t)     # every column converted once, shared by the helpers below
    udp = _udp_prepare.UdpView.of(t, config, g)   # UDP GRO / tunnel sockets, else None
    napi = config.model == "napi"
    # the ideal model has no RSS: hash 0, one list
    if napi and hashes is not None:
        hash_ = np.ascontiguousarray(np.asarray(hashes, np.uint32))
        if hash_.shape != (n,):
            raise ConfigError(f"hashes has {hash_.shape} values for {n} packets")
    else:
        hash_ = rss_hash(t, config.rss_key, enabled=napi and config.rss == "toeplitz",
                         columns=g)
    common = _prepare_common(t, config, state, hash_, g, coalesced=coalesced, no_gro=no_gro,
                             udp=udp)
    return _prepare_model(common, config, state, hash_, polls)


def _prepare_common(t: pa.Table, config: GroConfig, state: EngineState, hash_: np.ndarray,
                    g: ColumnReader, *, coalesced=None, no_gro=None, udp=None) -> dict:
    """The model-independent kernel inputs of one batch (bypass codes, skb flushes,
    lengths, size limits, union classes and flow ids through ``state``'s union and flow
    tables; ``hash_`` is word 0 of the union key): what :func:`simulate_batch_models`
    computes once for all its models. ``udp``: the batch's ``_udp_prepare.UdpView`` (UDP
    GRO / tunnel sockets): every column is read through its rewritten view but the flow
    ids (and the RSS hash), which stay those of the original headers."""
    n = t.num_rows
    g0 = g
    if udp is not None:
        g = udp.columns
    if no_gro is not None and np.shape(no_gro) != (n,):
        raise ConfigError(f"no_gro has {np.shape(no_gro)} values for {n} packets")
    segs, gsz, sfl_fl = _gso_input(n, coalesced, config.kernel.gso_skb_gro)
    pre, sfl_out, sfl_in = _pre_and_flush(t, config, no_gro, sfl_fl, columns=g)
    if udp is not None:
        pre = udp.fix_pre(pre, sfl_out, sfl_in, sfl_fl)
    uid, flow = _union_ids(t, hash_, state, columns=g0)
    if flow is None:
        flow = _matrix_flow_ids(t, state)
    if state.flow_base:           # a later receiver run: its flows after the earlier ones'
        flow = flow + state.flow_base
    if udp is not None:           # the same-flow classes of the rewritten headers
        uid, _ = _union_ids(t, hash_, udp.view_state(state),
                            columns=g)
    # option bytes: a zero-copy uint64 view of the Arrow column (read-only: one numba type)
    ob = g.bytes("tcp_options")
    if ob.shape[1] != K.OPT_BYTES:
        raise ConfigError(f"tcp_options has {ob.shape[1]} bytes per row, expected "
                          f"{K.OPT_BYTES}", hint="use decode.schema.PACKET_SCHEMA")
    if not ob.flags.c_contiguous or ob.ctypes.data % 8:
        ob = ob.copy()                       # a fresh array is aligned for uint64
    s = lambda name: g(name, _SCHEMA_DT[name])  # noqa: E731  (zero-copy for the schema)
    plen = np.empty(n, np.int64)
    tlen = np.empty(n, np.int64)
    gcode = np.empty(n, np.int64)
    limit = np.empty(n, np.int64)
    flags = g("tcp_flags", np.int32)
    kp = config.kernel
    K.derive_lengths(s("wire_len"), s("outer_ip_version"), s("outer_ip_offset"),
                     s("ip_offset"), s("vlan_depth"), s("ip_hdr_len"), s("tcp_doff"),
                     s("payload_len"), s("ip_version"), flags, s("tun_type"),
                     s("ip_ext_len"), TCP_FLAG_CWR, GRO_LEGACY_MAX_SIZE,
                     kp.version >= (5, 16), config.max_size(4), config.max_size(6),
                     K.BIG_ANY if kp.big_tcp_ipv4 else
                     K.BIG_V6_PLAIN if kp.version >= (5, 19) else K.BIG_NONE,
                     plen, tlen, gcode, limit)
    i32 = lambda name: g(name, np.int32)  # noqa: E731
    return dict(
        n=n, uid=uid, ts=g("ts_ns"),
        cols=dict(pre=pre, sfl_out=sfl_out, sfl_in=sfl_in, payload=s("payload_len"),
                  tlen=tlen, plen=plen, limit=limit,
                  seq=s("tcp_seq"), ack=s("tcp_ack"), flags=flags, doff=s("tcp_doff"),
                  window=s("tcp_window"), opt=_readonly(ob.view(np.uint64)),
                  opt_len=s("tcp_opt_len"), in_v=s("ip_version"), in_ttl=s("ip_ttl"),
                  in_tos=s("ip_tos"), in_df=i32("ip_df"), in_id=i32("ip_id"),
                  out_v=s("outer_ip_version"), out_ttl=s("outer_ip_ttl"),
                  out_tos=s("outer_ip_tos"), out_df=i32("outer_ip_df"),
                  out_id=i32("outer_ip_id"), gcode=gcode, flow=flow, segs=segs, gsz=gsz,
                  sfl_fl=sfl_fl), udp=udp)


def _prepare_model(common: dict, config: GroConfig, state: EngineState, hash_: np.ndarray,
                   polls=None) -> tuple[K.Cols, np.ndarray]:
    """One model's kernel inputs from :func:`_prepare_common`: RX queue and GRO bucket
    (napi), same-flow key and loose ids (through ``state``'s key tables; the ideal model
    ignores the hash), explicit poll windows, row numbers."""
    n = common["n"]
    if config.model == "napi":
        # one RX queue: every packet's is 0 (shared, as the ideal model's)
        queue = _constant(n, np.int32) if config.queues == 1 else \
            rx_queue(hash_, config.queues).astype(np.int32)
        bucket = gro_bucket(hash_, config.kernel.hash_buckets).astype(np.int32)
    else:
        queue = bucket = _constant(n, np.int32)
    c = common["cols"]
    udp = common["udp"]
    use = c["pre"] == 0
    key, loose = _key_ids(common["uid"], use, config,
                          state if udp is None else udp.view_state(state),
                          no_hash=config.model != "napi")
    if udp is not None:
        key, loose = udp.tunnel_ids(key, loose, use, state, _global_ids)
    if polls is None:
        poll_win = _constant(n, np.int64)
    else:
        poll_win = np.ascontiguousarray(np.asarray(polls, dtype=np.int64))
        if poll_win.shape != (n,):
            raise ConfigError(f"polls has shape {poll_win.shape}, expected ({n},)",
                              hint="give one poll/window number per packet")
        prev = state.kernel.win[0] if state.kernel.win[1] else None
        if (n > 1 and np.any(np.diff(poll_win) < 0)) or \
                (n and prev is not None and poll_win[0] < prev):
            raise ConfigError("polls must be non-decreasing",
                              hint="number GRO windows in capture order")
    cols = K.Cols(row=np.arange(state.row_base, state.row_base + n, dtype=np.int64),
                  key=key, loose=loose, queue=queue, bucket=bucket, poll_win=poll_win,
                  udp=_constant(n, np.uint8), udp_len=_constant(n, np.uint16), **c)
    if udp is not None:
        cols = udp.finish(cols)
    return cols, common["ts"]


def _new_out(n: int, nseg: int) -> K.Out:
    # np.empty: every super-packet slot is written before it is read (nseg counts them),
    # and per-packet slots are read only where ppoll says the packet was processed
    e = lambda m: np.empty(m, np.int64)  # noqa: E731
    return K.Out(reason=np.empty(n, np.uint8), inst=e(n), ppoll=np.full(n, -2, np.int64),
                 s_first=e(nseg), s_last=e(nseg), s_count=e(nseg), s_payload=e(nseg),
                 s_gso=e(nseg), s_end=e(nseg), s_queue=e(nseg), s_poll=e(nseg),
                 s_fixed=e(nseg), s_inst=e(nseg), s_gcode=e(nseg), s_flow=e(nseg),
                 s_trig=e(nseg), nseg=np.zeros(1, np.int64), cur=np.full(1, -1, np.int64))


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: Cols.opt is always read-only, so the kernels compile once."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _like(new: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``new`` read-only when ``ref`` is: fields read from the Arrow columns are
    read-only views, and numba compiles one ``run`` per combination of flags."""
    return new if ref.flags.writeable else _readonly(new)


def _concat_cols(a: K.Cols | None, b: K.Cols) -> K.Cols:
    if a is None or len(a.row) == 0:
        return b
    return K.Cols(*[_like(np.concatenate([x, y]), y) for x, y in zip(a, b)])


def _slice_cols(c: K.Cols, lo: int, hi: int) -> K.Cols:
    """Rows ``lo:hi`` of every column, as views (the same numba types: a slice of a
    contiguous column is contiguous and keeps its flags)."""
    return K.Cols(*[x[lo:hi] for x in c])


# run_prepared, NAPI model, one RX queue: the rows of a batch that go in with the
# undecided rows of the batch before (the rest of the batch then goes in uncopied)
HEAD_ROWS = 1024


def _take_cols(c: K.Cols, idx: np.ndarray) -> K.Cols:
    return K.Cols(*[_like(np.ascontiguousarray(x[idx]), x) for x in c])


# "trig": the row whose receive sent the super-packet up (-1: a flush), what lets runs over
# disjoint flow partitions of the ideal model be merged in one-process delivery order
_SEG_FIELDS = ("first", "last", "count", "payload", "gso", "end", "queue", "poll", "fixed",
               "inst", "gcode", "flow", "trig")


def _udp_arg(config: GroConfig, c: K.Cols):
    """``run``'s ``udp`` argument: the UDP GRO rules are compiled into ``run`` only when
    the configuration can use them (or, never otherwise, a packet does), so a TCP-only
    first run compiles the smaller variant (``fast.napi.run``)."""
    return np.bool_(True) if _udp_prepare.needed(config) or c.udp.any() else None


def run_prepared(cols: K.Cols, ts: np.ndarray, config: GroConfig, state: EngineState,
                 final: bool) -> tuple[dict, list, list]:
    """Run the kernels on prepared columns (advancing ``state``).

    Returns ``(verdicts, seg_parts, poll_parts)``: per processed packet arrays and the
    super-packets / polls emitted, in order.
    """
    cfg = _cfg(config, state.model)
    st = state.kernel
    nheld = int(np.count_nonzero(st.e_first >= 0))
    verdicts = {"row": [], "reason": [], "inst": [], "poll": []}
    segs: list = []
    polls: list = []

    def collect(c, out):
        done = out.ppoll != -2
        k = int(np.count_nonzero(done))
        if done[:k].all():
            # the processed rows are a prefix (all of them, or one queue's rows in
            # order with its undecided tail left): views, not copies
            verdicts["row"].append(c.row[:k])
            verdicts["reason"].append(out.reason[:k])
            verdicts["inst"].append(out.inst[:k])
            verdicts["poll"].append(out.ppoll[:k])
        else:
            verdicts["row"].append(c.row[done])
            verdicts["reason"].append(out.reason[done])
            verdicts["inst"].append(out.inst[done])
            verdicts["poll"].append(out.ppoll[done])
        ns = int(out.nseg[0])
        # the capacity bound of _new_out (numba does not check bounds): fail loudly
        assert ns <= len(out.s_first), "super-packet buffer overrun"
        segs.append({f: getattr(out, "s_" + f)[:ns] for f in _SEG_FIELDS})

    if state.model in (K.MODEL_IDEAL, K.MODEL_WINDOWS):
        n = len(cols.row)
        # every super-packet emitted is an instance completed once: those held at the
        # start plus at most one new instance per packet (held or delivered alone)
        out = _new_out(n, n + nheld + 16)
        one = np.zeros(1, np.int64)
        K.run(cols, cfg, st, out, _constant(n, np.int64, arange=True),
              np.array([0, n], np.int64), one, one, one, final, _udp_arg(config, cols))
        if final and state.model == K.MODEL_IDEAL:
            K.flush_ideal(st, out)
        collect(cols, out)
    else:
        arr_new = ts.copy()
        queues = config.queues
        # arrival = running maximum of ts_ns within a queue (backwards stamps keep order)
        for q in range(queues):
            if queues == 1:                 # one queue: every row, no index arrays
                if len(arr_new):
                    np.maximum(arr_new, state.q_maxts[0], out=arr_new)
                    np.maximum.accumulate(arr_new, out=arr_new)
                    state.q_maxts[0] = arr_new[-1]
                continue
            sel = np.nonzero(cols.queue == q)[0]
            if len(sel):
                run = np.maximum.accumulate(np.maximum(arr_new[sel], state.q_maxts[q]))
                arr_new[sel] = run
                state.q_maxts[q] = run[-1]

        def step(c, arr_all, final):
            # one kernel call over ``c``: the rows it leaves undecided (sorted), and
            # whether timers are still running at the end of the capture
            n = len(c.row)
            if queues == 1:                 # the rows in order (what the sort gives)
                rows = _constant(n, np.int64, arange=True)
                qstart = np.array([0, n], np.int64)
                arr = arr_all
            else:
                rows = np.argsort(c.queue, kind="stable").astype(np.int64)
                qstart = np.searchsorted(c.queue[rows],
                                         np.arange(queues + 1)).astype(np.int64)
                arr = np.ascontiguousarray(arr_all[rows])
            cap = 2 * n + 4 * (config.napi_defer_hard_irqs + 2) * queues + 64
            p_time = np.empty(cap, np.int64)
            p_queue = np.empty(cap, np.int64)
            out = _new_out(n, n + int(np.count_nonzero(st.e_first >= 0)) + 16)
            base = int(st.ctr[2])
            npoll = K.run(c, cfg, st, out, rows, qstart, arr, p_time, p_queue, final,
                          _udp_arg(config, c))
            left = np.concatenate([rows[st.qs[q, K.QS_NEXT]:qstart[q + 1]]
                                   for q in range(queues)]) if queues else rows[:0]
            busy = final and bool(np.any(st.qs[:, K.QS_HAS_TIMER] != 0)
                                  | np.any(st.qs[:, K.QS_CONT] != 0))
            if final and not len(left) and not busy:
                K.napi_finish(st, out)
            collect(c, out)
            polls.append((base, p_time[:npoll].copy(), p_queue[:npoll].copy()))
            return np.sort(left), busy

        nb = len(cols.row)
        if queues == 1 and state.pending is not None and nb > 2 * HEAD_ROWS:
            # The undecided rows of the batch before go in with this batch's first rows
            # only. Once a poll among those is decided, what is left undecided is a run
            # of this batch's own rows, and the batch from there goes in as views of its
            # columns: no copy of its ~90 columns (0.17 s per 3 M rows of the run).
            npend = len(state.pending.row)
            c = _concat_cols(state.pending, _slice_cols(cols, 0, HEAD_ROWS))
            arr_all = np.concatenate([state.pending_arr, arr_new[:HEAD_ROWS]])
            left, _ = step(c, arr_all, False)
            if not len(left) or left[0] >= npend:
                j = int(left[0]) - npend if len(left) else HEAD_ROWS
                c, arr_all = _slice_cols(cols, j, nb), arr_new[j:]
            else:
                c = _concat_cols(_take_cols(c, left), _slice_cols(cols, HEAD_ROWS, nb))
                arr_all = np.concatenate([arr_all[left], arr_new[HEAD_ROWS:]])
        else:
            c = _concat_cols(state.pending, cols)
            arr_all = arr_new if state.pending is None else np.concatenate(
                [state.pending_arr, arr_new])
        while True:
            left, busy = step(c, arr_all, final)
            if not final or (not len(left) and not busy):
                state.pending = _take_cols(c, left) if len(left) else None
                state.pending_arr = arr_all[left] if len(left) else None
                break
            c = _take_cols(c, left)
            arr_all = arr_all[left]
    return verdicts, segs, polls


def _join_segs(parts: list) -> np.ndarray:
    """Concatenate one super-packet field's parts; a single part that fills most of its
    output buffer is kept as is (a view), a sparse one is copied so the buffer is freed."""
    if len(parts) == 1:
        p = parts[0]
        base = p.base if p.base is not None else p
        return p if 2 * len(p) >= len(base) else p.copy()
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def simulate_batch(packets: pa.Table, config: GroConfig, state: EngineState | None = None,
                   *, final: bool = False, polls=None, coalesced=None, hashes=None,
                   no_gro=None) -> tuple[BatchResult, EngineState]:
    """Run GRO over the next batch of a capture, carrying the state across batches.

    Parameters:
        packets: the next rows of the capture (PACKET_SCHEMA), in capture order.
        config: the GroConfig; must be the same for every batch of a capture.
        state: what the previous call returned (None for the first batch).
        final: True for the last batch: flushes what is held (END_CAPTURE / END_POLL).
        polls: explicit GRO windows for these rows (napi model, see :func:`simulate`).
        coalesced, hashes, no_gro: per row of this batch, see :func:`simulate`.

    Returns ``(BatchResult, EngineState)``; :func:`assemble` turns the list of results
    into the capture's GroResult.

    >>> # st = None; parts = []
    >>> # for i, b in enumerate(batches):
    >>> #     part, st = simulate_batch(b, cfg, st, final=i == len(batches) - 1)
    >>> #     parts.append(part)
    >>> # result = assemble(parts, cfg)
    """
    packets = _check_table(packets)
    state = _check_state(config, state, polls)
    retire_idle([state])
    if coalesced is True:
        from gropcap.gro.coalesced import coalesced_input
        coalesced = coalesced_input(packets)
    cols, ts = prepare(packets, config, state, polls, coalesced=coalesced, hashes=hashes,
                       no_gro=no_gro)
    return _run_batch(cols, ts, config, state, final), state


def _check_state(config: GroConfig, state: EngineState | None, polls) -> EngineState:
    """The state for the next batch under ``config`` (a new one for None), checked."""
    from gropcap.gro.config import needs_reference
    if needs_reference(config):
        raise ConfigError("the numba engine does not implement this configuration",
                          hint="run gropcap.gro.reference.simulate (engine='reference')")
    if polls is not None and config.model != "napi":
        raise ConfigError("explicit polls need the napi model",
                          hint="pass GroConfig(model='napi') with polls=")
    if state is None:
        state = EngineState.new(config, explicit_polls=polls is not None)
    elif state.config_json != config.to_json():
        raise ConfigError("simulate_batch: config differs from the one the state was made with")
    if state.finished:
        raise ConfigError("simulate_batch: the capture was already finished (final=True)")
    if (polls is not None) != (state.model == K.MODEL_WINDOWS):
        raise ConfigError("polls= must be given for every batch or for none")
    return state


def _run_batch(cols: K.Cols, ts: np.ndarray, config: GroConfig, state: EngineState,
               final: bool) -> BatchResult:
    """The kernels over one prepared batch (advancing ``state``): its BatchResult."""
    n = len(cols.row)
    state.kernel = _grow(state.kernel, len(state.key_ids), max(len(state.loose_ids),
                                                             len(state.key_ids)))
    row_start = state.row_base
    state.row_base += n
    verdicts, segs, poll_parts = run_prepared(cols, ts, config, state, final)
    if final:
        state.finished = True
    cat = lambda parts: (parts[0] if len(parts) == 1 else np.concatenate(parts)) \
        if parts else np.zeros(0, np.int64)  # noqa: E731 (one part: no copy)
    seg = {f: _join_segs([s[f] for s in segs]) for f in _SEG_FIELDS}
    if poll_parts:
        poll_base = poll_parts[0][0]
        p_time = cat([p[1] for p in poll_parts])
        p_queue = cat([p[2] for p in poll_parts])
    else:
        poll_base, p_time, p_queue = int(state.kernel.ctr[2]), np.zeros(0, np.int64), \
            np.zeros(0, np.int64)
    napi = config.model == "napi"
    return BatchResult(
        row_start=row_start, flow_id=cols.flow,
        rx_queue=cols.queue.astype(np.uint16) if napi else np.zeros(n, np.uint16),
        p_row=cat(verdicts["row"]),
        p_reason=cat(verdicts["reason"]).astype(np.uint8, copy=False),
        p_inst=cat(verdicts["inst"]), p_poll=cat(verdicts["poll"]), segs=seg,
        poll_base=poll_base, poll_time=p_time, poll_queue=p_queue, run=state.run)


def next_run(states):
    """Fresh receivers for the next receiver run (``run/receivers.py``: a separate
    capture replayed on a receiver of its own) after ``states`` (an :class:`EngineState`
    or a list of them, each finished: its last batch was fed with ``final=True``).

    Everything GRO and NAPI hold starts empty (held entries, the 8x8 tables, timers,
    arrival times, key and flow dictionaries); what numbers results carries on (rows,
    super-packet instances, polls), flow ids continue after the earlier runs' flows, and
    :func:`assemble` delivers the new run's super-packets after the earlier runs' ones
    (polls ordered by run, then time, queue and number). States that shared their union
    and flow tables (:func:`new_states`) share the new ones.

    >>> # part, st = simulate_batch(run_a, cfg, None, final=True)
    >>> # part2, st = simulate_batch(run_b, cfg, next_run(st), final=True)
    >>> # result = assemble([part, part2], cfg)
    """
    single = isinstance(states, EngineState)
    olds = [states] if single else list(states)
    tables: dict = {}
    news = []
    for old in olds:
        if not old.finished:
            raise ConfigError("next_run: the run before was not finished (final=True)")
        queues, buckets = old.kernel.tbl.shape[0], old.kernel.tbl.shape[1]
        kernel = _new_kernel_state(64, 64, queues, buckets)
        kernel.ctr[:] = old.kernel.ctr
        shared = tables.setdefault((id(old.union_ids), id(old.flow_ids)),
                                   (UnionTable(), InternTable(old.flow_ids.words)))
        shared[0].sharers = old.union_ids.sharers
        news.append(EngineState(
            config_json=old.config_json, model=old.model, kernel=kernel,
            key_ids=InternTable(old.key_ids.words), union_ids=shared[0],
            flow_ids=shared[1], row_base=old.row_base,
            q_maxts=np.full(queues, np.iinfo(np.int64).min, np.int64), run=old.run + 1,
            flow_base=old.flow_base + len(old.flow_ids)))
    return news[0] if single else news


def new_states(configs: list[GroConfig]) -> list[EngineState]:
    """Empty states for :func:`simulate_batch_models`: one per config, sharing one
    union-key table and one flow table (model independent), so a batch is classified
    once for all of them."""
    states = [EngineState.new(c) for c in configs]
    for st in states[1:]:
        st.union_ids, st.flow_ids = states[0].union_ids, states[0].flow_ids
    states[0].union_ids.sharers = len(states)
    return states


def _shared_rss(configs: list[GroConfig]) -> tuple | None:
    """``(rss_key, enabled)`` of the union key's word 0 when ``configs`` can share one
    preparation (equal but for ``model``; every napi model hashes the same way), else
    None."""
    if len({c.replace(model="ideal").to_json() for c in configs}) != 1:
        return None
    napi = [c for c in configs if c.model == "napi"]
    return (napi[0].rss_key, napi[0].rss == "toeplitz") if napi else (b"", False)


def simulate_batch_models(packets: pa.Table, configs: list[GroConfig],
                          states: list[EngineState] | None = None, *, final: bool = False,
                          coalesced=None, no_gro=None, pool=None
                          ) -> tuple[list[BatchResult], list[EngineState]]:
    """:func:`simulate_batch` for several models over the same batch, the
    model-independent preparation (column reads, bypass codes, lengths, size limits,
    union classes and flow ids: :func:`_prepare_common`) done once.

    ``configs`` should differ only in ``model`` (ideal / napi; inferred polls); other
    lists are run model by model (same results, no sharing). ``states``: what the
    previous call returned (None for the first batch: :func:`new_states`). Each model's
    results equal its own :func:`simulate_batch` run, bit for bit.

    ``pool``: a ``concurrent.futures`` executor that runs the models after the first
    while the calling thread runs the first (the kernels release the GIL), shared
    preparation only. Each model then touches nothing but its own state: the shared
    union and flow tables are only read (``_key_ids``) until every model returned.
    """
    packets = _check_table(packets)
    configs = list(configs)
    if states is None:
        states = new_states(configs)
    if len(states) != len(configs):
        raise ConfigError(f"simulate_batch_models: {len(states)} states for "
                          f"{len(configs)} configs")
    states = [_check_state(c, st, None) for c, st in zip(configs, states)]
    retire_idle(states)
    if coalesced is True:
        from gropcap.gro.coalesced import coalesced_input
        coalesced = coalesced_input(packets)
    rss = _shared_rss(configs)
    # a UDP view's same-flow classes live in each state's own tables (view_state)
    shared = (rss is not None and not _udp_prepare.needed(configs[0])
              and all(st.union_ids is states[0].union_ids
                      and st.flow_ids is states[0].flow_ids for st in states))
    if not shared:
        parts = [simulate_batch(packets, c, st, final=final, coalesced=coalesced,
                                no_gro=no_gro)[0] for c, st in zip(configs, states)]
        return parts, states
    g = ColumnReader(packets)
    hash_ = rss_hash(packets, rss[0], enabled=rss[1], columns=g)
    common = _prepare_common(packets, configs[0], states[0], hash_, g, coalesced=coalesced,
                             no_gro=no_gro)
    def one(c, st):
        cols, ts = _prepare_model(common, c, st, hash_)
        return _run_batch(cols, ts, c, st, final)
    if pool is None:
        return [one(c, st) for c, st in zip(configs, states)], states
    from concurrent import futures
    later = [pool.submit(one, c, st) for c, st in zip(configs[1:], states[1:])]
    try:
        first = one(configs[0], states[0])
    finally:
        # every model done before the caller goes on (the next batch's preparation
        # writes the shared tables), whatever happened here
        futures.wait(later)
    return [first] + [f.result() for f in later], states


def simulate_models(packets: pa.Table, configs: list[GroConfig], *, coalesced=None,
                    no_gro=None, runs=None) -> list[GroResult]:
    """:func:`simulate` for several models (``configs`` differing only in ``model``)
    from one preparation per piece: the GroResults, each equal to its own
    :func:`simulate` (``runs`` as there)."""
    configs = list(configs)
    packets = _check_table(packets)
    if coalesced is True:
        from gropcap.gro.coalesced import coalesced_input
        coalesced = coalesced_input(packets)
    parts: list[list] = [[] for _ in configs]
    states = None
    for lo, piece, final in _run_pieces(packets, runs):
        hi = lo + piece.num_rows
        if states is not None and states[0].finished:
            states = next_run(states)
        got, states = simulate_batch_models(
            piece, configs, states, final=final,
            coalesced=_cut_coalesced(coalesced, lo, hi),
            no_gro=None if no_gro is None else np.asarray(no_gro)[lo:hi])
        for acc, part in zip(parts, got):
            acc.append(part)
    return [assemble(p, c) for p, c in zip(parts, configs)]


@functools.lru_cache(maxsize=64)
def _gso_table(config: GroConfig) -> np.ndarray:
    """gso_type by (gcode, fixed bits): gso.gso_type_for over every combination. Rows from
    ``K.GCODE_DELIVERED`` on are packets delivered alone (no gro_complete); with TCP
    fraglist GRO a completion is tcp4/6_gro_complete's is_flist branch: FRAGLIST | TCPV4/6
    after the tunnel bits, no ECN or fixed-ID bit.

    One read-only table per configuration (cached): building it calls ``gso_type_for``
    some 260 times, a millisecond of every :func:`simulate` call, which a run of many
    small tables (a partitioned run's pieces, the tests) paid again and again."""
    table = np.zeros((2 * K.GCODE_DELIVERED, 4), np.uint32)
    for v6 in range(2):
        for cwr in range(2):
            for tun in range(16):
                row = (v6 * 2 + cwr) * 16 + tun
                for fx in range(4):
                    t = gso_type_for(config.kernel.version, 6 if v6 else 4,
                                     ip_fixedid=0 if v6 else fx, cwr=bool(cwr), tun_type=tun)
                    table[row + K.GCODE_DELIVERED, fx] = t
                    if config.tcp_fraglist:
                        t = gso_type_for(config.kernel.version, 6 if v6 else 4,
                                         tun_type=tun) | SKB_GSO_FRAGLIST
                    table[row, fx] = t
    table = _udp_prepare.gso_rows(table, config)
    table.flags.writeable = False
    return table


def gso_types(s: dict, gtable: np.ndarray) -> np.ndarray:
    """The ``gso_type`` of each super-packet of the engine's ``s`` fields (``count``,
    ``gcode``, ``fixed``) from :func:`_gso_table`; 0 for a packet delivered alone."""
    gso_type = np.zeros(len(s["count"]), np.uint32)
    multi = s["count"] > 1
    gso_type[multi] = gtable[s["gcode"][multi], s["fixed"][multi] & 3]
    return gso_type


def assemble(parts: list[BatchResult], config: GroConfig) -> GroResult:
    """Number super-packets (delivery order) and polls once every batch is in.

    The napi model's delivery order is the order of polls by (time, queue, order within
    the queue) across all queues (docs/gro-model.md), which needs every poll.
    """
    n = sum(len(p.flow_id) for p in parts)
    cat = lambda xs, dt=np.int64: (np.concatenate(xs).astype(dt, copy=False) if xs  # noqa: E731
                                   else np.zeros(0, dt))
    flow_id = cat([p.flow_id for p in parts])
    rx = cat([p.rx_queue for p in parts], np.uint16)
    reason = np.zeros(n, np.uint8)
    inst = np.zeros(n, np.int64)
    pkt_poll = np.full(n, -1, np.int64)
    for p in parts:                   # per part: no concatenated temporaries
        reason[p.p_row] = p.p_reason
        inst[p.p_row] = p.p_inst
        pkt_poll[p.p_row] = p.p_poll
    seg = {f: cat([p.segs[f] for p in parts]) for f in _SEG_FIELDS}
    m = len(seg["first"])
    napi_inferred = config.model == "napi" and any(len(p.poll_time) for p in parts)
    if napi_inferred:
        p_time = cat([p.poll_time for p in parts])
        p_queue = cat([p.poll_queue for p in parts])
        p_run = cat([np.full(len(p.poll_time), p.run, np.int64) for p in parts])
        number = np.arange(len(p_time), dtype=np.int64)   # global poll numbers from 0
        order = np.lexsort((number, p_queue, p_time, p_run))
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        s_rank = rank[seg["poll"]] if m else np.zeros(0, np.int64)
        seg_order = np.argsort(s_rank, kind="stable")
        seg_poll = s_rank[seg_order]
    else:
        rank = np.zeros(0, np.int64)
        seg_order = None                           # emission order is delivery order
        seg_poll = seg["poll"] if config.model == "napi" else np.full(m, -1, np.int64)
    s = seg if seg_order is None else {f: seg[f][seg_order] for f in _SEG_FIELDS}
    seg_of_inst = np.zeros(int(s["inst"].max()) + 1 if m else 0, np.int64)
    seg_of_inst[s["inst"]] = np.arange(m)
    gro_seg = np.empty(n, np.int64)
    role = np.empty(n, np.uint8)
    if n:                             # gro_seg, role and poll ranks in one pass
        K.assemble_rows(inst, seg_of_inst, s["count"], s["first"], rank, pkt_poll, gro_seg,
                        role)
    gso_type = gso_types(s, _gso_table(config)) if m else np.zeros(0, np.uint32)
    return GroResult(
        flow_id=flow_id, gro_seg=gro_seg, gro_role=role, reason=reason, rx_queue=rx,
        poll_id=pkt_poll, seg_flow_id=s["flow"], seg_first_packet=s["first"],
        seg_last_packet=s["last"], seg_count=s["count"], seg_payload_len=s["payload"],
        seg_gso_size=s["gso"], seg_gso_type=gso_type, seg_end_reason=s["end"],
        seg_rx_queue=s["queue"], seg_poll_id=seg_poll)


def quiet_gap_ns(config: GroConfig) -> int | None:
    """How long a receive queue of the napi model must see no arrival before it holds
    nothing and is back in its first state, so the capture can be cut there in time
    (:func:`time_cuts`); None when the model cannot be cut in time.

    After its last arrival ``a`` a queue's last poll with work runs by ``a + T`` (a timer
    poll takes what arrived since the timer was armed, at most ``T`` before), then at most
    ``max(D, 1)`` timer polls without work follow ``T`` apart (``napi_complete_done``
    reloads ``defer_hard_irqs_count`` = D, each ``napi_watchdog`` poll without work
    counts one down, the last one flushes everything and unmasks the interrupt; with D
    = 0 one timer poll flushes what the poll left held), and an arrival within
    ``poll_gap_ns`` would have joined a poll: quiet after ``poll_gap_ns + (max(D, 1) +
    1) * T`` (T: ``gro_flush_timeout_ns``, D: ``napi_defer_hard_irqs``; one timeout
    less is not enough, ``tests/run/test_partition_merge.py``). Not cut:

    * the ideal model: it has no timer and holds each flow's last super-packet across
      any gap;
    * HZ >= 1000: a full-budget poll flushes only old entries (``__napi_poll``,
      ``gro_flush_normal(&n->gro, HZ >= 1000)``) and the model's next poll is the
      queue's next arrival, however late, so what that poll left held waits for it;
    * ``poll_acks``: the polls end where the receiver's ACKs show a delivery, found by
      a pass over the whole capture (``receive/ackpolls.py``), not by these timers.
    """
    if config.model != "napi" or config.hz >= 1000 or config.poll_acks:
        return None
    t = int(config.gro_flush_timeout_ns)
    return int(config.poll_gap_ns) + (max(int(config.napi_defer_hard_irqs), 1) + 1) * t


def time_cuts(ts_ns: np.ndarray, config: GroConfig, pieces: int) -> np.ndarray:
    """Rows (ascending, at most ``pieces - 1``) before which the napi model's rows can be
    cut in time exactly: every row before the cut arrived more than
    :func:`quiet_gap_ns` earlier than every row from it on, whatever its RX queue, so
    every queue is idle and empty in between and each piece replays alone from a fresh
    receiver (``partition_of(cuts=)``). Chosen nearest to equal shares of the rows; fewer
    (none) when the capture has fewer such gaps, or the model cannot be cut."""
    ts = np.asarray(ts_ns, np.int64)
    return time_cuts_of_parts([len(ts)], lambda i: ts, config, pieces)


def time_cuts_of_parts(sizes, read, config: GroConfig, pieces: int) -> np.ndarray:
    """:func:`time_cuts` of the rows of consecutive parts (``sizes``: rows of each,
    ``read(i)``: part ``i``'s ``ts_ns``, e.g. a column of a mapped file), reading one part
    at a time: what is kept is a maximum and a minimum per part and the candidate rows,
    not a time per row (the client of the core per partition, ``run.dask_core``)."""
    gap = quiet_gap_ns(config)
    none = np.zeros(0, np.int64)
    n = int(sum(sizes))
    if gap is None or pieces < 2 or n < 2:
        return none
    # the earliest time of each part and of every part after it (backward), then one
    # forward pass: the latest time before each row against the earliest from it on
    lows = [int(np.min(read(i))) if sizes[i] else None for i in range(len(sizes))]
    after_part = [None] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        nxt = after_part[i + 1]
        after_part[i] = lows[i] if nxt is None else nxt if lows[i] is None else \
            min(lows[i], nxt)
    cand, before, base = [], None, 0
    for i, size in enumerate(sizes):
        if not size:
            continue
        ts = np.asarray(read(i), np.int64)
        upto = np.maximum.accumulate(ts)                 # latest time up to each row
        if before is not None:
            upto = np.maximum(upto, before)
        suffix = np.minimum.accumulate(ts[::-1])[::-1]   # earliest from each row on
        if after_part[i + 1] is not None:
            suffix = np.minimum(suffix, after_part[i + 1])
        # a cut before row j (j >= 1 overall): everything before it against j onwards
        prev = np.empty(size, np.int64)
        prev[1:] = upto[:-1]
        prev[0] = before if before is not None else suffix[0]   # row 0: no cut
        ok = suffix - prev > gap
        if before is None:
            ok[0] = False
        cand.append(np.flatnonzero(ok) + base)
        before = int(upto[-1])
        base += size
    cand = np.concatenate(cand) if cand else none
    if not len(cand):
        return none
    want = (np.arange(1, pieces, dtype=np.int64) * n) // pieces
    j = np.searchsorted(cand, want)
    lo = cand[np.maximum(j - 1, 0)]                 # the candidates either side
    hi = cand[np.minimum(j, len(cand) - 1)]
    pick = np.where(want - lo <= hi - want, lo, hi)
    return np.unique(pick).astype(np.int64)


def partition_of(packets: pa.Table, config: GroConfig, parts: int, *,
                 cuts: np.ndarray | None = None, first_row: int = 0) -> np.ndarray:
    """Partition (0..parts-1) per row such that rows of different partitions share no
    GRO state, so each partition can be replayed alone in capture order and the results
    merged exactly (the Dask runner, docs/scale.md).

    * ``napi``: the RX queue, ``queue % parts``: every queue has its own ``napi_struct``
      and ``gro_hash`` (``dev_gro_receive`` only looks at ``napi->gro_hash``); queues
      share no state. With ``cuts`` (global rows from :func:`time_cuts`; ``first_row``:
      the global row of ``packets``' first), also the time piece: ``piece * q + queue %
      q`` with ``q = parts // (len(cuts) + 1)``: a queue is idle and empty at every cut.
    * ``ideal``: a hash of fields of the row's loose same-flow key (the fields
      ``gro_list_prepare`` and the protocol ``gro_receive`` callbacks compare, without the
      pre-5.18 IPv6 hop limit): a held entry is only ever matched, flushed or counted by
      packets of its own loose class (``fast.dev._receive``: the entry of ``key``,
      ``loose_held[loose]``), and rows that bail before L4 touch no state at all. The
      hashed fields (innermost addresses and ports) are a subset of that key, so a class
      never straddles partitions; the hash is a fixed mix, the same on every host.

    Counters (super-packet, hold and poll numbers) are renumbered by the merge.
    """
    n = packets.num_rows
    parts = max(1, int(parts))
    packets = _udp_prepare.partition_table(packets, config)
    if config.model == "napi":
        h = rss_hash(packets, config.rss_key, enabled=config.rss == "toeplitz")
        queue = np.asarray(rx_queue(h, config.queues)).astype(np.int64)
        if cuts is None or not len(cuts):
            return queue % parts
        q = max(1, parts // (len(cuts) + 1))
        piece = np.searchsorted(np.asarray(cuts, np.int64),
                                np.arange(first_row, first_row + n, dtype=np.int64),
                                side="right")
        return piece * q + queue % q
    words = _addr_words(packets, "ip_src") + _addr_words(packets, "ip_dst") + [
        column_numpy(packets, "sport", np.uint64)
        | (column_numpy(packets, "dport", np.uint64) << np.uint64(16))]
    h = np.zeros(n, np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for w in words:
            h = (h ^ w) * mul
            h ^= h >> np.uint64(29)
    return (h % np.uint64(parts)).astype(np.int64)


def simulate(packets: pa.Table, config: GroConfig | None = None, *, polls=None,
             coalesced=None, hashes=None, no_gro=None, runs=None) -> GroResult:
    """Replay Linux GRO over a packet table; the numba twin of ``reference.simulate``.

    Parameters:
        packets: table with ``decode.schema.PACKET_SCHEMA`` (rows in capture order).
        config: kernel profile and receive model (``GroConfig``; default 6.18, ideal).
        polls: optional int64 array, one non-decreasing GRO window number per packet
            (``napi`` model only): each window is one poll flushed at its end
            (docs/gro-model.md, "Explicit batches").
        coalesced: a :class:`gropcap.gro.coalesced.CoalescedInput` (or ``True``: detect with
            :func:`gropcap.gro.coalesced.coalesced_input`): its frames arrive as TCP GSO skbs of
            ``segs`` segments and ``gso_size`` (count = segs; FLUSH_GSO_SIZE,
            NOT_HELD_GSO_SHORT; a ``frag_list`` row is never merged), as in the reference.
        hashes: ``napi`` model only: ``skb->hash`` per packet instead of the Toeplitz
            hash of the headers (the gro_cells stage).
        no_gro: bool per packet: its device has GRO off (BYPASS_GRO_DISABLED).
        runs: the receiver run of each row, non-decreasing (``run/receivers.py``; None:
            one run): each run is replayed on fresh receivers (:func:`next_run`), flushed
            at its end, its flows numbered after the earlier runs' and its super-packets
            delivered after theirs.

    Returns a :class:`GroResult` (per-packet verdicts, super-packets in delivery order).

    >>> from gropcap.decode.schema import empty_packet_table
    >>> simulate(empty_packet_table(), GroConfig()).num_superpackets
    0
    """
    config = config or GroConfig()
    packets = _check_table(packets)
    if coalesced is True:
        from gropcap.gro.coalesced import coalesced_input
        coalesced = coalesced_input(packets)
    parts, state = [], None
    for lo, piece, final in _run_pieces(packets, runs):
        hi = lo + piece.num_rows
        cut = lambda a: None if a is None else np.asarray(a)[lo:hi]  # noqa: E731
        if state is not None and state.finished:
            state = next_run(state)
        part, state = simulate_batch(piece, config, state, final=final,
                                     polls=cut(polls), coalesced=_cut_coalesced(coalesced,
                                                                               lo, hi),
                                     hashes=cut(hashes), no_gro=cut(no_gro))
        parts.append(part)
    return assemble(parts, config)


PIECE_ROWS = 1 << 18     # simulate() feeds a table to simulate_batch in pieces of this size


def _pieces(packets: pa.Table, rows: int = PIECE_ROWS) -> list[tuple[int, pa.Table]]:
    """``(first row, table)`` pieces of about ``rows`` rows in capture order, cut at the
    table's chunk boundaries where the chunks are at least half that long (zero-copy: no
    ``combine_chunks`` of a whole multi-chunk column, and every per-batch array of the
    preparation stays small enough for malloc to reuse it instead of faulting fresh pages
    in on every call). Results are those of one call: the engine state carries across
    batches exactly."""
    n = packets.num_rows
    if n <= rows + rows // 2:
        return [(0, packets)]
    bounds = [0]
    for b in packets.to_batches():
        if b.num_rows:
            bounds.append(bounds[-1] + b.num_rows)
    cuts, lo = [0], 0
    for end in bounds[1:]:
        while end - lo >= rows + rows // 2:      # a long chunk: rows-sized slices of it
            lo += rows
            cuts.append(lo)
        if end - lo >= rows // 2 and end < n:
            lo = end
            cuts.append(lo)
    cuts.append(n)
    return [(a, packets.slice(a, b - a)) for a, b in zip(cuts, cuts[1:]) if b > a]


def _run_pieces(packets: pa.Table, runs) -> list[tuple[int, pa.Table, bool]]:
    """``(first row, table, last piece of its run)``: :func:`_pieces` of each receiver
    run (an empty table: one final piece)."""
    out = []
    for a, b in run_bounds(runs, packets.num_rows):
        pieces = _pieces(packets.slice(a, b - a))
        out += [(a + lo, piece, x == len(pieces) - 1) for x, (lo, piece) in enumerate(pieces)]
    return out


def _cut_coalesced(coalesced, lo: int, hi: int):
    """Rows ``lo:hi`` of a gso.CoalescedInput (None stays None)."""
    if coalesced is None:
        return None
    import copy
    part = copy.copy(coalesced)
    for name, value in vars(coalesced).items():
        if isinstance(value, np.ndarray) and value.ndim == 1:
            setattr(part, name, value[lo:hi])
    return part


def rerun_prepared(cols: K.Cols, ts: np.ndarray, config: GroConfig,
                   prepared: EngineState) -> list[dict]:
    """Run the kernels again on columns :func:`prepare` built (with ``prepared``, the state
    it numbered the keys in) under another ``config``, from an empty GRO table, as one
    final batch: the super-packets emitted (``_SEG_FIELDS`` arrays per part).

    For parameter searches (``gropcap.receive.profile`` fits budget, poll gap, HZ and the flush
    timers this way): decoding and :func:`prepare` run once, only the kernels per
    candidate. ``config`` may differ from the preparing one only in what the kernels read
    from it (:func:`_cfg`: budget, poll gap, HZ, timeout, defer); queues, RSS and the
    rule set shape the prepared columns.
    """
    st = EngineState.new(config)
    st.key_ids, st.loose_ids, st.flow_ids = prepared.key_ids, prepared.loose_ids, \
        prepared.flow_ids
    st.kernel = _grow(st.kernel, len(st.key_ids), max(len(st.loose_ids), len(st.key_ids)))
    st.row_base = prepared.row_base
    _, segs, _ = run_prepared(cols, ts, config, st, True)
    return segs


# --- a first run on a cold numba cache (issue 14) -------------------------------------------
# On a fresh install every kernel compiles (~35 s of CPU on the sample, all of it numba:
# docs/performance.md "Start-up"); the plain-Python decoder and engine give the same
# verdicts bit for bit at ~6 k packets/s with nothing to compile. So for a small input on
# a cold cache the reference path finishes first. Not wired here: ``run/cold.py`` decides
# through :func:`cold_start_reference` for the command line (with the stderr note) and
# for ``gropcap.analyze``.
COLD_REFERENCE_MAX_BYTES = 4 << 20   # <= ~57 k records of >= 70 bytes: <= ~10 s reference


def kernels_cached() -> bool:
    """True when numba's on-disk cache holds the GRO ``run`` kernel (``fast.napi.run``),
    the single pass (``gro.fused``) and the decoder kernel, written by an earlier run of
    this very source, so a run loads
    them instead of compiling. numba's index checks only the file a kernel is defined
    in; the files ``run`` inlines or calls (the other ``gro/fast`` modules, the constants
    they read) are checked by the stamp importing ``gro.fast`` compares, which empties
    every kernel's index when one of them changed (:mod:`gropcap.numba_cache`). False
    without a usable cache (numba then compiles on every run). Reads two small index
    files; compiles nothing."""
    from gropcap.decode import _fast_kernels as DK
    from gropcap.gro import fused
    for d in (K.run, DK.decode_kernel, fused.fused_pass):
        try:
            if not d._cache._cache_file._load_index():
                return False
        except Exception:    # NullCache (no cache directory), an unreadable index, or
            return False     # numba's internals changed: assume it compiles
    return True


def cold_start_reference(capture_bytes: int) -> bool:
    """Whether a run over ``capture_bytes`` of uncompressed capture should use the
    reference decoder and engine (same results) instead of compiling the kernels first:
    the cache is cold (:func:`kernels_cached`) and the input is at most
    :data:`COLD_REFERENCE_MAX_BYTES`. A later larger run still compiles (and fills the
    cache); a small run on a cold cache leaves it cold."""
    return 0 <= capture_bytes <= COLD_REFERENCE_MAX_BYTES and not kernels_cached()
