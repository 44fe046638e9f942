"""Live replay of the gro_cells stage: tunnel frames into a real tunnel device, read after
its GRO.

Layer: validation, beside ``replay/kernel.py``. Takes tunnel Ethernet frames (GRE, GRE-TEB,
ERSPAN II/III, IPIP, SIT, ip6tnl, VXLAN, Geneve over IPv4 or IPv6: :func:`decap_device`)
that all go to one receiver (one outer destination), hands on a :class:`CellsReplayResult`:
the inner packets the tunnel device delivered after its gro_cells GRO, matched back to
input frames.

Set-up: the veth pair of ``replay/_netns.py``; in the receiving namespace the veth gets the
frames' destination MAC and outer address, and a tunnel device with the frames' outer
addresses (and GRE key / ERSPAN session / VNI) decapsulates them: ``ip_tunnel_rcv``,
``__ip6_tnl_rcv``, ``vxlan_rcv``, ``geneve_rx`` -> ``gro_cells_receive``. The packet socket
is bound to the **tunnel device only**: a tap on the veth would clone every skb, and
``gro_cells_receive`` hands cloned skbs to ``netif_rx`` without GRO. An L3 device (gre,
ipip, sit, ip6tnl, ip6gre) delivers the inner IP packet; a zero Ethernet header is put in
front of it for matching.

Native GRO on (default): the veth's deferred NAPI makes one burst one GRO window, as in
``replay/kernel.py``; the native super-packets of one poll reach the cell together, so the
simulator's second stage (``gropcap.gro.stages``, lower polls as windows) is exact.
Native GRO off: a veth without GRO has no NAPI at all (``netif_rx`` per frame), so the cell
sees one frame per poll unless its own device defers (``cells_flush_timeout_ns`` and
``napi_defer_hard_irqs`` 1 on the vxlan device: then it flushes entries older than a jiffy
at each completion, so splits depend on jiffy boundaries). A real NIC with GRO off still
polls in batches; the veth cannot show that.

Measured on 6.18 (``real_vxlan.pcap``, the 1898 frames to the receiver): native on, 111/111
units equal to the simulator's; native off with a 20 ms deferred flush on the vxlan device,
106 of 111 equal, the other kernel units are jiffy-boundary splits of simulator units.
Crafted flows whose outer IPv4 ID jumps every k frames (native GRO ends there, the inner
flow goes on): k = 1 -> the cell merges the single packets again; k = 4, 8, 20 -> the
native units never merge again. Packet-socket skbs have kmalloc'd heads, so
``skb_gro_receive`` chains every merged skb on the frag_list and any native super-packet of
two or more segments carries one (``simulate_cells`` uses ``frag_list_segs=1``; NICs with
page-fragment skbs reach MAX_SKB_FRAGS first). The unit still held when a burst ends is
flushed by the deferred timer in a later veth poll and reaches the cell alone
(``split_end_flush``).
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field

from gropcap.errors import GropcapError
import gropcap.replay._wire as _wire
from gropcap.replay._netns import VethPair, _run, check_environment
import gropcap.replay.kernel as K
from gropcap.replay.kernel import _Matcher, is_kick, split_bursts

__all__ = ["replay_gro_cells", "simulate_cells", "CellsReplayResult", "VXLAN_OVERHEAD",
           "Decap", "decap_device"]

VXLAN_OVERHEAD = 14 + 20 + 8 + 8     # outer Ethernet, IPv4 (no options), UDP, VXLAN
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


@dataclass
class CellsReplayResult:
    """What the vxlan device delivered after gro_cells GRO.

    Attributes:
        frames: the frames injected (checksums fixed as in ``replay/kernel.py``).
        polls: burst number per frame (the explicit GRO windows of the veth).
        units: per delivered inner packet, the input frame indices it holds (empty when it
            matches none).
        lost: input frames found in no delivered packet.
        device: the tunnel device's ``ip link`` type.
        xdp: an XDP_PASS program was on the receiving veth (kernels before 5.13).
        attempts: how many times the frames were sent (at most
            ``replay.kernel.REPLAY_ATTEMPTS``).
        slow_bursts, late_flushes: of the last attempt, the bursts sent too slowly and
            the polls merged with a later one (both empty: a faithful replay).
    """

    frames: list
    polls: list
    units: list
    lost: list
    device: str = "vxlan"
    xdp: bool = False
    attempts: int = 1
    slow_bursts: list = field(default_factory=list)
    late_flushes: list = field(default_factory=list)

    @property
    def counts(self) -> list[int]:
        return [len(u) for u in self.units]


@dataclass(frozen=True)
class Decap:
    """The tunnel device that decapsulates a frame: ``kind`` (``ip link`` type),
    ``link_args`` (after ``type KIND``), outer ``version``, the receiver's ``local`` and
    the sender's ``remote`` address, ``inner_off`` (where the delivered packet starts in
    the frame), ``l3`` (the device delivers the inner IP packet, no Ethernet header) and
    ``udp_tunnels`` (the socket the simulator needs: ``"vxlan:4789"`` or ``""``)."""

    kind: str
    link_args: tuple
    version: int
    local: str
    remote: str
    inner_off: int
    l3: bool
    udp_tunnels: str = ""


def decap_device(frame: bytes) -> Decap:
    """The device ``ip_tunnel_rcv`` / ``__ip6_tnl_rcv`` / vxlan / geneve would need to
    receive ``frame`` (Ethernet, one tunnel level). Raises :class:`GropcapError` for
    anything else."""
    import struct

    from gropcap import constants as C
    et = struct.unpack_from("!H", frame, 12)[0]
    if et == C.ETH_P_IP:
        ihl = (frame[14] & 0xF) * 4
        ver, proto, nxt = 4, frame[23], 14 + ihl
        local, remote = socket.inet_ntoa(frame[30:34]), socket.inet_ntoa(frame[26:30])
    elif et == C.ETH_P_IPV6:
        ver, proto, nxt = 6, frame[20], 54
        if proto == C.IPPROTO_DSTOPTS:           # ip4ip6's encapsulation limit option
            proto, nxt = frame[54], 54 + (frame[55] + 1) * 8
        local = socket.inet_ntop(socket.AF_INET6, frame[38:54])
        remote = socket.inet_ntop(socket.AF_INET6, frame[22:38])
    else:
        raise GropcapError("tunnel replay needs IPv4 or IPv6 outer frames")
    ends = ("local", local, "remote", remote)
    if proto == C.IPPROTO_GRE:
        flags, gproto = struct.unpack_from("!HH", frame, nxt)
        gh = 4 + 4 * bool(flags & C.GRE_CSUM) + 4 * bool(flags & C.GRE_KEY) \
            + 4 * bool(flags & C.GRE_SEQ)
        key = ()
        if flags & C.GRE_KEY:
            k = struct.unpack_from("!I", frame, nxt + 4 + 4 * bool(flags & C.GRE_CSUM))[0]
            key = ("key", str(k))
        if flags & C.GRE_CSUM:
            # ip_tunnel_rcv drops a packet whose C bit differs from the device's icsum
            key += ("icsum",)
        six = "ip6" if ver == 6 else ""
        if gproto in (C.ETH_P_IP, C.ETH_P_IPV6):
            return Decap(f"{six}gre", ends + key, ver, local, remote, nxt + gh, True)
        if gproto == C.ETH_P_TEB:
            return Decap(f"{six}gretap", ends + key, ver, local, remote, nxt + gh, False)
        if gproto in (C.ETH_P_ERSPAN, C.ETH_P_ERSPAN2):
            e = nxt + gh
            session = struct.unpack_from("!H", frame, e + 2)[0] & 0x3FF   # ERSPAN session
            if gproto == C.ETH_P_ERSPAN:
                verargs, hl = ("erspan_ver", "1", "erspan", "1"), 8
            else:
                o_bit = frame[e + 11] & 0x01
                verargs = ("erspan_ver", "2", "erspan_dir", "ingress", "erspan_hwid", "1")
                hl = 12 + 8 * o_bit
            # erspan_validate: exactly the GRE sequence and key flags (session = key)
            return Decap(f"{six}erspan", ends + ("seq", "key", str(session)) + verargs, ver,
                         local, remote, e + hl, False)
        raise GropcapError(f"GRE protocol {gproto:#06x} has no tunnel device here")
    if proto in (C.IPPROTO_IPIP, C.IPPROTO_IPV6):
        if ver == 4:
            kind = "ipip" if proto == C.IPPROTO_IPIP else "sit"
            return Decap(kind, ends, ver, local, remote, nxt, True)
        mode = "ipip6" if proto == C.IPPROTO_IPIP else "ip6ip6"
        return Decap("ip6tnl", ("mode", mode) + ends, ver, local, remote, nxt, True)
    if proto == C.IPPROTO_UDP:
        dport = struct.unpack_from("!H", frame, nxt + 2)[0]
        t = nxt + 8
        vni = str(int.from_bytes(frame[t + 4:t + 7], "big"))
        if dport == C.VXLAN_PORT:
            return Decap("vxlan", ("id", vni, "dstport", str(dport), "local", local), ver,
                         local, remote, t + C.VXLAN_HLEN, False, f"vxlan:{dport}")
        if dport == C.GENEVE_PORT:
            hl = C.GENEVE_HLEN + (frame[t] & 0x3F) * 4
            return Decap("geneve", ("id", vni, "remote", remote), ver, local, remote,
                         t + hl, False, f"geneve:{dport}")
    raise GropcapError(f"no tunnel device for IP protocol {proto} here")


def _fake_eth(ip: bytes) -> bytes:
    """An Ethernet header for an inner IP packet an L3 tunnel device delivered."""
    return bytes(12) + (b"\x08\x00" if ip[:1] and ip[0] >> 4 == 4 else b"\x86\xdd") + ip


def replay_gro_cells(frames: list[bytes], bursts: list[int] | None = None, *,
                     wire_lens=None, csum_not_ready=None, native_gro: bool = True,
                     cells_flush_timeout_ns: int = 0, flush_timeout_ns: int = 20_000_000,
                     budget: int = 64, pause_s: float = 0.07,
                     xdp: bool | None = None, kick: bool = False) -> CellsReplayResult:
    """Inject tunnel ``frames`` (one receiver) and read the tunnel device's GRO output.

    The device comes from the first frame (:func:`decap_device`: gre, gretap, erspan,
    ipip, sit, ip6gre, ip6gretap, ip6erspan, ip6tnl, vxlan, geneve) with the frames' outer
    addresses, so ``ip_tunnel_lookup`` finds it. Parameters follow
    :func:`gropcap.replay.kernel.replay`; ``native_gro`` switches GRO on the receiving veth,
    ``cells_flush_timeout_ns`` sets gro_flush_timeout (with napi_defer_hard_irqs 1) on the
    tunnel device, ``xdp`` an XDP_PASS program on the veth (default: before 5.13, where
    veth has NAPI only with XDP), ``kick`` a kick frame before each burst
    (``replay.kernel.kick_frame``). With GRO off, ``xdp`` and ``kick`` make the veth a NIC
    that polls each burst at once: its deferred NAPI hands the whole burst up in one poll
    (``netif_elide_gro``: no merging) and the tunnel device's cell polls it together,
    without the jiffy-dependent splits of a deferred cell. Needs root, netns and the
    tunnel's module.
    """
    from gropcap.replay._netns import missing_device_error
    from gropcap.replay._xdp import VETH_NAPI_WITHOUT_XDP
    from gropcap.replay.kernel import running_kernel

    check_environment()
    sent = []
    for i, f in enumerate(frames):
        wl = wire_lens[i] if wire_lens is not None else None
        cnr = bool(csum_not_ready[i]) if csum_not_ready is not None else False
        sent.append(_wire.fix_frame(bytes(f), wl, fix_checksums=True, csum_not_ready=cnr)[0])
    if not sent:
        raise GropcapError("no frames to replay")
    dev = decap_device(sent[0])
    for i, f in enumerate(sent):
        if decap_device(f) != dev or f[:6] != sent[0][:6]:
            raise GropcapError(f"frame {i} goes to another receiver or tunnel",
                               hint="replay the frames of one direction")
    mac = ":".join(f"{b:02x}" for b in sent[0][:6])
    decap = [_fake_eth(f[dev.inner_off:]) if dev.l3 else f[dev.inner_off:] for f in sent]
    polls = split_bursts(bursts, len(sent), budget)
    if xdp is None:
        xdp = running_kernel() < VETH_NAPI_WITHOUT_XDP
    with VethPair(flush_timeout_ns=flush_timeout_ns, xdp=xdp) as pair:
        ns = pair.ns_rx
        _run(["ip", "-n", ns, "link", "set", "dev", pair.dev_rx, "address", mac])
        if dev.version == 6:
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                  "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0",
                  f"net.ipv6.conf.{pair.dev_rx}.disable_ipv6=0"])
            _run(["ip", "-n", ns, "addr", "add", f"{dev.local}/128", "dev", pair.dev_rx,
                  "nodad"])
            _run(["ip", "-n", ns, "-6", "route", "add", "default", "dev", pair.dev_rx])
        else:
            _run(["ip", "-n", ns, "addr", "add", f"{dev.local}/32", "dev", pair.dev_rx])
            _run(["ip", "-n", ns, "route", "add", "default", "dev", pair.dev_rx])
        p = subprocess.run(["ip", "-n", ns, "link", "add", "gcell0", "type", dev.kind,
                            *dev.link_args], capture_output=True)
        if p.returncode != 0:
            raise missing_device_error(dev.kind, p.stderr.decode(errors="replace").strip())
        _run(["ip", "-n", ns, "link", "set", "gcell0", "up"])
        if cells_flush_timeout_ns:
            for attr, val in (("gro_flush_timeout", cells_flush_timeout_ns),
                              ("napi_defer_hard_irqs", 1)):
                _run(["ip", "netns", "exec", ns, "tee", f"/sys/class/net/gcell0/{attr}"],
                     input=f"{val}\n".encode())
        if not native_gro:
            _run(["ip", "netns", "exec", ns, "ethtool", "-K", pair.dev_rx, "gro", "off"])
        with pair.inside(ns):
            rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        tx = None
        try:
            rx.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)      # SO_RCVBUFFORCE
            rx.bind(("gcell0", ETH_P_ALL))
            rx.setblocking(False)
            tx, _ = pair.packet_socket("tx", proto=0, sndbuf=8 << 20)
            time.sleep(pause_s)
            for attempt in range(1, K.REPLAY_ATTEMPTS + 1):
                _read_all(rx, dev.l3)           # what an earlier attempt left
                slow = _inject(tx.send, sent, polls, kick,
                               pause_s + 3 * cells_flush_timeout_ns / 1e9,
                               flush_timeout_ns // 2)
                time.sleep(0.2)
                got = _read_all(rx, dev.l3)
                m = _Matcher(decap)
                units = [tuple(m.match(d)[0]) for d in got]
                late = K.late_flushes(units, polls)
                if not slow and not late:
                    break
        finally:
            rx.close()
            if tx is not None:
                tx.close()
    lost = [i for i, u in enumerate(m.used) if not u]
    return CellsReplayResult(sent, polls, units, lost, dev.kind, bool(xdp), attempt, slow,
                             late)


# how the bursts are sent: replay.kernel's sender (a name of its own here, for tests)
_inject = K.inject_bursts


def _read_all(rx, l3: bool) -> list[bytes]:
    """Every packet the tunnel device delivered so far (kick frames and the socket's own
    outgoing packets left out), an L3 device's with a zero Ethernet header."""
    got = []
    while True:
        try:
            data, addr = rx.recvfrom(1 << 19)
        except BlockingIOError:
            return got
        if addr[2] != PACKET_OUTGOING and not is_kick(data):
            got.append(_fake_eth(data) if l3 else data)


def simulate_cells(result: CellsReplayResult, *, native_gro: bool = True, kernel=None,
                   flush_timeout_ns: int = 20_000_000) -> list[tuple]:
    """The simulator's gro_cells output for the same frames: per super-packet of the
    second stage, the input frame indices it holds (``gropcap.gro.stages``, veth receive
    settings as ``replay.compare.simulate_replay``; the UDP tunnel socket of the device;
    with ``result.xdp`` the veth copied each skb into a page (``veth_xdp_rcv_skb``), so
    native super-packets use page fragments up to MAX_SKB_FRAGS before a frag_list)."""
    import numpy as np

    from gropcap.gro.config import GroConfig, KernelProfile
    from gropcap.gro.reference import simulate
    from gropcap.gro.stages import MAX_SKB_FRAGS, simulate_stages
    from gropcap.replay.compare import packets_table
    from gropcap.replay.kernel import running_kernel

    packets = packets_table(result.frames)
    config = GroConfig(kernel=KernelProfile.parse(kernel or min(running_kernel(), (6, 18))),
                       model="napi", rss="none", verify_checksums=True,
                       gro_flush_timeout_ns=flush_timeout_ns, napi_defer_hard_irqs=1,
                       udp_tunnels=decap_device(result.frames[0]).udp_tunnels,
                       native_gro=native_gro, tunnel_gro=True)
    polls = np.asarray(result.polls, dtype=np.int64)
    native = simulate(packets, config, polls=polls)
    # veth: the injected skbs have kmalloc'd heads, so native GRO chains every merged
    # segment on the frag_list (frag_list_segs=1); the units still held when a burst ends
    # are flushed by the deferred timer, in a later veth poll (split_end_flush)
    _n, cells = simulate_stages(packets, config, native=native,
                                frag_list_segs=MAX_SKB_FRAGS if result.xdp else 1,
                                split_end_flush=True)
    members: dict[int, list] = {}
    for i, seg in enumerate(native.gro_seg):
        members.setdefault(int(seg), []).append(i)
    out = []
    for k in range(cells.result.num_superpackets):
        rows = np.flatnonzero(cells.result.gro_seg == k)
        out.append(tuple(sorted(i for r in rows for i in members[int(cells.source_seg[r])])))
    return out
