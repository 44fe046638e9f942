"""Just enough header parsing for the replay: flow keys, sequence ranges, checksum repair.

Layer: a helper of the replay, independent of the decode layer on purpose (the replay
checks the decoder and the simulator; it must not share their mistakes). Handles Ethernet,
802.1Q/802.1ad tags, IPv4 (options), IPv6 (Hop-by-Hop, Routing, Destination Options,
Fragment), one tunnel level of IPIP / SIT / ip6ip6 / ip4ip6 / GRE (IP or TEB payload), and
TCP/UDP. Anything else parses as "no L4" and is matched by its bytes alone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gropcap import constants as C

_VLAN = (C.ETH_P_8021Q, C.ETH_P_8021AD, C.ETH_P_QINQ1)
_V6_EXT = (C.IPPROTO_HOPOPTS, C.IPPROTO_ROUTING, C.IPPROTO_DSTOPTS)


def ones_sum(data: bytes, s: int = 0) -> int:
    """Unfolded one's-complement sum of big-endian 16-bit words (odd tail padded)."""
    if len(data) & 1:
        data = bytes(data) + b"\0"
    return s + sum(struct.unpack(f"!{len(data) // 2}H", data))


def fold(s: int) -> int:
    """Fold a one's-complement sum to 16 bits (not inverted)."""
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@dataclass
class IpLayer:
    """One IP header: offset, version, header length, addresses, L4 protocol, lengths."""

    off: int
    version: int
    hlen: int               # IPv4 ihl*4, IPv6 40 + extension headers walked
    src: bytes
    dst: bytes
    proto: int              # protocol after the extension headers
    end: int                # offset one past the IP datagram (from its length field)
    fragment: bool = False


@dataclass
class Parsed:
    """Where the layers of one frame are and the key of its flow."""

    ips: list[IpLayer] = field(default_factory=list)
    l4_proto: int = -1
    l4_off: int = -1
    sport: int = 0
    dport: int = 0
    seq: int = 0
    flags: int = 0
    payload_off: int = -1
    payload_len: int = -1       # from the innermost IP length, not from the capture
    key: tuple = ()

    @property
    def ok(self) -> bool:
        return self.l4_proto in (C.IPPROTO_TCP, C.IPPROTO_UDP) and self.payload_len >= 0


def _ip(b: bytes, off: int, version_hint: int | None = None) -> IpLayer | None:
    if off + 20 > len(b):
        return None
    ver = b[off] >> 4
    if version_hint and ver != version_hint:
        return None
    if ver == 4:
        ihl = (b[off] & 0xF) * 4
        if ihl < 20 or off + ihl > len(b):
            return None
        tot = struct.unpack_from("!H", b, off + 2)[0]
        frag = struct.unpack_from("!H", b, off + 6)[0]
        return IpLayer(off, 4, ihl, bytes(b[off + 12:off + 16]), bytes(b[off + 16:off + 20]),
                       b[off + 9], off + tot, bool(frag & (C.IP_MF | C.IP_OFFMASK)))
    if ver == 6:
        if off + 40 > len(b):
            return None
        plen = struct.unpack_from("!H", b, off + 4)[0]
        nh, p, frag = b[off + 6], off + 40, False
        while nh in _V6_EXT or nh == C.IPPROTO_FRAGMENT:
            if p + 8 > len(b):
                return None
            if nh == C.IPPROTO_FRAGMENT:
                frag = frag or bool(struct.unpack_from("!H", b, p + 2)[0] & 0xFFF9)
                nh, p = b[p], p + 8
            else:
                nh, p = b[p], p + (b[p + 1] + 1) * 8
        return IpLayer(off, 6, p - off, bytes(b[off + 8:off + 24]), bytes(b[off + 24:off + 40]),
                       nh, off + 40 + plen, frag)
    return None


def parse(frame: bytes) -> Parsed:
    """Parse an Ethernet frame; never raises (a short/odd frame gives ``ok == False``)."""
    b = frame
    r = Parsed()
    key: list = []
    off = 12
    try:
        et = struct.unpack_from("!H", b, off)[0]
        while et in _VLAN:
            key.append(("vlan", struct.unpack_from("!H", b, off + 2)[0] & 0x0FFF))
            off += 4
            et = struct.unpack_from("!H", b, off)[0]
        off += 2
        depth = 0
        while True:
            if et not in (C.ETH_P_IP, C.ETH_P_IPV6):
                return r
            ip = _ip(b, off, 4 if et == C.ETH_P_IP else 6)
            if ip is None:
                return r
            r.ips.append(ip)
            key.append((ip.version, ip.src, ip.dst, ip.proto))
            if ip.fragment:
                r.key = tuple(key)
                return r
            nxt = ip.off + ip.hlen
            depth += 1
            if depth > 2:
                return r
            if ip.proto == C.IPPROTO_IPIP:
                et, off = C.ETH_P_IP, nxt
                continue
            if ip.proto == C.IPPROTO_IPV6:
                et, off = C.ETH_P_IPV6, nxt
                continue
            if ip.proto == C.IPPROTO_GRE:
                flags, proto = struct.unpack_from("!HH", b, nxt)
                if flags & C.GRE_VERSION:
                    return r
                gh = 4 + 4 * bool(flags & C.GRE_CSUM) + 4 * bool(flags & C.GRE_KEY) \
                    + 4 * bool(flags & C.GRE_SEQ)
                gkey = 0
                if flags & C.GRE_KEY:
                    gkey = struct.unpack_from("!I", b, nxt + 4 + 4 * bool(flags & C.GRE_CSUM))[0]
                key.append(("gre", flags & ~C.GRE_SEQ, proto, gkey))
                off = nxt + gh
                if proto == C.ETH_P_TEB:
                    key.append(("eth", bytes(b[off:off + 12])))
                    et = struct.unpack_from("!H", b, off + 12)[0]
                    off += 14
                else:
                    et = proto
                continue
            if ip.proto == C.IPPROTO_UDP and depth == 1:
                # UDP tunnels on their IANA ports: VXLAN (RFC 7348), Geneve (RFC 8926),
                # VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe)
                sport, dport = struct.unpack_from("!HH", b, nxt)
                if dport in (C.VXLAN_PORT, C.GENEVE_PORT, C.VXLAN_GPE_PORT):
                    t = nxt + 8
                    if dport == C.VXLAN_PORT:
                        hl = C.VXLAN_HLEN
                        inner_et = C.ETH_P_TEB
                    elif dport == C.VXLAN_GPE_PORT:
                        # VXLAN-GPE next protocol (byte 3): 1 IPv4, 2 IPv6, 3 Ethernet
                        hl = C.VXLAN_HLEN
                        inner_et = {1: C.ETH_P_IP, 2: C.ETH_P_IPV6,
                                    3: C.ETH_P_TEB}.get(b[t + 3], 0)
                    else:
                        hl = C.GENEVE_HLEN + (b[t] & 0x3F) * 4
                        inner_et = struct.unpack_from("!H", b, t + 2)[0]
                    key.append(("udptun", dport, bytes(b[t:t + hl])))
                    off = t + hl
                    if inner_et == C.ETH_P_TEB:
                        key.append(("eth", bytes(b[off:off + 12])))
                        et = struct.unpack_from("!H", b, off + 12)[0]
                        off += 14
                    else:
                        et = inner_et
                    continue
            break
        ip = r.ips[-1]
        l4 = ip.off + ip.hlen
        if ip.proto == C.IPPROTO_TCP and l4 + 20 <= len(b):
            sport, dport, seq = struct.unpack_from("!HHI", b, l4)
            doff = (b[l4 + 12] >> 4) * 4
            r.l4_proto, r.l4_off, r.sport, r.dport, r.seq = ip.proto, l4, sport, dport, seq
            r.flags = ((b[l4 + 12] & 1) << 8) | b[l4 + 13]
            r.payload_off = l4 + doff
            r.payload_len = ip.end - r.payload_off
        elif ip.proto == C.IPPROTO_UDP and l4 + 8 <= len(b):
            sport, dport = struct.unpack_from("!HH", b, l4)
            r.l4_proto, r.l4_off, r.sport, r.dport = ip.proto, l4, sport, dport
            r.payload_off = l4 + 8
            r.payload_len = ip.end - r.payload_off
        key.append((ip.proto, r.sport, r.dport))
        r.key = tuple(key)
    except (struct.error, IndexError):
        pass
    return r


def _l4_pseudo(b: bytes, ip: IpLayer, l4len: int) -> int:
    if ip.version == 4:
        return ones_sum(ip.src + ip.dst + struct.pack("!HH", ip.proto, l4len))
    return ones_sum(ip.src + ip.dst + struct.pack("!IxxxB", l4len, ip.proto))


def l4_checksum_state(frame: bytes, p: Parsed | None = None) -> str:
    """"good", "bad", "partial" (offload not done: field = pseudo-header sum) or "none"."""
    p = p or parse(frame)
    if not p.ok:
        return "none"
    ip = p.ips[-1]
    if ip.end > len(frame):
        return "none"
    seg = bytes(frame[p.l4_off:ip.end])
    ck_off = 16 if p.l4_proto == C.IPPROTO_TCP else 6
    if p.l4_proto == C.IPPROTO_UDP and struct.unpack_from("!H", seg, 6)[0] == 0 \
            and ip.version == 4:
        return "good"            # UDP over IPv4 without a checksum
    pseudo = _l4_pseudo(frame, ip, len(seg))
    if fold(ones_sum(seg, pseudo)) == 0xFFFF:
        return "good"
    field = struct.unpack_from("!H", seg, ck_off)[0]
    if field in (fold(pseudo), (~fold(pseudo)) & 0xFFFF):
        return "partial"
    return "bad"


def ip4_header_ok(frame: bytes, ip: IpLayer) -> bool:
    """True when the IPv4 header checksum verifies."""
    return fold(ones_sum(bytes(frame[ip.off:ip.off + ip.hlen]))) == 0xFFFF


def fix_frame(frame: bytes, wire_len: int | None = None, *, fix_checksums: bool = True,
              csum_not_ready: bool = False) -> tuple[bytes, str]:
    """Pad a snapped frame to its wire length and repair checksums for software GRO.

    Policy (veth's receiver validates checksums in software, CHECKSUM_NONE, so a frame with
    a wrong checksum never merges): a frame cut by the snap length is padded with zero
    payload and its L4 checksum recomputed (the original cannot be checked); a complete frame
    whose L4 checksum is offload-partial (``csum_not_ready`` or the field holds the
    pseudo-header sum) is recomputed; a complete frame with any other bad checksum is
    DELIBERATE and kept bad. IPv4 header checksums are recomputed only when they were valid
    (padding never changes a header). UDP over IPv4 with checksum 0 stays 0.

    Returns (frame, action) with action "kept", "padded", "fixed" or "kept-bad".
    """
    b = bytearray(frame)
    padded = wire_len is not None and wire_len > len(b)
    if padded:
        b += bytes(wire_len - len(b))
    if not fix_checksums:
        return bytes(b), "padded" if padded else "kept"
    p = parse(bytes(b))
    if not p.ok:
        return bytes(b), "padded" if padded else "kept"
    state = "none" if padded else l4_checksum_state(bytes(b), p)
    if state == "good":
        return bytes(b), "kept"
    if state == "bad" and not csum_not_ready:
        return bytes(b), "kept-bad"
    ip = p.ips[-1]
    if ip.end > len(b):
        return bytes(b), "padded" if padded else "kept"
    ck = p.l4_off + (16 if p.l4_proto == C.IPPROTO_TCP else 6)
    if p.l4_proto == C.IPPROTO_UDP and ip.version == 4 and b[ck] == 0 and b[ck + 1] == 0:
        return bytes(b), "padded" if padded else "kept"
    b[ck:ck + 2] = b"\0\0"
    seg = bytes(b[p.l4_off:ip.end])
    c = (~fold(ones_sum(seg, _l4_pseudo(b, ip, len(seg))))) & 0xFFFF
    if p.l4_proto == C.IPPROTO_UDP and c == 0:
        c = 0xFFFF
    struct.pack_into("!H", b, ck, c)
    # outer UDP (e.g. VXLAN) checksums cover the inner packet: repair them too if non-zero
    for outer in p.ips[:-1]:
        if outer.proto == C.IPPROTO_UDP and outer.end <= len(b):
            uo = outer.off + outer.hlen
            if b[uo + 6] or b[uo + 7] or outer.version == 6:
                b[uo + 6:uo + 8] = b"\0\0"
                useg = bytes(b[uo:outer.end])
                c = (~fold(ones_sum(useg, _l4_pseudo(b, outer, len(useg))))) & 0xFFFF
                struct.pack_into("!H", b, uo + 6, c or 0xFFFF)
    return bytes(b), "fixed"
