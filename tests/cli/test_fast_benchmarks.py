"""The benchmark tooling: the capture builder is deterministic and decodes cleanly (fast ==
reference), and compare.py reports ratios and flags regressions. No timing is asserted."""

from __future__ import annotations

import collections
import importlib.util
import json
import os

import pytest

from gropcap.capture import read_capture
from gropcap.capture.scan import iter_scan_batches
from gropcap.decode import fast, reference
from gropcap.decode import schema as S

from where import ROOT



def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks",
                                                                     name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench_capture(tmp_path_factory):
    make = _load("make_bench_capture")
    d = tmp_path_factory.mktemp("bench")
    a, b = d / "a.pcap", d / "b.pcap"
    make.build(str(a), 3000, 200, seed=7, chunk=1024)
    make.build(str(b), 3000, 200, seed=7, chunk=1024)
    return a, b


def test_capture_of_plain_tcp_only_is_what_the_single_pass_covers(tmp_path):
    """``--kinds v4,v6``: no tunnels, every frame one the single pass covers (the probe
    reads the whole small file), the same number of flows; an unknown kind is refused."""
    from gropcap.gro import fused
    make = _load("make_bench_capture")
    path = str(tmp_path / "tcp.pcap")
    desc = make.build(path, 3000, 200, seed=7, chunk=1024, kinds=("v4", "v6"))
    assert desc["flows_by_kind"]["vxlan"] == desc["flows_by_kind"]["gre"] == 0
    assert desc["flows_by_kind"]["v4"] and desc["flows_by_kind"]["v6"]
    _, batch = read_capture(path)
    encaps = set(fast.decode_batch(batch).column("encap").to_pylist())
    assert encaps == {"eth/ipv4/tcp", "eth/ipv6/tcp"}
    buf, be, _ = fused.pcap_body(path)
    assert fused.uncovered_at(buf, be, 1500, limit=1 << 30) < 0
    with pytest.raises(ValueError, match="gre6"):
        make.build(path, 10, 2, seed=7, kinds=("v4", "gre6"))


def test_capture_is_deterministic_and_well_formed(bench_capture):
    a, b = bench_capture
    assert a.read_bytes() == b.read_bytes()
    info, batch = read_capture(a)
    assert info.records == 3000 and info.snaplen == 128 and not info.warnings
    assert int(batch.cap_len.max()) == 128 and int(batch.wire_len.max()) > 1500
    table = fast.decode_batch(batch)
    assert table.equals(reference.decode_batch(batch))
    col = table.column
    assert set(col("status").to_pylist()) == {S.STATUS_OK}
    assert all(col("ip_csum_ok").to_pylist())
    encaps = collections.Counter(col("encap").to_pylist())
    assert {"eth/ipv4/tcp", "eth/ipv6/tcp", "eth/ipv4/udp/vxlan/eth/ipv4/tcp",
            "eth/ipv4/gre/ipv4/tcp"} <= set(encaps)
    flags = collections.Counter(col("tcp_flags").to_pylist())
    assert flags[0x02] and flags[0x12] and flags[0x18] and flags[0x10]   # SYN, SYN-ACK, PSH
    # fully captured segments (ACKs, SYNs) carry valid TCP checksums; data is cut
    states = collections.Counter(col("l4_csum_state").to_pylist())
    assert states[S.CSUM_GOOD] > 500 and states[S.CSUM_UNKNOWN] > 1000
    assert S.CSUM_BAD not in states
    assert sum(len(x) for _i, x in iter_scan_batches(a, batch_records=700)) == 3000


def test_compare_reports_ratios_and_regressions(tmp_path, capsys):
    cmp = _load("compare")
    old = {"commit": "aaa", "capture": {"records": 10, "bytes": 99},
           "stages": {"fast_decode": {"pps": 1000.0, "peak_rss_mb": 100.0},
                      "gro_engine": {"ideal": {"pps": 500.0}}}}
    new = json.loads(json.dumps(old))
    new["commit"] = "bbb"
    new["stages"]["fast_decode"]["pps"] = 2000.0
    new["stages"]["gro_engine"]["ideal"]["pps"] = 250.0
    lines, bad = cmp.compare(old, new, fail_below=0.9)
    text = "\n".join(lines)
    assert bad
    row = next(line for line in lines if line.startswith("fast scan+decode pkt/s"))
    assert row.split()[-1] == "2.00"
    assert "GRO ideal pkt/s" in text and "REGRESSION" in text
    p_old, p_new = tmp_path / "old.json", tmp_path / "new.json"
    p_old.write_text(json.dumps(old))
    p_new.write_text(json.dumps(new))
    assert cmp.main([str(p_old), str(p_new)]) == 0
    assert cmp.main([str(p_old), str(p_new), "--fail-below", "0.9"]) == 1
    new["capture"]["records"] = 11
    p_new.write_text(json.dumps(new))
    assert cmp.main([str(p_old), str(p_new)]) == 2          # different captures
    capsys.readouterr()


def test_perf_map_names_the_kernels_compiled_in_the_process(tmp_path, monkeypatch):
    """perf_map.py: every function numba compiled for a gropcap module gets its address
    range and its Python name in perf's map; nothing for what is not compiled yet."""
    import sys
    import types

    import numba
    import numpy as np
    perf_map = _load("perf_map")
    probe = types.ModuleType("gropcap._perf_map_probe")

    @numba.njit
    def total(a):
        s = 0
        for x in a:
            s += x
        return s
    probe.total = total
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    before = {name for _, name in perf_map.functions()}
    assert not any(name.endswith("total") for name in before)
    assert total(np.arange(5)) == 10
    out = tmp_path / "perf.map"
    assert perf_map.write_map(str(out)) >= 1
    rows = [line.split(" ", 2) for line in out.read_text().splitlines()]
    named = [r for r in rows if r[2].endswith(".total")]     # the probe, by its path
    assert named, rows
    addr, size = int(named[0][0], 16), int(named[0][1], 16)
    assert addr > 0 and 0 < size <= 1 << 18
    starts = [int(r[0], 16) for r in rows]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert perf_map._python_name("_ZN7gropcap3gro4fast3dev8_receiveB3v32B48c8t") == \
        "gropcap.gro.fast.dev._receive"


def test_contention_runs_alone_and_in_pairs(bench_capture, monkeypatch):
    """bench_targets --only contention: a run alone and two side by side per round, the
    inflation and the two-thread ceiling computed from the least of each."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    targets = _load("bench_targets")
    res = targets.contention(str(bench_capture[0]), 2)
    assert len(res["alone_cpu"]) == 2 and len(res["pair_cpu"]) == 4
    assert res["pair_cpu_inflation"] == pytest.approx(min(res["pair_cpu"]) /
                                                      min(res["alone_cpu"]), rel=1e-2)
    assert res["two_thread_ceiling"] == pytest.approx(
        min(res["alone_wall"]) / (min(res["alone_cpu"]) * res["pair_cpu_inflation"] / 2),
        rel=1e-2)
    for kind in ("memory", "compute"):
        assert len(res[f"beside_{kind}_cpu"]) == 2
        assert res[f"beside_{kind}_cpu_inflation"] == pytest.approx(
            min(res[f"beside_{kind}_cpu"]) / min(res["alone_cpu"]), rel=1e-2)


def _running(code: str) -> int:
    """Processes of this machine whose command line is ``python -c code``."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        n += code.encode() in argv
    return n


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find the neighbour")
def test_a_neighbour_runs_exactly_as_long_as_the_run(monkeypatch):
    """bench_targets' contention neighbours: one child per run, busy while the run is timed
    (memory: it has its array in place), killed and reaped after it."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    targets = _load("bench_targets")
    seen = {}

    def fake_spawn(args):
        for kind, code in targets.NEIGHBOURS.items():
            seen.setdefault(kind, []).append(_running(code))
        return {"seconds": 1.0, "cpu_seconds": 1.0, "exit_code": 0, "peak_rss_mb": 1.0}

    monkeypatch.setattr(targets, "_spawn", fake_spawn)
    for kind in targets.NEIGHBOURS:
        assert targets._beside(kind, ["analyze"])["exit_code"] == 0
        assert _running(targets.NEIGHBOURS[kind]) == 0
    assert seen == {"memory": [1, 0], "compute": [0, 1]}


def test_callgrind_tool_splits_analyze_options_and_takes_the_marginal():
    cg = _load("callgrind_kernels")
    assert cg.split_analyze(["cap.pcap", "--records", "5", "--", "--format", "json"]) == \
        (["cap.pcap", "--records", "5"], ["--format", "json"])
    assert cg.split_analyze(["cap.pcap"]) == (["cap.pcap"], [])
    big = {"decode": [700, 10], "startup": [50, 1]}
    small = {"decode": [300, 4], "startup": [50, 1], "only_small": [9, 9]}
    assert cg.marginal(big, small) == {"decode": [400, 6], "startup": [0, 0]}


def test_batch_cost_tool_separates_the_fixed_cost_of_a_batch(bench_capture):
    """bench_batches: the fixed cost of a batch from runs with two batch sizes (the run's
    own fixed cost and the records' cost cancel out), and a run over the bench capture."""
    bb = _load("bench_batches")
    records, f, c, o = 10_000, 0.25, 3e-7, 2e-3       # T = F + N c + batches o
    t = {s: f + records * c + bb.batches(records, s) * o for s in (100, 1000, 4096)}
    assert bb.batches(records, 4096) == 3 and bb.batches(records, 100) == 100
    assert bb.per_batch(records, (100, t[100]), (4096, t[4096])) == pytest.approx(o)
    assert bb.per_batch(records, (1000, t[1000]), (4096, t[4096])) == pytest.approx(o)
    with pytest.raises(ValueError, match="same number of batches"):
        bb.per_batch(records, (5000, 1.0), (9000, 2.0))
    res = bb.measure(str(bench_capture[0]), [512, 4096], 1, cli_malloc=False)
    assert res["records"] == len(read_capture(bench_capture[0])[1])
    assert set(res["cpu_seconds"]) == {"512", "4096"} and set(res["pairs"]) == {"512/4096"}
    assert set(res["pairs"]["512/4096"]) == {"ms_per_batch", "share_of_largest"}


def test_the_fused_floor_times_the_single_pass_and_checks_its_counts(tmp_path):
    """bench_fused_floor on a sample: the single pass (gro/fused.py) and the json run
    give the same super-packet counts (the benchmark exits 1 otherwise), and the figures
    are written."""
    floor = _load("bench_fused_floor")
    out = tmp_path / "floor.json"
    path = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
    assert floor.main([path, "--rounds", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["same_superpackets"] and res["records"] == res["engine"]["records"] > 0
    assert res["fused"]["ideal_superpackets"] < res["records"]
    assert res["fused_ns_per_record"] > 0 and res["digest_ns_per_record"] > 0


def test_the_fused_floor_refuses_what_the_pass_does_not_cover():
    floor = _load("bench_fused_floor")
    with pytest.raises(SystemExit, match="link type 0"):
        floor.run_fused(os.path.join(ROOT, "sample_pcaps", "crafted_null.pcap"))


def test_the_ipv6_twin_carries_the_same_traffic_over_ipv6(tmp_path):
    """benchmarks/ipv6_twin.py: every IPv4 / TCP frame of the sample an IPv6 one, 20 bytes
    longer, the rest as it was; GRO aggregates the twin as it did the original (the
    same super-packet counts per model), through the single pass and the engine alike."""
    from gropcap.gro import fused
    from gropcap.gro.config import GroConfig
    from gropcap.run.memory import analyze
    twin = _load("ipv6_twin")
    src = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    out = str(tmp_path / "v6.pcap")
    twin.main([src, out])
    _, a = read_capture(src)
    _, b = read_capture(out)
    assert len(a) == len(b)
    six = [i for i in range(len(b)) if b.frame(i)[12:14] == b"\x86\xdd"]
    assert len(six) > 0.9 * len(b)
    assert all(len(b.frame(i)) == len(a.frame(i)) + 20 for i in six)
    got, want = fused.run_file(out), analyze(out, GroConfig()).results
    orig = analyze(src, GroConfig()).results
    for model in ("ideal", "napi"):
        assert got[model].num_superpackets == want[model].num_superpackets \
            == orig[model].num_superpackets


def test_page_cache_state_is_measured_and_settled(tmp_path, monkeypatch):
    """benchmarks/page_cache.py: the share of a file mapped in 2 MiB pieces is the rise of
    ``thp_file_mapped`` while the whole file is populated; ``reread`` drops the file's
    pages before reading it once; an unknown state is refused."""
    cache = _load("page_cache")
    f = tmp_path / "cap.pcap"
    f.write_bytes(bytes(range(256)) * (32 << 10))          # 8 MiB: four 2 MiB pieces
    # measured in a child (its peak RSS not this process's): what this process measures
    assert cache.pmd_share(str(f)) == cache._pmd_share_here(str(f))
    counts = iter([100, 103])
    monkeypatch.setattr(cache, "_file_pmd_mappings", lambda: next(counts))
    assert cache._pmd_share_here(str(f)) == pytest.approx(0.75)
    monkeypatch.setattr(cache, "pmd_share", lambda path: None)
    advice = []
    real = os.posix_fadvise
    monkeypatch.setattr(cache.os, "posix_fadvise",
                        lambda fd, off, n, how: (advice.append(how), real(fd, off, n, how)))
    assert cache.settle(str(f), "reread") == {"mode": "reread", "pmd_mapped_share": None}
    assert advice == [os.POSIX_FADV_DONTNEED]
    assert cache.settle(str(f), "as-is")["mode"] == "as-is" and len(advice) == 1
    with pytest.raises(ValueError, match="reread"):
        cache.settle(str(f), "cold")


def test_preparation_runs_in_a_child_and_gives_its_result_back(tmp_path, monkeypatch):
    """benchmarks/child.py in_child: a benchmark's own scan of the capture runs in a
    fresh process (its peak RSS would floor the measured children's) and returns what
    the function returns; a failing call stops the benchmark with its error."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    child = _load("child")
    targets = _load("bench_targets")
    cap = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")
    assert child.in_child("bench_targets", "count_records", cap) == \
        targets.count_records(cap) > 0
    dest = str(tmp_path / "p.pcap")
    assert child.in_child("bench_targets", "write_prefix", cap, 100, dest) == 100
    assert targets.count_records(dest) == 100
    with pytest.raises(SystemExit, match="count_records failed"):
        child.in_child("bench_targets", "count_records", str(tmp_path / "missing.pcap"))


def test_paired_marginal_takes_the_median_of_the_rounds(monkeypatch):
    """bench_targets' second marginal: the median of each round's whole - prefix, so one
    odd round (here a whole run 4 s slow) does not move it; None when not positive."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    targets = _load("bench_targets")
    assert targets.paired_marginal(1000, [1.0, 1.5, 5.0], [0.5, 1.0, 0.5]) == 2000.0
    assert targets.paired_marginal(1000, [1.0, 1.5], [0.5, 0.5]) == \
        pytest.approx(1333.33, 0.01)
    assert targets.paired_marginal(1000, [0.5], [0.6]) is None
    assert targets.paired_marginal(1000, [], []) is None
