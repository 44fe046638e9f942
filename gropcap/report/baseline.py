"""Regression baselines: record GRO metrics of captures, check a later run against them.

Layer: :class:`Analysis` objects -> a JSON baseline, and baseline + new analyses -> a check
result. A baseline holds, per capture (keyed by file name, identified by its digest,
``capture.fingerprint``; a baseline of an earlier release holds a sha256 instead, checked
by hashing the capture again): packets, super-packets, segments (sum of ``gso_segs``),
aggregation ratio, largest super-packet and the end-reason counts, per model (and per
stage when the super-packets carry one); with the gro_cells stage modelled
(``--tunnel-gro``), also ``<model>/gro_cells`` (that stage's input rows, super-packets,
segments, ...) and ``<model>/delivered`` (what reaches the stack: super-packets and the
overall ratio of wire segments to them); plus the GRO configuration and decoder options
it was made with.

A check compares the metrics whenever it can: a capture whose bytes differ from the
recorded ones (a new recording of the same workload), or a different configuration, is
compared anyway and the report says in one line what differs. Captures are paired by file
name; one unpaired capture on each side is paired with the other (a new recording under a
new name). A metric *moved* when it changed by more than the tolerance: counts and ratios
relative to their recorded value, reason counts relative to the model's super-packets (the
reason's share of all super-packets moved).

Exit codes of `gropcap baseline check` (:data:`EXIT_CODES`): 0 every compared metric within
the tolerance, 1 a metric moved, 2 bad usage (click: unknown option, bad --tolerance),
3 the baseline file is missing, unreadable or not a baseline, 4 nothing could be compared
(no capture pairs with the baseline's), 5 a capture could not be read or decoded, 130
interrupted.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from gropcap import __version__
from gropcap.capture import fingerprint
from gropcap.errors import BaselineError, ConfigError

BASELINE_FORMAT = 1
DEFAULT_TOLERANCE = 0.02
# metrics compared relative to their own recorded value
SCALAR_METRICS = ("packets_in", "superpackets", "segments", "aggregation_ratio",
                  "largest_superpacket", "merged_packets")


EXIT_OK = 0
EXIT_MOVED = 1
EXIT_USAGE = 2          # click's own code for bad usage
EXIT_BASELINE = 3
EXIT_NOTHING = 4
EXIT_CAPTURE = 5
EXIT_CODES = {
    EXIT_OK: "every compared metric is within the tolerance (differences of the captures "
             "or the configuration are reported, not failed)",
    EXIT_MOVED: "a metric moved by more than the tolerance",
    EXIT_USAGE: "bad usage: unknown option, bad --tolerance",
    EXIT_BASELINE: "the baseline file is missing, unreadable or not a baseline",
    EXIT_NOTHING: "nothing compared: no capture pairs with the baseline's",
    EXIT_CAPTURE: "a capture could not be read or decoded",
}


def parse_tolerance(text: str | float) -> float:
    """``"2%"`` -> 0.02, ``"0.5"`` -> 0.5, ``0.02`` -> 0.02.

    >>> parse_tolerance("2%"), parse_tolerance("0.1")
    (0.02, 0.1)
    """
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        t = str(text).strip()
        try:
            value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
        except ValueError:
            raise ConfigError(f"tolerance {text!r} is not a number or percentage",
                              hint="e.g. --tolerance 2%") from None
    if not 0 <= value < 10:
        raise ConfigError(f"tolerance {text!r} out of range", hint="e.g. --tolerance 2%")
    return value


def model_metrics(result, stage_mask=None) -> dict:
    """The recorded numbers of one GroResult (optionally only super-packets in a mask)."""
    import numpy as np

    from gropcap.report.tables import count_by_name

    counts = result.seg_count if stage_mask is None else result.seg_count[stage_mask]
    ends = result.seg_end_reason if stage_mask is None else result.seg_end_reason[stage_mask]
    n_out = int(len(counts))
    segments = int(counts.sum())
    return {
        "packets_in": int(result.num_packets) if stage_mask is None else segments,
        "superpackets": n_out,
        "segments": segments,
        "aggregation_ratio": round(segments / n_out, 4) if n_out else 0.0,
        "largest_superpacket": int(counts.max()) if n_out else 0,
        "merged_packets": int(segments - n_out),
        "end_reasons": count_by_name(np.asarray(ends)),
    }


def analysis_metrics(analysis) -> dict:
    """``{model: metrics}`` and, when super-packets carry a ``stage``, ``{model/stage: ...}``."""
    import numpy as np

    out = {}
    sp = analysis.superpackets
    has_stage = "stage" in sp.column_names
    for m, r in analysis.results.items():
        out[m] = model_metrics(r)
        if has_stage:
            model_col = np.asarray(sp.column("model").to_pylist())
            stage = np.asarray(sp.column("stage").to_pylist())[model_col == m]
            for st in sorted(set(stage.tolist())):
                out[f"{m}/{st}"] = model_metrics(r, stage == st)
    for m, stages in (getattr(analysis, "stages", None) or {}).items():
        if len(stages) < 2:
            continue
        from gropcap.gro.stages import stages_summary
        for st in stages[1:]:
            out[f"{m}/{st.name}"] = model_metrics(st.result)
        summ = stages_summary(stages)
        wire = int(np.asarray(stages[0].segments).sum())
        out[f"{m}/delivered"] = {"packets_in": int(stages[0].result.num_packets),
                                 "segments": wire, "superpackets": summ["delivered"],
                                 "aggregation_ratio": summ["overall_ratio"]}
    return out


def _config_dict(analysis) -> dict:
    d = analysis.config.to_dict()
    d.pop("model", None)  # each result has its own model; they are listed separately
    return d


def make_baseline(analyses) -> dict:
    """Baseline dict from analyses of one capture each (all with the same configuration).

    Args:
        analyses: iterable of :class:`Analysis`, one per capture file.

    Returns:
        The JSON-ready baseline.
    """
    analyses = list(analyses)
    if not analyses:
        raise ConfigError("no captures to record")
    first = analyses[0]
    captures = {}
    for a in analyses:
        if _config_dict(a) != _config_dict(first) or a.models != first.models:
            raise ConfigError("every capture of a baseline must use one configuration")
        for info in a.infos:
            name = os.path.basename(info.path)
            if name in captures:
                raise ConfigError(f"two captures named {name!r}",
                                  hint="a baseline keys captures by file name")
        info = a.infos[0]
        from gropcap.run.summary import mtu_of
        mtu = mtu_of(a)
        captures[os.path.basename(info.path)] = {
            "digest": info.digest, "records": info.records,
            "mtu": {"mtu": mtu.mtu, "source": mtu.source},
            "metrics": analysis_metrics(a)}
    return {
        "format": BASELINE_FORMAT,
        "gropcap": __version__,
        "config": _config_dict(first),
        "decode_options": json.loads(json.dumps(dataclasses.asdict(first.decode_options))),
        "models": first.models,
        "captures": captures,
    }


def save_baseline(baseline: dict, path, *, force: bool = False) -> str:
    """Write a baseline as indented, key-sorted JSON (diff-friendly in a repository)."""
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise BaselineError("baseline exists", path=path, hint="use --force to replace it")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(baseline, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def load_baseline(path) -> dict:
    """Read a baseline written by :func:`save_baseline`."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise BaselineError(f"cannot read: {e.strerror or e}", path=path) from None
    except json.JSONDecodeError as e:
        raise BaselineError(f"not JSON: {e.msg} at line {e.lineno}", path=path) from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise BaselineError(f"not a gropcap baseline of format {BASELINE_FORMAT}", path=path,
                            hint="record one with `gropcap baseline save`")
    return data


@dataclass
class Moved:
    """One metric outside the tolerance."""

    capture: str
    model: str
    metric: str
    baseline: float
    now: float
    change: float      # relative change used for the decision
    limit: float


@dataclass
class CheckResult:
    """Outcome of :func:`check_baseline`: ``status`` is ``"ok"``, ``"moved"`` or
    ``"nothing"`` (exit codes 0, 1, 4); ``differences`` says what differs from the
    baseline (captures' bytes, configuration, unpaired captures) although the metrics were
    compared."""

    status: str
    tolerance: float
    moved: list[Moved] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    compared: int = 0

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "moved": EXIT_MOVED, "nothing": EXIT_NOTHING}[self.status]


def _dict_diff(old: dict, new: dict, what: str) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            out.append(f"{what} {k} {old.get(k)!r} -> {new.get(k)!r}")
    return out


def _pairs(old_caps: dict, new_caps: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """``[(baseline name, new name)]`` by file name, plus one leftover pair when exactly one
    capture on each side is unpaired; and notes on the unpaired ones."""
    pairs = [(n, n) for n in sorted(set(old_caps) & set(new_caps))]
    old_left = sorted(set(old_caps) - set(new_caps))
    new_left = sorted(set(new_caps) - set(old_caps))
    notes = []
    if len(old_left) == 1 and len(new_left) == 1:
        pairs.append((old_left[0], new_left[0]))
        notes.append(f"capture {new_left[0]} compared with the baseline's {old_left[0]}")
    else:
        notes += [f"capture {n} in the baseline, not given" for n in old_left]
        notes += [f"capture {n} not in the baseline" for n in new_left]
    return pairs, notes


def check_baseline(baseline: dict, analyses, tolerance: float = DEFAULT_TOLERANCE) -> CheckResult:
    """Compare analyses (one capture each) with a baseline.

    Args:
        baseline: from :func:`load_baseline`.
        analyses: iterable of :class:`Analysis`, one per capture.
        tolerance: allowed relative change (0.02 = 2%).

    Returns:
        A :class:`CheckResult`: ``moved`` when a metric changed by more than ``tolerance``,
        ``nothing`` when no capture pairs with the baseline's, else ``ok``. Captures whose
        bytes differ and a different configuration are compared anyway and listed in
        ``differences``.

    Example:
        >>> r = check_baseline(load_baseline("base.json"), [analyze("new.pcap")])  # doctest: +SKIP
        >>> r.status, r.differences                                               # doctest: +SKIP
        ('ok', ["capture new.pcap compared with the baseline's old.pcap", ...])
    """
    now = make_baseline(analyses)
    res = CheckResult(status="ok", tolerance=tolerance)
    res.differences += _dict_diff(baseline["config"], now["config"], "configuration")
    res.differences += _dict_diff(baseline.get("decode_options", {}), now["decode_options"],
                                  "decoder option")
    if baseline.get("models") != now["models"]:
        res.differences.append(f"models {baseline.get('models')} -> {now['models']}")
    old_caps, new_caps = baseline["captures"], now["captures"]
    pairs, notes = _pairs(old_caps, new_caps)
    res.differences += notes
    paths = {os.path.basename(i.path): i.path for a in analyses for i in a.infos}
    for old_name, new_name in pairs:
        old, new = old_caps[old_name], new_caps[new_name]
        recorded = old.get("digest") or fingerprint.legacy(old.get("sha256", ""))
        same = fingerprint.matches(recorded, new["digest"], paths.get(new_name))
        if same is False:
            res.differences.append(f"capture {new_name} {fingerprint.short(new['digest'])} "
                                   f"(baseline {fingerprint.short(recorded)})")
        elif same is None:
            res.differences.append(f"capture {new_name}: bytes not compared (baseline "
                                   f"{fingerprint.short(recorded) if recorded else 'none'})")
        if "mtu" in old and old["mtu"] != new.get("mtu"):
            o, n = old["mtu"], new.get("mtu") or {}
            res.differences.append(f"capture {new_name}: MTU {n.get('mtu')} "
                                   f"({n.get('source')}) (baseline {o['mtu']} ({o['source']}))")
        for model, metrics in old["metrics"].items():
            got = new["metrics"].get(model)
            if got is None:
                res.differences.append(f"capture {new_name}: no {model} results now")
                continue
            res.moved += _compare_metrics(new_name, model, metrics, got, tolerance)
            res.compared += 1
    res.status = "moved" if res.moved else ("ok" if res.compared else "nothing")
    return res


def _compare_metrics(name, model, old, new, tol) -> list[Moved]:
    moved = []
    for metric in SCALAR_METRICS:
        a, b = float(old.get(metric, 0)), float(new.get(metric, 0))
        change = abs(b - a) / abs(a) if a else (0.0 if b == a else float("inf"))
        if change > tol + 1e-12:
            moved.append(Moved(name, model, metric, a, b, change, tol))
    # a reason's share of the super-packets
    denom = max(int(old.get("superpackets", 0)), 1)
    reasons_old, reasons_new = old.get("end_reasons", {}), new.get("end_reasons", {})
    for r in sorted(set(reasons_old) | set(reasons_new)):
        a, b = reasons_old.get(r, 0), reasons_new.get(r, 0)
        change = abs(b - a) / denom
        if change > tol + 1e-12:
            moved.append(Moved(name, model, f"end reason {r}", a, b, change, tol))
    return moved


def render_check(result: CheckResult, width: int = 80) -> str:
    """Text for `gropcap baseline check`: a verdict line and a table of what moved."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False, markup=False)
    pct = f"{result.tolerance * 100:g}%"
    if result.status == "nothing":
        console.print("baseline check: nothing compared: no capture pairs with the "
                      "baseline's")
    elif result.status == "ok":
        console.print(f"baseline ok: {result.compared} capture/model results within {pct}")
    else:
        console.print(f"baseline check failed: {len(result.moved)} metrics moved by more "
                      f"than {pct}")
    if result.differences:
        # one line, not wrapped: a CI log shows what differs at a glance
        console.print("differs from the baseline: " + "; ".join(result.differences),
                      soft_wrap=True)
    if result.status == "moved":
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for col in ("capture", "model", "metric", "baseline", "now", "change"):
            t.add_column(col, justify="right" if col in ("baseline", "now", "change")
                         else "left")
        for mv in result.moved:
            change = "new" if mv.change == float("inf") else f"{mv.change * 100:+.1f}%"
            if mv.now < mv.baseline and change != "new":
                change = change.replace("+", "-")
            t.add_row(mv.capture, mv.model, mv.metric, f"{mv.baseline:g}", f"{mv.now:g}",
                      change)
        console.print(t)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["make_baseline", "save_baseline", "load_baseline", "check_baseline",
           "render_check", "parse_tolerance", "analysis_metrics", "CheckResult", "Moved",
           "BaselineError", "DEFAULT_TOLERANCE", "EXIT_CODES"]
