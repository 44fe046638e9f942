"""Network-namespace plumbing for the live-kernel replay (Linux, root).

Creates a FRESH pair of namespaces with unique random names, one veth pair across them, and
opens AF_PACKET sockets inside them with ``setns(2)`` through ctypes (Python 3.11 has no
``os.setns``): a socket stays bound to the namespace it was created in, so one process can
hold the sender socket of one namespace and the receiver socket of the other. Commands are
run as argv lists (``ip``, ``ethtool``, ``sysctl``, ``tee``), never as shell strings. Only
namespaces created here are deleted, on close, on error and on Ctrl-C / SIGTERM.

SIGKILL, an OOM kill or a power cut skip that clean-up, so before creating a pair its owner
is recorded in ``/run/gropcap/replay-<tag>.json`` (pid, the process start time from
``/proc/<pid>/stat``, the boot id and the PID namespace): :func:`scan_namespaces` tells a
live replay's namespaces from those whose owner is gone even when the pid was reused, and
:func:`cleanup_stale` deletes only the latter (``gropcap kernel-replay --cleanup-stale``).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

from gropcap.errors import GropcapError, ReplayEnvironmentError

CLONE_NEWNET = 0x40000000          # include/uapi/linux/sched.h
NETNS_RUN_DIR = "/run/netns"       # where `ip netns add` bind-mounts a namespace
# owner records of the namespace pairs; /run is a tmpfs, so records and namespaces both end
# with the boot. GROPCAP_RUN_DIR moves it (tests, or a host where /run is not writable).
RUN_DIR = "/run/gropcap"
RUN_DIR_ENV = "GROPCAP_RUN_DIR"

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


# ip link kind -> (kernel module, build option) of the devices a replay may create
TUNNEL_MODULES = {
    "vxlan": ("vxlan", "CONFIG_VXLAN"), "vxlan-gpe": ("vxlan", "CONFIG_VXLAN"),
    "geneve": ("geneve", "CONFIG_GENEVE"), "gre": ("ip_gre", "CONFIG_NET_IPGRE"),
    "gretap": ("ip_gre", "CONFIG_NET_IPGRE"), "erspan": ("ip_gre", "CONFIG_NET_IPGRE"),
    "ip6gre": ("ip6_gre", "CONFIG_IPV6_GRE"), "ipip": ("ipip", "CONFIG_NET_IPIP"),
    "sit": ("sit", "CONFIG_IPV6_SIT"),
}


def kernel_config_option(option: str, release: str | None = None) -> str | None:
    """The value of a build option of the running kernel: ``"y"``, ``"m"``, ``"n"`` (not set)
    or None when no kernel config is readable (``/proc/config.gz``, then
    ``/boot/config-<release>``)."""
    import gzip

    release = release or os.uname().release
    for path, opener in (("/proc/config.gz", gzip.open),
                         (f"/boot/config-{release}", open)):
        try:
            with opener(path, "rt") as fh:
                for line in fh:
                    if line.startswith(option + "="):
                        return line.strip().split("=", 1)[1]
            return "n"
        except OSError:
            continue
    return None


def missing_device_error(kind: str, detail: str, config=kernel_config_option
                         ) -> ReplayEnvironmentError:
    """The error for an ``ip link add ... type KIND`` the kernel refused: which module, how
    to load it, or that this kernel cannot (built without it and without module support).

    ``config`` reads a build option (``kernel_config_option``; replaceable in tests).
    """
    module, option = TUNNEL_MODULES.get(kind, (kind, None))
    release = os.uname().release
    built = config(option) if option else None
    modules = config("CONFIG_MODULES")
    msg = f"cannot create a {kind} device ({detail})"
    if built == "y":
        hint = f"{option}=y: the {module} driver is built in; see the error above"
    elif built == "n" and modules == "n":
        msg = (f"cannot create a {kind} device: this kernel ({release}) lacks the {module} "
               f"module ({option} is not set) and cannot load modules (CONFIG_MODULES is "
               f"not set), so 'modprobe {module}' cannot help")
        hint = f"boot a kernel built with {option}=y or =m, or replay without {kind}"
    elif built == "n":
        msg = (f"cannot create a {kind} device: this kernel ({release}) was built without "
               f"the {module} module ({option} is not set), so 'modprobe {module}' will "
               f"not find it")
        hint = f"boot a kernel built with {option}=m or =y, or replay without {kind}"
    else:
        msg = (f"cannot create a {kind} device: the {module} module of this kernel "
               f"({release}) is not loaded ({detail})")
        hint = f"load it with 'modprobe {module}' (as root), then run again"
    return ReplayEnvironmentError(msg, hint=hint)


@contextmanager
def inside_netns(ns: str):
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


def check_environment() -> None:
    """Raise :class:`GropcapError` unless this is Linux, root, and ``ip netns`` works."""
    if not os.uname().sysname == "Linux":
        raise ReplayEnvironmentError(
            "kernel replay needs Linux (network namespaces, veth, AF_PACKET)")
    if os.geteuid() != 0:
        raise ReplayEnvironmentError(
            "kernel replay needs root (network namespaces and raw sockets)",
            hint="run as root, e.g. with sudo")
    for tool in ("ip", "ethtool"):
        if shutil.which(tool) is None:
            raise ReplayEnvironmentError(f"kernel replay needs the '{tool}' command",
                                         hint="install iproute2 and ethtool")
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if p.returncode != 0:
        raise ReplayEnvironmentError("'ip netns' is not available: "
                                     + p.stderr.decode(errors="replace").strip())


# ------------------------------------------------------------ who owns a namespace pair
_TAG_RE = re.compile(r"[0-9a-f]{8}")
# the names VethPair gives its namespaces with the default prefix
_GROPCAP_NS_RE = re.compile(r"gropcap-(?:tx|rx)-[0-9a-f]{8}")
_RECORD_RE = re.compile(r"replay-([0-9a-f]{8})\.json")


def run_dir() -> str:
    """The directory of the owner records: ``$GROPCAP_RUN_DIR`` or ``/run/gropcap``."""
    return os.environ.get(RUN_DIR_ENV) or RUN_DIR


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")       # "pid:[4026531836]"
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, starttime) of a process from /proc/<pid>/stat, or None if there is none.

    ``starttime`` (field 22, clock ticks after boot) tells a process apart from a later one
    that got the same pid. The command name (field 2) may hold spaces and parentheses, so
    fields are counted after its last ')'.
    """
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            data = fh.read().decode("ascii", errors="replace")
    except (OSError, ValueError):
        return None
    rest = data[data.rfind(")") + 2:].split()
    if len(rest) < 20 or not rest[19].isdigit():
        return None
    return rest[0], int(rest[19])            # fields 3 (state) and 22 (starttime)


@dataclass(frozen=True)
class OwnerRecord:
    """Who created one namespace pair: the contents of ``replay-<tag>.json``.

    ``pid`` with ``starttime`` (``/proc/<pid>/stat`` field 22) name one process even after
    pid reuse; ``boot_id`` and ``pidns`` say in which boot and PID namespace they mean it.
    """
    tag: str
    namespaces: tuple[str, ...]
    pid: int
    starttime: int
    boot_id: str
    pidns: str
    path: str = ""

    def to_json(self) -> str:
        return json.dumps({"version": 1, "tag": self.tag, "namespaces": list(self.namespaces),
                           "pid": self.pid, "starttime": self.starttime,
                           "boot_id": self.boot_id, "pidns": self.pidns,
                           "created_unix": round(time.time(), 3)}, sort_keys=True)


def current_owner(tag: str, namespaces) -> OwnerRecord:
    """The owner record of this process for the pair ``namespaces`` named with ``tag``."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return OwnerRecord(tag=tag, namespaces=tuple(namespaces), pid=pid,
                       starttime=stat[1] if stat else -1, boot_id=_boot_id(),
                       pidns=_pid_namespace())


def write_owner_record(rec: OwnerRecord, directory: str | None = None) -> str:
    """Write ``rec`` as ``<directory>/replay-<tag>.json`` (atomically); returns the path.

    Written BEFORE the namespaces are added, so no gropcap namespace exists without its
    record, whenever the process dies.
    """
    d = directory or run_dir()
    os.makedirs(d, mode=0o755, exist_ok=True)
    path = os.path.join(d, f"replay-{rec.tag}.json")
    tmp = os.path.join(d, f".replay-{rec.tag}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(rec.to_json() + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _read_owner_record(path: str, tag: str) -> OwnerRecord | None:
    """The record at ``path`` or None when it is unreadable, malformed, not written by this
    user (a record decides what root deletes) or names namespaces outside its own pair."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            d = json.loads(fh.read(65536))
        names = tuple(str(n) for n in d["namespaces"])
        rec = OwnerRecord(tag=tag, namespaces=names, pid=int(d["pid"]),
                          starttime=int(d["starttime"]), boot_id=str(d.get("boot_id", "")),
                          pidns=str(d.get("pidns", "")), path=path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)
    # only "<prefix>-tx-<tag>" / "<prefix>-rx-<tag>" of the record's own tag: a damaged
    # record cannot make the cleanup delete somebody else's namespace
    for n in names:
        prefix, sep, rest = n.rpartition("-")
        if not sep or rest != tag or "/" in n or n.startswith(".") or \
                not (prefix.endswith("-tx") or prefix.endswith("-rx")):
            return None
    return rec


def owner_state(rec: OwnerRecord) -> tuple[str, str]:
    """Is the process that created a pair still running? ``(state, why)``.

    ``state`` is ``"live"``, ``"stale"`` (the owner is gone: exited, killed, a zombie, its
    pid now belongs to a process started at another time, or the record is from an earlier
    boot) or ``"unknown"`` (the owner lived in another PID namespace: its pid means nothing
    here, so the pair is left alone).

    >>> owner_state(current_owner("00000000", ()))[0]
    'live'
    """
    boot = _boot_id()
    if rec.boot_id and boot and rec.boot_id != boot:
        return "stale", f"owner pid {rec.pid} ran before the last reboot"
    if rec.pidns and rec.pidns != _pid_namespace():
        return "unknown", f"owner pid {rec.pid} is in another PID namespace ({rec.pidns})"
    stat = _proc_stat(rec.pid)
    if stat is None:
        return "stale", f"owner pid {rec.pid} exited"
    state, starttime = stat
    if starttime != rec.starttime:
        return "stale", f"owner pid {rec.pid} exited (pid reused by a newer process)"
    if state in ("Z", "X"):
        return "stale", f"owner pid {rec.pid} exited (zombie)"
    return "live", f"owner pid {rec.pid} is running"


@dataclass(frozen=True)
class NamespaceStatus:
    """One namespace seen by :func:`scan_namespaces`.

    ``state``: ``"live"``, ``"stale"``, ``"unknown"`` (see :func:`owner_state`) or
    ``"unrecorded"`` (named like a gropcap namespace but without an owner record: made by
    a gropcap without records, or by hand; never deleted).
    """
    name: str
    state: str
    why: str
    owner: OwnerRecord | None = None


@dataclass(frozen=True)
class NamespaceScan:
    """What :func:`scan_namespaces` found.

    ``namespaces``: the existing gropcap namespaces (recorded ones and unrecorded
    look-alikes), sorted by name; ``stale_records``: records of dead owners none of whose
    namespaces exist any more (the owner died between writing the record and adding them,
    or between deleting them and removing the record).
    """
    namespaces: tuple[NamespaceStatus, ...]
    stale_records: tuple[OwnerRecord, ...]

    def of_state(self, state: str) -> list[NamespaceStatus]:
        """The namespaces in ``state``."""
        return [n for n in self.namespaces if n.state == state]

    @property
    def stale(self) -> list[NamespaceStatus]:
        """The namespaces whose owner is gone (what --cleanup-stale deletes)."""
        return self.of_state("stale")


def _existing_namespaces(netns_dir: str) -> set[str]:
    try:
        return {n for n in os.listdir(netns_dir) if not n.startswith(".")}
    except OSError:
        return set()


def scan_namespaces(*, directory: str | None = None,
                    netns_dir: str = NETNS_RUN_DIR) -> NamespaceScan:
    """Classify the gropcap namespaces in ``netns_dir`` by their owner records.

    Reads only files (no ``ip`` command): the records in ``directory`` (default
    :func:`run_dir`) and the names in ``netns_dir`` (``/run/netns``). A namespace is
    reported only if a record names it or its name is one :class:`VethPair` gives; any
    other namespace is not looked at.

    >>> scan = scan_namespaces()                                   # doctest: +SKIP
    >>> [n.name for n in scan.stale]                               # doctest: +SKIP
    ['gropcap-rx-1f2e3d4c', 'gropcap-tx-1f2e3d4c']
    """
    d = directory or run_dir()
    existing = _existing_namespaces(netns_dir)
    try:
        files = sorted(os.listdir(d))
    except OSError:
        files = []
    seen: dict[str, NamespaceStatus] = {}
    stale_records = []
    for f in files:
        m = _RECORD_RE.fullmatch(f)
        if m is None:
            continue
        rec = _read_owner_record(os.path.join(d, f), m.group(1))
        if rec is None:
            continue
        state, why = owner_state(rec)
        present = [n for n in rec.namespaces if n in existing]
        for n in present:
            seen[n] = NamespaceStatus(n, state, why, rec)
        if not present and state == "stale":
            stale_records.append(rec)
    for n in existing:
        if n not in seen and _GROPCAP_NS_RE.fullmatch(n):
            seen[n] = NamespaceStatus(n, "unrecorded", "no owner record")
    return NamespaceScan(tuple(seen[n] for n in sorted(seen)), tuple(stale_records))


@dataclass(frozen=True)
class CleanupReport:
    """The outcome of :func:`cleanup_stale`.

    ``removed``: stale namespaces deleted (or, on a dry run, that would be); ``failed``:
    (status, error message) of the deletions that failed; ``kept``: gropcap namespaces
    left alone (live, unknown owner, unrecorded); ``records_removed``: number of leftover
    records of dead owners deleted.
    """
    removed: tuple[NamespaceStatus, ...]
    failed: tuple[tuple[NamespaceStatus, str], ...]
    kept: tuple[NamespaceStatus, ...]
    records_removed: int
    dry_run: bool


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def cleanup_stale(*, dry_run: bool = False, directory: str | None = None,
                  netns_dir: str = NETNS_RUN_DIR) -> CleanupReport:
    """Delete the gropcap namespaces whose owner is gone, and their owner records.

    Never deletes a namespace of a live owner, one whose owner cannot be checked (another
    PID namespace), one without a record, or any namespace a record does not name. The
    owner is checked again right before each pair is deleted. With ``dry_run`` nothing is
    deleted; the report lists what would be.

    >>> r = cleanup_stale(dry_run=True)                            # doctest: +SKIP
    >>> [n.name for n in r.removed]                                # doctest: +SKIP
    ['gropcap-rx-1f2e3d4c', 'gropcap-tx-1f2e3d4c']
    """
    scan = scan_namespaces(directory=directory, netns_dir=netns_dir)
    kept = tuple(n for n in scan.namespaces if n.state != "stale")
    removed, failed = [], []
    records = 0
    by_record: dict[str, list[NamespaceStatus]] = {}
    for n in scan.stale:
        by_record.setdefault(n.owner.path, []).append(n)
    for path, group in by_record.items():
        if dry_run:
            removed += group
            continue
        if owner_state(group[0].owner)[0] != "stale":     # pid reuse cannot revive it; be sure
            kept += tuple(group)
            continue
        for n in group:
            p = subprocess.run(["ip", "netns", "del", n.name], capture_output=True, timeout=30)
            gone = not os.path.lexists(os.path.join(netns_dir, n.name))
            if p.returncode == 0 or gone:
                removed.append(n)
            else:
                failed.append((n, p.stderr.decode(errors="replace").strip()
                               or f"ip netns del exited {p.returncode}"))
        if not any(os.path.lexists(os.path.join(netns_dir, x))
                   for x in group[0].owner.namespaces):
            _unlink_quiet(path)
            records += 1
    if not dry_run:
        for rec in scan.stale_records:
            if owner_state(rec)[0] == "stale":
                _unlink_quiet(rec.path)
                records += 1
    return CleanupReport(tuple(removed), tuple(failed), kept, records, dry_run)


class VethPair:
    """Two fresh namespaces joined by a veth pair: ``tx`` (sender) and ``rx`` (GRO receiver).

    Use as a context manager; the namespaces (and with them the veth) are deleted on exit.
    Before they are added, an owner record of this process is written to ``record_dir``
    (default :func:`run_dir`) and it is removed with them, so a pair left by a killed
    process can be told from a live one (:func:`scan_namespaces`).
    """

    def __init__(self, *, mtu: int = 65535, flush_timeout_ns: int = 20_000_000,
                 defer: int = 1, prefix: str = "gropcap", udp_tunnels=(),
                 record_dir: str | None = None, xdp: bool = False, gro_list: bool = False):
        tag = secrets.token_hex(4)
        self.tag = tag
        self.record_dir = record_dir
        self.owner_record: str | None = None      # path of the record once written
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
        # an XDP_PASS program on the receiver: the only way to veth GRO before v5.13
        # (replay/_xdp.py); the sender's MTU is then capped at VETH_XDP_MAX_MTU
        self.xdp = bool(xdp)
        # rx-gro-list on the receiver (NETIF_F_GRO_FRAGLIST): fraglist GRO for flows
        # without a local socket (UDP 5.6+, TCP 6.10+); no socket exists in the namespace
        self.gro_list = bool(gro_list)
        self.tx_mtu = self.mtu
        if self.xdp:
            from gropcap.replay._xdp import VETH_XDP_MAX_MTU
            self.tx_mtu = min(self.mtu, VETH_XDP_MAX_MTU)
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
        """Delete the namespaces this object created (and nothing else), then the owner
        record (kept if a namespace could not be deleted: --cleanup-stale retries it)."""
        while self._created:
            ns = self._created.pop()
            _run(["ip", "netns", "del", ns], check=False)
        if self.owner_record is not None and not any(
                os.path.lexists(os.path.join(NETNS_RUN_DIR, ns))
                for ns in (self.ns_tx, self.ns_rx)):
            _unlink_quiet(self.owner_record)
            self.owner_record = None
        self._restore_signal_handlers()

    def _record_owner(self) -> None:
        rec = current_owner(self.tag, (self.ns_tx, self.ns_rx))
        try:
            self.owner_record = write_owner_record(rec, self.record_dir)
        except OSError as e:
            # the replay works without it; only a crash clean-up would need it
            warnings.warn(f"cannot record the owner of {self.ns_tx}/{self.ns_rx} ({e}); "
                          "if this process is killed, delete them with 'ip netns del'",
                          RuntimeWarning, stacklevel=3)

    def _setup(self) -> None:
        self._record_owner()
        for ns in (self.ns_tx, self.ns_rx):
            _run(["ip", "netns", "add", ns])
            self._created.append(ns)
            # no IPv6 autoconfiguration chatter (RS, MLD, DAD) on the test link
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                  "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
        _run(["ip", "link", "add", self.dev_tx, "netns", self.ns_tx, "type", "veth",
              "peer", "name", self.dev_rx, "netns", self.ns_rx])
        for ns, dev, mtu in ((self.ns_tx, self.dev_tx, self.tx_mtu),
                             (self.ns_rx, self.dev_rx, self.mtu)):
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(mtu)])
        # veth_skb_is_eligible_for_gro(): the SENDING device must not have TSO, else veth
        # bypasses the peer's NAPI/GRO; GSO off so nothing is re-segmented on the way.
        _run(["ip", "netns", "exec", self.ns_tx, "ethtool", "-K", self.dev_tx,
              "tso", "off", "gso", "off"])
        # GRO on the receiver gives veth a NAPI instance (veth_set_features, 5.13+).
        _run(["ip", "netns", "exec", self.ns_rx, "ethtool", "-K", self.dev_rx,
              "gro", "on", "tso", "off"])
        if self.gro_list:
            _run(["ip", "netns", "exec", self.ns_rx, "ethtool", "-K", self.dev_rx,
                  "rx-gro-list", "on"])
        self.set_rx_sysfs("gro_flush_timeout", self.flush_timeout_ns)
        self.set_rx_sysfs("napi_defer_hard_irqs", self.defer)
        for ns, dev in ((self.ns_tx, self.dev_tx), (self.ns_rx, self.dev_rx)):
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
        if self.xdp:
            from gropcap.replay._xdp import attach_xdp_pass
            with self.inside(self.ns_rx):
                attach_xdp_pass(socket.if_nametoindex(self.dev_rx))
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
            raise missing_device_error(kind, p.stderr.decode(errors="replace").strip())
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
    def inside(self, ns: str):
        """Run the body with this thread in namespace ``ns`` (sockets made there stay)."""
        return inside_netns(ns)

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
