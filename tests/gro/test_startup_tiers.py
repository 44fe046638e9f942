"""Start-up (issue 14): what a first run compiles, and the cold-cache check a first run
can use to take the reference path.

- A TCP-only configuration runs the GRO kernel ``run`` with ``udp=None``: numba prunes the
  UDP rules from that variant before typing, so a first run does not compile them
  (``_udp_receive`` stays uncompiled); a UDP GRO configuration runs the other variant.
- ``engine.kernels_cached`` / ``cold_start_reference`` read numba's cache index only:
  an empty cache directory is cold, and a small capture on it takes the reference path
  (that a compiling run fills what they read: tests/cli/test_cold_cache.py).
- ``gro.rss.numpy_of`` / ``arrow_*`` convert numpy <-> Arrow without pyarrow's pandas
  import (a warm run's 0.2-0.45 s) and give what the pyarrow calls give; a run on the
  fast engine imports no pandas at all.

Each check runs in a child process (its own numba dispatchers, the test's cache
directory): in this process other tests have compiled other variants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from hypothesis import given, settings, strategies as st

import gropcap.arrays as arrays_mod
from gropcap.arrays import (arrow_indices, arrow_masked, arrow_numeric, arrow_of, arrow_repeated,
                            arrow_strings, arrow_table, dictionary_strings, numpy_of,
                            string_codes, strings_at, take_rows)

from where import ROOT

SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")

_VARIANTS = r"""
import json, sys
import gropcap
from gropcap.gro.fast import napi, udp
kw = json.loads(sys.argv[1])
gropcap.analyze(sys.argv[2], **kw)
print(json.dumps({"run_udp_arg": sorted({str(sig[-1]) for sig in napi.run.signatures}),
                  "udp_receive_signatures": len(udp._udp_receive.signatures)}))
"""

_COLD = r"""
import json, os, sys
from gropcap.gro import engine
print(json.dumps({"cached": engine.kernels_cached(),
                  "small": engine.cold_start_reference(os.path.getsize(sys.argv[1])),
                  "large": engine.cold_start_reference(engine.COLD_REFERENCE_MAX_BYTES + 1)}))
"""


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
                       timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_a_tcp_only_run_uses_the_kernel_without_udp_rules():
    got = _child(_VARIANTS, json.dumps({}), SAMPLE)
    assert got == {"run_udp_arg": ["none"], "udp_receive_signatures": 0}


def test_a_udp_gro_run_uses_the_kernel_with_udp_rules():
    got = _child(_VARIANTS, json.dumps({"udp_gro": "forward"}), SAMPLE)
    assert got["run_udp_arg"] == ["bool"], got


def test_an_empty_cache_is_cold_and_a_small_capture_takes_the_reference_path(tmp_path):
    got = _child(_COLD, SAMPLE, env={"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")})
    assert got == {"cached": False, "small": True, "large": False}


_NO_PANDAS = r"""
import contextlib, io, json, sys
from gropcap.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["analyze", sys.argv[1], "--engine", "fast", "--format", "json", "-q",
              *sys.argv[2:]])
    except SystemExit as e:
        assert e.code in (0, None), e.code
summary = json.loads(out.getvalue())
print(json.dumps({"pandas": "pandas" in sys.modules, "packets": summary["packets"],
                  "warnings": len(summary["warnings"]),
                  "compute": "pyarrow.compute" in sys.modules,
                  "parquet": "pyarrow.parquet" in sys.modules,
                  "reference": "gropcap.gro.reference" in sys.modules}))
"""


@pytest.mark.parametrize("name", ["real_ipv4.pcap", "real_ipv6.pcap", "real_vxlan.pcap"])
def test_a_fast_run_imports_no_pandas(name):
    # a warm run's 0.2-0.4 s: pandas comes with a Python scalar in Arrow compute, a
    # numpy argument to pa.array / take, to_numpy, or Table.join (pyarrow.dataset);
    # the sample's flows table, one-way-flow warning and ACK hint, and the VXLAN
    # sample's tunnel hint (a model run on the tunnel rows with a socket) included
    got = _child(_NO_PANDAS, os.path.join(ROOT, "sample_pcaps", name))
    assert got["packets"] > 0
    assert got["pandas"] is False
    # nor, summary only, Arrow compute (20-50 ms: the flows' key rows, address texts,
    # the one-way-flow lookup) or Parquet (7 ms): docs/performance.md "Start-up"
    assert got["compute"] is False and got["parquet"] is False
    # nor the plain-Python reference model (8 ms): the rules the numba engine's
    # preparation shares with it live in gro/config.py and gro/gso.py
    assert got["reference"] is False


def test_an_out_run_imports_no_pandas(tmp_path):
    # --out's packets pass (verdict columns, readable names and address texts, the
    # super-packet rows) converted numpy with pa.array / pa.table: 0.47 s of pandas
    got = _child(_NO_PANDAS, SAMPLE, "--out", str(tmp_path / "out"))
    assert got["packets"] > 0 and (tmp_path / "out" / "packets.parquet").exists()
    assert got["pandas"] is False


def _pyarrow_numpy(col):
    # what the engine's column reads did before gro.rss.numpy_of
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col.to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("t", [pa.uint8(), pa.int8(), pa.uint16(), pa.int32(), pa.uint64(),
                               pa.float64(), pa.bool_()])
def test_numpy_of_reads_what_pyarrow_to_numpy_gives(t):
    # same values, dtype and writeable flag: a read-only and a writable array are two
    # numba types, and a changed flag compiles the GRO kernels a second time
    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 8, 9, 70):
        v = rng.integers(0, 2 if t == pa.bool_() else 200, n).astype(t.to_pandas_dtype())
        a = pa.array(v, t)
        cases = [a, a.slice(min(3, n)), a.slice(1, max(n - 3, 0)), pa.chunked_array([a, a]),
                 pa.chunked_array([a.slice(2)]), pa.chunked_array([], t)]
        for col in cases:
            got, want = numpy_of(col), _pyarrow_numpy(col)
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert got.flags.writeable == want.flags.writeable, (t, n, col)


def test_numpy_of_a_bool_column_over_a_slab_unpacks_only_its_rows():
    # the decoder's batches share one long bit buffer: unpacking all of it for each
    # 65 536-row column was 0.23 s of a 3 M-packet run; the rows' values, not the slab's
    slab = np.random.default_rng(3).integers(0, 256, 1 << 17).astype(np.uint8)
    for off, n in ((0, 100), (5, 100), (8, 64), (13, 1), (1000, 4099)):
        col = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(slab)], offset=off)
        got = numpy_of(col)
        assert np.array_equal(got, _pyarrow_numpy(col))
        assert got.base is not None and got.base.size <= n + 16, (off, n, got.base.size)


def test_arrow_builders_equal_pa_array():
    v = np.arange(-3, 9, dtype=np.int32)
    assert arrow_numeric(v, pa.int32()).equals(pa.array(v, pa.int32()))
    assert arrow_numeric(v[::2], pa.int32()).equals(pa.array(v[::2], pa.int32()))
    assert arrow_numeric(v, pa.int64()).equals(pa.array(v, pa.int64()))
    # numpy keeps a byte per bool, Arrow a bit (the UDP preparation's rewritten bool
    # columns came out wrong before); lengths around a byte's 8 bits, and a view
    for n in (0, 1, 7, 8, 9, 17):
        b = np.random.default_rng(n).random(n) < 0.5
        assert arrow_numeric(b, pa.bool_()).equals(pa.array(b, pa.bool_())), n
    b = np.arange(20) % 3 == 0
    assert arrow_numeric(b[1::2], pa.bool_()).equals(pa.array(b[1::2], pa.bool_()))
    words = ["", "eth/ipv4/tcp", "é", "eth/vlan/ipv6/udp/vxlan/eth/ipv4/tcp"]
    assert arrow_strings(words).equals(pa.array(words, pa.string()))
    assert arrow_strings([]).equals(pa.array([], pa.string()))
    for a in (v, b, np.arange(5, dtype=np.uint16), np.zeros(0, np.float64)):
        assert arrow_of(a).equals(pa.array(a)), a.dtype
    cols = {"a": v, "b": b[:len(v)], "c": np.zeros(20, np.int8)[:len(v)]}
    assert arrow_table(cols).equals(pa.table(cols))
    for t_, a in ((pa.int16(), np.array([3, -1, 0, -1], np.int16)),
                  (pa.int64(), np.arange(-2, 15)), (pa.int64(), np.arange(3))):
        assert arrow_masked(a, a < 0, t_).equals(pa.array(a, t_, mask=a < 0))
    for word, n in (("napi", 5), ("ideal", 0), ("", 3), ("é", 2)):
        assert arrow_repeated(word, n).equals(pa.array([word] * n, pa.string()))
    t = pa.table({"x": np.arange(10)})
    rows = np.array([9, 0, 3, 3])
    assert t.take(arrow_indices(rows)).equals(t.take(pa.array(rows)))


_ARROW_TYPES = [pa.uint8(), pa.int16(), pa.uint32(), pa.int64(), pa.float64(), pa.bool_(),
                pa.binary(16), pa.string(), pa.dictionary(pa.int8(), pa.string())]
_WORDS = st.sampled_from(["", "eth/ipv4/tcp", "é", "10.0.0.1", "2001:db8::1"])


def _values(t, n, data):
    if pa.types.is_boolean(t):
        return data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if pa.types.is_fixed_size_binary(t):
        return data.draw(st.lists(st.binary(min_size=16, max_size=16), min_size=n,
                                  max_size=n))
    if pa.types.is_string(t) or pa.types.is_dictionary(t):
        return data.draw(st.lists(_WORDS, min_size=n, max_size=n))
    if pa.types.is_floating(t):
        return data.draw(st.lists(st.floats(-1e9, 1e9), min_size=n, max_size=n))
    info = np.iinfo(t.to_pandas_dtype())
    return data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n,
                              max_size=n))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(0, 40), chunks=st.integers(1, 3),
       batch=st.booleans(), nulls=st.booleans())
def test_take_rows_equals_table_take(data, n, chunks, batch, nulls):
    # every column type of the flow keys and the flows table, in chunks with offsets;
    # a column with nulls goes through Table.take
    cols = {}
    for i, t in enumerate(_ARROW_TYPES):
        vals = _values(t, n + 2, data)
        if nulls and i == 3 and n:
            vals[0] = None
        whole = pa.array(vals, t)
        if pa.types.is_dictionary(t) and chunks > 1:
            whole = pa.array(vals, pa.string()).dictionary_encode()
        cut = sorted(data.draw(st.lists(st.integers(0, n + 2), min_size=chunks - 1,
                                        max_size=chunks - 1)))
        bounds = [0, *cut, n + 2]
        parts = [whole.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
        cols[f"c{i}"] = pa.chunked_array(parts, whole.type).slice(1, n)
    table = pa.table(cols)
    if batch:
        table = table.combine_chunks().to_batches()[0] if n else \
            pa.RecordBatch.from_arrays([pa.array([], c.type) for c in table.columns],
                                       names=table.column_names)
    rows = np.array(data.draw(st.lists(st.integers(0, max(n - 1, 0)),
                                       max_size=3 * n if n else 0)), np.int64)
    got = take_rows(table, rows)
    want = table.take(pa.array(rows, pa.int64()))
    assert type(got) is type(want)
    assert got.to_pylist() == want.to_pylist()
    assert got.schema == want.schema


@pytest.mark.parametrize("python_rows", [0, 1 << 20])
def test_string_codes_are_equal_exactly_for_equal_values(monkeypatch, python_rows):
    # both ways: Arrow's dictionary_encode (many rows) and Python's (few)
    monkeypatch.setattr(arrays_mod, "STRING_CODES_PYTHON", python_rows)
    words = ["a", "", "é", "a", "b", "", "a", "10.0.0.1"]
    for arr in (pa.array(words, pa.string()),
                pa.chunked_array([pa.array(words[:3]), pa.array(words[3:])]),
                pa.array(words).dictionary_encode()):
        codes = string_codes(arr)
        assert codes.dtype == np.int64 and len(codes) == len(words)
        for i in range(len(words)):
            for j in range(len(words)):
                assert (codes[i] == codes[j]) == (words[i] == words[j]), (i, j)


def test_dictionary_strings_and_strings_at_equal_the_cast_and_take():
    words = ["eth/ipv4/tcp", "é", "", "eth/ipv4/tcp", "eth/ipv6/udp"]
    d = pa.array(words).dictionary_encode()
    assert dictionary_strings(d).equals(d.cast(pa.string()))
    two = pa.chunked_array([d.slice(0, 2), pa.array(words[2:]).dictionary_encode()])
    assert dictionary_strings(two).equals(two.cast(pa.string()).combine_chunks())
    idx = np.array([4, 0, 0, 2, 1], np.int64)
    assert strings_at(words, idx).equals(pa.array([words[i] for i in idx], pa.string()))
    assert strings_at(words, np.zeros(0, np.int64)).equals(pa.array([], pa.string()))
