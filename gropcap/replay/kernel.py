"""Live-kernel replay: push frames through a real veth GRO receiver and record what it built.

Layer: validation, beside the pipeline. Takes complete Ethernet frames (``list[bytes]``)
and burst numbers; hands on a :class:`KernelReplayResult` (the delivered super-packets
matched back to input frames) that ``gropcap.replay.compare`` sets against the simulator.

Set-up (the kernel selftest's setup_veth.sh, made deterministic; see
docs/kernel-gro-selftest.md section 1): two fresh namespaces with random names, a veth pair,
``ethtool -K rx gro on`` (gives veth a NAPI instance), ``tso off gso off`` on the sender
(``veth_skb_is_eligible_for_gro``), ``gro_flush_timeout`` (20 ms) and
``napi_defer_hard_irqs`` (1) on the receiver. Each burst starts with a *kick*: one frame
of an EtherType no GRO handler claims (0x88B5, IEEE local experimental), which the idle
NAPI instance polls at once and passes up without holding anything;
``napi_complete_done`` then defers and masks veth's notifications, so the burst's frames
wait in the ptr_ring until the timer poll takes them all in one go. (Without the kick
the burst's first data frame was that immediate poll, held alone, and a jiffy tick
before the poll completed flushed it early: ``gro_flush_normal(.., flush_old)`` at
``napi_complete_done``; seen here, HZ 250, in 2 of 7 runs of the 28-sample comparison,
about 190 bursts each.) Bursts carry
at most ``budget - 1`` (63) data frames, so no poll is a full-budget poll (which flushes
everything with HZ < 1000), and the pause between bursts (> 2 timeouts) lets the timer
flush everything. One burst is therefore exactly one GRO window: the simulator gets the
burst number of each frame as ``polls``. Kick frames are dropped from what the receiver
socket reads. A burst whose sending took longer than half the flush timeout, counted
from its kick frame (a stalled sender, a kick settle that overslept), is not a faithful
window either: the replay then runs again.

The receiver is an AF_PACKET socket bound to the receiving veth (packets after GRO, in the
order the stack gets them). A second socket with PACKET_VNET_HDR reads each packet's
``gso_size``/``gso_type`` (virtio_net_hdr_from_skb; on 6.18 it describes TCP over IPv4,
IPv6 and IPIP). A packet it cannot describe is dropped for that socket only; its values are
then inferred (gso_size = first segment's payload) and ``gso_known`` is False.

**Measured on this 6.18 kernel** (tests/replay/test_kernel_replay.py::test_veth_gro_bucket_is_zero
keeps checking it): every flow lands in the SAME GRO bucket. The skbs reach
``napi_gro_receive`` without a hash (AF_PACKET injection sets none, veth computes none, and
``dev_gro_receive`` reads the raw ``skb->hash``), so the bucket is 0 for all flows. The
selftest's ``capacity`` case with 16 flows in one burst shows it: flows 0..7 are evicted
by flows 8..15 (``gro_flush_oldest``, bucket full at MAX_GRO_SKBS = 8) and never merge,
flows 8..15 merge. So the simulator must run with
``rss="none"`` (hash 0) for replay comparisons.

Also measured: this 6.18 build has ``CONFIG_VLAN_8021Q`` unset, so there is no
``vlan_gro_receive`` and frames with an in-band 802.1Q/802.1ad tag pass GRO unmerged (the
receive path still moves the outer tag into skb metadata; PACKET_AUXDATA gives it back and
the harness re-inserts it before matching).

Checksums: veth's receiver validates checksums in software (CHECKSUM_NONE, kernel-gro-spec
section 10). With ``fix_checksums=True`` (default) frames cut by a snap length are padded to
their wire length with zero payload and get their L4 checksum recomputed, offload-partial
checksums are computed; a complete frame with a bad checksum is kept bad on purpose
(``_wire.fix_frame``).
"""

from __future__ import annotations

import os
import select
import struct
import time
from collections import defaultdict
from dataclasses import dataclass, field

from gropcap.errors import GropcapError
import gropcap.replay._wire as _wire
from gropcap.replay._netns import VethPair, check_environment

__all__ = ["replay", "ReplaySession", "KernelReplayResult", "DeliveredUnit",
           "running_kernel", "split_bursts", "VIRTIO_TO_SKB_GSO"]

PACKET_VNET_HDR = 15        # include/uapi/linux/if_packet.h
PACKET_OUTGOING = 4         # sll_pkttype of frames the device sent
PACKET_AUXDATA = 8
SOL_PACKET = 263
TP_STATUS_VLAN_VALID = 1 << 4        # include/uapi/linux/if_packet.h
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ETH_P_ALL = 0x0003
VNET_HDR_LEN = 10           # struct virtio_net_hdr
VIRTIO_NET_HDR_GSO_NONE = 0
VIRTIO_NET_HDR_GSO_ECN = 0x80
# virtio gso types -> SKB_GSO_* bits (include/linux/skbuff.h; SKB_GSO_UDP_L4 is 1 << 17,
# 1 << 16 is the old UFO SKB_GSO_UDP)
from gropcap.gro.gso import SKB_GSO_TCP_ECN, SKB_GSO_TCPV4, SKB_GSO_TCPV6, SKB_GSO_UDP_L4  # noqa: E402
VIRTIO_TO_SKB_GSO = {1: SKB_GSO_TCPV4, 4: SKB_GSO_TCPV6, 5: SKB_GSO_UDP_L4}
# the SKB_GSO bits a virtio header can show; compare only these against the simulator
VISIBLE_GSO_BITS = SKB_GSO_TCPV4 | SKB_GSO_TCPV6 | SKB_GSO_UDP_L4 | SKB_GSO_TCP_ECN

RECV_BUF = 65535 + 64 * 1024


def running_kernel() -> tuple[int, int]:
    """(major, minor) of the running kernel, from ``uname -r``."""
    rel = os.uname().release
    major, minor = rel.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def split_bursts(bursts: list[int] | None, n: int, budget: int = 64) -> list[int]:
    """Burst number per frame, renumbered from 0, no burst longer than ``budget``.

    ``None`` puts everything in one burst (then split by budget).

    >>> split_bursts([0, 0, 0, 5, 5], 5, budget=2)
    [0, 0, 1, 2, 2]
    """
    if bursts is None:
        bursts = [0] * n
    if len(bursts) != n:
        raise GropcapError(f"{len(bursts)} burst numbers for {n} frames")
    out, cur, size, prev = [], -1, 0, None
    for b in bursts:
        if b != prev or size >= budget:
            cur += 1
            size = 0
            prev = b
        out.append(cur)
        size += 1
    return out


@dataclass
class DeliveredUnit:
    """One packet the receiving stack got, matched back to input frames.

    ``indices``: input frame numbers it was built from (merged segments, in order);
    ``first``/``last``/``count`` summarise them; ``payload_len`` is the L4 payload of the
    delivered packet; ``gso_size``/``gso_type`` from the virtio header when the kernel could
    describe it (``gso_known``), else inferred. ``matched`` is False for a delivered packet
    that matches no input frame (then ``indices`` is empty).
    """

    indices: tuple[int, ...]
    payload_len: int
    gso_size: int
    gso_type: int
    gso_known: bool
    length: int
    matched: bool = True
    data: bytes = field(default=b"", repr=False)   # the delivered packet as received

    @property
    def first(self) -> int:
        return self.indices[0] if self.indices else -1

    @property
    def last(self) -> int:
        return self.indices[-1] if self.indices else -1

    @property
    def count(self) -> int:
        return len(self.indices)

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        """(first, last, count, payload_len, gso_size, gso_type)."""
        return (self.first, self.last, self.count, self.payload_len, self.gso_size,
                self.gso_type)


@dataclass
class KernelReplayResult:
    """What one replay sent and what the kernel delivered.

    ``frames``: the frames actually injected (after padding / checksum repair);
    ``actions``: per frame what ``fix_frame`` did; ``polls``: burst (= GRO window) number
    per frame; ``units``: delivered packets in receive order; ``lost``: input frames never
    delivered (dropped by the kernel); ``kernel``: (major, minor); ``release``: uname -r.
    """

    frames: list[bytes]
    actions: list[str]
    polls: list[int]
    units: list[DeliveredUnit]
    lost: list[int]
    kernel: tuple[int, int]
    release: str
    config: dict = field(default_factory=dict)

    def payload_sizes(self, stop_at_fin: bool = True) -> list[int]:
        """Payload sizes of the matched deliveries in order, as gro.c's receiver counts them.

        With ``stop_at_fin`` the list ends before the first delivered TCP FIN.
        """
        out = []
        for u in self.units:
            if not u.matched:
                continue
            if stop_at_fin:
                p = _wire.parse(self.frames[u.last])
                if p.l4_proto == 6 and p.flags & 0x01:
                    break
            out.append(u.payload_len)
        return out

    @property
    def unmatched(self) -> list[DeliveredUnit]:
        return [u for u in self.units if not u.matched]


class _Matcher:
    """Matches delivered packets to input frames: exact bytes first, else flow + seq range."""

    def __init__(self, frames: list[bytes]):
        self.frames = frames
        self.parsed = [_wire.parse(f) for f in frames]
        self.used = [False] * len(frames)
        self.by_bytes: dict[bytes, list[int]] = defaultdict(list)
        self.by_key: dict[tuple, list[int]] = defaultdict(list)
        for i, (f, p) in enumerate(zip(frames, self.parsed)):
            self.by_bytes[f].append(i)
            if p.ok:
                self.by_key[p.key].append(i)

    def _take(self, idx: list[int]) -> tuple[int, ...]:
        for i in idx:
            self.used[i] = True
        return tuple(idx)

    def match(self, pkt: bytes) -> tuple[tuple[int, ...], int]:
        """(input indices, payload_len) of a delivered packet; () when nothing matches."""
        p = _wire.parse(pkt)
        for i in self.by_bytes.get(pkt, ()):
            if not self.used[i]:
                return self._take([i]), max(self.parsed[i].payload_len, 0)
        if not p.ok:
            return (), max(p.payload_len, 0)
        want = p.payload_len
        cands = [i for i in self.by_key.get(p.key, ()) if not self.used[i]]
        # the head: the first unused frame of the flow starting at the delivered seq
        for start, i in enumerate(cands):
            if self.parsed[i].seq == p.seq:
                break
        else:
            return (), want
        got, nxt, picked = 0, p.seq, []
        for i in cands[start:]:
            q = self.parsed[i]
            # UDP GRO (segment or fraglist) concatenates datagrams in arrival order
            if p.l4_proto != 17 and q.seq != nxt & 0xFFFFFFFF:
                continue
            picked.append(i)
            got += q.payload_len
            nxt = q.seq + q.payload_len
            if got >= want or (p.l4_proto == 17 and len(picked) > 0 and got >= want):
                break
        if got != want or not picked:
            return (), want
        return self._take(picked), want


def _vnet_parse(hdr: bytes) -> tuple[int, int]:
    """(gso_size, SKB_GSO bits) from a little-endian struct virtio_net_hdr."""
    _flags, gso_type, _hdr_len, gso_size, _cs, _co = struct.unpack("<BBHHHH", hdr[:10])
    bits = VIRTIO_TO_SKB_GSO.get(gso_type & ~VIRTIO_NET_HDR_GSO_ECN, 0)
    if gso_type & VIRTIO_NET_HDR_GSO_ECN:
        bits |= SKB_GSO_TCP_ECN
    return (gso_size if bits else 0), bits


KICK_ETHERTYPE = 0x88B5           # IEEE 802 local experimental EtherType 1: no GRO handler
KICK_MAGIC = b"gropcap-replay-kick"
KICK_SETTLE_S = 0.0005           # lets the kick's immediate poll finish before the burst


def kick_frame(like: bytes) -> bytes:
    """The frame that opens a burst (same MAC addresses as ``like``), 60 bytes."""
    return (like[:12] + struct.pack("!H", KICK_ETHERTYPE) + KICK_MAGIC).ljust(60, b"\0")


def is_kick(data: bytes) -> bool:
    return len(data) >= 14 + len(KICK_MAGIC) and \
        data[12:14] == struct.pack("!H", KICK_ETHERTYPE) and \
        data[14:14 + len(KICK_MAGIC)] == KICK_MAGIC


def late_flushes(units: list, polls: list[int]) -> list[int]:
    """The polls whose packets the kernel merged with a later poll's: a super-packet of
    frames from two polls (``units``: each delivered packet's input frame indices, in
    order). The pause after a poll is longer than the deferred flush
    (``ReplaySession.pause_s``), so a faithful replay never has one; a receiver whose
    flush timer ran late (a loaded machine delays its softirq) does, and
    :meth:`ReplaySession.replay` (``replay.cells.replay_gro_cells`` too) then runs the
    replay again."""
    return sorted({polls[ix[0]] for ix in units if ix and polls[ix[0]] != polls[ix[-1]]})


# a replay runs again, at most this many times in all, when a burst took too long to send
# (inject_bursts) or the receiver flushed a poll late (late_flushes)
REPLAY_ATTEMPTS = 3


def inject_bursts(send, sent: list[bytes], polls: list[int], kick: bool, pause_s: float,
                  limit_ns: int) -> list[int]:
    """Send ``sent`` burst by burst (``polls``: the burst of each frame) through
    ``send``, a kick frame first in each burst with ``kick``, pausing ``pause_s`` after
    each; returns the bursts whose sending took longer than ``limit_ns`` (half the
    receiver's flush timeout).

    One burst is one GRO window only if all its frames reach the ring before the
    deferred-flush timer fires (``gro_flush_timeout`` after the kick's poll, or after
    the burst's first frame was polled); a sender stalled longer (preempted, a garbage
    collection) lets the timer flush the burst's first packets early. The time counts
    from the kick: a settle that oversleeps past the timer lets the timer's poll find
    an empty ring and end the deferral, and the burst's first frame is then polled at
    once, held alone and flushed early by the next jiffy (CI, a loaded machine: frame
    441, the first of its burst, delivered alone). Such a run is not a faithful replay,
    so the caller runs it again (:data:`REPLAY_ATTEMPTS`). The collector is off
    meanwhile.
    """
    import gc
    n = len(sent)
    slow = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        i = 0
        while i < n:
            j = i
            while j < n and polls[j] == polls[i]:
                j += 1
            t0 = time.monotonic_ns()
            if kick:
                send(kick_frame(sent[i]))
                time.sleep(KICK_SETTLE_S)
            for k in range(i, j):
                send(sent[k])
            if time.monotonic_ns() - t0 > limit_ns:
                slow.append(polls[i])
            time.sleep(pause_s)
            i = j
    finally:
        if enabled:
            gc.enable()
    return slow


class ReplaySession:
    """One veth pair in fresh namespaces, reused for many replays (reset by a pause).

    >>> with ReplaySession() as s:                                  # doctest: +SKIP
    ...     r = s.replay(frames, bursts)
    """

    def __init__(self, *, mtu: int = 65535, flush_timeout_ns: int = 20_000_000,
                 defer: int = 1, budget: int = 64, pause_s: float | None = None,
                 udp_tunnels=(), xdp: bool | None = None, gro_list: bool = False):
        self.mtu = mtu
        self.gro_list = bool(gro_list)
        # veth GRO needs an XDP program before v5.13 (replay/_xdp.py); None: when needed
        if xdp is None:
            from gropcap.replay._xdp import VETH_NAPI_WITHOUT_XDP
            xdp = running_kernel() < VETH_NAPI_WITHOUT_XDP
        self.xdp = bool(xdp)
        self.udp_tunnels = tuple(udp_tunnels)
        self.flush_timeout_ns = int(flush_timeout_ns)
        self.defer = int(defer)
        self.budget = int(budget)
        self.attempts = REPLAY_ATTEMPTS
        t = self.flush_timeout_ns / 1e9
        # the timer poll runs at +T and re-arms once (defer) before it flushes all: > 2T
        self.pause_s = pause_s if pause_s is not None else max(0.03, 3 * t + 0.01)
        self.pair: VethPair | None = None
        self.tx = self.rx = self.rxv = None

    def __enter__(self) -> "ReplaySession":
        self.pair = VethPair(mtu=self.mtu, flush_timeout_ns=self.flush_timeout_ns,
                             defer=self.defer, udp_tunnels=self.udp_tunnels, xdp=self.xdp,
                             gro_list=self.gro_list)
        self.pair.__enter__()
        try:
            self.tx, self.tx_ifindex = self.pair.packet_socket("tx", proto=0,
                                                               sndbuf=8 << 20)
            self.rx, _ = self.pair.packet_socket("rx", proto=ETH_P_ALL, rcvbuf=32 << 20)
            self.rxv, _ = self.pair.packet_socket("rx", proto=ETH_P_ALL, rcvbuf=32 << 20)
            self.rxv.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
            for s in (self.rx, self.rxv):
                s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
                s.setblocking(False)
        except BaseException:
            self.close()
            raise
        time.sleep(self.pause_s)
        self._drain()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the sockets and delete the namespaces."""
        for s in (self.tx, self.rx, self.rxv):
            if s is not None:
                s.close()
        self.tx = self.rx = self.rxv = None
        if self.pair is not None:
            self.pair.close()
            self.pair = None

    def _recv_all(self, sock, vnet: bool) -> list[tuple[bytes, bytes, bytes]]:
        """Drain ``sock``: (vnet header, packet as received, packet with its VLAN tag).

        The receive path moves an outer 802.1Q/802.1ad tag into skb metadata
        (skb_vlan_untag); PACKET_AUXDATA reports it and it is put back in place so the
        packet compares with the injected frame.
        """
        out = []
        while True:
            try:
                data, anc, _flags, addr = sock.recvmsg(RECV_BUF, 256)
            except BlockingIOError:
                break
            if addr[2] == PACKET_OUTGOING or is_kick(data[VNET_HDR_LEN:] if vnet else data):
                continue
            hdr = b""
            if vnet:
                hdr, data = data[:VNET_HDR_LEN], data[VNET_HDR_LEN:]
            tagged = data
            for level, typ, val in anc:
                if level == SOL_PACKET and typ == PACKET_AUXDATA and len(val) >= 20:
                    status, _l, _s, _m, _n, tci, tpid = struct.unpack_from("=IIIHHHH", val)
                    if status & TP_STATUS_VLAN_VALID:
                        if not status & TP_STATUS_VLAN_TPID_VALID:
                            tpid = 0x8100
                        tagged = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
            out.append((hdr, data, tagged))
        return out

    def _drain(self) -> None:
        for s in (self.rx, self.rxv):
            self._recv_all(s, False)

    def replay(self, frames: list[bytes], bursts: list[int] | None = None, *,
               wire_lens: list[int] | None = None, fix_checksums: bool = True,
               csum_not_ready: list[bool] | None = None) -> KernelReplayResult:
        """Inject ``frames`` burst by burst and return what the receiver got after GRO."""
        if self.tx is None:
            raise GropcapError("replay session is not open (use it as a context manager)")
        n = len(frames)
        sent, actions = [], []
        for i, f in enumerate(frames):
            wl = wire_lens[i] if wire_lens is not None else None
            cnr = bool(csum_not_ready[i]) if csum_not_ready is not None else False
            g, act = _wire.fix_frame(bytes(f), wl, fix_checksums=fix_checksums,
                                     csum_not_ready=cnr)
            mtu = self.pair.tx_mtu if self.pair is not None else self.mtu
            if len(g) > mtu + 14:
                why = " (the sender's cap with XDP on the receiver)" if mtu < self.mtu else ""
                raise GropcapError(f"frame {i} is {len(g)} bytes, more than MTU {mtu}{why}")
            if len(g) < 14:
                raise GropcapError(f"frame {i} is shorter than an Ethernet header")
            sent.append(g)
            actions.append(act)
        # the kick is the burst's first poll: at most budget - 1 data frames follow it
        polls = split_bursts(bursts, n, self.budget - 1)
        for attempt in range(1, self.attempts + 1):
            self._drain()
            slow = self._inject(sent, polls)
            res = self._build_result(sent, actions, polls, self._collect(n))
            late = late_flushes([u.indices for u in res.units], polls)
            if not slow and not late:
                break
        res.config.update(attempts=attempt, slow_bursts=slow, late_flushes=late)
        return res

    def _send(self, frame: bytes) -> None:
        self.tx.send(frame)

    def _inject(self, sent: list[bytes], polls: list[int]) -> list[int]:
        """:func:`inject_bursts` through this session's sender, a kick frame first in
        every burst."""
        return inject_bursts(self._send, sent, polls, True, self.pause_s,
                             self.flush_timeout_ns // 2)

    def _collect(self, n: int) -> tuple[list, list]:
        plain, vnet = [], []
        deadline = time.monotonic() + self.pause_s + 0.2
        while True:
            plain += self._recv_all(self.rx, False)
            vnet += self._recv_all(self.rxv, True)
            if time.monotonic() > deadline:
                break
            select.select([self.rx, self.rxv], [], [], 0.02)
        return plain, vnet

    def _build_result(self, sent, actions, polls, got) -> KernelReplayResult:
        plain, vnet = got
        m = _Matcher(sent)
        units = []
        vi = 0
        for _h, raw, data in plain:
            gso_size, gso_type, known = 0, 0, False
            # the vnet socket saw the same packets in the same order, minus those
            # virtio_net_hdr_from_skb could not describe (dropped for that socket only)
            for k in range(vi, min(vi + 4, len(vnet))):
                if vnet[k][1] == raw:
                    gso_size, gso_type = _vnet_parse(vnet[k][0])
                    known = True
                    vi = k + 1
                    break
            idx, plen = m.match(data)
            if idx and not known and len(idx) > 1:
                gso_size = max(m.parsed[idx[0]].payload_len, 0)
            units.append(DeliveredUnit(idx, plen, gso_size, gso_type, known, len(data),
                                       matched=bool(idx), data=data))
        lost = [i for i, u in enumerate(m.used) if not u]
        rel = os.uname().release
        cfg = {"flush_timeout_ns": self.flush_timeout_ns, "defer": self.defer,
               "budget": self.budget, "mtu": self.mtu, "pause_s": self.pause_s,
               "xdp": self.xdp, "gro_list": self.gro_list,
               "udp_tunnels": ",".join(f"{k}:{p}" for k, p in self.udp_tunnels)}
        return KernelReplayResult(sent, actions, polls, units, lost, running_kernel(), rel,
                                  cfg)


def replay(frames: list[bytes], bursts: list[int] | None = None, *, mtu: int = 65535,
           flush_timeout_ns: int = 20_000_000, defer: int = 1, budget: int = 64,
           wire_lens: list[int] | None = None, fix_checksums: bool = True,
           csum_not_ready: list[bool] | None = None, udp_tunnels=()) -> KernelReplayResult:
    """Replay ``frames`` through a fresh veth pair with GRO on; return what was delivered.

    Parameters: ``frames`` complete Ethernet frames in order; ``bursts`` burst number per
    frame (a pause longer than the flush timeout separates bursts; ``None`` = one burst;
    bursts are split at ``budget - 1`` frames, the kick takes the first poll); ``mtu`` of
    both veth ends; ``flush_timeout_ns``
    and ``defer`` the receiver's gro_flush_timeout / napi_defer_hard_irqs; ``wire_lens``
    original lengths of snapped frames (padded with zeros); ``fix_checksums`` checksum
    policy (see the module docstring); ``csum_not_ready`` per frame: the capture says the
    checksum was not computed yet (pcapng epb flag); ``udp_tunnels`` ``(("vxlan", 4789),
    ...)`` tunnel devices created in the receiver namespace (their sockets make GRO
    aggregate those ports as tunnels).

    Needs Linux and root; raises :class:`GropcapError` otherwise. Namespaces are created
    fresh and always removed.

    >>> from gropcap.selftest_cases import CASES                   # doctest: +SKIP
    >>> c = CASES["data_same"]                                      # doctest: +SKIP
    >>> replay(c.frames("ipv4"), c.bursts("ipv4")).payload_sizes()  # doctest: +SKIP
    [200]
    """
    check_environment()
    with ReplaySession(mtu=mtu, flush_timeout_ns=flush_timeout_ns, defer=defer,
                       budget=budget, udp_tunnels=udp_tunnels) as s:
        return s.replay(frames, bursts, wire_lens=wire_lens, fix_checksums=fix_checksums,
                        csum_not_ready=csum_not_ready)
