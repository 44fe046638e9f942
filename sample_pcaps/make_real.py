#!/usr/bin/env python3
"""Record the REAL sample captures on this Linux machine (needs root, ip netns, iperf3, tcpdump).

Two network namespaces are joined by a veth pair (MTU 1500). The sender has TSO/GSO/GRO
off (``ethtool -K vethX tso off gso off gro off``) so every TCP segment leaves as a
wire-sized frame; tcpdump records on the SENDER's veth with snaplen 128; iperf3 (server in
the receiver namespace, client in the sender namespace) runs rate-limited for about one
second. tcpdump starts well before iperf3, so each capture holds the SYN handshake, and
iperf3's control connection is in the capture too (as in any real iperf3 trace).

Usage (from the repository root)::

    sudo python3 sample_pcaps/make_real.py            # writes into sample_pcaps/
    sudo python3 sample_pcaps/make_real.py -o /tmp/x  # elsewhere

Outputs (deterministic names): ``real_ipv4.pcap``, ``real_ipv6.pcap``,
``real_ipv4_p4.pcap`` (4 parallel streams) and ``real_vxlan.pcap`` (iperf3 through a VXLAN
tunnel, VNI 4242, captured on the underlay veth: eth/ipv4/udp/vxlan/eth/ipv4/tcp).

These are real recordings: a re-run gives traffic of the same shape, not the same bytes
(timestamps, initial sequence numbers, ports and IP IDs differ).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SNAPLEN = 128
UNDERLAY4 = ("10.200.0.1", "10.200.0.2")
UNDERLAY6 = ("fd00:200::1", "fd00:200::2")
OVERLAY4 = ("10.201.0.1", "10.201.0.2")
VNI = 4242

MACS = ("02:00:00:00:42:01", "02:00:00:00:42:02")  # vxlan devices (sender, receiver)

# name -> (server address key, extra iperf3 client arguments, rate per stream, capture filter)
# The filters keep the samples about TCP: no IPv6 router solicitations or ND chatter.
CASES = {
    "real_ipv4": ("v4", [], "20M", "tcp"),
    "real_ipv6": ("v6", [], "20M", "tcp"),
    "real_ipv4_p4": ("v4", ["-P", "4"], "5M", "tcp"),
    "real_vxlan": ("vx", [], "20M", "udp port 4789"),
}


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command, raising with its stderr when it fails."""
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def wait_listening(ns: str, port: int = 5201, timeout: float = 60.0) -> None:
    """Wait until a TCP socket listens on ``port`` in namespace ``ns`` (an iperf3 server
    just started: on a busy host a fixed sleep was too short once, and the client's SYN
    was refused)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = sh("ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}", check=False)
        if r.returncode == 0 and r.stdout.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} in {ns} after {timeout:.0f} s")


def add_vxlan(run_in, s: str, r: str, vs: str, vr: str, mtu: int) -> None:
    """A VXLAN device ``vx0`` (VNI 4242, port 4789) over veths ``vs``/``vr`` in namespaces
    ``s``/``r`` (``run_in(ns, *argv)`` runs a command there); no offloads on the sender's."""
    for ns, dev, loc, rem, ov, ov_peer, mac, mac_peer in (
            (s, vs, UNDERLAY4[0], UNDERLAY4[1], OVERLAY4[0], OVERLAY4[1], *MACS),
            (r, vr, UNDERLAY4[1], UNDERLAY4[0], OVERLAY4[1], OVERLAY4[0], *reversed(MACS))):
        sh("ip", "-n", ns, "link", "add", "vx0", "type", "vxlan", "id", str(VNI),
           "local", loc, "remote", rem, "dstport", "4789", "dev", dev)
        # No IPv6 on the overlay: its router solicitations would land in the capture.
        run_in(ns, "sysctl", "-qw", "net.ipv6.conf.vx0.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", "vx0", "address", mac, "mtu", str(mtu), "up")
        sh("ip", "-n", ns, "addr", "add", f"{ov}/24", "dev", "vx0")
        # Static neighbour: no ARP inside the tunnel during the capture.
        sh("ip", "-n", ns, "neigh", "replace", ov_peer, "lladdr", mac_peer, "dev", "vx0",
           "nud", "permanent")
    run_in(s, "ethtool", "-K", "vx0", "tso", "off", "gso", "off", "gro", "off")


class Lab:
    """Two namespaces, a veth pair and a VXLAN tunnel; removed again by :meth:`close`."""

    def __init__(self) -> None:
        suf = secrets.token_hex(4)
        self.ns_s = f"gropcap-snd-{suf}"  # iperf3 client (sender)
        self.ns_r = f"gropcap-rcv-{suf}"  # iperf3 server (receiver)
        self.vs = f"vs{suf}"
        self.vr = f"vr{suf}"
        self.suf = suf
        self.procs: list[subprocess.Popen] = []

    def ns(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def setup(self) -> None:
        s, r = self.ns_s, self.ns_r
        sh("ip", "netns", "add", s)
        sh("ip", "netns", "add", r)
        sh("ip", "link", "add", self.vs, "netns", s, "type", "veth", "peer", "name", self.vr,
           "netns", r)
        for ns, dev, a4, a6 in ((s, self.vs, UNDERLAY4[0], UNDERLAY6[0]),
                                (r, self.vr, UNDERLAY4[1], UNDERLAY6[1])):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "mtu", "1500", "up")
            sh("ip", "-n", ns, "addr", "add", f"{a4}/24", "dev", dev)
            sh("ip", "-n", ns, "addr", "add", f"{a6}/64", "dev", dev, "nodad")
        # Sender: no segmentation offload, so the capture holds MSS-sized frames.
        self.ns(s, "ethtool", "-K", self.vs, "tso", "off", "gso", "off", "gro", "off")
        add_vxlan(self.ns, s, r, self.vs, self.vr, 1450)
        # Wait until IPv6 is usable (nodad, but the link still needs to come up).
        for _ in range(50):
            if self.ns(s, "ping", "-6", "-c1", "-W1", UNDERLAY6[1], check=False).returncode == 0:
                break
            time.sleep(0.1)
        self.ns(s, "ping", "-c1", "-W1", OVERLAY4[1], check=False)

    def record(self, out: Path, name: str, server: str, extra: list[str], rate: str,
               bpf: str, seconds: int) -> Path:
        """Capture one iperf3 run on the sender's veth into ``out/name.pcap``."""
        final = out / f"{name}.pcap"
        tmp = out / f".{name}.{self.suf}.pcap"
        srv = subprocess.Popen(["ip", "netns", "exec", self.ns_r, "iperf3", "-s", "-1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(srv)
        tcpdump = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_s, "tcpdump", "-i", self.vs, "-s", str(SNAPLEN),
             "-U", "-n", "-Z", "root", "-w", str(tmp), bpf],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(tcpdump)
        try:
            time.sleep(1.5)  # tcpdump must be up before the SYN
            wait_listening(self.ns_r)
            self.ns(self.ns_s, "iperf3", "-c", server, "-t", str(seconds), "-b", rate, *extra)
            time.sleep(0.5)  # let the last ACKs and FINs reach the capture
            tcpdump.send_signal(signal.SIGINT)
            tcpdump.wait(timeout=10)
            srv.wait(timeout=10)
            os.replace(tmp, final)   # only a complete recording gets the final name
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sh("ip", "netns", "del", self.ns_s, check=False)
        sh("ip", "netns", "del", self.ns_r, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("-t", "--seconds", type=int, default=1)
    ap.add_argument("cases", nargs="*", help=f"subset of {', '.join(CASES)} (default: all)")
    a = ap.parse_args(argv)
    a.cases = a.cases or list(CASES)
    unknown = set(a.cases) - set(CASES)
    if unknown:
        ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if os.geteuid() != 0:
        print("make_real.py: needs root (ip netns, tcpdump)", file=sys.stderr)
        return 1
    for tool in ("ip", "iperf3", "tcpdump", "ethtool"):
        if shutil.which(tool) is None:
            print(f"make_real.py: {tool} not found", file=sys.stderr)
            return 1
    a.out.mkdir(parents=True, exist_ok=True)
    lab = Lab()
    # SIGTERM must still run the cleanup in `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        lab.setup()
        servers = {"v4": UNDERLAY4[1], "v6": UNDERLAY6[1], "vx": OVERLAY4[1]}
        for name in a.cases:
            key, extra, rate, bpf = CASES[name]
            p = lab.record(a.out, name, servers[key], extra, rate, bpf, a.seconds)
            print(f"{p}: {p.stat().st_size} bytes")
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
