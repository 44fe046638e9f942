"""Streaming analysis (gropcap.run.stream) == the in-memory analyze: same summary, same Parquet
rows, on every sample capture and on a generated multi-flow capture cut into many small
batches (napi polls and held super-packets straddle batch boundaries)."""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gropcap.errors import ConfigError
from gropcap.gro.config import GroConfig
from gropcap.io.parquet import can_defer, read_metadata, write_analysis
from gropcap.run.memory import analyze
from gropcap.run.hints import tunnel_hint
from gropcap.run.stream import OUT_NAMES, stream_analyze

from where import ROOT

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "sample_pcaps", "*.pcap*")))


def small_batches(path, rows: int = 7) -> int:
    """Batches of ``rows`` for a crafted sample (tens of frames), of 61 for a real one
    (2-3 k frames: still 30 to 60 batches, where batches of 7 made hundreds, at a fixed
    cost of some milliseconds each: minutes of the suite's time)."""
    return 61 if os.path.basename(path).startswith("real_") else rows


def _plain(table):
    """Rows as Python values, dictionary columns decoded (dictionaries differ per batch)."""
    return {name: table.column(name).to_pylist() for name in table.column_names}


def assert_same(paths, config, tmp_path, batch_records, models=("ideal", "napi")):
    mem_dir, st_dir = tmp_path / "mem", tmp_path / "stream"
    a = analyze(paths, config, models=models)
    write_analysis(a, str(mem_dir))
    r = stream_analyze(paths, config, models=models, out_dir=str(st_dir),
                       batch_records=batch_records)
    assert r.summary == a.summary()
    assert _plain(r.flows) == _plain(a.flows)
    assert r.udp_tunnel_hint == tunnel_hint(a)
    for name in OUT_NAMES:
        want = pq.read_table(mem_dir / name)
        got = pq.read_table(st_dir / name)
        assert got.schema.remove_metadata().equals(want.schema.remove_metadata()), name
        assert got.num_rows == want.num_rows, name
        assert _plain(got) == _plain(want), name
        assert read_metadata(str(st_dir / name)) == read_metadata(str(mem_dir / name))
    # no temporary files left behind
    assert sorted(os.listdir(st_dir)) == sorted(OUT_NAMES)
    return a, r


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
@pytest.mark.parametrize("queues", [1, 2])
def test_samples_stream_equals_analyze(path, queues, tmp_path):
    # one RX queue: packets.parquet written in the first pass (_Inline with --out); two:
    # by the packets pass after it
    assert_same(path, GroConfig(queues=queues, budget=8), tmp_path,
                batch_records=small_batches(path))


@pytest.fixture(scope="module")
def bench_capture(tmp_path_factory):
    spec = importlib.util.spec_from_file_location(
        "make_bench_capture", os.path.join(ROOT, "benchmarks", "make_bench_capture.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_bench_capture"] = mod
    spec.loader.exec_module(mod)
    path = str(tmp_path_factory.mktemp("bench") / "multi.pcap")
    mod.build(path, 6000, 60, seed=7)
    return path


@pytest.mark.parametrize("config", [
    GroConfig(),
    GroConfig(queues=4, budget=16),
    GroConfig(queues=3, budget=4, gro_flush_timeout_ns=50_000, napi_defer_hard_irqs=1,
              mtu=1500),
], ids=["q1", "q4", "q3-defer-mtu1500"])
def test_generated_capture_small_batches(bench_capture, tmp_path, config):
    a, r = assert_same(bench_capture, config, tmp_path, batch_records=101)
    # the capture really aggregates, and the napi model really spreads over queues
    ideal = r.summary["models"]["ideal"]
    assert ideal["merged_packets"] > 500 and ideal["largest_superpacket"] > 4
    assert r.summary["packets"] == 6000
    queues = set(pq.read_table(tmp_path / "stream" / "packets.parquet",
                               columns=["rx_queue"]).column(0).to_pylist())
    assert len(queues) == config.queues
    # the VXLAN frames of this capture are 1550 IP bytes: their SYNs' MSS (1460 + 40 + 50
    # bytes of VXLAN) says the underlay MTU is 1550, so they are wire frames; with a
    # 1500-byte MTU given they are coalesced and the coalesced-input path runs
    coalesced = any("already coalesced" in w for w in r.summary["warnings"])
    if config.mtu == 1500:
        assert coalesced and r.summary["mtu"]["source"] == "option"
    else:
        assert not coalesced
        assert (r.summary["mtu"]["mtu"], r.summary["mtu"]["source"]) == (1550, "inferred")


def test_two_files_one_stream(bench_capture, tmp_path):
    """Files are one stream (GRO state carries across files), as in analyze."""
    sample = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    assert_same([sample, bench_capture], GroConfig(queues=2), tmp_path, batch_records=500)


def test_summary_without_output(bench_capture, tmp_path):
    r = stream_analyze(bench_capture, GroConfig(queues=2), batch_records=1000,
                       tmp_dir=str(tmp_path))
    assert r.paths == []
    assert r.summary == analyze(bench_capture, GroConfig(queues=2)).summary()
    assert os.listdir(tmp_path) == []


def test_refuses_what_only_memory_models(bench_capture, tmp_path):
    from gropcap.run.options import EgressOptions
    # (egress runs batch by batch: test_egress_counted_batch_by_batch_equals_analyze)
    assert stream_analyze(bench_capture, egress=EgressOptions()).summary["egress"]
    # (the gro_cells stage, egress after it included, runs batch by batch:
    # tests/run/test_cells_stream.py; the reference decoder too:
    # test_the_reference_decoder_runs_batch_by_batch)
    with pytest.raises(ConfigError, match="fast engine"):
        stream_analyze(bench_capture, engine="reference")


def test_existing_output_refused_before_work(bench_capture, tmp_path):
    from gropcap.io.parquet import OutputError
    (tmp_path / "flows.parquet").write_bytes(b"x")
    with pytest.raises(OutputError):
        stream_analyze(bench_capture, out_dir=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["flows.parquet"]


def test_damaged_capture_leaves_no_files(tmp_path):
    """A capture error after some batches were written: the located error, no output and no
    temporary files left in --out."""
    import struct

    from gropcap.errors import CaptureError
    data = bytearray(open(os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"), "rb").read())
    off = 24
    for _ in range(1000):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    struct.pack_into("<I", data, off + 8, 0x7FFFFFFF)     # record 1000: absurd caplen
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(CaptureError, match="record 1000"):
        stream_analyze(str(bad), out_dir=str(out), batch_records=100)
    assert os.listdir(out) == []


def test_empty_capture(tmp_path):
    """A capture with no records: the same (empty) files, schemas and summary."""
    head = open(os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"), "rb").read(24)
    path = tmp_path / "empty.pcap"
    path.write_bytes(head)
    a, r = assert_same(str(path), GroConfig(), tmp_path, batch_records=10)
    assert r.summary["packets"] == 0 and r.flows.num_rows == 0


@pytest.mark.parametrize("name,config", [
    ("real_ipv4.pcap", GroConfig(queues=2, budget=8)),
    ("real_ipv6.pcap", GroConfig(queues=3, gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=2)),
    ("real_vxlan.pcap", GroConfig(udp_tunnels="vxlan:4789")),
    ("real_ipv4.pcap", GroConfig(model="ideal")),
], ids=["queues", "timers", "vxlan-socket", "ideal"])
@pytest.mark.parametrize("threads", [1, 2])
def test_summary_only_counts_in_the_first_pass(name, config, threads):
    # summary only, fused: the packets pass's counts (encapsulations of the rows that
    # start a super-packet, the flow causes) come from the first pass as the verdicts
    # arrive, with no temporary file; small batches, so NAPI polls are decided a batch
    # or more after their rows
    path = os.path.join(ROOT, "sample_pcaps", name)
    inline = stream_analyze(path, config, batch_records=50, threads=threads)
    plain = stream_analyze(path, config, batch_records=50, threads=threads, _fused=False)
    assert inline.peak_spill_bytes == 0 < plain.peak_spill_bytes
    assert inline.summary == plain.summary
    assert inline.flow_causes == plain.flow_causes
    assert _plain(inline.flows) == _plain(plain.flows)
    assert any(v for m in inline.summary["encapsulations"].values() for v in m.values())


def _spy_tries(monkeypatch):
    """A list each try of ``stream_analyze`` adds its ``_fused`` to (a run that starts
    over calls itself unfused), and the function itself."""
    import gropcap.run.stream as stream_mod
    calls, real = [], stream_mod.stream_analyze

    def spy(*args, **kw):
        calls.append(kw.get("_fused", True))
        return real(*args, **kw)
    monkeypatch.setattr(stream_mod, "stream_analyze", spy)
    return calls, real


@pytest.mark.parametrize("name,config,restarts", [
    ("real_ipv4.pcap", GroConfig(queues=2, budget=8), False),
    # frames above a 1000-byte MTU were captured coalesced: their gso_size needs the
    # whole capture before GRO, so the fused first pass starts over unfused
    ("real_ipv4.pcap", GroConfig(mtu=1000), True),
    # a VXLAN port without a tunnel socket: the hint runs the models on the whole table
    ("real_vxlan.pcap", GroConfig(), True),
], ids=["fused", "coalesced", "tunnel-hint"])
@pytest.mark.parametrize("columns", ["default", "all"])
def test_fused_first_pass_equals_unfused(name, config, restarts, columns, tmp_path,
                                         monkeypatch):
    import gropcap.run.stream as stream_mod
    path = os.path.join(ROOT, "sample_pcaps", name)
    calls, real = _spy_tries(monkeypatch)
    fused = stream_mod.stream_analyze(path, config, out_dir=str(tmp_path / "f"),
                                      batch_records=50, packet_columns=columns)
    assert calls == ([True, False] if restarts else [True])
    plain = real(path, config, out_dir=str(tmp_path / "u"), batch_records=50,
                 packet_columns=columns, _fused=False)
    assert fused.summary == plain.summary
    assert fused.flow_causes == plain.flow_causes
    assert fused.udp_tunnel_hint == plain.udp_tunnel_hint
    assert _plain(fused.flows) == _plain(plain.flows)
    for n in OUT_NAMES:
        a, b = pq.read_table(tmp_path / "f" / n), pq.read_table(tmp_path / "u" / n)
        assert a.schema.equals(b.schema) and _plain(a) == _plain(b), n


@pytest.mark.parametrize("name,config", [
    ("real_ipv4.pcap", GroConfig(budget=8)),
    ("real_ipv6.pcap", GroConfig(gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=2)),
    ("real_vxlan.pcap", GroConfig(udp_tunnels="vxlan:4789")),
    ("real_ipv4.pcap", GroConfig(model="ideal")),
], ids=["budget", "timers", "vxlan-socket", "ideal"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("hold", [None, 3])
@pytest.mark.skipif(not can_defer(), reason="this pyarrow has no "
                    "ParquetWriter.add_key_value_metadata: --out runs two passes")
def test_out_with_one_queue_writes_packets_in_the_first_pass(name, config, threads, hold,
                                                             tmp_path, monkeypatch):
    # one RX queue: the super-packets' delivery positions are known as they come
    # (_OnlineOrder), so packets.parquet is written in the first pass: no decoded rows
    # or verdicts go through temporary files (the spill is the super-packets' alone),
    # and the files equal the two passes' (unfused); small batches, so NAPI polls and
    # super-packets are decided a batch or more after their rows. ``hold``: the rows
    # held for their positions go on to the packets pass, with every later row, the
    # ``hold``-th time rows wait (_Inline.held, which does it past INLINE_HOLD_ROWS
    # rows; the ideal model holds a flow's packets until the flow sends one it cannot
    # merge): the rows before are written inline, the rest after the first pass
    import gropcap.run.stream as stream_mod
    handed, waits = [], []
    if hold is not None:
        real_held = stream_mod._Inline.held

        def held(self):
            waits.append(1)
            monkeypatch.setattr(stream_mod, "INLINE_HOLD_ROWS",
                                -1 if len(waits) == hold else 1 << 20)
            real_held(self)
            if self.rest is not None and not handed:
                handed.append(self.rest)
        monkeypatch.setattr(stream_mod._Inline, "held", held)
    path = os.path.join(ROOT, "sample_pcaps", name)
    models = ("ideal",) if config.model == "ideal" else ("ideal", "napi")
    inline = stream_analyze(path, config, models=models, out_dir=str(tmp_path / "i"),
                            batch_records=50, threads=threads, packet_columns="all")
    plain = stream_analyze(path, config, models=models, out_dir=str(tmp_path / "p"),
                           batch_records=50, threads=threads, packet_columns="all",
                           _fused=False)
    packets = inline.summary["packets"]
    if hold is None:
        # the super-packets' spill alone, against the decoded rows and verdicts too
        assert inline.peak_spill_bytes < 60 * packets
        assert plain.peak_spill_bytes > 150 * packets
    else:
        # handed on after the first batches, at a batch's first row
        assert handed and 0 < handed[0] < packets and handed[0] % 50 == 0
    assert inline.summary == plain.summary
    assert inline.flow_causes == plain.flow_causes
    for n in OUT_NAMES:
        a, b = pq.read_table(tmp_path / "i" / n), pq.read_table(tmp_path / "p" / n)
        assert a.schema.equals(b.schema, check_metadata=True), n
        assert _plain(a) == _plain(b), n
        assert read_metadata(str(tmp_path / "i" / n)) == \
            read_metadata(str(tmp_path / "p" / n)), n
    assert sorted(os.listdir(tmp_path / "i")) == sorted(OUT_NAMES)


def test_an_order_the_first_pass_cannot_follow_starts_over(tmp_path, monkeypatch):
    # _OnlineOrder finds polls out of delivery order at the third part (here forced):
    # the run starts again with the two passes, and its files are theirs
    import gropcap.run.stream as stream_mod
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    real_take, seen = stream_mod._OnlineOrder.take, []

    def take(self, part):
        seen.append(self.napi)
        if sum(seen) == 3:
            raise stream_mod._Unfused
        real_take(self, part)
    monkeypatch.setattr(stream_mod._OnlineOrder, "take", take)
    calls, _ = _spy_tries(monkeypatch)
    got = stream_mod.stream_analyze(path, GroConfig(), out_dir=str(tmp_path / "f"),
                                    batch_records=50, threads=2)
    assert calls == [True, False]
    monkeypatch.undo()
    want = stream_analyze(path, GroConfig(), out_dir=str(tmp_path / "u"), batch_records=50,
                          _fused=False)
    assert got.summary == want.summary
    for n in OUT_NAMES:
        a, b = pq.read_table(tmp_path / "f" / n), pq.read_table(tmp_path / "u" / n)
        assert a.schema.equals(b.schema, check_metadata=True) and _plain(a) == _plain(b), n
    assert sorted(os.listdir(tmp_path / "f")) == sorted(OUT_NAMES)


def _part(run, poll_time, polls, insts, counts, queue=0):
    import types

    import numpy as np
    return types.SimpleNamespace(
        run=run, poll_time=np.asarray(poll_time, np.int64),
        poll_queue=np.full(len(poll_time), queue, np.int64),
        segs={"first": np.zeros(len(polls), np.int64), "poll": np.asarray(polls, np.int64),
              "inst": np.asarray(insts, np.int64), "count": np.asarray(counts, np.int64)})


def test_online_order_is_the_super_packets_pass_order():
    import numpy as np

    from gropcap.run.stream import _OnlineOrder, _Unfused
    o = _OnlineOrder(napi=True)
    # polls 0, 1 in the first part; the second part's super-packets come from polls 1
    # and 2, not in poll order within the part (ordered by poll, stably)
    o.take(_part(0, [10, 20], [0, 1, 0], [0, 1, 2], [2, 1, 3]))
    o.take(_part(0, [30], [2, 1, 2], [4, 3, 5], [1, 2, 2]))
    # positions: poll 0 -> 0, 1; poll 1 -> 2 (part 1), 3 (part 2); poll 2 -> 4, 5
    assert o.ipos[:6].tolist() == [0, -(2 + 1), 1, 3, -(4 + 1), 5]
    assert o.known == 6         # every instance before the 7th has its position
    assert o.poll_ids(np.array([2, 0])).tolist() == [2, 0]
    # a part from a poll before the last part's: not the delivery order
    with pytest.raises(_Unfused):
        o.take(_part(0, [], [1], [6], [1]))
    for bad in ([_part(0, [10, 5], [], [], [])],                  # time goes back
                [_part(0, [10], [], [], []), _part(0, [5], [], [], [])],
                [_part(0, [10], [], [], [], queue=1), _part(0, [20], [], [], [])]):
        o = _OnlineOrder(napi=True)
        with pytest.raises(_Unfused):
            for p in bad:
                o.take(p)
    # a later receiver run may start at an earlier time; the ideal model has no polls
    o = _OnlineOrder(napi=True)
    o.take(_part(0, [10], [0], [0], [1]))
    o.take(_part(1, [5], [1], [1], [2]))
    assert o.ipos.tolist()[:2] == [-1, 1]
    ideal = _OnlineOrder(napi=False)
    ideal.take(_part(0, [], [7, 3], [1, 0], [2, 2]))
    assert ideal.ipos[:2].tolist() == [1, 0] and ideal.known == 2
    # instance 3 delivered before instance 2 (its flow's super-packet ended first)
    ideal.take(_part(0, [], [0], [3], [1]))
    assert ideal.known == 2
    ideal.take(_part(0, [], [0], [2], [1]))
    assert ideal.ipos[2:4].tolist() == [-(3 + 1), -(2 + 1)] and ideal.known == 4
    assert ideal.poll_ids(np.array([7])).tolist() == [-1]


@pytest.mark.parametrize("shuffle", [False, True])
def test_verdicts_are_served_by_row_range(shuffle):
    # verdicts arrive in processing order (one queue or the ideal model: row order;
    # several queues: rows of a queue decided a batch later) and are served per row range
    import numpy as np

    from gropcap.run.stream import _VerdictBuffer
    rng = np.random.default_rng(int(shuffle))
    n = 1000
    order = np.arange(n)
    if shuffle:
        for lo in range(0, n, 50):          # reordered within windows, as queues do
            rng.shuffle(order[lo:lo + 80])
    reason, inst = rng.integers(0, 60, n), rng.integers(0, 400, n)
    buf = _VerdictBuffer()
    cuts = np.sort(rng.choice(np.arange(1, n), 12, replace=False))
    bounds = [0, *cuts.tolist(), n]
    fed = 0
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        # complete() against its definition (counted by the chunks' row bounds)
        while not buf.complete(r0, r1):
            assert sum(int(np.count_nonzero(c[0] < r1)) for c in buf.chunks) < r1 - r0
            k = order[fed:fed + 37]
            buf.put(k, reason[k], inst[k], np.zeros(len(k), np.int64))
            fed += len(k)
        assert sum(int(np.count_nonzero(c[0] < r1)) for c in buf.chunks) == r1 - r0
        got_reason, got_inst, _ = buf.take(r0, r1)
        assert got_reason.tolist() == reason[r0:r1].tolist()
        assert got_inst.tolist() == inst[r0:r1].tolist()


_EGRESS = [("encap", "tso,tx-tcp6-segmentation", None),
           ("decap", "tso,tx-tcp-mangleid-segmentation", 1400),
           ("encap", "tx-udp_tnl-segmentation,tso6", 576)]


# plain IPv4/IPv6, VLAN and the tunnels (outer vs inner headers on encap/decap)
_EGRESS_SAMPLES = [p for p in SAMPLES if os.path.basename(p).split(".")[0] in (
    "real_ipv4", "real_ipv6", "real_vxlan", "crafted_gre", "crafted_ipip", "crafted_sit",
    "crafted_ip6gre", "crafted_geneve", "crafted_vlan", "crafted_ip4ip6")]


@pytest.mark.parametrize("path", _EGRESS_SAMPLES, ids=os.path.basename)
@pytest.mark.parametrize("queues", [1, 2])
def test_egress_counted_batch_by_batch_equals_analyze(path, queues, tmp_path):
    """``--egress`` in bounded memory: each part's super-packets counted as the engine
    hands them over, their first packets' headers read from 8 bytes a row kept on disk
    (``run.stream.RowCodes``), not the decoded table. The summary (egress totals per
    model, every scenario, feature set and MTU) equals the in-memory run's, over
    batches of 7 rows, fused and unfused, summary only and with ``--out`` (with one RX
    queue, fused, packets.parquet written in the first pass). The real samples take
    batches of 61 rows: still 30 to 60 batches (at 7 rows those runs were 100 s of the
    suite's time: a batch's fixed cost on the engine's path is some milliseconds)."""
    from gropcap.run.options import EgressOptions
    config = GroConfig(queues=queues, budget=8)
    small = os.path.basename(path).startswith("crafted_")
    for i, spec in enumerate(_EGRESS):
        opts = EgressOptions(*spec)
        want = analyze(path, config, egress=opts).summary()
        assert set(want["egress"]) == {"ideal", "napi"}
        assert want["packets"] < 100 if small else want["packets"] > 1800
        # summary only (fused, the packets pass inline), --out fused, --out unfused
        got = stream_analyze(path, config, egress=opts, batch_records=7 if small else 61,
                             threads=1 + i % 2,
                             out_dir=str(tmp_path / str(i)) if i else None,
                             _fused=i < 2)
        assert got.summary == want, spec


def test_egress_counts_are_not_empty():
    """The samples' egress figures are not all zero (the equality above is not that of
    two empty results): a 1400-byte MTU drops or fragments, TSO segments in hardware."""
    from gropcap.run.options import EgressOptions
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    plain = stream_analyze(path, GroConfig(), egress=EgressOptions(*_EGRESS[0]))
    small = stream_analyze(path, GroConfig(), egress=EgressOptions(*_EGRESS[1]))
    e0, e1 = plain.summary["egress"]["napi"], small.summary["egress"]["napi"]
    assert e0["hardware_segments"] > 0 and e0["superpackets"] > 0
    assert e1["dropped"] + e1["fragmented"] > 0
    assert e0["superpackets"] == e1["superpackets"]


def test_egress_header_codes_round_trip():
    """``egress.header_codes`` keeps every value ``egress_headers`` and ``mangleid_df``
    give, at their widest (negative and 32-bit header lengths, IPv6 header lengths
    above 255 with extension headers)."""
    import numpy as np

    from gropcap.egress import (egress_headers, header_codes, mangleid_df,
                                unpack_header_codes)
    t = analyze(os.path.join(ROOT, "sample_pcaps", "real_vxlan.pcap"), GroConfig()).decoded
    rng = np.random.default_rng(5)
    for name, values in (("l4_offset", rng.integers(0, 1 << 16, t.num_rows)),
                         ("ip_hdr_len", rng.integers(0, 2048, t.num_rows)),
                         ("ip_df", rng.integers(0, 2, t.num_rows))):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(name),
                         pa.array(values.astype(t.schema.field(name).type.to_pandas_dtype())))
    rows = np.arange(t.num_rows)
    for scenario in ("encap", "decap"):
        hdr, df, ihl, mdf = unpack_header_codes(header_codes(t, scenario))
        want = egress_headers(t, rows, scenario)
        assert np.array_equal(hdr, want[0]) and np.array_equal(df, want[1])
        assert np.array_equal(ihl, want[2])
        assert np.array_equal(mdf, mangleid_df(t, rows))


@pytest.mark.parametrize("names,config,batch", [
    (["real_ipv4.pcap"], GroConfig(), 97),
    (["crafted_gre_key.pcap", "crafted_two_ifaces.pcapng"], GroConfig(queues=2), 13),
    (["real_vxlan.pcap"], GroConfig(poll_acks=True, tunnel_gro=True), 64),
], ids=["ipv4", "gre-pcapng-q2", "vxlan-acks-cells"])
def test_the_reference_decoder_runs_batch_by_batch(names, config, batch, tmp_path,
                                                   reference_decodes):
    """``--decoder reference`` in bounded memory (issue 14: every feature in every mode):
    the plain-Python reader and decoder feed the same passes batch by batch (the ACK
    pass too) and give the summary, flows and files of the in-memory run with that
    decoder, which are the fast decoder's."""
    paths = [os.path.join(ROOT, "sample_pcaps", n) for n in names]
    calls = reference_decodes
    mem_dir, st_dir = tmp_path / "mem", tmp_path / "stream"
    a = analyze(paths, config, decoder="reference")
    write_analysis(a, str(mem_dir))
    mem_calls = len(calls)
    r = stream_analyze(paths, config, decoder="reference", out_dir=str(st_dir),
                       batch_records=batch)
    assert mem_calls and len(calls) > mem_calls and max(calls[mem_calls:]) <= batch
    assert r.summary == a.summary() == stream_analyze(paths, config).summary
    assert _plain(r.flows) == _plain(a.flows)
    for name in OUT_NAMES:
        assert _plain(pq.read_table(st_dir / name)) == _plain(pq.read_table(mem_dir / name))


@pytest.mark.parametrize("max_rows", [60_000, 100], ids=["rows-kept", "rows-over"])
@pytest.mark.parametrize("out", [False, True], ids=["summary", "out"])
def test_tunnels_without_a_socket_keep_the_fused_pass(max_rows, out, tmp_path,
                                                      monkeypatch, decode_passes):
    """A UDP tunnel on a port without a socket no longer ends the fused first pass when
    the capture is too large for the hint's napi part (here: a limit of 10 rows): its
    rows are gathered as they come (up to the hint's limit), the super-packets starting
    at them counted, and summary, hint and files equal the in-memory run's, whose hint
    leaves the napi model out the same way. One decode pass, not two."""
    import gropcap.run.hints as hints
    monkeypatch.setattr(hints, "HINT_NAPI_MAX_ROWS", 10)
    monkeypatch.setattr(hints, "HINT_MAX_ROWS", max_rows)
    passes = decode_passes
    path = os.path.join(ROOT, "sample_pcaps", "real_vxlan.pcap")
    a = analyze(path)
    want = tunnel_hint(a, max_rows=max_rows, napi_max_rows=10)
    assert want["left_out"] == (["napi"] if max_rows > 100 else ["ideal", "napi"])
    r = stream_analyze(path, out_dir=str(tmp_path / "s") if out else None,
                       batch_records=97)
    assert len(passes) == 1
    assert r.summary == a.summary()
    assert r.udp_tunnel_hint == want
    if out:
        write_analysis(a, str(tmp_path / "m"))
        for name in OUT_NAMES:
            assert _plain(pq.read_table(tmp_path / "s" / name)) == \
                _plain(pq.read_table(tmp_path / "m" / name)), name


def test_a_small_capture_with_a_tunnel_hint_starts_over(decode_passes):
    """Within the hint's napi limit the run starts over unfused (the napi part replays
    the whole table, read back), as before: two decode passes, the in-memory hint."""
    passes = decode_passes
    path = os.path.join(ROOT, "sample_pcaps", "real_vxlan.pcap")
    r = stream_analyze(path, batch_records=97)
    assert len(passes) == 2
    assert r.udp_tunnel_hint == tunnel_hint(analyze(path))
    assert r.udp_tunnel_hint["models"]["napi"]


def test_the_fused_pass_infers_the_mtu_at_doubling_batches(monkeypatch, decode_passes):
    """The fused pass looks for frames above the MTU inferred so far at its 1st, 2nd,
    4th... batch, not at every one (an inference folds every direction's statistics);
    the end of the pass looks once more. Same results as an unfused run."""
    import math

    import gropcap.gro.mtu as mtu_mod
    calls = []
    real = mtu_mod.resolve_mtu
    monkeypatch.setattr(mtu_mod, "resolve_mtu", lambda stats: calls.append(1) or real(stats))
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    r = stream_analyze(path, GroConfig(), batch_records=10)
    batches = math.ceil(r.summary["packets"] / 10)
    assert batches >= 64 and len(decode_passes) == 1
    assert len(calls) <= math.floor(math.log2(batches)) + 2
    assert r.summary == stream_analyze(path, GroConfig(), batch_records=10,
                                       _fused=False).summary


def test_a_frame_marked_coalesced_stops_the_fused_pass_at_once():
    """``_Coalesced.seen_coalesced``: a frame marked coalesced whatever the MTU (IPv4
    total length 0) says yes on the call after its batch, a power of two or not; frames
    above the MTU only on the 1st, 2nd, 4th... call."""
    import numpy as np

    from gropcap.capture import read_capture
    from gropcap.decode import fast
    from gropcap.run.stream import _Coalesced
    _, batch = read_capture(os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap"))
    t = pa.Table.from_batches([fast.decode_batch(batch)])
    data = np.flatnonzero(t.column("payload_len").to_numpy() > 0)
    plain = _Coalesced()
    for lo in range(0, 40, 10):
        plain.add(t.slice(lo, 10))
        assert not plain.seen_coalesced()
    tot = t.column("ip_tot_len").to_numpy().copy()
    tot[data[0]] = 0
    marked = t.set_column(t.schema.get_field_index("ip_tot_len"), "ip_tot_len",
                          pa.array(tot, t.schema.field("ip_tot_len").type))
    plain.add(marked.slice(data[0], 1))
    assert plain.looks == 4 and plain.seen_coalesced()        # the 5th call
    small = _Coalesced(mtu=100)                 # every data frame is above it
    small.add(t.slice(0, 10))
    assert small.seen_coalesced() is True       # the 1st call looks
    small.looks = 2                             # the 3rd: not a power of two
    small.add(t.slice(10, 10))
    assert small.seen_coalesced() is False and small.num > 0


_SINGLE = {"real_ipv4.pcap", "real_ipv4_p4.pcap", "real_ipv6.pcap", "crafted_nanosecond.pcap",
           "crafted_big_endian.pcap", "crafted_vlan.pcap"}


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_a_summary_only_run_takes_the_single_pass_where_it_covers(path):
    """A summary-only run (`--format json`) runs both models in the single pass
    (gro/fused.py) where it covers the capture, on the engine elsewhere, and says why:
    either way the in-memory run's summary, flows, flow causes and tunnel hint."""
    for config in (GroConfig(), GroConfig(budget=8, hz=1000)):
        a = analyze(path, config)
        r = stream_analyze(path, config, batch_records=small_batches(path))
        assert r.summary == a.summary()
        assert _plain(r.flows) == _plain(a.flows)
        assert r.flow_causes == a.flow_causes
        assert r.udp_tunnel_hint == tunnel_hint(a)
        covered = os.path.basename(path) in _SINGLE
        assert r.single_pass is covered and (r.engine_why is None) is covered, r.engine_why


@pytest.mark.parametrize("name", sorted(_SINGLE))
@pytest.mark.parametrize("kind", ["default", "all", "egress"])
def test_a_run_with_out_takes_the_single_pass(name, kind, tmp_path, monkeypatch):
    """With --out (and --plot) the single pass runs too where it covers the capture: for
    packets.parquet's default columns it gives them in its narrow table, without the
    decoder; for every column (``--packet-columns all``) or with egress accounting (which
    reads every header) the decoder gives each batch's whole table and the pass both
    models (``SinglePass(decoded=True)``). One thread or two (the table built in the
    run's thread while the pass goes on: ``defer``): the files, the summary
    (egress included) and the plot's data are the engine's (``_single``: left out)."""
    from gropcap.run import single
    from gropcap.run.options import EgressOptions
    path = os.path.join(ROOT, "sample_pcaps", name)
    config, batch = GroConfig(budget=8), small_batches(path)
    decoded = []
    real = single.SinglePass.__init__

    def init(self, *a, **kw):
        real(self, *a, **kw)
        decoded.append((self.decoded, self.defer))
    monkeypatch.setattr(single.SinglePass, "__init__", init)
    opts = dict(packet_columns="all" if kind == "all" else "default", plot=True,
                egress=EgressOptions(*_EGRESS[1]) if kind == "egress" else None)
    runs = {}
    for key, how in (("single", True), ("engine", "asked")):
        runs[key] = [stream_analyze(path, config, out_dir=str(tmp_path / f"{key}{threads}"),
                                    batch_records=batch, threads=threads, _single=how,
                                    **opts)
                     for threads in (1, 2)]
    # (with two threads the table is built in the run's thread, the pass going on)
    assert decoded == [(kind != "default", False), (kind != "default", True)]
    want = runs["engine"][0]
    assert not want.single_pass and want.engine_why == "asked"
    for threads, got in zip((1, 2), runs["single"]):
        assert got.single_pass and got.engine_why is None, got.engine_why
        assert got.summary == want.summary and ("egress" in got.summary) is \
            (kind == "egress")
        assert got.plot_data.equals(want.plot_data)
        for out in OUT_NAMES:
            a = pq.read_table(tmp_path / f"single{threads}" / out)
            b = pq.read_table(tmp_path / "engine1" / out)
            assert a.num_rows == b.num_rows and _plain(a) == _plain(b), out
        wide = pq.read_schema(tmp_path / f"single{threads}" / "packets.parquet")
        assert len(wide) == len(pq.read_schema(tmp_path / "engine1" / "packets.parquet")) \
            > (35 if kind == "all" else 0)


def _forms(tmp_path, form: str) -> tuple[list[str], str, str]:
    """The four-stream sample written as ``form``: (files, --captures, what the run
    says of the single pass: "" when it covers them, else the start of its reason)."""
    import gzip

    from gropcap import constants as C
    from gropcap.capture import read_capture
    from gropcap.capture.writer import write_pcap, write_pcapng
    src = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
    _, b = read_capture(src)
    frames = [b.frame(i) for i in range(len(b))]
    ts, wire = [int(t) for t in b.ts_ns], [int(w) for w in b.wire_len]
    n = len(frames)
    out = str(tmp_path / form)
    if form == "pcapng":
        write_pcapng(out, frames, ts, wire_lens=wire)
    elif form == "pcapng_tso":          # one frame flagged TSO: captured coalesced
        flags = [C.EPB_FLAG_TCP_SEG_OFFLOAD if i == n // 2 else 0 for i in range(n)]
        write_pcapng(out, frames, ts, epb_flags=flags, wire_lens=wire)
        return [out], "auto", "frames captured coalesced"
    elif form == "pcapng_two_ifaces":   # the second half on another interface
        write_pcapng(out, frames, ts, linktypes=(1, 1), wire_lens=wire,
                     ifaces=[int(i >= n // 2) for i in range(n)])
        return [out], "auto", "the single pass stopped: a frame of another interface"
    elif form == "pcapng_cooked":       # the second interface's frames not Ethernet
        write_pcapng(out, frames + [b"\x00" * 16 + frames[0][14:]], ts + [ts[-1] + 1],
                     linktypes=(1, 113), ifaces=[0] * n + [1],
                     wire_lens=wire + [wire[0] + 2])
        return [out], "auto", "the single pass stopped: a frame of link type 113"
    elif form == "pcap.gz":
        write_pcap(out[:-3], frames, ts, wire_lens=wire)
        with open(out[:-3], "rb") as f, gzip.open(out, "wb") as g:
            g.write(f.read())
    else:                               # rotated files, in time order or not
        cuts = [0, n // 2, 5 * n // 6, n]     # (flows held at the first cut)
        parts = [(frames[a:z], ts[a:z], wire[a:z]) for a, z in zip(cuts, cuts[1:])]
        if form == "rotated_back":      # the second file earlier: receivers of its own
            parts[1] = (parts[1][0], [t - 10**9 for t in parts[1][1]], parts[1][2])
        paths = []
        for k, (fs, tss, ws) in enumerate(parts):
            paths.append(str(tmp_path / f"{form}{k}.pcap"))
            write_pcap(paths[-1], fs, tss, wire_lens=ws)
        return paths, {"rotated_separate": "separate",
                       "rotated_continuous": "continuous"}.get(form, "auto"), ""
    return [out], "auto", ""


@pytest.mark.parametrize("form", ["pcapng", "pcap.gz", "rotated", "rotated_continuous",
                                  "pcapng_tso", "pcapng_two_ifaces", "pcapng_cooked",
                                  "rotated_separate", "rotated_back"])
def test_the_single_pass_covers_pcapng_compressed_and_rotated_captures(tmp_path, form):
    """The single pass takes records from any capture the scan reads: a pcapng file,
    a compressed file, several files on one receiver (rotated captures) or on
    receivers of their own (--captures separate, or a file earlier than the one before:
    the pass splits the runs itself, SinglePass.records). Where a record is of another
    interface or link type (the pass's flows have no interface in their key), or where
    frames were captured coalesced, the run goes again on the engine and says why.
    Either way the in-memory run's summary, flows and flow causes."""
    paths, captures, why = _forms(tmp_path, form)
    a = analyze(paths, GroConfig(), captures=captures)
    r = stream_analyze(paths, GroConfig(), batch_records=251, captures=captures)
    assert r.summary == a.summary()
    assert _plain(r.flows) == _plain(a.flows)
    assert r.flow_causes == a.flow_causes
    assert r.single_pass is (why == ""), r.engine_why
    assert (r.engine_why or "").startswith(why), r.engine_why


@pytest.mark.parametrize("threads", [1, 2])
def test_the_single_pass_is_timed_as_the_engine_and_its_scan_runs_ahead(threads,
                                                                        monkeypatch):
    """The single pass runs in the decode step, in the decoder's place: its seconds
    (``SinglePass.seconds``) are the ``engine`` phase's, not ``decode``'s. With two
    threads the record scan runs ahead in a thread of its own (``decode_file``'s
    ``scan_ahead``), and hands over the same records."""
    import threading
    import time

    from gropcap.gro import fused
    from gropcap.run import inputs, single
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
    seen, passes = [], []
    real_batches, real_init = inputs.record_batches, single.SinglePass.__init__
    real_take = fused.FusedRun.take

    def take(self, *a):
        time.sleep(0.02)            # (a pass long enough to tell the phases apart)
        return real_take(self, *a)

    def record_batches(*a, **kw):
        batches_of, decode_batch = real_batches(*a, **kw)

        def named(p):
            for got in batches_of(p):
                seen.append((threading.current_thread().name, len(got[1])))
                yield got
        return named, decode_batch

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        passes.append(self)
    monkeypatch.setattr(inputs, "record_batches", record_batches)
    monkeypatch.setattr(single.SinglePass, "__init__", init)
    monkeypatch.setattr(fused.FusedRun, "take", take)
    r = stream_analyze(path, GroConfig(), batch_records=997, threads=threads)
    assert r.single_pass and len(passes) == 1
    assert sum(n for _, n in seen) == r.summary["packets"] and len(seen) > 2
    names = {name for name, _ in seen}
    assert names == ({"gropcap-scan"} if threads == 2 else
                     {threading.main_thread().name}), names
    assert 0.02 * (len(seen) - 1) < passes[0].seconds <= r.timings["engine"]
    assert r.timings["decode"] < passes[0].seconds
    monkeypatch.setattr(fused.FusedRun, "take", real_take)
    assert r.summary == stream_analyze(path, GroConfig(), batch_records=997,
                                       threads=3 - threads).summary


def test_the_single_pass_runs_at_the_callers_priority(monkeypatch):
    """With two threads the single pass runs in the decode step, the run's critical
    path: that thread keeps the calling thread's priority, while the decoder's thread on
    the engine's path, the record scan and the spills run below it (gropcap.priority)."""
    import threading

    from gropcap.priority import HELPER
    from gropcap.run import threads
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
    steps = []
    real = threads.lower_this_thread

    def lower(n):
        steps.append((threading.current_thread().name.split("_")[0], n))
        return real(n)
    monkeypatch.setattr(threads, "lower_this_thread", lower)
    for single, want in ((True, 0), ("asked", HELPER)):
        steps.clear()
        r = stream_analyze(path, GroConfig(), batch_records=997, threads=2, _single=single)
        assert r.single_pass is (single is True)
        assert ("gropcap-decode", want) in steps and ("gropcap-spill", HELPER) in steps
        assert ("gropcap-decode", HELPER - want) not in steps, steps


def test_the_single_pass_grows_its_tables_and_can_be_left_out(monkeypatch):
    """The four-stream sample in batches of 61 rows with flow tables of two flows at
    first (doubled as they fill, between batches and within one): the in-memory run's
    summary; with the single pass left out (a caller's ``_single`` reason), the same
    summary from the engine."""
    from gropcap.gro import fused
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
    monkeypatch.setattr(fused, "FLOWS", 2)
    a = analyze(path, GroConfig())
    r = stream_analyze(path, GroConfig(), batch_records=61)
    assert r.single_pass and r.summary == a.summary()
    assert r.flow_causes == a.flow_causes
    e = stream_analyze(path, GroConfig(), batch_records=61, _single="asked")
    assert not e.single_pass and e.engine_why == "asked" and e.summary == r.summary


@pytest.mark.parametrize("threads", [1, 2])
def test_a_frame_past_the_probe_the_pass_does_not_cover_restarts_the_run(
        tmp_path, monkeypatch, threads):
    """The probe reads the first bytes of a capture (run.single.PROBE_BYTES; here 200):
    a UDP frame after them stops the single pass in the run, and the run goes again on
    the decoder and the engine, and says so: the in-memory run's summary, and with
    --out its files."""
    from craft import eth, ipv4, tcp, udp
    from gropcap.capture.writer import write_pcap
    from gropcap.run import single
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(3000, 80, seq=100 * i,
                                                      payload=bytes(100)), ident=i))
              for i in range(40)]
    frames.append(eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(53, 53, b"x" * 30))))
    path = str(tmp_path / "late_udp.pcap")
    write_pcap(path, frames + frames[:3], [1_000 * i for i in range(len(frames) + 3)])
    monkeypatch.setattr(single, "PROBE_BYTES", 200)
    r = stream_analyze(path, GroConfig(), batch_records=8, threads=threads)
    assert not r.single_pass and r.engine_why.startswith("the single pass stopped"), \
        r.engine_why
    assert r.summary == analyze(path, GroConfig()).summary()
    # with --out (narrow table, and every column: the decoder's table) the files of
    # the run that stopped are dropped, and the engine's are the in-memory run's
    for columns in ("default", "all"):
        out = tmp_path / f"out-{columns}"
        r = stream_analyze(path, GroConfig(), batch_records=8, threads=threads,
                           out_dir=str(out), packet_columns=columns)
        assert not r.single_pass and r.engine_why.startswith("the single pass stopped")
        assert sorted(os.listdir(out)) == sorted(OUT_NAMES)
        a = analyze(path, GroConfig())
        write_analysis(a, str(tmp_path / f"mem-{columns}"), columns=columns)
        for name in OUT_NAMES:
            assert _plain(pq.read_table(out / name)) == \
                _plain(pq.read_table(tmp_path / f"mem-{columns}" / name)), name
    monkeypatch.setattr(single, "PROBE_BYTES", 1 << 20)     # (it sees the UDP frame)
    assert "does not cover" in stream_analyze(path, GroConfig()).engine_why


def test_a_dsa_tag_on_plain_ethernet_leaves_the_run_to_the_decoder():
    """With --dsa-tag the decoder reads a tag after the MAC addresses of every plain
    Ethernet frame; the single pass reads plain Ethernet, so a capture it would cover
    otherwise goes to the decoder and the engine: the in-memory run's summary."""
    from gropcap.decode.options import DecodeOptions
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    opts = DecodeOptions(dsa_tag="brcm")
    r = stream_analyze(path, GroConfig(), decode_options=opts)
    assert not r.single_pass and "DSA tag" in r.engine_why
    assert r.summary == analyze(path, GroConfig(), decode_options=opts).summary()


def test_the_single_pass_hands_on_arrays_of_its_own(tmp_path):
    """SinglePass's parts and narrow tables own their arrays (the pass reuses its
    buffers at its next call, and a sidecar thread may still be counting the parts
    before) and each is contiguous, as the engine's (the counting kernels compiled for
    those take them); the end of the run gives the super-packets still held."""
    import numpy as np
    from craft import eth, ipv4, tcp
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.capture.writer import write_pcap
    from gropcap.decode.schema import empty_packet_table
    from gropcap.gro import fused
    from gropcap.run.single import SinglePass
    frames = [eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(3000 + i % 2, 80, seq=100 * (i // 2),
                                                      payload=bytes(100)), ident=i // 2))
              for i in range(30)]
    frames[25] = eth(ipv4("10.0.0.2", "10.0.0.1", 6, tcp(80, 3000, ack=200)))  # goes up
    path = str(tmp_path / "held.pcap")
    write_pcap(path, frames, [1_000 * i for i in range(30)])
    gro = SinglePass(GroConfig(), batch=10)
    got = [gro.records(b) for _, b in iter_scan_batches(path, batch_records=10,
                                                         digest=False)]
    first, table = got[0][1], got[0][0]
    kept = {k: v.copy() for k, v in first[1].segs.items()}
    rows = first[1].p_reason.copy()
    seq = table.column("tcp_seq").to_pylist()
    parts = [p for _, p, _ in got] + [gro.feed(empty_packet_table(), final=True)]
    assert all(np.array_equal(first[1].segs[k], v) for k, v in kept.items())
    assert np.array_equal(first[1].p_reason, rows)
    assert table.column("tcp_seq").to_pylist() == seq
    whole = fused.run_file(path)
    for m, model in enumerate(("ideal", "napi")):
        cat = {f: np.concatenate([p[m].segs[f] for p in parts]) for f in ("first", "count",
                                                                           "end")}
        assert np.array_equal(cat["first"], whole[model].seg_first_packet)
        assert np.array_equal(cat["count"], whole[model].seg_count)
        assert np.array_equal(cat["end"], whole[model].seg_end_reason)
        assert len(parts[-1][m].segs["first"]) >= 2       # (what finish sent up)
    for part in first:
        arrays = list(part.segs.values()) + [part.flow_id, part.p_reason, part.p_inst,
                                              part.p_poll]
        assert all(a.flags.c_contiguous and a.flags.owndata for a in arrays)


def test_a_capture_from_a_pipe_is_read_once_by_the_engine(tmp_path):
    """A pcap the single pass would cover, given through a FIFO: the pass, which reads
    the file itself, is left out (a pipe can be read once), and the summary is the
    file's."""
    import threading
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh, open(path, "rb") as src:
            fh.write(src.read())
    def stuck(*_):
        raise AssertionError("the run is stuck on the pipe")
    import signal
    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(60)                # (a run that read the pipe twice would wait forever)
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        r = stream_analyze(str(fifo))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        t.join(timeout=30)
    assert not r.single_pass and r.engine_why == "not a regular file"
    assert r.summary["models"] == stream_analyze(path).summary["models"]
