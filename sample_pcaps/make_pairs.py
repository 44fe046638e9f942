"""Record real traffic as PAIRS: the wire view and the kernel's own post-GRO view (root).

Each case builds fresh namespaces: a sender, a receiver and, for some cases, a router in
between, joined by veth pairs. In one run it captures

* ``<name>.wire.pcap``: the frames that arrive at the receiver's veth, taken with
  ``tcpdump -Q out`` on the veth that sends to it (the sender's, or the router's egress
  veth), whose TSO/GSO are off so every frame is wire-sized;
* ``<name>.postgro.pcap``: ``tcpdump -Q in`` on the receiving veth (GRO on, default NAPI
  settings). A packet tap on a receiving device sees the skbs that GRO delivered
  (``__netif_receive_skb_core`` runs after ``napi_gro_complete``), one frame per
  super-packet;
* ``<name>.json``: what the capture cannot show: the receiving veth's MTU, GRO settings
  (``gro``, ``gro_flush_timeout``, ``napi_defer_hard_irqs``, ``gro_max_size``), the kernel
  release, CONFIG_HZ, tool versions, what a router did, and the gropcap options that model
  the receiver (UDP tunnel sockets, UDP_GRO sockets).

Both views carry only the direction the receiver aggregates (frames towards it), with the
same BPF filter, so a frame count of the post-GRO view is the kernel's packet count for the
traffic of the wire view.

Usage (from the repository root)::

    sudo python3 sample_pcaps/make_pairs.py                  # all cases, into sample_pcaps/pairs
    sudo python3 sample_pcaps/make_pairs.py -o /tmp/p bulk    # one case elsewhere
    python3 sample_pcaps/make_pairs.py --list

Routers (kernel IPv4 forwarding in a router namespace; this kernel has no sch_netem /
sch_red / sch_fq_codel: CONFIG_NET_SCH_NETEM, _RED, _FQ_CODEL not set): ``ecn``: the
nftables forward hook sets CE on one ECT(0) packet in 8 (``ip ecn set ce``);
``lossreorder``: nftables drops 1.5% of the TCP data frames and marks 2%, which policy
routing sends through a detour namespace and back (behind the rest of their burst).
``userfwd`` (only when named) forwards in user space instead (AF_PACKET on both veths,
``_Bridge`` below): every frame it sends is then its own NAPI poll on the receiver.

With ``perf`` installed, the receiving veth's NAPI polls are recorded too
(``perf record -e napi:napi_poll``) and summarised in the JSON as ``kernel_polls``.

``--acks`` also records the reverse direction, the receiver's ACKs, with the same BPF
filter, in two more files: ``<name>.acks.pcap`` (``tcpdump -Q out`` on the receiving
veth: the ACK as the receiver's TCP sends it, inside the poll that delivered the data it
acknowledges) and ``<name>.both.pcap``: the wire view merged in time order with
``tcpdump -Q in`` on the wire view's veth (the ACKs where they reach the sender's side),
i.e. both directions as one tap on the link sees them, what ``gropcap`` reads with
``--poll-acks``.

The polls' tracepoint times come with the sequence (``kernel_polls.time_ns``, on the taps'
clock): ``replay.pairs.kernel_poll_times`` refuses a recording whose poll counts do not
line up with its wire view (perf lost a poll, or a view a frame) instead of placing every
later poll boundary one frame off (CI once counted 425 super-packets for the kernel's
409 on such a recording). The committed pairs recorded without ``--acks`` before this
have no times.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gropcap.replay._netns import inside_netns  # noqa: E402
from gropcap.replay.pairs import frame_lengths  # noqa: E402
from make_real import (OVERLAY4, SNAPLEN, UNDERLAY4, UNDERLAY6, add_vxlan, sh,  # noqa: E402
                       wait_listening)

APPS = Path(__file__).resolve().parent / "pair_apps.py"
ROUTED4 = ("10.202.0.2", "10.202.0.254")  # receiver, router (receiver side) when routed
ETH_P_ALL = 0x0003
# every segmentation offload a veth has: `gso off` alone leaves UDP GSO (tx-udp-segmentation)
# and the tunnel/list features, whose skbs would reach the tap unsegmented
NO_SEGMENTATION = ("tso", "off", "gso", "off", "tx-udp-segmentation", "off",
                   "tx-udp_tnl-segmentation", "off", "tx-udp_tnl-csum-segmentation", "off",
                   "tx-gso-list", "off", "tx-gre-segmentation", "off",
                   "tx-gre-csum-segmentation", "off", "tx-ipxip4-segmentation", "off",
                   "tx-ipxip6-segmentation", "off", "tx-sctp-segmentation", "off")


@dataclass(frozen=True)
class Case:
    """One recording: traffic, topology and the receiver context gropcap needs."""

    what: str
    app: tuple[str, ...]                      # ("iperf3", args...) or ("udp"|"rr", args...)
    server: str = "v4"                        # v4 | v6 | vx | routed
    router: str | None = None                 # None | "ecn" | "lossreorder" | "userfwd"
    mtu: int = 1500
    bpf: str = "tcp"
    sender_sysctls: tuple[str, ...] = ()
    gropcap: dict = field(default_factory=dict)  # options that model this receiver


CASES: dict[str, Case] = {
    "bulk": Case("iperf3 IPv4, 1 stream", ("iperf3", "-n", "1500K", "-b", "20M")),
    "p8": Case("iperf3 IPv4, 8 parallel streams",
               ("iperf3", "-P", "8", "-n", "200K", "-b", "2500K")),
    "ipv6": Case("iperf3 IPv6, 1 stream", ("iperf3", "-n", "1500K", "-b", "20M"), server="v6",
                 bpf="ip6 and tcp"),
    "ecn": Case("iperf3 IPv4 with ECN through a router that sets CE on 1 ECT(0) packet in 8",
                ("iperf3", "-n", "1500K", "-b", "20M"), server="routed", router="ecn",
                sender_sysctls=("net.ipv4.tcp_ecn=1",)),
    "nots": Case("iperf3 IPv4, TCP timestamps off (sender sysctl)",
                 ("iperf3", "-n", "1500K", "-b", "20M"),
                 sender_sysctls=("net.ipv4.tcp_timestamps=0",)),
    "mss536": Case("iperf3 IPv4, MSS 536 (iperf3 -M 536)",
                   ("iperf3", "-M", "536", "-n", "600K", "-b", "8M")),
    "mtu9000": Case("iperf3 IPv4, veth MTU 9000", ("iperf3", "-n", "4M", "-b", "50M"),
                    mtu=9000),
    "lossreorder": Case("iperf3 IPv4 through a router: 1.5% of data frames dropped, 2% "
                        "reordered behind their burst (nftables + a detour namespace)",
                        ("iperf3", "-n", "1500K", "-b", "20M"), server="routed",
                        router="lossreorder"),
    "vxlan": Case("iperf3 IPv4 through VXLAN VNI 4242 (vxlan device on the receiver)",
                  ("iperf3", "-n", "1200K", "-b", "20M"), server="vx", bpf="udp port 4789",
                  gropcap={"udp_tunnels": "vxlan:4789"}),
    "udpgso": Case("UDP GSO sender (UDP_SEGMENT 1400 x 16) into a UDP_GRO socket",
                   ("udp", "1400", "16", "80", "2000"), bpf="udp port 7000",
                   gropcap={"udp_gro": "socket"}),
    # Not in the default set: a userspace forwarder sends each frame with its own syscall,
    # and each such send is its own NAPI poll on the receiver (docs/gro-model.md).
    "userfwd": Case("iperf3 IPv4 through a userspace AF_PACKET forwarder: 1.5% loss, 2% "
                    "reordered", ("iperf3", "-n", "1500K", "-b", "20M"), server="routed",
                    router="userfwd"),
    "rr": Case("40 short TCP connections, 4 requests of 6000 bytes each, 100-byte answers",
               ("rr", "40", "4", "6000", "100")),
}


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def napi_polls(perf_data: Path, dev: str, clock_offset_ns: int | None = None) -> dict:
    """The receiving device's NAPI polls from a ``perf record -e napi:napi_poll`` file:
    how many polls, how many frames each took (``work``; ``budget`` is the weight), and
    how many used the whole budget (after which ``__napi_poll`` flushes GRO: all held
    packets when HZ < 1000). ``clock_offset_ns`` (perf recorded on CLOCK_MONOTONIC; this is
    CLOCK_REALTIME - CLOCK_MONOTONIC, the taps' clock): also the tracepoint's time of each
    poll with work (``time_ns``, on the taps' clock). The tracepoint fires in
    ``__napi_poll`` right after ``veth_poll`` returned, so after the poll's
    ``napi_complete_done`` flush (under budget) and before the full-budget flush."""
    times = clock_offset_ns is not None
    text = subprocess.run(["perf", "script", "--ns", "-F", "time,trace", "-i",
                           str(perf_data)] if times else ["perf", "script", "-i",
                                                          str(perf_data)],
                          capture_output=True, text=True).stdout
    work, budget, when = [], 0, []
    for line in text.splitlines():
        if f"for device {dev} " in line:
            f = line.split()
            work.append(int(f[f.index("work") + 1]))
            budget = int(f[f.index("budget") + 1])
            if times:
                sec, ns = f[0].rstrip(":").split(".")
                when.append(int(sec) * 10**9 + int(ns.ljust(9, "0")) + clock_offset_ns)
    busy = [w for w in work if w]
    hist: dict[int, int] = {}
    for w in busy:
        hist[w] = hist.get(w, 0) + 1
    return {"source": "perf record -e napi:napi_poll (tracepoint in __napi_poll)",
            "polls_with_work": len(busy), "polls_without_work": len(work) - len(busy),
            "frames": sum(busy), "budget": budget,
            "full_budget_polls": sum(1 for w in busy if w >= budget > 0),
            "work_histogram": {str(k): hist[k] for k in sorted(hist)},
            # the polls with work in the order they ran: they took the wire view's frames
            # in order, so this places every poll boundary on the wire view
            "work_sequence": busy,
            **({"time_ns": [t for t, w in zip(when, work) if w]} if times else {})}


def _realtime_offset() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC in ns (the tightest of a few readings): perf
    records on CLOCK_MONOTONIC (CLOCK_REALTIME is refused for tracepoints here), tcpdump
    stamps with the real-time clock."""
    best = None
    for _ in range(20):
        a = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r = time.time_ns()
        b = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


def kernel_hz() -> int | None:
    """CONFIG_HZ of the running kernel from /proc/config.gz or /boot/config-*, else None."""
    for p in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            text = (gzip.open(p, "rt") if p.endswith(".gz") else open(p)).read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
    return None


def tool_versions() -> dict:
    def first(*argv: str) -> str:
        r = subprocess.run(argv, capture_output=True, text=True)
        return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr) else ""
    return {"tcpdump": first("tcpdump", "--version"), "iperf3": first("iperf3", "--version"),
            "ip": first("ip", "-V"), "nft": first("nft", "--version") if shutil.which("nft")
            else "", "python": sys.version.split()[0]}


def merge_pcaps(out: Path, *paths: Path) -> int:
    """Write the records of little-endian microsecond pcaps (same link type, as tcpdump
    writes them) to ``out`` in time order, the earlier file first on equal times: one
    capture of both directions, as a tap on the link would take. Returns the records."""
    recs, header = [], b""
    for k, path in enumerate(paths):
        data, off = Path(path).read_bytes(), 24
        header = header or data[:24]
        if data[20:24] != header[20:24]:
            raise RuntimeError(f"{path}: another link type than {paths[0]}")
        while off + 16 <= len(data):
            sec, usec, incl = struct.unpack_from("<III", data, off)
            recs.append(((sec, usec, k, off), data[off:off + 16 + incl]))
            off += 16 + incl
    recs.sort(key=lambda r: r[0])
    out.write_bytes(header + b"".join(r for _, r in recs))
    return len(recs)


class _Bridge(threading.Thread):
    """Userspace L2 forwarder between two veths (AF_PACKET), losing and reordering TCP data
    frames on the way ``a -> b`` only; ``b -> a`` is forwarded as is."""

    def __init__(self, ns: str, a: str, b: str, loss: float, reorder: float, seed: int):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.rng = random.Random(seed)
        self.loss, self.reorder = loss, reorder
        self.dropped = self.reordered = self.forwarded = 0
        with inside_netns(ns):     # a socket stays in the namespace it was made in
            self.sa, self.sb = self._sock(a), self._sock(b)

    @staticmethod
    def _sock(dev: str) -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((dev, ETH_P_ALL))
        return s

    @staticmethod
    def _tcp_data(f: bytes) -> bool:
        if len(f) < 54 or f[12:14] != b"\x08\x00" or f[23] != 6:
            return False
        ihl = (f[14] & 15) * 4
        tot = int.from_bytes(f[16:18], "big")
        return tot - ihl - (f[14 + ihl + 12] >> 4) * 4 > 0

    def run(self) -> None:
        held: list[list] = []      # [frame, frames still to pass before it goes]
        while not self.stop.is_set():
            r, _, _ = select.select([self.sa, self.sb], [], [], 0.05)
            for s in r:
                f, addr = s.recvfrom(65536)
                if addr[2] == socket.PACKET_OUTGOING:
                    continue
                if s is self.sb:
                    self.sa.send(f)
                    continue
                if self._tcp_data(f):
                    x = self.rng.random()
                    if x < self.loss:
                        self.dropped += 1
                        continue
                    if x < self.loss + self.reorder:
                        held.append([f, 2])
                        self.reordered += 1
                        continue
                self.sb.send(f)
                self.forwarded += 1
                for h in held:
                    h[1] -= 1
                for h in [h for h in held if h[1] <= 0]:
                    self.sb.send(h[0])
                    held.remove(h)
            if not r:                  # idle: release whatever is held
                for h in held:
                    self.sb.send(h[0])
                held.clear()


class PairLab:
    """Sender, receiver (and router) namespaces for one case; removed by :meth:`close`."""

    def __init__(self, case: Case) -> None:
        self.case = case
        suf = secrets.token_hex(3)
        self.suf = suf
        self.ns_s, self.ns_r, self.ns_x, self.ns_y = (f"gropcap-p{k}-{suf}" for k in "srxy")
        self.vs, self.vr = f"ps{suf}", f"pr{suf}"       # sender's, receiver's veth
        self.xa, self.xb = f"pa{suf}", f"pb{suf}"       # router: towards sender, receiver
        self.procs: list[subprocess.Popen] = []
        self.bridge: _Bridge | None = None
        self.router_note = "none: sender and receiver share one veth pair"

    def ns(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    @property
    def wire_ns_dev(self) -> tuple[str, str]:
        return (self.ns_x, self.xb) if self.case.router else (self.ns_s, self.vs)

    def setup(self) -> None:
        c, s, r, x = self.case, self.ns_s, self.ns_r, self.ns_x
        routed = c.router is not None
        for n in (s, r) + ((x,) if routed else ()):
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        if routed:
            sh("ip", "link", "add", self.vs, "netns", s, "type", "veth", "peer", "name",
               self.xa, "netns", x)
            sh("ip", "link", "add", self.xb, "netns", x, "type", "veth", "peer", "name",
               self.vr, "netns", r)
        else:
            sh("ip", "link", "add", self.vs, "netns", s, "type", "veth", "peer", "name",
               self.vr, "netns", r)
        devs = [(s, self.vs), (r, self.vr)] + ([(x, self.xa), (x, self.xb)] if routed else [])
        for n, d in devs:
            sh("ip", "-n", n, "link", "set", d, "mtu", str(c.mtu), "up")
            self.ns(n, "sysctl", "-qw", f"net.ipv6.conf.{d}.disable_ipv6="
                    + ("0" if c.server in ("v6",) else "1"))
        # Sender side of the receiver's link: wire-sized frames (no TSO/GSO), no GRO.
        wns, wdev = self.wire_ns_dev
        self.ns(wns, "ethtool", "-K", wdev, *NO_SEGMENTATION, "gro", "off")
        # veth has GRO off by default; turning it on also gives the veth its NAPI
        # (veth_gro_requested -> veth_napi_enable), which the receiver is about.
        self.ns(r, "ethtool", "-K", self.vr, "gro", "on")
        if wdev != self.vs:
            self.ns(s, "ethtool", "-K", self.vs, *NO_SEGMENTATION, "gro", "off")
        if c.router in ("ecn", "lossreorder"):
            self._kernel_router()
        elif c.router == "userfwd":
            for d in (self.xa, self.xb):
                self.ns(x, "ethtool", "-K", d, "gro", "off", "tso", "off", "gso", "off")
            # The forwarder copies bytes: the end hosts must put full checksums in them
            # (veth keeps CHECKSUM_PARTIAL across the pair, AF_PACKET would pass it on).
            self.ns(s, "ethtool", "-K", self.vs, "tx", "off")
            self.ns(r, "ethtool", "-K", self.vr, "tx", "off")
            sh("ip", "-n", s, "addr", "add", f"{UNDERLAY4[0]}/24", "dev", self.vs)
            sh("ip", "-n", r, "addr", "add", f"{UNDERLAY4[1]}/24", "dev", self.vr)
            self.bridge = _Bridge(x, self.xa, self.xb, 0.015, 0.02,
                                  seed=int(self.suf, 16))
            self.bridge.start()
            self.router_note = ("userspace L2 forwarder in a router namespace (AF_PACKET on "
                                "both veths; sch_netem not in this kernel): TCP data frames "
                                "towards the receiver dropped with p=0.015, held back behind "
                                "the next 2 frames with p=0.02")
        else:
            for n, d, a4, a6 in ((s, self.vs, UNDERLAY4[0], UNDERLAY6[0]),
                                 (r, self.vr, UNDERLAY4[1], UNDERLAY6[1])):
                sh("ip", "-n", n, "addr", "add", f"{a4}/24", "dev", d)
                if c.server == "v6":
                    sh("ip", "-n", n, "addr", "add", f"{a6}/64", "dev", d, "nodad")
        if c.server == "vx":
            add_vxlan(self.ns, s, r, self.vs, self.vr, c.mtu - 50)
        for kv in c.sender_sysctls:
            self.ns(s, "sysctl", "-qw", kv)
        for _ in range(50):
            if self.ns(s, "ping", "-6" if c.server == "v6" else "-4", "-c1", "-W1",
                       self.server_addr, check=False).returncode == 0:
                break
            time.sleep(0.1)

    def _kernel_router(self) -> None:
        """IPv4 forwarding in the router namespace; the nftables rules of the case."""
        s, r, x = self.ns_s, self.ns_r, self.ns_x
        # no GRO on the router's ingress: a burst is forwarded frame by frame, in order
        self.ns(x, "ethtool", "-K", self.xa, "gro", "off")
        sh("ip", "-n", s, "addr", "add", f"{UNDERLAY4[0]}/24", "dev", self.vs)
        sh("ip", "-n", x, "addr", "add", "10.200.0.254/24", "dev", self.xa)
        sh("ip", "-n", x, "addr", "add", f"{ROUTED4[1]}/24", "dev", self.xb)
        sh("ip", "-n", r, "addr", "add", f"{ROUTED4[0]}/24", "dev", self.vr)
        sh("ip", "-n", s, "route", "add", "default", "via", "10.200.0.254")
        sh("ip", "-n", r, "route", "add", "default", "via", ROUTED4[1])
        self.ns(x, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        if self.case.router == "ecn":
            rules = (f"add table ip gropcap; add chain ip gropcap cemark {{ type filter hook "
                     f"forward priority 0; }}; add rule ip gropcap cemark oifname \"{self.xb}\" "
                     f"ip ecn ect0 numgen random mod 8 == 0 ip ecn set ce")
            self.ns(r, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")
            what = "sets CE on 1 ECT(0) packet in 8 (sch_red/fq_codel not in this kernel)"
        else:
            # Loss: nftables drops 1.5% of the TCP data frames towards the receiver.
            # Reordering without sch_netem: 2% of them are marked and policy-routed through
            # a detour namespace and back; each hop queues the frame at the tail of the
            # CPU's backlog (veth without NAPI -> netif_rx), behind the rest of the burst
            # it came in, so it reaches the receiver after later frames.
            y, xc, yc = self.ns_y, f"pc{self.suf}", f"pd{self.suf}"
            sh("ip", "netns", "add", y)
            sh("ip", "link", "add", xc, "netns", x, "type", "veth", "peer", "name", yc,
               "netns", y)
            for n, d, a in ((x, xc, "10.203.0.1/24"), (y, yc, "10.203.0.2/24")):
                self.ns(n, "sysctl", "-qw", f"net.ipv6.conf.{d}.disable_ipv6=1")
                sh("ip", "-n", n, "link", "set", d, "mtu", str(self.case.mtu), "up")
                sh("ip", "-n", n, "addr", "add", a, "dev", d)
                self.ns(n, "ethtool", "-K", d, "gro", "off")
            self.ns(y, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            sh("ip", "-n", y, "route", "add", "default", "via", "10.203.0.1")
            for n in (x, y):
                for conf in ("all", "default", xc if n == x else yc):
                    self.ns(n, "sysctl", "-qw", f"net.ipv4.conf.{conf}.rp_filter=0")
            sh("ip", "-n", x, "rule", "add", "fwmark", "1", "iif", self.xa, "table", "100")
            sh("ip", "-n", x, "route", "add", "default", "via", "10.203.0.2", "table", "100")
            data = "ip protocol tcp ip length > 100"
            rules = (f"add table ip gropcap; add chain ip gropcap pre {{ type filter hook "
                     f"prerouting priority -150; }}; "
                     f"add rule ip gropcap pre iifname \"{self.xa}\" {data} "
                     f"numgen random mod 1000 < 15 drop; "
                     f"add rule ip gropcap pre iifname \"{self.xa}\" {data} "
                     f"numgen random mod 100 < 2 meta mark set 1")
            what = ("drops 1.5% of the TCP data frames and sends 2% through a detour "
                    "namespace (policy routing on the mark), which puts them behind the rest "
                    "of their burst (sch_netem not in this kernel)")
        self.ns(x, "nft", rules)
        self.router_note = (f"kernel IPv4 forwarding in a router namespace; nftables {what}: "
                            + rules)

    @property
    def server_addr(self) -> str:
        return {"v4": UNDERLAY4[1], "v6": UNDERLAY6[1], "vx": OVERLAY4[1],
                "routed": UNDERLAY4[1] if self.case.router == "userfwd" else ROUTED4[0]
                }[self.case.server]

    def receiver_context(self) -> dict:
        r, d = self.ns_r, self.vr
        feats = self.ns(r, "ethtool", "-k", d).stdout
        def feat(name: str) -> str:
            for line in feats.splitlines():
                if line.strip().startswith(name + ":"):
                    return line.split(":", 1)[1].strip()
            return ""
        link = json.loads(self.ns(r, "ip", "-d", "-j", "link", "show", d).stdout)[0]
        sysfs = f"/sys/class/net/{d}"
        return {
            "device": "veth", "mtu": link.get("mtu"),
            "gro": feat("generic-receive-offload"), "rx_gro_list": feat("rx-gro-list"),
            "rx_udp_gro_forwarding": feat("rx-udp-gro-forwarding"),
            "gro_max_size": link.get("gro_max_size"),
            "gro_ipv4_max_size": link.get("gro_ipv4_max_size"),
            "gro_flush_timeout_ns": int(self.ns(r, "cat", f"{sysfs}/gro_flush_timeout").stdout),
            "napi_defer_hard_irqs": int(self.ns(r, "cat",
                                                f"{sysfs}/napi_defer_hard_irqs").stdout),
            "rx_queues": len([q for q in self.ns(r, "ls", f"{sysfs}/queues").stdout.split()
                              if q.startswith("rx-")]),
            "netdev_budget": int(_read("/proc/sys/net/core/netdev_budget") or 0),
            "dev_weight": int(_read("/proc/sys/net/core/dev_weight") or 0),
        }

    def _bg(self, ns: str, *argv: str, out=subprocess.DEVNULL,
            err=subprocess.DEVNULL) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=out, stderr=err,
                             text=True)
        self.procs.append(p)
        return p

    def run_traffic(self) -> None:
        c, addr = self.case, self.server_addr
        kind, args = c.app[0], c.app[1:]
        if kind == "iperf3":
            srv = self._bg(self.ns_r, "iperf3", "-s", "-1")
            time.sleep(0.5)     # the timing the committed pairs were recorded with
            wait_listening(self.ns_r)
            self.iperf_out = self.ns(self.ns_s, "iperf3", "-c", addr, *args).stdout
            srv.wait(timeout=10)
        elif kind == "udp":
            gso, segs, sends, gap = args
            srv = self._bg(self.ns_r, sys.executable, str(APPS), "udp-recv", "7000",
                           str(int(gso) * int(segs) * int(sends)), out=subprocess.PIPE)
            srv.stdout.readline()
            self.ns(self.ns_s, sys.executable, str(APPS), "udp-send", addr, "7000", gso, segs,
                    sends, gap)
            srv.wait(timeout=10)
        elif kind == "rr":
            srv = self._bg(self.ns_r, sys.executable, str(APPS), "rr-server", "7001", args[2],
                           args[3], out=subprocess.PIPE)
            srv.stdout.readline()
            self.ns(self.ns_s, sys.executable, str(APPS), "rr-client", addr, "7001", *args)
            srv.kill()
            srv.wait(timeout=10)

    def record(self, out: Path, name: str, acks: bool = False) -> list[Path]:
        """Capture the case into ``out/name.{wire,postgro}.pcap`` + ``out/name.json``;
        ``acks``: also ``name.acks.pcap`` and ``name.acks_wire.pcap`` (module docstring)."""
        kinds = ("wire", "postgro") + (("acks", "acks_wire") if acks else ())
        finals = [out / f"{name}.{k}.pcap" for k in kinds]
        tmps = [out / f".{name}.{self.suf}.{k}.pcap" for k in kinds]
        wns, wdev = self.wire_ns_dev
        taps = ((wns, wdev, "out"), (self.ns_r, self.vr, "in"), (self.ns_r, self.vr, "out"),
                (wns, wdev, "in"))
        dumps = [self._bg(ns, "tcpdump", "-i", dev, "-Q", q, "-s", str(SNAPLEN), "-U", "-n",
                          "--immediate-mode",
                          "-Z", "root", "-w", str(t), self.case.bpf, err=subprocess.PIPE)
                 for (ns, dev, q), t in zip(taps, tmps)]
        perf_data = out / f".{name}.{self.suf}.perf"
        perf = None
        try:
            for d in dumps:   # both taps up before the first SYN (a busy host is slow)
                line = d.stderr.readline()
                if "listening on" not in line:
                    raise RuntimeError(f"tcpdump did not start: {line.strip()}")
            if shutil.which("perf"):
                # the receiver's NAPI polls as the kernel ran them (napi:napi_poll: work)
                perf = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "napi:napi_poll",
                                         "-k", "CLOCK_MONOTONIC",
                                         "-o", str(perf_data)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                self.procs.append(perf)
                time.sleep(1.0)
            time.sleep(0.3)
            self.run_traffic()
            # tcpdump may lag on a busy host: stop it once its files stopped growing
            sizes = None
            while sizes != (sizes := [t.stat().st_size if t.exists() else 0 for t in tmps]):
                time.sleep(0.7)
            for d in dumps:
                d.send_signal(signal.SIGINT)
            for d, t in zip(dumps, tmps):
                tail = d.communicate(timeout=10)[1]
                # "N packets captured", "M packets received by filter", "K ... dropped".
                # (libpcap applies -Q in user space here, so "received by filter" also
                # counts the other direction and cannot be compared with "captured")
                n = {k: int(v.split()[0]) for k in ("captured", "dropped by kernel")
                     for v in tail.splitlines() if v.endswith(k)}
                if len(n) != 2 or n["dropped by kernel"]:
                    raise RuntimeError(f"tcpdump lost frames on {t.name}: {tail!r}")
            polls = None
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait(timeout=30)
                polls = napi_polls(perf_data, self.vr, clock_offset_ns=_realtime_offset())
            meta = {
                "name": name, "what": self.case.what,
                "wire": finals[0].name, "postgro": finals[1].name,
                "wire_tap": f"tcpdump -Q out on the veth that sends to the receiver "
                            f"({'router' if self.case.router else 'sender'}; tso/gso off)",
                "postgro_tap": "tcpdump -Q in on the receiving veth (GRO on)",
                "bpf": self.case.bpf, "snaplen": SNAPLEN,
                "traffic": list(self.case.app), "sender_sysctls": list(self.case.sender_sysctls),
                "router": self.router_note,
                "receiver": self.receiver_context(),
                "kernel": os.uname().release, "hz": kernel_hz(),
                "cpus": os.cpu_count(),
                "gropcap_options": self.case.gropcap,
                "tools": tool_versions(),
            }
            if acks:
                meta["acks"] = finals[2].name
                meta["acks_tap"] = "tcpdump -Q out on the receiving veth (the receiver's ACKs)"
                meta["both"] = f"{name}.both.pcap"
                meta["both_tap"] = ("the wire view's veth in both directions, as one tap on "
                                    "the link: the wire view merged in time order with "
                                    "tcpdump -Q in on that veth (the receiver's ACKs where "
                                    "they reach the sender's side)")
            if polls is not None:
                meta["kernel_polls"] = polls
            if self.bridge is not None:
                meta["router_counts"] = {"forwarded": self.bridge.forwarded,
                                         "dropped": self.bridge.dropped,
                                         "reordered": self.bridge.reordered}
            biggest = max(frame_lengths(tmps[0]), default=0)
            if biggest > self.case.mtu + 14:
                raise RuntimeError(f"wire view holds a {biggest}-byte frame above MTU "
                                   f"{self.case.mtu}: segmentation offload left on")
            for t, f in zip(tmps, finals):
                os.replace(t, f)
            if acks:
                merge_pcaps(out / meta["both"], finals[0], finals[3])
                finals[3].unlink()
                finals[3] = out / meta["both"]
            (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        finally:
            for t in tmps + [perf_data]:
                t.unlink(missing_ok=True)
        return finals

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.stop.set()
            self.bridge.join(timeout=2)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for n in (self.ns_s, self.ns_r, self.ns_x, self.ns_y):
            sh("ip", "netns", "del", n, check=False)


EXTRA_CASES = ("userfwd",)   # recorded only when named
REQUIRED_TOOLS = ("ip", "iperf3", "tcpdump", "ethtool", "nft")


def missing_tools() -> list[str]:
    return [t for t in REQUIRED_TOOLS if shutil.which(t) is None]


def record_case(out: Path, name: str, case: Case | None = None,
                acks: bool = False) -> list[Path]:
    """Record one case (root): ``CASES[name]``, or ``case`` under that name. Returns the
    wire and post-GRO paths (then the two ACK views with ``acks``)."""
    lab = PairLab(case or CASES[name])
    try:
        lab.setup()
        return lab.record(out, name, acks=acks)
    finally:
        lab.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path,
                    default=Path(__file__).resolve().parent / "pairs")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--acks", action="store_true",
                    help="also record the receiver's ACKs (NAME.acks.pcap, NAME.both.pcap) "
                         "and the polls' times")
    ap.add_argument("cases", nargs="*", help="subset of the cases (default: all)")
    a = ap.parse_args(argv)
    if a.list:
        for k, c in CASES.items():
            print(f"{k:12} {c.what}")
        return 0
    a.cases = a.cases or [k for k in CASES if k not in EXTRA_CASES]
    unknown = set(a.cases) - set(CASES)
    if unknown:
        ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if os.geteuid() != 0:
        print("make_pairs.py: needs root (ip netns, tcpdump)", file=sys.stderr)
        return 1
    if missing_tools():
        print(f"make_pairs.py: not found: {', '.join(missing_tools())}", file=sys.stderr)
        return 1
    a.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for name in a.cases:
        paths = record_case(a.out, name, acks=a.acks)
        print(f"{name}: " + " + ".join(f"{f.stat().st_size}" for f in paths) + " bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
