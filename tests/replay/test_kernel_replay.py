"""Live-kernel replay: the harness pieces (any user) and the kernel itself (root + netns).

Root tests replay every selftest case through a real veth GRO receiver: the kernel must give
the case table's expected sizes (this validates the table against the running kernel), and
the simulator must build the same super-packets, in the same order, as the kernel did — on
every case and on every file in sample_pcaps/. One namespace pair serves all of them.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import struct
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from gropcap import selftest_cases as ST
from gropcap.errors import GropcapError
from gropcap.gro.result import GroResult
from gropcap.replay import _wire
from gropcap.replay.compare import compare
from gropcap.replay.kernel import (DeliveredUnit, KernelReplayResult, _Matcher, running_kernel,
                                   split_bursts)
from tests.live import live

from where import TESTS

SAMPLES = sorted(glob.glob(os.path.join(TESTS, "..", "sample_pcaps",
                                        "*.pcap*")))




def _kernel_config(option: str) -> str | None:
    try:
        with gzip.open("/proc/config.gz", "rt") as fh:
            for line in fh:
                if line.startswith(option + "="):
                    return line.strip().split("=", 1)[1]
        return "n"
    except OSError:
        return None


# ------------------------------------------------------------------ any user
def test_split_bursts_respects_budget_and_renumbers():
    assert split_bursts(None, 5, budget=2) == [0, 0, 1, 1, 2]
    assert split_bursts([3, 3, 7, 7, 7], 5, budget=64) == [0, 0, 1, 1, 1]
    assert split_bursts([0] * 130, 130)[-1] == 2
    with pytest.raises(GropcapError):
        split_bursts([0, 0], 3)


def test_fix_frame_policy():
    f0, f1 = ST.frames("tcp_csum", "ipv4")[:2]          # f1 has a deliberately bad checksum
    assert _wire.fix_frame(f0) == (f0, "kept")
    assert _wire.fix_frame(f1) == (f1, "kept-bad")
    # snapped to 80 bytes: padded to the wire length with zeros, checksum recomputed
    g, act = _wire.fix_frame(f0[:80], len(f0))
    assert act == "fixed" and len(g) == len(f0) and g[80:] == bytes(len(f0) - 80)
    assert _wire.l4_checksum_state(g) == "good" and g[:34] == f0[:34]
    # sender-side offload: the field holds only the pseudo-header sum
    p = _wire.parse(f0)
    ip = p.ips[-1]
    part = bytearray(f0)
    pseudo = _wire.fold(_wire.ones_sum(ip.src + ip.dst + struct.pack("!HH", 6, ip.end - p.l4_off)))
    struct.pack_into("!H", part, p.l4_off + 16, pseudo)
    assert _wire.l4_checksum_state(bytes(part)) == "partial"
    assert _wire.fix_frame(bytes(part)) == (f0, "fixed")
    # the epb flag forces a repair even of an otherwise "bad" checksum
    assert _wire.fix_frame(f1, csum_not_ready=True)[1] == "fixed"
    assert _wire.fix_frame(f0[:80], len(f0), fix_checksums=False)[1] == "padded"


def _merged(frames: list[bytes], proto: str) -> bytes:
    """What GRO hands up for in-order segments: first headers, lengths fixed, payloads."""
    b = ST.Builder(proto)
    h = b.total_hdr_len
    pay = b"".join(f[h:] for f in frames)
    out = bytearray(frames[0][:h]) + pay
    if proto == "ipv6":
        struct.pack_into("!H", out, 18, 20 + len(pay))
    else:
        struct.pack_into("!H", out, 16, len(out) - 14)
        if proto == "ipip":
            struct.pack_into("!H", out, 36, len(out) - 34)
    return bytes(out)


@pytest.mark.parametrize("proto", ST.PROTOS)
def test_matcher_rebuilds_merged_units(proto):
    frames = ST.frames("flags_psh", proto)           # P0 P100 P200+PSH P300 P400 FIN
    m = _Matcher(frames)
    assert m.match(_merged(frames[3:5], proto)) == ((3, 4), 200)
    assert m.match(frames[5]) == ((5,), 0)
    assert m.match(_merged(frames[0:3], proto)) == ((0, 1, 2), 300)
    assert m.match(frames[0]) == ((), 100)               # already used: nothing left
    assert all(m.used)


def test_matcher_takes_duplicates_in_order():
    frames = ST.frames("ack", "ipv6")                   # the dup ACK is byte-identical
    m = _Matcher(frames)
    assert m.match(frames[1])[0] == (0,)
    assert m.match(frames[0])[0] == (1,)


def _gro_result(units: list[tuple], flows: list[int]) -> GroResult:
    """A GroResult with the given super-packets (first, last, count, plen, gso, type)."""
    n = len(flows)
    seg = np.zeros(n, np.int64)
    for s, (first, last, count, *_r) in enumerate(units):
        seg[first:last + 1] = s
    z = np.zeros(n)
    u = np.array(units, dtype=np.int64).reshape(-1, 6)
    k = len(units)
    return GroResult(flow_id=np.array(flows), gro_seg=seg, gro_role=z, reason=z, rx_queue=z,
                     poll_id=z, seg_flow_id=np.array([flows[t[0]] for t in units]),
                     seg_first_packet=u[:, 0], seg_last_packet=u[:, 1], seg_count=u[:, 2],
                     seg_payload_len=u[:, 3], seg_gso_size=u[:, 4], seg_gso_type=u[:, 5],
                     seg_end_reason=np.zeros(k), seg_rx_queue=np.zeros(k),
                     seg_poll_id=np.zeros(k))


def _kernel_result(units: list[tuple], n: int, lost=()) -> KernelReplayResult:
    du = [DeliveredUnit(tuple(range(t[0], t[1] + 1)), t[3], t[4], t[5], True, 100)
          for t in units]
    return KernelReplayResult([b""] * n, ["kept"] * n, [0] * n, du, list(lost), (6, 18),
                              "6.18-test")


def test_compare_counts_agreement_and_lists_differences():
    flows = [0, 0, 1, 1, 0]
    k = [(0, 1, 2, 200, 100, 1), (2, 3, 2, 200, 100, 1), (4, 4, 1, 100, 0, 0)]
    rep = compare(None, _kernel_result(k, 5), _gro_result(k, flows))
    assert rep.ok and rep.agree == 3 and rep.global_order_ok
    assert rep.summary_line() == "kernel 6.18: 3/3 super-packets agree"
    # other interleaving of the two flows: per-flow order fine, global order not
    s = [k[1], k[0], k[2]]
    rep = compare(None, _kernel_result(k, 5), _gro_result(s, flows))
    assert rep.flow_order_ok and not rep.global_order_ok and rep.agree == 3
    assert [d.kind for d in rep.differences] == ["global_order"]
    # the simulator splits flow 0's first unit
    s = [(0, 0, 1, 100, 0, 0), (1, 1, 1, 100, 0, 0), k[1], k[2]]
    rep = compare(None, _kernel_result(k, 5), _gro_result(s, flows))
    assert not rep.ok and rep.agree == 2
    d = [x for x in rep.differences if x.kind == "flow"]
    assert len(d) == 1 and d[0].flow_id == 0 and d[0].kernel == [k[0]] and len(d[0].simulated) == 2
    # same frames, other gso_size
    s = [(0, 1, 2, 200, 50, 1), k[1], k[2]]
    rep = compare(None, _kernel_result(k, 5), _gro_result(s, flows))
    assert [x.kind for x in rep.differences] == ["field"] and rep.agree == 2
    # a frame the kernel never delivered
    rep = compare(None, _kernel_result(k[:2], 5, lost=[4]), _gro_result(k, flows))
    assert not rep.ok and any(x.kind == "lost" for x in rep.differences)
    assert json.loads(json.dumps(rep.to_dict()))["agree"] == 2


def test_refuses_without_root(monkeypatch):
    from gropcap.replay import kernel
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(GropcapError, match="root"):
        kernel.replay(ST.frames("single", "ipv4"))


def test_command_refuses_without_root(monkeypatch, tmp_path):
    from gropcap.cli.replay import kernel_replay
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    p = tmp_path / "s.pcap"
    ST.write_case_pcap(p, "data_same", "ipv4")
    r = CliRunner().invoke(kernel_replay, [str(p)])
    assert r.exit_code == 1 and "needs root" in r.output and "Traceback" not in r.output


def _fake_replay(split_first: bool):
    """A stand-in for kernel.replay: delivers what the simulator predicts (or splits one)."""
    from gropcap.replay import kernel
    from gropcap.replay.compare import simulate_replay

    def fake(frames, bursts=None, **kw):
        sent = [_wire.fix_frame(f, w)[0] for f, w in zip(frames, kw["wire_lens"])]
        r = KernelReplayResult(sent, ["kept"] * len(sent), split_bursts(bursts, len(sent)),
                               [], [], (6, 18), "6.18-fake", {})
        _p, sim = simulate_replay(r, kernel=(6, 18))
        units = []
        for a, b, c, pl, g, t in zip(sim.seg_first_packet, sim.seg_last_packet, sim.seg_count,
                                     sim.seg_payload_len, sim.seg_gso_size, sim.seg_gso_type):
            idx = tuple(range(int(a), int(b) + 1))
            if split_first and c > 1 and not units:
                units += [DeliveredUnit((i,), 0, 0, 0, False, 0) for i in idx]
                continue
            units.append(DeliveredUnit(idx, int(pl), int(g), int(t), True, 0))
        r.units = units
        return r
    return kernel, fake


@pytest.mark.parametrize("split_first", [False, True])
def test_command_output_and_exit_code(monkeypatch, tmp_path, split_first):
    from gropcap.cli import replay as cli_replay
    from gropcap.cli.replay import kernel_replay
    kernel, fake = _fake_replay(split_first)
    monkeypatch.setattr(kernel, "replay", fake)
    # no live environment needed: the stale-namespace check is the replay's (it needs
    # root, ip and ethtool)
    monkeypatch.setattr(cli_replay, "_warn_stale", lambda: None)
    p = tmp_path / "psh.pcap"
    ST.write_case_pcap(p, "flags_psh", "ipv4")
    r = CliRunner().invoke(kernel_replay, [str(p), "--kernel", "6.18"])
    header = 8   # the settings and why counts differ from analyze (test_replay_settings_...)
    assert r.output.startswith("replay: bursts of at most 63 frames")
    if not split_first:
        assert r.exit_code == 0, r.output
        assert r.output.strip().splitlines()[header:] == [
            f"{p}: kernel 6.18: 3/3 super-packets agree"]
    else:
        assert r.exit_code == 1
        lines = r.output.strip().splitlines()[header:]
        assert lines[0] == (f"{p}: kernel 6.18: 2/5 super-packets agree "
                            "(global delivery order differs)")
        assert lines[1].startswith("  flow: flow 0: kernel #0:0B #1:0B #2:0B | simulator #0-2x3")


# ------------------------------------------------------------------ root: the live kernel
@pytest.fixture(scope="module")
def session():
    from gropcap.replay.kernel import ReplaySession
    with ReplaySession() as s:
        yield s


_CACHE: dict = {}


def _replayed(session, proto, name):
    key = (proto, name)
    if key not in _CACHE:
        c = ST.CASES[name]
        _CACHE[key] = session.replay(c.frames(proto), c.bursts(proto))
    return _CACHE[key]


def _kernel_version() -> tuple[int, int]:
    return min(running_kernel(), ST.NEWEST)


CASE_IDS = [(p, c.name) for p in ST.PROTOS for c in ST.cases_for(p)]


@pytest.mark.root
@live
def test_session_setup(session):
    assert session.pair.rx_sysfs("gro_flush_timeout") == "20000000"
    assert session.pair.rx_sysfs("napi_defer_hard_irqs") == "1"
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert session.pair.ns_rx in names and session.pair.ns_tx in names


@pytest.mark.root
@live
@pytest.mark.parametrize("proto,name", CASE_IDS)
def test_kernel_gives_case_expectations(session, proto, name):
    """The live kernel reproduces the case table (sizes as gro.c's receiver counts them)."""
    r = _replayed(session, proto, name)
    assert r.lost == [] and r.unmatched == []
    got = ST.received_sizes(proto, [u.data for u in r.units])
    assert got == ST.CASES[name].expected(proto, _kernel_version())


@pytest.mark.root
@live
@pytest.mark.parametrize("proto,name", CASE_IDS)
def test_simulator_agrees_with_kernel_on_case(session, proto, name):
    from gropcap.replay.compare import simulate_replay
    r = _replayed(session, proto, name)
    packets, sim = simulate_replay(r)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences])
    assert rep.global_order_ok


@pytest.mark.root
@live
def test_fast_engine_agrees_with_kernel_on_all_cases(session):
    """The numba engine, like the reference model, builds what the kernel built."""
    from gropcap.replay.compare import simulate_replay
    bad = []
    for proto, name in CASE_IDS:
        r = _replayed(session, proto, name)
        packets, sim = simulate_replay(r, engine="fast")
        rep = compare(packets, r, sim)
        if not (rep.ok and rep.global_order_ok):
            bad.append(f"{proto}/{name}: {rep.summary_line()}")
    assert bad == []


@pytest.mark.root
@live
def test_veth_gro_bucket_is_zero(session):
    """9 flows in one burst: the 9th evicts the 1st, so all 9 share one GRO bucket.

    With any spread of skb->hash over the 8 buckets, 9 flows would fit (8 per bucket) and
    all would merge. The kernel evicts flow 0 (gro_flush_oldest): veth delivers with hash 0.
    """
    b = ST.Builder("ipv4")
    c = ST.SelftestCase("capacity_9", ("ipv4",), "capacity", ST._capacity(9),
                        lambda p, k: [])
    r = session.replay(c.frames("ipv4"), c.bursts("ipv4"))
    units = [u for u in r.units if u.matched][:-1]          # without the FIN
    assert [u.count for u in units] == [1, 1] + [2] * 8
    assert [struct.unpack_from("!H", u.data, b.tcp_offset)[0] - ST.SPORT for u in units] \
        == [0, 0] + list(range(1, 9))


@pytest.mark.root
@live
def test_a_stalled_burst_is_replayed_again(session, monkeypatch):
    """A sender stalled longer than the flush timeout mid-burst lets the deferred-flush
    timer deliver the burst's first packet alone: the kernel then did not see one GRO
    window per burst. The session notices the slow burst and runs the replay again."""
    import time as _time
    b = ST.Builder("ipv4")
    frames = [bytes(b.data(k * ST.PAYLOAD_LEN)) for k in range(8)]
    real = session._send
    calls = {"n": 0}

    def stalled(frame):
        calls["n"] += 1
        if calls["n"] == 2:                   # first attempt, after the burst's 1st frame
            _time.sleep(3 * session.flush_timeout_ns / 1e9)
        real(frame)
    monkeypatch.setattr(session, "_send", stalled)
    r = session.replay(frames, [0] * len(frames))
    assert r.config["attempts"] == 2 and r.config["slow_bursts"] == []
    assert [u.count for u in r.units if u.matched] == [8]


@pytest.mark.root
@live
def test_a_late_flush_is_replayed_again(session):
    """A receiver whose deferred-flush timer ran late (a loaded machine delays the
    softirq) still holds a poll's packets when the next poll's arrive, and merges the
    two polls' packets: not the replay asked for (the suite saw it twice on the real
    samples while another compile loaded both CPUs). The session notices the super-packet
    of two polls and runs the replay again. The first attempt here has no pause after
    its polls, so the timer has no time to run."""
    b = ST.Builder("ipv4")
    frames = [bytes(b.data(k * ST.PAYLOAD_LEN)) for k in range(8)]
    real, attempts = session._inject, []

    def hurried(sent, polls):
        attempts.append(list(polls))
        if len(attempts) > 1:
            return real(sent, polls)
        pause, session.pause_s = session.pause_s, 0.0
        try:
            return real(sent, polls)
        finally:
            session.pause_s = pause
    session._inject = hurried
    try:
        r = session.replay(frames, [0] * 4 + [1] * 4)
    finally:
        del session._inject
    assert len(attempts) == 2 and r.config["attempts"] == 2
    assert r.config["late_flushes"] == [] and r.config["slow_bursts"] == []
    assert [u.count for u in r.units if u.matched] == [4, 4]


def test_late_flushes_names_the_polls_merged_into_a_later_one():
    from gropcap.replay.kernel import late_flushes

    def unit(*idx):
        return idx
    polls = [0, 0, 1, 1, 2, 2, 3]
    assert late_flushes([unit(0, 1), unit(2, 3), unit(4), unit(5), unit(6), unit()],
                        polls) == []
    assert late_flushes([unit(0, 1, 2), unit(3), unit(4, 5, 6)], polls) == [0, 2]
    assert late_flushes([unit(1, 2, 3, 4)], polls) == [0]


def test_a_burst_is_timed_from_its_kick(monkeypatch):
    """inject_bursts on a fake clock: a burst whose kick settle overslept past half the
    flush timeout is slow although its frames then went out at once (the timer's poll
    found an empty ring and ended the deferral, so the burst's first frame was polled
    alone and flushed early); one whose frames went out slowly is slow too."""
    from gropcap.replay import kernel as K
    clock, sends = [0], []
    frames = [bytes([i]) * 60 for i in range(12)]
    polls = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    settles = iter([0.0005, 0.015, 0.0005, 0.0005])     # burst 1's settle oversleeps

    def sleep(s):
        clock[0] += int((next(settles) if s == K.KICK_SETTLE_S else s) * 1e9)

    def send(frame):
        sends.append(frame)
        clock[0] += 4_000_000 if frame in frames[6:9] else 10_000    # burst 2: 12 ms
    monkeypatch.setattr(K.time, "monotonic_ns", lambda: clock[0])
    monkeypatch.setattr(K.time, "sleep", sleep)
    assert K.inject_bursts(send, frames, polls, True, 0.05, 10_000_000) == [1, 2]
    assert len(sends) == 16 and [K.is_kick(f) for f in sends[::4]] == [True] * 4
    # without kick frames: only the frames' own time
    assert K.inject_bursts(send, frames[3:9], polls[3:9], False, 0.05, 10_000_000) == [2]


@pytest.mark.root
@live
@pytest.mark.parametrize("path", SAMPLES, ids=[os.path.basename(p) for p in SAMPLES])
def test_simulator_agrees_with_kernel_on_sample(session, path):
    from gropcap.capture import read_capture
    from gropcap.replay.frames import capture_frames
    from gropcap.replay.compare import simulate_replay
    _info, batch = read_capture(path)
    frames, wires, cnr, _ = capture_frames(batch)
    if not frames:
        pytest.skip("DSA link type: a veth cannot play a DSA conduit (no tag stripping)")
    # crafted_vlan / crafted_qinq: simulate_replay detects a kernel built without
    # CONFIG_VLAN_8021Q (no vlan_gro_receive) and simulates with vlan_gro=False
    r = session.replay(frames, [i // 63 for i in range(len(frames))], wire_lens=wires,
                       csum_not_ready=cnr)
    assert r.lost == [] and r.unmatched == []
    packets, sim = simulate_replay(r)
    rep = compare(packets, r, sim)
    assert rep.ok, "\n".join([rep.summary_line()] + [d.line() for d in rep.differences[:20]])


@pytest.mark.root
@live
def test_vlan_frames_bypass_gro_without_8021q(session):
    """Regression note for the replay: this kernel has no VLAN GRO (CONFIG_VLAN_8021Q unset)."""
    if _kernel_config("CONFIG_VLAN_8021Q") not in ("n",):
        pytest.skip("kernel has CONFIG_VLAN_8021Q (or its config is unreadable)")
    fr = ST.frames("data_same", "ipv4")
    tagged = [f[:12] + struct.pack("!HH", 0x8100, 100) + f[12:] for f in fr]
    r = session.replay(tagged)
    assert [u.count for u in r.units] == [1, 1, 1]
    assert r.units[0].data == tagged[0]            # the tag is restored from auxdata


@pytest.mark.root
@live
def test_command_end_to_end(tmp_path):
    from gropcap.cli.replay import kernel_replay
    p = tmp_path / "flags.pcap"
    ST.write_case_pcap(p, "flags_psh", "ipv6")
    r = CliRunner().invoke(kernel_replay, [str(p), "--burst", "63"])
    assert r.exit_code == 0, r.output
    assert "super-packets agree" in r.output and "3/3" in r.output
    r = CliRunner().invoke(kernel_replay, [str(p), "--json"])
    d = json.loads(r.output.strip().splitlines()[-1])
    assert r.exit_code == 0 and d["ok"] and d["kernel_units"] == 3


@pytest.mark.root
@live
def test_namespaces_removed_after_session():
    from gropcap.replay.kernel import ReplaySession
    with ReplaySession() as s:
        names = (s.pair.ns_tx, s.pair.ns_rx)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)


@pytest.mark.root
@live
def test_namespaces_removed_on_error_and_sigterm():
    import signal
    import sys
    import time

    from gropcap.replay.kernel import ReplaySession
    with pytest.raises(RuntimeError):
        with ReplaySession() as s:
            names = (s.pair.ns_tx, s.pair.ns_rx)
            raise RuntimeError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
    code = ("import time\nfrom gropcap.replay.kernel import ReplaySession\n"
            "with ReplaySession() as s:\n"
            "    print(s.pair.ns_tx, s.pair.ns_rx, flush=True)\n"
            "    time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.join(TESTS, ".."))
    try:
        names = p.stdout.readline().split()
        assert len(names) == 2
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(n in listed for n in names)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    time.sleep(0.1)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
