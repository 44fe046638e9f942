"""Parquet written by `gropcap analyze --out` loads back with gropcap.load into the same
Analysis: tables, GRO results, configuration, sources and summary."""

from __future__ import annotations

import os
import sys

import pytest
from click.testing import CliRunner

sys.path.insert(0, os.path.dirname(__file__))
from test_explain import GRE  # noqa: E402

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
    assert b.decoded.equals(a.decoded)
    assert b.packets.equals(a.packets)
    assert b.superpackets.equals(a.superpackets)
    assert b.flows.equals(a.flows)
    assert [i.sha256 for i in b.infos] == [i.sha256 for i in a.infos]


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
