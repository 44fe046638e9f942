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
  null where the header is absent), dictionary-encoded (:func:`address_text`);
* ``ts_ns`` is a ``timestamp[ns, UTC]`` (the same int64 nanoseconds, typed as a time).

``packets.parquet`` holds :data:`DEFAULT_PACKET_COLUMNS` unless asked otherwise
(``--packet-columns all|default|LIST``, :func:`parse_packet_columns`): what people filter
on (time, addresses and ports, flow, the verdicts of every model with their names,
super-packet ids, sizes); ``all`` writes every column of the packet table.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from gropcap.addresses import ipv6_text
from gropcap.arrays import arrow_masked, arrow_numeric, arrow_strings, numpy_of
from gropcap.io._text_kernels import word_index


TS_TYPE = pa.timestamp("ns", tz="UTC")
ADDRESS_COLUMNS = (("ip_src", "ip_version"), ("ip_dst", "ip_version"),
                   ("outer_ip_src", "outer_ip_version"), ("outer_ip_dst", "outer_ip_version"))


# the GRO verdicts of a model (unprefixed: the primary model; ``<model>_`` the others):
# always written, ``gropcap.load`` rebuilds each model's GroResult from them
VERDICT_COLUMNS = ("flow_id", "gro_seg", "gro_role", "reason", "rx_queue", "poll_id",
                   "gro_role_name", "reason_name")
# what people filter on (docs/schema.md, "packets.parquet"); the rest: --packet-columns all
DEFAULT_PACKET_COLUMNS = (
    "ts_ns", "file_index", "record", "cap_len", "wire_len", "status", "encap",
    "ip_version", "l4_proto", "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags",
    "payload_len", "tun_type", "tun_key", "status_name", "ip_src_text", "ip_dst_text",
    "outer_ip_src_text", "outer_ip_dst_text")
MODEL_PREFIXES = ("ideal_", "napi_")
# the verdict columns the ideal model holds at one value (it has no RX queues and no
# polls: docs/schema.md): ``ideal_rx_queue`` and ``ideal_poll_id`` are written only when
# asked for (``all`` or by name), and ``gropcap.load`` gives them back (io.load). 9 ns a
# row of the real capture's packets.parquet (docs/performance.md, "Session 40")
IDEAL_CONSTANTS = {"rx_queue": 0, "poll_id": -1}


def _is_verdict(name: str) -> bool:
    """Whether ``name`` is a verdict column every selection writes."""
    if name in VERDICT_COLUMNS:
        return True
    for p in MODEL_PREFIXES:
        if name.startswith(p) and name[len(p):] in VERDICT_COLUMNS:
            return not (p == "ideal_" and name[len(p):] in IDEAL_CONSTANTS)
    return False


def all_packet_columns() -> list[str]:
    """Every column ``packets.parquet`` can hold (both models run), in file order."""
    from gropcap.decode.schema import PACKET_COLUMNS
    from gropcap.gro.result import PACKET_RESULT_DTYPES
    names = list(PACKET_COLUMNS) + list(PACKET_RESULT_DTYPES)
    names += [p + k for p in MODEL_PREFIXES for k in PACKET_RESULT_DTYPES if k != "flow_id"]
    return readable_names(names)


def parse_packet_columns(text) -> str | tuple[str, ...]:
    """``"all"``, ``"default"`` or a comma-separated list of columns (``default`` may be one
    of them: ``default,ip_ttl,ip_id``) -> ``"all"``, ``"default"`` or a tuple of names.

    Raises:
        ConfigError: a name that is no column of ``packets.parquet``.

    >>> parse_packet_columns("default,ip_ttl")
    ('default', 'ip_ttl')
    """
    from gropcap.errors import ConfigError
    if isinstance(text, (list, tuple)):
        items = [str(x).strip() for x in text]
    else:
        items = [x.strip() for x in str(text or "default").split(",")]
    items = [x for x in items if x]
    if items in (["all"], ["default"]):
        return items[0]
    if "all" in items:
        return "all"
    known = set(all_packet_columns())
    unknown = [x for x in items if x != "default" and x not in known]
    if unknown:
        raise ConfigError(f"no packet column {', '.join(unknown)}",
                          hint="use all, default, or columns of packets.parquet "
                               "(docs/schema.md), e.g. default,ip_ttl,ip_id")
    return tuple(items)


def select_packet_columns(names, spec="default") -> list[str]:
    """The columns of ``names`` (a packet table with verdicts and readable columns, in its
    order) that ``spec`` (:func:`parse_packet_columns`) writes; the verdict columns of
    every model always, but the ideal model's constant ones (:data:`IDEAL_CONSTANTS`)."""
    spec = parse_packet_columns(spec) if isinstance(spec, str) and spec not in (
        "all", "default") else spec
    if spec == "all":
        return list(names)
    want = set(spec) if spec != "default" else {"default"}
    if "default" in want:
        want |= set(DEFAULT_PACKET_COLUMNS)
    return [n for n in names if n in want or _is_verdict(n)]


def readable_names(names) -> list[str]:
    """The column names :func:`readable` gives a table with columns ``names``."""
    names = list(names)
    out = list(names)
    out += [c + "_name" for c in names if _names_of(c) is not None
            and c + "_name" not in names]
    out += [c + "_text" for c, v in ADDRESS_COLUMNS if c in names and v in names
            and c + "_text" not in names]
    return out


def _names_of(column: str) -> dict[int, str] | None:
    """Code -> name table of a code column (None: not a code column); one dict per table
    for the run (:func:`named` keeps each table's Arrow dictionary by it)."""
    from gropcap.decode.schema import STATUS_NAMES
    from gropcap.gro.reasons import ROLE_NAMES

    if column == "status":
        return STATUS_NAMES
    if column in ("reason", "end_reason") or column.endswith("_reason") and \
            column.split("_", 1)[0] in ("ideal", "napi"):
        return _reason_names()
    if column == "gro_role" or column.endswith("_gro_role"):
        return ROLE_NAMES
    return None


@functools.cache
def _reason_names() -> dict[int, str]:
    """Code -> name of ``gro.reasons.REASONS``, one dict for the run."""
    from gropcap.gro.reasons import REASONS
    return {code: r.name for code, r in REASONS.items()}


# id(names) -> (names, sorted codes, Arrow dictionary, uint8 code -> index table or None)
_NAMED: dict = {}


def _dictionary_of(names: dict[int, str]):
    got = _NAMED.get(id(names))
    if got is None or got[0] is not names:
        keys = sorted(names)
        lookup = None
        if max(keys) < 256:
            lookup = np.full(256, -1, np.int16)
            lookup[keys] = np.arange(len(keys), dtype=np.int16)
        got = (names, keys, arrow_strings([names[k] for k in keys]), lookup)
        if len(_NAMED) > 64:
            _NAMED.clear()
        _NAMED[id(names)] = got
    return got[1:]


def named(codes: pa.ChunkedArray | pa.Array, names: dict[int, str]) -> pa.Array:
    """Codes -> dictionary<int16, string> with every name of ``names`` in its dictionary
    (code order), so each chunk and each file carries the same dictionary; codes without
    a name are null.

    >>> named(pa.array([2, 0], pa.uint8()), {0: "alone", 1: "head", 2: "merged"}).to_pylist()
    ['merged', 'alone']
    """
    codes_np = numpy_of(codes)
    keys, dictionary, lookup = _dictionary_of(names)
    if codes_np.dtype == np.uint8 and lookup is not None:
        # (every code column: a 256-entry table kept for the run, no widening of the
        # codes; take, not fancy indexing: half the time)
        idx = lookup.take(codes_np)
    else:
        codes_np = codes_np.astype(np.int64)
        table = np.full(max(max(keys), int(codes_np.max()) if len(codes_np) else 0) + 1,
                        -1, np.int16)
        table[keys] = np.arange(len(keys), dtype=np.int16)
        idx = table[codes_np] if len(codes_np) else np.zeros(0, np.int16)
    # (indices from the table are in the dictionary's bounds or -1, which is masked:
    # Arrow's bounds check, a quarter of the call, is left out)
    if not len(idx) or idx.min() >= 0:
        # every code has a name (the rows of a run, mostly): no validity to build
        return pa.DictionaryArray.from_arrays(arrow_numeric(idx, pa.int16()), dictionary,
                                              safe=False)
    return pa.DictionaryArray.from_arrays(arrow_masked(idx, idx < 0, pa.int16()),
                                          dictionary, safe=False)


def _distinct(values: pa.Array) -> tuple[list, np.ndarray]:
    """The distinct values of ``values`` (Python objects, first-appearance order) and the
    position of each row's value among them: Arrow's hash table, where ``np.unique``
    sorts every row (0.5 s of a 3 M-packet ``--out`` run for the address texts)."""
    import pyarrow.compute as pc
    d = pc.dictionary_encode(values)
    return d.dictionary.to_pylist(), numpy_of(d.indices).astype(np.int64)


# IPv6 address (16 bytes) -> its text, kept across calls: a run formats each batch's
# addresses, and the same few thousand come back batch after batch (formatting them
# again was 0.7 s of a 2 M-packet --out run); bounded. (IPv4 texts are made by Arrow
# compute, batch by batch: cheaper than looking them up one by one.)
_TEXTS: dict = {}
_TEXTS_MAX = 1 << 20


def _texts(uniq, fmt) -> list[str]:
    """``fmt(u)`` of each of ``uniq`` through :data:`_TEXTS`."""
    cache, out = _TEXTS, []
    for u in uniq:
        t = cache.get(u)
        if t is None:
            t = fmt(u)
            if len(cache) < _TEXTS_MAX:
                cache[u] = t
        out.append(t)
    return out


TEXT_TYPE = pa.dictionary(pa.int32(), pa.string())


def address_text(raw: pa.ChunkedArray | pa.Array, version) -> pa.Array:
    """16-byte addresses (IPv4 mapped) + IP version -> text, null where version is 0:
    a dictionary array (:data:`TEXT_TYPE`) whose dictionary is the call's distinct
    addresses, each formatted once (IPv4 by Arrow compute, IPv6 in Python, its text kept
    for the next calls, :data:`_TEXTS`).

    A dictionary and not a string per row: Parquet writes its indices as they are (8 ns
    a row of the real capture for the two columns against 34 as strings, and no gather
    of the bytes, docs/performance.md "Session 40"); pandas reads a category, DuckDB a
    VARCHAR, and ``ip_src_text == "192.0.2.1"`` works in all of them.
    """
    raw = raw.combine_chunks() if isinstance(raw, pa.ChunkedArray) else raw
    ver = numpy_of(version) if isinstance(version, (pa.Array, pa.ChunkedArray)) else \
        np.asarray(version)
    n = len(raw)
    if not n:
        return pa.array([], TEXT_TYPE)
    buf = np.frombuffer(raw.buffers()[1], np.uint8)[raw.offset * 16:(raw.offset + n) * 16]
    rows = buf.reshape(n, 16)
    # each row -> an index into the texts of the distinct addresses (-1: null): no Python
    # object per row
    v4 = ver == 4
    v6 = ver == 6
    if not v4.any() and not v6.any():
        return pa.nulls(n, TEXT_TYPE)       # no such layer (the outer addresses of
        #                                     a capture without tunnels)
    idx = np.full(n, -1, np.int32)     # (the dictionary's index type: no widening)
    parts = []
    if v4.any():
        # IPv4 (mapped): the last 4 bytes as one uint32, each distinct value formatted
        # once, by Arrow compute (no Python object per address: a capture of many flows
        # has thousands in every batch); the words taken as a strided uint32 view (a
        # boolean take of the (n, 16) byte rows' last 4 columns cost half the call)
        last = buf.view(np.uint32).reshape(n, 4)[:, 3]
        if v4.all():
            uniq = word_index(np.ascontiguousarray(last), idx)
        else:
            sub = np.empty(int(np.count_nonzero(v4)), np.int32)
            uniq = word_index(np.ascontiguousarray(last[v4]), sub)
            idx[v4] = sub
        parts.append(v4_texts(uniq.view(np.uint8).reshape(len(uniq), 4)))
    if v6.any():
        six = np.ascontiguousarray(rows[v6])
        uniq, inverse = _distinct(pa.Array.from_buffers(pa.binary(16), len(six),
                                                        [None, pa.py_buffer(six)]))
        idx[v6] = inverse + sum(len(p) for p in parts)
        parts.append(arrow_strings(_texts(uniq, ipv6_text)))
    texts = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    # (every index is in the dictionary's bounds or -1, masked: no bounds check)
    if v4.all() or v6.all():
        return pa.DictionaryArray.from_arrays(arrow_numeric(idx, pa.int32()), texts,
                                              safe=False)
    return pa.DictionaryArray.from_arrays(arrow_masked(idx, idx < 0, pa.int32()), texts,
                                          safe=False)


def v4_texts(octets: np.ndarray) -> pa.Array:
    """Dotted quads of the ``(m, 4)`` uint8 rows (network order), by Arrow compute (no
    Python object per address; also the flows table's, ``run.accumulators.addr_texts``)."""
    import pyarrow.compute as pc
    m = len(octets)
    if not m:
        return arrow_strings([])
    parts = [pc.cast(arrow_numeric(np.ascontiguousarray(octets[:, i]), pa.uint8()),
                     pa.string()) for i in range(4)]
    dots = pa.StringArray.from_buffers(m, pa.py_buffer(np.arange(m + 1, dtype=np.int32)),
                                       pa.py_buffer(b"." * m))
    return pc.binary_join_element_wise(*parts, dots)


def readable(table: pa.Table, columns=None) -> pa.Table:
    """``table`` with the readable columns added after the compact ones (module docstring).

    ``columns``: only these columns of the result (``packets.parquet``'s selection,
    :func:`select_packet_columns`), the readable ones computed only when kept.
    Idempotent: a table that has them already is returned as is.
    """
    if columns is not None:
        return _readable_select(table, columns)
    names = table.schema.names
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


def _readable_select(table: pa.Table, columns) -> pa.Table:
    """:func:`readable` restricted to ``columns`` (in the order :func:`readable` gives)."""
    names = table.schema.names
    keep = set(columns)
    arrays, fields = [], []
    ts = table.schema.field("ts_ns").type if "ts_ns" in names else None
    for name in readable_names(names):
        if name not in keep:
            continue
        if name in names:
            col = table.column(name)
            field = table.schema.field(name)
            if name == "ts_ns" and ts != TS_TYPE:
                col = col.cast(TS_TYPE)
                field = pa.field("ts_ns", TS_TYPE)     # as readable() sets it
            arrays.append(col)
            fields.append(field)
        elif name.endswith("_name"):
            base = name[:-len("_name")]
            arr = named(table.column(base), _names_of(base))
            arrays.append(pa.chunked_array([arr]))
            fields.append(pa.field(name, arr.type))
        else:
            base = name[:-len("_text")]
            arr = address_text(table.column(base), table.column(dict(ADDRESS_COLUMNS)[base]))
            arrays.append(pa.chunked_array([arr]))
            fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, table.schema.metadata))


__all__ = ["readable", "named", "address_text", "TS_TYPE", "TEXT_TYPE",
           "DEFAULT_PACKET_COLUMNS", "IDEAL_CONSTANTS",
           "VERDICT_COLUMNS", "parse_packet_columns", "select_packet_columns",
           "readable_names", "all_packet_columns"]
