"""Poll ends from the receiver's ACKs (``gropcap/receive/ackpolls.py``, ``--poll-acks``; issue 12).

Crafted captures check what the inference reads (which frame an ACK closes, duplicate
ACKs, the receiver's own ACKs outside the budget); the recordings of
``sample_pcaps/pairs/acks1``, ``acks2`` and ``acks3`` (``make_pairs.py --acks``: three
sessions, each pair also holding ``<name>.both.pcap``, the wire view with the receiver's
ACKs as one tap on the link takes them; stored zstd-compressed) check it against the
kernel: the issue-12 generalisation test, a profile fitted on one pair holding within 3%
on every other pair of the three sessions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner


import gropcap  # noqa: E402
from craft import eth, ipv4, make_batch, tcp  # noqa: E402
from gropcap.receive import ackpolls  # noqa: E402
from gropcap.cli import main  # noqa: E402
from gropcap.decode.fast import decode_batch  # noqa: E402
from gropcap.errors import ConfigError  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.receive.profile import read_profile  # noqa: E402
from gropcap.replay.pairs import count_pair, find_pairs, format_table, load_pair  # noqa: E402

from where import TESTS

PAIRS_DIR = Path(TESTS).parent / "sample_pcaps" / "pairs"
# acks1 and acks2: the sessions the method was settled on; acks3: recorded afterwards
SESSIONS = [PAIRS_DIR / "acks1", PAIRS_DIR / "acks2", PAIRS_DIR / "acks3"]
PAIRS = [dataclasses.replace(p, name=f"{d.name}/{p.name}")
         for d in SESSIONS for p in find_pairs(d)]
TRAIN = "bulk"
TOLERANCE = 0.03            # issue 12: "each within 3%"
ACK, PSH, SYN = 0x10, 0x08, 0x02
A, B = "10.0.0.1", "10.0.0.2"    # A sends data to B; B's ACKs go back


def _table(frames, ts_us):
    batch = make_batch(frames, ts_ns=[1_700_000_000_000_000_000 + int(t * 1000)
                                      for t in ts_us])
    return pa.Table.from_batches([decode_batch(batch)])


def _data(seq, n=100, flags=ACK):
    return eth(ipv4(A, B, 6, tcp(40000, 5201, seq=seq, ack=1, flags=flags,
                                 payload=b"x" * n)))


def _ack(ackno):
    return eth(ipv4(B, A, 6, tcp(5201, 40000, seq=1, ack=ackno, flags=ACK)))


# --- what the inference reads --------------------------------------------------------

def test_an_ack_closes_the_frame_ending_at_its_number():
    t = _table([_data(1000), _data(1100), _ack(1200), _data(1200), _data(1300),
                _ack(1300), _ack(1300), _data(1400)], [0, 1, 20, 30, 31, 50, 51, 60])
    ev = ackpolls.ack_evidence(t)
    # frame 1 (ends at 1200) and frame 3 (ends at 1300) are closed; the duplicate ACK of
    # 1300 names no new frame; the receiver's ACKs do not count towards the budget
    assert ev.ends.tolist() == [False, True, False, True, False, False, False, False]
    assert ev.counted.tolist() == [True, True, False, True, True, False, False, True]
    assert (ev.acks, ev.directions) == (2, 1) and ev


def test_an_ack_of_no_frame_end_and_a_capture_without_acks_give_no_evidence():
    assert not ackpolls.ack_evidence(_table([_data(1000), _ack(1050)], [0, 10]))
    ev = ackpolls.ack_evidence(_table([_data(1000), _data(1100)], [0, 1]))
    assert not ev and ev.counted.all() and not ev.ends.any()


def test_polls_end_at_acks_gaps_and_the_budget():
    ends = np.array([0, 1, 0, 0, 0, 0, 0, 0], bool)
    counted = np.array([1, 1, 1, 0, 1, 1, 1, 1], bool)
    ev = ackpolls.AckEvidence(ends, counted, 1, 1)
    ts = np.array([0, 1, 2, 3, 4, 100, 101, 102]) * 1000
    # ACK after frame 1; a 96 us gap before frame 5; budget 2 counted frames (frame 3,
    # the receiver's ACK, does not count)
    assert ackpolls.poll_ids(ts, ev, 50_000, 2).tolist() == [0, 0, 1, 1, 1, 2, 2, 3]
    assert ackpolls.poll_ids(ts, ev, 200_000, 64).tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    times = ackpolls.poll_times(ts, [0, 0, 1, 1, 1, 2, 2, 3])
    assert times.tolist() == [1000, 1000, 4000, 4000, 4000, 101_000, 101_000, 102_000]
    # a poll whose last frame is not later than the previous poll's time moves 1 ns on
    assert ackpolls.poll_times([5, 5, 5], [0, 1, 2]).tolist() == [5, 6, 7]


def test_an_ack_ends_the_poll_where_the_gap_rule_sees_none():
    # two pushes 9 us apart; the receiver ACKed the first before the second arrived
    frames = [_data(1000 + 100 * i) for i in range(3)] + [_ack(1300)] + \
        [_data(1300 + 100 * i) for i in range(3)] + [_ack(1600)]
    t = _table(frames, [0, 1, 2, 10, 11, 12, 13, 40])
    plain = GroConfig(model="napi")
    from gropcap.run.engines import simulate
    # the gap rule joins both pushes into one super-packet (+ the 2 ACKs, each alone);
    # with the ACKs the first poll ends after frame 2, as the kernel's did
    assert simulate(t, plain).num_superpackets == 3
    r = simulate(t, plain.replace(poll_acks=True))
    assert r.num_superpackets == 4
    assert np.asarray(r.seg_first_packet).tolist() == [0, 3, 4, 7]


# --- the option and the report -------------------------------------------------------

BOTH = load_pair(PAIRS_DIR / "acks1" / "mss536").both


def test_poll_acks_is_a_receive_parameter_with_its_source():
    r = CliRunner().invoke(main, ["analyze", str(BOTH), "--model", "napi", "--poll-acks",
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["receive"]["poll_acks"] == {"value": "on", "source": "option"}
    r0 = CliRunner().invoke(main, ["analyze", str(BOTH), "--model", "napi",
                                   "--format", "json"])
    assert json.loads(r0.stdout)["receive"]["poll_acks"] == {"value": "off",
                                                              "source": "default"}
    a = gropcap.analyze(BOTH, GroConfig(poll_acks=True), models=("napi",))
    assert a.poll_acks.acks > 40 and a.poll_acks.directions >= 2  # data + iperf3 control
    b = gropcap.analyze(BOTH, GroConfig(), models=("napi",))
    assert b.poll_acks is None
    n_acks, n_gap = (x.summary()["models"]["napi"]["superpackets_out"] for x in (a, b))
    assert n_acks != n_gap
    # the command line (its default run is batch by batch: --poll-acks takes it in
    # memory) gives the notebook's numbers
    cli = [doc["models"]["napi"]["superpackets_out"] for doc in (
        json.loads(r.stdout), json.loads(r0.stdout))]
    assert cli == [n_acks, n_gap]


def test_poll_acks_does_not_run_in_the_in_memory_dask_merge():
    # (the Dask core per partition runs it: tests/run/test_poll_acks_dask.py)
    from gropcap.run.core import analyze_run
    with pytest.raises(ConfigError, match="poll-acks"):
        analyze_run(BOTH, GroConfig(poll_acks=True), models=("napi",), jobs=2,
                    in_memory=True)


# --- against the kernel: two recording sessions ---------------------------------------

def test_the_sessions_hold_every_kind_with_acks_and_the_polls():
    for d in SESSIONS:
        names = {p.name for p in find_pairs(d)}
        assert {"bulk", "p8", "ipv6", "ecn", "nots", "mss536", "mtu9000", "lossreorder",
                "vxlan", "udpgso", "rr"} <= names
        for p in find_pairs(d):
            assert p.both is not None and p.both.exists()
            polls = p.meta["kernel_polls"]
            assert len(polls["time_ns"]) == len(polls["work_sequence"])


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_the_both_view_is_the_wire_view_and_the_receivers_acks(pair):
    """``both`` holds every frame of the wire view, in order, and frames of the other
    directions only: the receiver's ACKs and the little data the iperf3 server sends on
    its control connection (and rr's answers)."""
    from gropcap.run.memory import decode_files
    from gropcap.replay.pairs import _directions
    wire, _ = decode_files(pair.wire)
    both, _ = decode_files(pair.both)
    dw = set(_directions(wire))
    mine = np.array([d in dw for d in _directions(both)])
    assert int(mine.sum()) == wire.num_rows
    assert both.column("tcp_seq").to_numpy()[mine].tolist() == \
        wire.column("tcp_seq").to_numpy().tolist()


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """``gropcap calibrate`` on each session's TRAIN pair (both directions + the kernel's
    post-GRO view)."""
    out = {}
    for d in SESSIONS:
        path = tmp_path_factory.mktemp(d.name) / "host.toml"
        train = load_pair(d / TRAIN)
        r = CliRunner().invoke(main, ["calibrate", str(train.both), str(train.postgro),
                                      "-o", str(path)])
        assert r.exit_code == 0, (r.output, r.exception)
        assert "receiver ACKs close a frame" in r.output
        out[d.name] = path
    return out


def test_calibrate_takes_the_polls_from_the_acks(profiles):
    for name, path in profiles.items():
        doc = read_profile(path)
        assert doc["receiver"]["poll_acks"] is True
        fit = doc["fit"]
        # the receiver's ACK directions are not in the residual (the kernel's view has
        # none of them): what is compared is the data direction
        assert fit["kernel_packets"] == sum(f["kernel"] for f in fit["flows"])
        assert all(f["kernel"] > 0 for f in fit["flows"])
        assert fit["total_difference"] == 0
        # bulk only bounds the gap; with the ACKs the longest gap that fits is taken
        lo, hi = fit["poll_gap_us_range"]
        assert doc["receiver"]["poll_gap_us"] == hi > lo


@pytest.mark.parametrize("session,pair", [
    (d.name, p) for d in SESSIONS for p in PAIRS if p.name != f"{d.name}/{TRAIN}"],
    ids=lambda v: v if isinstance(v, str) else v.name)
def test_profile_fitted_on_one_pair_holds_on_every_other_pair_of_every_session(
        profiles, session, pair):
    """The issue-12 generalisation test: the profile fitted on one session's bulk pair,
    applied to every other pair of the three sessions (both directions, as a tap takes them),
    gives the kernel's packet count within 3% (the data direction: the kernel's view has
    no other)."""
    from gropcap.receive.profile import apply_profile, load_profile
    config, _ = apply_profile(pair.config(model="napi", mtu=pair.meta["receiver"]["mtu"]),
                              load_profile(profiles[session]))
    assert config.poll_acks
    c = count_pair(pair, {"napi": config}, both=True)
    assert abs(c.error("napi")) <= TOLERANCE, format_table([c])


@pytest.mark.parametrize("pair", [p for p in PAIRS if p.name.endswith(("mss536", "ipv6",
                                                                       "vxlan", "rr"))],
                         ids=lambda p: p.name)
def test_analyze_with_the_profile_counts_as_count_pair(profiles, pair):
    """The public path (``gropcap.analyze(..., receiver=PROFILE)`` on the capture of both
    directions) gives what the pair counting above measured."""
    from gropcap.receive.profile import apply_profile, load_profile
    meta = pair.meta
    config = GroConfig(**meta.get("gropcap_options", {})).replace(
        mtu=meta["receiver"]["mtu"])
    a = gropcap.analyze(pair.both, config, models=("napi",),
                        receiver=str(profiles["acks1"]))
    assert a.config.poll_acks and a.poll_acks
    cfg, _ = apply_profile(pair.config(model="napi", mtu=meta["receiver"]["mtu"]),
                           load_profile(profiles["acks1"]))
    counted = count_pair(pair, {"napi": cfg}, both=True).models["napi"]
    def keys(flows):
        return zip(*(flows.column(c).to_pylist() for c in ("src", "dst", "sport", "dport")))
    dw = set(keys(gropcap.analyze(pair.wire, config, models=("ideal",)).flows))
    f = a.flows
    ours = sum(n for n, k in zip(f.column("napi_superpackets").to_pylist(), keys(f))
               if k in dw)
    assert ours == counted


# --- root: a live --acks recording ---------------------------------------------------

def _record_reason() -> str | None:
    import shutil
    if os.geteuid() != 0:
        return "recording pairs needs root (ip netns, tcpdump)"
    sys.path.insert(0, str(PAIRS_DIR.parent))
    import make_pairs
    missing = make_pairs.missing_tools()
    if missing:
        return f"recording pairs needs {', '.join(missing)}"
    if shutil.which("perf") is None:
        return "the polls' times are recorded with perf (napi:napi_poll); install linux-perf"
    return None


RECORD_REASON = _record_reason()


@pytest.mark.root
@pytest.mark.skipif(RECORD_REASON is not None, reason=f"{RECORD_REASON}")
def test_live_acks_recording_puts_the_receivers_acks_at_its_poll_ends(tmp_path):
    """``make_pairs.py --acks`` on this machine: the capture of both directions holds the
    wire view and the receiver's ACKs, every poll has its tracepoint time, and the ACK of
    a poll's last frame leaves within microseconds of the poll's end (the mechanism
    ``--poll-acks`` rests on: the ACK is sent from the poll's flush)."""
    import make_pairs
    make_pairs.record_case(tmp_path, "bulk", acks=True)
    pair = load_pair(tmp_path / "bulk")
    polls = pair.meta["kernel_polls"]
    assert polls["work_sequence"] and len(polls["time_ns"]) == len(polls["work_sequence"])
    from gropcap.run.memory import decode_files
    wire, _ = decode_files(pair.wire)
    both, _ = decode_files(pair.both)
    acks, _ = decode_files(pair.file("acks"))
    assert both.num_rows == wire.num_rows + acks.num_rows
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "ack_polls_table", PAIRS_DIR.parent.parent / "scripts" / "ack_polls_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    delays = np.array(table._ack_delays(pair)["receiver veth -Q out (acks.pcap)"])
    assert len(delays) >= 20
    assert abs(np.median(delays)) < 20, delays
