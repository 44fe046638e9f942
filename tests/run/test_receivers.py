"""Several input files as receiver runs (``--captures``, gropcap/run/receivers.py).

Copies of one capture are separate receivers under ``auto``: the run of ``[A, A]``
equals, file by file, the run of ``[A]`` (summary counts exactly twice, per-file entries
equal, the flows table two copies, the Parquet rows of each file equal after
renumbering), in every way of running: the bounded-memory core, in memory (fast and
reference engines) and the core per Dask partition. A capture cut into consecutive
pieces is one run and gives the uncut capture's results. ``continuous`` and
``separate`` override the inference both ways.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from gropcap.capture.reader import read_capture
from gropcap.capture.writer import write_pcap
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze
from gropcap.run.receivers import RunSplit, inputs_dict, receiver_runs
from gropcap.run.stream import stream_analyze

from where import SAMPLES

A = os.path.join(SAMPLES, "real_ipv4.pcap")


# ---- the rule ------------------------------------------------------------------------

def test_auto_starts_a_run_where_a_file_goes_back_in_time():
    first, last = [10, 20, 5, 40, 41], [15, 30, 9, 50, 60]
    # file 3 starts (5) before 30, the latest so far: a new run; file 4 (40) after
    # every earlier file: it continues that run; file 5 (41) before 50: a new run
    assert receiver_runs("auto", first, last).tolist() == [0, 0, 1, 1, 2]
    assert receiver_runs("continuous", first, last).tolist() == [0] * 5
    assert receiver_runs("separate", first, last).tolist() == [0, 1, 2, 3, 4]


def test_a_file_without_packets_joins_the_run_before_it():
    no = np.iinfo(np.int64).min
    assert receiver_runs("separate", [10, no, 20], [15, no, 30]).tolist() == [0, 0, 1]
    assert receiver_runs("auto", [10, no, 5], [15, no, 9]).tolist() == [0, 0, 1]


def test_first_times_rise_reads_only_the_first_records(tmp_path, monkeypatch):
    """``first_times_rise`` (which way ``--jobs`` runs a list of files) compares each
    file's first timestamp, plain or compressed, and hashes nothing. Regression: it
    opened every file through the hashing reader, so the client of the 100 GB run read
    all 100 GB before it started and its RSS peaked at 5 GB of mapped pages."""
    import gzip
    from gropcap.capture import fingerprint
    from gropcap.run.inputs import first_times_rise
    info, batch = read_capture(A)
    frames = [batch.frame(i) for i in range(len(batch))]
    ts, half = batch.ts_ns.tolist(), len(batch) // 2
    early, late = str(tmp_path / "early.pcap"), str(tmp_path / "late.pcap")
    for p, a, b in ((early, 0, half), (late, half, len(frames))):
        write_pcap(p, frames[a:b], ts[a:b], linktype=info.linktypes[0], nanosecond=True)
    with open(late, "rb") as f, gzip.open(late + ".gz", "wb") as g:
        g.write(f.read())
    hashed = []
    real = fingerprint.new

    class Spy:
        def __init__(self, *a):
            self.h = real(*a)

        def update(self, data):
            hashed.append(len(memoryview(data).cast("B")))
            self.h.update(data)

        def hexdigest(self):
            return self.h.hexdigest()
    monkeypatch.setattr(fingerprint, "new", Spy)
    assert ts[half] > ts[0]
    assert first_times_rise([early, late])
    assert first_times_rise([early, late + ".gz"])
    assert not first_times_rise([A, A])         # copies start at the same time
    assert not first_times_rise([late + ".gz", early])
    assert sum(hashed) < os.path.getsize(A) // 4, hashed


def test_run_split_online_agrees_with_receiver_runs():
    """The streamed run decides batch by batch what receiver_runs decides per file."""
    rng = np.random.default_rng(3)
    for captures in ("auto", "continuous", "separate"):
        for _ in range(20):
            files = []
            for _ in range(rng.integers(1, 6)):
                start = int(rng.integers(0, 100))
                ts = np.sort(rng.integers(start, start + 50, size=int(rng.integers(1, 9))))
                files.append(ts)
            split, got = RunSplit(captures), []
            for k, ts in enumerate(files):
                for batch in np.array_split(ts, 2):
                    if len(batch):
                        split.starts(k, batch)
                got.append(split.run)
            want = receiver_runs(captures, [f[0] for f in files], [f.max() for f in files])
            assert got == want.tolist(), (captures, files)


def test_inputs_text_says_what_was_inferred_and_why():
    s = 1_000_000_000
    sep = inputs_dict("auto", [0, int(0.5 * s)], [int(3.6 * s), int(4 * s)])
    assert sep["text"] == ("2 files: 2 separate receivers (file 2 starts 3.1 s before file "
                           "1 ends); --captures continuous to replay them as one")
    assert (sep["receiver_runs"], sep["run_of_file"]) == (2, [0, 1])
    one = inputs_dict("auto", [0, 4 * s, 9 * s], [3 * s, 8 * s, 10 * s])
    assert one["text"] == "3 files: 1 receiver run (continuous timestamps)"
    forced = inputs_dict("continuous", [0, 0], [s, s])
    assert forced["text"] == ("2 files: 1 receiver run (--captures continuous; file 2 "
                              "starts 1.0 s before file 1 ends)")
    asked = inputs_dict("separate", [0, 4 * s], [3 * s, 8 * s])
    assert asked["text"] == "2 files: 2 separate receivers (--captures separate)"
    no = np.iinfo(np.int64).min
    empty = inputs_dict("separate", [0, no], [s, no])
    assert empty["text"] == "2 files: 1 receiver run (--captures separate: one file holds " \
                            "packets)"
    mixed = inputs_dict("auto", [0, 2 * s, 0], [s, 3 * s, s])
    assert mixed["text"].startswith("3 files: 2 receiver runs (file 3 starts 3.0 s before "
                                    "file 2 ends)")
    assert mixed["text"].endswith("; files 1-2 | 3")


# ---- copies of one capture: separate receivers, exactly twice one ----------------------

MODEL_COUNTS = ("packets_in", "segments_in", "superpackets_out", "data_segments_in",
                "data_superpackets_out", "merged_packets")


def assert_twice(two: dict, one: dict) -> None:
    """Summary of ``[A, A]`` = twice the summary of ``[A]``, file by file."""
    assert two["inputs"]["receiver_runs"] == 2 and two["inputs"]["run_of_file"] == [0, 1]
    assert two["packets"] == 2 * one["packets"]
    assert two["wire_bytes"] == 2 * one["wire_bytes"]
    assert two["status"] == {k: 2 * v for k, v in one["status"].items()}
    for m, ms in one["models"].items():
        got = two["models"][m]
        for k in MODEL_COUNTS:
            assert got[k] == 2 * ms[k], (m, k)
        for k in ("aggregation_ratio", "data_ratio", "largest_superpacket"):
            assert got[k] == ms[k], (m, k)
        for k in ("reasons", "end_reasons"):
            assert got[k] == {r: 2 * n for r, n in ms[k].items()}, (m, k)
    assert two["files"][0] == two["files"][1] == one["files"][0]
    assert two["encapsulations"] == {
        e: {k: (2 * v if k == "packets" else {"superpackets": 2 * v["superpackets"],
                                              "aggregation_ratio": v["aggregation_ratio"]})
            for k, v in row.items()} for e, row in one["encapsulations"].items()}


def assert_flows_twice(two, one) -> None:
    """The flows table of ``[A, A]``: the table of ``[A]`` twice, the second copy's ids
    after the first's and its file index 1."""
    n = one.num_rows
    assert two.num_rows == 2 * n
    for half, lo in ((two.slice(0, n), 0), (two.slice(n, n), n)):
        for col in one.column_names:
            want = one.column(col).to_pylist()
            if col == "flow_id":
                want = [f + lo for f in want]
            elif col == "file_index":
                want = [f + (lo > 0) for f in want]
            assert half.column(col).to_pylist() == want, col


def _files(directory, name):
    """``name.parquet`` or the ``name/`` dataset of a --jobs run, in one-process order."""
    import pyarrow.dataset as ds
    path = os.path.join(directory, name + ".parquet")
    if os.path.isfile(path):
        return pq.read_table(path)
    t = ds.dataset(os.path.join(directory, name), format="parquet").to_table()
    order = [("file_index", "ascending"), ("record", "ascending")] if name == "packets" \
        else [("model", "ascending"), ("seg_id", "ascending")]
    return t.sort_by(order)


def assert_rows_per_file(two_dir, one_dir) -> None:
    """The Parquet rows of each copy equal the one-copy rows once renumbered (rows,
    flows, super-packets and polls of the second copy come after the first's)."""
    p1, s1 = _files(one_dir, "packets"), _files(one_dir, "superpackets")
    p2, s2 = _files(two_dir, "packets"), _files(two_dir, "superpackets")
    n, nflows = p1.num_rows, pq.read_table(os.path.join(one_dir, "flows.parquet")).num_rows
    assert p2.num_rows == 2 * n and s2.num_rows == 2 * s1.num_rows
    models = sorted(set(s1.column("model").to_pylist()))
    nseg = {m: s1.column("model").to_pylist().count(m) for m in models}
    polls = {m: max(-1, max(v for v, mm in zip(s1.column("poll_id").to_pylist(),
                                               s1.column("model").to_pylist()) if mm == m))
             + 1 for m in models}
    primary = "napi" if "napi" in models else models[0]
    prefix = {m: "" if m == primary else f"{m}_" for m in models}
    shift = {"file_index": 1, "flow_id": nflows}
    for m in models:
        shift[prefix[m] + "gro_seg"] = nseg[m]
        shift[prefix[m] + "poll_id"] = polls[m]
    for half, k in ((p2.slice(0, n), 0), (p2.slice(n, n), 1)):
        for col in p1.column_names:
            a, b = p1.column(col).to_pylist(), half.column(col).to_pylist()
            if k and col in shift:
                a = [x + shift[col] if x is not None and x >= 0 else x for x in a]
            assert a == b, (col, k)
    for m in models:
        one = s1.filter(np.array(s1.column("model").to_pylist()) == m)
        two = s2.filter(np.array(s2.column("model").to_pylist()) == m)
        for half, k in ((two.slice(0, one.num_rows), 0),
                        (two.slice(one.num_rows, one.num_rows), 1)):
            for col in one.column_names:
                a = one.column(col).to_pylist()
                add = {"seg_id": nseg[m], "flow_id": nflows, "first_packet": n,
                       "last_packet": n, "poll_id": polls[m]}.get(col, 0) if k else 0
                if add:
                    a = [x + add if x >= 0 else x for x in a]
                assert a == half.column(col).to_pylist(), (m, col, k)


@pytest.mark.parametrize("queues", [1, 2])
def test_copies_stream_equal_one_copy_twice(tmp_path, queues):
    cfg = GroConfig(queues=queues)
    one = stream_analyze(A, cfg, out_dir=str(tmp_path / "one"))
    two = stream_analyze([A, A], cfg, out_dir=str(tmp_path / "two"))
    assert two.summary["inputs"]["text"].startswith("2 files: 2 separate receivers (file 2")
    assert_twice(two.summary, one.summary)
    assert_flows_twice(two.flows, one.flows)
    assert two.flow_causes == one.flow_causes * 2
    assert_rows_per_file(tmp_path / "two", tmp_path / "one")
    meta = pq.read_schema(tmp_path / "two" / "packets.parquet").metadata
    assert meta[b"gropcap.captures"] == b"auto"


@pytest.mark.parametrize("name", ["real_vxlan.pcap", "pairs/bulk.postgro.pcap"])
def test_copies_through_the_unfused_stream(name):
    """A VXLAN tunnel without a socket (the tunnel hint) and frames captured already
    coalesced run the bounded-memory core unfused (decode, then GRO as a second sweep):
    its runs split there too."""
    x = os.path.join(SAMPLES, name)
    one = stream_analyze(x)
    two = stream_analyze([x, x])
    # what makes the core run unfused is there
    assert one.udp_tunnel_hint is not None if "vxlan" in name else \
        one.totals.coalesced is not None
    assert_twice(two.summary, one.summary)
    if one.udp_tunnel_hint is not None:
        # what --udp-tunnel would give, replayed per receiver run too: the same ratios
        assert two.udp_tunnel_hint["models"] == one.udp_tunnel_hint["models"]
    assert_flows_twice(two.flows, one.flows)
    assert two.summary == analyze([x, x]).summary()


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_copies_in_memory_equal_one_copy_twice(tmp_path, engine):
    from gropcap.io.parquet import write_analysis
    one = analyze(A, engine=engine)
    two = analyze([A, A], engine=engine)
    assert_twice(two.summary(), one.summary())
    assert_flows_twice(two.flows, one.flows)
    for m, r in one.results.items():
        r.check_invariants(one.decoded.column("payload_len").to_numpy())
        two.results[m].check_invariants(two.decoded.column("payload_len").to_numpy())
    write_analysis(one, str(tmp_path / "one"))
    write_analysis(two, str(tmp_path / "two"))
    assert_rows_per_file(tmp_path / "two", tmp_path / "one")
    # the bounded-memory core gives the same (summary, flows, rows)
    streamed = stream_analyze([A, A], out_dir=str(tmp_path / "stream"))
    assert streamed.summary == two.summary()
    assert streamed.flows.equals(two.flows)


def test_api_and_gro_cells_stage_take_captures():
    """gropcap.analyze's keyword; the gro_cells stage runs per receiver run too."""
    import gropcap
    one = gropcap.analyze(A, tunnel_gro=True)
    two = gropcap.analyze([A, A], tunnel_gro=True, captures="separate")
    assert two.summary()["inputs"]["captures"] == "separate"
    for m, st in one.summary()["stages"].items():
        got = two.summary()["stages"][m]
        assert got["delivered"] == 2 * st["delivered"]
    cont = gropcap.analyze([A, A], captures="continuous")
    assert cont.summary()["inputs"]["receiver_runs"] == 1


def test_continuous_replays_copies_as_one_timeline():
    """--captures continuous: today's one timeline (the second copy's stamps go back, the
    napi model's running maximum puts them in few polls); not twice one copy."""
    one = analyze(A, models=("napi",))
    cont = analyze([A, A], models=("napi",), captures="continuous")
    s = cont.summary()
    assert s["inputs"]["receiver_runs"] == 1
    assert s["inputs"]["text"].startswith("2 files: 1 receiver run (--captures continuous;")
    assert s["files"][0]["models"] == one.summary()["files"][0]["models"]
    assert s["files"][1]["models"] != s["files"][0]["models"]
    assert cont.flows.num_rows == one.flows.num_rows       # flows shared across files
    streamed = stream_analyze([A, A], models=("napi",), captures="continuous")
    assert streamed.summary == s


# ---- a capture cut into consecutive pieces: one run -----------------------------------

@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """``A`` cut into three consecutive pieces (tcpdump -C style), nanosecond pcap."""
    d = tmp_path_factory.mktemp("pieces")
    info, batch = read_capture(A)
    frames = [batch.frame(i) for i in range(len(batch))]
    ts = batch.ts_ns.tolist()
    wire = batch.wire_len.tolist()
    cuts = [0, len(frames) // 3, 2 * len(frames) // 3, len(frames)]
    paths = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        p = str(d / f"piece{k}.pcap")
        write_pcap(p, frames[a:b], ts[a:b], linktype=info.linktypes[0], nanosecond=True,
                   wire_lens=wire[a:b])
        paths.append(p)
    return paths


def test_pieces_are_one_run_equal_to_the_uncut_capture(pieces, tmp_path):
    whole = stream_analyze(A)
    cut = stream_analyze(pieces)
    assert cut.summary["inputs"]["text"] == "3 files: 1 receiver run (continuous timestamps)"
    assert cut.summary["inputs"]["run_of_file"] == [0, 0, 0]
    assert cut.summary["models"] == whole.summary["models"]
    assert cut.flows.equals(whole.flows)
    assert analyze(pieces).summary() == cut.summary


def test_pieces_forced_separate_equal_each_piece_alone(pieces):
    sep = stream_analyze(pieces, captures="separate")
    assert sep.summary["inputs"]["text"] == "3 files: 3 separate receivers (--captures " \
                                            "separate)"
    alone = [stream_analyze(p).summary for p in pieces]
    for m in sep.summary["models"]:
        assert sep.summary["models"][m]["superpackets_out"] == sum(
            s["models"][m]["superpackets_out"] for s in alone)
    for f, s in zip(sep.summary["files"], alone):
        assert f["models"] == s["files"][0]["models"]
    assert analyze(pieces, captures="separate").summary() == sep.summary


# ---- the command line: the report line and the option ----------------------------------

def test_report_line_and_json_inputs(tmp_path):
    from click.testing import CliRunner

    from gropcap.cli.app import main
    r = CliRunner().invoke(main, ["analyze", A, A, "-q", "--model", "napi"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[2:4] == [
        "inputs: 2 files: 2 separate receivers (file 2 starts 1.0 s before file 1 ends);",
        "  --captures continuous to replay them as one"]
    assert all(len(line) <= 80 for line in lines)
    r = CliRunner().invoke(main, ["analyze", A, A, "-q", "--format", "json",
                                  "--captures", "continuous"])
    s = json.loads(r.output)
    assert (s["inputs"]["captures"], s["inputs"]["receiver_runs"]) == ("continuous", 1)
    r = CliRunner().invoke(main, ["analyze", A, "--captures", "sometimes"])
    assert r.exit_code == 2 and "'sometimes' is not one of" in r.output
    # one file: no inputs line
    r = CliRunner().invoke(main, ["analyze", A, "-q", "--model", "napi"])
    assert not any(line.startswith("inputs:") for line in r.output.splitlines())


def test_bad_captures_keyword_is_a_config_error():
    from gropcap.errors import ConfigError
    with pytest.raises(ConfigError, match="captures"):
        stream_analyze(A, captures="sometimes")


# ---- Dask: the core per partition ---------------------------------------------------------

distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _no_fallback(client, why):
    pytest.fail(f"fell back to the in-memory merge: {why}")


@pytest.mark.parametrize("exchange", ["auto", "exchange"])
@pytest.mark.parametrize("queues", [1, 2])
def test_copies_on_dask_equal_one_copy_twice(client, tmp_path, queues, exchange):
    """Partitions never mix runs, flows keyed by run, delivery run after run: the same
    as one process, and twice one copy. ``auto`` picks the runs exchange (a task per
    receiver run, written with the counts of the runs before it as bases); the exchange
    cuts run x RX-queue partitions."""
    from gropcap.run.dask_core import analyze_partitioned
    cfg = GroConfig(queues=queues)
    one = stream_analyze(A, cfg, out_dir=str(tmp_path / "one"))
    two = stream_analyze([A, A], cfg, out_dir=str(tmp_path / "two"))
    dist = analyze_partitioned([A, A], cfg, client=client, out_dir=str(tmp_path / "dist"),
                               fallback=_no_fallback, exchange=exchange)
    assert dist.exchange == ("runs" if exchange == "auto" else "exchange")
    assert dist.summary == two.summary
    assert dist.flows.equals(two.flows) and dist.flow_causes == two.flow_causes
    assert_twice(dist.summary, one.summary)
    assert_rows_per_file(tmp_path / "dist", tmp_path / "one")
    # and the ideal model alone (its delivery key: trigger row, then the run's end flush)
    ideal = analyze_partitioned([A, A], cfg, models=("ideal",), client=client,
                                fallback=_no_fallback, exchange=exchange)
    assert ideal.summary == stream_analyze([A, A], cfg, models=("ideal",)).summary


@pytest.mark.parametrize("scratch", [None, False], ids=["files", "transfers"])
def test_in_memory_dask_merge_equals_one_process(client, scratch):
    """The in-memory Dask merge (--no-stream --jobs, and the core's fallback): its GRO
    partitions hold one run each; the results equal one process'."""
    from gropcap.run.distributed import analyze_distributed
    cfg = GroConfig(queues=2)
    got = analyze_distributed([A, A], cfg, client=client, scratch=scratch)
    one = analyze([A, A], cfg)
    for m in one.results:
        assert got.results[m].equals(one.results[m]), m
    assert got.summary() == one.summary()
    assert got.flows.equals(one.flows)
    # a model run as one task (the gro_cells stage) takes the runs too
    cells = analyze_distributed([A, A], GroConfig(tunnel_gro=True), client=client)
    assert cells.summary() == analyze([A, A], GroConfig(tunnel_gro=True)).summary()


def test_directory_of_links_with_jobs_and_out(tmp_path):
    """The 100 GB run of issue 15 in small: a directory of links to one capture analysed
    with --jobs 2 --out: every count is the one-copy count times the links, each file's
    entry the one copy's, the flows the one copy's flows again (ids after each other)."""
    from click.testing import CliRunner

    from gropcap.cli.app import main
    d = tmp_path / "links"
    d.mkdir()
    for k in range(3):
        os.symlink(A, d / f"copy{k}.pcap")
    one = json.loads(CliRunner().invoke(main, ["analyze", A, "-q", "--format", "json"]).output)
    r = CliRunner().invoke(main, ["analyze", str(d), "-q", "--format", "json", "--jobs", "2", "--parallel", "workers",
                                  "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["inputs"]["text"].startswith("3 files: 3 separate receivers (file 2 starts")
    assert sorted(os.listdir(tmp_path / "out")) == ["flows.parquet", "packets",
                                                    "superpackets"]
    for m, ms in one["models"].items():
        for k in MODEL_COUNTS:
            assert got["models"][m][k] == 3 * ms[k], (m, k)
    assert all(f["models"] == one["files"][0]["models"] for f in got["files"])
    flows = pq.read_table(tmp_path / "out" / "flows.parquet")
    n = flows.num_rows // 3
    for k in range(3):
        part = flows.slice(k * n, n)
        assert part.column("flow_id").to_pylist() == list(range(k * n, (k + 1) * n))
        assert set(part.column("file_index").to_pylist()) == {k}
        assert part.drop(["flow_id", "file_index"]).equals(
            flows.slice(0, n).drop(["flow_id", "file_index"]))


@pytest.mark.parametrize("captures", ["auto", "continuous"])
def test_load_keeps_the_receiver_runs(tmp_path, captures):
    """gropcap.load(DIR) of a run over copies: the summary (its inputs section) is the
    run's, whether stored (default columns) or rendered again (every column)."""
    from gropcap.io.load import load
    for cols in ("default", "all"):
        d = tmp_path / f"{captures}-{cols}"
        r = stream_analyze([A, A], out_dir=str(d), packet_columns=cols, captures=captures)
        a = load(str(d))
        assert a.summary() == r.summary, cols
        assert a.summary()["inputs"]["captures"] == captures
