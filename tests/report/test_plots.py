"""Plots: written as PNG/SVG, opened again, titled and labelled; bad extensions refused."""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install matplotlib)")
Image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) missing")

from tests.report.test_explain import hand_analysis  # noqa: E402

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
        assert im.size == (1100, 1400)       # 11 x 14 inches at 100 dpi
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
    # shares of each flow's super-packets, whose number is on the right-hand axis
    assert totals == pytest.approx({0: 100.0, 1: 100.0})
    (right,) = ax.child_axes
    assert [t.get_text() for t in right.get_yticklabels()] == ["6", "3"]  # flow 0, 1 (ACKs)

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
    from tests.report.test_explain import GRE

    if "plot" not in [p.name for p in main.commands["analyze"].params]:
        pytest.skip("`gropcap analyze --plot` is not wired into cli.py yet")
    out = tmp_path / f"r.{ext}"
    r = CliRunner().invoke(main, ["analyze", GRE, "--plot", str(out)])
    assert r.exit_code == 0, r.output
    if ext == "png":
        with Image.open(out) as im:
            assert im.size == (1100, 1400)
            assert len(np.unique(np.asarray(im.convert("L")))) > 20
    else:
        assert "Aggregation ratio over time" in out.read_text()


# --- issue 16 item 11: palette, legends, labels ------------------------------------------

from gropcap.gro import reasons as R  # noqa: E402
from gropcap.report.plots import REASON_COLOURS, duration_text, reason_colour  # noqa: E402

# reasons that often end super-packets of the same capture: their colours must differ
# at a glance (RGB distance, 0..sqrt(3))
COMMON = (R.NOT_HELD_ZERO_PAYLOAD, R.END_PSH, R.END_POLL, R.END_POLL_OLD, R.END_BUCKET_FULL,
          R.END_CAPTURE, R.END_SHORT_SEGMENT, R.FLUSH_SEQ, R.FLUSH_IP_ID, R.FLUSH_TCP_TS,
          R.FLUSH_TCP_ACK, R.FLUSH_SIZE_LIMIT, R.FLUSH_TTL, R.FLUSH_TOS, R.FLUSH_ECN,
          R.FLUSH_TCP_OPTIONS, R.NOT_HELD_PSH, R.NOT_HELD_SYN, R.NOT_HELD_FIN,
          R.BYPASS_UDP_NO_GRO)


def test_every_reason_has_one_fixed_colour():
    from matplotlib.colors import to_rgb
    assert set(REASON_COLOURS) == set(R.REASONS)
    rgb = {c: np.array(to_rgb(REASON_COLOURS[c])) for c in COMMON}
    worst = min((np.linalg.norm(rgb[a] - rgb[b]), R.reason_name(a), R.reason_name(b))
                for i, a in enumerate(COMMON) for b in COMMON[i + 1:])
    assert worst[0] >= 0.18, worst


def _bar_colours(fig):
    from matplotlib.colors import to_hex
    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    return {lab: to_hex(h.patches[0].get_facecolor() if hasattr(h, "patches")
                        else h.get_facecolor()) for h, lab in zip(handles, labels)}


def test_reason_colours_are_the_same_in_every_plot(analysis, tmp_path):
    """Two analyses with different reason sets, and both models: a reason keeps its
    colour (it was the k-th colour of a colormap before)."""
    from gropcap.run.memory import analyze
    from tests.report.test_explain import SAMPLES
    other = analyze(os.path.join(SAMPLES, "real_ipv4.pcap"))
    seen = {}
    for a, model in ((analysis, "ideal"), (other, "napi"), (other, "ideal")):
        for name, colour in _bar_colours(plot_reasons_per_flow(a, model=model)).items():
            assert seen.setdefault(name, colour) == colour, name
    codes = {r.name: c for c, r in R.REASONS.items()}
    from matplotlib.colors import to_hex
    for name, colour in seen.items():
        assert colour == to_hex(reason_colour(codes[name])), name
    assert len(seen) >= 5


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_legends_are_outside_the_data_area(analysis):
    fig = report_figure(analysis)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert len(panels) == 3
    for ax in panels:
        legend = ax.get_legend().get_window_extent(renderer)
        for other in panels:
            assert not _overlaps(legend, other.get_window_extent(renderer)), ax.get_title()


def test_flow_labels_readable_and_only_ip_flows(tmp_path):
    """A capture with a non-IP flow: no row for it; labels at 9 pt, two lines."""
    from gropcap.capture import write_pcap
    from gropcap.run.memory import analyze
    from tests.craft import eth, ipv4, tcp
    from gropcap import constants as C
    frames = [eth(b"\x00" * 46, etype=0x88B5)] * 3 + [
        eth(ipv4("192.0.2.1", "192.0.2.2", C.IPPROTO_TCP,
                 tcp(1, 2, seq=k * 100, payload=bytes(100)), ident=k)) for k in range(4)]
    path = tmp_path / "mixed.pcap"
    write_pcap(path, frames, [10**18 + k * 1000 for k in range(len(frames))])
    fig = plot_reasons_per_flow(analyze([str(path)]))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["#1 192.0.2.1:1\n→ 192.0.2.2:2"]
    assert all(t.get_fontsize() >= 9 for t in fig.axes[0].get_yticklabels())


def test_time_bins_are_named_in_a_readable_unit(analysis):
    from gropcap.run.memory import analyze
    from tests.report.test_explain import SAMPLES
    a = analyze([os.path.join(SAMPLES, "real_ipv4.pcap"), os.path.join(SAMPLES, "real_vxlan.pcap")])
    fig = plot_ratio_over_time(a)
    ax = fig.axes[0]
    label = ax.get_xlabel()
    assert "e+" not in label and label.endswith("bins of 50 ms"), label
    assert "of its file" in label          # two captures recorded at different times
    # the highest line stays below the top of the axes (not clipped by the frame)
    top = max(np.nanmax(line.get_ydata()) for line in ax.lines)
    assert ax.get_ylim()[1] >= top * 1.05
    assert [duration_text(x) for x in (5e6, 2e5, 1e9, 500)] == ["5 ms", "200 µs", "1 s",
                                                                "500 ns"]
