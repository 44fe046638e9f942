"""--plot in bounded memory (issue 14: every feature in every mode): a bounded-memory run
collects what the plots draw (``run.plotdata``: segment histograms, the ratio-over-time
bins from each row's spilled time and file, the (flow, end reason) counts) and it equals
what an in-memory run's tables give, so both draw the same figure."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gropcap
from gropcap.run.plotdata import PlotRows, plot_data_of, time_series
from gropcap.run.stream import stream_analyze

from where import ROOT

S = os.path.join(ROOT, "sample_pcaps")
CASES = {
    "ipv4": [os.path.join(S, "real_ipv4.pcap")],
    # a UDP tunnel without a socket: the fused pass ends and the run starts again unfused
    "vxlan": [os.path.join(S, "real_vxlan.pcap")],
    "two_ifaces": [os.path.join(S, "crafted_two_ifaces.pcapng")],
    # two files: times from each file's first packet
    "two_files": [os.path.join(S, "real_ipv6.pcap"), os.path.join(S, "crafted_gre.pcap")],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads,batch,out", [(1, 65536, False), (2, 97, False),
                                               (1, 211, True)])
def test_a_bounded_memory_run_collects_what_the_in_memory_run_plots(case, threads, batch,
                                                                     out, tmp_path):
    paths = CASES[case]
    want = plot_data_of(gropcap.analyze(paths))
    got = stream_analyze(paths, plot=True, threads=threads, batch_records=batch,
                         out_dir=str(tmp_path / "out") if out else None).plot_data
    assert got.equals(want)
    assert got.time is not None and got.time.packets.sum() == want.flows.column(
        "packets").to_numpy().sum()
    for m in got.models:
        assert got.time.superpackets[m].sum() == got.superpackets(m) > 0


def test_the_same_figure_either_way(tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib not installed")
    from gropcap.report.plots import report_figure
    matplotlib.rcParams["svg.hashsalt"] = "gropcap"
    paths = CASES["two_files"]
    svgs = []
    for run in (gropcap.analyze(paths), stream_analyze(paths, plot=True).plot_data):
        p = tmp_path / f"{len(svgs)}.svg"
        report_figure(run).savefig(p, format="svg", metadata={"Date": None})
        svgs.append(p.read_bytes())
    assert svgs[0] == svgs[1]


def test_no_plot_collects_nothing(tmp_path):
    r = stream_analyze(CASES["ipv4"], tmp_dir=str(tmp_path))
    assert r.plot_data is None
    assert os.listdir(tmp_path) == []           # (the spill went with the run's tmp dir)


def test_cli_plot_runs_in_bounded_memory(stream_calls, tmp_path):
    from click.testing import CliRunner
    from gropcap.cli import main
    pytest.importorskip("matplotlib", reason="matplotlib not installed")
    out = tmp_path / "p.svg"
    r = CliRunner().invoke(main, ["analyze", *CASES["ipv4"], "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert [kw.get("plot") for kw in stream_calls] == [True]
    assert "Aggregation ratio over time" in out.read_text()


def test_time_series_bins_do_not_depend_on_the_slicing():
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 10**9, 5000)).astype(np.int64) + 10**12
    fidx = (rng.random(5000) < 0.3).astype(np.int64)
    start = np.array([ts[fidx == 0].min(), ts[fidx == 1].min()])
    rel_max = int((ts - start[fidx]).max())
    first = rng.random(5000) < 0.1
    one = time_series(start, len(ts), rel_max, lambda: [(ts, fidx)],
                      {"m": lambda: [(ts[first], fidx[first])]})
    cuts = [0, 7, 1000, 4999, 5000]
    many = time_series(start, len(ts), rel_max,
                       lambda: [(ts[a:b], fidx[a:b]) for a, b in zip(cuts, cuts[1:])],
                       {"m": lambda: [(ts[first][:10], fidx[first][:10]),
                                      (ts[first][10:], fidx[first][10:])]})
    assert one.equals(many) and one.packets.sum() == 5000
    assert one.superpackets["m"].sum() == first.sum()
    assert len(one.packets) <= 51


def test_plot_rows_spill_equals_the_rows(tmp_path):
    import pyarrow as pa
    rows = PlotRows(str(tmp_path), ["napi"])
    ts = np.array([50, 10, 30, 1000, 7], np.int64)
    fidx = np.array([0, 0, 1, 1, 0], np.uint16)
    for a, b in ((0, 2), (2, 5)):
        t = pa.table({"ts_ns": ts[a:b], "file_index": fidx[a:b]})
        rows.add_packets(t)
        rows.add_firsts("napi", t, np.ones(b - a, bool))
    got = rows.series(bins=50)
    start = np.array([7, 30])
    want = time_series(start, 5, 970, lambda: [(ts, fidx.astype(np.int64))],
                       {"napi": lambda: [(ts, fidx.astype(np.int64))]})
    assert got.equals(want)
    rows.close()


def test_jobs_with_plot_runs_the_way_without_it(monkeypatch, tmp_path):
    # --jobs 2 --plot: what runs Dask workers without --plot (4 RX queues, above the
    # size rule, with --out) runs them with it too, the plots' counts collected per partition
    # (run.plotdata.PlotParts: tests/run/test_plot_dask.py), no in-memory merge
    import gropcap.run.core as core
    from click.testing import CliRunner
    from gropcap.cli import main
    pytest.importorskip("matplotlib", reason="matplotlib not installed")
    pytest.importorskip("distributed", reason="dask[distributed] not installed")
    monkeypatch.setattr(core, "WORKERS_MIN_BYTES", 0)
    r = CliRunner().invoke(main, ["analyze", *CASES["ipv4"], "--queues", "4", "--jobs", "2",
                                  "--out", str(tmp_path / "o"),
                                  "--plot", str(tmp_path / "p.svg")])
    assert r.exit_code == 0, r.output
    assert "2 Dask worker processes" in r.stderr and "merged in memory" not in r.stderr
    assert "Aggregation ratio over time" in (tmp_path / "p.svg").read_text()
