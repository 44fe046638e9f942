"""Flow interning for the numba GRO engine: the exact same-flow key (every field
dev_gro_receive and the protocol gro_receive callbacks compare to find p), the loose key,
the flow key, packed into uint64 words and interned in persistent open-addressing tables
(``engine._classes``, ``engine.InternTable``).

Layer: gro/fast, beside ``state`` (imports none of its modules). A new encapsulation's
same-flow fields go into :func:`_same_flow_rows` (and :class:`SameFlowIn`).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np


# --- key packing (engine._classes) -------------------------------------------------------
# The key words of a chunk of rows written straight into a preallocated buffer: the numpy
# version built ~25 full-size temporaries and np.stack-ed them, which cost more than the
# GRO kernel itself (fresh pages faulted in on every batch).

class SameFlowIn(NamedTuple):
    """Columns of the exact same-flow key, native dtypes (addresses as (n, 2) uint64)."""
    hash: np.ndarray
    iface: np.ndarray
    dsa_port: np.ndarray
    eth_dst: np.ndarray
    eth_type: np.ndarray
    eth_src: np.ndarray
    vlan_depth: np.ndarray
    vlan_tpid0: np.ndarray
    vlan_tci0: np.ndarray
    vlan_tpid1: np.ndarray
    vlan_tci1: np.ndarray
    o_version: np.ndarray
    o_proto: np.ndarray
    o_ext_mask: np.ndarray
    o_ext_len: np.ndarray
    o_flow_label: np.ndarray
    o_ext_digest: np.ndarray
    o_src: np.ndarray
    o_dst: np.ndarray
    o_ttl: np.ndarray
    i_version: np.ndarray
    i_proto: np.ndarray
    i_ext_mask: np.ndarray
    i_ext_len: np.ndarray
    i_flow_label: np.ndarray
    i_ext_digest: np.ndarray
    i_src: np.ndarray
    i_dst: np.ndarray
    i_ttl: np.ndarray
    tun_type: np.ndarray
    tun_flags: np.ndarray
    tun_proto: np.ndarray
    tun_key: np.ndarray
    ieth_dst: np.ndarray
    ieth_type: np.ndarray
    ieth_src: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    ivlan_depth: np.ndarray
    ivlan_tci0: np.ndarray
    ivlan_tpid1: np.ndarray
    ivlan_tci1: np.ndarray


SAME_FLOW_WORDS = 24      # + 1 with the pre-5.18 IPv6 hop limit word
FLOW_WORDS = 13


@numba.njit(cache=True, nogil=True, _nrt=False)
def _u(x):
    return np.uint64(x)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _ip_words(out, at, j, r, version, proto, ext_mask, ext_len, flow_label, ext_digest,
              src, dst, ttl):
    """One IP header's 7 same-flow words of row r into ``out[at:at + 7, j]``; returns its
    hop-limit word part (IPv6 hop limit, 0 for IPv4)."""
    z = np.uint64(0)
    v = _u(version[r])
    is6 = v == 6
    out[at, j] = v | (_u(proto[r]) << np.uint64(8)) \
        | ((_u(ext_mask[r]) if is6 else z) << np.uint64(16)) \
        | ((_u(ext_len[r]) if is6 else z) << np.uint64(24))
    out[at + 1, j] = _u(flow_label[r]) if is6 else z
    out[at + 2, j] = _u(ext_digest[r]) if is6 else z
    out[at + 3, j] = src[r, 0]
    out[at + 4, j] = src[r, 1]
    out[at + 5, j] = dst[r, 0]
    out[at + 6, j] = dst[r, 1]
    return _u(ttl[r]) if is6 else z


@numba.njit(cache=True, nogil=True, _nrt=False)
def _same_flow_rows(k, lo, hi, gre_a, gre_b, gre_key, hops, out):
    """Same-flow key words of rows lo..hi-1 into ``out[:, 0:hi - lo]`` (24 or 25 words per
    column); layout in ``engine._classes``; every field at its full width
    (injective).

    The row loop is in here, not in the callers: ``k`` (42 arrays) is read directly. A
    per-row function taking ``k``, even inlined, copied the whole tuple on every row
    (about 0.7 us per row, 80x the packing itself, measured on a real capture)."""
    s8 = np.uint64(8)
    s16 = np.uint64(16)
    s32 = np.uint64(32)
    s48 = np.uint64(48)
    z = np.uint64(0)
    for jj in range(hi - lo):
        # unsigned indices: no wraparound of a negative index at each of the ~50 reads
        j = np.uint64(jj)
        r = np.uint64(lo + jj)
        out[0, j] = _u(k.hash[r]) | (_u(k.iface[r]) << s32) \
            | (_u(np.int64(k.dsa_port[r]) & 0xFFFF) << s48)
        out[1, j] = _u(k.eth_dst[r]) | (_u(k.eth_type[r]) << s48)
        out[2, j] = _u(k.eth_src[r]) | (_u(k.vlan_depth[r]) << s48)
        out[3, j] = _u(k.vlan_tpid0[r]) | (_u(k.vlan_tci0[r]) << s16) \
            | (_u(k.vlan_tpid1[r]) << s32) | (_u(k.vlan_tci1[r]) << s48)
        # outer IP header (inet/ipv6_gro_receive fields), then the inner / only one
        hop0 = _ip_words(out, np.int64(4), j, r, k.o_version, k.o_proto, k.o_ext_mask,
                         k.o_ext_len, k.o_flow_label, k.o_ext_digest, k.o_src, k.o_dst,
                         k.o_ttl)
        hop1 = _ip_words(out, np.int64(11), j, r, k.i_version, k.i_proto, k.i_ext_mask,
                         k.i_ext_len, k.i_flow_label, k.i_ext_digest, k.i_src, k.i_dst,
                         k.i_ttl)
        # gre_gro_receive: flags, protocol, key when K; eth_gro_receive for GRE-TEB
        tun = _u(k.tun_type[r])
        gre = tun == gre_a or tun == gre_b
        teb = tun == gre_b
        tfl = _u(k.tun_flags[r])
        out[18, j] = tun | ((tfl if gre else z) << s8)
        out[19, j] = (_u(k.tun_proto[r]) if gre else z) \
            | ((_u(k.tun_key[r]) if gre and (tfl & gre_key) != z else z) << s16)
        out[20, j] = (_u(k.ieth_dst[r]) if teb else z) \
            | ((_u(k.ieth_type[r]) if teb else z) << s48)
        out[21, j] = _u(k.ieth_src[r]) if teb else z
        out[22, j] = _u(k.sport[r]) | (_u(k.dport[r]) << s16)
        # vlan_gro_receive on the inner tags of GRE-TEB (compare_vlan_header: whole TCI
        # and encapsulated type; the first TPID is the inner EtherType of word 20)
        out[23, j] = (_u(k.ivlan_depth[r]) | (_u(k.ivlan_tci0[r]) << s8)
                      | (_u(k.ivlan_tpid1[r]) << np.uint64(24))
                      | (_u(k.ivlan_tci1[r]) << np.uint64(40))) if teb else z
        if hops:
            out[SAME_FLOW_WORDS, j] = hop0 | (hop1 << s8)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _hash_words(buf, w):
    """Slot hash of a key: four independent multiply lanes (a short dependency chain;
    only the probe position depends on it, every hit is confirmed word by word)."""
    m = np.uint64(0x9E3779B97F4A7C15)
    a = np.uint64(0x243F6A8885A308D3)
    b = np.uint64(0x13198A2E03707344)
    c = np.uint64(0xA4093822299F31D0)
    d = np.uint64(0x082EFA98EC4E6C89)
    x = 0
    while x + 4 <= w:
        a = (a ^ buf[x]) * m
        b = (b ^ buf[x + 1]) * m
        c = (c ^ buf[x + 2]) * m
        d = (d ^ buf[x + 3]) * m
        x += 4
    while x < w:
        a = (a ^ buf[x]) * m
        x += 1
    h = a ^ (b >> np.uint64(17)) ^ (b << np.uint64(47)) ^ (c >> np.uint64(31)) \
        ^ (c << np.uint64(33)) ^ (d >> np.uint64(43)) ^ (d << np.uint64(21))
    h ^= h >> np.uint64(32)
    h *= m
    h ^= h >> np.uint64(29)
    return h


class FlowIn(NamedTuple):
    """Columns of flows.FLOW_KEY_COLUMNS, native dtypes (addresses as (n, 2) uint64)."""
    ip_version: np.ndarray
    l4_proto: np.ndarray
    outer_ip_version: np.ndarray
    tun_type: np.ndarray
    tun_key: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    outer_sport: np.ndarray
    outer_dport: np.ndarray
    vlan_tci0: np.ndarray
    vlan_tci1: np.ndarray
    dsa_port: np.ndarray
    iface: np.ndarray
    eth_src: np.ndarray
    eth_type: np.ndarray
    eth_dst: np.ndarray
    ip_src: np.ndarray
    ip_dst: np.ndarray
    outer_ip_src: np.ndarray
    outer_ip_dst: np.ndarray


@numba.njit(cache=True, nogil=True, _nrt=False)
def _flow_row(f, r, out):
    """flows.FLOW_KEY_COLUMNS of row r as 13 uint64 words into ``out`` (layout in
    ``engine._flow_input``)."""
    s8 = np.uint64(8)
    s16 = np.uint64(16)
    s24 = np.uint64(24)
    s32 = np.uint64(32)
    s48 = np.uint64(48)
    out[0] = _u(f.ip_version[r]) | (_u(f.l4_proto[r]) << s8) \
        | (_u(f.outer_ip_version[r]) << s16) | (_u(f.tun_type[r]) << s24) \
        | (_u(f.tun_key[r]) << s32)
    out[1] = _u(f.sport[r]) | (_u(f.dport[r]) << s16) \
        | (_u(f.outer_sport[r]) << s32) | (_u(f.outer_dport[r]) << s48)
    out[2] = _u(f.vlan_tci0[r]) | (_u(f.vlan_tci1[r]) << s16) \
        | (_u(np.int64(f.dsa_port[r]) & 0xFFFF) << s32) | (_u(f.iface[r]) << s48)
    out[3] = _u(f.eth_src[r]) | (_u(f.eth_type[r]) << s48)
    out[4] = _u(f.eth_dst[r])
    out[5] = f.ip_src[r, 0]
    out[6] = f.ip_src[r, 1]
    out[7] = f.ip_dst[r, 0]
    out[8] = f.ip_dst[r, 1]
    out[9] = f.outer_ip_src[r, 0]
    out[10] = f.outer_ip_src[r, 1]
    out[11] = f.outer_ip_dst[r, 0]
    out[12] = f.outer_ip_dst[r, 1]


# --- persistent key tables and the one-pass classification (engine._classes) -----------
# The exact classes of a batch in one pass over its rows: a row's *union key* (every field
# of the same-flow key, the hop limits, and the flow-key fields the same-flow key leaves
# out) is looked up in an open-addressing table that lives in the EngineState (it grows
# with flows, not packets); the same-flow key, loose key and flow key of a union class
# are functions of it, interned once per class in their own tables. Ids are numbered by
# first appearance (keys: among rows with ``use``), across batches.

UNION_WORDS = SAME_FLOW_WORDS + 3   # + hop limits; L4 proto and outer ports; tunnel key
UNION_CHUNK = 64                   # rows packed per _same_flow_rows call in classify


@numba.njit(cache=True, nogil=True, _nrt=False)
def _tab_find(buf, slots, keys, cnt):
    """Id of the key ``buf[:w]`` (w = ``keys.shape[1]``) in the table ``(slots, keys,
    cnt[0] keys)``; a new key is appended. The caller guarantees room for it (see
    ``engine.InternTable.reserve``), so nothing here allocates."""
    w = keys.shape[1]
    mask = np.uint64(slots.shape[0] - 1)
    pos = _hash_words(buf, w) & mask
    while True:
        c = slots[pos]
        if c < 0:
            break
        same = True
        for x in range(w):
            if keys[c, x] != buf[x]:
                same = False
                break
        if same:
            return c
        pos = (pos + np.uint64(1)) & mask
    nid = cnt[0]
    for x in range(w):
        keys[nid, x] = buf[x]
    slots[pos] = nid
    cnt[0] = nid + 1
    return nid


@numba.njit(cache=True, nogil=True, _nrt=False)
def rehash(keys, nid, slots, buf):
    """Slots of the first ``nid`` keys in a fresh (all -1) ``slots`` array (a table that
    grew: ``engine.InternTable.reserve``)."""
    w = keys.shape[1]
    mask = np.uint64(slots.shape[0] - 1)
    for y in range(nid):
        for x in range(w):
            buf[x] = keys[y, x]
        pos = _hash_words(buf, w) & mask
        while slots[pos] >= 0:
            pos = (pos + np.uint64(1)) & mask
        slots[pos] = y


@numba.njit(cache=True, nogil=True, _nrt=False)
def intern_rows(rows, slots, keys, cnt, buf, ids):
    """:func:`_tab_find` of every row of ``rows`` ((m, w) uint64) into ``ids`` (the
    table has room for m new keys)."""
    for r in range(rows.shape[0]):
        for x in range(rows.shape[1]):
            buf[x] = rows[r, x]
        ids[r] = _tab_find(buf, slots, keys, cnt)


@numba.njit(cache=True, nogil=True, _nrt=False)
def classify(k, l4, o_sport, o_dport, tun_key, gre_a, gre_b, gre_key, u_slots, u_keys, u_cnt,
             u_rep, uid, lo, chunk, buf):
    """Union class of rows lo.. (``uid``) in one pass over the union-key table
    ``(u_slots, u_keys, u_cnt)``; ``u_rep[u]``: the row where a class new in this call
    first appeared (the caller derives its flow id from that row). Returns the first
    row not done: ``n``, or the start of a chunk for which the table has no room for
    a chunk of new keys (the caller grows it, ``engine.InternTable.reserve``, and calls
    again). Nothing here allocates or reassigns an array (an array reassigned inside a
    loop is reference-counted on every row: ~100 ns per row, measured).

    ``chunk``: (UNION_CHUNK, UNION_WORDS) scratch, one row's words contiguous, written
    through the transposed view as _same_flow_rows writes out[word, row]. (A (words,
    rows) buffer puts a row's words 2 KiB apart, all in two L1 sets: a conflict miss
    per word.) ``buf``: scratch for one union key."""
    n = uid.shape[0]
    wu = UNION_WORDS
    s8 = np.uint64(8)
    s24 = np.uint64(24)
    last = np.int64(-1)
    for clo in range(lo, n, UNION_CHUNK):
        chi = min(n, clo + UNION_CHUNK)
        if u_cnt[0] + (chi - clo) > u_keys.shape[0]:
            return clo
        _same_flow_rows(k, clo, chi, gre_a, gre_b, gre_key, True, chunk.T)
        for jj in range(chi - clo):
            j = np.uint64(jj)              # unsigned: see _same_flow_rows
            r = np.uint64(clo + jj)
            chunk[j, SAME_FLOW_WORDS + 1] = _u(l4[r]) | (_u(o_sport[r]) << s8) \
                | (_u(o_dport[r]) << s24)
            chunk[j, SAME_FLOW_WORDS + 2] = _u(tun_key[r])
            u = np.int64(-1)
            if last >= 0:      # a burst of one class: the previous row's, no hashing
                same = True
                for x in range(wu):
                    if u_keys[last, x] != chunk[j, x]:
                        same = False
                        break
                if same:
                    u = last
            if u < 0:
                for x in range(wu):
                    buf[x] = chunk[j, x]
                old = u_cnt[0]
                u = _tab_find(buf, u_slots, u_keys, u_cnt)
                if u_cnt[0] > old:                 # a new union class: its first row
                    u_rep[u] = r
                last = u
            uid[r] = u
    return n


@numba.njit(cache=True, nogil=True, _nrt=False)
def flow_ids_of(f, rows, f_slots, f_keys, f_cnt, buf, ids):
    """Flow ids (``_flow_row`` keys interned in ``(f_slots, f_keys, f_cnt)``, which has
    room for them) of the given rows, into ``ids``."""
    for x in range(rows.shape[0]):
        _flow_row(f, rows[x], buf)
        ids[x] = _tab_find(buf, f_slots, f_keys, f_cnt)


@numba.njit(cache=True, nogil=True, _nrt=False)
def key_classes(uid, use, u_keys, no_hash, hops, ukey, k_slots, k_keys, k_cnt, l_slots,
                l_keys, l_cnt, key, loose, buf):
    """One model's same-flow key and loose key ids from the union classes ``uid`` of
    :func:`classify`: ``key`` -1 and ``loose`` 0 where ``use`` is False; a union
    class's keys are interned (in first-appearance order among rows with ``use``) the
    first time one of its rows has ``use`` and kept in ``ukey[2u]`` (key id) and
    ``ukey[2u + 1]`` (loose id). ``no_hash``: the model ignores the RSS hash in word 0
    (ideal). The caller gives the tables room for a key per union class without one."""
    low = np.uint64(0xFFFFFFFF)
    for r in range(uid.shape[0]):
        if not use[r]:
            key[r] = -1
            loose[r] = 0
            continue
        u = np.uint64(uid[r])       # unsigned: no wraparound code (see classify)
        u2 = u + u
        if ukey[u2] < 0:            # the class's first row with use
            for x in range(UNION_WORDS):
                buf[x] = u_keys[u, x]
            if no_hash:
                buf[0] &= ~low
            c = _tab_find(buf, k_slots, k_keys, k_cnt)
            ukey[u2] = c
            if hops:
                c = _tab_find(buf, l_slots, l_keys, l_cnt)
            ukey[u2 + np.uint64(1)] = c
        key[r] = ukey[u2]
        loose[r] = ukey[u2 + np.uint64(1)]


@numba.njit(cache=True, nogil=True)
def dedup_reps(mat, use):
    """Exact equivalence classes of the columns of a (words, n) uint64 matrix (column r
    is packet r's key; only packets with ``use``): an open addressing table on a 64-bit
    multiplicative hash of the words, every hit confirmed word by word.

    Returns ``(ids, reps)``: int64 ids by first appearance (-1 where ``use`` is False)
    and ``reps[id]`` the first row of class ``id``.
    """
    w = mat.shape[0]
    n = mat.shape[1]
    ids = np.full(n, -1, np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    slots = np.full(size, -1, np.int64)
    reps = np.empty(n, np.int64)
    mask = np.uint64(size - 1)
    nid = np.int64(0)
    for r in range(n):
        if not use[r]:
            continue
        h = np.uint64(14695981039346656037)
        for x in range(w):
            h = (h ^ mat[x, r]) * np.uint64(1099511628211)
            h ^= h >> np.uint64(29)
        pos = h & mask
        while True:
            rep = slots[pos]
            if rep < 0:
                slots[pos] = r
                ids[r] = nid
                reps[nid] = r
                nid += 1
                break
            same = True
            for x in range(w):
                if mat[x, rep] != mat[x, r]:
                    same = False
                    break
            if same:
                ids[r] = ids[rep]
                break
            pos = (pos + np.uint64(1)) & mask
    return ids, reps[:nid].copy()


@numba.njit(cache=True, nogil=True)
def gather_rows(mat, cols):
    """Columns ``cols`` of a (words, n) matrix as a C-ordered (len(cols), words) one."""
    w = mat.shape[0]
    out = np.empty((cols.shape[0], w), mat.dtype)
    for j in range(cols.shape[0]):
        c = cols[j]
        for x in range(w):
            out[j, x] = mat[x, c]
    return out
