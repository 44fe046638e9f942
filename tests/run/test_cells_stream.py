"""--tunnel-gro in bounded memory (issue 14: every feature in every mode): the gro_cells
stage's units are gathered by the super-packets and packets passes (``run.cells``) and
replayed a slice at a time in delivery order; the summary (its ``stages`` section
included), flows and Parquet files equal the in-memory run's."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

import gropcap.run.cells as cells
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze
from gropcap.run.stream import stream_analyze

from tests.run.test_stream import assert_same, small_batches
from tests.run.test_stream import bench_capture  # noqa: F401 (a fixture)
from where import ROOT

S = os.path.join(ROOT, "sample_pcaps")
TUNNELS = [os.path.join(S, n) for n in (
    "crafted_gre.pcap", "crafted_gretap.pcap", "crafted_ipip.pcap", "crafted_ip6gre.pcap",
    "crafted_ip6ip6.pcap", "crafted_sit.pcap", "crafted_erspan2.pcap",
    "crafted_geneve.pcap", "crafted_dsa_dsa.pcap", "real_vxlan.pcap")]
# the UDP tunnels decapsulate only with a socket on their port
SOCKETS = (("vxlan", 4789), ("geneve", 6081))


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of 5 units: every capture here needs several, devices and polls span them."""
    monkeypatch.setattr(cells, "UNITS_PER_SLICE", 5)


@pytest.fixture
def bench_slices(monkeypatch):
    """Slices of 61 units for the 6 000 generated packets: still 85 to 92 slices a
    model, with rows for the cells in more than half of them. (Slices of 5 made two
    thousand slices, 35 s a run: a slice's fixed cost is some milliseconds.)"""
    monkeypatch.setattr(cells, "UNITS_PER_SLICE", 61)


@pytest.mark.parametrize("path", TUNNELS, ids=os.path.basename)
@pytest.mark.parametrize("config,batch", [
    (GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS), 65536),
    (GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2, budget=8), 7),
    (GroConfig(tunnel_gro=False, udp_tunnels=SOCKETS, poll_gap_ns=5_000,
               gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=1), 131),
], ids=["default", "q2-b8", "no-cells-timers"])
def test_stream_equals_analyze_with_tunnel_gro(path, config, batch, small_slices, tmp_path):
    a, r = assert_same(path, config, tmp_path, batch_records=small_batches(path, batch))
    st = r.summary["stages"]
    assert set(st) == {"ideal", "napi"}
    assert st == a.summary()["stages"]


def test_the_samples_do_reach_the_cells(small_slices):
    """What the cases above compare is not empty: every sample has units the cells take,
    and with cells on, GRO merges some of them again or the samples differ by device."""
    took = 0
    for path in TUNNELS:
        r = stream_analyze(path, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS))
        cells_in = r.summary["stages"]["napi"]["stages"]["gro_cells"]
        assert cells_in["packets_in"] > 0, path
        took += cells_in["devices"]
    assert took >= len(TUNNELS)


@pytest.mark.parametrize("captures", ["separate", "continuous"])
def test_several_receiver_runs(captures, small_slices, tmp_path):
    """Each receiver run's units reach its own cells (fresh receivers): copies of a
    capture as separate receivers give exactly twice one copy's stage counts."""
    paths = [os.path.join(S, "real_vxlan.pcap"), os.path.join(S, "crafted_gre.pcap"),
             os.path.join(S, "real_vxlan.pcap")]
    config = GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS)
    a, r = assert_same(paths, config, tmp_path, batch_records=53)
    assert r.summary["stages"] == a.summary()["stages"]
    one = stream_analyze(paths[:1], config).summary["stages"]["napi"]["stages"]
    two = stream_analyze(paths[:1] * 2, config, captures="separate").summary
    got = two["stages"]["napi"]["stages"]
    for k in ("packets_in", "segments_in", "superpackets_out"):
        assert got["gro_cells"][k] == 2 * one["gro_cells"][k]
        assert got["native"][k] == 2 * one["native"][k]


@pytest.mark.parametrize("config", [
    GroConfig(tunnel_gro=True),
    GroConfig(tunnel_gro=True, queues=4, budget=16),
    # VXLAN decapsulated (a socket), its 1550-byte frames captured coalesced under a
    # 1500-byte MTU (the run starts over unfused), timers
    GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=3, budget=4,
              gro_flush_timeout_ns=50_000, napi_defer_hard_irqs=1, mtu=1500),
], ids=["default", "q4", "vxlan-coalesced-timers"])
def test_generated_capture_with_tunnels(bench_capture, config, bench_slices,  # noqa: F811
                                        tmp_path):
    """6 000 generated packets (IPv4, IPv6, VXLAN, GRE): the GRE units span many slices."""
    a, r = assert_same(bench_capture, config, tmp_path, batch_records=997)
    assert r.summary["stages"]["napi"]["stages"]["gro_cells"]["packets_in"] > 20


def test_threads_and_summary_only(small_slices):
    path = os.path.join(S, "real_vxlan.pcap")
    config = GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS)
    want = analyze(path, config).summary()
    for threads in (1, 2):
        assert stream_analyze(path, config, threads=threads,
                              batch_records=61).summary == want


def test_the_cli_runs_tunnel_gro_in_bounded_memory(stream_calls, monkeypatch):
    import json
    from gropcap.cli import main
    path = os.path.join(S, "crafted_gre.pcap")
    args = ["analyze", path, "--tunnel-gro", "--format", "json", "-q"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert len(stream_calls) == 1
    got = json.loads(r.stdout)
    assert got["stages"] == analyze(path, GroConfig(tunnel_gro=True)).summary()["stages"]
    mem = CliRunner().invoke(main, args + ["--no-stream"])
    assert json.loads(mem.stdout) == got
    # --jobs 2: threads in one process, and the note says why
    import gropcap.run.core as core
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)
    r = CliRunner().invoke(main, args[:-1] + ["--jobs", "2", "--queues", "4"])
    assert r.exit_code == 0, r.output
    assert "--tunnel-gro's gro_cells stage" in r.stderr and len(stream_calls) == 2
    assert json.loads(r.stdout)["stages"] == got["stages"]


def test_what_stays_in_memory():
    """Nothing sends --tunnel-gro to a run in memory: one process runs the cells batch
    by batch, with egress too, and the Dask core per partition gathers the units in its
    partitions (tests/run/test_cells_dask.py)."""
    from gropcap.run.dask_core import partitioned_reason
    from gropcap.run.options import EgressOptions, memory_reason
    config = GroConfig(tunnel_gro=True)
    assert memory_reason(config) is None
    assert memory_reason(config, egress=EgressOptions()) is None
    assert partitioned_reason(config) is None
    assert partitioned_reason(config, egress=EgressOptions()) is None
    assert partitioned_reason(GroConfig()) is None


EGRESS_CASES = [os.path.join(S, n) for n in (
    "real_ipv4.pcap", "crafted_gre.pcap", "crafted_erspan2.pcap", "crafted_sit.pcap",
    "real_vxlan.pcap", "crafted_two_ifaces.pcapng")]


@pytest.mark.parametrize("path", EGRESS_CASES, ids=os.path.basename)
@pytest.mark.parametrize("scenario", ["decap", "encap"])
def test_egress_after_the_cells_batch_by_batch(path, scenario, small_slices):
    """Egress counts what reaches the stack: the native super-packets no cell took and
    the cells' super-packets (``delivered``), batch by batch as in memory."""
    from gropcap.run.options import EgressOptions
    config = GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS)
    eg = EgressOptions(scenario=scenario, feature_text="tso")
    want = analyze(path, config, egress=eg).summary()
    for batch in (65536, small_batches(path)):
        assert stream_analyze(path, config, egress=eg, batch_records=batch).summary == want
    for m, e in want["egress"].items():
        st = want["stages"][m]
        assert e["superpackets"] == st["delivered"] > 0
        if "ecn_dropped" not in st["stages"]["gro_cells"]:
            # every wire segment leaves (no egress MTU: a super-packet of n segments
            # becomes n)
            assert e["segments"] == st["stages"]["native"]["segments_in"]


@pytest.mark.parametrize("scenario,mtu", [("decap", None), ("encap", 1400)])
def test_egress_after_the_cells_on_a_mixed_capture(bench_capture, scenario, mtu,  # noqa: F811
                                                   bench_slices):
    """IPv4, IPv6, VXLAN and GRE: each super-packet's own first packet's headers (their
    lengths differ by family and tunnel) and an egress MTU that splits or drops."""
    from gropcap.run.options import EgressOptions
    config = GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2)
    eg = EgressOptions(scenario=scenario, feature_text="tso", mtu=mtu)
    want = analyze(bench_capture, config, egress=eg).summary()
    assert stream_analyze(bench_capture, config, egress=eg,
                          batch_records=499).summary == want
    assert want["stages"]["napi"]["stages"]["gro_cells"]["packets_in"] > 20
    assert want["egress"]["napi"]["superpackets"] == want["stages"]["napi"]["delivered"]


# kernel x egress MTU x scenario, every pair of values once (4 runs, not 8)
@pytest.mark.parametrize("kernel,mtu,scenario", [
    ("6.18", None, "decap"), ("6.18", 1450, "encap"), ("4.4", None, "encap"),
    ("4.4", 1450, "decap")])
def test_egress_after_the_cells_with_several_tunnels(scenario, mtu, kernel, bench_slices):
    """Tunnel samples as one receiver run: the cells' super-packets (GRE's units merged
    again, ERSPAN's merged there first) have first packets of different header lengths
    (IPv4 and IPv6 inside: 52 and 72 bytes), an egress MTU between them (ip6ip6's
    1 388-byte segments fit 1 450 with 52 bytes of headers, not with their own 72) drops
    or fragments by those lengths, and before v4.6 a merged unit keeps its tunnel GSO bits
    into the cells' super-packet (the egress device then segments it in software).
    Batches of 61 rows (47 of them) and slices of 61 units: the same runs in batches of
    13 and slices of 5 took 11-13 s each; the tunnel samples in batches of 7 and slices
    of 5 are test_egress_after_the_cells_batch_by_batch's."""
    from gropcap.gro.config import KernelProfile
    from gropcap.run.options import EgressOptions
    paths = [os.path.join(S, n) for n in ("crafted_gre.pcap", "crafted_ip6ip6.pcap",
                                          "crafted_erspan2.pcap", "crafted_ip4ip6.pcap",
                                          "crafted_ip6gre.pcap", "real_ipv6.pcap")]
    config = GroConfig(tunnel_gro=True, kernel=KernelProfile.parse(kernel))
    eg = EgressOptions(scenario=scenario, feature_text="tso", mtu=mtu)
    want = analyze(paths, config, egress=eg, captures="continuous").summary()
    got = stream_analyze(paths, config, egress=eg, batch_records=61,
                         captures="continuous").summary
    assert got == want


def test_egress_of_a_capture_without_tunnels_does_not_depend_on_tunnel_gro():
    """Regression: with --tunnel-gro, egress counted only the cells' super-packets, so a
    capture without tunnels reported no egress at all."""
    from gropcap.run.options import EgressOptions
    path = os.path.join(S, "real_ipv4.pcap")
    eg = EgressOptions(scenario="decap", feature_text="tso")
    plain = stream_analyze(path, GroConfig(), egress=eg).summary["egress"]
    for run in (analyze(path, GroConfig(tunnel_gro=True), egress=eg).summary(),
                stream_analyze(path, GroConfig(tunnel_gro=True), egress=eg).summary):
        assert run["egress"] == plain
        assert plain["napi"]["segments"] == run["packets"]


def test_no_files_left(tmp_path, small_slices):
    path = os.path.join(S, "crafted_gre.pcap")
    stream_analyze(path, GroConfig(tunnel_gro=True), tmp_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_gather_takes_rows_in_the_order_asked():
    import pyarrow as pa
    t = pa.table({"v": np.arange(20), "e": pa.array([str(i % 3) for i in range(20)])
                  .dictionary_encode()})
    batches = [t.slice(0, 7).to_batches()[0], t.slice(7, 13).to_batches()[0]]
    bounds = np.array([0, 7, 20])
    rows = np.array([19, 0, 8, 6, 7, 3])
    got = cells._gather(batches, bounds, rows)
    assert got.column("v").to_pylist() == rows.tolist()
    assert got.column("e").to_pylist() == [str(i % 3) for i in rows]


@pytest.mark.parametrize("path,config,batch", [
    (os.path.join(S, "real_vxlan.pcap"), GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS),
     41),
    (os.path.join(S, "crafted_gre.pcap"), GroConfig(tunnel_gro=True, queues=2, budget=4),
     3),
], ids=["vxlan", "gre-q2"])
def test_the_gathered_units_equal_the_in_memory_ones(path, config, batch, monkeypatch):
    """Every field of every unit (totals, first row, last time, ORed FIN/PSH) as
    ``gro.stages.native_units`` reads it from the whole table, in delivery order."""
    seen = spy_stage_units(monkeypatch)
    stream_analyze(path, config, batch_records=batch)
    assert_units_as_in_memory(seen, analyze(path, config))


def test_the_cells_stage_has_a_progress_line():
    """The stage after GRO reads every native super-packet again: a line per model
    counts them."""
    from gropcap.run.progress import Progress
    path = os.path.join(S, "real_vxlan.pcap")
    with Progress(True) as p:
        r = stream_analyze(path, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS),
                           progress=p)
        tasks = {t.description: (t.completed, t.fields["detail"]) for t in p._bar.tasks}
    for m in ("ideal", "napi"):
        n = r.summary["stages"][m]["stages"]["native"]["superpackets_out"]
        assert n > 0
        assert tasks[f"gro_cells {m}"] == (n, f"done, {n} super-packets")


def spy_stage_units(monkeypatch) -> dict:
    """Per model, the units a ``CellsStage`` runs over (records, first rows), recorded
    when it runs (in this process)."""
    seen = {}
    real = cells.CellsStage.run

    def spy(self, *args, **kw):
        self.close()
        seen[self.config.model] = (np.array(self.units[:self.nseg]),
                                   cells.map_ipc_file(self.path + ".heads", stream=True))
        return real(self, *args, **kw)
    monkeypatch.setattr(cells.CellsStage, "run", spy)
    return seen


def assert_units_as_in_memory(seen: dict, a) -> None:
    """Every field of every unit :func:`spy_stage_units` saw equals what
    ``gro.stages.native_units`` reads from the in-memory Analysis ``a``."""
    from gropcap.gro.stages import native_units
    for m, res in a.results.items():
        rec, heads = seen[m]
        want = native_units(a.decoded, res)
        for field, name in (("count", "count"), ("payload", "payload"),
                            ("gso_size", "gso_size"), ("gso_type", "gso_type"),
                            ("end", "end_reason"), ("poll", "poll_id"),
                            ("last_ts", "last_ts"), ("flags", "or_flags")):
            assert rec[field].tolist() == np.asarray(getattr(want, name)).tolist(), \
                (m, field)
        got = cells._gather(heads.to_batches(), np.cumsum(
            [0] + [b.num_rows for b in heads.to_batches()]), rec["head"])
        assert got.to_pylist() == want.heads.to_pylist()
