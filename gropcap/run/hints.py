"""What a run says about its receive context beyond the values: the receive parameters of
an analysis, how much of the napi result depends on them, UDP tunnels that met no tunnel
socket (and what ``--udp-tunnel`` would give: :func:`tunnel_hint` runs ``simulate`` once
more per model on the rows of those tunnels), and captures that hold the receiver's ACKs
(``--poll-acks``). ``report/receive.py`` renders them as text.
"""

from __future__ import annotations

import numpy as np

from gropcap import constants as C
# counted while a run adds its batches (run.accumulators.CaptureCounts); here for the hint
from gropcap.run.accumulators import UDP_TUNNEL_KINDS, udp_tunnel_counts  # noqa: F401


# napi end reasons that come from the receive context rather than from the packets
POLL_END_REASONS = {"END_POLL": "a poll end",
                    "END_POLL_OLD": "a full-budget or deferred flush",
                    "END_BUCKET_FULL": "a GRO table eviction"}


# above this many rows the hint names the option but does not run the model again (set
# when UDP tunnel sockets ran on the reference engine, a few thousand rows per second;
# the numba engine runs them now): the tunnels' rows for the ideal model, the whole
# capture for napi
HINT_MAX_ROWS = 60_000


HINT_NAPI_MAX_ROWS = 20_000


def receive_of(analysis, mtu=None):
    """The analysis' :class:`gropcap.receive.context.ReceiveContext` (``analysis.receive`` when
    the CLI or a profile set one, else from its config) with the MTU in use."""
    from gropcap.receive.context import ReceiveContext

    rc = getattr(analysis, "receive", None) or ReceiveContext.from_config(analysis.config)
    return rc.with_mtu(mtu)


def napi_dependence(models: dict) -> dict | None:
    """How much of the napi result the receive context decides: the share of napi
    super-packets ended by a poll end, a full-budget/deferred flush or a table eviction,
    with the ideal model's ratio (no polls, unlimited table) next to napi's. ``models``:
    the summary's ``models``. None without a napi result."""
    napi = models.get("napi")
    if not napi:
        return None
    total = napi["superpackets_out"]
    ends = napi["end_reasons"]
    out = {"superpackets": total,
           "shares": {name: round(ends.get(name, 0) / total, 4) if total else 0.0
                      for name in POLL_END_REASONS},
           "napi_ratio": napi["aggregation_ratio"]}
    out["context_share"] = round(sum(out["shares"].values()), 4)
    if "ideal" in models:
        out["ideal_ratio"] = models["ideal"]["aggregation_ratio"]
    return out


def missing_tunnels(counts: dict, config) -> dict | None:
    """The hint without model runs (``models`` None) for ``{(kind, port): packets}``:
    the tunnels on ports with no tunnel socket in ``config``, or None."""
    missing = [{"kind": k, "port": p, "packets": n} for (k, p), n in sorted(counts.items())
               if not config.udp_tunnel_socket(k, p)]
    if not missing:
        return None
    return {"tunnels": missing,
            "option": "--udp-tunnel " + ",".join(f"{m['kind']}:{m['port']}" for m in missing),
            "models": None}


def tunnel_hint(analysis, max_rows: int = HINT_MAX_ROWS,
                napi_max_rows: int = HINT_NAPI_MAX_ROWS) -> dict | None:
    """UDP tunnels (VXLAN, VXLAN-GPE, Geneve, FOU, GUE) decoded on ports where the
    configuration has no tunnel socket, and what the matching ``--udp-tunnel`` gives.

    Returns None when there are none, else ``{"tunnels": [{"kind", "port", "packets"}],
    "option": "--udp-tunnel vxlan:4789", "models": {model: {"ratio", "ratio_with"}},
    "left_out": [models not run again]}``;
    the ideal model is run again on the tunnels' rows (up to ``max_rows`` of them), the
    napi model on the whole capture (up to ``napi_max_rows`` rows); a model above its
    limit is left out (``models`` None when both are).
    """
    t = getattr(analysis, "decoded", None)
    if t is None:       # a streamed result: detected while decoding, not run again
        return getattr(analysis, "udp_tunnel_hint", None)
    if not t.num_rows:
        return None
    cache = getattr(analysis, "_cache", {})
    if "tunnel_hint" in cache:
        return cache["tunnel_hint"]
    config = analysis.config
    hint = missing_tunnels(udp_tunnel_counts(t), config)
    if hint is not None:
        pairs = tuple((m["kind"], m["port"]) for m in hint["tunnels"])
        hint["models"] = _with_sockets(analysis, pairs, max_rows, napi_max_rows)
        hint["left_out"] = [m for m in analysis.results if m not in (hint["models"] or {})]
    if isinstance(cache, dict):
        cache["tunnel_hint"] = hint
    return hint


def missing_pairs(t, config) -> tuple:
    """The ``(kind, port)`` UDP tunnels of packet table ``t`` on ports without a tunnel
    socket in ``config`` (those of :func:`missing_tunnels` that occur in ``t``)."""
    return tuple(pair for pair in sorted(udp_tunnel_counts(t))
                 if not config.udp_tunnel_socket(*pair))


def tunnel_mask(t, pairs) -> np.ndarray:
    """Rows of packet table ``t`` that are UDP tunnels of ``pairs`` ``((kind, port),
    ...)``."""
    from gropcap.arrays import numpy_of
    tun = numpy_of(t.column("tun_type"))
    port = numpy_of(t.column("outer_dport"))
    mask = np.zeros(t.num_rows, bool)
    for kind, p in pairs:
        code = next(c for c, k in UDP_TUNNEL_KINDS.items() if k == kind)
        mask |= (tun == code) & (port == p)
    return mask & (numpy_of(t.column("outer_l4_proto")) == C.IPPROTO_UDP)


def sub_coalesced(co, idx):
    """The ``gso.CoalescedInput`` of rows ``idx`` (None stays None; None when none of
    them is coalesced)."""
    from gropcap.gro.coalesced import CoalescedInput
    if co is None:
        return None
    sco = CoalescedInput(co.is_gso[idx], co.gso_size[idx], co.segs[idx], co.source[idx])
    return sco if sco.num_coalesced else None


def sockets_models(config, pairs, models: dict, segments: int, *, tunnel_rows=None,
                   before: dict | None = None, whole=None,
                   run_of_file=None, engine: str = "fast") -> dict | None:
    """``{model: {"ratio", "ratio_with"}}`` with tunnel sockets for ``pairs`` added.

    The ideal model has no polls and no table limit, so flows do not interact: only the
    rows of those tunnels can change, and they are run alone (``tunnel_rows``: their
    ``(table, CoalescedInput or None)``, None when there are too many); ``before``: per
    model, its super-packets that start at a tunnel row. The napi model shares polls and
    the GRO table between flows: it runs on the whole table (``whole``: ``(table,
    CoalescedInput or None)``, None when too large). ``models``: the summary's models
    (``superpackets_out``, ``aggregation_ratio``); ``segments``: segments in;
    ``run_of_file``: the receiver run of each input file (the summary's ``inputs``;
    None: one run), replayed as the run itself was; ``engine``: the run's GRO engine
    (a run on the reference engine compiles no kernel for its hint). Models left out
    are missing from the dict."""
    from gropcap.run.engines import simulate
    from gropcap.run.receivers import row_runs

    def runs(t):
        return row_runs(t, np.asarray(run_of_file, np.int64)) \
            if run_of_file is not None and max(run_of_file, default=0) else None

    cfg = config.replace(udp_tunnels=config.udp_tunnels + pairs)
    out = {}
    for m, ms in models.items():
        if m == "ideal" and tunnel_rows is not None:
            sub = simulate(tunnel_rows[0], cfg.replace(model=m), coalesced=tunnel_rows[1],
                           runs=runs(tunnel_rows[0]), engine=engine)
            total = ms["superpackets_out"] - before[m] + sub.num_superpackets
        elif m != "ideal" and whole is not None:
            total = simulate(whole[0], cfg.replace(model=m), coalesced=whole[1],
                             runs=runs(whole[0]), engine=engine).num_superpackets
        else:
            continue
        out[m] = {"ratio": ms["aggregation_ratio"],
                  "ratio_with": round(segments / total, 4) if total else 0.0}
    return out or None


def _with_sockets(analysis, pairs, max_rows: int, napi_max_rows: int) -> dict | None:
    """:func:`sockets_models` of an in-memory analysis."""
    t = analysis.decoded
    co = getattr(analysis, "coalesced", None)
    summary = analysis.summary()
    models = summary["models"]
    mask = tunnel_mask(t, pairs)
    tunnel_rows = None
    if mask.sum() <= max_rows:
        idx = np.flatnonzero(mask)
        tunnel_rows = (t.take(idx), sub_coalesced(co, idx))
    before = {m: int(np.count_nonzero(mask[res.seg_first_packet]))
              for m, res in analysis.results.items()}
    whole = (t, co) if t.num_rows <= napi_max_rows else None
    segments = next(iter(models.values()))["segments_in"] if models else t.num_rows
    return sockets_models(analysis.config, pairs, models, segments,
                          tunnel_rows=tunnel_rows, before=before, whole=whole,
                          run_of_file=summary["inputs"]["run_of_file"],
                          engine=getattr(analysis, "engine", "fast"))


def acks_hint(flows, config) -> dict | None:
    """When the napi model inferred its polls from timing only but the capture also holds
    the receiver's ACKs (a TCP direction with payload whose reverse direction, same
    endpoints swapped, is in the capture too), how many such directions there are and the
    option that uses them (``--poll-acks``, docs/gro-model.md): ``{"directions",
    "option"}``; None otherwise. ``flows``: the run's flows table (``Totals.flows_table``).
    A suggestion only: nothing is re-run."""
    if config.poll_acks or flows is None or not flows.num_rows:
        return None
    from gropcap.arrays import batch_column as col
    from gropcap.run.accumulators import reverse_count
    _, n, _ = reverse_count(
        flows, lambda b: (col(b, "l4_proto") == C.IPPROTO_TCP) & (col(b, "payload_bytes") > 0),
        lambda b: np.ones(b.num_rows, bool),
        keys=("encap", "src", "sport", "dst", "dport", "l4_proto"))
    return {"directions": n, "option": "--poll-acks"} if n else None
