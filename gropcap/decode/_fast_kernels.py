"""Private numba kernels of the fast header decoder (see :mod:`gropcap.decode.fast`).

Layer: decode. Takes the arrays of a :class:`~gropcap.capture.records.RecordBatch` and
fills typed column matrices, one row per column, one element per record. The layout of
those matrices is derived from :data:`~gropcap.decode.schema.PACKET_SCHEMA` below, so a
column is written as ``o.u16[K_IP_OFFSET, i]``.

Every rule mirrors :mod:`gropcap.decode.reference` (the oracle) one for one; the reference
walks the layers with nested calls, the kernel with an explicit state machine (numba has no
mutual recursion). Nothing raises for packet data: the first problem met sets ``status``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from gropcap import constants as C
# one unaligned load (and a byte swap) a field: capture.fast._load_int
from gropcap.capture.fast import _be16, _be32, _byte
from gropcap.decode import schema as S

# --- column layout ----------------------------------------------------------------------
# Record columns come straight from the RecordBatch; ``encap`` is built from layer codes.
RECORD_COLUMNS = ("ts_ns", "cap_len", "wire_len", "linktype", "iface", "file_index",
                  "record", "file_offset", "epb_flags")


def _group_of(t: pa.DataType) -> str:
    if pa.types.is_boolean(t) or t == pa.uint8():
        return "u8"
    if t == pa.int8():
        return "i8"
    if t == pa.uint16():
        return "u16"
    if t == pa.int16():
        return "i16"
    if t == pa.uint32():
        return "u32"
    if t == pa.uint64():
        return "u64"
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return "addr"
    if pa.types.is_fixed_size_binary(t) and t.byte_width == C.TCP_MAX_OPTLEN:
        return "opts"
    raise TypeError(f"no fast-decoder storage for {t}")


GROUPS = ("u8", "i8", "u16", "i16", "u32", "u64", "addr", "opts")
GROUP_DTYPE = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
               "u32": np.uint32, "u64": np.uint64, "addr": np.uint8, "opts": np.uint8}
LAYOUT: dict[str, tuple[str, int]] = {}        # column -> (group, row in that group)
GROUP_COLUMNS: dict[str, list[str]] = {g: [] for g in GROUPS}
for _f in S.PACKET_FIELDS:
    if _f.name in RECORD_COLUMNS or _f.name == "encap":
        continue
    _g = _group_of(_f.type)
    LAYOUT[_f.name] = (_g, len(GROUP_COLUMNS[_g]))
    GROUP_COLUMNS[_g].append(_f.name)
del _f, _g

# K_<COLUMN>: the row of each column in its group's matrix, as compile-time constants for
# the kernels (grouped: u8 incl. bools, i8, u16, i16, u32, u64, addr, opts). Checked
# against LAYOUT right below, so a schema change cannot silently misplace a column.
K_STATUS = 0
K_ENCAP_DEPTH = 1
K_VLAN_DEPTH = 2
K_DSA_TAG = 3
K_OUTER_IP_VERSION = 4
K_OUTER_IP_PROTO = 5
K_OUTER_IP_TTL = 6
K_OUTER_IP_TOS = 7
K_OUTER_IP_DF = 8
K_OUTER_IP_MF = 9
K_OUTER_IP_RF = 10
K_OUTER_IP_CSUM_OK = 11
K_OUTER_IP_EXT_MASK = 12
K_OUTER_L4_PROTO = 13
K_TUN_TYPE = 14
K_TUN_CSUM_OK = 15
K_ERSPAN_VER = 16
K_IP_VERSION = 17
K_IP_PROTO = 18
K_IP_TTL = 19
K_IP_TOS = 20
K_IP_DF = 21
K_IP_MF = 22
K_IP_RF = 23
K_IP_CSUM_OK = 24
K_IP_EXT_MASK = 25
K_L4_PROTO = 26
K_TCP_DOFF = 27
K_TCP_OPT_LEN = 28
K_TCP_SACK_PERM = 29
K_TCP_SACK_BLOCKS = 30
K_TCP_HAS_TS = 31
K_L4_CSUM_STATE = 32
K_INNER_VLAN_DEPTH = 33
K_TCP_WSCALE = 0
K_ETH_TYPE = 0
K_VLAN_TPID0 = 1
K_VLAN_TCI0 = 2
K_VLAN_TPID1 = 3
K_VLAN_TCI1 = 4
K_OUTER_IP_OFFSET = 5
K_OUTER_IP_HDR_LEN = 6
K_OUTER_IP_ID = 7
K_OUTER_IP_FRAG_OFF = 8
K_OUTER_IP_EXT_LEN = 9
K_OUTER_SPORT = 10
K_OUTER_DPORT = 11
K_OUTER_UDP_LEN = 12
K_OUTER_UDP_CSUM = 13
K_TUN_OFFSET = 14
K_TUN_PROTO = 15
K_TUN_OPT_LEN = 16
K_ERSPAN_SESSION = 17
K_INNER_ETH_TYPE = 18
K_IP_OFFSET = 19
K_IP_HDR_LEN = 20
K_IP_ID = 21
K_IP_FRAG_OFF = 22
K_IP_EXT_LEN = 23
K_L4_OFFSET = 24
K_SPORT = 25
K_DPORT = 26
K_TCP_FLAGS = 27
K_TCP_WINDOW = 28
K_TCP_URG_PTR = 29
K_TCP_MSS = 30
K_UDP_LEN = 31
K_L4_CSUM = 32
K_INNER_VLAN_TPID0 = 33
K_INNER_VLAN_TCI0 = 34
K_INNER_VLAN_TPID1 = 35
K_INNER_VLAN_TCI1 = 36
K_DSA_PORT = 0
K_OUTER_IP_TOT_LEN = 0
K_OUTER_IP_FLOW_LABEL = 1
K_TUN_FLAGS = 2
K_TUN_KEY = 3
K_TUN_SEQ = 4
K_IP_TOT_LEN = 5
K_IP_FLOW_LABEL = 6
K_TCP_SEQ = 7
K_TCP_ACK = 8
K_TCP_TSVAL = 9
K_TCP_TSECR = 10
K_PAYLOAD_LEN = 11
K_ETH_DST = 0
K_ETH_SRC = 1
K_OUTER_IP_EXT_DIGEST = 2
K_TUN_OPT_DIGEST = 3
K_INNER_ETH_DST = 4
K_INNER_ETH_SRC = 5
K_IP_EXT_DIGEST = 6
K_OUTER_IP_SRC = 0
K_OUTER_IP_DST = 1
K_IP_SRC = 2
K_IP_DST = 3
K_TCP_OPTIONS = 0

for _name, (_g, _row) in LAYOUT.items():
    assert globals()["K_" + _name.upper()] == _row, f"K_{_name.upper()} != {_row} ({_g})"
del _name, _g, _row


def _pairs(names, group):
    """(inner row, outer row) pairs of the ip_* columns stored in ``group``."""
    out = [(LAYOUT[n][1], LAYOUT["outer_" + n][1]) for n in names if LAYOUT[n][0] == group]
    return np.array(out, dtype=np.int64).reshape(-1, 2)


_IP_COLS = [f.name for f in S.PACKET_FIELDS if f.name.startswith("ip_")]
_L4_COLS = ["l4_proto", "l4_offset", "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags",
            "tcp_doff", "tcp_window", "tcp_urg_ptr", "tcp_opt_len", "tcp_options", "tcp_mss",
            "tcp_wscale", "tcp_sack_perm", "tcp_sack_blocks", "tcp_has_ts", "tcp_tsval",
            "tcp_tsecr", "udp_len", "l4_csum", "l4_csum_state", "payload_len"]
# enter_tunnel: ip_* -> outer_ip_* copies, then ip_* and L4 columns reset to "absent"
IPCOPY_U8 = _pairs(_IP_COLS, "u8")
IPCOPY_U16 = _pairs(_IP_COLS, "u16")
IPCOPY_U32 = _pairs(_IP_COLS, "u32")
IPCOPY_U64 = _pairs(_IP_COLS, "u64")
IPCOPY_ADDR = _pairs(_IP_COLS, "addr")
_RESET = _IP_COLS + _L4_COLS
RESET_U8 = np.array([LAYOUT[n][1] for n in _RESET if LAYOUT[n][0] == "u8"], dtype=np.int64)
RESET_U16 = np.array([LAYOUT[n][1] for n in _RESET if LAYOUT[n][0] == "u16"], dtype=np.int64)
RESET_U32 = np.array([LAYOUT[n][1] for n in _RESET if LAYOUT[n][0] == "u32"], dtype=np.int64)
RESET_U64 = np.array([LAYOUT[n][1] for n in _RESET if LAYOUT[n][0] == "u64"], dtype=np.int64)
RESET_ADDR = np.array([LAYOUT[n][1] for n in _RESET if LAYOUT[n][0] == "addr"], dtype=np.int64)
assert all(LAYOUT[n][0] in ("u8", "u16", "u32", "u64", "addr", "opts", "i8") for n in _RESET)

# "Rare" columns: written only for a frame with a VLAN tag, a DSA tag or a tunnel. Until
# the first such frame of a batch the kernel leaves them untouched (no clearing: a third of
# the output bytes of plain traffic) and the caller makes them constant arrays.
RARE_COLUMNS = frozenset(
    [n for n in LAYOUT if n.startswith(("outer_", "tun_", "inner_", "vlan_", "erspan_",
                                       "dsa_"))])
assert "vlan_depth" in RARE_COLUMNS and "dsa_port" in RARE_COLUMNS


def _rows(group: str, rare: bool) -> np.ndarray:
    return np.array([k for n, (g, k) in LAYOUT.items()
                     if g == group and (n in RARE_COLUMNS) == rare], dtype=np.int64)


COMMON_U8, COMMON_I8, COMMON_U16, COMMON_I16 = (_rows(g, False) for g in ("u8", "i8", "u16",
                                                                       "i16"))
COMMON_U32, COMMON_U64, COMMON_ADDR = (_rows(g, False) for g in ("u32", "u64", "addr"))
RARE_U8, RARE_I8, RARE_U16, RARE_I16 = (_rows(g, True) for g in ("u8", "i8", "u16", "i16"))
RARE_U32, RARE_U64, RARE_ADDR = (_rows(g, True) for g in ("u32", "u64", "addr"))
assert not any(LAYOUT[n][0] == "opts" for n in RARE_COLUMNS) and not len(RARE_I8)
BOOL_RARE = np.zeros(len(GROUP_COLUMNS["u8"]), np.bool_)    # u8 row -> in RARE_U8
BOOL_RARE[RARE_U8] = True


class Out(NamedTuple):
    """The typed column matrices the kernel fills: ``group[row, record]``."""

    u8: np.ndarray     # (n_u8, n) uint8; booleans as 0/1
    i8: np.ndarray     # (n_i8, n) int8
    u16: np.ndarray
    i16: np.ndarray
    u32: np.ndarray
    u64: np.ndarray
    addr: np.ndarray   # (n_addr, n, 16) uint8
    opts: np.ndarray   # (n, 40) uint8: tcp_options


class _Slabs:
    """Output memory for :func:`alloc_out`, recycled once the consumer has dropped it.

    Each batch's matrices are carved from one ``uint8`` slab; the Arrow columns wrap views
    of it without a copy, and every view holds a reference to the slab. A slab whose only
    reference is this cache is free again: a streaming consumer that drops each decoded
    batch gets the same (already mapped, page-faulted, often cached) memory back, instead
    of fresh pages the kernel has to fault in and zero (a third of the decode time on
    large batches). At most ``keep`` idle slabs are kept; thread safe.
    """

    def __init__(self, keep: int = 2):
        import threading
        self.keep = keep
        self.slabs: list[np.ndarray] = []
        self.lock = threading.Lock()

    def get(self, nbytes: int) -> np.ndarray:
        import sys
        with self.lock:
            for j in range(len(self.slabs)):
                slab = self.slabs[j]
                # references: this list, ``slab`` and getrefcount's argument
                if sys.getrefcount(slab) <= 3:
                    if nbytes <= slab.nbytes <= 2 * nbytes + (1 << 20):
                        return slab
                    del self.slabs[j]                 # free but the wrong size: drop it
                    break
            slab = np.empty(max(nbytes, 1), dtype=np.uint8)
            if len(self.slabs) < self.keep:
                self.slabs.append(slab)
            return slab


_SLABS = _Slabs()
_ALIGN = 64


def alloc_out(n: int, extra=()) -> tuple[Out, list[np.ndarray]]:
    """Uninitialised matrices for ``n`` records (:func:`decode_kernel` clears them), and
    one uninitialised array per ``(shape, dtype)`` of ``extra``.

    They are views of one recycled slab (:class:`_Slabs`) and become the Arrow columns
    without a copy. The kernel clears the matrices a chunk at a time, just before decoding
    that chunk, so the memory is written while it is in cache.

    A matrix row holds ``n`` records and 64 bytes more (:data:`ROW_PAD`; :func:`trim`
    gives the ``n``-record views): with batches of 2**k records, rows exactly 2**k
    records long put one record's ~100 columns at addresses that differ by multiples of
    2**k, which all fall in one set of the L1 and L2 caches. The kernel writes a record's
    columns together, so they evicted each other on every record.
    """
    specs = []
    for g in GROUPS:
        k = len(GROUP_COLUMNS[g])
        size = np.dtype(GROUP_DTYPE[g]).itemsize * (16 if g == "addr" else 1)
        specs.append(((k, n + ROW_PAD // size, 16) if g == "addr" else
                      (n, C.TCP_MAX_OPTLEN) if g == "opts" else
                      (k, n + ROW_PAD // size), GROUP_DTYPE[g]))
    specs += list(extra)
    sizes = [int(np.prod(shp)) * np.dtype(dt).itemsize for shp, dt in specs]
    total = sum(-(-b // _ALIGN) * _ALIGN for b in sizes) + _ALIGN
    slab = _SLABS.get(total)
    pos = -slab.ctypes.data % _ALIGN
    arrs = []
    for (shp, dt), size in zip(specs, sizes):
        arrs.append(slab[pos:pos + size].view(dt).reshape(shp))
        pos += -(-size // _ALIGN) * _ALIGN
    return Out(*arrs[:len(GROUPS)]), arrs[len(GROUPS):]


ROW_PAD = 64        # bytes past the last record of a matrix row (alloc_out)


def trim(o: Out, n: int) -> Out:
    """The matrices of :func:`alloc_out` as ``n`` records a row (views, rows contiguous)."""
    return Out(*(m[:, :n] for m in o[:6]), o.addr[:, :n], o.opts)


CLEAR_CHUNK = 1024        # records cleared ahead of decoding (fits in L2 with its output)


# --- encapsulation layer codes (the "encap" column is "/".join of their names) ----------
LAYER_NAMES = ["", "null", "loop", "sll", "sll2", "dsa", "eth", "vlan", "ipv4", "ipv6",
               "frag", "tcp", "udp", "icmp", "icmpv6", "gre", "erspan2", "erspan3", "vxlan",
               "vxlan-gpe", "geneve", "fou", "gue"]
(LY_NULL, LY_LOOP, LY_SLL, LY_SLL2, LY_DSA, LY_ETH, LY_VLAN, LY_IPV4, LY_IPV6, LY_FRAG,
 LY_TCP, LY_UDP, LY_ICMP, LY_ICMPV6, LY_GRE, LY_ERSPAN2, LY_ERSPAN3, LY_VXLAN, LY_GPE,
 LY_GENEVE, LY_FOU, LY_GUE) = range(1, 23)
LY_IPPROTO = 256          # + protocol number: "ipproto-N"
MAX_LAYERS = 64           # more than this (e.g. hundreds of VLAN tags): Python fallback


def layer_name(code: int) -> str:
    """Name of one layer code as the reference decoder writes it."""
    return f"ipproto-{code - LY_IPPROTO}" if code >= LY_IPPROTO else LAYER_NAMES[code]


# --- decoder states ---------------------------------------------------------------------
ST_DONE = 0
ST_ETHER = 1
ST_VLANS = 2
ST_IPV4 = 3
ST_IPV6 = 4
ST_IPPAY = 5
ST_GRE = 6
ST_ERSPAN = 7
ST_VXLAN = 8
ST_GPE = 9
ST_GENEVE = 10
ST_GUE = 11
ST_INNER_ETH = 12
ST_IPTUN = 13
ST_LINK = 14

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)   # FNV-1a 64 (digest.fnv1a64)
_FNV_PRIME = np.uint64(0x100000001B3)
_U64_ZERO = np.uint64(0)


@intrinsic
def _borrow(typingctx, arr):
    """``arr`` without its reference count: the same array with a null ``meminfo``.

    numba increments and decrements (atomically) the reference count of every array
    passed to a helper or aliased by one, several times per frame here; on a borrowed
    array those are no-ops. Only for arrays the caller keeps alive for the whole call
    (the kernel's own arguments)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ary = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=args[0])
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()

    return arr(arr), codegen


# the options of almost every TCP segment: NOP, NOP, timestamp (kind 8, length 10)
_NOP_NOP_TS = (C.TCPOPT_NOP << 24) | (C.TCPOPT_NOP << 16) | (C.TCPOPT_TIMESTAMP << 8) | 10


# The helpers below are plain @njit functions, not ``inline="always"``: LLVM inlines them
# into decode_kernel all the same (no slower), while numba-level inlining typed and lowered
# each body again at every call site (a cold compile of decode_kernel took 21 s of CPU
# instead of 12 s).
@njit(cache=True)
def _u16(f, off):
    return _be16(f, off)


@njit(cache=True)
def _u32(f, off):
    return _be32(f, off)


@njit(cache=True)
def _mac(f, off):
    return np.uint64((_u16(f, off) << 32) | _u32(f, off + 2))


@njit(cache=True)
def _ones_sum(f, base, lo, hi, start):
    """digest.ones_sum over f[base + lo : base + hi]: big-endian words, odd byte padded.

    Adds 32-bit words (two 16-bit words at once): the sum differs from the 16-bit one but
    is congruent to it modulo 0xffff and zero only when it is, so every value folded from
    it (:func:`_fold16`, which depends on nothing else) is the same."""
    s = np.int64(start)
    p = base + lo
    hi = base + hi
    while p + 3 < hi:
        s += _u32(f, p)
        p += 4
    if p + 1 < hi:
        s += _u16(f, p)
        p += 2
    if p < hi:
        s += np.int64(f[p]) << 8
    return s


@njit(cache=True)
def _fold16(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@njit(cache=True)
def _digest_or_zero(f, base, lo, hi):
    """digest.digest_or_zero: FNV-1a 64 of f[base + lo : base + hi], 0 for an empty range."""
    if hi <= lo:
        return _U64_ZERO
    h = _FNV_OFFSET
    for p in range(base + lo, base + hi):
        h = (h ^ np.uint64(f[p])) * _FNV_PRIME
    return h


@njit(cache=True)
def _set_addr(addr, row, i, f, off):
    for k in range(16):
        addr[row, i, k] = _byte(f, off + k)


@njit(cache=True)
def _set_addr_v4(addr, row, i, f, off):
    # IPv4-mapped IPv6 (::ffff:a.b.c.d), schema convention; the rest is already zero
    addr[row, i, 10] = 0xFF
    addr[row, i, 11] = 0xFF
    for k in range(4):
        addr[row, i, 12 + k] = _byte(f, off + k)


@njit(cache=True)
def _enter_tunnel(o, i, depth, tun_type, off):
    """reference enter_tunnel: outermost tunnel fills outer_ip_*/tun_*; ip_*/L4 reset."""
    if depth == 1:
        for k in range(IPCOPY_U8.shape[0]):
            o.u8[IPCOPY_U8[k, 1], i] = o.u8[IPCOPY_U8[k, 0], i]
        for k in range(IPCOPY_U16.shape[0]):
            o.u16[IPCOPY_U16[k, 1], i] = o.u16[IPCOPY_U16[k, 0], i]
        for k in range(IPCOPY_U32.shape[0]):
            o.u32[IPCOPY_U32[k, 1], i] = o.u32[IPCOPY_U32[k, 0], i]
        for k in range(IPCOPY_U64.shape[0]):
            o.u64[IPCOPY_U64[k, 1], i] = o.u64[IPCOPY_U64[k, 0], i]
        for k in range(IPCOPY_ADDR.shape[0]):
            for j in range(16):
                o.addr[IPCOPY_ADDR[k, 1], i, j] = o.addr[IPCOPY_ADDR[k, 0], i, j]
        if o.u8[K_L4_PROTO, i] == C.IPPROTO_UDP:
            o.u8[K_OUTER_L4_PROTO, i] = C.IPPROTO_UDP
            o.u16[K_OUTER_SPORT, i] = o.u16[K_SPORT, i]
            o.u16[K_OUTER_DPORT, i] = o.u16[K_DPORT, i]
            o.u16[K_OUTER_UDP_LEN, i] = o.u16[K_UDP_LEN, i]
            o.u16[K_OUTER_UDP_CSUM, i] = o.u16[K_L4_CSUM, i]
        o.u8[K_TUN_TYPE, i] = tun_type
        o.u16[K_TUN_OFFSET, i] = off
        o.u8[K_TUN_CSUM_OK, i] = 1
    for k in range(RESET_U8.shape[0]):
        o.u8[RESET_U8[k], i] = 0
    for k in range(RESET_U16.shape[0]):
        o.u16[RESET_U16[k], i] = 0
    for k in range(RESET_U32.shape[0]):
        o.u32[RESET_U32[k], i] = 0
    for k in range(RESET_U64.shape[0]):
        o.u64[RESET_U64[k], i] = 0
    for k in range(RESET_ADDR.shape[0]):
        for j in range(16):
            o.addr[RESET_ADDR[k], i, j] = 0
    for j in range(C.TCP_MAX_OPTLEN):
        o.opts[i, j] = 0
    o.i8[K_TCP_WSCALE, i] = -1


@njit(cache=True)
def _csum_state(f, base, cap, field, off, seglen, pseudo):
    """reference l4_csum_state: GOOD/BAD need the whole segment; PARTIAL = pseudo sum only."""
    pf = _fold16(pseudo + seglen)
    full = False
    if off + seglen <= cap:
        total = _fold16(_ones_sum(f, base, off, off + seglen, pseudo + seglen))
        if total == 0xFFFF:
            return S.CSUM_GOOD
        full = True
    if field == pf or field == ((~pf) & 0xFFFF):
        return S.CSUM_PARTIAL
    return S.CSUM_BAD if full else S.CSUM_UNKNOWN


@njit(cache=True)
def _tcp_options(b, base, lo, hi):
    """tcp_parse_options as the reference reads it: a malformed option ends parsing.

    Returns (mss, wscale, sack_perm, sack_blocks, has_ts, tsval, tsecr), absent = 0 / -1.
    """
    mss, wscale, sack_perm, sack_blocks, has_ts, tsval, tsecr = 0, -1, 0, 0, 0, 0, 0
    p = lo
    while p < hi:
        kind = b[base + p]
        if kind == C.TCPOPT_EOL:
            break
        if kind == C.TCPOPT_NOP:
            p += 1
            continue
        if p + 1 >= hi:
            break
        size = np.int64(b[base + p + 1])
        if size < 2 or p + size > hi:       # "silly options"
            break
        if kind == C.TCPOPT_MSS and size == 4:
            mss = _u16(b, base + p + 2)
        elif kind == C.TCPOPT_WSCALE and size == 3:
            wscale = min(np.int64(b[base + p + 2]), C.TCP_MAX_WSCALE)
        elif kind == C.TCPOPT_SACK_PERM and size == 2:
            sack_perm = 1
        elif kind == C.TCPOPT_SACK and size >= 10 and (size - 2) % 8 == 0:
            sack_blocks = (size - 2) // 8
        elif kind == C.TCPOPT_TIMESTAMP and size == 10:
            has_ts = 1
            tsval = _u32(b, base + p + 2)
            tsecr = _u32(b, base + p + 6)
        p += size
    return mss, wscale, sack_perm, sack_blocks, has_ts, tsval, tsecr


@njit(cache=True)
def _add_vlan(u8, u16, i, tpid, tci, outer, depth):
    """reference add_vlan: the first two tags of the outer Ethernet are recorded, and
    the first two inside the outermost tunnel's Ethernet (``depth == 1``).

    Like :func:`_enter_tunnel`, called with constants wrapped in ``np.int64``/``np.bool_``:
    a literal argument compiles one more specialisation per call site."""
    if outer:
        kd, kp0, kc0, kp1, kc1 = K_VLAN_DEPTH, K_VLAN_TPID0, K_VLAN_TCI0, K_VLAN_TPID1, \
            K_VLAN_TCI1
    elif depth == 1:
        kd, kp0, kc0, kp1, kc1 = K_INNER_VLAN_DEPTH, K_INNER_VLAN_TPID0, K_INNER_VLAN_TCI0, \
            K_INNER_VLAN_TPID1, K_INNER_VLAN_TCI1
    else:
        return
    d = np.int64(u8[kd, i])
    if d == 0:
        u16[kp0, i] = tpid
        u16[kc0, i] = tci
    elif d == 1:
        u16[kp1, i] = tpid
        u16[kc1, i] = tci
    u8[kd, i] = min(d + 1, 255)


@njit(cache=True)
def _hash_layers(layers, nl):
    h = _FNV_OFFSET
    for k in range(nl):
        h = (h ^ np.uint64(layers[k])) * _FNV_PRIME
    return (h ^ np.uint64(nl)) * _FNV_PRIME


@njit(cache=True)
def _clear_rows(u8, i8, u16, i16, u32, u64, addr, r8, ri8, r16, ri16, r32, r64, raddr,
                lo, hi):
    """The given rows of each matrix "absent" for records [lo, hi)."""
    for k in range(r8.shape[0]):
        u8[r8[k], lo:hi] = 0
    for k in range(ri8.shape[0]):
        i8[ri8[k], lo:hi] = -1 if ri8[k] == K_TCP_WSCALE else 0
    for k in range(r16.shape[0]):
        u16[r16[k], lo:hi] = 0
    for k in range(ri16.shape[0]):
        i16[ri16[k], lo:hi] = -1 if ri16[k] == K_DSA_PORT else 0
    for k in range(r32.shape[0]):
        u32[r32[k], lo:hi] = 0
    for k in range(r64.shape[0]):
        u64[r64[k], lo:hi] = 0
    for k in range(raddr.shape[0]):
        addr[raddr[k], lo:hi, :] = 0


@njit(cache=True)
def _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e):
    """First frame of the batch with a RARE_COLUMNS value (record ``i``, chunk end ``e``):
    clear those columns for every record so far and this chunk, repack the bitmaps of the
    chunks already done; returns True."""
    zero = np.int64(0)    # not a literal 0: that would compile a second specialisation
    _clear_rows(u8, i8, u16, i16, u32, u64, addr, RARE_U8, RARE_I8, RARE_U16, RARE_I16,
                RARE_U32, RARE_U64, RARE_ADDR, zero, e)
    done = i - i % CLEAR_CHUNK
    if done:
        _pack_bools(u8, bool_rows, bits, zero, done, np.bool_(True))
    return True


@njit(cache=True)
def _pack_bools(u8, rows, bits, lo, hi, rare):
    """Arrow bitmaps of the boolean columns (0/1 bytes in ``u8``) for records [lo, hi);
    ``lo`` is a multiple of 8. The rows of RARE_COLUMNS only when ``rare`` (until then
    the caller gives a batch constant arrays for them).

    Eight 0/1 bytes read as one little-endian word ``x`` pack into one byte as
    ``x * 0x0102040810204080 >> 56``: byte j's bit lands on bit 56 + j, with no carries
    (each partial product sets one bit, all at distinct places)."""
    whole = lo + (hi - lo) // 8 * 8
    for r in range(rows.shape[0]):
        row = rows[r]
        if not rare and BOOL_RARE[row]:
            continue
        src = u8[row]
        for base in range(lo, whole, 8):
            x = np.uint64(0)
            for b in range(8):
                x |= np.uint64(src[base + b]) << np.uint64(8 * b)
            x &= np.uint64(0x0101010101010101)
            bits[r, base >> 3] = (x * np.uint64(0x0102040810204080)) >> np.uint64(56)
        if whole < hi:
            v = 0
            for b in range(hi - whole):
                v |= (src[whole + b] & 1) << b
            bits[r, whole >> 3] = v


@njit(cache=True, nogil=True)
def decode_kernel(buf, offset, cap_len, wire_len, linktype, o, status_out, encap_depth,
                  encap_idx, port_tun, port_fou, dsa_opt, tab_key, tab_val, dict_seq,
                  dict_len, cap_out, bool_rows, bits):
    """Decode every record; returns (number of encap strings or -1 on dictionary overflow,
    whether RARE_COLUMNS were written: when not, they hold garbage, see RARE_COLUMNS).

    ``cap_out[i]`` is the captured length as the reference sees it: the bytes of the record
    actually present in ``buf``. ``bits[r]`` is the Arrow bitmap of the boolean column in
    ``u8`` row ``bool_rows[r]``, packed a chunk at a time while the chunk is in cache.

    ``encap_idx[i]`` is the index of record i's layer list in ``dict_seq``/``dict_len``
    (first-occurrence order, as ``pyarrow.dictionary_encode`` numbers strings), or -1 when
    the frame must be decoded by the reference (layer list overflow).

    The per-frame state machine is written inline in the record loop on purpose, and the
    arrays are :func:`_borrow`-ed: arrays passed across a function boundary are
    reference-counted (atomic operations) on every call, which cost more than the decoding
    itself.
    """
    n = offset.shape[0]
    nbuf = buf.shape[0]
    # bound once: reading a field of ``o`` inside the loop costs a refcount round trip
    u8, i8, u16, i16, u32, u64, addr, opts = o
    buf = _borrow(buf)
    u8, i8, u16, i16 = _borrow(u8), _borrow(i8), _borrow(u16), _borrow(i16)
    u32, u64, addr, opts = _borrow(u32), _borrow(u64), _borrow(addr), _borrow(opts)
    o = Out(u8, i8, u16, i16, u32, u64, addr, opts)
    layers = np.zeros(MAX_LAYERS + 2, dtype=np.uint16)
    tmask = tab_key.shape[0] - 1
    ndict = 0
    prev_layers = np.zeros(MAX_LAYERS + 2, dtype=np.uint16)
    prev_idx = -1
    prev_nl = -1
    # RARE_COLUMNS in use (cleared) from the first frame needing them; np.bool_, not a
    # literal: _pack_bools would compile once for False, once for True, once for bool
    rare = np.bool_(False)
    e = 0
    for i in range(n):
        if i % CLEAR_CHUNK == 0:
            if i:
                _pack_bools(u8, bool_rows, bits, i - CLEAR_CHUNK, i, rare)
            # every column "absent" (reference empty_row), a cache-sized chunk at a time:
            # -1 for dsa_port and tcp_wscale (port 0 and shift 0 are real), else 0
            e = min(i + CLEAR_CHUNK, n)
            _clear_rows(u8, i8, u16, i16, u32, u64, addr, COMMON_U8, COMMON_I8, COMMON_U16,
                        COMMON_I16, COMMON_U32, COMMON_U64, COMMON_ADDR, i, e)
            opts[i:e, :] = 0
            if rare:
                _clear_rows(u8, i8, u16, i16, u32, u64, addr, RARE_U8, RARE_I8, RARE_U16,
                            RARE_I16, RARE_U32, RARE_U64, RARE_ADDR, i, e)
        lo = offset[i]
        cap = np.int64(cap_len[i])
        cap_out[i] = min(cap, max(nbuf - lo, 0))
        if lo >= nbuf or lo < 0:
            cap = 0
            lo = 0
        elif lo + cap > nbuf:
            cap = nbuf - lo
        wire = max(np.int64(wire_len[i]), cap)
        lt = np.int64(linktype[i])
        # --- one frame: mirrors reference._FrameDecoder.run (see the module docstring) ---
        nl = 0
        depth = 0
        status = S.STATUS_OK
        st = ST_LINK
        off = 0
        ln = 0
        etype = 0
        outer = True
        dsa_kind = 0
        ipver = 0
        proto = 0
        pseudo = 0
        fragment = False
        nonfirst = False
        aux = 0
        while st != ST_DONE:
            if nl > MAX_LAYERS - 4:          # a state appends at most 3 layers
                nl = MAX_LAYERS + 1          # overflow: caller decodes this frame in Python
                break
            if st == ST_LINK:
                if lt == C.LINKTYPE_ETHERNET:
                    st, off, dsa_kind = ST_ETHER, 0, dsa_opt
                elif lt == C.LINKTYPE_DSA_TAG_BRCM:
                    st, off, dsa_kind = ST_ETHER, 0, C.DSA_BRCM
                elif lt == C.LINKTYPE_DSA_TAG_BRCM_PREPEND:
                    st, off, dsa_kind = ST_ETHER, 0, C.DSA_BRCM_PREPEND
                elif lt == C.LINKTYPE_DSA_TAG_DSA:
                    st, off, dsa_kind = ST_ETHER, 0, C.DSA_DSA
                elif lt == C.LINKTYPE_DSA_TAG_EDSA:
                    st, off, dsa_kind = ST_ETHER, 0, C.DSA_EDSA
                elif (lt == C.LINKTYPE_RAW or lt == C.LINKTYPE_RAW_OPENBSD
                      or lt == C.LINKTYPE_RAW_BSDOS):
                    if cap < 1:
                        status = S.STATUS_TRUNCATED
                        break
                    v = buf[lo + 0] >> 4
                    if v == 4:
                        st, off = ST_IPV4, 0
                    elif v == 6:
                        st, off = ST_IPV6, 0
                    else:
                        status = S.STATUS_BAD_IP_HEADER
                        break
                elif lt == C.LINKTYPE_IPV4:
                    st, off = ST_IPV4, 0
                elif lt == C.LINKTYPE_IPV6:
                    st, off = ST_IPV6, 0
                elif lt == C.LINKTYPE_NULL or lt == C.LINKTYPE_LOOP:
                    # BSD loopback: AF family, host-endian (NULL) or big-endian (LOOP)
                    layers[nl] = LY_NULL if lt == C.LINKTYPE_NULL else LY_LOOP
                    nl += 1
                    if cap < 4:
                        status = S.STATUS_TRUNCATED
                        break
                    be = _u32(buf, lo + 0)
                    af = be
                    if lt == C.LINKTYPE_NULL:
                        le = (np.int64(buf[lo + 0]) | (np.int64(buf[lo + 1]) << 8) | (np.int64(buf[lo + 2]) << 16)
                              | (np.int64(buf[lo + 3]) << 24))
                        af = le if le <= 0xFFFF else be
                    if af == C.NULL_AF_INET:
                        st, off = ST_IPV4, 4
                    elif af == 24 or af == 28 or af == 30:     # C.NULL_AF_INET6
                        st, off = ST_IPV6, 4
                    else:
                        status = S.STATUS_NOT_IP
                        break
                elif lt == C.LINKTYPE_LINUX_SLL:
                    layers[nl] = LY_SLL
                    nl += 1
                    if cap < C.SLL_HLEN:
                        status = S.STATUS_TRUNCATED
                        break
                    if _u16(buf, lo + 2) == C.ARPHRD_ETHER and _u16(buf, lo + 4) == 6:
                        u64[K_ETH_SRC, i] = _mac(buf, lo + 6)
                    etype = _u16(buf, lo + 14)
                    u16[K_ETH_TYPE, i] = etype
                    st, off, outer = ST_VLANS, C.SLL_HLEN, True
                elif lt == C.LINKTYPE_LINUX_SLL2:
                    layers[nl] = LY_SLL2
                    nl += 1
                    if cap < C.SLL2_HLEN:
                        status = S.STATUS_TRUNCATED
                        break
                    if _u16(buf, lo + 8) == C.ARPHRD_ETHER and buf[lo + 11] == 6:
                        u64[K_ETH_SRC, i] = _mac(buf, lo + 12)
                    etype = _u16(buf, lo + 0)
                    u16[K_ETH_TYPE, i] = etype
                    st, off, outer = ST_VLANS, C.SLL2_HLEN, True
                else:
                    status = S.STATUS_UNSUPPORTED_LINKTYPE
                    break

            elif st == ST_ETHER:
                # reference ether(): optional DSA tag (net/dsa/tag_brcm.c, tag_dsa.c), VLANs
                if dsa_kind != 0 and not rare:
                    rare = _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e)
                if dsa_kind == C.DSA_BRCM_PREPEND:
                    layers[nl] = LY_DSA
                    nl += 1
                    if off + C.BRCM_TAG_LEN > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    # brcm_tag_rcv_ll: source port in byte 3; a non-zero opcode or a reserved
                    # reason code is dropped
                    u8[K_DSA_TAG, i] = C.DSA_BRCM_PREPEND
                    i16[K_DSA_PORT, i] = buf[lo + off + 3] & C.BRCM_EG_PID_MASK
                    if buf[lo + off] >> C.BRCM_OPCODE_SHIFT or buf[lo + off + 2] & C.BRCM_EG_RC_RSVD:
                        status = S.STATUS_BAD_L2_HEADER
                        break
                    off += C.BRCM_TAG_LEN
                layers[nl] = LY_ETH
                nl += 1
                if off + 12 > cap:
                    status = S.STATUS_TRUNCATED
                    break
                u64[K_ETH_DST, i] = _mac(buf, lo + off)
                u64[K_ETH_SRC, i] = _mac(buf, lo + off + 6)
                p = off + 12
                synth = -1
                if dsa_kind == C.DSA_BRCM or dsa_kind == C.DSA_DSA or dsa_kind == C.DSA_EDSA:
                    layers[nl] = LY_DSA
                    nl += 1
                    if dsa_kind == C.DSA_BRCM:
                        if p + C.BRCM_TAG_LEN > cap:
                            status = S.STATUS_TRUNCATED
                            break
                        u8[K_DSA_TAG, i] = C.DSA_BRCM
                        i16[K_DSA_PORT, i] = buf[lo + p + 3] & C.BRCM_EG_PID_MASK
                        if buf[lo + p] >> C.BRCM_OPCODE_SHIFT or buf[lo + p + 2] & C.BRCM_EG_RC_RSVD:
                            status = S.STATUS_BAD_L2_HEADER
                            break
                        p += C.BRCM_TAG_LEN
                    else:
                        hl = C.DSA_HLEN if dsa_kind == C.DSA_DSA else C.EDSA_HLEN
                        if p + hl > cap:
                            status = S.STATUS_TRUNCATED
                            break
                        u8[K_DSA_TAG, i] = dsa_kind
                        t = p
                        if dsa_kind == C.DSA_EDSA:
                            if _u16(buf, lo + p) != C.ETH_P_EDSA:      # tag_dsa.c edsa_rcv
                                status = S.STATUS_BAD_L2_HEADER
                                break
                            t = p + 4
                        # tag_dsa.c dsa_rcv_ll: port in byte 1; only TO_CPU/FORWARD accepted
                        b0, b1, b2, b3 = buf[lo + t], buf[lo + t + 1], buf[lo + t + 2], buf[lo + t + 3]
                        i16[K_DSA_PORT, i] = (b1 >> 3) & 0x1F
                        cmd = b0 >> 6
                        if cmd != C.DSA_CMD_TO_CPU and cmd != C.DSA_CMD_FORWARD:
                            status = S.STATUS_BAD_L2_HEADER
                            break
                        if b0 & C.DSA_VLAN_TAG:
                            hi = np.int64(b2) & 0xEF
                            if b1 & C.DSA_CFI_BIT:     # CFI moves back to its 802.1Q place
                                hi |= 0x10
                            synth = (hi << 8) | np.int64(b3)
                        p += hl
                if p + 2 > cap:
                    status = S.STATUS_TRUNCATED
                    break
                etype = _u16(buf, lo + p)
                if synth >= 0:
                    # dsa_rcv_ll: a tagged DSA frame becomes an 802.1Q-tagged frame
                    u16[K_ETH_TYPE, i] = C.ETH_P_8021Q
                    layers[nl] = LY_VLAN
                    nl += 1
                    _add_vlan(u8, u16, i, np.int64(C.ETH_P_8021Q), synth, np.bool_(True),
                              np.int64(depth))
                else:
                    u16[K_ETH_TYPE, i] = etype
                st, off, outer = ST_VLANS, p + 2, True

            elif st == ST_INNER_ETH:
                # Ethernet inside a tunnel (TEB, ERSPAN, VXLAN, Geneve, GPE)
                layers[nl] = LY_ETH
                nl += 1
                if off + C.ETH_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                etype = _u16(buf, lo + off + 12)
                if depth == 1:
                    u64[K_INNER_ETH_DST, i] = _mac(buf, lo + off)
                    u64[K_INNER_ETH_SRC, i] = _mac(buf, lo + off + 6)
                    u16[K_INNER_ETH_TYPE, i] = etype
                st, off, outer = ST_VLANS, off + C.ETH_HLEN, False

            elif st == ST_VLANS:
                # 802.1Q / 802.1ad / 0x9100 tags, then IPv4 / IPv6
                while etype == C.ETH_P_8021Q or etype == C.ETH_P_8021AD or etype == C.ETH_P_QINQ1:
                    if off + 4 > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    if nl > MAX_LAYERS - 2:
                        break
                    if not rare:
                        rare = _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e)
                    layers[nl] = LY_VLAN
                    nl += 1
                    _add_vlan(u8, u16, i, np.int64(etype), _u16(buf, lo + off),
                              np.bool_(outer), np.int64(depth))
                    etype = _u16(buf, lo + off + 2)
                    off += 4
                if status != S.STATUS_OK:
                    break
                if etype == C.ETH_P_IP:
                    st = ST_IPV4
                elif etype == C.ETH_P_IPV6:
                    st = ST_IPV6
                elif nl > MAX_LAYERS - 2:
                    continue                      # overflow, handled at the loop top
                else:
                    status = S.STATUS_NOT_IP
                    break

            elif st == ST_IPV4:
                # IPv4 header (RFC 791)
                layers[nl] = LY_IPV4
                nl += 1
                if off + 20 > cap:
                    status = S.STATUS_TRUNCATED
                    break
                v = _byte(buf, lo + off) >> 4
                u8[K_IP_VERSION, i] = v
                if off > 0xFFFF:                 # reference where(): offsets are uint16
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                u16[K_IP_OFFSET, i] = off
                if v != 4:
                    status = S.STATUS_BAD_IP_HEADER
                    break
                ihl = (_byte(buf, lo + off) & 0x0F) * 4
                u16[K_IP_HDR_LEN, i] = ihl
                tot_len = _u16(buf, lo + off + 2)
                frag = _u16(buf, lo + off + 6)
                u8[K_IP_TOS, i] = _byte(buf, lo + off + 1)
                u32[K_IP_TOT_LEN, i] = tot_len
                u16[K_IP_ID, i] = _u16(buf, lo + off + 4)
                u8[K_IP_RF, i] = 1 if frag & C.IP_RF else 0
                u8[K_IP_DF, i] = 1 if frag & C.IP_DF else 0
                u8[K_IP_MF, i] = 1 if frag & C.IP_MF else 0
                u16[K_IP_FRAG_OFF, i] = frag & C.IP_OFFMASK
                u8[K_IP_TTL, i] = _byte(buf, lo + off + 8)
                proto = _byte(buf, lo + off + 9)
                u8[K_IP_PROTO, i] = proto
                _set_addr_v4(addr, np.int64(K_IP_SRC), i, buf, lo + off + 12)
                _set_addr_v4(addr, np.int64(K_IP_DST), i, buf, lo + off + 16)
                if ihl < 20:
                    status = S.STATUS_BAD_IP_HEADER
                    break
                length = tot_len
                if tot_len == 0 and wire - off > 0xFFFF:
                    length = wire - off          # BIG TCP (include/linux/ip.h iph_totlen)
                if length < ihl:
                    status = S.STATUS_BAD_IP_HEADER
                    break
                if off + length > wire:
                    status = S.STATUS_BAD_LENGTH
                    break
                if off + ihl > cap:              # options
                    status = S.STATUS_TRUNCATED
                    break
                u16[K_IP_EXT_LEN, i] = ihl - 20
                # the addresses' sum serves the header checksum and the pseudo-header;
                # 32-bit words, as in _ones_sum (straight-line code for the usual header)
                pseudo = _u32(buf, lo + off + 12) + _u32(buf, lo + off + 16)
                hsum = (_u32(buf, lo + off) + _u32(buf, lo + off + 4)
                        + _u32(buf, lo + off + 8) + pseudo)
                if ihl > 20:
                    u64[K_IP_EXT_DIGEST, i] = _digest_or_zero(buf, lo, off + 20, off + ihl)
                    hsum = _ones_sum(buf, lo, off + 20, off + ihl, hsum)
                # a header that checksums to 0xffff (including its checksum) is valid
                u8[K_IP_CSUM_OK, i] = 1 if _fold16(hsum) == 0xFFFF else 0
                pseudo += proto
                nonfirst = (frag & C.IP_OFFMASK) != 0
                fragment = nonfirst or (frag & C.IP_MF) != 0
                st, ipver, off, ln = ST_IPPAY, 4, off + ihl, length - ihl

            elif st == ST_IPV6:
                # IPv6 header (RFC 8200) and its extension-header chain
                layers[nl] = LY_IPV6
                nl += 1
                if off + C.IP6_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                w0 = _u32(buf, lo + off)
                u8[K_IP_VERSION, i] = w0 >> 28
                if off > 0xFFFF:                 # reference where()
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                u16[K_IP_OFFSET, i] = off
                if w0 >> 28 != 6:
                    status = S.STATUS_BAD_IP_HEADER
                    break
                plen = _u16(buf, lo + off + 4)
                nh = _byte(buf, lo + off + 6)
                u8[K_IP_TOS, i] = (w0 >> 20) & 0xFF
                u32[K_IP_FLOW_LABEL, i] = w0 & 0xFFFFF
                u32[K_IP_TOT_LEN, i] = C.IP6_HLEN + plen
                u8[K_IP_TTL, i] = _byte(buf, lo + off + 7)
                _set_addr(addr, np.int64(K_IP_SRC), i, buf, lo + off + 8)
                _set_addr(addr, np.int64(K_IP_DST), i, buf, lo + off + 24)
                u8[K_IP_CSUM_OK, i] = 1
                u16[K_IP_HDR_LEN, i] = C.IP6_HLEN
                u8[K_IP_PROTO, i] = nh
                length = plen
                if plen == 0 and wire - off - C.IP6_HLEN > 0xFFFF:
                    length = wire - off - C.IP6_HLEN    # BIG TCP (ipv6_payload_len)
                if off + C.IP6_HLEN + length > wire:
                    status = S.STATUS_BAD_LENGTH
                    break
                end = off + C.IP6_HLEN + length
                cur = off + C.IP6_HLEN
                mask = 0
                final_dst = off + 24
                nonfirst = False
                while (nh == C.IPPROTO_HOPOPTS or nh == C.IPPROTO_ROUTING
                       or nh == C.IPPROTO_DSTOPTS or nh == C.IPPROTO_FRAGMENT):
                    if nh == C.IPPROTO_FRAGMENT:
                        if cur + C.IP6_FRAG_HLEN > end:
                            status = S.STATUS_BAD_IP_HEADER
                            break
                        if cur + C.IP6_FRAG_HLEN > cap:
                            status = S.STATUS_TRUNCATED
                            break
                        mask |= C.IP6_EXT_FRAGMENT
                        fo = _u16(buf, lo + cur + 2)
                        u16[K_IP_FRAG_OFF, i] = fo >> 3
                        u8[K_IP_MF, i] = fo & 1
                        u16[K_IP_ID, i] = 0
                        nh = np.int64(buf[lo + cur])
                        cur += C.IP6_FRAG_HLEN
                        if fo >> 3:
                            nonfirst = True      # the rest of the chain is in the first fragment
                            break
                        continue
                    if cur + 2 > end:
                        status = S.STATUS_BAD_IP_HEADER
                        break
                    if cur + 2 > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    hl = (np.int64(buf[lo + cur + 1]) + 1) * 8
                    if cur + hl > end or cur + hl - off > 0xFFFF:   # ip_hdr_len is uint16
                        status = S.STATUS_BAD_IP_HEADER
                        break
                    if cur + hl > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    if nh == C.IPPROTO_HOPOPTS:
                        mask |= C.IP6_EXT_HOPOPTS
                    elif nh == C.IPPROTO_DSTOPTS:
                        mask |= C.IP6_EXT_DSTOPTS
                    else:
                        mask |= C.IP6_EXT_ROUTING
                        # RFC 8200 8.1: the pseudo-header uses the final destination
                        rtype, segleft = buf[lo + cur + 2], buf[lo + cur + 3]
                        naddr = (hl - 8) // 16
                        if segleft != 0 and naddr != 0:
                            if rtype == C.IPV6_SRCRT_TYPE_4:
                                final_dst = cur + 8
                            elif rtype == 0 or rtype == 2:
                                final_dst = cur + 8 + 16 * (naddr - 1)
                    nh = np.int64(buf[lo + cur])
                    cur += hl
                if status == S.STATUS_OK and not nonfirst and (nh == C.IPPROTO_AH or nh == 135 or nh == 139
                                              or nh == 140):    # C.IP6_EXT_STOP_OTHER
                    mask |= C.IP6_EXT_OTHER
                # fields of the chain walked so far, also when the walk stopped early
                u8[K_IP_PROTO, i] = nh
                u8[K_IP_EXT_MASK, i] = mask
                u16[K_IP_EXT_LEN, i] = cur - off - C.IP6_HLEN
                u16[K_IP_HDR_LEN, i] = cur - off
                u64[K_IP_EXT_DIGEST, i] = _digest_or_zero(buf, lo, off + C.IP6_HLEN, cur)
                if status != S.STATUS_OK:
                    break
                pseudo = _ones_sum(buf, lo, off + 8, off + 24, nh)
                pseudo = _ones_sum(buf, lo, final_dst, final_dst + 16, pseudo)
                fragment = (mask & C.IP6_EXT_FRAGMENT) != 0
                st, ipver, proto, off, ln = ST_IPPAY, 6, nh, cur, end - cur

            elif st == ST_IPPAY:
                # reference ip_payload: dispatch on the IP protocol
                u8[K_L4_PROTO, i] = proto
                is_tcp = proto == C.IPPROTO_TCP
                is_udp = proto == C.IPPROTO_UDP
                if fragment:
                    layers[nl] = LY_FRAG
                    nl += 1
                    if nonfirst:
                        u16[K_L4_OFFSET, i] = 0
                        u32[K_PAYLOAD_LEN, i] = ln
                        break
                verify = not fragment
                if is_tcp:
                    # TCP header (RFC 9293 3.1) and options (tcp_parse_options)
                    layers[nl] = LY_TCP
                    nl += 1
                    u8[K_L4_PROTO, i] = C.IPPROTO_TCP
                    if off > 0xFFFF:             # reference where()
                        status = S.STATUS_UNSUPPORTED_ENCAP
                        break
                    u16[K_L4_OFFSET, i] = off
                    if ln < 20:      # no room for a TCP header in the IP payload: malformed
                        status = S.STATUS_BAD_L4_HEADER
                        break
                    if off + 20 > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    u16[K_SPORT, i] = _u16(buf, lo + off)
                    u16[K_DPORT, i] = _u16(buf, lo + off + 2)
                    u32[K_TCP_SEQ, i] = _u32(buf, lo + off + 4)
                    u32[K_TCP_ACK, i] = _u32(buf, lo + off + 8)
                    doff = _byte(buf, lo + off + 12) >> 4
                    u8[K_TCP_DOFF, i] = doff
                    # AE is the low bit of the reserved nibble (kernel TCP_FLAG_AE)
                    u16[K_TCP_FLAGS, i] = _be16(buf, lo + off + 12) & 0x1FF
                    u16[K_TCP_WINDOW, i] = _u16(buf, lo + off + 14)
                    field = _u16(buf, lo + off + 16)
                    u16[K_L4_CSUM, i] = field
                    u16[K_TCP_URG_PTR, i] = _u16(buf, lo + off + 18)
                    if doff < 5:
                        status = S.STATUS_BAD_L4_HEADER
                        break
                    hl = doff * 4
                    u8[K_TCP_OPT_LEN, i] = hl - 20
                    if hl > ln:      # the header does not fit in the IP payload: malformed
                        status = S.STATUS_BAD_L4_HEADER
                        break
                    if off + hl > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    for k in range(hl - 20):
                        opts[i, k] = _byte(buf, lo + off + 20 + k)
                    q = lo + off + 20
                    if hl == 32 and _be32(buf, q) == _NOP_NOP_TS:
                        # NOP NOP TS, the options of almost every segment: what
                        # _tcp_options finds, the other option columns stay "absent"
                        u8[K_TCP_HAS_TS, i] = 1
                        u32[K_TCP_TSVAL, i] = _u32(buf, q + 4)
                        u32[K_TCP_TSECR, i] = _u32(buf, q + 8)
                    elif hl > 20:
                        mss, wsc, sp, sb, hts, tsv, tse = _tcp_options(buf, lo, off + 20, off + hl)
                        u16[K_TCP_MSS, i] = mss
                        i8[K_TCP_WSCALE, i] = wsc
                        u8[K_TCP_SACK_PERM, i] = sp
                        u8[K_TCP_SACK_BLOCKS, i] = sb
                        u8[K_TCP_HAS_TS, i] = hts
                        u32[K_TCP_TSVAL, i] = tsv
                        u32[K_TCP_TSECR, i] = tse
                    u32[K_PAYLOAD_LEN, i] = ln - hl
                    if verify:
                        u8[K_L4_CSUM_STATE, i] = _csum_state(
                            buf, lo, cap, np.int64(field), np.int64(off), np.int64(ln),
                            np.int64(pseudo))
                    break
                elif is_udp:
                    # UDP header (RFC 768); a UDP tunnel port continues into the tunnel
                    layers[nl] = LY_UDP
                    nl += 1
                    u8[K_L4_PROTO, i] = C.IPPROTO_UDP
                    if off > 0xFFFF:             # reference where()
                        status = S.STATUS_UNSUPPORTED_ENCAP
                        break
                    u16[K_L4_OFFSET, i] = off
                    if ln < 8:       # no room for a UDP header in the IP payload: malformed
                        status = S.STATUS_BAD_L4_HEADER
                        break
                    if off + 8 > cap:
                        status = S.STATUS_TRUNCATED
                        break
                    dport = _u16(buf, lo + off + 2)
                    ulen = _u16(buf, lo + off + 4)
                    field = _u16(buf, lo + off + 6)
                    u16[K_SPORT, i] = _u16(buf, lo + off)
                    u16[K_DPORT, i] = dport
                    u16[K_UDP_LEN, i] = ulen
                    u16[K_L4_CSUM, i] = field
                    if fragment:
                        # the UDP length covers the reassembled datagram
                        u32[K_PAYLOAD_LEN, i] = ln - 8
                        break
                    # __udp4_lib_rcv: ulen > IP payload is short (dropped); smaller trims
                    if ulen < 8 or ulen > ln:
                        status = S.STATUS_BAD_L4_HEADER
                        break
                    u32[K_PAYLOAD_LEN, i] = ulen - 8
                    if field == 0:
                        u8[K_L4_CSUM_STATE, i] = S.CSUM_ZERO
                    else:
                        u8[K_L4_CSUM_STATE, i] = _csum_state(
                            buf, lo, cap, np.int64(field), np.int64(off), np.int64(ulen),
                            np.int64(pseudo))
                    tt = port_tun[dport]
                    if tt == C.TUN_NONE:
                        break
                    if depth >= C.MAX_ENCAP_DEPTH:
                        status = S.STATUS_ENCAP_TOO_DEEP
                        break
                    if off + 8 > 0xFFFF:         # reference enter_tunnel -> where()
                        status = S.STATUS_UNSUPPORTED_ENCAP
                        break
                    if not rare:
                        rare = _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e)
                    depth += 1
                    _enter_tunnel(o, i, depth, np.int64(tt), off + 8)
                    inner, inner_len = off + 8, ulen - 8
                    if tt == C.TUN_VXLAN:
                        st, off = ST_VXLAN, inner
                    elif tt == C.TUN_VXLAN_GPE:
                        st, off = ST_GPE, inner
                    elif tt == C.TUN_GENEVE:
                        st, off = ST_GENEVE, inner
                    elif tt == C.TUN_FOU:
                        layers[nl] = LY_FOU
                        nl += 1
                        if depth == 1:
                            u16[K_TUN_PROTO, i] = port_fou[dport]
                        st, proto, off, ln = ST_IPTUN, np.int64(port_fou[dport]), inner, inner_len
                    else:
                        st, off, ln = ST_GUE, inner, inner_len
                    continue
                if fragment:
                    pass                  # first fragment of another protocol: other_l4 below
                elif proto == C.IPPROTO_GRE or proto == C.IPPROTO_IPIP or proto == C.IPPROTO_IPV6:
                    # reference carrier(): the tunnel's protocol seen as L4, then the tunnel
                    if off > 0xFFFF:             # reference where()
                        status = S.STATUS_UNSUPPORTED_ENCAP
                        break
                    u16[K_L4_OFFSET, i] = off
                    u32[K_PAYLOAD_LEN, i] = ln
                    if depth >= C.MAX_ENCAP_DEPTH:
                        status = S.STATUS_ENCAP_TOO_DEEP
                        break
                    if not rare:
                        rare = _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e)
                    depth += 1
                    if proto == C.IPPROTO_GRE:
                        _enter_tunnel(o, i, depth, np.int64(C.TUN_GRE), np.int64(off))
                        st = ST_GRE
                    elif proto == C.IPPROTO_IPIP:
                        _enter_tunnel(o, i, depth, C.TUN_IPIP if ipver == 4 else C.TUN_IP4IP6,
                                      np.int64(off))
                        st = ST_IPV4
                    else:
                        _enter_tunnel(o, i, depth, C.TUN_SIT if ipver == 4 else C.TUN_IP6IP6,
                                      np.int64(off))
                        st = ST_IPV6
                    continue
                # other_l4: no header decoded, payload_len is the IP payload
                if proto == C.IPPROTO_ICMP:
                    layers[nl] = LY_ICMP
                elif proto == C.IPPROTO_ICMPV6:
                    layers[nl] = LY_ICMPV6
                else:
                    layers[nl] = LY_IPPROTO + proto
                nl += 1
                u8[K_L4_PROTO, i] = proto
                if off > 0xFFFF:                 # reference where()
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                u16[K_L4_OFFSET, i] = off
                u32[K_PAYLOAD_LEN, i] = ln
                break

            elif st == ST_IPTUN:
                # reference ip_in_tunnel: IP protocol carried directly by FOU/GUE
                if proto == C.IPPROTO_IPIP:
                    st = ST_IPV4
                elif proto == C.IPPROTO_IPV6:
                    st = ST_IPV6
                elif proto == C.IPPROTO_GRE:
                    if depth >= C.MAX_ENCAP_DEPTH:
                        status = S.STATUS_ENCAP_TOO_DEEP
                        break
                    if off > 0xFFFF:             # reference enter_tunnel -> where()
                        status = S.STATUS_UNSUPPORTED_ENCAP
                        break
                    if not rare:
                        rare = _rare_on(u8, i8, u16, i16, u32, u64, addr, bool_rows, bits, i, e)
                    depth += 1
                    _enter_tunnel(o, i, depth, np.int64(C.TUN_GRE), np.int64(off))
                    st = ST_GRE
                else:
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break

            elif st == ST_GRE:
                # GRE header (RFC 2784/2890; gre_parse_header)
                layers[nl] = LY_GRE
                nl += 1
                if off + C.GRE_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                flags = _u16(buf, lo + off)
                gproto = _u16(buf, lo + off + 2)
                if depth == 1:
                    u32[K_TUN_FLAGS, i] = flags
                    u16[K_TUN_PROTO, i] = gproto
                # gre_parse_header: version != 0 (PPTP) and routing are refused
                if flags & (C.GRE_VERSION | C.GRE_ROUTING):
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                hl = C.GRE_HLEN
                if flags & C.GRE_CSUM:
                    hl += 4
                if flags & C.GRE_KEY:
                    hl += 4
                if flags & C.GRE_SEQ:
                    hl += 4
                if off + hl > cap:
                    status = S.STATUS_TRUNCATED
                    break
                p = off + C.GRE_HLEN
                if flags & C.GRE_CSUM:
                    if off + ln <= cap and depth == 1:   # verifiable with the whole packet only
                        gsum = _fold16(_ones_sum(buf, lo, np.int64(off), off + ln, np.int64(0)))
                        ok = gsum == 0xFFFF
                        u8[K_TUN_CSUM_OK, i] = 1 if ok else 0
                    p += 4
                if flags & C.GRE_KEY:
                    if depth == 1:
                        u32[K_TUN_KEY, i] = _u32(buf, lo + p)
                    p += 4
                if flags & C.GRE_SEQ:
                    if depth == 1:
                        u32[K_TUN_SEQ, i] = _u32(buf, lo + p)
                    p += 4
                if gproto == C.ETH_P_IP:
                    st, off = ST_IPV4, p
                elif gproto == C.ETH_P_IPV6:
                    st, off = ST_IPV6, p
                elif gproto == C.ETH_P_TEB:
                    if depth == 1:
                        u8[K_TUN_TYPE, i] = C.TUN_GRE_TEB
                    st, off = ST_INNER_ETH, p
                elif gproto == C.ETH_P_ERSPAN:
                    if depth == 1:
                        u8[K_TUN_TYPE, i] = C.TUN_ERSPAN2
                    st, off, aux = ST_ERSPAN, p, C.ERSPAN_V1
                elif gproto == C.ETH_P_ERSPAN2:
                    if depth == 1:
                        u8[K_TUN_TYPE, i] = C.TUN_ERSPAN3
                    st, off, aux = ST_ERSPAN, p, C.ERSPAN_V2
                else:
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break

            elif st == ST_ERSPAN:
                # ERSPAN type II (ver 1) / III (ver 2) header (include/net/erspan.h)
                layers[nl] = LY_ERSPAN2 if aux == C.ERSPAN_V1 else LY_ERSPAN3
                nl += 1
                hl = C.ERSPAN2_HLEN if aux == C.ERSPAN_V1 else C.ERSPAN3_HLEN
                if off + hl > cap:
                    status = S.STATUS_TRUNCATED
                    break
                ver = buf[lo + off] >> 4
                if depth == 1:
                    u8[K_ERSPAN_VER, i] = ver
                    u16[K_ERSPAN_SESSION, i] = _u16(buf, lo + off + 2) & C.ERSPAN_SESSION_MASK
                if ver != aux:
                    status = S.STATUS_BAD_TUNNEL_HEADER
                    break
                if aux == C.ERSPAN_V2 and buf[lo + off + 11] & 0x01:     # O: platform subheader
                    hl += C.ERSPAN3_PLATFORM_LEN
                    if off + hl > cap:
                        status = S.STATUS_TRUNCATED
                        break
                st, off = ST_INNER_ETH, off + hl

            elif st == ST_VXLAN or st == ST_GPE:
                layers[nl] = LY_VXLAN if st == ST_VXLAN else LY_GPE
                nl += 1
                if off + C.VXLAN_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                w0 = _u32(buf, lo + off)
                if depth == 1:
                    u32[K_TUN_FLAGS, i] = w0
                    u32[K_TUN_KEY, i] = _u32(buf, lo + off + 4)
                if st == ST_VXLAN:
                    # RFC 7348; vxlan_rcv: no valid VNI -> dropped
                    if not w0 & C.VXLAN_FLAG_I:
                        status = S.STATUS_BAD_TUNNEL_HEADER
                        break
                    st, off = ST_INNER_ETH, off + C.VXLAN_HLEN
                    continue
                # VXLAN-GPE: vxlan_parse_gpe_proto
                np_ = w0 & 0xFF
                if depth == 1:
                    u16[K_TUN_PROTO, i] = np_
                b0 = buf[lo + off]
                if b0 & C.GPE_VER_MASK or not b0 & C.GPE_FLAG_P:
                    status = S.STATUS_BAD_TUNNEL_HEADER
                    break
                if b0 & C.GPE_FLAG_O:           # vxlan_parse_gpe_proto: OAM is dropped
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                p = off + C.VXLAN_HLEN
                if np_ == C.GPE_NP_IPV4:
                    st, off = ST_IPV4, p
                elif np_ == C.GPE_NP_IPV6:
                    st, off = ST_IPV6, p
                elif np_ == C.GPE_NP_ETHERNET:
                    st, off = ST_INNER_ETH, p
                else:
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break

            elif st == ST_GENEVE:
                # Geneve header (RFC 8926 3.4) with its options (digested)
                layers[nl] = LY_GENEVE
                nl += 1
                if off + C.GENEVE_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                opt_len = np.int64(buf[lo + off] & 0x3F) * 4
                gproto = _u16(buf, lo + off + 2)
                if depth == 1:
                    u32[K_TUN_FLAGS, i] = _u32(buf, lo + off)
                    u32[K_TUN_KEY, i] = _u32(buf, lo + off + 4)
                    u16[K_TUN_PROTO, i] = gproto
                    u16[K_TUN_OPT_LEN, i] = opt_len
                if buf[lo + off] >> 6 != 0:            # geneve_udp_encap_recv: version must be 0
                    status = S.STATUS_BAD_TUNNEL_HEADER
                    break
                hl = C.GENEVE_HLEN + opt_len
                if off + hl > cap:
                    status = S.STATUS_TRUNCATED
                    break
                if depth == 1:
                    u64[K_TUN_OPT_DIGEST, i] = _digest_or_zero(buf, lo, off + C.GENEVE_HLEN, off + hl)
                p = off + hl
                if gproto == C.ETH_P_TEB:
                    st, off = ST_INNER_ETH, p
                elif gproto == C.ETH_P_IP:
                    st, off = ST_IPV4, p
                elif gproto == C.ETH_P_IPV6:
                    st, off = ST_IPV6, p
                else:
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break

            elif st == ST_GUE:
                # GUE (fou.c gue_udp_recv): version 0 header, or version 1 = direct IP
                layers[nl] = LY_GUE
                nl += 1
                if off + C.GUE_HLEN > cap:
                    status = S.STATUS_TRUNCATED
                    break
                b0 = np.int64(buf[lo + off])
                if depth == 1:
                    u32[K_TUN_FLAGS, i] = _u32(buf, lo + off)
                ver = b0 >> 6
                if ver == 1:
                    nib = b0 >> 4
                    if nib == 4:
                        if depth == 1:
                            u16[K_TUN_PROTO, i] = C.IPPROTO_IPIP
                        st = ST_IPV4
                    elif nib == 6:
                        if depth == 1:
                            u16[K_TUN_PROTO, i] = C.IPPROTO_IPV6
                        st = ST_IPV6
                    else:
                        status = S.STATUS_BAD_TUNNEL_HEADER
                        break
                    continue
                if ver != 0:
                    status = S.STATUS_BAD_TUNNEL_HEADER
                    break
                gproto = np.int64(buf[lo + off + 1])
                opt = (b0 & C.GUE_HLEN_MASK) * 4
                if depth == 1:
                    u16[K_TUN_PROTO, i] = gproto
                    u16[K_TUN_OPT_LEN, i] = opt
                hl = C.GUE_HLEN + opt
                if hl > ln:                     # optional fields longer than the UDP payload
                    status = S.STATUS_BAD_TUNNEL_HEADER
                    break
                if off + hl > cap:
                    status = S.STATUS_TRUNCATED
                    break
                if depth == 1:
                    u64[K_TUN_OPT_DIGEST, i] = _digest_or_zero(buf, lo, off + C.GUE_HLEN, off + hl)
                if b0 & C.GUE_FLAG_C:           # control message: carries no packet
                    status = S.STATUS_UNSUPPORTED_ENCAP
                    break
                st, proto, off, ln = ST_IPTUN, gproto, off + hl, ln - hl
        status_out[i] = status
        encap_depth[i] = depth
        if nl > MAX_LAYERS:
            encap_idx[i] = -1
            continue
        if nl == prev_nl:               # most frames repeat the previous frame's layers
            same = True
            for k in range(nl):
                if layers[k] != prev_layers[k]:
                    same = False
                    break
            if same:
                encap_idx[i] = prev_idx
                continue
        h = _hash_layers(layers, nl)
        slot = np.int64(h & np.uint64(tmask))
        idx = -1
        while True:
            v = tab_val[slot]
            if v < 0:
                break
            if tab_key[slot] == h and dict_len[v] == nl:
                same = True
                for k in range(nl):
                    if dict_seq[v, k] != layers[k]:
                        same = False
                        break
                if same:
                    idx = v
                    break
            slot = (slot + 1) & tmask
        if idx < 0:
            if ndict >= dict_len.shape[0]:
                return -1, rare
            idx = ndict
            ndict += 1
            tab_key[slot] = h
            tab_val[slot] = idx
            dict_len[idx] = nl
            for k in range(nl):
                dict_seq[idx, k] = layers[k]
        encap_idx[i] = idx
        prev_idx, prev_nl = idx, nl
        for k in range(nl):  # a loop: a slice copy compiles numba's shape-error formatter
            prev_layers[k] = layers[k]
    if n:
        _pack_bools(u8, bool_rows, bits, (n - 1) // CLEAR_CHUNK * CLEAR_CHUNK, n, rare)
    return ndict, rare


# --- on-disk cache freshness -------------------------------------------------------------
# numba keys its on-disk cache on this file only, but the kernels bake in constants from
# constants.py / schema.py / options.py at compile time. When any of those changed since
# the cache was written, drop the cached machine code so it is rebuilt from the new values
# (gropcap.numba_cache).
def _refresh_cache() -> None:
    import os
    import sys

    from gropcap import constants, numba_cache
    from gropcap.capture import fast as capture_fast
    from gropcap.decode import options, schema
    stamp = numba_cache.stamp([m.__file__ for m in (constants, schema, options,
                                                    capture_fast)],
                              repr(sorted(LAYOUT.items()))) + os.path.basename(__file__)
    numba_cache.refresh([decode_kernel, _enter_tunnel, _add_vlan, _clear_rows, _rare_on,
                         _pack_bools], "_fast_kernels.deps", stamp)
    numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))


_refresh_cache()
