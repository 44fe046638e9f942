#!/usr/bin/env python3
"""Generate the CRAFTED sample captures: encapsulations and link types this machine cannot
easily send, each carrying a small TCP bulk flow for the GRO engine to aggregate.

Usage (from the repository root; deterministic, byte-for-byte reproducible)::

    python3 sample_pcaps/make_crafted.py            # writes sample_pcaps/crafted_*.pcap[ng]
    python3 sample_pcaps/make_crafted.py -o /tmp/x  # elsewhere
    python3 sample_pcaps/make_crafted.py --list     # names and descriptions only

Every capture holds one TCP bulk flow per direction pair (two flows for the DSA and
two-interface files) built by :func:`bulk_flow`:

- ``DATA_SEGS`` data segments of MSS bytes with the timestamps option (NOP NOP TS), in
  order, ACK set, IPv4 DF set and IP ID incrementing by one (Linux's behaviour for a
  connected socket), TTL/hop limit 64;
- TSval advances every ``TSVAL_EVERY`` segments, as a sender with a 1 ms clock does;
- a PSH on data segment ``PSH_AT`` and on the last, shorter segment (end of a write);
- one lost segment: after data segment ``GAP_AFTER`` the sequence jumps by 2 MSS;
- a pure ACK from the receiver after every ``ACK_EVERY`` data segments (travelling in the
  reverse direction through the tunnel), unless the capture is one-directional.

MSS is derived per encapsulation so that the OUTER IP packet is exactly 1500 bytes (the
kernel would do the same from the tunnel device's MTU): frames are wire-sized and never
look like already-coalesced GSO packets.

Frames are stored with snaplen 128 (``cap_len = min(128, wire_len)``) and the true
``wire_len``; IP total lengths, UDP lengths and all checksums describe the FULL frame with
an all-zero TCP payload. So a consumer that pads the payload back with zero bytes gets a
frame whose IPv4 header, TCP, GRE and UDP checksums all verify. The generator asserts that
the innermost TCP header (with options) fits in the snap length.
"""

from __future__ import annotations

import argparse
import ipaddress
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from gropcap import constants as C  # noqa: E402
from gropcap.capture.writer import write_pcap, write_pcapng  # noqa: E402

SNAPLEN = 128
MTU = 1500
BASE_TS_NS = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z
GAP_NS = 12_000                             # 12 us between frames: about 1 Gbit/s
GAP_NS_NANO = 11_111                        # for the nanosecond file: not a whole us

DATA_SEGS = 32
TSVAL_EVERY = 8
PSH_AT = 13
GAP_AFTER = 20
ACK_EVERY = 10
LAST_PAYLOAD = 700
TCP_OPT_LEN = 12          # NOP NOP TS
TCP_WINDOW = 502
TSVAL0 = 0x10203040
TSECR0 = 0x0A0B0C0D

# Addresses: documentation ranges (RFC 5737, RFC 3849).
IN4 = ("192.0.2.1", "192.0.2.2")          # inner / plain IPv4 endpoints
IN4_B = ("192.0.2.11", "192.0.2.12")      # second flow
OUT4 = ("198.51.100.1", "198.51.100.2")   # tunnel endpoints over IPv4
IN6 = ("2001:db8:1::1", "2001:db8:1::2")
IN6_B = ("2001:db8:1::11", "2001:db8:1::12")
OUT6 = ("2001:db8:ff::1", "2001:db8:ff::2")
MAC_A = 0x020000000001    # outer / plain sender
MAC_B = 0x020000000002    # outer / plain receiver
IMAC_A = 0x02000000AA01   # inner Ethernet (TEB, ERSPAN, Geneve)
IMAC_B = 0x02000000AA02

GRE_KEY = 0x00012345
GRE_SEQ0 = 1000
VNI = 0x00ABCDEF
GENEVE_OPT = struct.pack("!HBB", 0x0102, 0x80, 1) + b"\xde\xad\xbe\xef"  # class, type, len=1 word
ERSPAN_SESSION = 0x155
UDP_SPORT = 49_321


# --- checksums ----------------------------------------------------------------------

def csum(data: bytes, start: int = 0) -> int:
    """RFC 1071 Internet checksum of ``data`` (optionally continuing a partial sum)."""
    if len(data) & 1:
        data += b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def _pseudo(src: bytes, dst: bytes, proto: int, length: int) -> int:
    if len(src) == 4:
        hdr = src + dst + struct.pack("!BBH", 0, proto, length)
    else:
        hdr = src + dst + struct.pack("!IxxxB", length, proto)
    return sum(struct.unpack(f"!{len(hdr) // 2}H", hdr))


# --- headers (full packets, payload all zero) ------------------------------------------

def a(addr: str) -> bytes:
    return ipaddress.ip_address(addr).packed


def mac(m: int) -> bytes:
    return m.to_bytes(6, "big")


def ipv4(src: str, dst: str, proto: int, payload: bytes, ip_id: int, *, ttl: int = 64,
         tos: int = 0, df: bool = True) -> bytes:
    """IPv4 header (RFC 791) with a valid header checksum, followed by ``payload``."""
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + len(payload), ip_id & 0xFFFF,
                      C.IP_DF if df else 0, ttl, proto, 0, a(src), a(dst))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + payload


def ipv6(src: str, dst: str, nh: int, payload: bytes, *, hlim: int = 64, tclass: int = 0,
         flow: int = 0, ext: bytes = b"") -> bytes:
    """IPv6 header (RFC 8200); ``ext`` are extension headers placed before ``payload``
    (``nh`` is then the first extension's type)."""
    word = (6 << 28) | (tclass << 20) | flow
    return struct.pack("!IHBB16s16s", word, len(ext) + len(payload), nh, hlim, a(src),
                       a(dst)) + ext + payload


def tcp(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
        tsval: int, tsecr: int, payload_len: int) -> bytes:
    """TCP header (RFC 9293) with NOP NOP TS options and ``payload_len`` zero bytes; the
    checksum covers the full segment and the pseudo-header of ``src``/``dst``."""
    opts = struct.pack("!BBBBII", C.TCPOPT_NOP, C.TCPOPT_NOP, C.TCPOPT_TIMESTAMP, 10,
                       tsval, tsecr)
    doff = (20 + len(opts)) // 4
    seg = struct.pack("!HHIIHHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                      (doff << 12) | flags, TCP_WINDOW, 0, 0) + opts + bytes(payload_len)
    ck = csum(seg, _pseudo(a(src), a(dst), C.IPPROTO_TCP, len(seg)))
    return seg[:16] + struct.pack("!H", ck) + seg[18:]


def udp(sport: int, dport: int, payload: bytes, *, pseudo: tuple[str, str] | None = None) -> bytes:
    """UDP header; checksum 0 (not computed, the Linux default for IPv4 UDP tunnels)
    unless ``pseudo`` = (src, dst) asks for one (mandatory over IPv6)."""
    length = 8 + len(payload)
    dg = struct.pack("!HHHH", sport, dport, length, 0) + payload
    if pseudo is not None:
        ck = csum(dg, _pseudo(a(pseudo[0]), a(pseudo[1]), C.IPPROTO_UDP, length)) or 0xFFFF
        dg = dg[:6] + struct.pack("!H", ck) + dg[8:]
    return dg


def gre(proto: int, payload: bytes, *, key: int | None = None, seq: int | None = None,
        with_csum: bool = False) -> bytes:
    """GRE v0 header (RFC 2784, key and sequence from RFC 2890). The checksum, when
    present, covers the GRE header and the full payload."""
    flags = (C.GRE_CSUM if with_csum else 0) | (C.GRE_KEY if key is not None else 0) \
        | (C.GRE_SEQ if seq is not None else 0)
    hdr = struct.pack("!HH", flags, proto)
    if with_csum:
        hdr += b"\0\0\0\0"                 # checksum + reserved1, filled below
    if key is not None:
        hdr += struct.pack("!I", key)
    if seq is not None:
        hdr += struct.pack("!I", seq & 0xFFFFFFFF)
    pkt = hdr + payload
    if with_csum:
        pkt = pkt[:4] + struct.pack("!H", csum(pkt)) + pkt[6:]
    return pkt


def eth(dst: int, src: int, ethertype: int, payload: bytes, *,
        tags: tuple[tuple[int, int], ...] = ()) -> bytes:
    """Ethernet II header with optional in-band VLAN ``tags`` = ((tpid, tci), ...) outer
    first."""
    hdr = mac(dst) + mac(src)
    for tpid, tci in tags:
        hdr += struct.pack("!HH", tpid, tci)
    return hdr + struct.pack("!H", ethertype) + payload


def erspan2_hdr(session: int, index: int) -> bytes:
    """ERSPAN type II header (draft-foschiano-erspan 4.2): ver=1, VLAN 0, COS 0, En 0,
    T 0, session ID, reserved, index."""
    return struct.pack("!HHI", (1 << 12) | 0, session & 0x3FF, index & 0xFFFFF)


def erspan3_hdr(session: int, timestamp: int) -> bytes:
    """ERSPAN type III header (draft-foschiano-erspan 4.3), 12 bytes: ver=2, VLAN 0,
    COS 0, BSO 0, T 0, session ID, 32-bit timestamp, SGT 0, P 0, FT 0 (Ethernet),
    HW ID 1, D 0 (ingress), Gra 3 (IEEE 1588), O 0 (no platform sub-header)."""
    last = (0 << 15) | (0 << 10) | (1 << 4) | (0 << 3) | (3 << 1) | 0
    return struct.pack("!HHIHH", (2 << 12) | 0, session & 0x3FF, timestamp & 0xFFFFFFFF,
                       0, last)


def geneve_hdr(proto: int, vni: int, opts: bytes) -> bytes:
    """Geneve header (RFC 8926 3.4): version 0, option length in 4-byte words, O=0 C=0."""
    assert len(opts) % 4 == 0
    return struct.pack("!BBHI", len(opts) // 4, 0, proto, vni << 8) + opts


def vxlan_gpe_hdr(next_proto: int, vni: int) -> bytes:
    """VXLAN-GPE header (draft-ietf-nvo3-vxlan-gpe 3.2): flags I|P (0x0C), version 0,
    next protocol (1 IPv4, 2 IPv6, 3 Ethernet), VNI."""
    return struct.pack("!BxxBI", 0x0C, next_proto, vni << 8)


# Destination-options header carrying the tunnel encapsulation limit (RFC 2473 4.1.1),
# as ip6_tnl_xmit adds by default (encaplimit 4): next header, length 0, option type 4,
# length 1, limit 4, then PadN of 1 byte.
def encap_limit_dstopt(next_header: int, limit: int = 4) -> bytes:
    return struct.pack("!BBBBBBBB", next_header, 0, 4, 1, limit, 1, 1, 0)


# --- the TCP flow ---------------------------------------------------------------------

@dataclass
class Pkt:
    """One inner IP packet of the flow, full length."""
    l3: bytes
    v6: bool
    reverse: bool   # receiver -> sender (pure ACK)
    flow: int       # flow number in the capture (0, 1)


def mss_for(overhead: int, v6_inner: bool) -> int:
    """MSS so that the outer IP packet is MTU bytes: what the kernel derives from the
    tunnel device MTU (MTU - encapsulation overhead)."""
    return MTU - overhead - (40 if v6_inner else 20) - 20 - TCP_OPT_LEN


def bulk_flow(src: str, dst: str, sport: int, dport: int, mss: int, *, flow: int = 0,
              acks: bool = True, isn: int = 0x11223344, ack_isn: int = 0x55667788) -> list[Pkt]:
    """The sample TCP bulk transfer (see the module docstring), in capture order."""
    v6 = ":" in src
    out: list[Pkt] = []
    ip_id, rev_id = 0x1000 + 0x100 * flow, 0x7000 + 0x100 * flow
    seq = isn
    for i in range(DATA_SEGS):
        last = i == DATA_SEGS - 1
        plen = LAST_PAYLOAD if last else mss
        flags = C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if (i == PSH_AT or last) else 0)
        tsval = TSVAL0 + i // TSVAL_EVERY
        seg = tcp(src, dst, sport, dport, seq, ack_isn, flags, tsval, TSECR0, plen)
        l3 = ipv6(src, dst, C.IPPROTO_TCP, seg) if v6 else \
            ipv4(src, dst, C.IPPROTO_TCP, seg, ip_id)
        out.append(Pkt(l3, v6, False, flow))
        ip_id += 1
        seq += plen
        if i == GAP_AFTER:
            seq += mss    # the segment after this one was lost before the capture point
        if acks and (i + 1) % ACK_EVERY == 0:
            seg = tcp(dst, src, dport, sport, ack_isn, seq, C.TCP_FLAG_ACK, TSECR0 + i,
                      tsval, 0)
            l3 = ipv6(dst, src, C.IPPROTO_TCP, seg) if v6 else \
                ipv4(dst, src, C.IPPROTO_TCP, seg, rev_id)
            out.append(Pkt(l3, v6, True, flow))
            rev_id += 1
    return out


def interleave(*flows: list[Pkt], block: int = 4) -> list[Pkt]:
    """Round-robin ``block`` packets at a time from each flow, as a NIC sees them."""
    out: list[Pkt] = []
    pos = [0] * len(flows)
    while any(p < len(f) for p, f in zip(pos, flows)):
        for k, f in enumerate(flows):
            out.extend(f[pos[k]:pos[k] + block])
            pos[k] += block
    return out


# --- encapsulations: inner packet -> frame ---------------------------------------------

class Encap:
    """Wraps inner IP packets into frames; keeps per-direction outer IP ID / GRE seq
    counters, like a tunnel device does."""

    def __init__(self, fn: Callable[["Encap", Pkt], bytes]) -> None:
        self.fn = fn
        self.outer_id = [0x4000, 0x5000]
        self.gre_seq = [GRE_SEQ0, GRE_SEQ0 + 50000]
        self.count = 0

    def next_id(self, p: Pkt) -> int:
        v = self.outer_id[p.reverse]
        self.outer_id[p.reverse] += 1
        return v

    def next_seq(self, p: Pkt) -> int:
        v = self.gre_seq[p.reverse]
        self.gre_seq[p.reverse] += 1
        return v

    def __call__(self, p: Pkt) -> bytes:
        self.count += 1
        return self.fn(self, p)


def _ends(p: Pkt, pair: tuple[str, str]) -> tuple[str, str]:
    return (pair[1], pair[0]) if p.reverse else pair


def _macs(p: Pkt, m1: int = MAC_A, m2: int = MAC_B) -> tuple[int, int]:
    """(dst, src) MACs for the packet's direction."""
    return (m1, m2) if p.reverse else (m2, m1)


def _etype(p: Pkt) -> int:
    return C.ETH_P_IPV6 if p.v6 else C.ETH_P_IP


def plain_eth(e: Encap, p: Pkt, tags=()) -> bytes:
    d, s = _macs(p)
    return eth(d, s, _etype(p), p.l3, tags=tags)


def over_ipv4(e: Encap, p: Pkt, proto: int, payload: bytes, *, df: bool = True) -> bytes:
    s, d = _ends(p, OUT4)
    dm, sm = _macs(p)
    return eth(dm, sm, C.ETH_P_IP, ipv4(s, d, proto, payload, e.next_id(p), df=df))


def over_ipv6(e: Encap, p: Pkt, nh: int, payload: bytes, *, ext: bytes = b"") -> bytes:
    s, d = _ends(p, OUT6)
    dm, sm = _macs(p)
    return eth(dm, sm, C.ETH_P_IPV6, ipv6(s, d, nh, payload, ext=ext))


def inner_eth(p: Pkt) -> bytes:
    d, s = _macs(p, IMAC_A, IMAC_B)
    return eth(d, s, _etype(p), p.l3)


def udp4_tunnel(e: Encap, p: Pkt, dport: int, hdr: bytes) -> bytes:
    # Source port from the inner flow hash in Linux; fixed per direction here.
    # Outer DF off: the vxlan/geneve default (no df set).
    return over_ipv4(e, p, C.IPPROTO_UDP, udp(UDP_SPORT + p.reverse, dport, hdr), df=False)


# --- link-layer pseudo headers -----------------------------------------------------------

def sll(p: Pkt) -> bytes:
    """LINUX_SLL (113) header: packet type (0 host, 4 outgoing), ARPHRD_ETHER, address."""
    pkttype = 4 if p.reverse else 0
    src = MAC_B if p.reverse else MAC_A
    return struct.pack("!HHH8sH", pkttype, 1, 6, mac(src) + b"\0\0", _etype(p)) + p.l3


def sll2(p: Pkt) -> bytes:
    """LINUX_SLL2 (276) header: protocol, reserved, ifindex, ARPHRD_ETHER, packet type,
    address length, address."""
    pkttype = 4 if p.reverse else 0
    src = MAC_B if p.reverse else MAC_A
    return struct.pack("!HHIHBB8s", _etype(p), 0, 3, 1, pkttype, 6, mac(src) + b"\0\0") + p.l3


AF_INET = 2
AF_INET6_OPENBSD = 24


def null_hdr(p: Pkt) -> bytes:
    """NULL (0): AF_ family in the byte order of the capturing host (little-endian here)."""
    return struct.pack("<I", AF_INET6_OPENBSD if p.v6 else AF_INET) + p.l3


def loop_hdr(p: Pkt) -> bytes:
    """LOOP (108): AF_ family, always big-endian (OpenBSD values)."""
    return struct.pack(">I", AF_INET6_OPENBSD if p.v6 else AF_INET) + p.l3


# DSA tags (switch -> CPU direction), see the kernel's net/dsa/tag_brcm.c, tag_dsa.c.
def brcm_tag(port: int) -> bytes:
    # brcm_tag_rcv_ll: opcode (byte 0 bits 7:5) 0, no reserved reason code, port = byte 3 & 0x1f
    return bytes([0x00, 0x00, 0x00, port & 0x1F])


def mv_dsa_tag(port: int, device: int = 0) -> bytes:
    # dsa_rcv_ll: cmd FORWARD (0b11) in byte 0 bits 7:6, untagged (bit 5 clear), source
    # device in bits 4:0; source port = (byte 1 >> 3) & 0x1f; bytes 2-3 VLAN info 0.
    return bytes([0xC0 | device, (port & 0x1F) << 3, 0x00, 0x00])


DSA_PORTS = (1, 2)  # flow 0 enters on switch port 1, flow 1 on port 2


def dsa_frame(kind: str, p: Pkt) -> bytes:
    port = DSA_PORTS[p.flow]
    d, s = mac(MAC_B), mac(MAC_A + p.flow * 0x10)
    et = struct.pack("!H", _etype(p))
    if kind == "brcm":
        return d + s + brcm_tag(port) + et + p.l3
    if kind == "brcm-prepend":
        return brcm_tag(port) + d + s + et + p.l3
    if kind == "dsa":
        return d + s + mv_dsa_tag(port) + et + p.l3
    if kind == "edsa":
        return d + s + struct.pack("!HH", C.ETH_P_EDSA, 0) + mv_dsa_tag(port) + et + p.l3
    raise ValueError(kind)


# --- the catalogue ----------------------------------------------------------------------

@dataclass
class Sample:
    """One crafted capture: how to build its frames and how to store them."""
    name: str                    # file name
    desc: str
    frame: Callable[[Encap, Pkt], bytes]
    overhead: int                # bytes of outer headers counted against the 1500 MTU
    v6_inner: bool = False
    linktype: int = C.LINKTYPE_ETHERNET
    acks: bool = True
    two_flows: bool = False
    nanosecond: bool = False
    big_endian: bool = False
    pcapng_ifaces: tuple[int, ...] = ()   # pcapng: link type per interface
    extra: dict = field(default_factory=dict)


def _gre4(**kw):
    def f(e: Encap, p: Pkt) -> bytes:
        seq = e.next_seq(p) if kw.get("seq") else None
        return over_ipv4(e, p, C.IPPROTO_GRE,
                         gre(_etype(p), p.l3, key=kw.get("key"), seq=seq,
                             with_csum=kw.get("csum", False)))
    return f


def _gretap(e: Encap, p: Pkt) -> bytes:
    return over_ipv4(e, p, C.IPPROTO_GRE, gre(C.ETH_P_TEB, inner_eth(p)))


def _ip6gre(e: Encap, p: Pkt) -> bytes:
    return over_ipv6(e, p, C.IPPROTO_GRE, gre(_etype(p), p.l3))


def _erspan2(e: Encap, p: Pkt) -> bytes:
    # Mirrored traffic: both directions of the mirrored flow travel to the collector, so the
    # outer direction is always forward. ERSPAN sets GRE S (erspan_xmit: GRE_SEQ).
    fwd = Pkt(p.l3, p.v6, False, p.flow)
    seq = e.next_seq(fwd)
    body = erspan2_hdr(ERSPAN_SESSION, 0) + inner_eth(p)
    return over_ipv4(e, fwd, C.IPPROTO_GRE, gre(C.ETH_P_ERSPAN, body, seq=seq))


def _erspan3(e: Encap, p: Pkt) -> bytes:
    fwd = Pkt(p.l3, p.v6, False, p.flow)
    seq = e.next_seq(fwd)
    body = erspan3_hdr(ERSPAN_SESSION, 1000 + seq) + inner_eth(p)
    return over_ipv4(e, fwd, C.IPPROTO_GRE, gre(C.ETH_P_ERSPAN2, body, seq=seq))


def _ipip(e, p):
    return over_ipv4(e, p, C.IPPROTO_IPIP, p.l3)


def _sit(e, p):
    return over_ipv4(e, p, C.IPPROTO_IPV6, p.l3)


def _ip6ip6(e, p):
    return over_ipv6(e, p, C.IPPROTO_IPV6, p.l3)


def _ip4ip6(e, p):
    return over_ipv6(e, p, C.IPPROTO_DSTOPTS, p.l3, ext=encap_limit_dstopt(C.IPPROTO_IPIP))


def _geneve(e, p):
    return udp4_tunnel(e, p, C.GENEVE_PORT,
                       geneve_hdr(C.ETH_P_TEB, VNI, GENEVE_OPT) + inner_eth(p))


def _vxlan_gpe(e, p):
    return udp4_tunnel(e, p, C.VXLAN_GPE_PORT, vxlan_gpe_hdr(1, VNI) + p.l3)


def _vlan(e, p):
    return plain_eth(e, p, tags=((C.ETH_P_8021Q, 100),))


def _qinq(e, p):
    return plain_eth(e, p, tags=((C.ETH_P_8021AD, 10), (C.ETH_P_8021Q, 100)))


GRE4 = 20 + 4
SAMPLES = [
    Sample("crafted_gre.pcap", "GRE over IPv4, no key (ip gre tunnel)", _gre4(), GRE4),
    Sample("crafted_gre_key.pcap", f"GRE over IPv4 with key 0x{GRE_KEY:x}",
           _gre4(key=GRE_KEY), GRE4 + 4),
    Sample("crafted_gre_csum.pcap", "GRE over IPv4 with checksum (C bit)",
           _gre4(csum=True), GRE4 + 4),
    Sample("crafted_gre_seq.pcap", f"GRE over IPv4 with sequence numbers from {GRE_SEQ0} "
           "(S bit: the kernel does not aggregate)", _gre4(seq=True), GRE4 + 4),
    Sample("crafted_ip6gre.pcap", "GRE over IPv6 (ip6gre), inner IPv4", _ip6gre, 40 + 4),
    Sample("crafted_gretap.pcap", "GRE TEB over IPv4 (gretap), inner Ethernet",
           _gretap, GRE4 + 14),
    Sample("crafted_erspan2.pcap", f"ERSPAN type II session {ERSPAN_SESSION:#x} over IPv4",
           _erspan2, GRE4 + 4 + 8 + 14),
    Sample("crafted_erspan3.pcap", f"ERSPAN type III session {ERSPAN_SESSION:#x} over IPv4",
           _erspan3, GRE4 + 4 + 12 + 14),
    Sample("crafted_ipip.pcap", "IPv4 in IPv4 (ipip)", _ipip, 20),
    Sample("crafted_sit.pcap", "IPv6 in IPv4 (sit)", _sit, 20, v6_inner=True),
    Sample("crafted_ip6ip6.pcap", "IPv6 in IPv6 (ip6tnl ip6ip6, encaplimit none)",
           _ip6ip6, 40, v6_inner=True),
    Sample("crafted_ip4ip6.pcap", "IPv4 in IPv6 (ip6tnl ipip6) with the encap-limit "
           "destination option", _ip4ip6, 48),
    Sample("crafted_geneve.pcap", f"Geneve VNI {VNI:#x} with one 4-byte option, inner "
           "Ethernet", _geneve, 20 + 8 + 8 + len(GENEVE_OPT) + 14),
    Sample("crafted_vxlan_gpe.pcap", f"VXLAN-GPE VNI {VNI:#x}, next protocol IPv4",
           _vxlan_gpe, 20 + 8 + 8),
    Sample("crafted_vlan.pcap", "802.1Q VLAN 100", _vlan, 0),
    Sample("crafted_qinq.pcap", "QinQ: 802.1ad S-VLAN 10, 802.1Q C-VLAN 100", _qinq, 0),
    *[Sample(f"crafted_dsa_{k.replace('-', '_')}.pcap",
             f"DSA {k} tag (link type {lt}), flows from switch ports 1 and 2",
             (lambda kind: lambda e, p: dsa_frame(kind, p))(k), 0, linktype=lt, acks=False,
             two_flows=True)
      for k, lt in (("brcm", C.LINKTYPE_DSA_TAG_BRCM),
                    ("brcm-prepend", C.LINKTYPE_DSA_TAG_BRCM_PREPEND),
                    ("dsa", C.LINKTYPE_DSA_TAG_DSA), ("edsa", C.LINKTYPE_DSA_TAG_EDSA))],
    Sample("crafted_sll.pcap", "Linux cooked capture v1 (LINUX_SLL, 113), IPv4",
           lambda e, p: sll(p), 0, linktype=C.LINKTYPE_LINUX_SLL),
    Sample("crafted_sll2.pcap", "Linux cooked capture v2 (LINUX_SLL2, 276), IPv6",
           lambda e, p: sll2(p), 0, v6_inner=True, linktype=C.LINKTYPE_LINUX_SLL2),
    Sample("crafted_raw.pcap", "raw IP (RAW, 101), IPv4", lambda e, p: p.l3, 0,
           linktype=C.LINKTYPE_RAW),
    Sample("crafted_null.pcap", "BSD loopback (NULL, 0), IPv4, little-endian AF_INET",
           lambda e, p: null_hdr(p), 0, linktype=C.LINKTYPE_NULL),
    Sample("crafted_loop.pcap", "OpenBSD loopback (LOOP, 108), IPv6, big-endian AF 24",
           lambda e, p: loop_hdr(p), 0, v6_inner=True, linktype=C.LINKTYPE_LOOP),
    Sample("crafted_two_ifaces.pcapng", "pcapng, interface 0 Ethernet + interface 1 RAW, "
           "one flow on each", None, 0, two_flows=True,
           pcapng_ifaces=(C.LINKTYPE_ETHERNET, C.LINKTYPE_RAW)),
    Sample("crafted_nanosecond.pcap", "nanosecond-resolution pcap, Ethernet IPv4, "
           f"{GAP_NS_NANO} ns between frames", plain_eth, 0, nanosecond=True),
    Sample("crafted_big_endian.pcap", "big-endian pcap, Ethernet IPv6", plain_eth, 0,
           v6_inner=True, big_endian=True),
]


def build(s: Sample) -> tuple[list[bytes], list[int], list[int], list[int]]:
    """Frames (cut to SNAPLEN), wire lengths, timestamps and pcapng interface ids."""
    mss = mss_for(s.overhead, s.v6_inner)
    src, dst = IN6 if s.v6_inner else IN4
    pkts = bulk_flow(src, dst, 40_000, 5201, mss, acks=s.acks)
    if s.two_flows:
        if s.pcapng_ifaces:
            # flow 1 on the RAW interface; same sizes (no tunnel)
            src2, dst2 = IN4_B
        else:
            src2, dst2 = IN6_B if s.v6_inner else IN4_B
        pkts = interleave(pkts, bulk_flow(src2, dst2, 40_001, 5201, mss, flow=1,
                                          acks=s.acks, isn=0x99AABBCC, ack_isn=0x01020304))
    e = Encap(s.frame) if s.frame else None
    frames, wire, ifaces = [], [], []
    for p in pkts:
        if s.pcapng_ifaces:
            full = plain_eth(None, p) if p.flow == 0 else p.l3
            ifaces.append(p.flow)
        else:
            full = e(p)
            ifaces.append(0)
        # The innermost TCP header (options included) must survive the snap length.
        tcp_len = len(p.l3) - (40 if p.v6 else 20)
        tcp_end = len(full) - tcp_len + 20 + TCP_OPT_LEN
        assert tcp_end <= SNAPLEN, f"{s.name}: TCP header ends at {tcp_end} > {SNAPLEN}"
        frames.append(full[:SNAPLEN])
        wire.append(len(full))
    gap = GAP_NS_NANO if s.nanosecond else GAP_NS
    ts = [BASE_TS_NS + i * gap for i in range(len(frames))]
    return frames, wire, ts, ifaces


def write_sample(s: Sample, out: Path) -> Path:
    frames, wire, ts, ifaces = build(s)
    path = out / s.name
    if s.pcapng_ifaces:
        write_pcapng(path, frames, ts, linktypes=s.pcapng_ifaces, ifaces=ifaces, tsresol=9,
                     wire_lens=wire, snaplen=SNAPLEN)
    else:
        write_pcap(path, frames, ts, linktype=s.linktype, nanosecond=s.nanosecond,
                   big_endian=s.big_endian, snaplen=SNAPLEN, wire_lens=wire)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=HERE)
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    a = ap.parse_args(argv)
    if a.list:
        for s in SAMPLES:
            print(f"{s.name}: {s.desc}")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    for s in SAMPLES:
        p = write_sample(s, a.out)
        print(f"{p}: {p.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
