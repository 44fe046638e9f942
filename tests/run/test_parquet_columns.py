"""Parquet for notebooks and SQL (issue 16 item 8): names next to codes, readable
addresses, a timestamp type, honest metadata, file modes that follow the umask, and
docs/schema.md documenting every column of the three files."""

from __future__ import annotations

import json
import os
import re
import stat

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gropcap.decode.schema import STATUS_NAMES
from gropcap.gro.reasons import REASONS, ROLE_NAMES
from gropcap.io.columns import TEXT_TYPE, TS_TYPE, address_text, named
from gropcap.io.load import load
from gropcap.io.parquet import can_defer, file_schema, write_analysis
from gropcap.run.memory import analyze

from where import TESTS

HERE = TESTS
GRE = os.path.join(HERE, "..", "sample_pcaps", "crafted_gre.pcap")
IP6 = os.path.join(HERE, "..", "sample_pcaps", "crafted_ip6ip6.pcap")
SCHEMA_MD = os.path.join(HERE, "..", "docs", "schema.md")
FILES = ("packets.parquet", "superpackets.parquet", "flows.parquet")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    a = analyze([GRE, IP6])
    out = tmp_path_factory.mktemp("out")
    old = os.umask(0o022)
    try:
        write_analysis(a, str(out), columns="all")
    finally:
        os.umask(old)
    return a, out


def test_names_match_codes(written):
    a, out = written
    pk = pq.read_table(out / "packets.parquet")
    sp = pq.read_table(out / "superpackets.parquet")
    reasons = {c: r.name for c, r in REASONS.items()}
    for table, code, names in ((pk, "reason", reasons), (pk, "ideal_reason", reasons),
                               (pk, "gro_role", ROLE_NAMES), (pk, "status", STATUS_NAMES),
                               (sp, "end_reason", reasons)):
        col = table.column(code + "_name")
        assert pa.types.is_dictionary(col.type), code
        assert col.to_pylist() == [names[c] for c in table.column(code).to_pylist()], code
    # pandas shows the names as a category, and the codes still filter
    df = pk.to_pandas()
    assert str(df["reason_name"].dtype) == "category"
    assert set(df.loc[df["reason"] == 0, "reason_name"]) == {"MERGED"}


def test_addresses_are_readable_and_timestamps_typed(written):
    a, out = written
    pk = pq.read_table(out / "packets.parquet")
    assert pk.schema.field("ts_ns").type == TS_TYPE
    assert pk.column("ts_ns").cast(pa.int64()).equals(a.decoded.column("ts_ns"))
    src = pk.column("ip_src_text").to_pylist()
    ver = pk.column("ip_version").to_pylist()
    assert "192.0.2.1" in src and any(s and ":" in s for s in src)     # IPv4 and IPv6
    assert all((s is None) == (v == 0) for s, v in zip(src, ver))
    outer = pk.column("outer_ip_src_text").to_pylist()
    assert set(outer) - {None}, "tunnelled packets have outer addresses"


def test_address_text_formats_each_version():
    raw = pa.array([bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 7]),
                    bytes.fromhex("20010db8000000000000000000000001"), bytes(16)],
                   pa.binary(16))
    assert address_text(raw, np.array([4, 6, 0])).to_pylist() == \
        ["192.0.2.7", "2001:db8::1", None]
    assert named(pa.array([5], pa.uint8()), {1: "a"}).to_pylist() == [None]


@pytest.mark.parametrize("dtype", [np.uint8, np.int64])
@pytest.mark.parametrize("gaps", [False, True])
def test_named_equals_one_row_at_a_time(dtype, gaps):
    # each row's name (null for a code without one), the whole name table as the
    # dictionary in code order, whatever the codes' type
    rng = np.random.default_rng(int(gaps))
    names = {int(k): f"n{k}" for k in rng.choice(200, 40, replace=False)}
    pool = np.array(sorted(names) + ([201, 7, 255] if gaps else []))
    codes = rng.choice(pool, 5000).astype(dtype)
    got = named(pa.array(codes), names)
    assert got.to_pylist() == [names.get(int(c)) for c in codes]
    assert got.dictionary.to_pylist() == [names[k] for k in sorted(names)]
    assert got.type == pa.dictionary(pa.int16(), pa.string())
    assert got.null_count == sum(int(c) not in names for c in codes)


@pytest.mark.parametrize("distinct", [1, 3, 5000])
def test_word_index_gives_each_word_its_first_appearance(distinct):
    # the IPv4 texts' hash table: 255.255.255.255 (the table's empty-slot word) and
    # 0.0.0.0 among the words, the table doubled many times for 5000 of them
    from gropcap.io._text_kernels import word_index
    rng = np.random.default_rng(distinct)
    pool = np.unique(rng.integers(0, 2 ** 32, distinct + 2, dtype=np.uint64)).astype(
        np.uint32)[:distinct]
    pool[:2] = [0xFFFFFFFF, 0][:len(pool[:2])]
    words = np.repeat(rng.choice(pool, 4000), rng.integers(1, 4, 4000))
    idx = np.empty(len(words), np.int32)      # (the dictionary indices address_text uses)
    uniq = word_index(words, idx)
    assert np.array_equal(uniq[idx], words)
    _, first = np.unique(words, return_index=True)
    assert np.array_equal(uniq, words[np.sort(first)])


def test_address_text_equals_one_row_at_a_time():
    # distinct addresses found by a hash table, repeated, mixed versions, chunked and
    # sliced input: each row's text is what ipaddress gives for that row alone
    import ipaddress
    rng = np.random.default_rng(11)
    pool = rng.integers(0, 256, (40, 16)).astype(np.uint8)
    pool[:20, :12] = np.frombuffer(bytes(10) + b"\xff\xff", np.uint8)
    pick = rng.integers(0, 40, 3000)
    ver = np.where(pick < 20, 4, 6)
    ver[rng.random(3000) < 0.1] = 0
    raw = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), 3000, [None, pa.py_buffer(np.ascontiguousarray(pool[pick]))])
    want = [None if v == 0 else str(ipaddress.IPv4Address(r[12:]) if v == 4
                                    else ipaddress.IPv6Address(r))
            for r, v in zip([bytes(x) for x in pool[pick]], ver)]
    assert address_text(raw, ver).to_pylist() == want
    chunked = pa.chunked_array([raw.slice(0, 1000), raw.slice(1000)])
    assert address_text(chunked, ver).to_pylist() == want
    assert address_text(raw.slice(7, 50), ver[7:57]).to_pylist() == want[7:57]
    assert address_text(raw.slice(0, 0), ver[:0]).to_pylist() == []
    # every row IPv4 (the path without a mask), from an offset into the buffer
    v4 = np.flatnonzero(ver == 4)
    four = raw.take(pa.array(v4)).slice(3)
    assert address_text(four, ver[v4][3:]).to_pylist() == [want[i] for i in v4[3:]]
    # no row with the layer (outer addresses without tunnels): every text null, typed
    none = address_text(raw.slice(5, 20), np.zeros(20, np.uint8))
    assert none.type == TEXT_TYPE and none.to_pylist() == [None] * 20
    # a dictionary of the call's distinct texts, each once
    got = address_text(raw, ver)
    assert got.type == TEXT_TYPE
    texts = got.dictionary.to_pylist()
    assert len(texts) == len(set(texts)) == len({w for w in want if w is not None})


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xDB8, 0xABCD, 0x10]), min_size=8,
                max_size=8),
       st.binary(min_size=16, max_size=16), st.booleans())
def test_ipv6_text_is_what_ipaddress_prints(groups, raw, grouped):
    """addresses.ipv6_text (inet_ntop, ipaddress for embedded IPv4): zero runs of every
    length and place, ties, mapped and compatible IPv4, random bytes."""
    import ipaddress
    import struct

    from gropcap.addresses import ipv6_text
    b = struct.pack("!8H", *groups) if grouped else raw
    assert ipv6_text(b) == str(ipaddress.IPv6Address(b))
    for mapped in (bytes(10) + b"\xff\xff" + b[12:], bytes(12) + b[12:]):
        assert ipv6_text(mapped) == str(ipaddress.IPv6Address(mapped))


def test_in_memory_written_and_loaded_tables_agree(written):
    a, out = written
    b = load(out)
    for name, mem in (("packets", a.packets), ("superpackets", a.superpackets),
                      ("flows", a.flows)):
        disk = pq.read_table(out / f"{name}.parquet").replace_schema_metadata(None)
        # the file declares its never-null columns so; load gives the table as built
        assert disk.schema.equals(file_schema(mem.schema, {})), name
        assert all(f.nullable for f in mem.schema), name
        assert getattr(b, name).schema.equals(mem.schema), name
        # values (per-chunk dictionaries of `encap` differ between chunkings)
        assert getattr(b, name).to_pylist() == mem.to_pylist(), name
    assert b.decoded.to_pylist() == a.decoded.to_pylist()


def test_metadata_lists_the_models_not_one(written):
    _, out = written
    meta = pq.read_schema(out / "packets.parquet").metadata
    assert json.loads(meta[b"gropcap.models"]) == ["ideal", "napi"]
    assert "model" not in json.loads(meta[b"gropcap.config"])


def test_files_follow_the_umask(written, tmp_path):
    _, out = written
    for name in FILES:
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o644, name
    a = analyze([GRE], models=("ideal",))
    old = os.umask(0o077)
    try:
        write_analysis(a, str(tmp_path / "private"))
    finally:
        os.umask(old)
    for name in FILES:
        assert stat.S_IMODE(os.stat(tmp_path / "private" / name).st_mode) == 0o600, name


def _documented() -> set[str]:
    """Column names docs/schema.md writes in backticks; ``*x`` stands for ``ip_x`` and
    ``outer_ip_x``, ``<model>_x`` for ``ideal_x`` and ``napi_x``."""
    out = set()
    for tok in re.findall(r"`([A-Za-z0-9_*<>]+)`", open(SCHEMA_MD).read()):
        if tok.startswith("*"):
            out |= {"ip_" + tok[1:], "outer_ip_" + tok[1:]}
        elif tok.startswith("<model>_"):
            out |= {m + tok[7:] for m in ("ideal", "napi")}
        else:
            out.add(tok)
    return out


def test_schema_md_documents_every_column(written):
    _, out = written
    documented = _documented()
    for name in FILES:
        cols = pq.read_schema(out / name).names
        missing = [c for c in cols if c not in documented]
        assert not missing, f"{name}: columns not in docs/schema.md: {missing}"


def test_decode_output_is_readable_too(tmp_path):
    from click.testing import CliRunner

    from gropcap.cli import main
    out = tmp_path / "p.parquet"
    r = CliRunner().invoke(main, ["decode", GRE, "-o", str(out)])
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.schema.field("ts_ns").type == TS_TYPE
    assert set(t.column("status_name").to_pylist()) == {"OK"}
    assert t.column("ip_src_text")[0].as_py() == "192.0.2.1"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_address_texts_are_kept_across_calls_and_bounded(monkeypatch):
    # a run formats each distinct IPv6 address once, not once per batch (IPv4 texts are
    # made by Arrow compute every call); past the bound the texts are formatted again
    # and still right
    import gropcap.io.columns as columns
    calls = []
    v6 = columns.ipv6_text
    monkeypatch.setattr(columns, "ipv6_text", lambda b: calls.append(b) or v6(b))
    monkeypatch.setattr(columns, "_TEXTS", {})
    raw = pa.array([bytes(10) + b"\xff\xff" + bytes([192, 0, 2, k]) for k in range(5)] +
                   [bytes.fromhex("20010db8") + bytes(11) + bytes([k]) for k in range(5)],
                   pa.binary(16))
    ver = np.array([4] * 5 + [6] * 5)
    want = [f"192.0.2.{k}" for k in range(5)] + \
        ["2001:db8::"] + [f"2001:db8::{k}" for k in range(1, 5)]
    assert address_text(raw, ver).to_pylist() == want
    assert len(calls) == 5
    assert address_text(raw.slice(3), ver[3:]).to_pylist() == want[3:]
    assert len(calls) == 5                      # all known: nothing formatted again
    monkeypatch.setattr(columns, "_TEXTS", {})
    monkeypatch.setattr(columns, "_TEXTS_MAX", 3)
    for _ in range(2):
        assert address_text(raw, ver).to_pylist() == want
    assert len(columns._TEXTS) == 3 and len(calls) == 5 + 5 + 2
    # IPv4 only, IPv6 only, neither
    assert address_text(raw.slice(0, 5), ver[:5]).to_pylist() == want[:5]
    assert address_text(raw.slice(5), ver[5:]).to_pylist() == want[5:]
    assert address_text(raw.slice(0, 2), np.zeros(2)).to_pylist() == [None, None]


def _statistics(path: str) -> dict:
    """Per column of the first row group: whether it carries min/max statistics."""
    rg = pq.ParquetFile(path).metadata.row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).is_stats_set
            for i in range(rg.num_columns)}


@pytest.mark.parametrize("mode", ["memory", "stream"])
def test_row_groups_carry_statistics_for_what_readers_prune_by(mode, tmp_path):
    """Every writer (in memory, bounded memory) gives the numeric columns min/max
    statistics (a reader skips row groups by time, flow, super-packet or code) and the
    string columns none (io.parquet.parquet_options); the names load back as
    dictionaries."""
    from gropcap.run.stream import stream_analyze
    out = str(tmp_path / mode)
    if mode == "memory":
        write_analysis(analyze([GRE, IP6]), out)
    else:
        stream_analyze([GRE, IP6], out_dir=out, threads=1)
    stats = _statistics(os.path.join(out, "packets.parquet"))
    for col in ("ts_ns", "flow_id", "gro_seg", "reason", "ideal_gro_seg", "file_index"):
        assert stats[col], col
    for col in ("reason_name", "ip_src_text", "encap"):
        assert not stats[col], col
    sp = _statistics(os.path.join(out, "superpackets.parquet"))
    assert sp["seg_id"] and sp["first_packet"] and not sp["model"]
    fl = _statistics(os.path.join(out, "flows.parquet"))
    assert fl["flow_id"] and fl["packets"] and not fl["src"]
    t = pq.read_table(os.path.join(out, "packets.parquet"))
    assert pa.types.is_dictionary(t.schema.field("reason_name").type)
    assert t.schema.field("ip_src_text").type == TEXT_TYPE


def _encodings(path: str) -> dict:
    """Per column of every row group: the set of encodings of its pages."""
    md = pq.ParquetFile(path).metadata
    got: dict = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            got.setdefault(rg.column(i).path_in_schema, set()).update(
                rg.column(i).encodings)
    return got


@pytest.mark.parametrize("mode", ["memory", "stream"])
def test_64_bit_columns_are_delta_encoded(mode, tmp_path):
    """Every writer stores the 64-bit columns (times, records, ids but the poll ids) as
    DELTA_BINARY_PACKED (io.parquet.delta_encoded) and the others as plain pages,
    every page compressed with LZ4; the values read back are the ones written (the
    in-memory tables)."""
    from gropcap.io.parquet import delta_encoded
    from gropcap.run.stream import stream_analyze
    out = str(tmp_path / mode)
    a = analyze([GRE, IP6])
    if mode == "memory":
        write_analysis(a, out)
    else:
        stream_analyze([GRE, IP6], out_dir=out, threads=1)
    for name in FILES:
        path = os.path.join(out, name)
        schema = pq.read_schema(path)
        enc = _encodings(path)
        wide = [f.name for f in schema if delta_encoded(f)]
        assert wide and all("DELTA_BINARY_PACKED" in enc[c] for c in wide), (name, enc)
        assert not any("DELTA_BINARY_PACKED" in enc[f.name] for f in schema
                       if f.name not in wide), (name, enc)
    packets = pq.read_schema(os.path.join(out, "packets.parquet"))
    assert {"ts_ns", "record", "flow_id", "gro_seg"} <= {
        f.name for f in packets if delta_encoded(f)}
    # the poll ids (runs of one value) in plain pages
    assert "poll_id" in packets.names and not delta_encoded(packets.field("poll_id"))
    got = pq.read_table(os.path.join(out, "superpackets.parquet"))
    want = a.superpackets
    for name in FILES:      # every page in the one codec (io.parquet.CODEC: LZ4_RAW)
        md = pq.ParquetFile(os.path.join(out, name)).metadata
        assert {md.row_group(g).column(i).compression for g in range(md.num_row_groups)
                for i in range(md.num_columns)} == {"LZ4"}, name
    for col in ("seg_id", "first_packet", "last_packet", "flow_id", "payload_len"):
        assert got.column(col).to_pylist() == want.column(col).to_pylist(), col


@pytest.mark.parametrize("mode", ["memory", "stream", "stream2"])
def test_never_null_columns_are_required(mode, tmp_path):
    """Every writer declares the numeric, boolean and time columns REQUIRED (no
    definition levels: io.parquet.required) and the strings and dictionaries OPTIONAL,
    where the address texts of absent layers are null; the values read back are the
    in-memory tables'."""
    from gropcap.io.parquet import required
    from gropcap.run.stream import stream_analyze
    out = str(tmp_path / mode)
    files = [GRE, os.path.join(HERE, "..", "sample_pcaps", "crafted_raw.pcap")]
    a = analyze(files)
    if mode == "memory":
        write_analysis(a, out, columns="all")
    else:
        stream_analyze(files, out_dir=out, threads=1 if mode == "stream" else 2,
                       packet_columns="all")
    for name, mem in zip(FILES, (a.packets, a.superpackets, a.flows)):
        path = os.path.join(out, name)
        schema = pq.ParquetFile(path).schema          # the Parquet schema itself
        kinds = {schema.column(i).path: schema.column(i).max_definition_level
                 for i in range(len(schema))}
        arrow = pq.read_schema(path)
        opt = [f.name for f in arrow if not required(f)]
        assert opt and [f.name for f in arrow if f.nullable] == opt, name
        assert all(kinds[f.name] == 0 for f in arrow if required(f)), (name, kinds)
        assert all(kinds[c] == 1 for c in opt if c in kinds), (name, kinds)
        got = pq.read_table(path).replace_schema_metadata(None)
        assert got.to_pylist() == mem.to_pylist(), name
    t = pq.read_table(os.path.join(out, "packets.parquet"))
    assert t.column("outer_ip_src_text").null_count > 0


def test_a_null_in_a_required_column_is_refused(tmp_path):
    """A null where the file's schema says none can be is a bug: the writer raises
    instead of writing the file."""
    from gropcap.io.parquet import write_table
    t = pa.table({"flow_id": pa.array([1, None], pa.int64())})
    with pytest.raises(ValueError, match="non-nullable"):   # (ArrowInvalid is one too)
        write_table(t, str(tmp_path / "x.parquet"), {"gropcap.version": "x"})
    assert not os.path.exists(tmp_path / "x.parquet")


@pytest.mark.skipif(not can_defer(),
                    reason="this pyarrow has no ParquetWriter.add_key_value_metadata")
def test_metadata_given_at_close_reads_back_as_given_at_open(tmp_path):
    # an inline run writes packets.parquet before its metadata is known (the sources'
    # digests, the inferred MTU): TableWriter takes it at close, with the Arrow schema
    # written again, so that every reader sees the file as one written with it
    from gropcap.io.parquet import TableWriter
    t = pa.table({"ts_ns": pa.array([1, 2], pa.timestamp("ns", tz="UTC")),
                  "reason_name": pa.array(["a", "b"]).dictionary_encode(),
                  "n": pa.array([3, 4], pa.int64())})
    meta = {"gropcap.version": "x", "gropcap.sources": json.dumps([{"digest": "d"}])}
    files = {}
    for how in ("open", "close"):
        files[how] = str(tmp_path / f"{how}.parquet")
        w = TableWriter(files[how], t, meta if how == "open" else None)
        w.write_table(t)
        w.write_table(t)
        w.close(meta)
    a, b = pq.read_table(files["open"]), pq.read_table(files["close"])
    assert b.equals(a) and b.schema.equals(a.schema, check_metadata=True)
    assert pa.types.is_dictionary(b.schema.field("reason_name").type)
    assert b.schema.metadata[b"gropcap.sources"] == meta["gropcap.sources"].encode()
    assert pq.read_schema(files["close"]).metadata == pq.read_schema(files["open"]).metadata
    assert pq.ParquetFile(files["close"]).metadata.metadata == \
        pq.ParquetFile(files["open"]).metadata.metadata


@pytest.mark.parametrize("least", [None, 400])
def test_small_batches_share_a_row_group(least, tmp_path, monkeypatch):
    """A run in small batches writes row groups of at least ``io.parquet.ROW_GROUP_ROWS``
    rows (but the last), not one per batch, and the rows are the same either way."""
    from gropcap.io import parquet
    from gropcap.run.stream import stream_analyze
    real = os.path.join(HERE, "..", "sample_pcaps", "real_ipv4.pcap")
    one = str(tmp_path / "one")
    stream_analyze(real, out_dir=one, threads=1)
    if least is not None:
        monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", least)
    small = str(tmp_path / "small")
    stream_analyze(real, out_dir=small, threads=1, batch_records=50)
    for name in ("packets.parquet", "superpackets.parquet"):
        want, got = pq.ParquetFile(os.path.join(one, name)), \
            pq.ParquetFile(os.path.join(small, name))
        rows = [got.metadata.row_group(g).num_rows
                for g in range(got.metadata.num_row_groups)]
        if least is None:
            assert rows == [want.metadata.num_rows], (name, rows)
        else:
            assert len(rows) > 1 and min(rows[:-1]) >= least, (name, rows)
            assert max(rows[:-1]) < least + 50 * 4, (name, rows)
        assert got.read().equals(want.read()), name
