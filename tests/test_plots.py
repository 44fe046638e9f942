"""Plots: written as PNG/SVG, opened again, titled and labelled; bad extensions refused."""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install matplotlib)")
Image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) missing")

sys.path.insert(0, os.path.dirname(__file__))
from test_explain import hand_analysis  # noqa: E402

from gropcap.errors import ConfigError  # noqa: E402
from gropcap.report.plots import (plot_ratio_over_time, plot_reasons_per_flow,  # noqa: E402
                                  plot_segments, report_figure, save_plots)


@pytest.fixture(scope="module")
def analysis():
    return hand_analysis()


def test_png_is_written_with_its_size_and_is_not_blank(analysis, tmp_path):
    path = save_plots(analysis, tmp_path / "report.png")
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size == (900, 1300)        # 9 x 13 inches at 100 dpi
        px = np.asarray(im.convert("L"))
    # drawn content: many distinct grey levels and a good share of non-white pixels
    assert len(np.unique(px)) > 20
    assert (px < 250).mean() > 0.05


def test_svg_is_written_and_holds_titles_and_axis_labels(analysis, tmp_path):
    path = save_plots(analysis, tmp_path / "report.svg")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = open(path).read()
    # matplotlib writes each text as a comment-prefixed group
    for label in ("Segments per super-packet", "Aggregation ratio over time",
                  "Why super-packets ended, busiest flows (ideal)",
                  "segments per super-packet (gso_segs)", "super-packets (count)",
                  "packets per super-packet (ratio)"):
        assert label in text, label


def test_axes_carry_the_data(analysis):
    fig = plot_segments(analysis)
    ax = fig.axes[0]
    heights = {round(p.get_x() + p.get_width() / 2): p.get_height() for p in ax.patches}
    # hand verdicts: super-packets of 8, 1, 6, 2, 1, 5, 3, 1, 8 segments
    assert heights == {1: 3, 2: 1, 3: 1, 4: 0, 5: 1, 6: 1, 7: 0, 8: 2}
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()

    fig = plot_reasons_per_flow(analysis)
    ax = fig.axes[0]
    totals = {}
    for p in ax.patches:
        row = round(p.get_y() + p.get_height() / 2)
        totals[row] = totals.get(row, 0) + p.get_width()
    assert totals == {0: 6, 1: 3}     # flow 0: 6 super-packets, flow 1: 3 ACKs

    fig = plot_ratio_over_time(analysis)
    line = fig.axes[0].lines[0]
    y = line.get_ydata()
    # 35 packets, at least ~20 per bin: one bin holding all 35 packets and 9 super-packets
    assert np.allclose(y, [35 / 9])
    assert "µs" in fig.axes[0].get_xlabel()


def test_report_figure_has_three_panels(analysis):
    fig = report_figure(analysis)
    assert len(fig.axes) == 3
    assert "crafted_gre.pcap" in fig.get_suptitle()


def test_other_extension_is_refused(analysis, tmp_path):
    with pytest.raises(ConfigError, match="use a .png or .svg"):
        save_plots(analysis, tmp_path / "report.jpg")
    assert not (tmp_path / "report.jpg").exists()


def test_no_pyplot_state_is_touched(analysis):
    plot_segments(analysis)
    assert "matplotlib.pyplot" not in sys.modules or \
        not __import__("matplotlib.pyplot").pyplot.get_fignums()


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_cli_analyze_plot_option(tmp_path, ext):
    from click.testing import CliRunner

    from gropcap.cli import main
    from test_explain import GRE

    if "plot" not in [p.name for p in main.commands["analyze"].params]:
        pytest.skip("`gropcap analyze --plot` is not wired into cli.py yet")
    out = tmp_path / f"r.{ext}"
    r = CliRunner().invoke(main, ["analyze", GRE, "--plot", str(out)])
    assert r.exit_code == 0, r.output
    if ext == "png":
        with Image.open(out) as im:
            assert im.size == (900, 1300)
            assert len(np.unique(np.asarray(im.convert("L")))) > 20
    else:
        assert "Aggregation ratio over time" in out.read_text()
