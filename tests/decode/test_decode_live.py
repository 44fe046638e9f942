"""Live kernel check of the checksum states: frames a Linux sender really emits on a veth.

With TX checksum offload on (the veth default) the kernel leaves CHECKSUM_PARTIAL packets
whose TCP/UDP field holds only the pseudo-header sum: the decoder must say PARTIAL. With
``ethtool -K tx off`` the stack computes full checksums: GOOD. Needs root, ``ip netns`` and
veth; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from gropcap.decode import schema as S
from gropcap.decode.reference import decode_frame

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("ip"),
    reason="needs root on Linux with iproute2 (ip netns, veth)")

# Runs inside the sender namespace: capture own outgoing frames with AF_PACKET (what tcpdump
# sees), send one UDP datagram and one TCP SYN (to a closed port: the SYN still leaves).
_SENDER = r"""
import json, socket, sys, time
dev, peer = sys.argv[1], sys.argv[2]
cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
cap.bind((dev, 0))
cap.settimeout(0.5)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"u" * 100, (peer, 9999))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.settimeout(1.0)
try:
    t.connect((peer, 9998))
except OSError:
    pass
frames, end = [], time.time() + 1.5
while time.time() < end:
    try:
        data, addr = cap.recvfrom(65535)
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_OUTGOING:
        frames.append(data.hex())
print(json.dumps(frames))
"""


def _run(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)


@pytest.fixture
def veth_pair():
    tag = uuid.uuid4().hex[:8]
    snd, rcv = f"gpd-s-{tag}", f"gpd-r-{tag}"
    try:
        _run("ip", "netns", "add", snd)
        _run("ip", "netns", "add", rcv)
        _run("ip", "-n", snd, "link", "add", "vs", "type", "veth", "peer", "name", "vr",
             "netns", rcv)
        _run("ip", "-n", snd, "addr", "add", "10.99.0.1/24", "dev", "vs")
        _run("ip", "-n", rcv, "addr", "add", "10.99.0.2/24", "dev", "vr")
        _run("ip", "-n", snd, "link", "set", "vs", "up")
        _run("ip", "-n", rcv, "link", "set", "vr", "up")
    except (subprocess.CalledProcessError, OSError) as e:
        for ns in (snd, rcv):
            _run("ip", "netns", "del", ns, check=False)
        pytest.skip(f"cannot create network namespaces / veth here: {e}")
    try:
        yield snd
    finally:
        for ns in (snd, rcv):
            _run("ip", "netns", "del", ns, check=False)


def _send_and_decode(ns: str) -> dict[int, int]:
    """Map IP protocol -> l4_csum_state for the UDP datagram and the TCP SYN sent."""
    out = _run("ip", "netns", "exec", ns, sys.executable, "-c", _SENDER, "vs", "10.99.0.2")
    states = {}
    for hexframe in json.loads(out.stdout):
        frame = bytes.fromhex(hexframe)
        row = decode_frame(frame, 1, len(frame))
        if row["status"] == S.STATUS_OK and row["dport"] in (9998, 9999):
            assert row["l4_csum_state"] in (S.CSUM_PARTIAL, S.CSUM_GOOD), row["l4_csum_state"]
            states.setdefault(row["l4_proto"], row["l4_csum_state"])
    return states


def test_sender_side_checksums_partial_then_good(veth_pair):
    ns = veth_pair
    assert _send_and_decode(ns) == {6: S.CSUM_PARTIAL, 17: S.CSUM_PARTIAL}
    if not shutil.which("ethtool"):
        pytest.skip("ethtool not installed: cannot switch TX checksum offload off")
    _run("ip", "netns", "exec", ns, "ethtool", "-K", "vs", "tx", "off")
    assert _send_and_decode(ns) == {6: S.CSUM_GOOD, 17: S.CSUM_GOOD}
