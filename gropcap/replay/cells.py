"""Live replay of the gro_cells stage: VXLAN frames into a vxlan device, read after its GRO.

Layer: validation, beside ``replay/kernel.py``. Takes VXLAN-in-IPv4 Ethernet frames that
all go to one receiver (one outer destination), hands on a :class:`CellsReplayResult`: the
inner packets the vxlan device delivered after its gro_cells GRO, matched back to input
frames.

Set-up: the veth pair of ``replay/_netns.py``; in the receiving namespace the veth gets the
frames' destination MAC and outer IPv4 address, and a vxlan device (VNI, port 4789, that
local address) decapsulates them: ``vxlan_rcv`` -> ``gro_cells_receive``. The packet socket
is bound to the **vxlan device only**: a tap on the veth would clone every skb, and
``gro_cells_receive`` hands cloned skbs to ``netif_rx`` without GRO.

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
import time
from dataclasses import dataclass

from gropcap.errors import GropcapError
from gropcap.replay import _wire
from gropcap.replay._netns import VethPair, _run, check_environment
from gropcap.replay.kernel import _Matcher, split_bursts

__all__ = ["replay_gro_cells", "simulate_cells", "CellsReplayResult", "VXLAN_OVERHEAD"]

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
    """

    frames: list
    polls: list
    units: list
    lost: list

    @property
    def counts(self) -> list[int]:
        return [len(u) for u in self.units]


def replay_gro_cells(frames: list[bytes], bursts: list[int] | None = None, *,
                     wire_lens=None, csum_not_ready=None, native_gro: bool = True,
                     cells_flush_timeout_ns: int = 0, flush_timeout_ns: int = 20_000_000,
                     budget: int = 64, pause_s: float = 0.07) -> CellsReplayResult:
    """Inject VXLAN ``frames`` (one receiver) and read the vxlan device's GRO output.

    Parameters follow :func:`gropcap.replay.kernel.replay`; ``native_gro`` switches GRO on
    the receiving veth, ``cells_flush_timeout_ns`` sets gro_flush_timeout (with
    napi_defer_hard_irqs 1) on the vxlan device. Needs root, netns and a kernel with vxlan.
    """
    check_environment()
    sent = []
    for i, f in enumerate(frames):
        wl = wire_lens[i] if wire_lens is not None else None
        cnr = bool(csum_not_ready[i]) if csum_not_ready is not None else False
        sent.append(_wire.fix_frame(bytes(f), wl, fix_checksums=True, csum_not_ready=cnr)[0])
    if not sent:
        raise GropcapError("no frames to replay")
    p0 = _wire.parse(sent[0])
    if len(p0.ips) < 2 or p0.ips[0].version != 4 or sent[0][12:14] != b"\x08\x00":
        raise GropcapError("gro_cells replay needs VXLAN over IPv4 frames")
    dst_ip = socket.inet_ntoa(sent[0][30:34])
    vni = int.from_bytes(sent[0][46:49], "big")
    for i, f in enumerate(sent):
        if f[30:34] != sent[0][30:34] or f[:6] != sent[0][:6]:
            raise GropcapError(f"frame {i} goes to another receiver",
                               hint="replay the frames of one direction")
    mac = ":".join(f"{b:02x}" for b in sent[0][:6])
    decap = [f[VXLAN_OVERHEAD:] for f in sent]
    polls = split_bursts(bursts, len(sent), budget)
    with VethPair(flush_timeout_ns=flush_timeout_ns) as pair:
        ns = pair.ns_rx
        _run(["ip", "-n", ns, "link", "set", "dev", pair.dev_rx, "address", mac])
        _run(["ip", "-n", ns, "addr", "add", f"{dst_ip}/32", "dev", pair.dev_rx])
        p = _run_ok(["ip", "-n", ns, "link", "add", "gcell0", "type", "vxlan", "id", str(vni),
                     "dstport", "4789", "local", dst_ip])
        if not p:
            from gropcap.replay._netns import missing_device_error
            raise missing_device_error("vxlan", "ip link add ... type vxlan failed")
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
            i = 0
            while i < len(sent):
                j = i
                while j < len(sent) and polls[j] == polls[i]:
                    j += 1
                for k in range(i, j):
                    tx.send(sent[k])
                time.sleep(pause_s + 3 * cells_flush_timeout_ns / 1e9)
                i = j
            time.sleep(0.2)
            got = []
            while True:
                try:
                    data, addr = rx.recvfrom(1 << 19)
                except BlockingIOError:
                    break
                if addr[2] != PACKET_OUTGOING:
                    got.append(data)
        finally:
            rx.close()
            if tx is not None:
                tx.close()
    m = _Matcher(decap)
    units = [tuple(m.match(d)[0]) for d in got]
    lost = [i for i, u in enumerate(m.used) if not u]
    return CellsReplayResult(sent, polls, units, lost)


def _run_ok(argv: list[str]) -> bool:
    import subprocess
    return subprocess.run(argv, capture_output=True).returncode == 0


def simulate_cells(result: CellsReplayResult, *, native_gro: bool = True, kernel=None,
                   flush_timeout_ns: int = 20_000_000) -> list[tuple]:
    """The simulator's gro_cells output for the same frames: per super-packet of the
    second stage, the input frame indices it holds (``gropcap.gro.stages``, veth receive
    settings as ``replay.compare.simulate_replay``)."""
    import numpy as np

    from gropcap.gro.config import GroConfig, KernelProfile
    from gropcap.gro.reference import simulate
    from gropcap.gro.stages import simulate_stages
    from gropcap.replay.compare import packets_table
    from gropcap.replay.kernel import running_kernel

    packets = packets_table(result.frames)
    config = GroConfig(kernel=KernelProfile.parse(kernel or min(running_kernel(), (6, 18))),
                       model="napi", rss="none", verify_checksums=True,
                       gro_flush_timeout_ns=flush_timeout_ns, napi_defer_hard_irqs=1,
                       udp_tunnels="vxlan:4789", native_gro=native_gro, tunnel_gro=True)
    polls = np.asarray(result.polls, dtype=np.int64)
    native = simulate(packets, config, polls=polls)
    # veth: the injected skbs have kmalloc'd heads, so native GRO chains every merged
    # segment on the frag_list (frag_list_segs=1); the units still held when a burst ends
    # are flushed by the deferred timer, in a later veth poll (split_end_flush)
    _n, cells = simulate_stages(packets, config, native=native, frag_list_segs=1,
                                split_end_flush=True)
    members: dict[int, list] = {}
    for i, seg in enumerate(native.gro_seg):
        members.setdefault(int(seg), []).append(i)
    out = []
    for k in range(cells.result.num_superpackets):
        rows = np.flatnonzero(cells.result.gro_seg == k)
        out.append(tuple(sorted(i for r in rows for i in members[int(cells.source_seg[r])])))
    return out
