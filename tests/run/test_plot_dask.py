"""--plot on the Dask core per partition (issue 15: every feature in distributed mode):
each partition's output pass spills its rows' times (``run.plotdata.PlotRows``) and its
GRO task keeps its (flow, end reason) counts under its own flow ids; the client folds
each partition in once the capture's time span and the flows' numbers are known
(``PlotParts``). What the plots draw equals the one-process run's, whichever way the
partitions get their rows, with and without ``--out``."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.run.dask_core import analyze_partitioned  # noqa: E402
from gropcap.run.stream import stream_analyze  # noqa: E402

from tests.run.test_runner import _no_fallback, client, generated  # noqa: E402,F401
from where import ROOT  # noqa: E402

S = os.path.join(ROOT, "sample_pcaps")
IPV4, IPV6, P4 = (os.path.join(S, n) for n in ("real_ipv4.pcap", "real_ipv6.pcap",
                                                "real_ipv4_p4.pcap"))


@pytest.mark.parametrize("exchange,which,config,out", [
    ("fused", "generated0", GroConfig(queues=4), False),
    ("fused", "generated0", GroConfig(queues=2), True),
    ("exchange", "generated012", GroConfig(queues=4, budget=16), False),
    ("exchange", "generated012", GroConfig(queues=2), True),
    ("runs", "copies", GroConfig(), False),
    ("runs", "copies", GroConfig(queues=2), True),
], ids=["fused", "fused-out", "exchange", "exchange-out", "runs", "runs-out"])
def test_plot_per_partition_equals_one_process(client, generated, tmp_path,  # noqa: F811
                                               exchange, which, config, out):
    paths = {"generated0": generated[:1], "generated012": generated[:3],
             "copies": [IPV6, IPV4, IPV6, P4]}[which]
    captures = "separate" if exchange == "runs" else "continuous"
    one = stream_analyze(paths, config, plot=True, captures=captures)
    dist = analyze_partitioned(paths, config, client=client, exchange=exchange,
                               out_dir=str(tmp_path / "dist") if out else None,
                               fallback=_no_fallback, captures=captures, plot=True)
    assert dist.exchange == exchange
    assert dist.summary == one.summary
    got, want = dist.plot_data, one.plot_data
    assert got is not None and got.equals(want)
    assert got.time is not None and got.time.packets.sum() == one.summary["packets"]
    for m in got.models:
        assert len(got.reason_keys[m][0]) > 0
        assert got.time.superpackets[m].sum() == got.superpackets(m) > 0


def test_no_plot_keeps_nothing(client, generated):  # noqa: F811
    dist = analyze_partitioned(generated[:1], GroConfig(queues=2), client=client,
                               fallback=_no_fallback)
    assert dist.plot_data is None


def test_the_cli_plots_on_workers(tmp_path):
    """``--parallel workers --plot`` runs the core per partition (no in-memory merge
    note) and draws the one-process figure."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed")
    import matplotlib
    from click.testing import CliRunner
    from gropcap.cli import main
    matplotlib.rcParams["svg.hashsalt"] = "gropcap"
    svgs = []
    for extra in ([], ["--jobs", "2", "--parallel", "workers"]):
        out = tmp_path / f"{len(svgs)}.svg"
        r = CliRunner().invoke(main, ["analyze", IPV4, "--queues", "2", "--plot", str(out),
                                      "--format", "json", *extra])
        assert r.exit_code == 0, r.output
        assert "merged in memory" not in r.stderr
        svgs.append(out.read_text())
    assert "Aggregation ratio over time" in svgs[1]
