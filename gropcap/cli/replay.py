"""``gropcap kernel-replay``: replay captures through the live kernel and the simulator.

Layer: CLI (thin). Reads each capture, turns its records into Ethernet frames, replays them
through a fresh veth pair (:func:`gropcap.replay.kernel.replay`) in bursts of ``--burst``
frames, simulates the same frames with the same bursts, and prints the settings, the
agreement and every difference. A file with nothing replayable (a DSA-tagged capture: a veth
cannot be a DSA conduit) or that fails to read is reported and the run goes on; a machine
that cannot replay at all (no root, a missing tunnel module) stops it.

Exit status (also in ``--help``): 0 every replayed file agrees (files skipped as
unsupported are listed, they do not fail the run); 1 a difference, an unreadable file, no
file replayed at all, or a machine that cannot replay; 2 bad options.

``--cleanup-stale`` (no FILES) deletes instead the namespace pairs left by replays that were
killed (SIGKILL, OOM, power cut), using the owner records of ``replay/_netns.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap

import click
import numpy as np

from gropcap import constants as C
from gropcap.cli.help import CapturePath, Command, check_kernel, check_udp_tunnels, option
from gropcap.errors import GropcapError
from gropcap.replay.frames import _left_out, capture_frames, unreplayable_reason

__all__ = ["kernel_replay", "cleanup_lines", "stale_hint", "settings_lines"]

# the receiver every replay sets up (kernel.replay's budget and napi_defer_hard_irqs)
_BUDGET = 64
_DEFER = 1

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


def settings_lines(burst: int, flush_timeout_us: float, kernel: str, engine: str,
                   tunnels=()) -> list[str]:
    """What a replay used and why its counts can differ from ``gropcap analyze``'s."""
    tun = ", ".join(f"{k}:{p}" for k, p in tunnels) or "none"
    paragraphs = [
        f"replay: bursts of at most {burst} frames, each one GRO window (a kick frame opens "
        f"it); receiving veth: gro_flush_timeout {flush_timeout_us:g} us, "
        f"napi_defer_hard_irqs {_DEFER}, budget {_BUDGET}, UDP tunnel devices {tun}",
        f"simulator: kernel {kernel} rules, napi model with the same bursts as polls, RSS "
        f"off (veth), checksums verified, engine {engine}",
        "note: counts can differ from `gropcap analyze`'s: here each burst is one GRO "
        "window by construction, while analyze infers NAPI polls from the capture's "
        "timestamps (--poll-gap-us, --budget) and spreads flows over RX queues (RSS)",
    ]
    return [line for p in paragraphs
            for line in textwrap.wrap(p, width=80, subsequent_indent="  ",
                                      break_on_hyphens=False)]


@click.command("kernel-replay", cls=Command)
@click.argument("files", nargs=-1, required=False, type=CapturePath(dir_okay=False))
@click.option("--kernel", "kernel", default=None, metavar="X.Y", callback=check_kernel,
              help="Rule set of the simulator (X.Y); default: the running kernel.")
@option("--burst", type=click.IntRange(1, 63), default=63, show_default=True,
        section="receiver",
        help="Frames per injected burst (one GRO window; at most the NAPI budget minus one: "
             "a kick frame opens each burst).")
@option("--gro-flush-timeout-us", type=click.FloatRange(0, 10_000_000, min_open=True),
        default=20_000.0, show_default=True, aliases=("--flush-timeout-us",),
        help="Receiver gro_flush_timeout (microseconds): longer than one burst takes to "
             "send, so a burst is one GRO window.")
@click.option("--engine", type=click.Choice(["fast", "reference"]), default="fast",
              show_default=True, help="Simulator implementation to compare against (the "
                                      "same results).")
@option("--no-fix-checksums", is_flag=True, section="input",
        help="Inject frames as captured (no padding checksum repair).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output: text, or one JSON object per file (a line each).")
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Same as --format json.")
@click.option("--udp-tunnel", "udp_tunnel", multiple=True, metavar="KIND:PORT[,...]",
              callback=check_udp_tunnels,
              help="Create these UDP tunnel devices in the receiving namespace (vxlan, "
                   "vxlan-gpe, geneve), so their ports are aggregated as tunnels; the "
                   "simulator gets the same sockets.")
@option("--mtu", type=click.IntRange(68, 65535), default=65535, show_default=True,
        metavar="BYTES", section="receiver",
        help="MTU of the veth pair (every replayed frame must fit: the simulator takes them "
             "all as wire frames).")
@option("--guest", "guest", default=None, metavar="IMAGE", section="run",
        type=click.Path(exists=True, dir_okay=False),
        help="Replay inside this kernel image instead (e.g. /boot/vmlinuz-6.1.0-57-amd64, "
             "a Debian linux-image package), booted under qemu with virtme-ng (TCG, slow: "
             "about a minute to boot); the simulator defaults to its X.Y. The guest's "
             "receiver uses a 100 ms flush timeout unless given.")
@option("--cleanup-stale", is_flag=True, section="run",
        help="Instead of replaying: delete the namespaces left behind by killed replays "
             "(owner process gone), one line per namespace. No FILES.")
@option("--dry-run", is_flag=True, section="run",
        help="With --cleanup-stale: only list the stale namespaces.")
def kernel_replay(files, kernel, burst, gro_flush_timeout_us, engine, no_fix_checksums, fmt,
                  as_json, udp_tunnel, mtu, guest, cleanup_stale, dry_run):
    """Replay capture FILES through this machine's kernel GRO (veth, root) and compare the
    super-packets it builds with the simulator's.

    With --cleanup-stale, delete the network namespaces of replays that were killed.

    Exit status: 0 every replayed file agrees (files skipped as unsupported, e.g.
    DSA-tagged captures, are listed and do not fail the run); 1 a difference, an
    unreadable file, no file replayed, or a machine that cannot replay; 2 bad options."""
    if cleanup_stale:
        if files:
            raise click.UsageError("--cleanup-stale takes no FILES")
        _cleanup_stale(dry_run)
    if dry_run:
        raise click.UsageError("--dry-run only goes with --cleanup-stale")
    if not files:
        raise click.UsageError("Missing argument 'FILES...'.")
    from gropcap.gro.config import parse_udp_tunnels

    as_json = as_json or fmt == "json"
    tunnels = parse_udp_tunnels(",".join(udp_tunnel))
    if guest:
        src = click.get_current_context().get_parameter_source("gro_flush_timeout_us")
        explicit = src is not None and src.name != "DEFAULT"
        _replay_in_guest(files, guest, kernel, burst,
                         gro_flush_timeout_us if explicit else None, engine, tunnels,
                         as_json, not no_fix_checksums)
    kernel = kernel or _default_kernel()
    settings = {"burst": burst, "gro_flush_timeout_us": gro_flush_timeout_us,
                "napi_defer_hard_irqs": _DEFER, "budget": _BUDGET, "engine": engine,
                "udp_tunnels": [f"{k}:{p}" for k, p in tunnels], "mtu": mtu}
    from gropcap.replay._netns import ReplayEnvironmentError
    counts = {"agree": 0, "differ": 0, "skipped": 0, "failed": 0}
    try:
        _warn_stale()
        if not as_json:
            for line in settings_lines(burst, gro_flush_timeout_us, kernel, engine, tunnels):
                click.echo(line)
        for path in files:
            try:
                outcome = _replay_file(path, kernel, burst, gro_flush_timeout_us, engine,
                                       not no_fix_checksums, tunnels, settings, as_json)
            except ReplayEnvironmentError:
                raise
            except GropcapError as e:
                where = "" if e.path else f"{path}: "
                click.echo(f"gropcap: error: {where}{e.one_line()}", err=True)
                outcome = "failed"
            counts[outcome] += 1
    except GropcapError as e:
        click.echo(f"gropcap: error: {e.one_line()}", err=True)
        sys.exit(1)
    replayed = counts["agree"] + counts["differ"]
    if len(files) > 1 and not as_json:
        click.echo(f"{len(files)} files: {counts['agree']} agree, {counts['differ']} differ, "
                   f"{counts['skipped']} skipped, {counts['failed']} failed")
    if not replayed and counts["skipped"]:
        click.echo("gropcap: error: no file could be replayed", err=True)
    sys.exit(0 if replayed and not counts["differ"] and not counts["failed"] else 1)


def _replay_in_guest(files, image, kernel, burst, flush_timeout_us, engine, tunnels, as_json,
                     fix_checksums) -> None:
    """``--guest IMAGE``: every file replayed inside the booted image, compared on the host
    with ``--kernel`` (default: the guest's X.Y); exits like a local replay."""
    from gropcap.replay import guest as G
    if not fix_checksums:
        raise click.UsageError("--no-fix-checksums does not go with --guest")
    flush_ns = (G.GUEST_FLUSH_TIMEOUT_NS if flush_timeout_us is None
                else int(round(flush_timeout_us * 1000)))
    try:
        jobs, skipped = G.file_jobs(files, "file", tunnels, burst=burst)
        for j, path in zip(jobs, [p for p in files if str(p) not in skipped]):
            j.name = str(path)
        outcomes = []
        if jobs:
            work = os.path.join(tempfile.gettempdir(),
                                f"gropcap-guest-{os.getpid()}-{G.image_release(image)}")
            results = G.boot_guest(image, jobs, work, flush_timeout_ns=flush_ns)
            outcomes = G.compare_results(jobs, results, kernel=kernel, engine=engine)
            shutil.rmtree(work, ignore_errors=True)
    except GropcapError as e:
        click.echo(f"gropcap: error: {e.one_line()}", err=True)
        sys.exit(1)
    for path, why in skipped.items():
        click.echo(json.dumps({"file": path, "skipped": why}, sort_keys=True) if as_json
                   else f"{path}: skipped: {why}")
    for o in outcomes:
        if as_json:
            d = o.report.to_dict() if o.report is not None else {"ok": False}
            d.update(file=o.name, status=o.status, guest=image,
                     simulated_kernel=kernel or results["kernel"], detail=o.detail)
            click.echo(json.dumps(d, sort_keys=True))
        else:
            what = o.detail if o.report is not None else f"{o.status}: {o.detail}"
            click.echo(f"{o.name}: {what} (guest {results['release']})")
            for line in o.lines:
                click.echo(f"  {line}")
    ok = outcomes and all(o.status == "agree" for o in outcomes)
    if not outcomes:
        click.echo("gropcap: error: no file could be replayed", err=True)
    sys.exit(0 if ok else 1)


def _replay_file(path, kernel, burst, flush_timeout_us, engine, fix_checksums, tunnels,
                 settings, as_json) -> str:
    """Replay one capture and print its result: ``"agree"``, ``"differ"`` or
    ``"skipped"`` (nothing replayable)."""
    from gropcap.capture import read_capture
    from gropcap.replay.compare import compare, running_kernel_has_vlan_gro, simulate_replay
    from gropcap.replay.kernel import replay

    _info, batch = read_capture(path)
    frames, wires, cnr, recs = capture_frames(batch)
    if not frames:
        why = unreplayable_reason(batch.linktype)
        if as_json:
            click.echo(json.dumps({"file": str(path), "skipped": why, "settings": settings},
                                  sort_keys=True))
        else:
            click.echo("\n".join(textwrap.wrap(f"{path}: skipped: {why}", width=80,
                                               subsequent_indent="  ",
                                               break_on_hyphens=False)))
        return "skipped"
    bursts = [i // burst for i in range(len(frames))]
    res = replay(frames, bursts, wire_lens=wires, fix_checksums=fix_checksums,
                 csum_not_ready=cnr, flush_timeout_ns=int(round(flush_timeout_us * 1000)),
                 udp_tunnels=tunnels, budget=_BUDGET, defer=_DEFER, mtu=settings["mtu"])
    packets, sim = simulate_replay(res, kernel=kernel, engine=engine)
    rep = compare(packets, res, sim)
    vlan_gro = bool(res.config.get("vlan_gro", running_kernel_has_vlan_gro()))
    tagged = int(np.isin(packets.column("eth_type").to_numpy(),
                         (C.ETH_P_8021Q, C.ETH_P_8021AD)).sum())
    left_out = len(batch) - len(frames)
    if as_json:
        d = rep.to_dict()
        d.update(file=str(path), simulated_kernel=kernel, vlan_gro=vlan_gro,
                 settings=settings, records_not_replayable=left_out)
        click.echo(json.dumps(d, sort_keys=True))
    else:
        click.echo(f"{path}: {rep.summary_line()}")
        if left_out:
            click.echo(f"  note: {left_out} of {len(batch)} records left out: "
                       f"{unreplayable_reason(_left_out(batch.linktype, recs))}")
        if tagged and not vlan_gro:
            click.echo(f"  note: {tagged} VLAN-tagged frames simulated without VLAN "
                       f"GRO (this kernel is built without CONFIG_VLAN_8021Q)")
        for d in rep.differences:
            click.echo(f"  {d.line()}")
    return "agree" if rep.ok else "differ"
