"""Kernel vs simulator: set the super-packets a live kernel built beside the simulator's.

Layer: validation. Takes a :class:`~gropcap.replay.kernel.KernelReplayResult` and a
:class:`~gropcap.gro.result.GroResult` computed over the SAME frames (the injected ones,
after padding / checksum repair) with the replay's bursts as explicit NAPI windows; hands on
a :class:`ReplayReport`: agreement counts and every difference.

A delivered unit is ``(first, last, count, payload_len, gso_size, gso_type)`` over input
frame numbers. Two units agree when they cover the same frames (first, last, count) and,
for merged units (count > 1), carry the same payload length and gso_size; gso_type is
compared on the bits a virtio header can show (TCPV4/TCPV6/UDP_L4/ECN) and only when the
kernel could report it. Per-flow order must match exactly (a flow's units in the same
order); the global order (interleaving of flows) is reported separately.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gropcap.replay._netns import kernel_config_option
from gropcap.replay.kernel import VISIBLE_GSO_BITS, KernelReplayResult

__all__ = ["compare", "ReplayReport", "Difference", "simulate_replay", "packets_table"]


@dataclass
class Difference:
    """One disagreement. ``kind``: "flow" (a flow's units differ), "field" (same frames,
    other payload/gso), "lost" (the kernel delivered nothing for these frames),
    "unmatched" (the kernel delivered a packet that matches no input frame) or
    "global_order" (interleaving of flows differs)."""

    kind: str
    flow_id: int
    kernel: list[tuple] = field(default_factory=list)
    simulated: list[tuple] = field(default_factory=list)
    detail: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "flow_id": self.flow_id,
                "kernel": [list(t) for t in self.kernel],
                "simulated": [list(t) for t in self.simulated], "detail": self.detail}

    def line(self) -> str:
        """One human-readable line."""
        k = " ".join(_fmt(t) for t in self.kernel) or "-"
        s = " ".join(_fmt(t) for t in self.simulated) or "-"
        flow = f"flow {self.flow_id}: " if self.flow_id >= 0 else ""
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.kind}: {flow}kernel {k} | simulator {s}{extra}"


def _fmt(t: tuple) -> str:
    first, last, count, plen, gso_size, _gt = t
    span = f"#{first}" if count == 1 else f"#{first}-{last}x{count}"
    return f"{span}:{plen}B" + (f"/gso{gso_size}" if count > 1 else "")


@dataclass
class ReplayReport:
    """Agreement between the live kernel and the simulator over one replay.

    ``agree``: super-packets identical in both (per flow, in order); ``kernel_units`` /
    ``simulated_units``: how many each side delivered; ``flow_order_ok``: every flow's
    units agree in order; ``global_order_ok``: the whole delivery sequence agrees;
    ``differences``: every disagreement.
    """

    kernel: tuple[int, int]
    release: str
    packets: int
    kernel_units: int
    simulated_units: int
    agree: int
    flow_order_ok: bool
    global_order_ok: bool
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Full agreement: same units per flow, nothing lost or unmatched."""
        return self.flow_order_ok and not any(d.kind in ("lost", "unmatched")
                                              for d in self.differences) \
            and self.agree == self.kernel_units == self.simulated_units

    def summary_line(self) -> str:
        """``kernel 6.18: 412/412 super-packets agree`` (+ order note)."""
        total = max(self.kernel_units, self.simulated_units)
        s = f"kernel {self.kernel[0]}.{self.kernel[1]}: {self.agree}/{total} super-packets agree"
        if not self.global_order_ok:
            s += " (global delivery order differs)"
        return s

    def to_dict(self) -> dict:
        return {"kernel": f"{self.kernel[0]}.{self.kernel[1]}", "release": self.release,
                "packets": self.packets, "kernel_units": self.kernel_units,
                "simulated_units": self.simulated_units, "agree": self.agree,
                "flow_order_ok": self.flow_order_ok, "global_order_ok": self.global_order_ok,
                "ok": self.ok, "differences": [d.to_dict() for d in self.differences]}


def _sim_units(sim) -> list[tuple]:
    return [(int(a), int(b), int(c), int(d), int(e), int(f)) for a, b, c, d, e, f in zip(
        sim.seg_first_packet, sim.seg_last_packet, sim.seg_count, sim.seg_payload_len,
        sim.seg_gso_size, sim.seg_gso_type)]


def _same(k: tuple, s: tuple, gso_known: bool) -> bool:
    if k[:3] != s[:3]:
        return False
    if k[2] > 1:
        if k[3] != s[3] or k[4] != s[4]:
            return False
        if gso_known and (k[5] & VISIBLE_GSO_BITS) != (s[5] & VISIBLE_GSO_BITS):
            return False
    return True


def compare(packets, kernel_result: KernelReplayResult, simulated) -> ReplayReport:
    """Compare what the kernel delivered with the simulator's super-packets.

    Parameters: ``packets`` the packet table (or the frame list) the simulator ran on, used
    to check it covers the replayed frames (may be ``None``); ``kernel_result`` from
    :func:`gropcap.replay.kernel.replay`; ``simulated`` a ``GroResult`` over the same
    frames. Returns a :class:`ReplayReport`.
    """
    n = len(kernel_result.frames)
    if packets is not None and len(packets) != n:
        raise ValueError(f"packet table has {len(packets)} rows, replay sent {n} frames")
    if simulated.num_packets != n:
        raise ValueError(f"simulation covers {simulated.num_packets} packets, replay sent {n}")
    flow_of = np.asarray(simulated.flow_id)
    kunits = [u for u in kernel_result.units if u.matched]
    ktuples = [u.as_tuple() for u in kunits]
    known = {u.as_tuple(): u.gso_known for u in kunits}
    stuples = _sim_units(simulated)
    diffs: list[Difference] = []

    # per flow, in order
    kf: dict[int, list[tuple]] = defaultdict(list)
    sf: dict[int, list[tuple]] = defaultdict(list)
    for t in ktuples:
        kf[int(flow_of[t[0]])].append(t)
    for t, fid in zip(stuples, simulated.seg_flow_id):
        sf[int(fid)].append(t)
    agree = 0
    flow_ok = True
    for fid in sorted(set(kf) | set(sf)):
        ks, ss = kf.get(fid, []), sf.get(fid, [])
        sm = difflib.SequenceMatcher(a=[t[:3] for t in ks], b=[t[:3] for t in ss],
                                     autojunk=False)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "equal":
                for a, b in zip(ks[i1:i2], ss[j1:j2]):
                    if _same(a, b, known.get(a, False)):
                        agree += 1
                    else:
                        flow_ok = False
                        diffs.append(Difference("field", fid, [a], [b],
                                                "payload_len/gso_size/gso_type differ"))
            else:
                flow_ok = False
                diffs.append(Difference("flow", fid, ks[i1:i2], ss[j1:j2], op))

    # global delivery order
    ka, sa = [t[:3] for t in ktuples], [t[:3] for t in stuples]
    global_ok = ka == sa
    if not global_ok and flow_ok:
        # every flow agrees, so only the interleaving differs: one difference, from the
        # first position where the two delivery sequences part
        i = next((i for i, (a, b) in enumerate(zip(ka, sa)) if a != b),
                 min(len(ka), len(sa)))
        moved = sum(a != b for a, b in zip(ka, sa))
        diffs.append(Difference("global_order", -1, ktuples[i:i + 5], stuples[i:i + 5],
                                f"first divergence at delivery {i}, "
                                f"{moved} positions differ"))
    if kernel_result.lost:
        diffs.append(Difference("lost", -1, detail="frames "
                                + ",".join(map(str, kernel_result.lost[:50]))))
    for u in kernel_result.unmatched:
        diffs.append(Difference("unmatched", -1,
                                detail=f"{u.length}-byte packet matches no input frame"))
    return ReplayReport(kernel_result.kernel, kernel_result.release, n, len(ktuples),
                        len(stuples), agree, flow_ok, global_ok, diffs)


def packets_table(frames: list[bytes]):
    """Decode Ethernet ``frames`` with the reference decoder into a packet table."""
    import pyarrow as pa

    from gropcap.capture.records import RecordBatch
    from gropcap.decode.reference import decode_batch

    n = len(frames)
    lens = np.array([len(f) for f in frames], dtype=np.int64)
    off = np.zeros(n, dtype=np.int64)
    if n:
        off[1:] = np.cumsum(lens)[:-1]
    batch = RecordBatch(
        buf=np.frombuffer(b"".join(frames), dtype=np.uint8).copy(), offset=off,
        cap_len=lens.astype(np.uint32), wire_len=lens.astype(np.uint32),
        ts_ns=np.arange(n, dtype=np.int64) * 1000, linktype=np.ones(n, np.uint16),
        iface=np.zeros(n, np.uint16), epb_flags=np.zeros(n, np.uint32),
        record=np.arange(n, dtype=np.uint64), file_offset=np.zeros(n, np.uint64))
    return pa.Table.from_batches([decode_batch(batch)])


def running_kernel_has_vlan_gro() -> bool:
    """Whether the running kernel registers vlan_gro_receive.

    vlan_core.o (whose vlan_offload_init adds the 0x8100 / 0x88A8 packet_offload) is built
    in whenever CONFIG_VLAN_8021Q is ``y`` or ``m`` (net/8021q/Makefile), so the build
    option decides. With no readable config: a loaded ``8021q`` module proves it, and
    otherwise the common build (VLAN GRO present) is assumed.
    """
    value = kernel_config_option("CONFIG_VLAN_8021Q")
    if value is not None:
        return value in ("y", "m")
    return True


def simulate_replay(kernel_result: KernelReplayResult, *, kernel=None, engine: str = "reference",
                    packets=None, **config_changes):
    """Run the simulator over the replayed frames with the replay's bursts as NAPI windows.

    Configuration mirrors the veth set-up: ``model="napi"``, ``rss="none"`` (veth delivers
    without a hash: every flow in GRO bucket 0, see ``gropcap.replay.kernel``), software
    checksum validation (veth: CHECKSUM_NONE), the replay's budget, flush timeout and
    deferral, the UDP tunnel devices it created, and whether the running kernel has VLAN
    GRO (``vlan_gro`` in the replay's config, else :func:`running_kernel_has_vlan_gro`:
    a kernel built without CONFIG_VLAN_8021Q delivers tagged frames alone). ``kernel``
    defaults to the running kernel; ``config_changes`` are GroConfig fields the caller set
    up on the receiver itself (e.g. ``udp_gro="forward"`` after enabling
    rx-udp-gro-forwarding). Returns ``(packets, GroResult)``.
    """
    from gropcap.gro.config import GroConfig, KernelProfile
    from gropcap.gro.config import needs_reference

    if packets is None:
        packets = packets_table(kernel_result.frames)
    cfg = kernel_result.config
    config = GroConfig(kernel=KernelProfile.parse(kernel or kernel_result.kernel), model="napi",
                       rss="none", verify_checksums=True, budget=int(cfg.get("budget", 64)),
                       gro_flush_timeout_ns=int(cfg.get("flush_timeout_ns", 20_000_000)),
                       napi_defer_hard_irqs=int(cfg.get("defer", 1)),
                       udp_tunnels=cfg.get("udp_tunnels", ""),
                       vlan_gro=bool(cfg.get("vlan_gro", running_kernel_has_vlan_gro())))
    if config_changes:
        config = config.replace(**config_changes)
    polls = np.asarray(kernel_result.polls, dtype=np.int64)
    # rules only the reference model has (gro.reference.needs_reference; none today): it
    # runs whatever ``engine``
    if engine == "reference" or needs_reference(config):
        from gropcap.gro.reference import simulate
    else:
        from gropcap.gro.engine import simulate
    return packets, simulate(packets, config, polls=polls)
