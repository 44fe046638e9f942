"""`gropcap tune`: the receive-side changes a user can make, ranked by the aggregation each
gives on a capture, with the command that makes each change.

Layer: report. Decodes once (``run.memory.decode_files``), infers coalesced input once
(``gro.coalesced.CoalescedStats``), then runs the napi model (``run.engines.simulate``, and
``gro.stages.simulate_stages`` for GRO on tunnel devices) once per variant of the
configuration. The aggregation is the napi model's ratio of wire segments to packets the
stack receives (after the gro_cells stage when it is modelled).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gropcap import constants as C

# gro_flush_timeout (ns) + napi_defer_hard_irqs pairs tried (Documentation/networking/
# napi.rst suggests a timeout of a few hundred microseconds with defer 2)
FLUSH_DEFER = ((20_000, 1), (50_000, 2), (200_000, 2), (1_000_000, 2))
BIG_TCP_SIZE = 185_000      # the BIG TCP size of the original series (ip link examples)
# `ip link add` for a tunnel device owning the UDP port (creates the socket)
_TUNNEL_ADD = {
    "vxlan": "ip link add vxlan0 type vxlan dstport {port} external",
    "vxlan-gpe": "ip link add vxlan0 type vxlan dstport {port} gpe external",
    "geneve": "ip link add geneve0 type geneve dstport {port} external",
    "fou": "ip fou add port {port} ipproto 4",
    "gue": "ip fou add port {port} gue",
}


@dataclasses.dataclass
class Variant:
    """One change: its name, the GroConfig changes, the commands, and (after
    :func:`tune`) the napi model's result on the capture."""

    name: str
    changes: dict
    commands: list[str]
    ratio: float = 0.0
    superpackets: int = 0
    gain: float = 0.0            # ratio / the current configuration's ratio - 1

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["changes"] = {k: v for k, v in self.changes.items()}
        return d


def variants(config, packets, dev: str = "DEV") -> list[Variant]:
    """The changes worth trying for this configuration and capture (``packets``: the
    decoded table, to see whether it has UDP, tunnels, several flows)."""
    out = []
    for ns, defer in FLUSH_DEFER:
        if (ns, defer) == (config.gro_flush_timeout_ns, config.napi_defer_hard_irqs):
            continue
        out.append(Variant(
            f"gro_flush_timeout {ns // 1000} us + napi_defer_hard_irqs {defer}",
            {"gro_flush_timeout_ns": ns, "napi_defer_hard_irqs": defer},
            [f"echo {ns} > /sys/class/net/{dev}/gro_flush_timeout",
             f"echo {defer} > /sys/class/net/{dev}/napi_defer_hard_irqs"]))
    k = config.kernel
    if k.version >= (5, 19) and config.gro_max_size < BIG_TCP_SIZE:
        changes = {"gro_max_size": BIG_TCP_SIZE}
        cmd = f"ip link set dev {dev} gro_max_size {BIG_TCP_SIZE}"
        if k.big_tcp_ipv4:
            changes["gro_ipv4_max_size"] = BIG_TCP_SIZE
            cmd += f" gro_ipv4_max_size {BIG_TCP_SIZE}"
        out.append(Variant(f"BIG TCP: gro_max_size {BIG_TCP_SIZE}", changes, [cmd]))
    q = config.queues
    for n in sorted({max(1, q // 2), q * 2} - {q}):
        out.append(Variant(f"{n} RX queue{'s' if n > 1 else ''}", {"queues": n},
                           [f"ethtool -L {dev} combined {n}"]))
    l4 = packets.column("l4_proto").to_numpy() if packets.num_rows else np.zeros(0)
    if (l4 == C.IPPROTO_UDP).any():
        if k.udp_gro_fraglist and config.udp_gro != "fraglist":
            out.append(Variant("rx-gro-list (UDP fraglist GRO)", {"udp_gro": "fraglist"},
                               [f"ethtool -K {dev} rx-gro-list on"]))
        if k.udp_gro_forwarding and config.udp_gro != "forward":
            out.append(Variant("rx-udp-gro-forwarding", {"udp_gro": "forward"},
                               [f"ethtool -K {dev} rx-udp-gro-forwarding on"]))
    tun = packets.column("tun_type").to_numpy() if packets.num_rows else np.zeros(0)
    if (tun != C.TUN_NONE).any() and config.tunnel_gro is not True:
        out.append(Variant("GRO on the tunnel device (gro_cells)", {"tunnel_gro": True},
                           ["ethtool -K TUNDEV gro on"]))
    from gropcap.run.accumulators import UDP_TUNNEL_KINDS
    if len(tun):
        port = packets.column("outer_dport").to_numpy()
        seen = sorted({(UDP_TUNNEL_KINDS[int(t)], int(p))
                       for t, p in zip(tun[np.isin(tun, list(UDP_TUNNEL_KINDS))],
                                       port[np.isin(tun, list(UDP_TUNNEL_KINDS))])})
        missing = [(kind, p) for kind, p in seen if not config.udp_tunnel_socket(kind, p)]
        if missing:
            out.append(Variant(
                "UDP tunnel socket: " + ", ".join(f"{kk}:{p}" for kk, p in missing),
                {"udp_tunnels": config.udp_tunnels + tuple(missing)},
                [_TUNNEL_ADD[kk].format(port=p) for kk, p in missing]))
    return out


def _napi_ratio(packets, config, coalesced, segments, engine: str, runs=None):
    """(ratio, super-packets reaching the stack) of the napi model under ``config``
    (``runs``: the receiver run of each row, run/receivers.py; None: one run)."""
    from gropcap.run.engines import simulate
    cfg = config.replace(model="napi")
    res = simulate(packets, cfg, engine=engine, coalesced=coalesced, runs=runs)
    out = res.num_superpackets
    if cfg.tunnel_gro is not None:
        from gropcap.gro.stages import simulate_stages, stages_summary
        out = stages_summary(simulate_stages(packets, cfg, native=res, engine=engine,
                                             coalesced=coalesced, runs=runs))["delivered"]
    return (round(segments / out, 4) if out else 0.0), int(out)


def tune(paths, config=None, *, decode_options=None, dev: str = "DEV",
         engine: str = "fast", decoder: str = "fast") -> dict:
    """Rank receive-side changes by the napi model's aggregation on the captures.

    Args:
        paths: capture file(s) or directories (as ``analyze``: several files are
            receiver runs as ``--captures auto`` infers them, run/receivers.py).
        config: the receiver as it is (:class:`GroConfig`); each variant changes it.
        dev: the receiving device's name in the commands.

    Returns:
        ``{"current": {"ratio", "superpackets"}, "variants": [Variant.as_dict(), ...]}``,
        variants by ratio, highest first (ties: in the order tried).

    Example:
        >>> tune("sample_pcaps/real_ipv4.pcap", dev="eth0")["variants"][0]  # doctest: +SKIP
    """
    from gropcap.gro.config import GroConfig
    from gropcap.gro.coalesced import CoalescedStats
    from gropcap.run.memory import decode_files
    from gropcap.run.options import run_options

    config, decode_options, _ = run_options(config or GroConfig(), decode_options, ["napi"],
                                            decoder=decoder, engine=engine)
    packets, infos = decode_files(paths, decode_options, decoder=decoder)
    stats = CoalescedStats(config.mtu)
    stats.add(packets)
    co = stats.infer(packets)
    segments = int(co.segs.astype(np.int64).sum())
    co = co if co.num_coalesced else None
    # several files: receiver runs as `gropcap analyze --captures auto` infers them
    from gropcap.run.receivers import table_runs
    runs = table_runs(packets, len(infos))
    ratio, out = _napi_ratio(packets, config, co, segments, engine, runs)
    found = variants(config, packets, dev)
    for v in found:
        v.ratio, v.superpackets = _napi_ratio(packets, config.replace(**v.changes), co,
                                              segments, engine, runs)
        v.gain = round(v.ratio / ratio - 1, 4) if ratio else 0.0
    order = sorted(range(len(found)), key=lambda i: (-found[i].ratio, i))
    return {"files": [i.path for i in infos], "segments": segments,
            "mtu": stats.mtu_inference().as_dict(),
            "current": {"ratio": ratio, "superpackets": out},
            "variants": [found[i].as_dict() for i in order]}


def render_tune(result: dict, width: int = 100) -> str:
    """The text table of :func:`tune`'s result."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, highlight=False, markup=False)
    cur = result["current"]
    con.print(f"napi model on {', '.join(result['files'])}: {result['segments']} segments, "
              f"current receiver ratio {cur['ratio']:.2f} ({cur['superpackets']} packets "
              f"to the stack)")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("rank", "change", "ratio", "gain", "packets"):
        t.add_column(col, justify="left" if col == "change" else "right")
    for i, v in enumerate(result["variants"], 1):
        t.add_row(str(i), v["name"], f"{v['ratio']:.2f}", f"{100 * v['gain']:+.1f}%",
                  str(v["superpackets"]))
    con.print(t)
    con.print("commands (run as root on the receiver):")
    for i, v in enumerate(result["variants"], 1):
        for c in v["commands"]:
            con.print(f"  {i}. {c}")
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["tune", "variants", "render_tune", "Variant", "FLUSH_DEFER", "BIG_TCP_SIZE"]
