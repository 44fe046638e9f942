"""`--packet-columns default|all|LIST`: packets.parquet holds what people filter on by
default, every column one option away, the verdicts of every model always; the
bounded-memory run and the in-memory run write the same files."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gropcap.cli import main
from gropcap.errors import ConfigError
from gropcap.io.columns import (DEFAULT_PACKET_COLUMNS, all_packet_columns,
                                parse_packet_columns, select_packet_columns)
from gropcap.io.parquet import file_schema
from gropcap.run.memory import analyze

from where import TESTS

HERE = TESTS
GRE = os.path.join(HERE, "..", "sample_pcaps", "crafted_gre.pcap")
# (not ideal_rx_queue and ideal_poll_id: the ideal model's are 0 and -1, io.columns.
# IDEAL_CONSTANTS, written only when asked for)
VERDICTS = ["flow_id", "gro_seg", "gro_role", "reason", "rx_queue", "poll_id",
            "ideal_gro_seg", "ideal_gro_role", "ideal_reason", "gro_role_name",
            "reason_name", "ideal_gro_role_name", "ideal_reason_name"]


def _run(tmp_path, *args, name="out"):
    out = tmp_path / name
    r = CliRunner().invoke(main, ["analyze", GRE, "--out", str(out), "-q", *args])
    assert r.exit_code == 0, r.output
    return pq.read_table(out / "packets.parquet")


@pytest.mark.parametrize("spec", ["default", "default,ip_ttl,ip_id", "ts_ns,tcp_options",
                                  "default,ideal_poll_id"])
def test_columns_written_are_the_selection_with_every_verdict(tmp_path, spec):
    a = analyze(GRE)
    full = a.packets
    got = _run(tmp_path, "--packet-columns", spec)
    names = got.column_names
    assert set(VERDICTS) <= set(names)
    want = set(VERDICTS) | ({"ts_ns", "tcp_options"} if spec.startswith("ts_ns") else
                            set(DEFAULT_PACKET_COLUMNS))
    if "ip_ttl" in spec:
        want |= {"ip_ttl", "ip_id"}
    if "ideal_poll_id" in spec:     # the ideal model's constants: when asked for
        want |= {"ideal_poll_id"}
    assert "ideal_rx_queue" not in names
    assert set(names) == want
    # the order and the values of the in-memory table, column for column
    assert names == [n for n in full.column_names if n in want]
    assert got.replace_schema_metadata(None).to_pylist() == full.select(names).to_pylist()


def test_all_columns_equal_the_in_memory_packets(tmp_path):
    got = _run(tmp_path, "--packet-columns", "all")
    full = analyze(GRE).packets
    # (the file declares the never-null columns so: io.parquet.file_schema)
    assert got.schema.remove_metadata().equals(file_schema(full.schema, {}))
    # every column a run can write; napi is primary here, so no napi_* columns
    rest = set(all_packet_columns()) - set(got.column_names)
    assert rest and all(n.startswith("napi_") for n in rest)
    assert got.replace_schema_metadata(None).to_pylist() == full.to_pylist()


@pytest.mark.parametrize("spec", ["default", "all", "default,tcp_window"])
def test_bounded_memory_and_in_memory_write_the_same_packets(tmp_path, spec):
    st = _run(tmp_path, "--packet-columns", spec, name="stream")
    mem = _run(tmp_path, "--packet-columns", spec, "--no-stream", name="mem")
    assert st.schema.equals(mem.schema)
    assert st.to_pylist() == mem.to_pylist()


def test_default_is_smaller_than_all(tmp_path):
    default = _run(tmp_path, name="d")
    every = _run(tmp_path, "--packet-columns", "all", name="a")
    assert default.num_columns < every.num_columns / 2
    for name in ("ts_ns", "ip_src_text", "ip_dst_text", "sport", "dport", "flow_id",
                 "gro_seg", "reason_name", "ideal_reason", "payload_len", "wire_len"):
        assert name in default.column_names, name


def test_unknown_column_and_missing_out_are_bad_usage(tmp_path):
    r = CliRunner().invoke(main, ["analyze", GRE, "--out", str(tmp_path / "o"),
                                  "--packet-columns", "default,ip_ttl,nope"])
    assert r.exit_code == 2
    assert "no packet column nope" in r.output
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(main, ["analyze", GRE, "--packet-columns", "all"])
    assert r.exit_code == 2
    assert "give --out" in r.output


def test_parse_and_select():
    assert parse_packet_columns("all") == "all"
    assert parse_packet_columns(" default ") == "default"
    assert parse_packet_columns("ip_ttl,all") == "all"
    assert parse_packet_columns(["default", "ip_ttl"]) == ("default", "ip_ttl")
    with pytest.raises(ConfigError, match="no packet column x"):
        parse_packet_columns("default,x")
    names = ["ts_ns", "ip_ttl", "reason", "napi_reason_name", "tcp_window"]
    assert select_packet_columns(names, ("ip_ttl",)) == ["ip_ttl", "reason",
                                                         "napi_reason_name"]
    assert select_packet_columns(names, "all") == names
