"""Packet crafting for tests: small struct-based builders and a RecordBatch factory.

Stable helpers other test modules may import. Builders return ``bytes``; L4 checksums are
filled in by the IP builders (``l4_csum="good" | "bad" | "partial" | "zero" | "keep"``).

    frame = eth(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(1000, 80, seq=1, payload=b"x" * 10)))
    batch = make_batch([frame])
"""

from __future__ import annotations

import ipaddress
import struct

import numpy as np

from gropcap import constants as C
from gropcap.capture.records import RecordBatch
from gropcap.decode.digest import fold16, inet_checksum, ones_sum

MAC_A = 0x020000000001
MAC_B = 0x020000000002


def mac(v) -> bytes:
    """6 bytes from an int or ``"aa:bb:.."`` string."""
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        return bytes(int(x, 16) for x in v.split(":"))
    return int(v).to_bytes(6, "big")


def addr16(a: str) -> bytes:
    """The packet-table form of an address: IPv6 as is, IPv4 as ``::ffff:a.b.c.d``."""
    ip = ipaddress.ip_address(a)
    if ip.version == 4:
        return bytes(10) + b"\xff\xff" + ip.packed
    return ip.packed


# --- L2 --------------------------------------------------------------------------------

def eth(payload: bytes, etype: int = C.ETH_P_IP, dst=MAC_B, src=MAC_A,
        vlans=(), pad: bool = False) -> bytes:
    """Ethernet II header; ``vlans`` = ``[(tpid, tci), ...]`` outermost first."""
    h = mac(dst) + mac(src)
    for tpid, tci in vlans:
        h += struct.pack("!HH", tpid, tci)
    f = h + struct.pack("!H", etype) + payload
    if pad and len(f) < C.ETH_ZLEN:
        f += bytes(C.ETH_ZLEN - len(f))
    return f


def sll(payload: bytes, proto: int = C.ETH_P_IP, src=MAC_A, hatype: int = 1) -> bytes:
    """Linux cooked v1 header (pkttype 0 = to us)."""
    return struct.pack("!HHH", 0, hatype, 6) + mac(src) + b"\x00\x00" + \
        struct.pack("!H", proto) + payload


def sll2(payload: bytes, proto: int = C.ETH_P_IP, src=MAC_A, ifindex: int = 3,
         hatype: int = 1) -> bytes:
    """Linux cooked v2 header."""
    return struct.pack("!HHIHBB", proto, 0, ifindex, hatype, 0, 6) + mac(src) + \
        b"\x00\x00" + payload


# --- IP --------------------------------------------------------------------------------

def _fix_l4(proto: int, payload: bytes, pseudo: int, mode: str) -> bytes:
    """Write the TCP/UDP checksum of ``payload`` according to ``mode``."""
    if proto not in (C.IPPROTO_TCP, C.IPPROTO_UDP) or mode == "keep":
        return payload
    at = 16 if proto == C.IPPROTO_TCP else 6
    if len(payload) < at + 2:
        return payload
    seg = bytearray(payload)
    seg[at:at + 2] = b"\x00\x00"
    full = pseudo + len(seg)
    if mode == "good":
        v = inet_checksum(bytes(seg), full)
        if proto == C.IPPROTO_UDP and v == 0:
            v = 0xFFFF
    elif mode == "bad":
        v = inet_checksum(bytes(seg), full) ^ 0x5A5A
    elif mode == "partial":
        v = fold16(full)                # what Linux leaves with CHECKSUM_PARTIAL
    elif mode == "zero":
        v = 0
    else:
        raise ValueError(mode)
    seg[at:at + 2] = struct.pack("!H", v)
    return bytes(seg)


def ipv4(src: str, dst: str, proto: int, payload: bytes, ttl: int = 64, tos: int = 0,
         ident: int = 0, df: bool = True, mf: bool = False, rf: bool = False,
         frag_off: int = 0, options: bytes = b"", tot_len: int | None = None,
         csum: int | None = None, l4_csum: str = "good") -> bytes:
    """IPv4 header + payload, header checksum computed unless ``csum`` is given."""
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    assert len(options) % 4 == 0
    ihl = 5 + len(options) // 4
    if tot_len is None:
        tot_len = ihl * 4 + len(payload)
    if not mf and frag_off == 0:
        pseudo = ones_sum(s + d, proto)
        payload = _fix_l4(proto, payload, pseudo, l4_csum)
    flags = (C.IP_RF if rf else 0) | (C.IP_DF if df else 0) | (C.IP_MF if mf else 0) | frag_off
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, tot_len, ident, flags, ttl, proto, 0,
                    s, d) + options
    if csum is None:
        csum = inet_checksum(h)
    h = h[:10] + struct.pack("!H", csum) + h[12:]
    return h + payload


def ext_opts(nh: int, length: int = 8, body: bytes | None = None) -> bytes:
    """Hop-by-hop / destination options header of ``length`` bytes (PadN filled)."""
    assert length % 8 == 0 and length >= 8
    if body is None:
        body = b"\x01" + bytes([length - 4]) + bytes(length - 4)   # one PadN
    assert len(body) == length - 2
    return bytes([nh, length // 8 - 1]) + body


def ext_encap_limit(nh: int, limit: int = 4) -> bytes:
    """Destination options with the tunnel encapsulation limit option (RFC 2473 4.1.1)."""
    return bytes([nh, 0, 4, 1, limit, 1, 1, 0])   # type 4 len 1 value, then PadN(1)


def ext_frag(nh: int, offset: int = 0, more: bool = False, ident: int = 0x1234) -> bytes:
    """IPv6 fragment header; ``offset`` in 8-byte units."""
    return struct.pack("!BBHI", nh, 0, (offset << 3) | int(more), ident)


def ext_routing(nh: int, addrs: list[str], rtype: int = 4, segleft: int | None = None) -> bytes:
    """Routing header listing ``addrs`` (type 4 SRH layout: 8 bytes + 16 per address)."""
    if segleft is None:
        segleft = len(addrs) - 1 if rtype == 4 else len(addrs)
    body = b"".join(ipaddress.IPv6Address(a).packed for a in addrs)
    return bytes([nh, 2 * len(addrs), rtype, segleft]) + bytes([len(addrs) - 1, 0, 0, 0]) + body


def ipv6(src: str, dst: str, nh: int, payload: bytes, hlim: int = 64, tc: int = 0,
         flow: int = 0, ext: bytes = b"", first_nh: int | None = None,
         plen: int | None = None, l4_csum: str = "good", pseudo_dst: str | None = None) -> bytes:
    """IPv6 header + ``ext`` (already chained, see ``ext_*``) + payload.

    ``nh`` is the protocol of ``payload``; ``first_nh`` the header's next-header field
    (defaults to ``nh`` when there is no ``ext``).
    """
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    pd = ipaddress.IPv6Address(pseudo_dst).packed if pseudo_dst else d
    if first_nh is None:
        assert not ext
        first_nh = nh
    payload = _fix_l4(nh, payload, ones_sum(s + pd, nh), l4_csum)
    if plen is None:
        plen = len(ext) + len(payload)
    w0 = (6 << 28) | (tc << 20) | flow
    return struct.pack("!IHBB", w0, plen, first_nh, hlim) + s + d + ext + payload


# --- L4 --------------------------------------------------------------------------------

def tcp(sport: int, dport: int, seq: int = 0, ack: int = 0, flags: int = C.TCP_FLAG_ACK,
        window: int = 512, urg: int = 0, options: bytes = b"", payload: bytes = b"",
        doff: int | None = None) -> bytes:
    """TCP header (checksum 0; the IP builder fills it) + payload. ``flags`` may hold AE."""
    options += bytes(-len(options) % 4)
    if doff is None:
        doff = 5 + len(options) // 4
    b12 = (doff << 4) | ((flags >> 8) & 1)
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, b12, flags & 0xFF, window, 0,
                       urg) + options + payload


def tcp_ts(tsval: int, tsecr: int) -> bytes:
    """NOP NOP TS: the 12-byte option block Linux sends on every segment."""
    return b"\x01\x01\x08\x0a" + struct.pack("!II", tsval, tsecr)


def udp(sport: int, dport: int, payload: bytes = b"", length: int | None = None) -> bytes:
    """UDP header (checksum 0; the IP builder fills it) + payload."""
    if length is None:
        length = 8 + len(payload)
    return struct.pack("!HHHH", sport, dport, length, 0) + payload


# --- tunnels ---------------------------------------------------------------------------

def gre(proto: int, payload: bytes, key: int | None = None, seq: int | None = None,
        csum: bool = False, flags_extra: int = 0) -> bytes:
    """GRE v0 header with optional C/K/S fields; the checksum is computed when ``csum``."""
    flags = flags_extra | (C.GRE_CSUM if csum else 0) | (C.GRE_KEY if key is not None else 0) \
        | (C.GRE_SEQ if seq is not None else 0)
    h = struct.pack("!HH", flags, proto)
    if csum:
        h += b"\x00\x00\x00\x00"
    if key is not None:
        h += struct.pack("!I", key)
    if seq is not None:
        h += struct.pack("!I", seq)
    pkt = h + payload
    if csum:
        c = inet_checksum(pkt)
        pkt = pkt[:4] + struct.pack("!H", c) + pkt[6:]
    return pkt


def erspan2(payload: bytes, session: int, vlan: int = 0, index: int = 0) -> bytes:
    """ERSPAN type II header (ver 1)."""
    return struct.pack("!HHI", (1 << 12) | vlan, session & 0x3FF, index & 0xFFFFF) + payload


def erspan3(payload: bytes, session: int, timestamp: int = 0, o_bit: bool = False,
            platform: bytes = bytes(8)) -> bytes:
    """ERSPAN type III header (ver 2), with the 8-byte platform subheader when ``o_bit``."""
    h = struct.pack("!HHIHBB", 2 << 12, session & 0x3FF, timestamp, 0, 0, int(o_bit))
    return h + (platform if o_bit else b"") + payload


def vxlan(payload: bytes, vni: int, flags: int = 0x08) -> bytes:
    """VXLAN header: flags byte (I = 0x08), VNI."""
    return struct.pack("!II", flags << 24, vni << 8) + payload


def vxlan_gpe(payload: bytes, vni: int, next_proto: int, flags: int = 0x0C) -> bytes:
    """VXLAN-GPE header: flags (I|P), next protocol, VNI."""
    return struct.pack("!II", (flags << 24) | next_proto, vni << 8) + payload


def geneve(payload: bytes, vni: int, proto: int = C.ETH_P_TEB, options: bytes = b"",
           oam: bool = False, critical: bool = False, version: int = 0) -> bytes:
    """Geneve header with ``options`` (a multiple of 4 bytes)."""
    assert len(options) % 4 == 0
    b0 = (version << 6) | (len(options) // 4)
    b1 = (0x80 if oam else 0) | (0x40 if critical else 0)
    return struct.pack("!BBHI", b0, b1, proto, vni << 8) + options + payload


def gue(payload: bytes, proto: int, optional: bytes = b"", control: bool = False,
        flags: int = 0) -> bytes:
    """GUE version 0 header."""
    assert len(optional) % 4 == 0
    b0 = (0x20 if control else 0) | (len(optional) // 4)
    return struct.pack("!BBH", b0, proto, flags) + optional + payload


# --- DSA tags --------------------------------------------------------------------------

def brcm_tag(port: int, opcode: int = 0) -> bytes:
    """Broadcom tag as the switch sends it to the CPU: port in byte 3."""
    return bytes([opcode << 5, 0, 0, port & 0x1F])


def dsa_tag(port: int, device: int = 0, cmd: int = C.DSA_CMD_FORWARD,
            vlan_tci: int | None = None) -> bytes:
    """Marvell DSA tag; ``vlan_tci`` sets the tagged bit and carries the 802.1Q TCI."""
    b0 = (cmd << 6) | (device & 0x1F)
    b1 = (port & 0x1F) << 3
    b2 = b3 = 0
    if vlan_tci is not None:
        b0 |= C.DSA_VLAN_TAG
        b2 = (vlan_tci >> 8) & 0xEF
        b3 = vlan_tci & 0xFF
        if vlan_tci & 0x1000:
            b1 |= C.DSA_CFI_BIT
    return bytes([b0, b1, b2, b3])


def eth_with_tag(payload: bytes, tag: bytes, etype: int = C.ETH_P_IP, dst=MAC_B,
                 src=MAC_A) -> bytes:
    """Ethernet with ``tag`` between the source MAC and the EtherType."""
    return mac(dst) + mac(src) + tag + struct.pack("!H", etype) + payload


# --- batches ---------------------------------------------------------------------------

def make_batch(frames, linktype=1, ts_ns=None, wire_lens=None) -> RecordBatch:
    """A :class:`RecordBatch` holding ``frames`` (list of bytes).

    ``linktype`` is one int or one per frame; ``ts_ns`` defaults to 1 ms apart;
    ``wire_lens`` defaults to the captured lengths.
    """
    frames = [bytes(f) for f in frames]
    n = len(frames)
    lens = np.array([len(f) for f in frames], dtype=np.uint32)
    offset = np.zeros(n, dtype=np.int64)
    if n:
        offset[1:] = np.cumsum(lens[:-1], dtype=np.int64)
    buf = np.frombuffer(b"".join(frames), dtype=np.uint8).copy()
    if isinstance(linktype, int):
        lt = np.full(n, linktype, dtype=np.uint16)
    else:
        lt = np.array(list(linktype), dtype=np.uint16)
    ts = (np.arange(n, dtype=np.int64) * 1_000_000 + 1_700_000_000_000_000_000
          if ts_ns is None else np.asarray(ts_ns, dtype=np.int64))
    wl = lens.copy() if wire_lens is None else np.asarray(wire_lens, dtype=np.uint32)
    return RecordBatch(buf=buf, offset=offset, cap_len=lens, wire_len=wl, ts_ns=ts,
                       linktype=lt, iface=np.zeros(n, dtype=np.uint16),
                       epb_flags=np.zeros(n, dtype=np.uint32),
                       record=np.arange(n, dtype=np.uint64),
                       file_offset=np.zeros(n, dtype=np.uint64))
