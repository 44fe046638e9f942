"""Plots of an Analysis (matplotlib, Agg: no display needed).

Layer: an :class:`Analysis` -> matplotlib Figures and PNG/SVG files. Three views:

- :func:`plot_segments` — distribution of segments per super-packet (``gso_segs``), per
  model: how big the packets the stack receives are;
- :func:`plot_ratio_over_time` — aggregation ratio (packets in / super-packets out) in
  time bins, per model: where in the capture GRO stops helping;
- :func:`plot_reasons_per_flow` — what ended the super-packets of the busiest flows.

:func:`save_plots` draws all three into one figure and writes it (`--plot FILE.png|.svg`).
Figures are built with ``matplotlib.figure.Figure`` directly, never pyplot, so there is no
global state and no GUI backend; notebooks display the returned Figure as usual.
"""

from __future__ import annotations

import os

import numpy as np

from gropcap.errors import ConfigError
from gropcap.gro.reasons import reason_name

FORMATS = (".png", ".svg")
_MODEL_COLOURS = {"ideal": "tab:blue", "napi": "tab:orange"}


def _figure(figsize=(8, 4.5)):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib, which is not installed",
                          hint="pip install matplotlib") from None

    fig = Figure(figsize=figsize, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _axes(ax, figsize=(8, 4.5)):
    if ax is not None:
        return ax.figure, ax
    fig = _figure(figsize)
    return fig, fig.add_subplot()


def plot_segments(analysis, ax=None):
    """Histogram: super-packets by number of segments (``count`` = ``gso_segs``), per model.

    Args:
        analysis: an :class:`Analysis`.
        ax: matplotlib Axes to draw into; a new Figure when None.

    Returns:
        The Figure.
    """
    fig, ax = _axes(ax)
    top = max((int(r.seg_count.max()) for r in analysis.results.values()
               if r.num_superpackets), default=1)
    edges = np.arange(0.5, top + 1.5)
    models = analysis.models
    width = 0.8 / max(len(models), 1)
    for k, (m, r) in enumerate(analysis.results.items()):
        hist, _ = np.histogram(r.seg_count, bins=edges)
        x = np.arange(1, top + 1) + (k - (len(models) - 1) / 2) * width
        ax.bar(x, hist, width=width, label=f"{m} ({r.num_superpackets} super-packets)",
               color=_MODEL_COLOURS.get(m))
    ax.set_title("Segments per super-packet")
    ax.set_xlabel("segments per super-packet (gso_segs)")
    ax.set_ylabel("super-packets (count)")
    if ax.get_ylim()[1] > 200:
        ax.set_yscale("log")
    ax.legend(loc="upper right")
    return fig


def _time_bins(ts_ns: np.ndarray, bins: int):
    t0 = int(ts_ns.min())
    span = max(int(ts_ns.max()) - t0, 1)
    # round the bin width to 1, 2 or 5 x 10^k microseconds
    raw = span / bins / 1000
    mag = 10 ** np.floor(np.log10(max(raw, 1e-3)))
    width_us = float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))
    width_ns = max(int(width_us * 1000), 1)
    return t0, width_ns


def plot_ratio_over_time(analysis, ax=None, bins: int = 50):
    """Aggregation ratio per time bin: packets arriving in the bin / super-packets whose
    first packet arrived in it, per model.

    Args:
        analysis: an :class:`Analysis`.
        ax: Axes to draw into; a new Figure when None.
        bins: at most this many bins across the capture, and about 20 packets per bin or
            more (the width is rounded to 1/2/5 x 10^k microseconds).

    Returns:
        The Figure.
    """
    fig, ax = _axes(ax)
    ts = analysis.decoded.column("ts_ns").to_numpy() if analysis.decoded.num_rows \
        else np.zeros(0, np.int64)
    if len(ts):
        # at least ~20 packets per bin on average, or the ratio is noise
        t0, width = _time_bins(ts, max(1, min(bins, len(ts) // 20)))
        b = (ts - t0) // width
        nb = int(b.max()) + 1
        pk = np.bincount(b, minlength=nb)
        unit, scale = ("s", 1e9) if width * nb >= 2e9 else ("ms", 1e6)
        x = (np.arange(nb) + 0.5) * width / scale
        for m, r in analysis.results.items():
            sp = np.bincount(b[r.seg_first_packet], minlength=nb)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(sp > 0, pk / np.maximum(sp, 1), np.nan)
            ax.step(x, ratio, where="mid", marker=".", label=m, color=_MODEL_COLOURS.get(m))
        ax.set_xlabel(f"time since the first packet ({unit}; bins of {width / 1000:g} µs)")
    else:
        ax.set_xlabel("time since the first packet (s)")
    ax.set_title("Aggregation ratio over time")
    ax.set_ylabel("packets per super-packet (ratio)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    return fig


def plot_reasons_per_flow(analysis, ax=None, model: str | None = None, top: int = 10):
    """Stacked bars: super-packets of the ``top`` busiest flows by end reason.

    Args:
        analysis: an :class:`Analysis`.
        ax: Axes to draw into; a new Figure when None.
        model: which model's super-packets (default the primary model).
        top: how many flows (by packets).

    Returns:
        The Figure.
    """
    fig, ax = _axes(ax)
    model = model or analysis.primary_model
    r = analysis.results[model]
    flows = analysis.flows
    if flows.num_rows and r.num_superpackets:
        pk = flows.column("packets").to_numpy()
        chosen = np.lexsort((np.arange(len(pk)), -pk))[:top]
        src = flows.column("src").to_pylist()
        dst = flows.column("dst").to_pylist()
        sp = flows.column("sport").to_pylist()
        dp = flows.column("dport").to_pylist()
        labels = [f"{f}: {src[f]}:{sp[f]} > {dst[f]}:{dp[f]}" if src[f] else f"{f}: (not IP)"
                  for f in chosen.tolist()]
        codes = np.unique(r.seg_end_reason)
        left = np.zeros(len(chosen))
        cmap = __import__("matplotlib").colormaps["tab20"]
        for k, c in enumerate(codes.tolist()):
            sel = r.seg_end_reason == c
            counts = np.bincount(r.seg_flow_id[sel], minlength=flows.num_rows)[chosen]
            if counts.any():
                ax.barh(np.arange(len(chosen)), counts, left=left, label=reason_name(c),
                        color=cmap(k % 20))
                left += counts
        ax.set_yticks(np.arange(len(chosen)), labels=labels, fontsize=7)
        ax.invert_yaxis()
        ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"Why super-packets ended, busiest flows ({model})")
    ax.set_xlabel("super-packets (count)")
    ax.set_ylabel("flow")
    return fig


def report_figure(analysis):
    """All three plots stacked in one Figure (what :func:`save_plots` writes)."""
    fig = _figure((9, 13))
    axes = fig.subplots(3, 1)
    plot_segments(analysis, axes[0])
    plot_ratio_over_time(analysis, axes[1])
    plot_reasons_per_flow(analysis, axes[2])
    files = ", ".join(os.path.basename(i.path) for i in analysis.infos)
    fig.suptitle(f"gropcap: {files} (kernel {analysis.config.kernel.name})")
    return fig


def save_plots(analysis, path) -> str:
    """Write :func:`report_figure` to ``path`` (``.png`` or ``.svg``); returns the path.

    Raises:
        ConfigError: another file extension.

    Example:
        >>> save_plots(gropcap.analyze("x.pcap"), "x.png")   # doctest: +SKIP
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ConfigError(f"cannot write a plot as {ext or 'a file without extension'!r}",
                          path=path, hint="use a .png or .svg file name")
    report_figure(analysis).savefig(path, format=ext[1:])
    return path


__all__ = ["plot_segments", "plot_ratio_over_time", "plot_reasons_per_flow", "report_figure",
           "save_plots"]
