"""Plots of a run (matplotlib, Agg: no display needed).

Layer: a ``run.plotdata.PlotData`` (what a bounded-memory run collects, or built from an
in-memory :class:`Analysis`: every function takes either) -> matplotlib Figures and
PNG/SVG files. Three views:

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
from gropcap.gro import reasons as R
from gropcap.gro.reasons import REASONS, reason_name
from gropcap.arrays import numpy_of
from gropcap.run.plotdata import BINS, PlotData, plot_data_of

FORMATS = (".png", ".svg")
# the models: ideal solid blue, napi dashed black, so equal values stay visible
_MODEL_STYLE = {"ideal": {"color": "#1f77b4", "linestyle": "-", "marker": "o"},
                "napi": {"color": "#222222", "linestyle": "--", "marker": "x"}}
_MODEL_COLOURS = {m: st["color"] for m, st in _MODEL_STYLE.items()}

# One colour per reason, in every plot: the reasons that often share a flow get colours
# far apart (hue and lightness); pure ACKs and capture ends are neutral greys.
_REASON_COLOUR = {
    R.NOT_HELD_ZERO_PAYLOAD: "#b0b0b0", R.END_CAPTURE: "#dddddd", R.NO_HELD_PACKET: "#eeeeee",
    R.END_PSH: "#2ca02c", R.END_POLL: "#1f77b4", R.END_POLL_OLD: "#9ecae1",
    R.END_BUCKET_FULL: "#17becf", R.END_FIN: "#006d2c", R.END_SHORT_SEGMENT: "#74c476",
    R.END_UDP_MAX_SEGS: "#08519c", R.END_URG: "#6baed6",
    R.FLUSH_SEQ: "#d62728", R.FLUSH_IP_ID: "#ff7f0e", R.FLUSH_TCP_TS: "#9467bd",
    R.FLUSH_TCP_ACK: "#8c564b", R.FLUSH_SIZE_LIMIT: "#e377c2", R.FLUSH_TTL: "#bcbd22",
    R.FLUSH_TOS: "#ff00ff", R.FLUSH_ECN: "#fdae6b", R.FLUSH_DF: "#a55194",
    R.FLUSH_OUTER_IP_ID: "#e6550d", R.FLUSH_TCP_OPTIONS: "#c51b7d",
    R.FLUSH_TCP_FLAGS: "#843c39", R.FLUSH_CWR: "#ad494a", R.FLUSH_TCP_WINDOW: "#e7969c",
    R.FLUSH_ZERO_PAYLOAD: "#636363", R.FLUSH_PAYLOAD_LARGER: "#f768a1",
    R.FLUSH_LENGTH: "#fd8d3c", R.FLUSH_UDP_LARGER: "#54278f",
    R.NOT_HELD_PSH: "#f0e442", R.NOT_HELD_SYN: "#393b79", R.NOT_HELD_FIN: "#637939",
    R.NOT_HELD_RST: "#000000", R.NOT_HELD_LENGTH: "#e7ba52",
    R.BYPASS_UDP_NO_GRO: "#01665e", R.BYPASS_TUNNEL: "#cedb9c", R.BYPASS_NOT_IP: "#7f7f7f",
    R.BYPASS_DECODE: "#404040", R.BYPASS_L4_CSUM: "#b5cf6b",
}
# the rest (rare reasons) take the next free colour of this list, in code order
_SPARE = ("#5254a3", "#6b6ecf", "#9c9ede", "#8ca252", "#bd9e39", "#e7cb94", "#d6616b",
          "#ce6dbd", "#de9ed6", "#3182bd", "#31a354", "#756bb1", "#969696", "#a1d99b")
REASON_COLOURS: dict[int, str] = {
    **{c: _SPARE[k % len(_SPARE)]
       for k, c in enumerate(sorted(set(REASONS) - set(_REASON_COLOUR)))},
    **_REASON_COLOUR}


def reason_colour(code: int) -> str:
    """The colour of a reason code in every gropcap plot (:data:`REASON_COLOURS`)."""
    return REASON_COLOURS.get(int(code), "#7f7f7f")


def _legend_outside(ax, **kw):
    """A legend to the right of the axes: it never covers the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                     frameon=False, **kw)


def duration_text(ns: float) -> str:
    """A duration in the unit that reads best: ``5 ms``, ``200 µs``, ``2 s``.

    >>> duration_text(5e6), duration_text(2e5), duration_text(2e9), duration_text(1500)
    ('5 ms', '200 µs', '2 s', '1.5 µs')
    """
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns:g} ns"


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


def _data(run, bins: int = BINS) -> PlotData:
    """A :class:`PlotData` as given, or built from an :class:`Analysis`."""
    return run if isinstance(run, PlotData) else plot_data_of(run, bins)


def plot_segments(analysis, ax=None):
    """Histogram: super-packets by number of segments (``count`` = ``gso_segs``), per model.

    Args:
        analysis: an :class:`Analysis` or a ``run.plotdata.PlotData``.
        ax: matplotlib Axes to draw into; a new Figure when None.

    Returns:
        The Figure.
    """
    data = _data(analysis)
    fig, ax = _axes(ax)
    top = max((len(h) - 1 for h in data.seg_hist.values() if h.sum()), default=1)
    models = data.models
    width = 0.8 / max(len(models), 1)
    for k, m in enumerate(models):
        hist = np.zeros(top, np.int64)
        h = data.seg_hist[m][1:top + 1]
        hist[:len(h)] = h
        x = np.arange(1, top + 1) + (k - (len(models) - 1) / 2) * width
        ax.bar(x, hist, width=width, label=f"{m}\n({data.superpackets(m)} super-packets)",
               color=_MODEL_COLOURS.get(m))
    ax.set_title("Segments per super-packet")
    ax.set_xlabel("segments per super-packet (gso_segs)")
    ax.set_ylabel("super-packets (count)")
    if ax.get_ylim()[1] > 200:
        ax.set_yscale("log")
    else:
        from matplotlib.ticker import MaxNLocator
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # counts: no 0.5 ticks
    _legend_outside(ax)
    return fig


def plot_ratio_over_time(analysis, ax=None, bins: int = 50):
    """Aggregation ratio per time bin: packets arriving in the bin / super-packets whose
    first packet arrived in it, per model.

    Time runs from the first packet of each file, so several captures (a directory,
    recorded at different times) share one axis.

    Args:
        analysis: an :class:`Analysis` or a ``run.plotdata.PlotData`` (its bins are
            those it was built with).
        ax: Axes to draw into; a new Figure when None.
        bins: at most this many bins across the longest file, and about 20 packets per bin
            or more (the width is rounded to 1/2/5 x 10^k microseconds).

    Returns:
        The Figure.
    """
    series = _data(analysis, bins).time
    fig, ax = _axes(ax)
    top = 0.0
    if series is not None:
        width, pk = series.width, series.packets
        nb = len(pk)
        unit, scale = ("s", 1e9) if width * nb >= 2e9 else ("ms", 1e6) \
            if width * nb >= 2e6 else ("µs", 1e3)
        x = (np.arange(nb) + 0.5) * width / scale
        for m, sp in series.superpackets.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(sp > 0, pk / np.maximum(sp, 1), np.nan)
            style = _MODEL_STYLE.get(m, {})
            # each bin's ratio across its whole width (one bin stays visible), a marker
            # at its centre
            ax.stairs(ratio, np.arange(nb + 1) * width / scale, baseline=None, label=m,
                      linewidth=1.5, color=style.get("color"),
                      linestyle=style.get("linestyle", "-"))
            ax.plot(x, ratio, linestyle="none", markersize=5, color=style.get("color"),
                    marker=style.get("marker", "."))
            if np.isfinite(ratio).any():
                top = max(top, float(np.nanmax(ratio)))
        ax.set_xlim(0, nb * width / scale)
        files = " of its file" if series.n_files > 1 else ""
        ax.set_xlabel(f"time since the first packet{files} ({unit}); "
                      f"bins of {duration_text(width)}")
    else:
        ax.set_xlabel("time since the first packet (s)")
    ax.set_title("Aggregation ratio over time")
    ax.set_ylabel("packets per super-packet (ratio)")
    # headroom above the highest line so neither model's line sits on the frame
    ax.set_ylim(0, max(top * 1.1, 1.1))
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    return fig


def _flow_label(f: int, src: str, sport: int, dst: str, dport: int) -> str:
    """``#3 10.0.0.1:80`` over ``→ 10.0.0.2:443`` (two lines, readable at 9 pt)."""
    def ep(a, p):
        return f"[{a}]:{p}" if ":" in a else f"{a}:{p}"
    return f"#{f} {ep(src, sport)}\n→ {ep(dst, dport)}"


def plot_reasons_per_flow(analysis, ax=None, model: str | None = None, top: int = 10):
    """Stacked bars: what ended the super-packets of the ``top`` busiest IP flows, as a
    share of each flow's super-packets (their number is written at the bar's end).

    Each reason has its colour of :data:`REASON_COLOURS` in every plot. Flows without an
    IP header are left out.

    Args:
        analysis: an :class:`Analysis` or a ``run.plotdata.PlotData``.
        ax: Axes to draw into; a new Figure when None.
        model: which model's super-packets (default the primary model).
        top: how many flows (by packets).

    Returns:
        The Figure.
    """
    data = _data(analysis)
    fig, ax = _axes(ax)
    model = model or data.primary
    keys, counts = data.reason_keys[model]
    flows = data.flows
    src = flows.column("src").to_pylist() if flows.num_rows else []
    ip = np.array([bool(x) for x in src], bool)
    if ip.any() and counts.sum():
        pk = numpy_of(flows.column("packets"))
        cand = np.flatnonzero(ip)
        chosen = cand[np.lexsort((cand, -pk[cand]))][:top]
        dst = flows.column("dst").to_pylist()
        sp = flows.column("sport").to_pylist()
        dp = flows.column("dport").to_pylist()
        labels = [_flow_label(f, src[f], sp[f], dst[f], dp[f]) for f in chosen.tolist()]
        flow, reason = keys // 256, keys % 256

        def per_flow_of(sel):
            return np.bincount(flow[sel], weights=counts[sel],
                               minlength=flows.num_rows)[chosen].astype(np.int64)
        per_flow = per_flow_of(slice(None))
        left = np.zeros(len(chosen))
        y = np.arange(len(chosen))
        for c in np.unique(reason).tolist():
            got = per_flow_of(reason == c)
            if got.any():
                share = 100.0 * got / np.maximum(per_flow, 1)
                ax.barh(y, share, left=left, label=reason_name(c), color=reason_colour(c),
                        edgecolor="white", linewidth=0.5)
                left += share
        # each flow's super-packets, as tick labels of a right-hand axis
        right = ax.secondary_yaxis("right")
        right.set_yticks(y, labels=[str(n) for n in per_flow.tolist()], fontsize=9)
        right.set_ylabel("super-packets of the flow")
        ax.set_yticks(y, labels=labels, fontsize=9)
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
        # below the bars, in rows: the right side holds the counts
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=4, fontsize=8,
                  frameon=False, title="end reason", title_fontsize=8)
    ax.set_title(f"Why super-packets ended, busiest flows ({model})")
    ax.set_xlabel("share of the flow's super-packets (%)")
    return fig


def report_figure(analysis):
    """All three plots stacked in one Figure (what :func:`save_plots` writes), of an
    :class:`Analysis` or a ``run.plotdata.PlotData``."""
    data = _data(analysis)
    fig = _figure((11, 14))
    axes = fig.subplots(3, 1, height_ratios=(1, 1, 1.4))
    plot_segments(data, axes[0])
    plot_ratio_over_time(data, axes[1])
    plot_reasons_per_flow(data, axes[2])
    fig.suptitle(data.title)
    return fig


def save_plots(analysis, path) -> str:
    """Write :func:`report_figure` to ``path`` (``.png`` or ``.svg``); returns the path.

    Raises:
        ConfigError: another file extension.

    Example:
        >>> save_plots(gropcap.analyze("x.pcap"), "x.png")   # doctest: +SKIP

    ``analysis``: an :class:`Analysis` or a ``run.plotdata.PlotData`` (a bounded-memory
    run's ``StreamResult.plot_data``).
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ConfigError(f"cannot write a plot as {ext or 'a file without extension'!r}",
                          path=path, hint="use a .png or .svg file name")
    report_figure(analysis).savefig(path, format=ext[1:])
    return path


__all__ = ["plot_segments", "plot_ratio_over_time", "plot_reasons_per_flow", "report_figure",
           "save_plots", "REASON_COLOURS", "reason_colour", "duration_text"]
