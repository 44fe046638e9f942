"""Network-namespace plumbing for the live-kernel replay (Linux, root).

Creates a FRESH pair of namespaces with unique random names, one veth pair across them, and
opens AF_PACKET sockets inside them with ``setns(2)`` through ctypes (Python 3.11 has no
``os.setns``): a socket stays bound to the namespace it was created in, so one process can
hold the sender socket of one namespace and the receiver socket of the other. Commands are
run as argv lists (``ip``, ``ethtool``, ``sysctl``, ``tee``), never as shell strings. Only
namespaces created here are deleted, on close, on error and on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
from contextlib import contextmanager

from gropcap.errors import GropcapError

CLONE_NEWNET = 0x40000000          # include/uapi/linux/sched.h
NETNS_RUN_DIR = "/run/netns"       # where `ip netns add` bind-mounts a namespace

_libc = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _run(argv: list[str], *, input: bytes | None = None, check: bool = True) -> str:
    p = subprocess.run(argv, input=input, capture_output=True, timeout=30)
    if check and p.returncode != 0:
        raise GropcapError(f"command failed ({p.returncode}): {' '.join(argv)}: "
                           f"{p.stderr.decode(errors='replace').strip()}")
    return p.stdout.decode(errors="replace")


def check_environment() -> None:
    """Raise :class:`GropcapError` unless this is Linux, root, and ``ip netns`` works."""
    if not os.uname().sysname == "Linux":
        raise GropcapError("kernel replay needs Linux (network namespaces, veth, AF_PACKET)")
    if os.geteuid() != 0:
        raise GropcapError("kernel replay needs root (network namespaces and raw sockets)",
                           hint="run as root, e.g. with sudo")
    for tool in ("ip", "ethtool"):
        if shutil.which(tool) is None:
            raise GropcapError(f"kernel replay needs the '{tool}' command",
                               hint="install iproute2 and ethtool")
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if p.returncode != 0:
        raise GropcapError("'ip netns' is not available: "
                           + p.stderr.decode(errors="replace").strip())


class VethPair:
    """Two fresh namespaces joined by a veth pair: ``tx`` (sender) and ``rx`` (GRO receiver).

    Use as a context manager; the namespaces (and with them the veth) are deleted on exit.
    """

    def __init__(self, *, mtu: int = 65535, flush_timeout_ns: int = 20_000_000,
                 defer: int = 1, prefix: str = "gropcap", udp_tunnels=()):
        tag = secrets.token_hex(4)
        self.ns_tx = f"{prefix}-tx-{tag}"
        self.ns_rx = f"{prefix}-rx-{tag}"
        self.dev_tx = f"gtx{tag}"
        self.dev_rx = f"grx{tag}"
        self.mtu = int(mtu)
        self.flush_timeout_ns = int(flush_timeout_ns)
        self.defer = int(defer)
        # UDP tunnel devices in the receiver namespace: their sockets give udp_gro_receive
        # a gro_receive hook for the port (("vxlan", 4789), ("vxlan-gpe", 4790))
        self.udp_tunnels = tuple(udp_tunnels)
        self.tunnel_devs: list[str] = []
        self._created: list[str] = []
        self._old_handlers: dict[int, object] = {}

    # --- lifecycle ---
    def __enter__(self) -> "VethPair":
        check_environment()
        self._install_signal_handlers()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, on_term)
            except (ValueError, OSError):
                pass

    def _restore_signal_handlers(self) -> None:
        for sig, h in self._old_handlers.items():
            try:
                signal.signal(sig, h)
            except (ValueError, OSError, TypeError):
                pass
        self._old_handlers.clear()

    def close(self) -> None:
        """Delete the namespaces this object created (and nothing else)."""
        while self._created:
            ns = self._created.pop()
            _run(["ip", "netns", "del", ns], check=False)
        self._restore_signal_handlers()

    def _setup(self) -> None:
        for ns in (self.ns_tx, self.ns_rx):
            _run(["ip", "netns", "add", ns])
            self._created.append(ns)
            # no IPv6 autoconfiguration chatter (RS, MLD, DAD) on the test link
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                  "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
        _run(["ip", "link", "add", self.dev_tx, "netns", self.ns_tx, "type", "veth",
              "peer", "name", self.dev_rx, "netns", self.ns_rx])
        for ns, dev in ((self.ns_tx, self.dev_tx), (self.ns_rx, self.dev_rx)):
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(self.mtu)])
        # veth_skb_is_eligible_for_gro(): the SENDING device must not have TSO, else veth
        # bypasses the peer's NAPI/GRO; GSO off so nothing is re-segmented on the way.
        _run(["ip", "netns", "exec", self.ns_tx, "ethtool", "-K", self.dev_tx,
              "tso", "off", "gso", "off"])
        # GRO on the receiver gives veth a NAPI instance (veth_set_features, 5.13+).
        _run(["ip", "netns", "exec", self.ns_rx, "ethtool", "-K", self.dev_rx,
              "gro", "on", "tso", "off"])
        self.set_rx_sysfs("gro_flush_timeout", self.flush_timeout_ns)
        self.set_rx_sysfs("napi_defer_hard_irqs", self.defer)
        for ns, dev in ((self.ns_tx, self.dev_tx), (self.ns_rx, self.dev_rx)):
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
        for k, (kind, port) in enumerate(self.udp_tunnels):
            self.add_udp_tunnel(kind, int(port), f"gtun{k}")

    def add_udp_tunnel(self, kind: str, port: int, name: str) -> None:
        """Create and bring up a UDP tunnel device in the receiver namespace; bringing it
        up opens its UDP socket (vxlan_sock_add), which is what GRO looks up."""
        if kind == "vxlan":
            spec = ["type", "vxlan", "external", "dstport", str(port)]
        elif kind == "vxlan-gpe":
            spec = ["type", "vxlan", "gpe", "external", "dstport", str(port)]
        elif kind == "geneve":
            spec = ["type", "geneve", "external", "dstport", str(port)]
        else:
            raise GropcapError(f"replay cannot create a {kind!r} tunnel socket",
                               hint="vxlan, vxlan-gpe and geneve devices are supported")
        p = subprocess.run(["ip", "-n", self.ns_rx, "link", "add", name] + spec,
                           capture_output=True)
        if p.returncode != 0:
            raise GropcapError(f"cannot create a {kind} device: "
                               + p.stderr.decode(errors="replace").strip(),
                               hint="the kernel may lack the module")
        _run(["ip", "-n", self.ns_rx, "link", "set", "dev", name, "up"])
        self.tunnel_devs.append(name)

    def set_rx_sysfs(self, attr: str, value: int) -> None:
        """Write /sys/class/net/<rx dev>/<attr> inside the receiver namespace."""
        _run(["ip", "netns", "exec", self.ns_rx, "tee",
              f"/sys/class/net/{self.dev_rx}/{attr}"], input=f"{int(value)}\n".encode())

    def rx_sysfs(self, attr: str) -> str:
        """Read /sys/class/net/<rx dev>/<attr> inside the receiver namespace."""
        return _run(["ip", "netns", "exec", self.ns_rx, "cat",
                     f"/sys/class/net/{self.dev_rx}/{attr}"]).strip()

    def ethtool_stats(self, which: str = "rx") -> dict[str, int]:
        """``ethtool -S`` of one end, as a dict."""
        ns, dev = (self.ns_rx, self.dev_rx) if which == "rx" else (self.ns_tx, self.dev_tx)
        out = _run(["ip", "netns", "exec", ns, "ethtool", "-S", dev], check=False)
        stats = {}
        for line in out.splitlines():
            k, _, v = line.strip().partition(":")
            if v.strip().lstrip("-").isdigit():
                stats[k.strip()] = int(v)
        return stats

    # --- sockets inside a namespace ---
    @contextmanager
    def inside(self, ns: str):
        """Run the body with this thread in namespace ``ns`` (sockets made there stay)."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(os.path.join(NETNS_RUN_DIR, ns), os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
            os.close(own)

    def packet_socket(self, side: str, *, proto: int = 0, rcvbuf: int = 0,
                      sndbuf: int = 0) -> tuple[socket.socket, int]:
        """An AF_PACKET SOCK_RAW socket bound to one end; returns (socket, ifindex)."""
        ns, dev = (self.ns_rx, self.dev_rx) if side == "rx" else (self.ns_tx, self.dev_tx)
        with self.inside(ns):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
            ifindex = socket.if_nametoindex(dev)
        try:
            if rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)     # SO_RCVBUFFORCE
            if sndbuf:
                s.setsockopt(socket.SOL_SOCKET, 32, sndbuf)     # SO_SNDBUFFORCE
            s.bind((dev, proto))
        except BaseException:
            s.close()
            raise
        return s, ifindex
