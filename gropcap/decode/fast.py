"""Fast header decoder: RecordBatch (capture/) -> packet table (Arrow, schema.py), in numba.

Layer: decode. Same contract and output as :mod:`gropcap.decode.reference` (the oracle),
bit for bit, at millions of packets per second. The kernels live in
:mod:`gropcap.decode._fast_kernels`; this module validates inputs, allocates the column
matrices, runs the kernel and packs Arrow arrays (mostly zero-copy).

A frame whose layer list is absurdly long (more than ``MAX_LAYERS`` layers, e.g. hundreds
of stacked VLAN tags in a damaged frame) is handed to the reference decoder, so every row
still comes out exactly as the reference makes it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from gropcap.capture.records import RecordBatch
from gropcap.decode import _fast_kernels as K
from gropcap.decode import schema as S
from gropcap.decode.options import DecodeOptions
from gropcap.errors import DecodeError
from gropcap.arrays import arrow_numeric, arrow_strings

__all__ = ["decode_batch", "warm_up", "DEFAULT_OPTIONS"]

DEFAULT_OPTIONS = DecodeOptions()
_DICT_START = 1024        # encap dictionary capacity tried first (grown on overflow)


@lru_cache(maxsize=32)
def _port_tables(options: DecodeOptions) -> tuple[np.ndarray, np.ndarray]:
    """UDP destination port -> (TUN_* code, FOU inner protocol), from DecodeOptions."""
    tun = np.zeros(65536, dtype=np.uint8)
    fou = np.zeros(65536, dtype=np.uint8)
    ports = set(options.vxlan_ports) | set(options.vxlan_gpe_ports) | \
        set(options.geneve_ports) | set(options.gue_ports) | {p for p, _ in options.fou_ports}
    for p in ports:
        tun[p], fou[p] = options.udp_tunnel(p)   # the one rule both decoders use
    tun.setflags(write=False)
    fou.setflags(write=False)
    return tun, fou


def _check_batch(batch: RecordBatch) -> None:
    n = len(batch.offset)
    for name in ("cap_len", "wire_len", "linktype", "ts_ns", "iface", "epb_flags", "record",
                 "file_offset"):
        if len(getattr(batch, name)) != n:
            raise DecodeError(f"RecordBatch.{name} has {len(getattr(batch, name))} elements, "
                              f"offset has {n}", hint="build batches with the capture layer")
    if batch.buf.dtype != np.uint8 or batch.buf.ndim != 1:
        raise DecodeError(f"RecordBatch.buf must be 1-D uint8, got {batch.buf.dtype} "
                          f"{batch.buf.shape}")


def _contig(a, dtype) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype)


def _fixed_binary(mat: np.ndarray, width: int) -> pa.Array:
    mat = np.ascontiguousarray(mat)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), mat.shape[0],
                                                [None, pa.py_buffer(mat)])


def _run_kernel(batch: RecordBatch, options: DecodeOptions):
    n = len(batch.offset)
    tun, fou = _port_tables(options)
    buf = batch.buf
    if buf.flags.writeable:
        # one compiled signature for every caller: mmap windows are read-only anyway
        buf = buf.view()
        buf.setflags(write=False)
    offset = _contig(batch.offset, np.int64)
    cap_len = _contig(batch.cap_len, np.uint32)
    wire_len = _contig(batch.wire_len, np.uint32)
    linktype = _contig(batch.linktype, np.uint16)
    cap = _DICT_START
    while True:
        # one recycled slab holds every output array (see _fast_kernels._Slabs)
        o, (encap_idx, cap_out, bits, file_col) = K.alloc_out(n, (
            ((n,), np.int32), ((n,), np.uint32), ((len(_BOOL_ROWS), (n + 7) // 8), np.uint8),
            ((n,), np.uint16)))
        # status and encap_depth are rows of the u8 matrix (no arrays of their own)
        status, depth = o.u8[K.K_STATUS, :n], o.u8[K.K_ENCAP_DEPTH, :n]
        tab = 1
        while tab < 2 * cap:
            tab <<= 1
        tab_key = np.zeros(tab, dtype=np.uint64)
        tab_val = np.full(tab, -1, dtype=np.int64)
        dict_seq = np.zeros((cap, K.MAX_LAYERS + 2), dtype=np.uint16)
        dict_len = np.zeros(cap, dtype=np.int64)
        ndict, rare = K.decode_kernel(buf, offset, cap_len, wire_len, linktype, o, status,
                                      depth, encap_idx, tun, fou, options.dsa_kind, tab_key,
                                      tab_val, dict_seq, dict_len, cap_out, _BOOL_ROWS, bits)
        if ndict >= 0:
            break
        cap = max(n, 1) if cap < n else cap * 2
    names = ["/".join(K.layer_name(c) for c in dict_seq[j, :dict_len[j]])
             for j in range(ndict)]
    return o, status, depth, encap_idx, names, cap_out, bits, file_col, rare


def _store_row(o, status, depth, i: int, row: dict) -> None:
    """Write one reference-decoded row (fallback frames) into the kernel's matrices."""
    for name, (group, k) in K.LAYOUT.items():
        v = row[name]
        if group == "addr":
            o.addr[k, i, :] = np.frombuffer(v, dtype=np.uint8)
        elif group == "opts":
            o.opts[i, :] = np.frombuffer(v, dtype=np.uint8)
        else:
            getattr(o, group)[k, i] = int(v)
    status[i] = row["status"]
    depth[i] = row["encap_depth"]


def _plan():
    """Per schema field, how its Arrow array is made: (kind, name or group, row, type)."""
    plan, bool_rows = [], []
    for field in S.PACKET_FIELDS:
        name, t = field.name, field.type
        if name in K.RECORD_COLUMNS:
            plan.append(("record", name, -1, t))
        elif name == "encap":
            plan.append(("encap", name, -1, t))
        else:
            group, k = K.LAYOUT[name]
            if pa.types.is_boolean(t):
                plan.append(("bool", group, len(bool_rows), t))
                bool_rows.append(k)
            elif group in ("addr", "opts"):
                plan.append((group, group, k, t))
            else:
                plan.append(("num", group, k, t))
    return plan, np.array(bool_rows, dtype=np.intp)


_PLAN, _BOOL_ROWS = _plan()
# plan entry (kind, group, row) of each rare column -> its "absent" byte (K.RARE_COLUMNS)
_RARE = {(kind, key, k): 0xFF if f.name == "dsa_port" else 0
         for f, (kind, key, k, _t) in zip(S.PACKET_FIELDS, _PLAN) if f.name in K.RARE_COLUMNS}
_CONSTANTS: dict[int, pa.Buffer] = {}


def _constant(t: pa.DataType, n: int, fill: int) -> pa.Array:
    """``n`` values of type ``t`` (at most 16 bytes wide) whose every byte is ``fill``,
    over one shared read-only buffer (grown as needed)."""
    buf = _CONSTANTS.get(fill)
    if buf is None or buf.size < 16 * n:
        arr = np.full(max(16 * n, 1 << 20), fill, dtype=np.uint8)
        arr.setflags(write=False)
        buf = _CONSTANTS[fill] = pa.py_buffer(arr)
    return pa.Array.from_buffers(t, n, [None, buf])


_RECORD_DTYPES = {f.name: f.type.to_pandas_dtype() for f in S.PACKET_FIELDS
                  if f.name in K.RECORD_COLUMNS}


def decode_batch(batch: RecordBatch, options: DecodeOptions = DEFAULT_OPTIONS, *,
                 file_index: int = 0) -> pa.RecordBatch:
    """Decode every record of ``batch`` into an Arrow batch with exactly ``PACKET_SCHEMA``.

    Bit-identical to :func:`gropcap.decode.reference.decode_batch` (same rows, same
    statuses, same ``encap`` dictionary in first-occurrence order, same digests).

    Parameters
    ----------
    batch: a :class:`~gropcap.capture.records.RecordBatch` from the capture layer.
    options: :class:`DecodeOptions` (UDP tunnel ports, DSA tag on plain Ethernet).
    file_index: fills the ``file_index`` column.

    Returns a ``pyarrow.RecordBatch`` (one row per record, in record order). Its columns
    wrap the kernel's output memory without a copy; that memory is reused for a later
    batch only once nothing refers to this one any more. Raises
    :class:`~gropcap.errors.DecodeError` only for a malformed ``RecordBatch`` object, never
    for packet bytes.

    >>> from tests.craft import make_batch                       # doctest: +SKIP
    >>> decode_batch(make_batch([bytes(60)])).column("status")   # doctest: +SKIP
    [2]
    """
    _check_batch(batch)
    n = len(batch.offset)
    o, status, depth, encap_idx, names, cap_out, bits, file_col, rare = _run_kernel(batch,
                                                                                   options)
    cols = K.trim(o, n)     # the columns, n records a row (o: the kernels' padded matrices)
    fallback = np.flatnonzero(encap_idx < 0)
    if len(fallback):
        from gropcap.decode.reference import decode_frame
        if not rare:      # the rows stored below fill every column: clear the rare ones
            K._clear_rows(*o[:7], K.RARE_U8, K.RARE_I8, K.RARE_U16, K.RARE_I16, K.RARE_U32,
                          K.RARE_U64, K.RARE_ADDR, 0, n)
            rare = True
        strings = [names[j] for j in encap_idx.clip(0)] if names else [""] * n
        for i in fallback:
            row = decode_frame(batch.frame(int(i)), int(batch.linktype[i]),
                               int(batch.wire_len[i]), options)
            _store_row(o, status, depth, int(i), row)
            strings[i] = row["encap"]
        encap = arrow_strings(strings).dictionary_encode()
        bits = np.packbits(cols.u8[_BOOL_ROWS], axis=1, bitorder="little")   # rows changed
    else:
        encap = pa.DictionaryArray.from_arrays(arrow_numeric(encap_idx, pa.int32()),
                                               arrow_strings(names), safe=False)
    file_col[:] = file_index
    record_cols = {
        "ts_ns": batch.ts_ns, "cap_len": cap_out, "wire_len": batch.wire_len,
        "linktype": batch.linktype, "iface": batch.iface, "file_index": file_col,
        "record": batch.record, "file_offset": batch.file_offset,
        "epb_flags": batch.epb_flags,
    }
    arrays = []
    for kind, key, k, t in _PLAN:
        if not rare and (kind, key, k) in _RARE:
            arr = _constant(t, n, _RARE[kind, key, k])   # no VLAN, DSA or tunnel in the batch
        elif kind == "num":
            arr = arrow_numeric(getattr(cols, key)[k], t)
        elif kind == "bool":
            arr = pa.Array.from_buffers(t, n, [None, pa.py_buffer(bits[k])])
        elif kind == "addr":
            arr = _fixed_binary(cols.addr[k], 16)
        elif kind == "opts":
            arr = _fixed_binary(cols.opts, K.C.TCP_MAX_OPTLEN)
        elif kind == "record":
            arr = arrow_numeric(np.asarray(record_cols[key]).astype(_RECORD_DTYPES[key],
                                                                    copy=False), t)
        else:
            arr = encap
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=S.PACKET_SCHEMA)


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the kernels on a one-frame batch."""
    z = np.zeros(1, dtype=np.int64)
    batch = RecordBatch(buf=np.zeros(64, dtype=np.uint8), offset=z,
                        cap_len=np.full(1, 64, np.uint32), wire_len=np.full(1, 64, np.uint32),
                        ts_ns=z, linktype=np.ones(1, np.uint16), iface=np.zeros(1, np.uint16),
                        epb_flags=np.zeros(1, np.uint32), record=np.zeros(1, np.uint64),
                        file_offset=np.zeros(1, np.uint64))
    decode_batch(batch)
