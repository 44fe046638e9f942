"""Readable columns for notebooks and SQL, added to the packet and super-packet tables.

Layer: Arrow tables (decoded columns + GRO verdicts, super-packet rows) -> the same tables
as users see them in memory (``Analysis.packets`` / ``.superpackets``), in the Parquet
files and after ``gropcap.load(DIR)``. The engines keep reading the compact columns of
``Analysis.decoded`` and the GroResult arrays; nothing here feeds back into them.

* every code column keeps its code and gains a ``*_name`` column: a dictionary-encoded
  string whose dictionary is the whole table of names in code order (``reason_name``,
  ``gro_role_name``, ``end_reason_name``, ``status_name``, per model for the prefixed
  verdict columns), so DuckDB and pandas show ``FLUSH_IP_ID`` (a pandas category) while
  ``reason == 61`` keeps working;
* each 16-byte address column gains a ``*_text`` string (``192.0.2.1``, ``2001:db8::1``;
  null where the header is absent);
* ``ts_ns`` is a ``timestamp[ns, UTC]`` (the same int64 nanoseconds, typed as a time).
"""

from __future__ import annotations

import ipaddress

import numpy as np
import pyarrow as pa

TS_TYPE = pa.timestamp("ns", tz="UTC")
ADDRESS_COLUMNS = (("ip_src", "ip_version"), ("ip_dst", "ip_version"),
                   ("outer_ip_src", "outer_ip_version"), ("outer_ip_dst", "outer_ip_version"))


def _names_of(column: str) -> dict[int, str] | None:
    """Code -> name table of a code column (None: not a code column)."""
    from gropcap.decode.schema import STATUS_NAMES
    from gropcap.gro.reasons import REASONS, ROLE_NAMES

    if column == "status":
        return STATUS_NAMES
    if column in ("reason", "end_reason") or column.endswith("_reason") and \
            column.split("_", 1)[0] in ("ideal", "napi"):
        return {code: r.name for code, r in REASONS.items()}
    if column == "gro_role" or column.endswith("_gro_role"):
        return ROLE_NAMES
    return None


def named(codes: pa.ChunkedArray | pa.Array, names: dict[int, str]) -> pa.Array:
    """Codes -> dictionary<int16, string> with every name of ``names`` in its dictionary
    (code order), so each chunk and each file carries the same dictionary; codes without
    a name are null.

    >>> named(pa.array([2, 0], pa.uint8()), {0: "alone", 1: "head", 2: "merged"}).to_pylist()
    ['merged', 'alone']
    """
    codes_np = np.asarray(codes.to_numpy() if isinstance(codes, pa.Array)
                          else codes.to_numpy(), dtype=np.int64)
    keys = sorted(names)
    lookup = np.full(max(max(keys), int(codes_np.max()) if len(codes_np) else 0) + 1, -1,
                     np.int16)
    lookup[keys] = np.arange(len(keys), dtype=np.int16)
    idx = lookup[codes_np] if len(codes_np) else np.zeros(0, np.int16)
    return pa.DictionaryArray.from_arrays(
        pa.array(idx, pa.int16(), mask=idx < 0), pa.array([names[k] for k in keys]))


def address_text(raw: pa.ChunkedArray | pa.Array, version) -> pa.Array:
    """16-byte addresses (IPv4 mapped) + IP version -> text, null where version is 0.

    Each distinct address is formatted once (a capture holds few of them).
    """
    raw = raw.combine_chunks() if isinstance(raw, pa.ChunkedArray) else raw
    ver = np.asarray(version.to_numpy() if hasattr(version, "to_numpy") else version)
    n = len(raw)
    if not n:
        return pa.array([], pa.string())
    buf = np.frombuffer(raw.buffers()[1], np.uint8)[raw.offset * 16:(raw.offset + n) * 16]
    rows = buf.reshape(n, 16)
    out = np.full(n, None, object)
    v4 = ver == 4
    if v4.any():
        # IPv4 (mapped): the last 4 bytes as one uint32, unique values formatted once
        words = np.ascontiguousarray(rows[v4, 12:16]).view(">u4").ravel()
        uniq, inverse = np.unique(words, return_inverse=True)
        text = np.array([str(ipaddress.IPv4Address(int(w))) for w in uniq.tolist()], object)
        out[v4] = text[inverse.ravel()]
    v6 = ver == 6
    if v6.any():
        uniq, inverse = np.unique(np.ascontiguousarray(rows[v6]).view("V16").ravel(),
                                  return_inverse=True)
        text = np.array([str(ipaddress.IPv6Address(bytes(u))) for u in uniq.tolist()],
                        object)
        out[v6] = text[inverse.ravel()]
    return pa.array(out, pa.string())


def readable(table: pa.Table) -> pa.Table:
    """``table`` with the readable columns added after the compact ones (module docstring).

    Idempotent: a table that has them already is returned as is.
    """
    names = table.column_names
    for col in list(names):
        table_names = _names_of(col)
        if table_names is not None and col + "_name" not in names:
            table = table.append_column(col + "_name", named(table.column(col), table_names))
    for col, ver in ADDRESS_COLUMNS:
        if col in names and ver in names and col + "_text" not in names:
            table = table.append_column(col + "_text",
                                        address_text(table.column(col), table.column(ver)))
    if "ts_ns" in names and table.schema.field("ts_ns").type != TS_TYPE:
        i = names.index("ts_ns")
        table = table.set_column(i, pa.field("ts_ns", TS_TYPE),
                                 table.column("ts_ns").cast(TS_TYPE))
    return table


__all__ = ["readable", "named", "address_text", "TS_TYPE"]
