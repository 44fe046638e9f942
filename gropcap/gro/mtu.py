"""The receiving device's MTU: given with ``--mtu``, or inferred from the capture.

Layer: packet-column statistics (:class:`gropcap.gro.coalesced.CoalescedStats`, gathered batch by
batch) -> :class:`MtuInference`. The MTU decides which frames are wire frames (at most MTU
bytes of outermost IP packet) and which were captured already coalesced (above it: after
GRO on the receiver or TSO/GSO on the sender), see ``docs/gro-model.md`` "The receiving
device's MTU". The rules, first that applies:

1. ``--mtu`` (``GroConfig.mtu``): used as given.
2. **SYN MSS.** A SYN's MSS option is ``MTU - 40`` (IPv4) or ``MTU - 60`` (IPv6) of the
   host that sent it (``tcp_mss_to_mtu``; ``ip_rt_get_advmss`` / ``ip6_default_advmss``),
   plus the bytes of any encapsulation outside the TCP/IP header (an overlay's underlay
   frames are that much larger). The MTU is the largest of these over every SYN: no peer
   may send a segment larger than the MSS it was given, so no wire frame is larger.
   *Conflict* (a warning): frames above it that are not provably coalesced, i.e. anything
   but a TCP data frame whose payload exceeds its direction's MSS (a TCP payload above the
   MSS can only be GRO/TSO output). Then the device MTU may be larger than the SYNs say
   (MSS clamping) or the frames are UDP GRO/GSO output; they are taken as coalesced.
3. **Linux loopback.** Without SYNs: every Ethernet frame has all-zero MAC addresses, as
   on ``lo`` (``loopback_setup``: MTU 64 KiB): MTU 65536.
4. **Jumbo flows.** Without SYNs: a TCP direction whose most common data frame (at least
   two of them) is an IP packet of 1501..9216 bytes segments to a jumbo MTU (a sender cuts
   full segments at one size), unless that frame's payload is a multiple of a smaller
   payload the same direction also sent (then it is TSO/GRO output: k segments of that
   size). The MTU is the largest such size, rounded up to 9000 when below it.
5. Otherwise the Ethernet default, 1500. Frames above it (with no SYN to tell a 64 KiB
   loopback/veth MTU from GRO/TSO output) are taken as coalesced, and the report says so.
"""

from __future__ import annotations

import dataclasses

ETH_MTU = 1500          # Ethernet (ether_setup)
JUMBO_MTU = 9000        # the usual data-centre jumbo MTU
JUMBO_MAX = 9216        # the largest jumbo MTU switches commonly allow
MIN_MTU = 68            # IPv4 minimum (RFC 791); IPv6 needs 1280
MAX_MTU = 65536         # loopback (blackhole_netdev / loopback_setup: 64 KiB)


@dataclasses.dataclass(frozen=True)
class MtuInference:
    """The MTU in use and why.

    Attributes:
        mtu: bytes of IP packet (the device MTU).
        source: ``"option"`` (given), ``"inferred"`` (from the capture) or ``"default"``
            (nothing in the capture tells; the Ethernet default).
        evidence: what it was taken from, one phrase (``"the MSS of 12 SYNs"``).
        above: frames above the MTU (taken as coalesced).
        largest: the largest outermost IP packet seen (bytes).
        conflict: a warning when the evidence disagrees, else None.
    """

    mtu: int
    source: str
    evidence: str
    above: int = 0
    largest: int = 0
    conflict: str | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for the text report: ``MTU 9000, inferred from the MSS of 12 SYNs``."""
        if self.source == "option":
            text = f"MTU {self.mtu}, given with --mtu"
        elif self.source == "default":
            text = f"MTU {self.mtu}, the Ethernet default ({self.evidence})"
        else:
            text = f"MTU {self.mtu}, inferred from {self.evidence}"
        if self.above and not self.conflict:
            text += (f"; {self.above} larger frames (up to {self.largest} IP bytes) are taken "
                     f"as already coalesced")
            if self.source == "default":
                text += " (--mtu 65535 if captured on loopback or a 64K-MTU veth)"
        return text


def resolve_mtu(stats) -> MtuInference:
    """The MTU for a capture whose statistics are ``stats`` (a
    :class:`gropcap.gro.coalesced.CoalescedStats`; its ``mtu_option`` wins). Rules: module docstring.
    """
    import numpy as np
    n_syn, syn_top, syn_mss, size_tot, size_frames = stats.summary()
    tots: dict[int, int] = dict(stats.other_tot)
    for k, c in stats.syn_data_tot.items():
        tots[k] = tots.get(k, 0) + c
    for k, c in zip(size_tot.tolist(), size_frames.tolist()):
        tots[k] = tots.get(k, 0) + c
    largest = max(tots) if tots else 0

    def above(mtu):
        return sum(c for t, c in tots.items() if t > mtu)

    if stats.mtu_option is not None:
        mtu = int(stats.mtu_option)
        return MtuInference(mtu, "option", f"--mtu {mtu}", above(mtu), largest)
    if n_syn:
        mtu = int(syn_top)
        mss = syn_mss.tolist()
        n = n_syn
        shown = f"MSS {mss[0]}" if len(mss) == 1 else f"MSS {mss[0]}..{mss[-1]}"
        evidence = f"the MSS option of {n} SYN{'s' if n != 1 else ''} ({shown})"
        # frames above it that are not provably coalesced (TCP payload above its MSS)
        odd = sum(c for t, c in stats.other_tot.items() if t > mtu)
        odd_largest = max((t for t in stats.other_tot if t > mtu), default=0)
        # a SYN carrying more than its own MSS allows is coalesced; otherwise it conflicts
        odd += sum(c for t, c in stats.syn_data_tot.items() if t > mtu)
        odd_largest = max([odd_largest] + [t for t in stats.syn_data_tot if t > mtu])
        if size_tot[-1:].tolist() and int(size_tot[-1]) > mtu:
            for s in stats.slices():        # a key range at a time
                keys, direction, code, frames = s.size
                big = np.flatnonzero((code >> 20) > mtu)
                if not len(big):
                    continue
                # the MSS of the other direction's SYN, else of this direction's
                peer = stats.peer_mss(keys[direction[big]])
                bad = big[~((peer != 0) & ((code[big] & 0xFFFFF) > peer))]
                if len(bad):
                    odd += int(frames[bad].sum())
                    odd_largest = max(odd_largest, int((code[bad] >> 20).max()))
        conflict = None
        if odd:
            conflict = (f"MTU evidence conflicts: {odd} frames (up to {odd_largest} IP bytes) "
                        f"are larger than the {mtu}-byte MTU implied by {evidence} but not "
                        f"provably coalesced (no TCP payload above its MSS); they are taken "
                        f"as coalesced. Give --mtu if the receiving device's MTU is larger")
        return MtuInference(mtu, "inferred", evidence, above(mtu), largest, conflict)
    if stats.eth_frames and stats.zero_mac == stats.eth_frames:
        return MtuInference(MAX_MTU, "inferred",
                            f"all-zero MAC addresses on {stats.eth_frames} Ethernet frames "
                            f"(Linux loopback, no SYN in the capture)",
                            above(MAX_MTU), largest)
    jumbo = []
    if len(size_tot) and int(size_tot[-1]) > ETH_MTU:
        for s in stats.slices():            # a key range at a time
            jumbo += _jumbo_sizes(*s.size[1:])
    if jumbo:
        size = max(jumbo)
        mtu = JUMBO_MTU if size <= JUMBO_MTU else size
        n = len(jumbo)
        evidence = (f"the full segments of {n} TCP direction{'s' if n != 1 else ''} "
                    f"({size} IP bytes; no SYN in the capture)")
        return MtuInference(mtu, "inferred", evidence, above(mtu), largest)
    evidence = "no SYN MSS, no jumbo or loopback frames"
    return MtuInference(ETH_MTU, "default", evidence, above(ETH_MTU), largest)


def _jumbo_sizes(direction, code, frames) -> list[int]:
    """Rule 4 over size entries (per (direction, ``(IP length << 20) | payload``) their
    frames, sorted by both; every entry of each direction): the IP length of each
    direction whose most common data frame (the largest on ties; at least two) is
    1501..9216 bytes, unless that frame's payload is a multiple of a smaller payload
    the direction also sent."""
    import numpy as np
    tot, pl = code >> 20, code & 0xFFFFF
    jumbo = []
    if not len(direction):
        return jumbo
    # per direction its most common IP length (the largest on ties): frames per
    # (direction, length) (entries are sorted by direction, then code: by length)
    start = np.ones(len(direction), np.bool_)
    start[1:] = (direction[1:] != direction[:-1]) | (tot[1:] != tot[:-1])
    at = np.flatnonzero(start)
    g_dir, g_tot, g_n = direction[at], tot[at], np.add.reduceat(frames, at)
    order = np.lexsort((g_tot, g_n, g_dir))
    last = np.ones(len(order), np.bool_)
    last[:-1] = g_dir[order][1:] != g_dir[order][:-1]
    pick = order[last]
    cand = pick[(g_tot[pick] > ETH_MTU) & (g_tot[pick] <= JUMBO_MAX) & (g_n[pick] >= 2)]
    for d, t in zip(g_dir[cand].tolist(), g_tot[cand].tolist()):
        lo, hi = np.searchsorted(direction, [d, d + 1])
        pls = pl[lo:hi].tolist()
        # TSO/GRO output: its payload is a multiple of a segment the flow also sent
        top = max(p for p, tt in zip(pls, tot[lo:hi].tolist()) if tt == t)
        if not any(0 < p < top and top % p == 0 for p in pls):
            jumbo.append(t)
    return jumbo


__all__ = ["MtuInference", "resolve_mtu", "ETH_MTU", "JUMBO_MTU", "JUMBO_MAX", "MIN_MTU",
           "MAX_MTU"]
