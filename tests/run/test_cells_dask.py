"""--tunnel-gro on the Dask core per partition (issue 15: every feature in distributed
mode): each partition's write task gathers its native super-packets (``run.cells.CellsPart``:
the records by delivery position, the first rows), one task per model scatters them into
delivery order and runs the gro_cells stage as the one-process core does
(``run.dask_tasks.cells_task``). The summary (its ``stages`` and egress after the cells
included), the flows and the written rows equal the one-process run's, whichever way the
partitions get their rows."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.run.dask_core import analyze_partitioned  # noqa: E402
from gropcap.run.options import EgressOptions  # noqa: E402
from gropcap.run.stream import stream_analyze  # noqa: E402

from tests.run.test_runner import _no_fallback, assert_same_rows, client  # noqa: E402,F401
from tests.run.test_stream import bench_capture  # noqa: E402,F401 (a fixture)
from where import ROOT  # noqa: E402

S = os.path.join(ROOT, "sample_pcaps")
TUNNELS = [os.path.join(S, n) for n in (
    "crafted_gre.pcap", "crafted_ipip.pcap", "crafted_ip6gre.pcap", "crafted_erspan2.pcap",
    "crafted_geneve.pcap", "crafted_dsa_dsa.pcap", "real_vxlan.pcap")]
SOCKETS = (("vxlan", 4789), ("geneve", 6081))


@pytest.mark.parametrize("exchange,paths,config,out,egress", [
    ("fused", TUNNELS[-1:], GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2),
     False, None),
    ("fused", TUNNELS[-1:], GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=4,
                                      budget=8), True, EgressOptions("decap")),
    ("exchange", TUNNELS, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2),
     False, EgressOptions("encap", mtu=1400)),
    ("exchange", TUNNELS, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=3,
                                    budget=4), True, None),
    ("runs", TUNNELS, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS), False,
     EgressOptions("decap")),
    ("runs", TUNNELS, GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2), True,
     None),
], ids=["fused", "fused-out-egress", "exchange-egress", "exchange-out", "runs-egress",
        "runs-out"])
def test_gro_cells_per_partition_equals_one_process(client, tmp_path, exchange,  # noqa: F811
                                                    paths, config, out, egress):
    captures = "separate" if exchange == "runs" else "continuous"
    one_dir, dist_dir = tmp_path / "one", tmp_path / "dist"
    one = stream_analyze(paths, config, captures=captures, egress=egress,
                         out_dir=str(one_dir) if out else None)
    dist = analyze_partitioned(paths, config, client=client, exchange=exchange,
                               out_dir=str(dist_dir) if out else None, egress=egress,
                               fallback=_no_fallback, captures=captures)
    assert dist.exchange == exchange
    assert dist.summary == one.summary
    stages = dist.summary["stages"]
    for m in ("ideal", "napi"):
        # the cells took native super-packets, and egress counted what they delivered
        assert stages[m]["stages"]["gro_cells"]["packets_in"] > 0
        if egress is not None:
            assert dist.summary["egress"][m]["superpackets"] == stages[m]["delivered"]
    assert dist.flows.equals(one.flows)
    if out:
        assert_same_rows(one_dir, dist_dir)


@pytest.mark.parametrize("exchange", ["fused", "exchange"])
def test_generated_capture_with_timers(client, bench_capture, tmp_path,  # noqa: F811
                                       exchange):
    """6 000 generated packets (IPv4, IPv6, VXLAN, GRE), VXLAN decapsulated and its
    frames captured coalesced under the MTU, timers: the cells' NAPI polls read each
    unit's last time, its FIN/PSH bits and its first row's columns."""
    config = GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=3, budget=4,
                       gro_flush_timeout_ns=50_000, napi_defer_hard_irqs=1, mtu=1500)
    one = stream_analyze(bench_capture, config, out_dir=str(tmp_path / "one"))
    dist = analyze_partitioned(bench_capture, config, client=client, exchange=exchange,
                               out_dir=str(tmp_path / "dist"), fallback=_no_fallback)
    assert dist.exchange == exchange
    assert dist.summary == one.summary
    assert dist.summary["stages"]["napi"]["stages"]["gro_cells"]["packets_in"] > 0
    assert_same_rows(tmp_path / "one", tmp_path / "dist")


def test_the_cli_runs_tunnel_gro_on_workers():
    """``--parallel workers --tunnel-gro`` runs the core per partition (no in-memory merge
    note) and prints the one-process stages."""
    import json

    from click.testing import CliRunner
    from gropcap.cli import main
    got = []
    for extra in ([], ["--jobs", "2", "--parallel", "workers"]):
        r = CliRunner().invoke(main, ["analyze", *TUNNELS[:3], "--queues", "2",
                                      "--tunnel-gro", "--format", "json", *extra])
        assert r.exit_code == 0, r.output
        assert "merged in memory" not in r.stderr
        got.append(json.loads(r.stdout)["stages"])
    assert got[0] == got[1] and got[0]["napi"]["stages"]["gro_cells"]["packets_in"] > 0


@pytest.mark.parametrize("exchange,path,config", [
    ("exchange", os.path.join(S, "real_vxlan.pcap"),
     GroConfig(tunnel_gro=True, udp_tunnels=SOCKETS, queues=2)),
    ("fused", os.path.join(S, "crafted_gre.pcap"),
     GroConfig(tunnel_gro=True, queues=2, budget=4)),
], ids=["vxlan-exchange", "gre-fused"])
def test_the_gathered_units_equal_the_in_memory_ones(exchange, path, config, monkeypatch,
                                                     tmp_path):
    """Every field of every unit the partitions gathered (totals, first row, last time,
    ORed FIN/PSH), once scattered into delivery order, as ``gro.stages.native_units``
    reads it from the whole table (workers as threads of this process: the stage is
    looked at where it runs)."""
    import distributed

    from gropcap.run.memory import analyze
    from tests.run.test_cells_stream import assert_units_as_in_memory, spy_stage_units
    seen = spy_stage_units(monkeypatch)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        dist = analyze_partitioned(path, config, client=c, exchange=exchange,
                                   fallback=_no_fallback, captures="continuous",
                                   scratch=str(tmp_path))
    assert dist.exchange == exchange
    assert_units_as_in_memory(seen, analyze(path, config))


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_partitions_records_sorted_by_position(tmp_path, monkeypatch, shuffled):
    """CellsPart.sort: records appended in emission order come out by delivery position,
    every field with its own record, whether they arrive in order (kept as written) or
    not (sorted a slice at a time)."""
    import numpy as np

    import gropcap.run.cells as cells
    monkeypatch.setattr(cells, "UNITS_PER_SLICE", 7)
    rng = np.random.default_rng(3)
    pos = np.sort(rng.choice(1000, 50, replace=False))
    if shuffled:
        pos = rng.permutation(pos)
    part = cells.CellsPart(str(tmp_path), GroConfig(model="napi"), 0)
    for p in (pos[:30], pos[30:]):
        part.segs(p, p * 2, p * 3, p * 4, (p * 5).astype(np.uint32), (p % 7).astype(np.uint8),
                  p * 6)
    part.sort()
    u = np.array(part.units)
    order = np.sort(pos)
    assert u["pos"].tolist() == order.tolist()
    for name, k in (("count", 2), ("payload", 3), ("gso_size", 4), ("gso_type", 5),
                    ("poll", 6)):
        assert u[name].tolist() == (order * k).tolist(), name
    assert u["end"].tolist() == (order % 7).tolist() and (u["head"] == -1).all()
    assert part.close() == {"path": part.path, "units": 50, "heads": 0}
    assert sorted(os.listdir(tmp_path)) == ["napi-0.units"]
