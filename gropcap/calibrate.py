"""`gropcap calibrate`: fit the napi model's receive parameters to the kernel's own answer.

``gropcap calibrate WIRE POSTGRO`` takes a pair of captures of the same traffic: the wire
view (the frames that reached the receiving device) and the kernel's post-GRO view
(``tcpdump`` on the receiving device, which sees one frame per skb GRO built). It
matches the two per flow, searches the receive parameters (NAPI budget, poll gap, HZ,
``gro_flush_timeout`` / ``napi_defer_hard_irqs``, queues, MTU) for the napi model run
closest to the kernel's, and hands back a :class:`Fit` whose values
:func:`gropcap.receive.profile.save_profile` writes as a profile.

Layer: uses pipeline (decode once), gro/engine (prepare once, re-run the kernels per
candidate) and gso (coalesced input); hands the CLI a :class:`Fit`.

Public API::

    fit_receiver(wire, postgro, config=None, fixed=None, ...) -> Fit   # paths (or lists)
    fit_tables(wire_table, postgro_table, ...) / fit_pairs([(w, p), ...], ...) -> Fit
    pair_view(wire_table, postgro_table) -> PairView; residual(view, first_rows) -> Residual
    render_fit(fit) -> str
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from gropcap.errors import ConfigError
from gropcap.receive.profile import PROFILE_KEYS

# What calibrate fits (option names of receiver.PROFILE_KEYS).
FIT_KEYS = ("queues", "budget", "poll_gap_us", "hz", "gro_flush_timeout_us",
            "napi_defer_hard_irqs", "mtu", "poll_acks")
MTU_DEFAULT = 1500


# --- matching the kernel's post-GRO view to the wire view ------------------------------

@dataclass
class FlowView:
    """One flow's packets as the kernel delivered them: ``count`` frames, ``starts`` the
    multiset of positions where a data super-packet began (TCP: sequence number; UDP: byte
    offset into the flow's payload)."""

    name: str
    count: int = 0
    starts: Counter = field(default_factory=Counter)


def _flow_keys(table) -> list[bytes]:
    from gropcap.gro.flows import flow_key_matrix
    m = flow_key_matrix(table)
    return [bytes(r) for r in m] if len(m) else []


def _flow_name(table, i: int) -> str:
    import ipaddress

    def addr(col):
        v = table.column(col)[i].as_py()
        ver = table.column("ip_version")[i].as_py()
        if ver == 4:
            return str(ipaddress.IPv4Address(bytes(v[:4]) if len(v) == 4 else bytes(v[12:16])))
        if ver == 6:
            return f"[{ipaddress.IPv6Address(bytes(v))}]"
        return "?"

    proto = {6: "tcp", 17: "udp"}.get(table.column("l4_proto")[i].as_py(), "other")
    if table.column("ip_version")[i].as_py() not in (4, 6):
        return f"non-IP eth_type 0x{table.column('eth_type')[i].as_py():04x}"
    return (f"{addr('ip_src')}:{table.column('sport')[i].as_py()} > "
            f"{addr('ip_dst')}:{table.column('dport')[i].as_py()} {proto}")


def _positions(table, flow_index: np.ndarray, nflows: int) -> np.ndarray:
    """Per row: the position of its first payload byte in its flow (TCP sequence number;
    UDP byte offset from the flow's first datagram), -1 for frames without payload."""
    n = table.num_rows
    proto = table.column("l4_proto").to_numpy(zero_copy_only=False).astype(np.int64)
    payload = table.column("payload_len").to_numpy(zero_copy_only=False).astype(np.int64)
    seq = table.column("tcp_seq").to_numpy(zero_copy_only=False).astype(np.int64)
    pos = np.full(n, -1, np.int64)
    tcp = (proto == 6) & (payload > 0)
    pos[tcp] = seq[tcp]
    udp = (proto == 17) & (payload > 0)
    offset = np.zeros(nflows, np.int64)
    for i in np.flatnonzero(udp):
        f = flow_index[i]
        pos[i] = offset[f]
        offset[f] += payload[i]
    return pos


@dataclass
class PairView:
    """The wire view decoded once, and the kernel's answer per flow."""

    wire: object                  # PACKET_SCHEMA table
    wire_flow: np.ndarray         # flow index per wire row
    wire_pos: np.ndarray          # payload position per wire row (-1: none)
    flows: list                   # FlowView per flow index (kernel side)
    kernel_total: int             # frames of the post-GRO view
    # per flow: none of its frames in the post-GRO view: the receiver's own direction (its
    # ACKs, in a wire view taken on the link), left out of the residual
    own: np.ndarray | None = None

    def model_flows(self, first: np.ndarray) -> tuple[np.ndarray, list]:
        """Super-packets given by their first wire row -> (count per flow, starts per
        flow)."""
        nf = len(self.flows)
        f = self.wire_flow[first]
        counts = np.bincount(f, minlength=nf)
        starts = [Counter() for _ in range(nf)]
        pos = self.wire_pos[first]
        for fi, p in zip(f.tolist(), pos.tolist()):
            if p >= 0:
                starts[fi][p] += 1
        return counts, starts


def pair_view(wire, postgro) -> PairView:
    """Match the kernel's post-GRO frames to the wire frames per flow (flow key of
    ``gro/flows.py``: the same bytes in both views); each post-GRO frame counts once for
    its flow, and a data frame's first payload position marks a super-packet start."""
    keys_w = _flow_keys(wire)
    keys_p = _flow_keys(postgro)
    index: dict[bytes, int] = {}
    flows: list[FlowView] = []
    wire_flow = np.empty(len(keys_w), np.int64)
    for i, k in enumerate(keys_w):
        j = index.get(k)
        if j is None:
            j = index[k] = len(flows)
            flows.append(FlowView(_flow_name(wire, i)))
        wire_flow[i] = j
    post_flow = np.empty(len(keys_p), np.int64)
    for i, k in enumerate(keys_p):
        j = index.get(k)
        if j is None:          # a flow only the kernel's view has
            j = index[k] = len(flows)
            flows.append(FlowView(_flow_name(postgro, i) + " (not in the wire view)"))
        post_flow[i] = j
    wire_pos = _positions(wire, wire_flow, len(flows))
    post_pos = _positions(postgro, post_flow, len(flows))
    for j, p in zip(post_flow.tolist(), post_pos.tolist()):
        flows[j].count += 1
        if p >= 0:
            flows[j].starts[p] += 1
    own = np.array([f.count == 0 for f in flows], bool)
    return PairView(wire, wire_flow, wire_pos, flows, len(keys_p), own)


@dataclass
class Residual:
    """How far a model run is from the kernel: per flow ``(name, kernel, model,
    boundaries)`` (boundaries: super-packet starts in one view and not the other), and
    the totals."""

    kernel_total: int
    model_total: int
    flows: list

    @property
    def boundary_difference(self) -> int:
        return sum(f[3] for f in self.flows)

    @property
    def count_difference(self) -> int:
        """Sum over flows of |model - kernel|."""
        return sum(abs(f[2] - f[1]) for f in self.flows)

    @property
    def score(self) -> int:
        return self.boundary_difference + self.count_difference


def residual(view: PairView, first: np.ndarray) -> Residual:
    counts, starts = view.model_flows(np.asarray(first, np.int64))
    rows = []
    for j, fv in enumerate(view.flows):
        if view.own is not None and view.own[j]:
            counts[j] = 0      # the receiver's ACKs: not what its GRO delivered
            continue
        b = sum(((fv.starts - starts[j]) + (starts[j] - fv.starts)).values())
        rows.append((fv.name, fv.count, int(counts[j]), int(b)))
    return Residual(view.kernel_total, int(counts.sum()), rows)


def _combined(parts: list, labels: list) -> Residual:
    """One Residual over several pairs (flows named ``label: flow``)."""
    if len(parts) == 1:
        return parts[0]
    return Residual(sum(r.kernel_total for r in parts), sum(r.model_total for r in parts),
                    [(f"{lab}: {f[0]}", *f[1:]) for lab, r in zip(labels, parts)
                     for f in r.flows])


# --- the fit ---------------------------------------------------------------------------

# Candidate values per parameter, the most likely first: among candidates that fit equally
# well, the one whose values come earliest here wins (the kernel defaults first: NAPI
# weight 64, HZ 250, no flush timer, one queue, the smallest MTU the wire view allows).
GRID = {
    "budget": (64, 300, 128, 32, 16, 8, 256),
    "hz": (250, 1000, 100, 300),
    "gro_flush_timeout_us": (0.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0),
    "napi_defer_hard_irqs": (0, 1, 2, 5, 10, 100),
    "queues": (1, 2, 4, 8, 16),
    "mtu": (1500, 9000, 65535),
}
# The poll gap has no kernel default to prefer: a geometric grid from 1 us to 1 s (8 steps
# per decade); the coarse search uses every 4th value, the final one all of them and takes
# the middle of the widest run of best values (the choice least sensitive to timing), or
# the default when it fits as well.
GAP_GRID = tuple(float(f"{10 ** (k / 8):.3g}") for k in range(0, 49))
_COARSE_GAPS = GAP_GRID[::4]
_PREFERENCE = ("budget", "hz", "gro_flush_timeout_us", "napi_defer_hard_irqs", "queues",
               "mtu")


@dataclass
class Fit:
    """The fitted values (``values``: option name -> value), the residual of the best
    candidate and of the defaults, what was fixed by options, how many candidates ran."""

    values: dict
    residual: Residual
    default_residual: Residual
    fixed: dict
    candidates: int
    kernel: str
    wire: str | list
    postgro: str | list
    wire_digest: str | list = ""
    postgro_digest: str | list = ""
    ideal_total: int = 0
    gap_range: tuple | None = None   # the poll gaps (us) that fit as well as the chosen one
    acks: int = 0                    # ACKs of the wire views that close a frame (poll_acks)

    @property
    def polls_unseen(self) -> bool:
        """True when the ideal model (no polls) already gives the kernel's count: the
        pair's polls ended no super-packet, so it only bounds the poll parameters."""
        return self.ideal_total == self.residual.kernel_total

    def profile_fit(self, **extra) -> dict:
        """The ``[fit]`` table of the profile."""
        r = self.residual
        from gropcap import __version__
        d = {"wire": self.wire, "wire_digest": self.wire_digest, "postgro": self.postgro,
             "postgro_digest": self.postgro_digest, "kernel": self.kernel, **extra,
             "gropcap": __version__, "fixed": sorted(self.fixed),
             "candidates": self.candidates, "kernel_packets": r.kernel_total,
             "napi_packets": r.model_total, "total_difference": r.model_total - r.kernel_total,
             "flow_count_difference": r.count_difference,
             "boundary_difference": r.boundary_difference,
             "napi_default_packets": self.default_residual.model_total,
             "ideal_packets": self.ideal_total}
        if self.gap_range is not None:
            d["poll_gap_us_range"] = list(self.gap_range)
        d["flows"] = [{"flow": name, "kernel": k, "model": m, "boundaries": b}
                      for name, k, m, b in r.flows]
        return d


def _wire_mtu(table) -> int:
    """The largest outermost IP packet of the wire view (bytes)."""
    if not table.num_rows:
        return 0
    outer_v = table.column("outer_ip_version").to_numpy(zero_copy_only=False)
    tot = np.where(outer_v > 0,
                   table.column("outer_ip_tot_len").to_numpy(zero_copy_only=False),
                   table.column("ip_tot_len").to_numpy(zero_copy_only=False))
    return int(tot.max()) if len(tot) else 0


class _Runner:
    """Runs one candidate: the wire view decoded once, ``prepare`` once per (queues, mtu),
    only the GRO kernels per candidate (``engine.rerun_prepared``). Configurations only
    the reference model implements run whole on it."""

    def __init__(self, view: PairView, base, engine: str):
        from gropcap.receive import ackpolls
        from gropcap.gro.config import needs_reference
        self.view = view
        self.reference = engine == "reference" or needs_reference(base)
        self.prepared: dict = {}
        self.coalesced: dict = {}
        # which frames the receiver's ACKs close (poll_acks candidates)
        self.acks = ackpolls.ack_evidence(view.wire)

    def _acked(self, config, ts):
        """``config`` and arrival times the engine runs with: with ``poll_acks`` and
        ACKs in the wire view, the polls inferred from them (``gropcap.receive.ackpolls``)."""
        if not (config.poll_acks and self.acks):
            return config, ts
        from gropcap.receive import ackpolls
        polls = ackpolls.poll_ids(ts, self.acks, config.poll_gap_ns, config.budget)
        return ackpolls.engine_config(config), ackpolls.poll_times(ts, polls)

    def _coalesced(self, mtu: int):
        if mtu not in self.coalesced:
            from gropcap.gro.coalesced import coalesced_input
            c = coalesced_input(self.view.wire, mtu=mtu)
            self.coalesced[mtu] = c if c.num_coalesced else None
        return self.coalesced[mtu]

    def first_rows(self, config, mtu: int) -> np.ndarray:
        coalesced = self._coalesced(mtu)
        if self.reference:
            import pyarrow as pa

            from gropcap.run.engines import simulate
            wire = self.view.wire
            config, ts = self._acked(config, wire.column("ts_ns").to_numpy())
            i = wire.schema.get_field_index("ts_ns")
            wire = wire.set_column(i, wire.schema.field(i), pa.array(ts, pa.int64()))
            res = simulate(wire, config, engine="reference", coalesced=coalesced)
            return np.asarray(res.seg_first_packet, np.int64)
        from gropcap.gro import engine as E
        key = (config.queues, mtu)
        if key not in self.prepared:
            st = E.EngineState.new(config)
            cols, ts = E.prepare(self.view.wire, config, st, coalesced=coalesced)
            self.prepared[key] = (cols, ts, st)
        cols, ts, st = self.prepared[key]
        config, ts = self._acked(config, ts)
        segs = E.rerun_prepared(cols, ts, config, st)
        parts = [s["first"] for s in segs]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _config_of(base, values: dict):
    changes = {}
    for key, v in values.items():
        if key == "mtu":
            continue
        fname, to_field = PROFILE_KEYS[key][:2]
        changes[fname] = to_field(v)
    return base.replace(model="napi", **changes)


def fit_receiver(wire, postgro, config=None, *, fixed: dict | None = None,
                 decode_options=None, engine: str = "fast", decoder: str = "fast",
                 progress=None) -> Fit:
    """Fit the napi model's receive parameters to a wire view and the kernel's post-GRO
    view of the same traffic.

    Args:
        wire, postgro: capture paths (the same traffic, same filter); or lists of paths,
            several pairs of one host fitted together (the scores add up).
        config: the GroConfig of everything not fitted (kernel rule set, UDP GRO, tunnel
            sockets, ...); its model is set to napi.
        fixed: ``{option_name: value}`` of fit parameters the user stated (held, not
            fitted).
        progress: called as ``progress(candidates_run, score)`` after each candidate.

    The search: the wire view is decoded once; the GRO kernels re-run per candidate.
    A coarse grid over budget x HZ x poll gap, then gro_flush_timeout x
    napi_defer_hard_irqs, queues and MTU, each with the rest held at the best so far,
    repeated until a round changes nothing; then the poll gap on a fine grid (the middle
    of the widest run of best values, or the default when it fits as well). The MTU
    candidates are those at least the largest IP packet of the wire view (all of them
    fit it alike unless frames are marked coalesced otherwise). The objective is the per-flow difference:
    super-packet starts found in one view and not the other plus |model - kernel|
    packets per flow, then the total difference; ties go to values earlier in
    :data:`GRID` (the kernel defaults).

    Returns a :class:`Fit`.
    """
    from gropcap.run.memory import decode_files

    single = not isinstance(wire, (list, tuple))
    wires = [wire] if single else list(wire)
    posts = [postgro] if single else list(postgro)
    if len(wires) != len(posts) or not wires:
        raise ConfigError("give a post-GRO view for every wire view")
    tables, info = [], {"wire": [], "postgro": [], "wire_digest": [], "postgro_digest": []}
    for w, p in zip(wires, posts):
        wt, wi = decode_files(w, decode_options, decoder=decoder)
        pt, pi = decode_files(p, decode_options, decoder=decoder)
        tables.append((wt, pt))
        info["wire"].append(os.fspath(w))
        info["postgro"].append(os.fspath(p))
        info["wire_digest"].append(wi[0].digest)
        info["postgro_digest"].append(pi[0].digest)
    fit = fit_pairs(tables, config, fixed=fixed, engine=engine, progress=progress,
                    labels=[os.path.basename(w) for w in info["wire"]])
    if single:
        info = {k: v[0] for k, v in info.items()}
    return dataclasses.replace(fit, **info)


def fit_tables(wire_t, post_t, config=None, *, fixed: dict | None = None,
               engine: str = "fast", progress=None) -> Fit:
    """:func:`fit_receiver` on decoded tables (PACKET_SCHEMA) of the two views."""
    return fit_pairs([(wire_t, post_t)], config, fixed=fixed, engine=engine,
                     progress=progress)


def fit_pairs(tables: list, config=None, *, fixed: dict | None = None,
              engine: str = "fast", progress=None, labels=None) -> Fit:
    """:func:`fit_receiver` on decoded ``(wire, postgro)`` table pairs of one host."""
    from gropcap.gro.config import GroConfig

    config = (config or GroConfig()).replace(model="napi")
    fixed = dict(fixed or {})
    labels = list(labels or [f"pair {i + 1}" for i in range(len(tables))])
    views = [pair_view(w, p) for w, p in tables]
    runners = [_Runner(v, config, engine) for v in views]

    defaults = {k: PROFILE_KEYS[k][2](getattr(config, PROFILE_KEYS[k][0]))
                for k in FIT_KEYS if k != "mtu"}
    defaults["mtu"] = MTU_DEFAULT
    defaults.update(fixed)
    # MTU: at least the largest packet the wire view carries (frames on the wire fit it)
    biggest = max(_wire_mtu(w) for w, _ in tables)
    grid = {k: tuple(v) for k, v in GRID.items()}
    grid["mtu"] = tuple(m for m in grid["mtu"] if m >= biggest) or (biggest,)
    if "mtu" not in fixed:
        defaults["mtu"] = grid["mtu"][0]
    acks = sum(run.acks.acks for run in runners)
    if "poll_acks" not in fixed:
        # the wire views carry the receiver's ACKs (taken on the link): polls end there
        defaults["poll_acks"] = all(run.acks for run in runners)
    cache: dict = {}

    def preference(values) -> tuple:
        return tuple(grid[k].index(values[k]) if values[k] in grid[k] else len(grid[k])
                     for k in _PREFERENCE)

    def evaluate(values) -> tuple:
        key = tuple(sorted(values.items()))
        if key not in cache:
            cfg = _config_of(config, values)
            r = _combined([residual(v, run.first_rows(cfg, int(values["mtu"])))
                           for v, run in zip(views, runners)], labels)
            cache[key] = r
            if progress is not None:
                progress(len(cache), r.score)
        r = cache[key]
        return (r.score, abs(r.model_total - r.kernel_total)), r

    def search(best, names, choices) -> dict:
        """Every combination of ``names`` (``choices`` each) with the rest of ``best``
        held; the best fit, ties to the preferred values."""
        import itertools
        free_names = [k for k in names if k not in fixed]
        if not free_names:
            return best
        top = None
        for combo in itertools.product(*(choices[k] for k in free_names)):
            cand = {**best, **dict(zip(free_names, combo))}
            key = (evaluate(cand)[0], preference(cand))
            if top is None or key < top[0]:
                top = (key, cand)
        return top[1]

    # the configured (default) gap is a candidate too
    gaps = tuple(sorted(set(GAP_GRID) | {float(defaults["poll_gap_us"])}))
    choices = {**grid, "poll_gap_us": tuple(sorted(set(_COARSE_GAPS)
                                                   | {float(defaults["poll_gap_us"])}))}
    best = dict(defaults)
    # coarse grid over what shapes polls, then the flush timer pair, queues and MTU; again
    # until a round changes nothing
    for _ in range(4):
        before = dict(best)
        best = search(best, ("budget", "hz", "poll_gap_us"), choices)
        best = search(best, ("gro_flush_timeout_us", "napi_defer_hard_irqs"), choices)
        best = search(best, ("queues",), choices)
        best = search(best, ("mtu",), choices)
        if best == before:
            break
    gap_range = None
    if "poll_gap_us" not in fixed:
        # refine: the poll gap over the fine grid, the middle of the widest run of best
        scores = [evaluate({**best, "poll_gap_us": g})[0] for g in gaps]
        top = min(scores)
        runs, start = [], None
        for i, sc in enumerate(scores + [None]):
            if sc == top and start is None:
                start = i
            elif sc != top and start is not None:
                runs.append((i - start, start, i - 1))
                start = None
        width, lo, hi = max(runs, key=lambda r: (r[0], -r[1]))
        best["poll_gap_us"] = gaps[(lo + hi) // 2]
        if best["poll_acks"]:
            # the ACKs mark the poll ends that delivered data; the gap rule only adds the
            # polls that sent no ACK, each a guess beyond the evidence: the longest gap
            # that fits as well adds the fewest
            best["poll_gap_us"] = gaps[hi]
        # a pair that does not tell the gap apart from the default keeps the default
        elif evaluate({**best, "poll_gap_us": defaults["poll_gap_us"]})[0] == top:
            best["poll_gap_us"] = defaults["poll_gap_us"]
            i = gaps.index(float(defaults["poll_gap_us"]))
            lo, hi = next((a, b) for _, a, b in runs if a <= i <= b)
        gap_range = (gaps[lo], gaps[hi])
    _, r = evaluate(best)
    _, r0 = evaluate(dict(defaults))
    values = {k: best[k] for k in FIT_KEYS}
    for k in ("poll_gap_us", "gro_flush_timeout_us"):
        values[k] = float(values[k])
    values["poll_acks"] = bool(values["poll_acks"])
    from gropcap.run.engines import simulate
    ideal = sum(residual(v, np.asarray(simulate(
        w, config.replace(model="ideal"), engine=engine,
        coalesced=run._coalesced(int(best["mtu"]))).seg_first_packet, np.int64)).model_total
        for (w, _), v, run in zip(tables, views, runners))
    return Fit(values=values, residual=r, default_residual=r0, fixed=fixed,
               candidates=len(cache), kernel=config.kernel.name, wire="", postgro="",
               ideal_total=ideal, gap_range=gap_range, acks=acks)


_FLOW_ROWS = 12


def render_fit(fit: Fit) -> str:
    """Text report of a fit: the values, then the remaining difference per flow."""
    lines = ["fitted receive parameters (napi model):"]
    for k, v in fit.values.items():
        src = "option" if k in fit.fixed else "wire view" if k == "mtu" else "fitted"
        if k == "poll_gap_us" and fit.gap_range is not None:
            src += f" (any of {fit.gap_range[0]:g}-{fit.gap_range[1]:g} us fits as well)"
        if k == "poll_acks" and k not in fit.fixed:
            src = (f"wire view: {fit.acks} receiver ACKs close a frame" if v else
                   "wire view: no receiver ACKs")
        lines.append(f"  {k:<22} {v!s:<12} {src}")
    r, r0 = fit.residual, fit.default_residual
    lines.append(f"packets: kernel {r.kernel_total}, napi fitted {r.model_total} "
                 f"({_pct(r.model_total, r.kernel_total)}), napi defaults {r0.model_total} "
                 f"({_pct(r0.model_total, r0.kernel_total)}), ideal {fit.ideal_total} "
                 f"({_pct(fit.ideal_total, r.kernel_total)})")
    lines.append(f"remaining difference: {r.model_total - r.kernel_total:+d} packets in "
                 f"total, {r.count_difference} summed over flows, {r.boundary_difference} "
                 f"super-packet boundaries ({fit.candidates} candidates)")
    rows = sorted(r.flows, key=lambda f: (-abs(f[2] - f[1]) - f[3], f[0]))
    if len(rows) > _FLOW_ROWS:     # many flows: those that differ (the worst first)
        rows = [f for f in rows if f[1] != f[2] or f[3]][:_FLOW_ROWS]
    same = sum(1 for f in r.flows if f[1] == f[2] and not f[3])
    if not rows:
        lines.append(f"  all {len(r.flows)} flows agree exactly")
    else:
        w = max([len(f[0]) for f in rows] + [4])
        lines.append(f"  {'flow':<{w}}  kernel   napi   diff  boundaries")
        for name, k, m, b in rows:
            lines.append(f"  {name:<{w}}  {k:>6} {m:>6} {m - k:>+6}  {b:>10}")
    if 0 < len(rows) < len(r.flows):
        lines.append(f"  ... {len(r.flows) - len(rows)} more flows ({same} of "
                     f"{len(r.flows)} agree exactly; the profile lists each)")
    if fit.polls_unseen and "poll_gap_us" not in fit.fixed:
        lines.append("note: the ideal model (no polls) already gives the kernel's count: "
                     "no poll ended a super-packet here, so this traffic only bounds the "
                     "poll parameters. Fit on traffic whose polls end super-packets (a small "
                     "MSS or many flows, polls that use the whole budget), or on several "
                     "pairs together.")
    return "\n".join(lines) + "\n"


def _pct(a: int, b: int) -> str:
    return f"{(a - b) / b:+.1%}" if b else "n/a"
