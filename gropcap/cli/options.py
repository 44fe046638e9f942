"""The options every command shares and their converters: the decode options (tunnel
ports, DSA tag), the kernel and receive-path options (one table: ``_gro_options`` and
``_make_gro_config``; ``_GRO_KEYS`` names them), ``--decoder``, a command's staged
outputs and its ``--receiver`` profile.

Layer: CLI, below cli/app.py and cli/report.py (which both declare commands with these
options); imports cli/help.py and the layers below, never a command module.
"""

from __future__ import annotations

import click

from gropcap.cli.help import check_kernel, check_udp_tunnels, option
from gropcap.errors import ConfigError


def staged_outputs(force: bool):
    """The command's :class:`gropcap.io.outputs.Outputs` (one per click context): targets
    are checked and staged when named, and whatever is not committed is removed when the
    command ends (error, Ctrl-C)."""
    from gropcap.io.outputs import Outputs

    ctx = click.get_current_context()
    outs = ctx.meta.get("gropcap.outputs")
    if outs is None:
        outs = ctx.meta["gropcap.outputs"] = Outputs(force=force)
        ctx.call_on_close(outs.discard)
    return outs


# --- shared options -------------------------------------------------------------------

def _decode_options(f):
    opts = [
        click.option("--vxlan-port", "vxlan_ports", type=click.IntRange(1, 65535), multiple=True,
                     help="UDP port decoded as VXLAN (repeatable; default 4789)."),
        click.option("--geneve-port", "geneve_ports", type=click.IntRange(1, 65535),
                     multiple=True, help="UDP port decoded as Geneve (default 6081)."),
        click.option("--vxlan-gpe-port", "vxlan_gpe_ports", type=click.IntRange(1, 65535),
                     multiple=True, help="UDP port decoded as VXLAN-GPE (default 4790)."),
        click.option("--fou-port", "fou_ports", multiple=True, metavar="PORT:PROTO",
                     help="Foo-over-UDP receive port and the IP protocol it carries "
                          "(4, 41 or 47), e.g. 5555:4."),
        click.option("--gue-port", "gue_ports", type=click.IntRange(1, 65535), multiple=True,
                     help="UDP port decoded as GUE."),
        click.option("--dsa-tag", type=click.Choice(["dsa", "edsa", "brcm", "brcm-prepend"]),
                     default=None, help="Ethernet capture taken on a DSA conduit: tag to strip."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _make_decode_options(vxlan_ports, geneve_ports, vxlan_gpe_ports, fou_ports, gue_ports,
                         dsa_tag):
    from gropcap.decode.options import DecodeOptions

    kw = {}
    if vxlan_ports:
        kw["vxlan_ports"] = vxlan_ports
    if geneve_ports:
        kw["geneve_ports"] = geneve_ports
    if vxlan_gpe_ports:
        kw["vxlan_gpe_ports"] = vxlan_gpe_ports
    if gue_ports:
        kw["gue_ports"] = gue_ports
    if fou_ports:
        pairs = []
        for text in fou_ports:
            port, sep, proto = text.partition(":")
            if not sep or not port.isdigit() or not proto.isdigit():
                raise click.BadParameter(f"{text!r} is not PORT:PROTO", param_hint="--fou-port")
            pairs.append((int(port), int(proto)))
        kw["fou_ports"] = tuple(pairs)
    try:
        return DecodeOptions(dsa_tag=dsa_tag, **kw)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None


_decoder_option = click.option(
    "--decoder", type=click.Choice(["fast", "reference"]), default="fast", show_default=True,
    help="Capture reader and header decoder: numba over a memory map, or the plain-Python "
         "reference (identical tables).")


def _check_packet_columns(ctx, param, value):
    if value in ("default", "all"):
        return value    # what parse_packet_columns returns, without importing io.columns
    from gropcap.io.columns import parse_packet_columns
    try:
        return parse_packet_columns(value)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None


_packet_columns_option = click.option(
    "--packet-columns", "packet_columns", default="default", show_default=True,
    metavar="default|all|LIST", callback=_check_packet_columns,
    help="Columns of packets.parquet (--out): default (time, addresses, ports, flow, sizes, "
         "every model's verdicts and reasons with their names), all (every decoded header "
         "field), or a comma list of columns, e.g. default,ip_ttl,ip_id.")


_threads_option = click.option(
    "--threads", type=click.IntRange(1, None), default=None, metavar="N",
    help="Threads of a bounded-memory run: 1 runs it on one; 2, the default where the "
         "process may use two CPUs, decodes ahead of GRO in one thread and writes the "
         "engine's results in another (the same results; on a busy machine 1 can be "
         "faster). More than 2 run as 2.")


_captures_option = click.option(
    "--captures", type=click.Choice(["auto", "continuous", "separate"]), default="auto",
    show_default=True,
    help="How several input files are replayed: continuous (one receiver, one timeline: "
         "the pieces of a rotated capture), separate (each file on a receiver of its "
         "own, the counts summed: copies, other hosts or days), auto (a file whose first "
         "timestamp is earlier than the latest one before it starts a new receiver; "
         "otherwise it continues). The report says which.")


def _default_poll_gap_us() -> float:
    from gropcap.gro.config import DEFAULT_POLL_GAP_NS
    return DEFAULT_POLL_GAP_NS / 1000


def _gro_options(f):
    opts = [
        click.option("--kernel", default=None, metavar="X.Y[.Z]", callback=check_kernel,
                     help="Kernel release whose GRO rules apply: 4.4-4.20, 5.0-5.19 or "
                          "6.0-6.18 (default: newest modelled, 6.18); X.Y.Z adds the "
                          "stable backports up to that release."),
        click.option("--verify-checksums", is_flag=True,
                     help="Check TCP/UDP checksums as software GRO does (default: the NIC "
                          "validated them; captures from a sending host carry partial sums)."),
        click.option("--rss", type=click.Choice(["toeplitz", "none"]), default="toeplitz",
                     show_default=True, help="RX hash: NIC Toeplitz RSS, or none (bucket 0)."),
        click.option("--rss-key", default=None, metavar="HEX", help="Toeplitz key (40 bytes hex)."),
        click.option("--queues", type=click.IntRange(1, 4096), default=1, show_default=True,
                     help="RX queues (napi model)."),
        click.option("--budget", type=click.IntRange(1, 65536), default=64, show_default=True,
                     help="NAPI budget: frames per poll."),
        click.option("--poll-gap-us", type=click.FloatRange(0), default=_default_poll_gap_us(),
                     show_default=True,
                     help="A gap longer than this between frames of a queue ends a poll "
                          "(default: the ice/i40e RX interrupt moderation, 50 us)."),
        click.option("--hz", type=click.IntRange(1, 10000), default=250, show_default=True,
                     help="CONFIG_HZ (jiffy length for the old-packet flush)."),
        option("--gro-flush-timeout-us", type=click.FloatRange(0), default=0.0,
               show_default=True, aliases=("--flush-timeout-us",),
               help="Device gro_flush_timeout (microseconds)."),
        click.option("--napi-defer-hard-irqs", type=click.IntRange(0, 2**31 - 1), default=0,
                     show_default=True, help="Device napi_defer_hard_irqs."),
        click.option("--gro-max-size", type=click.IntRange(1, 524288), default=65536,
                     show_default=True, help="gro_max_size (IPv6; all families before 6.12)."),
        click.option("--gro-ipv4-max-size", type=click.IntRange(1, 524288), default=65536,
                     show_default=True, help="gro_ipv4_max_size (BIG TCP for IPv4)."),
        click.option("--udp-tunnel", "udp_tunnels", multiple=True, metavar="KIND:PORT[,...]",
                     callback=check_udp_tunnels,
                     help="A local UDP tunnel socket owns PORT (vxlan, vxlan-gpe, geneve, fou, "
                          "gue), so native GRO goes through the tunnel; e.g. vxlan:4789."),
        click.option("--udp-gro", type=click.Choice(["off", "socket", "forward", "fraglist"]),
                     default="off", show_default=True,
                     help="UDP GRO: UDP_GRO socket, rx-udp-gro-forwarding or rx-gro-list."),
        click.option("--rx-gro-list/--no-rx-gro-list", default=False, show_default=True,
                     help="rx-gro-list (NETIF_F_GRO_FRAGLIST) on the receiving device; for "
                          "TCP from 6.10 together with --tcp-forwarded."),
        click.option("--tcp-forwarded/--tcp-local-socket", "tcp_forwarded", default=False,
                     show_default=True,
                     help="The TCP flows are forwarded (no local socket, a router): with "
                          "--rx-gro-list, 6.10+ aggregates them as a frag_list."),
        click.option("--native-gro/--no-native-gro", default=True, show_default=True,
                     help="GRO on the receiving device (ethtool -K DEV gro on|off)."),
        click.option("--vlan-gro/--no-vlan-gro", default=True, show_default=True,
                     help="VLAN GRO (vlan_gro_receive); off for kernels built without "
                          "CONFIG_VLAN_8021Q: 802.1Q/802.1ad frames skip GRO."),
        click.option("--mtu", type=click.IntRange(68, 65536), default=None, metavar="BYTES",
                     help="MTU of the receiving device: frames with more IP bytes were "
                          "captured already coalesced (default: inferred from the SYN MSS "
                          "and frame sizes; the report says from what)."),
        click.option("--poll-acks/--no-poll-acks", default=False, show_default=True,
                     help="napi model: end a poll where the receiver's ACKs in the capture "
                          "show a delivery (a tap or mirror with both directions); the poll "
                          "gap and budget still end polls that sent no ACK."),
        click.option("--tunnel-gro/--no-tunnel-gro", default=None,
                     help="Model the gro_cells stage on tunnel/ERSPAN/DSA devices after "
                          "decapsulation, with GRO on or off there (default: not modelled)."),
        click.option("--receiver", type=click.Path(dir_okay=False), default=None,
                     metavar="PROFILE",
                     help="Receiver profile (TOML, from `gropcap calibrate`): its values "
                          "replace the defaults of the options above; an option given "
                          "here still wins."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _make_gro_config(kernel, verify_checksums, rss, rss_key, queues, budget, poll_gap_us, hz,
                     gro_flush_timeout_us, napi_defer_hard_irqs, gro_max_size,
                     gro_ipv4_max_size, udp_tunnels=(), udp_gro="off", native_gro=True,
                     tunnel_gro=None, vlan_gro=True, rx_gro_list=False, tcp_forwarded=False,
                     mtu=None, receiver=None, poll_acks=False):
    from gropcap.gro.config import GroConfig, KernelProfile

    if receiver is not None:
        # profile values replace option defaults; options given explicitly keep theirs
        opts = {k: v for k, v in locals().items() if k not in ("receiver", "GroConfig",
                                                                 "KernelProfile")}
        opts = _apply_receiver(receiver, opts)
        return _make_gro_config(**opts)
    kw = {}
    if rss_key:
        try:
            kw["rss_key"] = bytes.fromhex(rss_key.replace(":", ""))
        except ValueError:
            raise click.BadParameter("not hex", param_hint="--rss-key") from None
    try:
        profile = KernelProfile.parse(kernel)
    except ConfigError as e:
        raise click.BadParameter(e.one_line(), param_hint="--kernel") from None
    if napi_defer_hard_irqs and not profile.napi_defer_hard_irqs:
        raise click.BadParameter(f"kernel {profile.name} has no such knob (napi_defer_hard_irqs "
                                 f"arrived in 5.7, 6f8b12d661d0)",
                                 param_hint="--napi-defer-hard-irqs")
    try:
        return GroConfig(kernel=profile, verify_checksums=verify_checksums,
                         rss=rss, queues=queues, budget=budget,
                         poll_gap_ns=int(poll_gap_us * 1000), hz=hz,
                         gro_flush_timeout_ns=int(gro_flush_timeout_us * 1000),
                         napi_defer_hard_irqs=napi_defer_hard_irqs, gro_max_size=gro_max_size,
                         gro_ipv4_max_size=gro_ipv4_max_size,
                         udp_tunnels=",".join(udp_tunnels), udp_gro=udp_gro,
                         native_gro=native_gro, tunnel_gro=tunnel_gro, vlan_gro=vlan_gro,
                         rx_gro_list=rx_gro_list, tcp_local_socket=not tcp_forwarded, mtu=mtu,
                         poll_acks=poll_acks, **kw)
    except ConfigError as e:
        raise click.BadParameter(e.one_line()) from None


def _apply_receiver(path, options: dict) -> dict:
    """``--receiver PROFILE``: the profile's values for the options of this command left at
    their defaults. The :class:`gropcap.receive.profile.ReceiverInfo` (what was applied) is kept
    in the click context for :func:`_receiver_info`."""
    from click.core import ParameterSource

    from gropcap.receive.profile import ReceiverInfo, apply_options, load_profile

    profile = load_profile(path)
    ctx = click.get_current_context(silent=True)
    explicit = set()
    if ctx is not None:
        explicit = {k for k in profile
                    if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT)}
    opts, applied, unapplied = apply_options(options, profile, explicit)
    if isinstance(opts.get("udp_tunnels"), str):
        opts["udp_tunnels"] = (opts["udp_tunnels"],)
    if ctx is not None:
        ctx.meta["gropcap.receiver"] = ReceiverInfo(
            str(path), profile, tuple(applied), tuple(sorted(explicit)), tuple(unapplied))
    return opts


def _receiver_info():
    """The ReceiverInfo of this command's ``--receiver`` (None without one)."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get("gropcap.receiver")


_DECODE_KEYS = ("vxlan_ports", "geneve_ports", "vxlan_gpe_ports", "fou_ports", "gue_ports",
                "dsa_tag")
_GRO_KEYS = ("kernel", "verify_checksums", "rss", "rss_key", "queues", "budget", "poll_gap_us",
             "hz", "gro_flush_timeout_us", "napi_defer_hard_irqs", "gro_max_size",
             "gro_ipv4_max_size", "udp_tunnels", "udp_gro", "native_gro", "tunnel_gro",
             "vlan_gro", "rx_gro_list", "tcp_forwarded", "mtu",
             "receiver", "poll_acks")


def _split(kw: dict, keys) -> dict:
    return {k: kw.pop(k) for k in keys}
