"""--poll-acks in bounded memory (issue 14: every feature in every mode): a pass over the
capture before GRO finds the frames the receiver's ACKs close (``ackpolls.AckScan``, batch
by batch), the polls and their retimed arrivals are computed a slice at a time
(``ackpolls.PollClock``), and the napi model reads those arrivals. Summary, flows and
Parquet rows equal the in-memory run's; the stateful scan and clock equal the
whole-table functions whatever the cuts."""

from __future__ import annotations

import functools
import glob
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

import gropcap.receive.ackpolls as ackpolls
import gropcap.run.stream as streaming
from gropcap.cli import main
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze, decode_files

from tests.run.test_stream import assert_same, small_batches
from where import ROOT

S = os.path.join(ROOT, "sample_pcaps")
# captures with the receiver's ACKs next to the data (real_*: iperf3 on a veth pair;
# pairs/acks1/*.both: a recorded pair's wire view with the receiver's ACKs)
WITH_ACKS = [os.path.join(S, n) for n in ("real_ipv4.pcap", "real_ipv4_p4.pcap",
                                          "real_ipv6.pcap", "real_vxlan.pcap")] + \
    sorted(glob.glob(os.path.join(S, "pairs", "acks1", "*.both.pcap.zst")))[:3]


@pytest.mark.parametrize("path", WITH_ACKS, ids=os.path.basename)
@pytest.mark.parametrize("config,batch", [
    (GroConfig(poll_acks=True), 65536),
    (GroConfig(poll_acks=True, queues=2, budget=8), 7),
    (GroConfig(poll_acks=True, poll_gap_ns=5_000, gro_flush_timeout_ns=20_000,
               napi_defer_hard_irqs=1), 131),
], ids=["default", "q2-b8", "timers"])
def test_stream_equals_analyze_with_poll_acks(path, config, batch, tmp_path):
    a, r = assert_same(path, config, tmp_path, batch_records=small_batches(path, batch))
    # the ACKs did decide polls: the napi model's polls differ from a run without them
    assert a.poll_acks
    plain = analyze(path, config.replace(poll_acks=False))
    assert a.results["napi"].seg_poll_id.tolist() != \
        plain.results["napi"].seg_poll_id.tolist()


def test_no_evidence_keeps_the_gap_rule(tmp_path):
    # a capture without the receiver's ACKs (a pair's wire view: the data only): the
    # napi model runs as without --poll-acks
    path = os.path.join(S, "pairs", "bulk.wire.pcap")
    a, r = assert_same(path, GroConfig(poll_acks=True), tmp_path, batch_records=5)
    assert not a.poll_acks
    assert r.summary["models"] == analyze(path, GroConfig()).summary()["models"]


@functools.lru_cache(maxsize=None)
def _table(path):
    return decode_files([path], None)[0]


def _cuts(data, n):
    cut = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6))))
    return list(zip([0, *cut], [*cut, n]))


@settings(max_examples=25, deadline=None)
@given(data=st.data(), prune=st.sampled_from([1, 2, 64, ackpolls.PRUNE_AT]),
       which=st.integers(0, 3))
def test_the_scan_and_the_clock_in_pieces_equal_the_whole(data, prune, which):
    # AckScan batch by batch (with frames pruned early) and PollClock slice by slice
    # equal ack_evidence / poll_ids / poll_times over the whole table
    table = _table(WITH_ACKS[which])
    n = table.num_rows
    whole = ackpolls.ack_evidence(table)
    ts = table.column("ts_ns").to_numpy()
    gap, budget = data.draw(st.sampled_from([(50_000, 64), (0, 8), (10**6, 3)]))
    ids = ackpolls.poll_ids(ts, whole, gap, budget)
    times = ackpolls.poll_times(ts, ids)
    default, ackpolls.PRUNE_AT = ackpolls.PRUNE_AT, prune
    try:
        scan = ackpolls.AckScan()
    finally:
        ackpolls.PRUNE_AT = default
    ends = np.zeros(n, bool)
    parts = [scan.add(table.slice(a, b - a), ends) for a, b in _cuts(data, n)]
    fwd, rev, pure = (np.concatenate([p[k] for p in parts]) for k in range(3))
    assert ends.tolist() == whole.ends.tolist()
    assert scan.counted(fwd, rev, pure).tolist() == whole.counted.tolist()
    assert (scan.acks, len(scan.answered)) == (whole.acks, whole.directions)
    clock = ackpolls.PollClock(gap, budget)
    got_ids, got_times = [], []
    for a, b in _cuts(data, n):
        got_ids.append(clock.ids(ts[a:b], whole.ends[a:b], whole.counted[a:b]))
        got_times.append(clock.times(ts[a:b], got_ids[-1]))
    got_times.append(clock.times(np.zeros(0, np.int64), np.zeros(0, np.int64), final=True))
    assert np.concatenate(got_ids).tolist() == ids.tolist()
    assert np.concatenate(got_times).tolist() == times.tolist()


def test_cli_poll_acks_runs_in_bounded_memory(monkeypatch, stream_calls):
    calls = stream_calls
    args = ["analyze", WITH_ACKS[0], "--poll-acks", "--format", "json", "-q"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert len(calls) == 1
    mem = CliRunner().invoke(main, args + ["--no-stream"])
    assert json.loads(r.stdout) == json.loads(mem.stdout)
    # --jobs 2: threads in one process, and the note says why
    import gropcap.run.core as core
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)
    r = CliRunner().invoke(main, args[:-1] + ["--jobs", "2", "--queues", "4"])
    assert r.exit_code == 0, r.output
    assert "--poll-acks reads the whole capture" in r.stderr and len(calls) == 2


def test_an_unfused_second_try_reuses_the_ack_pass(monkeypatch, tmp_path):
    # a UDP tunnel without a socket ends the fused pass and the run starts again
    # unfused: the ACK pass ran once, and its files are gone at the end
    path = os.path.join(S, "real_vxlan.pcap")
    passes, tries = [], []
    real_pass, real_run = streaming._ack_times, streaming.stream_analyze

    def count_pass(*args):
        passes.append(1)
        return real_pass(*args)

    def count_tries(*args, **kw):
        tries.append(kw.get("_fused", True))
        return real_run(*args, **kw)
    monkeypatch.setattr(streaming, "_ack_times", count_pass)
    monkeypatch.setattr(streaming, "stream_analyze", count_tries)
    config = GroConfig(poll_acks=True)
    r = streaming.stream_analyze(path, config, tmp_dir=str(tmp_path))
    assert tries == [True, False] and passes == [1]
    assert os.listdir(tmp_path) == []
    assert r.summary == analyze(path, config).summary()


@pytest.mark.parametrize("captures", ["separate", "continuous"])
def test_each_receiver_run_has_its_own_acks(captures, tmp_path):
    # two copies of one capture: separate receivers each find their own ACKs, polls and
    # times (a copy's ACKs are not old ACKs of the first one), so the napi model gives
    # twice one copy; as one receiver run, the second copy's ACKs do not advance
    path = WITH_ACKS[0]
    config = GroConfig(poll_acks=True)
    one = analyze(path, config)
    two = analyze([path, path], config, captures=captures)
    napi = two.summary()["models"]["napi"]["superpackets_out"]
    once = one.summary()["models"]["napi"]["superpackets_out"]
    if captures == "separate":
        assert (napi, two.poll_acks.acks) == (2 * once, 2 * one.poll_acks.acks)
    else:
        assert napi < 2 * once and two.poll_acks.acks == one.poll_acks.acks
    mem_dir, st_dir = tmp_path / "mem", tmp_path / "stream"
    r = streaming.stream_analyze([path, path], config, captures=captures,
                                 batch_records=97, out_dir=str(st_dir))
    assert r.summary == two.summary()
    from gropcap.io.parquet import write_analysis
    import pyarrow.parquet as pq
    write_analysis(two, str(mem_dir))
    for name in ("packets.parquet", "superpackets.parquet"):
        assert pq.read_table(st_dir / name).to_pylist() == \
            pq.read_table(mem_dir / name).to_pylist()


def test_the_ack_pass_has_a_progress_line():
    # the pass before GRO is a Python loop over the rows: a line counts its packets
    from gropcap.run.progress import Progress
    with Progress(True) as p:
        r = streaming.stream_analyze(WITH_ACKS[0], GroConfig(poll_acks=True), progress=p)
        tasks = {t.description: (t.completed, t.fields["detail"]) for t in p._bar.tasks}
    n = r.summary["packets"]
    assert tasks["ACK polls (--poll-acks)"] == (n, f"done, {n} packets")
