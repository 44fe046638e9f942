"""Parquet written by `gropcap analyze --out` loads back with gropcap.load into the same
Analysis: tables, GRO results, configuration, sources and summary."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from tests.report.test_explain import GRE  # noqa: E402

import gropcap  # noqa: E402
from gropcap.cli import main  # noqa: E402
from gropcap.io.load import LoadError, config_from_dict  # noqa: E402
from gropcap.gro.config import GroConfig, KernelProfile  # noqa: E402


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    r = CliRunner().invoke(main, ["analyze", GRE, "--out", str(out), "--kernel", "6.6",
                                  "--queues", "2", "--format", "json"])
    assert r.exit_code == 0, r.output
    return out


def test_load_gives_the_same_analysis(written):
    a = gropcap.analyze(GRE, GroConfig(kernel=KernelProfile.parse("6.6"), queues=2))
    b = gropcap.load(written)
    assert b.summary() == a.summary()
    assert b.config == a.config
    assert b.models == ["ideal", "napi"]
    for m in a.models:
        assert b.results[m].equals(a.results[m]), m
    # packets.parquet holds the default columns; the decoded table is the capture's, again
    assert b.decoded.equals(a.decoded)
    assert b.packets.to_pylist() == a.packets.select(b.packets.column_names).to_pylist()
    assert b.superpackets.equals(a.superpackets)
    assert b.flows.equals(a.flows)
    assert [i.digest for i in b.infos] == [i.digest for i in a.infos]


def test_packets_carry_verdicts_and_convert_to_pandas(written):
    b = gropcap.load(written)
    df = b.packets.to_pandas()
    assert len(df) == 35
    for col in ("gro_seg", "gro_role", "reason", "flow_id", "ideal_gro_seg", "tcp_seq"):
        assert col in df.columns, col
    # every packet belongs to one super-packet of its model
    sp = b.superpackets.to_pandas()
    napi = sp[sp.model == "napi"]
    assert int(napi["count"].sum()) == len(df)
    assert set(df.gro_seg) == set(napi.seg_id)
    assert b.flows.to_pandas().packets.sum() == 35


def test_missing_file_and_foreign_parquet_are_load_errors(tmp_path, written):
    with pytest.raises(LoadError, match="missing packets.parquet, superpackets.parquet, flows"):
        gropcap.load(tmp_path)
    import pyarrow as pa
    import pyarrow.parquet as pq
    for name in ("packets", "superpackets", "flows"):
        pq.write_table(pa.table({"x": [1]}), tmp_path / f"{name}.parquet")
    with pytest.raises(LoadError, match="no gropcap metadata"):
        gropcap.load(tmp_path)


def test_config_round_trips_through_json():
    c = GroConfig(kernel=KernelProfile.parse("5.15"), queues=4, rss="none",
                  gro_flush_timeout_ns=20000, napi_defer_hard_irqs=2)
    assert config_from_dict(c.to_dict()) == c.replace(model="ideal")


def _written_without_capture(tmp_path, *args):
    """--out DIR of a copy of the GRE sample and its in-memory analysis, the copy
    removed afterwards."""
    import shutil
    cap = tmp_path / "gre.pcap"
    shutil.copy(GRE, cap)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["analyze", str(cap), "--out", str(out), "--format", "json",
                                  *args])
    assert r.exit_code == 0, r.output
    a = gropcap.analyze(cap)
    os.unlink(cap)
    return out, json.loads(r.stdout), a


def test_default_columns_load_without_the_capture(tmp_path):
    out, printed, a = _written_without_capture(tmp_path)
    b = gropcap.load(out)
    printed.pop("top_flows")
    assert b.summary() == printed == a.summary()
    for m in a.models:
        assert b.results[m].equals(a.results[m]), m
    assert b.packets.num_rows == 35 and "ip_ttl" not in b.packets.column_names
    assert b.packets.to_pylist() == a.packets.select(b.packets.column_names).to_pylist()
    assert b.flows.equals(a.flows) and b.superpackets.equals(a.superpackets)
    # compare and baseline read the results and the summary: no decoded table needed
    from gropcap.report.baseline import make_baseline
    from gropcap.report.compare import compare_dict
    assert compare_dict(b, a) == compare_dict(a, a)
    assert make_baseline([b])["captures"] == make_baseline([a])["captures"]
    # what needs every header field says which option writes it
    with pytest.raises(LoadError, match="--packet-columns all"):
        b.decoded
    with pytest.raises(LoadError, match="is not there to decode again"):
        gropcap.explain_flow(b, 0)


def test_all_columns_load_the_whole_table_without_the_capture(tmp_path):
    out, _, a = _written_without_capture(tmp_path, "--packet-columns", "all")
    b = gropcap.load(out)
    assert b.packets.equals(a.packets)
    assert b.decoded.equals(a.decoded)
    assert gropcap.explain_flow(b, 0) == gropcap.explain_flow(a, 0)


def test_output_of_an_earlier_release_loads_and_checks_its_sha256(tmp_path):
    """Sources recorded with a bare sha256 (before the digest was XXH3-128) load as
    ``sha256:<hex>``; what needs the decoded table decodes the capture again when it
    still has those bytes, and refuses when it does not."""
    import hashlib
    import shutil

    import pyarrow.parquet as pq
    cap = tmp_path / "c.pcap"
    shutil.copy(GRE, cap)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["analyze", str(cap), "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    for name in ("packets.parquet", "superpackets.parquet", "flows.parquet"):
        t = pq.read_table(out / name)
        meta = dict(t.schema.metadata)
        sources = json.loads(meta[b"gropcap.sources"])
        for s in sources:
            s["sha256"] = hashlib.sha256(cap.read_bytes()).hexdigest()
            del s["digest"]
        meta[b"gropcap.sources"] = json.dumps(sources).encode()
        pq.write_table(t.replace_schema_metadata(meta), out / name)
    b = gropcap.load(out)
    assert [i.digest for i in b.infos] == \
        ["sha256:" + hashlib.sha256(cap.read_bytes()).hexdigest()]
    assert b.decoded.num_rows == 35
    cap.write_bytes(cap.read_bytes() + bytes(16))      # a cut record: other bytes
    with pytest.raises(LoadError, match="changed since"):
        gropcap.load(out).decoded
