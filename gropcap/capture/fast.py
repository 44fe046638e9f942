"""numba record-scan kernels: the fast path of ``pcap.py`` and ``pcapng.py``.

Layer: capture. Private kernels over a ``uint8`` window (an mmap or a stream buffer) that
fill preallocated record arrays. They never raise and never judge: on the first record
they are not sure about (a length to refuse, a cut, a block type other than EPB/SPB, a
timestamp that could overflow int64, malformed options) they stop and return its
position, and the Python scanner handles it with its full checks and messages. The
Python scanners are the reference; tests assert both give identical results.
"""

from __future__ import annotations

import sys

import numba
import numpy as np

from gropcap import numba_cache
from gropcap.constants import MAX_RECORD_LEN

INT64_MAX = np.int64((1 << 63) - 1)
# Must equal pcapng.PCAPNG_MAX_BLOCK_LEN (asserted there).
MAX_BLOCK_LEN = 64 * 1024 * 1024
_MAX_REC = MAX_RECORD_LEN


def _load_int(bits: int, swap: bool):
    """An intrinsic: the ``bits``-bit unsigned integer at byte ``off`` of the uint8 array
    ``f`` (big-endian when ``swap``, else little-endian), as int64 (``bits`` 64: the
    word as is, reinterpreted): one unaligned load, and a byte swap. Byte by byte, numba
    wraps every index around (a shift, an ``and`` and an add per byte) and LLVM cannot
    merge the loads: 20 big-endian words a record took 70 ns, 18 ns this way. Like
    ``f[off]``, no bounds check: the caller keeps ``off`` in range. The decoder, the
    record scan and the single pass (``gro/fused.py``) read with these."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def load(typingctx, f, off):
        if not (isinstance(f, types.Array) and f.dtype == types.uint8
                and isinstance(off, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [idx]), ir.IntType(bits).as_pointer())
            word = builder.load(ptr, align=1)
            if swap and bits > 8:
                word = builder.bswap(word)
            return word if bits == 64 else builder.zext(word, ir.IntType(64))

        return types.int64(f, off), codegen

    return load


_byte = _load_int(8, False)
_be16 = _load_int(16, True)
_be32 = _load_int(32, True)
_le16 = _load_int(16, False)
_le32 = _load_int(32, False)
_le64 = _load_int(64, False)


@numba.njit(cache=True, nogil=True, inline="always")
def _u16(buf, p, be):
    return _be16(buf, p) if be else _le16(buf, p)


@numba.njit(cache=True, nogil=True, inline="always")
def _u32(buf, p, be):
    return _be32(buf, p) if be else _le32(buf, p)


@numba.njit(cache=True, nogil=True)
def pcap_scan(buf, pos, end, be, frac_ns, len_limit, max_n, base, rec0, data, cap, wire,
              ts, foff, rec):
    """Scan pcap records from ``pos``; returns ``(count, new_pos)``. ``buf`` starts at
    file offset ``base``: ``data`` and ``foff`` get file offsets (of the frame and of its
    record header), ``rec`` the record numbers from ``rec0`` on, each record's fields
    as a ``RecordBatch`` holds them (no pass over the arrays afterwards).

    Stops before a record whose header or data is incomplete, or whose captured length
    exceeds ``len_limit`` (the caller's policy), or after ``max_n`` records.
    """
    n = 0
    while n < max_n:
        if end - pos < 16:
            break
        incl = _u32(buf, pos + 8, be)
        if incl > len_limit or end - pos - 16 < incl:
            break
        foff[n] = base + pos
        data[n] = base + pos + 16
        rec[n] = rec0 + n
        cap[n] = incl
        wire[n] = _u32(buf, pos + 12, be)
        ts[n] = _u32(buf, pos, be) * 1_000_000_000 + _u32(buf, pos + 4, be) * frac_ns
        n += 1
        pos += 16 + incl
    return n, pos


@numba.njit(cache=True, nogil=True)
def pcapng_scan(buf, pos, end, be, if_lt, if_gid, if_snap, if_num, if_den, if_off, if_ok,
                last_ts, max_n, data, cap, wire, ts, lt, gid, flags, foff):
    """Scan a run of EPB / SPB blocks of one section; returns ``(count, new_pos, last_ts,
    spb_count)``.

    Per local interface: link type, global id, snaplen, and the timestamp conversion
    ``ns = ticks * num // den + off`` (``if_ok`` false when it could overflow int64 here).
    Stops at any other block, any doubtful block, or after ``max_n`` records.
    """
    n = 0
    spb = 0
    nif = if_lt.shape[0]
    while n < max_n:
        if end - pos < 12:
            break
        btype = _u32(buf, pos, be)
        blen = _u32(buf, pos + 4, be)
        if btype != 6 and btype != 3:
            break
        if blen < 12 or (blen & 3) != 0 or blen > MAX_BLOCK_LEN or end - pos < blen:
            break
        if _u32(buf, pos + blen - 4, be) != blen:
            break
        if btype == 6:
            if blen < 32:
                break
            iid = _u32(buf, pos + 8, be)
            if iid >= nif or not if_ok[iid]:
                break
            hi = _u32(buf, pos + 12, be)
            lo = _u32(buf, pos + 16, be)
            c = _u32(buf, pos + 20, be)
            if c > _MAX_REC or 28 + c + 4 > blen:
                break
            # epb_flags (option 2, 4 bytes) among the options after the padded data
            f = np.int64(0)
            p = pos + 28 + c + ((-c) & 3)
            e = pos + blen - 4
            ok = True
            while p + 4 <= e:
                code = _u16(buf, p, be)
                olen = _u16(buf, p + 2, be)
                if code == 0:
                    break
                if p + 4 + olen > e:
                    ok = False
                    break
                if code == 2 and olen == 4:
                    f = _u32(buf, p + 4, be)
                p += 4 + olen + ((-olen) & 3)
            if not ok:
                break
            if hi >= (1 << 31):
                break                       # ticks >= 2^63: leave to the reference path
            ticks = (hi << 32) | lo
            num = if_num[iid]
            den = if_den[iid]
            off = if_off[iid]
            aoff = off if off >= 0 else -off
            q = ticks // den
            r = ticks - q * den
            if q > (INT64_MAX - aoff - num) // num:
                break                       # would leave int64: reference path decides
            t = q * num + (r * num) // den + off
            foff[n] = pos
            data[n] = pos + 28
            cap[n] = c
            wire[n] = _u32(buf, pos + 24, be)
            ts[n] = t
            lt[n] = if_lt[iid]
            gid[n] = if_gid[iid]
            flags[n] = f
            last_ts = t
        else:
            if blen < 16 or nif == 0 or not if_ok[0]:
                break
            w = _u32(buf, pos + 8, be)
            snap = if_snap[0]
            c = w if snap == 0 or w < snap else snap
            if c > blen - 16 or c > _MAX_REC:
                break
            foff[n] = pos
            data[n] = pos + 12
            cap[n] = c
            wire[n] = w
            ts[n] = last_ts
            lt[n] = if_lt[0]
            gid[n] = if_gid[0]
            flags[n] = 0
            spb += 1
        n += 1
        pos += blen
    return n, pos, last_ts, spb


def window(win) -> np.ndarray:
    """``win`` (an mmap, or the bytearray window of a compressed stream) as a read-only
    ``uint8`` array: the scan kernels then have one compiled signature for plain and
    compressed captures (a writable view compiled each kernel a second time)."""
    arr = np.frombuffer(win, dtype=np.uint8)
    arr.flags.writeable = False
    return arr


def alloc(k: int):
    """Output arrays for up to ``k`` records: data, cap, wire, ts, lt, gid, flags, foff,
    each in the dtype of its ``RecordBatch`` field (no conversion pass afterwards)."""
    return (np.empty(k, np.int64), np.empty(k, np.uint32), np.empty(k, np.uint32),
            np.empty(k, np.int64), np.empty(k, np.uint16), np.empty(k, np.uint16),
            np.empty(k, np.uint32), np.empty(k, np.uint64))


# cached kernels load without numba's registry refresh (gropcap.numba_cache.light_loads)
numba_cache.light_loads(numba_cache.dispatchers_of(sys.modules[__name__]))
