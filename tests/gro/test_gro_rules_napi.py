"""Batch models of the reference GRO model: NAPI polls (budget, HZ, gro_flush_timeout,
napi_defer_hard_irqs), buckets and eviction, RSS queues, explicit windows, delivery order;
and the result invariants on generated traffic (hypothesis)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from craft import make_batch
from tests.gro.test_gro_reference import config, names, run, seg_packets, seg_sizes, v4, v6

from gropcap import constants as C
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro.reference import simulate
from gropcap.gro.rss import gro_bucket, rss_hash, rx_queue

T0 = 1_000_000_000_000          # a jiffy boundary for HZ 250 and 1000
US = 1_000
MS = 1_000_000


def stream(n, mss=100, **kw):
    return [v4(mss * k, mss, **kw) for k in range(n)]


# --- full-budget polls ------------------------------------------------------------------------

def test_full_budget_poll_flushes_all_below_hz_1000():
    ts = [T0 + k * US for k in range(6)]
    res, _ = run(stream(6), model="napi", budget=4, hz=250, ts_ns=ts)
    assert seg_sizes(res) == [400, 200]
    assert names(res.seg_end_reason) == ["END_POLL", "END_POLL"]
    assert res.poll_id.tolist() == [0, 0, 0, 0, 1, 1] and res.seg_poll_id.tolist() == [0, 1]


def test_full_budget_poll_keeps_this_jiffy_at_hz_1000():
    ts = [T0 + k * US for k in range(6)]
    res, _ = run(stream(6), model="napi", budget=4, hz=1000, ts_ns=ts)
    assert seg_sizes(res) == [600] and res.seg_poll_id.tolist() == [1]


def test_full_budget_poll_flushes_older_jiffies_at_hz_1000():
    # flow A is held since the jiffy of poll 0; flow B since poll 1's: after poll 1 (full
    # budget again) only A goes, B keeps growing
    frames = [v4(0, sport=1), v4(100, sport=1)] + [v4(100 * k, sport=2) for k in range(3)]
    ts = [T0, T0 + 1 * US, T0 + 1500 * US, T0 + 1501 * US, T0 + 1502 * US]
    res, _ = run(frames, model="napi", budget=2, hz=1000, rss="none", poll_gap_ns=2 * MS,
                 ts_ns=ts)
    assert seg_packets(res) == [[0, 1], [2, 3, 4]]
    assert names(res.seg_end_reason) == ["END_POLL_OLD", "END_POLL"]
    assert res.poll_id.tolist() == [0, 0, 1, 1, 2] and res.seg_poll_id.tolist() == [1, 2]


# --- gro_flush_timeout / napi_defer_hard_irqs ---------------------------------------------------

def test_no_deferral_every_poll_flushes():
    ts = [T0 + k * 50 * US for k in range(4)]
    res, _ = run(stream(4), model="napi", hz=1000, poll_gap_ns=10 * US, ts_ns=ts)
    assert seg_sizes(res) == [100] * 4 and res.poll_id.tolist() == [0, 1, 2, 3]


def test_flush_timeout_without_defer_keeps_young_entries():
    ts = [T0 + k * 50 * US for k in range(4)]
    res, _ = run(stream(4), model="napi", hz=1000, poll_gap_ns=10 * US,
                 gro_flush_timeout_ns=200 * US, ts_ns=ts)
    assert seg_sizes(res) == [400] and names(res.seg_end_reason) == ["END_POLL"]
    # four interrupt polls, then the timer poll (no work) flushes
    assert res.poll_id.tolist() == [0, 1, 2, 3] and res.seg_poll_id.tolist() == [4]


def test_defer_hard_irqs_batches_in_the_timer_poll():
    ts = [T0 + k * 50 * US for k in range(4)]
    res, _ = run(stream(4), model="napi", hz=1000, poll_gap_ns=10 * US,
                 gro_flush_timeout_ns=200 * US, napi_defer_hard_irqs=1, ts_ns=ts)
    assert seg_sizes(res) == [400]
    assert res.poll_id.tolist() == [0, 1, 1, 1] and res.seg_poll_id.tolist() == [2]


def test_deferred_partial_flush_is_poll_old():
    frames = [v4(0, sport=1), v4(0, sport=2)]
    ts = [T0, T0 + 2500 * US]
    res, _ = run(frames, model="napi", hz=1000, rss="none", gro_flush_timeout_ns=2 * MS,
                 napi_defer_hard_irqs=2, ts_ns=ts)
    assert names(res.seg_end_reason) == ["END_POLL_OLD", "END_POLL_OLD"]
    assert res.poll_id.tolist() == [0, 2] and res.seg_poll_id.tolist() == [1, 3]


def lonely_and_stream():
    """Flow A: one lonely segment at T0; flow B: 30 segments every 100 us (HZ 1000: jiffy
    boundaries at T0 + 1, 2, 3 ms); then one late packet of flow C at T0 + 5 ms, after
    the last timer. gro_flush_timeout 200 us, no deferral: every B arrival comes before
    the timer, so every poll ends in napi_complete_done arming the timer."""
    frames = ([v4(0, sport=1)] + [v4(100 * k, sport=2) for k in range(30)]
              + [v4(0, sport=3)])
    ts = [T0] + [T0 + (k + 1) * 100 * US for k in range(30)] + [T0 + 5 * MS]
    return frames, ts


def _timer_run(kernel):
    frames, ts = lonely_and_stream()
    return run(frames, kernel, model="napi", hz=1000, rss="none", poll_gap_ns=10 * US,
               gro_flush_timeout_ns=200 * US, ts_ns=ts)[0]


def test_napi_complete_done_4_19_timer_poll_flushes_nothing():
    """v4.19 napi_complete_done: ``if (timeout) hrtimer_start(...); else
    napi_gro_flush(n, false);`` (before 605108acfe62): the 31 polls that arm the timer
    flush nothing, the lonely packet waits for the timer poll (no work: napi_complete_done
    with work 0 flushes all, END_POLL)."""
    res = _timer_run((4, 19))
    assert seg_packets(res) == [[0], list(range(1, 31)), [31]]
    assert names(res.seg_end_reason) == ["END_POLL"] * 3
    # polls 0..30 one per packet, 31 the timer poll that flushes A and B, 32 flow C's,
    # 33 its timer poll
    assert res.poll_id.tolist() == list(range(31)) + [32]
    assert res.seg_poll_id.tolist() == [31, 31, 33]


def test_napi_complete_done_4_20_flushes_old_before_arming_the_timer():
    """605108acfe62 "net: don't keep lonely packets forever in the gro hash" (v4.20):
    ``napi_gro_flush(n, !!timeout)`` before arming the timer: the first poll of each new
    jiffy flushes what an older jiffy held (END_POLL_OLD). 4.20 is before 6f8b12d661d0
    (v5.7): napi_watchdog schedules a poll only ``if (napi->gro_bitmask && ...)``, so the
    timer after the last B poll (nothing held any more) polls nothing."""
    res = _timer_run((4, 20))
    # the polls at T0 + 1 ms (packet 10) and + 2 ms (packet 20) and 3 ms (packet 30)
    assert seg_packets(res) == [[0], list(range(1, 11)), list(range(11, 21)),
                                list(range(21, 31)), [31]]
    assert names(res.seg_end_reason) == ["END_POLL_OLD"] * 4 + ["END_POLL"]
    assert res.poll_id.tolist() == list(range(32))       # no timer poll before C's
    assert res.seg_poll_id.tolist() == [10, 10, 20, 30, 32]


def test_napi_watchdog_from_5_7_polls_with_nothing_held():
    """6f8b12d661d0 (v5.7) dropped the gro_bitmask test from napi_watchdog: the timer
    armed by the last B poll polls with nothing held, so flow C's poll is number 32 (31
    on 5.6) and its timer poll 33; the flushes are 4.20's."""
    old, new = _timer_run((5, 6)), _timer_run((5, 7))
    assert seg_packets(new) == seg_packets(old) == seg_packets(_timer_run((4, 20)))
    assert np.array_equal(new.seg_end_reason, old.seg_end_reason)
    assert old.poll_id.tolist()[-1] == 31 and new.poll_id.tolist()[-1] == 32
    assert new.seg_poll_id.tolist() == [10, 10, 20, 30, 33]


def test_cli_kernel_4_19_vs_4_20_with_gro_flush_timeout(tmp_path):
    """``gropcap analyze --kernel 4.19`` vs ``4.20`` with --gro-flush-timeout-us on the
    lonely-packet capture: napi_complete_done's END_POLL / END_POLL_OLD shares differ."""
    import json

    from click.testing import CliRunner

    from gropcap.capture import write_pcap
    from gropcap.cli import main
    frames, ts = lonely_and_stream()
    path = tmp_path / "lonely.pcap"
    write_pcap(str(path), frames, ts, nanosecond=True)
    shares = {}
    for kernel in ("4.19", "4.20"):
        r = CliRunner().invoke(main, ["analyze", str(path), "--kernel", kernel, "--model",
                                      "napi", "--hz", "1000", "--rss", "none",
                                      "--poll-gap-us", "10", "--gro-flush-timeout-us",
                                      "200", "--format", "json"])
        assert r.exit_code == 0, r.output
        nd = json.loads(r.stdout)["napi_dependence"]
        shares[kernel] = (nd["superpackets"], nd["shares"]["END_POLL_OLD"])
    assert shares == {"4.19": (3, 0.0), "4.20": (5, 0.8)}


@pytest.mark.parametrize("kernel", [(4, 19), (4, 20), (6, 18)])
def test_full_budget_poll_flush_same_before_and_after_4_20(kernel):
    """__napi_poll's full-budget ``napi_gro_flush(n, HZ >= 1000)`` was napi_poll's (called
    from net_rx_action) before v4.20 with the same test: 605108acfe62 left it alone."""
    ts = [T0 + k * US for k in range(6)]
    res, _ = run(stream(6), kernel, model="napi", budget=4, hz=250, ts_ns=ts,
                 gro_flush_timeout_ns=200 * US)
    assert seg_sizes(res) == [400, 200]
    assert names(res.seg_end_reason) == ["END_POLL", "END_POLL"]


# --- buckets --------------------------------------------------------------------------------------

def nine_flows():
    firsts = [v4(0, sport=1000 + i) for i in range(9)]
    seconds = [v4(100, sport=1000 + i) for i in range(9)]
    return firsts + seconds


def test_bucket_full_evicts_the_oldest():
    frames = nine_flows()
    res, t = run(frames, model="napi", rss="none", polls=np.zeros(18, np.int64))
    assert res.seg_end_reason[0] == R.END_BUCKET_FULL and seg_packets(res)[0] == [0]
    assert res.reason[9] == R.NO_HELD_PACKET          # flow 0's second segment starts over
    # and it evicts flow 1's first segment, and so on: eight entries cannot hold nine
    # interleaved flows (the selftest capacity case); only the last eight stay to the end
    assert res.seg_count.tolist() == [1] * 18
    assert int((res.seg_end_reason == R.END_BUCKET_FULL).sum()) == 10
    assert names(res.seg_end_reason[-8:]) == ["END_POLL"] * 8


@pytest.mark.parametrize("kernel", [(4, 17), (4, 18), (4, 19)])
def test_hash_buckets_from_4_19(kernel):
    """07d78363dcff "net: Convert NAPI gro list into a small hash table" (v4.19, not in
    4.18): 8 hash buckets of 8; before, one list of 8 for the whole NAPI.
    Nine flows spread by the Toeplitz hash fit in 8 buckets but not in one list."""
    frames = nine_flows()
    res, t = run(frames, kernel, model="napi", polls=np.zeros(18, np.int64))
    h = rss_hash(t, config().rss_key)
    assert np.bincount(gro_bucket(h[:9], 8), minlength=8).max() <= 8
    evicted = int((res.seg_end_reason == R.END_BUCKET_FULL).sum())
    if kernel >= (4, 19):
        assert evicted == 0 and res.seg_count.tolist() == [2] * 9
    else:
        assert evicted == 10 and res.seg_count.tolist() == [1] * 18


# --- queues, windows, delivery order --------------------------------------------------------------

def test_rss_queues():
    frames = [v4(100 * k, sport=2000 + f) for k in range(3) for f in range(12)]
    ts = [T0 + i * US for i in range(len(frames))]
    res, t = run(frames, model="napi", queues=4, ts_ns=ts)
    q = rx_queue(rss_hash(t, config().rss_key), 4)
    assert np.array_equal(res.rx_queue, q)
    assert np.array_equal(res.seg_rx_queue, q[res.seg_first_packet])
    assert len(set(q.tolist())) > 1
    assert np.all(np.diff(res.seg_poll_id) >= 0), "super-packets leave in poll order"


def test_explicit_windows():
    res, _ = run(stream(4), model="napi", polls=np.array([5, 5, 9, 9]))
    assert seg_sizes(res) == [200, 200]
    assert res.poll_id.tolist() == [0, 0, 1, 1] and res.seg_poll_id.tolist() == [0, 1]
    assert names(res.seg_end_reason) == ["END_POLL", "END_POLL"]


def test_ideal_model_has_no_polls_or_queues():
    res, _ = run(stream(3) + [v4(0, sport=7)], queues=4)
    assert (res.poll_id == -1).all() and (res.rx_queue == 0).all()
    assert names(res.seg_end_reason) == ["END_CAPTURE", "END_CAPTURE"]


def test_delivery_order_pp_before_the_packet_and_bypass_first():
    frames = [v4(0), v4(100, 0, flags=C.TCP_FLAG_ACK | C.TCP_FLAG_SYN),
              eth_udp(), v4(200)]
    res, _ = run(frames)
    assert seg_packets(res) == [[0], [1], [2], [3]]
    assert names(res.reason) == ["NO_HELD_PACKET", "FLUSH_FLAGS_FINAL", "BYPASS_UDP_NO_GRO",
                                 "NO_HELD_PACKET"]


def eth_udp():
    from craft import eth, ipv4, udp
    return eth(ipv4("192.168.1.200", "192.168.1.100", C.IPPROTO_UDP, udp(1, 2, b"x" * 30)))


# --- generated traffic ------------------------------------------------------------------------

KINDS = ["data", "data", "data", "short", "psh", "fin", "ack", "gap", "retrans", "window",
         "ts", "ttl", "cwr", "udp", "pad"]


@st.composite
def traffic(draw):
    nflows = draw(st.integers(1, 4))
    n = draw(st.integers(1, 30))
    seq = [0] * nflows
    ver = [draw(st.sampled_from([4, 6])) for _ in range(nflows)]
    frames, ts, t = [], [], T0
    for _ in range(n):
        f = draw(st.integers(0, nflows - 1))
        kind = draw(st.sampled_from(KINDS))
        t += draw(st.sampled_from([0, 1 * US, 20 * US, 200 * US, 3 * MS]))
        mk = v4 if ver[f] == 4 else v6
        kw = dict(sport=3000 + f)
        size, flags = 100, C.TCP_FLAG_ACK
        if kind == "short":
            size = 40
        elif kind == "psh":
            flags |= C.TCP_FLAG_PSH
        elif kind == "fin":
            flags |= C.TCP_FLAG_FIN
        elif kind == "ack":
            size = 0
        elif kind == "gap":
            seq[f] += 50
        elif kind == "retrans":
            seq[f] = max(0, seq[f] - 100)
        elif kind == "window":
            kw["window" if ver[f] == 4 else "window"] = 1000
        elif kind == "ts":
            from craft import tcp_ts
            kw["options"] = tcp_ts(draw(st.integers(0, 2)), 0)
        elif kind == "ttl":
            kw["ttl" if ver[f] == 4 else "hlim"] = 7
        elif kind == "cwr":
            flags |= C.TCP_FLAG_CWR
        if kind == "udp":
            frames.append(eth_udp())
        elif kind == "pad" and ver[f] == 4:
            frames.append(v4(seq[f], 1, flags, pad=True, **kw))
            seq[f] += 1
        else:
            if ver[f] == 6 and "window" in kw:
                kw.pop("window")
            frames.append(mk(seq[f], size, flags, **kw))
            seq[f] += size
        ts.append(t)
    return frames, ts


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check_result(res, t):
    res.check_invariants(t.column("payload_len").to_numpy())
    known = set(R.REASONS)
    assert set(res.reason.tolist()) <= known and set(res.seg_end_reason.tolist()) <= known
    multi = res.seg_count > 1
    assert np.all(res.seg_gso_type[multi] & 0x11), "TCPV4 or TCPV6 on every GSO packet"
    assert np.all(res.seg_gso_type[~multi] == 0) and np.all(res.seg_gso_size[~multi] == 0)
    for k, pk in enumerate(seg_packets(res)):
        assert pk == sorted(pk)
        roles = res.gro_role[pk].tolist()
        if len(pk) == 1:
            assert roles == [R.ROLE_ALONE]
        else:
            assert roles == [R.ROLE_HEAD] + [R.ROLE_MERGED] * (len(pk) - 1)
            assert all(res.reason[i] == R.MERGED for i in pk[1:])
    merged = res.gro_role == R.ROLE_MERGED
    assert np.all(res.reason[merged] == R.MERGED) and np.all(res.reason[~merged] != R.MERGED)


@SETTINGS
@given(traffic(), st.sampled_from([(4, 17), (5, 17), (6, 9), (6, 14), (6, 18)]))
def test_invariants_ideal(tr, kernel):
    frames, ts = tr
    t = pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])
    _check_result(simulate(t, config(kernel)), t)


@SETTINGS
@given(traffic(), st.sampled_from([250, 1000]), st.sampled_from([0, 100 * US]),
       st.sampled_from([0, 2]), st.sampled_from([1, 3]), st.sampled_from([2, 64]))
def test_invariants_napi(tr, hz, timeout, defer, queues, budget):
    frames, ts = tr
    t = pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])
    res = simulate(t, config(model="napi", hz=hz, gro_flush_timeout_ns=timeout,
                             napi_defer_hard_irqs=defer, queues=queues, budget=budget,
                             poll_gap_ns=50 * US))
    _check_result(res, t)
    assert np.all(res.poll_id >= 0) and np.all(np.diff(res.seg_poll_id) >= 0)
    # a packet is delivered in or after the poll that processed it
    assert np.all(res.seg_poll_id[res.gro_seg] >= res.poll_id)


@SETTINGS
@given(traffic())
def test_one_window_without_hash_equals_ideal(tr):
    """With at most 8 held entries, one GRO window of one bucket decides exactly like the
    unlimited ideal list (only the end reason and poll ids differ)."""
    frames, ts = tr
    t = pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts))])
    ideal = simulate(t, config())
    napi = simulate(t, config(model="napi", rss="none"), polls=np.zeros(len(frames), np.int64))
    assert np.array_equal(ideal.gro_seg, napi.gro_seg)
    assert np.array_equal(ideal.reason, napi.reason)
    end = np.where(ideal.seg_end_reason == R.END_CAPTURE, R.END_POLL, ideal.seg_end_reason)
    assert np.array_equal(end, napi.seg_end_reason)
    assert np.array_equal(ideal.seg_gso_type, napi.seg_gso_type)
