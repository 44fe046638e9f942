"""RSS: the Toeplitz hash a NIC computes on receive, and the queue / GRO bucket it selects.

Layer: packet columns (Arrow, ``decode/schema.py``) -> one uint32 ``hash`` per packet.
Both GRO engines (``gro/reference.py`` and ``gro/engine.py``) call :func:`rss_hash`, then
:func:`rx_queue` and :func:`gro_bucket`; the input selection is the one documented in
``docs/gro-model.md`` ("RSS: queue and GRO bucket").

:func:`toeplitz_hash` is the plain definition (Microsoft "Verifying the RSS Hash
Calculation"; kernel ``include/linux/netdevice.h`` / ``net/core/dev.c`` use the same
function in software RSS): for every set bit ``i`` of the input (most significant bit of the
first byte first), XOR in the 32 key bits starting at key bit ``i``.
:func:`rss_hash` computes the same thing for a whole table with a per-byte lookup table.
"""

from __future__ import annotations

import sys

import numba
import numpy as np
import pyarrow as pa

from gropcap import numba_cache
from gropcap.arrays import numpy_of
from gropcap.constants import IP6_EXT_FRAGMENT, IPPROTO_TCP, IPPROTO_UDP

# Longest hash input: IPv6 src(16) + dst(16) + sport(2) + dport(2).
RSS_MAX_INPUT = 36


def toeplitz_hash(data: bytes, key: bytes) -> int:
    """Toeplitz hash of ``data`` under ``key`` (plain Python, bit by bit).

    ``key`` must hold at least ``len(data) + 4`` bytes (32 bits of window past the last
    input bit).

    >>> key = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da3"
    ...                     "8030f20c6a42b73bbeac01fa")
    >>> hex(toeplitz_hash(bytes([66, 9, 149, 187, 161, 142, 100, 80]), key))
    '0x323e8fc2'
    """
    if len(key) < len(data) + 4:
        raise ValueError(f"Toeplitz key of {len(key)} bytes too short for "
                         f"{len(data)} input bytes (needs {len(data) + 4})")
    key_int = int.from_bytes(key, "big")
    key_bits = len(key) * 8
    result = 0
    for i in range(len(data) * 8):
        if data[i // 8] & (0x80 >> (i % 8)):
            # the 32-bit window of the key whose most significant bit is key bit i
            result ^= (key_int >> (key_bits - 32 - i)) & 0xFFFFFFFF
    return result


def toeplitz_table(key: bytes, nbytes: int = RSS_MAX_INPUT) -> np.ndarray:
    """``table[i, v]``: Toeplitz contribution of byte value ``v`` at input position ``i``.

    The hash of an input is the XOR of ``table[i, data[i]]`` over its bytes; this is the
    same function as :func:`toeplitz_hash` (tests check it), computed once per key.
    """
    if len(key) < nbytes + 4:
        raise ValueError(f"Toeplitz key of {len(key)} bytes too short for "
                         f"{nbytes} input bytes (needs {nbytes + 4})")
    key_int = int.from_bytes(key, "big")
    key_bits = len(key) * 8
    # the 32-bit key window at each input bit (its first bit: the byte's top bit)
    windows = np.array([(key_int >> (key_bits - 32 - i)) & 0xFFFFFFFF
                        for i in range(nbytes * 8)], np.uint32).reshape(nbytes, 8)
    # table[pos, v]: XOR of the windows of the bits set in v (one pass per bit, vectorised:
    # 0.2 ms where a loop over the 256 values took 6 ms of a warm run)
    values = np.arange(256)
    table = np.zeros((nbytes, 256), dtype=np.uint32)
    for b in range(8):
        on = ((values >> (7 - b)) & 1).astype(bool)
        table[:, on] ^= windows[:, b:b + 1]
    return table


def rx_queue(hash_: np.ndarray | int, queues: int):
    """RX queue of a packet: ``(hash & 127) % queues``.

    A 128-entry indirection table filled round-robin over the queues (ethtool's default,
    ``ethtool_rxfh_indir_default``) indexed by the low 7 hash bits.

    >>> int(rx_queue(0x51ccc178, 4))
    0
    """
    if isinstance(hash_, np.ndarray):
        return ((hash_.astype(np.uint32) & np.uint32(127)) % np.uint32(queues)).astype(np.uint16)
    return (int(hash_) & 127) % queues


def gro_bucket(hash_: np.ndarray | int, buckets: int):
    """GRO hash bucket: ``hash & (buckets - 1)`` (``dev_gro_receive`` uses raw skb->hash).

    ``buckets`` is ``GRO_HASH_BUCKETS`` (8) from 4.19, 1 before.

    >>> int(gro_bucket(0x51ccc178, 8))
    0
    """
    if isinstance(hash_, np.ndarray):
        return (hash_.astype(np.uint32) & np.uint32(buckets - 1)).astype(np.uint8)
    return int(hash_) & (buckets - 1)


# --- column extraction (shared with engine.py) -----------------------------------------

def column_numpy(table: pa.Table, name: str, dtype) -> np.ndarray:
    """A fixed-width scalar column as a contiguous numpy array of ``dtype``."""
    return np.ascontiguousarray(numpy_of(table.column(name)), dtype=dtype)


def column_bytes(table: pa.Table, name: str) -> np.ndarray:
    """A fixed_size_binary column as an ``(n, width)`` uint8 matrix (zero-copy when possible)."""
    col = table.column(name)
    width = col.type.byte_width
    n = len(col)
    if n == 0:                      # (combine_chunks of no chunk imports pandas)
        return np.zeros((0, width), dtype=np.uint8)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    data = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    return data[col.offset * width:(col.offset + n) * width].reshape(n, width)


class ColumnReader:
    """One batch's columns as numpy, each converted at most once per dtype.

    ``reader(name, dtype)`` is :func:`column_numpy` (same values), cached: the engine's
    preparation reads some columns (versions, offsets, wire_len) in five places, and
    every conversion of a 2 M-row batch is a fresh full-size allocation.
    ``reader.native(name)`` is the column in its own dtype (zero-copy for numeric
    columns); ``reader.bytes(name)`` is :func:`column_bytes`; ``reader.words(name)`` a
    16-byte address column as an (n, 2) uint64 matrix (native byte order). The arrays
    are shared: callers must not write into them.
    """

    def __init__(self, table: pa.Table):
        self.table = table
        self._native: dict = {}
        self._conv: dict = {}

    def native(self, name: str) -> np.ndarray:
        a = self._native.get(name)
        if a is None:
            a = numpy_of(self.table.column(name))
            self._native[name] = a
        return a

    def __call__(self, name: str, dtype=np.int64) -> np.ndarray:
        key = (name, np.dtype(dtype))
        a = self._conv.get(key)
        if a is None:
            a = np.ascontiguousarray(self.native(name), dtype=dtype)
            self._conv[key] = a
        return a

    def ints(self, name: str) -> np.ndarray:
        """The column as it is if it holds integers or booleans, else as uint64."""
        a = self.native(name)
        if a.dtype.kind in "iub" and a.flags.c_contiguous:
            return a
        return self(name, np.uint64)

    def bytes(self, name: str) -> np.ndarray:
        key = (name, "bytes")
        a = self._conv.get(key)
        if a is None:
            a = column_bytes(self.table, name)
            self._conv[key] = a
        return a

    def words(self, name: str) -> np.ndarray:
        key = (name, "words")
        a = self._conv.get(key)
        if a is None:
            b = self.bytes(name)
            if b.shape[1] != 16:
                raise ValueError(f"{name}: expected 16-byte addresses, got {b.shape[1]}")
            if not b.flags.c_contiguous or b.ctypes.data % 8:
                b = b.copy()                  # a fresh array is aligned for uint64
            a = b.view(np.uint64)
            a.flags.writeable = False         # like the zero-copy case: one numba type
            self._conv[key] = a
        return a


@numba.njit(cache=True, nogil=True, inline="always")
def _hash_addresses(table, v, src, dst, i):
    """Toeplitz XOR over the source then destination address of row ``i`` (IPv4: the
    last 4 bytes of the IPv4-mapped form); returns ``(hash, next key position)``."""
    h = np.uint32(0)
    pos = 0
    lo = 12 if v == 4 else 0
    for b in range(lo, 16):
        h ^= table[pos, src[i, b]]
        pos += 1
    for b in range(lo, 16):
        h ^= table[pos, dst[i, b]]
        pos += 1
    return h, pos


@numba.njit(cache=True, nogil=True)
def _rss_kernel(table, version, src, dst, use_ports, sport, dport, out):
    """XOR of per-byte table entries over the selected tuple of each packet."""
    n = version.shape[0]
    for i in range(n):
        v = version[i]
        if v == 0:
            out[i] = 0
            continue
        h, pos = _hash_addresses(table, v, src, dst, i)
        if use_ports[i]:
            h ^= table[pos, sport[i] >> 8]
            h ^= table[pos + 1, sport[i] & 0xFF]
            h ^= table[pos + 2, dport[i] >> 8]
            h ^= table[pos + 3, dport[i] & 0xFF]
        out[i] = h


def rss_inputs(packets: pa.Table):
    """Select the hash input of each packet (docs/gro-model.md, RSS).

    Returns ``(version, src, dst, use_ports, sport, dport)``: the outermost IP header
    (``outer_ip_*`` when the packet is encapsulated, else ``ip_*``); ports when its L4 is
    TCP or UDP with decoded ports and the header is not a fragment, as NIC RSS hashes the
    4-tuple only for unfragmented TCP/UDP.
    """
    outer_v = column_numpy(packets, "outer_ip_version", np.uint8)
    inner_v = column_numpy(packets, "ip_version", np.uint8)
    enc = outer_v != 0
    version = np.where(enc, outer_v, inner_v).astype(np.uint8)

    def pick(outer_name, inner_name, dtype):
        o = column_numpy(packets, outer_name, dtype)
        i = column_numpy(packets, inner_name, dtype)
        return np.where(enc, o, i)

    o_src, i_src = column_bytes(packets, "outer_ip_src"), column_bytes(packets, "ip_src")
    o_dst, i_dst = column_bytes(packets, "outer_ip_dst"), column_bytes(packets, "ip_dst")
    src = np.where(enc[:, None], o_src, i_src) if len(enc) else i_src
    dst = np.where(enc[:, None], o_dst, i_dst) if len(enc) else i_dst
    mf = pick("outer_ip_mf", "ip_mf", np.bool_)
    frag_off = pick("outer_ip_frag_off", "ip_frag_off", np.uint16)
    ext_mask = pick("outer_ip_ext_mask", "ip_ext_mask", np.uint8)
    fragment = mf | (frag_off != 0) | ((ext_mask & IP6_EXT_FRAGMENT) != 0)
    # Outer L4 of an encapsulated packet: only UDP tunnels record it (outer_l4_proto 17).
    o_l4 = column_numpy(packets, "outer_l4_proto", np.uint8)
    i_l4 = column_numpy(packets, "l4_proto", np.uint8)
    l4 = np.where(enc, o_l4, i_l4)
    use_ports = ((l4 == IPPROTO_TCP) | (l4 == IPPROTO_UDP)) & ~fragment
    sport = pick("outer_sport", "sport", np.uint16)
    dport = pick("outer_dport", "dport", np.uint16)
    return (version, np.ascontiguousarray(src), np.ascontiguousarray(dst),
            np.ascontiguousarray(use_ports), sport.astype(np.int64), dport.astype(np.int64))


@numba.njit(cache=True, nogil=True)
def _rss_select_kernel(table, o_v, i_v, o_src, i_src, o_dst, i_dst, o_sw, i_sw, o_dw, i_dw,
                       o_mf, i_mf, o_fo, i_fo, o_ext, i_ext, o_l4, i_l4, o_sp, i_sp, o_dp,
                       i_dp, frag_bit, tcp, udp, out):
    """:func:`rss_inputs` + :func:`_rss_kernel` in one pass: the outermost header's
    tuple is picked per row instead of materialising the selected columns.

    A row whose selected tuple (version, addresses, ports or none) is the previous
    row's takes its hash: packets come in bursts of one flow (97.6% of the real
    benchmark capture's rows follow a row of their flow), and comparing the addresses
    as two 64-bit words each (``*_sw``/``*_dw``, the same bytes as ``*_src``/``*_dst``)
    costs a fraction of the table lookups (callgrind: 171 instructions a row without
    it)."""
    n = out.shape[0]
    pv = np.uint8(0)                   # the previous row's tuple (version 0: none yet)
    ps0 = ps1 = pd0 = pd1 = np.uint64(0)
    pports = np.int64(-1)
    ph = np.uint32(0)
    for r in range(n):
        i = np.uint64(r)
        enc = o_v[i] != 0
        v = np.uint8(o_v[i]) if enc else np.uint8(i_v[i])
        if v == 0:
            out[i] = 0
            continue
        if enc:
            s0, s1, d0, d1 = o_sw[i, 0], o_sw[i, 1], o_dw[i, 0], o_dw[i, 1]
            frag = o_mf[i] or o_fo[i] != 0 or (np.int64(o_ext[i]) & frag_bit) != 0
            l4 = np.int64(o_l4[i])
            sp = np.int64(o_sp[i])
            dp = np.int64(o_dp[i])
        else:
            s0, s1, d0, d1 = i_sw[i, 0], i_sw[i, 1], i_dw[i, 0], i_dw[i, 1]
            frag = i_mf[i] or i_fo[i] != 0 or (np.int64(i_ext[i]) & frag_bit) != 0
            l4 = np.int64(i_l4[i])
            sp = np.int64(i_sp[i])
            dp = np.int64(i_dp[i])
        ports = (sp << 16) | dp if (l4 == tcp or l4 == udp) and not frag else np.int64(-1)
        if v == pv and ports == pports and s0 == ps0 and s1 == ps1 and d0 == pd0 \
                and d1 == pd1:
            out[i] = ph
            continue
        src = o_src if enc else i_src
        dst = o_dst if enc else i_dst
        h, pos = _hash_addresses(table, v, src, dst, i)
        if ports >= 0:
            h ^= table[pos, sp >> 8]
            h ^= table[pos + 1, sp & 0xFF]
            h ^= table[pos + 2, dp >> 8]
            h ^= table[pos + 3, dp & 0xFF]
        out[i] = h
        pv, ps0, ps1, pd0, pd1, pports, ph = v, s0, s1, d0, d1, ports, h


_TABLE_CACHE: dict[bytes, np.ndarray] = {}


def rss_hash(packets: pa.Table, key: bytes, enabled: bool = True, *, columns=None) -> np.ndarray:
    """The 32-bit RSS hash of every packet (uint32 array, one per row).

    Parameters:
        packets: table with ``PACKET_SCHEMA`` columns (only the IP/L4 ones are read).
        key: Toeplitz key, at least 40 bytes for IPv6 4-tuples.
        enabled: False models ``rss = "none"``: the driver sets no hash (all zeros).
        columns: optional :class:`ColumnReader` of ``packets`` sharing conversions with
            the caller (``engine.prepare``).

    Returns ``np.ndarray[uint32]``; 0 for packets without an IP header.

    >>> # h = rss_hash(table, GroConfig().rss_key); q = rx_queue(h, 4); b = gro_bucket(h, 8)
    """
    n = packets.num_rows
    out = np.zeros(n, dtype=np.uint32)
    if not enabled or n == 0:
        return out
    # A key shorter than 40 bytes (GroConfig allows 12+) is zero-extended: input bits
    # past its end then contribute nothing (NIC keys are 40 or 52 bytes in practice).
    key = bytes(key).ljust(RSS_MAX_INPUT + 4, b"\0")
    table = _TABLE_CACHE.get(key)
    if table is None:
        table = toeplitz_table(key)
        _TABLE_CACHE[key] = table
    c = ColumnReader(packets) if columns is None else columns
    g, b, w = c, c.bytes, c.words
    # same dtypes as rss_inputs (a table with other column types hashes the same)
    _rss_select_kernel(
        table, g("outer_ip_version", np.uint8), g("ip_version", np.uint8),
        b("outer_ip_src"), b("ip_src"), b("outer_ip_dst"), b("ip_dst"),
        w("outer_ip_src"), w("ip_src"), w("outer_ip_dst"), w("ip_dst"),
        g("outer_ip_mf", np.bool_), g("ip_mf", np.bool_),
        g("outer_ip_frag_off", np.uint16), g("ip_frag_off", np.uint16),
        g("outer_ip_ext_mask", np.uint8), g("ip_ext_mask", np.uint8),
        g("outer_l4_proto", np.uint8), g("l4_proto", np.uint8),
        g("outer_sport", np.uint16), g("sport", np.uint16),
        g("outer_dport", np.uint16), g("dport", np.uint16),
        IP6_EXT_FRAGMENT, IPPROTO_TCP, IPPROTO_UDP, out)
    return out


# cached kernels load without numba's registry refresh (gropcap.numba_cache.light_loads)
numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))
