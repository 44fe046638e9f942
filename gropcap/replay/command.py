"""``gropcap kernel-replay``: replay captures through the live kernel and the simulator.

Layer: CLI (thin). Reads each capture, turns its records into Ethernet frames, replays them
through a fresh veth pair (:func:`gropcap.replay.kernel.replay`) in bursts of ``--burst``
frames, simulates the same frames with the same bursts, and prints the agreement and every
difference. Exit 0 on full agreement, 1 otherwise (or on an error), 2 on bad options.

``--cleanup-stale`` (no FILES) deletes instead the namespace pairs left by replays that were
killed (SIGKILL, OOM, power cut), using the owner records of ``replay/_netns.py``.
"""

from __future__ import annotations

import json
import struct
import sys

import click
import numpy as np

from gropcap import constants as C
from gropcap.errors import GropcapError

__all__ = ["kernel_replay", "capture_frames", "cleanup_lines", "stale_hint"]

_FAKE_MACS = bytes.fromhex("aa0000000002aa0000000001")   # dst, src for non-Ethernet captures


def capture_frames(batch) -> tuple[list[bytes], list[int], list[bool], list[int]]:
    """Ethernet frames from a RecordBatch: (frames, wire_lens, csum_not_ready, records).

    Ethernet records are used as they are; raw IP, Linux cooked (SLL, SLL2), BSD loopback
    records get a synthetic Ethernet header; other link types are skipped.
    """
    frames, wires, cnr, recs = [], [], [], []
    for i in range(len(batch)):
        f = batch.frame(i)
        lt = int(batch.linktype[i])
        wl = int(batch.wire_len[i])
        if lt == C.LINKTYPE_ETHERNET:
            eth = f
        else:
            if lt in (C.LINKTYPE_RAW, C.LINKTYPE_RAW_OPENBSD, C.LINKTYPE_RAW_BSDOS,
                      C.LINKTYPE_IPV4, C.LINKTYPE_IPV6):
                ip, hl = f, 0
            elif lt == C.LINKTYPE_LINUX_SLL:
                ip, hl = f[C.SLL_HLEN:], C.SLL_HLEN
            elif lt == C.LINKTYPE_LINUX_SLL2:
                ip, hl = f[C.SLL2_HLEN:], C.SLL2_HLEN
            elif lt in (C.LINKTYPE_NULL, C.LINKTYPE_LOOP):
                ip, hl = f[4:], 4
            else:
                continue
            if not ip:
                continue
            ver = ip[0] >> 4
            if ver not in (4, 6):
                continue
            et = C.ETH_P_IP if ver == 4 else C.ETH_P_IPV6
            eth = _FAKE_MACS + struct.pack("!H", et) + ip
            wl = wl - hl + C.ETH_HLEN
        frames.append(eth)
        wires.append(max(wl, len(eth)))
        cnr.append(bool(int(batch.epb_flags[i]) & C.EPB_FLAG_CSUM_NOT_READY))
        recs.append(i)
    return frames, wires, cnr, recs


def cleanup_lines(report) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of ``--cleanup-stale`` for a CleanupReport.

    stdout: one line per namespace removed (or, with ``--dry-run``, that would be) and a
    total; stderr: the deletions that failed and the gropcap namespaces left alone whose
    owner could not be established (live replays are not mentioned).
    """
    verb = "stale" if report.dry_run else "removed"
    out = [f"{verb} {n.name} ({n.why})" for n in report.removed]
    k = len(report.removed)
    noun = "namespace" if k == 1 else "namespaces"
    if report.dry_run:
        out.append(f"{k} stale gropcap {noun} (dry run: nothing removed)")
    else:
        out.append(f"removed {k} stale gropcap {noun}")
    err = [f"gropcap: error: cannot delete {n.name}: {msg}" for n, msg in report.failed]
    for n in report.kept:
        if n.state == "unrecorded":
            err.append(f"gropcap: note: left {n.name} alone: it has no owner record (made "
                       f"by an older gropcap or by hand); if no replay uses it: "
                       f"ip netns del {n.name}")
        elif n.state == "unknown":
            err.append(f"gropcap: note: left {n.name} alone: {n.why}")
    return out, err


def stale_hint(scan) -> str | None:
    """The one stderr line a replay prints when stale gropcap namespaces exist, or None."""
    stale = scan.stale
    if not stale:
        return None
    names = ", ".join(n.name for n in stale[:4]) + (", ..." if len(stale) > 4 else "")
    noun = "namespace" if len(stale) == 1 else "namespaces"
    return (f"gropcap: note: {len(stale)} stale gropcap {noun} left by killed replays "
            f"({names}); remove them with 'gropcap kernel-replay --cleanup-stale'")


def _cleanup_stale(dry_run: bool) -> None:
    from gropcap.replay._netns import check_environment, cleanup_stale
    try:
        check_environment()
        report = cleanup_stale(dry_run=dry_run)
    except GropcapError as e:
        click.echo(f"gropcap: error: {e.one_line()}", err=True)
        sys.exit(1)
    out, err = cleanup_lines(report)
    for line in out:
        click.echo(line)
    for line in err:
        click.echo(line, err=True)
    sys.exit(1 if report.failed else 0)


def _warn_stale() -> None:
    """One stderr line if killed replays left namespaces; they are not deleted here."""
    from gropcap.replay._netns import check_environment, scan_namespaces
    check_environment()          # root first: an unprivileged run touches nothing
    line = stale_hint(scan_namespaces())
    if line:
        click.echo(line, err=True)


def _default_kernel() -> str:
    from gropcap.replay.kernel import running_kernel
    major, minor = running_kernel()
    return f"{major}.{minor}"


@click.command("kernel-replay")
@click.argument("files", nargs=-1, required=False, type=click.Path(dir_okay=False))
@click.option("--kernel", "kernel", default=None,
              help="Rule set of the simulator (X.Y); default: the running kernel.")
@click.option("--burst", type=click.IntRange(1, 63), default=63, show_default=True,
              help="Frames per injected burst (one GRO window; at most the NAPI budget "
                   "minus one: a kick frame opens each burst).")
@click.option("--flush-timeout-us", type=click.IntRange(1, 10_000_000), default=20_000,
              show_default=True, help="Receiver gro_flush_timeout in microseconds.")
@click.option("--engine", type=click.Choice(["reference", "fast"]), default="reference",
              show_default=True, help="Simulator implementation to compare against.")
@click.option("--no-fix-checksums", is_flag=True,
              help="Inject frames as captured (no padding checksum repair).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file.")
@click.option("--udp-tunnel", "udp_tunnel", default="", metavar="KIND:PORT[,...]",
              help="Create these UDP tunnel devices in the receiving namespace (vxlan, "
                   "vxlan-gpe, geneve), so their ports are aggregated as tunnels; the "
                   "simulator gets the same sockets.")
@click.option("--mtu", type=click.IntRange(68, 65535), default=65535, show_default=True,
              metavar="BYTES", help="MTU of the veth pair (every replayed frame must fit: "
                                    "the simulator takes them all as wire frames).")
@click.option("--cleanup-stale", is_flag=True,
              help="Instead of replaying: delete the namespaces left behind by killed "
                   "replays (owner process gone), one line per namespace. No FILES.")
@click.option("--dry-run", is_flag=True,
              help="With --cleanup-stale: only list the stale namespaces.")
def kernel_replay(files, kernel, burst, flush_timeout_us, engine, no_fix_checksums, as_json,
                  udp_tunnel, mtu, cleanup_stale, dry_run):
    """Replay capture FILES through this machine's kernel GRO (veth, root) and compare
    the super-packets it builds with the simulator's.

    With --cleanup-stale, delete the network namespaces of replays that were killed."""
    if cleanup_stale:
        if files:
            raise click.UsageError("--cleanup-stale takes no FILES")
        _cleanup_stale(dry_run)
    if dry_run:
        raise click.UsageError("--dry-run only goes with --cleanup-stale")
    if not files:
        raise click.UsageError("Missing argument 'FILES...'.")
    from gropcap.capture import read_capture
    from gropcap.replay.compare import compare, running_kernel_has_vlan_gro, simulate_replay
    from gropcap.replay.kernel import replay

    from gropcap.errors import ConfigError
    from gropcap.gro.config import parse_udp_tunnels

    kernel = kernel or _default_kernel()
    try:
        tunnels = parse_udp_tunnels(udp_tunnel)
    except ConfigError as e:
        raise click.BadParameter(e.one_line(), param_hint="--udp-tunnel") from None
    all_ok = True
    try:
        _warn_stale()
        for path in files:
            _info, batch = read_capture(path)
            frames, wires, cnr, _recs = capture_frames(batch)
            if not frames:
                raise GropcapError(f"{path}: no replayable (Ethernet or IP) frames")
            bursts = [i // burst for i in range(len(frames))]
            res = replay(frames, bursts, wire_lens=wires, fix_checksums=not no_fix_checksums,
                         csum_not_ready=cnr, flush_timeout_ns=flush_timeout_us * 1000,
                         udp_tunnels=tunnels, mtu=mtu)
            packets, sim = simulate_replay(res, kernel=kernel, engine=engine)
            rep = compare(packets, res, sim)
            all_ok &= rep.ok
            vlan_gro = bool(res.config.get("vlan_gro", running_kernel_has_vlan_gro()))
            tagged = int(np.isin(packets.column("eth_type").to_numpy(),
                                 (C.ETH_P_8021Q, C.ETH_P_8021AD)).sum())
            if as_json:
                d = rep.to_dict()
                d["file"] = str(path)
                d["simulated_kernel"] = kernel
                d["vlan_gro"] = vlan_gro
                click.echo(json.dumps(d, sort_keys=True))
            else:
                click.echo(f"{path}: {rep.summary_line()}")
                if tagged and not vlan_gro:
                    click.echo(f"  note: {tagged} VLAN-tagged frames simulated without VLAN "
                               f"GRO (this kernel is built without CONFIG_VLAN_8021Q)")
                for d in rep.differences:
                    click.echo(f"  {d.line()}")
    except GropcapError as e:
        msg = e.one_line() if hasattr(e, "one_line") else str(e)
        click.echo(f"gropcap: error: {msg}", err=True)
        sys.exit(1)
    sys.exit(0 if all_ok else 1)
