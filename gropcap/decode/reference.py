"""Reference header decoder: RecordBatch (capture/) -> packet table (Arrow, schema.py).

This is the ORACLE the fast numba decoder is compared against bit for bit, so it is written
for clarity: one explicit rule per column, documented in ``docs/schema.md``. Headers are
read with :mod:`struct` at explicit offsets (dpkt is lenient with damaged headers and raises
on short ones; here every length check is spelled out so a damaged or truncated header turns
into a ``status`` code with the fields decoded so far kept). dpkt is used by the tests to
craft packets, an independent second implementation of the layouts.

Decoding walks the layers outermost first. The first problem met stops the walk and sets
``status``; nothing ever raises for packet data.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from gropcap import constants as C
from gropcap.capture.records import RecordBatch
from gropcap.decode import schema as S
from gropcap.decode.digest import digest_or_zero, fold16, ones_sum
from gropcap.decode.options import DecodeOptions

__all__ = ["decode_batch", "decode_frame", "empty_row", "DEFAULT_OPTIONS"]

DEFAULT_OPTIONS = DecodeOptions()

_ZERO_ADDR = bytes(16)
_V4MAPPED = bytes(10) + b"\xff\xff"
_VLAN_TPIDS = (C.ETH_P_8021Q, C.ETH_P_8021AD, C.ETH_P_QINQ1)
_RAW_LINKTYPES = (C.LINKTYPE_RAW, C.LINKTYPE_RAW_OPENBSD, C.LINKTYPE_RAW_BSDOS)

# Columns describing the innermost IP header and its L4: cleared when a tunnel is entered,
# so after decapsulation they never show the carrier's values.
_IP_COLS = [f.name for f in S.PACKET_FIELDS if f.name.startswith("ip_")]
_L4_COLS = ["l4_proto", "l4_offset", "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags",
            "tcp_doff", "tcp_window", "tcp_urg_ptr", "tcp_opt_len", "tcp_options", "tcp_mss",
            "tcp_wscale", "tcp_sack_perm", "tcp_sack_blocks", "tcp_has_ts", "tcp_tsval",
            "tcp_tsecr", "udp_len", "l4_csum", "l4_csum_state", "payload_len"]


def _zero_value(field: pa.Field):
    t = field.type
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_fixed_size_binary(t):
        return bytes(t.byte_width)
    if pa.types.is_dictionary(t):
        return ""
    return 0


_EMPTY_ROW = {f.name: _zero_value(f) for f in S.PACKET_FIELDS}
_EMPTY_ROW["dsa_port"] = -1     # "none" is -1: port 0 is a real port
_EMPTY_ROW["tcp_wscale"] = -1   # "absent" is -1: shift 0 is a real option value


def empty_row() -> dict:
    """A row with every column at its "absent" value (see docs/schema.md)."""
    return dict(_EMPTY_ROW)


class _Stop(Exception):
    """Internal: stop decoding this frame with ``status``."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _mac(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 6], "big")


class _FrameDecoder:
    """Decodes one frame into ``self.row``; one instance per frame (no shared state)."""

    def __init__(self, frame: bytes, linktype: int, wire_len: int, options: DecodeOptions):
        self.b = bytes(frame)
        self.cap = len(self.b)
        # A wire length below the captured length is a damaged record; the captured bytes
        # did exist on the wire, so lengths are checked against the larger of the two.
        self.wire = max(int(wire_len), self.cap)
        self.linktype = int(linktype)
        self.opts = options
        self.row = empty_row()
        self.row["cap_len"] = self.cap
        self.row["wire_len"] = int(wire_len)
        self.row["linktype"] = self.linktype
        self.layers: list[str] = []
        self.depth = 0          # tunnel layers entered

    # --- small helpers ------------------------------------------------------------------
    def need(self, off: int, n: int) -> None:
        """Stop with TRUNCATED unless bytes ``[off, off + n)`` were captured."""
        if off + n > self.cap:
            raise _Stop(S.STATUS_TRUNCATED)

    def u8(self, off: int) -> int:
        return self.b[off]

    def u16(self, off: int) -> int:
        return (self.b[off] << 8) | self.b[off + 1]

    def u32(self, off: int) -> int:
        return int.from_bytes(self.b[off:off + 4], "big")

    def where(self, off: int) -> int:
        """An offset to record; offsets are uint16 columns, so a header starting beyond
        64 KiB (only possible behind giant extension chains) is not decoded."""
        if off > 0xFFFF:
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)
        return off

    def tun(self, col: str, value) -> None:
        """Write a tunnel column only for the outermost tunnel (``tun_*`` rule)."""
        if self.depth == 1:
            self.row[col] = value

    # --- entry point --------------------------------------------------------------------
    def run(self) -> dict:
        try:
            self.link()
            status = S.STATUS_OK
        except _Stop as stop:
            status = stop.status
        self.row["status"] = status
        self.row["encap"] = "/".join(self.layers)
        self.row["encap_depth"] = self.depth
        return self.row

    # --- link layer ---------------------------------------------------------------------
    def link(self) -> None:
        lt = self.linktype
        if lt == C.LINKTYPE_ETHERNET:
            self.ether(0, self.opts.dsa_kind)
        elif lt in C.DSA_TAG_LINKTYPE:
            self.ether(0, C.DSA_TAG_LINKTYPE[lt])
        elif lt in _RAW_LINKTYPES:
            self.need(0, 1)
            version = self.b[0] >> 4
            if version == 4:
                self.ipv4(0)
            elif version == 6:
                self.ipv6(0)
            else:
                raise _Stop(S.STATUS_BAD_IP_HEADER)
        elif lt == C.LINKTYPE_IPV4:
            self.ipv4(0)
        elif lt == C.LINKTYPE_IPV6:
            self.ipv6(0)
        elif lt in (C.LINKTYPE_NULL, C.LINKTYPE_LOOP):
            self.null(lt)
        elif lt == C.LINKTYPE_LINUX_SLL:
            self.sll()
        elif lt == C.LINKTYPE_LINUX_SLL2:
            self.sll2()
        else:
            raise _Stop(S.STATUS_UNSUPPORTED_LINKTYPE)

    def null(self, lt: int) -> None:
        """BSD loopback: 4-byte address family, host-endian (NULL) or big-endian (LOOP)."""
        self.layers.append("null" if lt == C.LINKTYPE_NULL else "loop")
        self.need(0, 4)
        be = self.u32(0)
        if lt == C.LINKTYPE_NULL:
            le = int.from_bytes(self.b[0:4], "little")
            # The writer's byte order is unknown; AF values are small, so the reading
            # that fits in 16 bits is the right one (as libpcap/Wireshark do).
            af = le if le <= 0xFFFF else be
        else:
            af = be
        if af == C.NULL_AF_INET:
            self.ipv4(4)
        elif af in C.NULL_AF_INET6:
            self.ipv6(4)
        else:
            raise _Stop(S.STATUS_NOT_IP)

    def sll(self) -> None:
        """Linux cooked v1: pkttype, hatype, halen, 8-byte address, protocol."""
        self.layers.append("sll")
        self.need(0, C.SLL_HLEN)
        hatype, halen = self.u16(2), self.u16(4)
        if hatype == C.ARPHRD_ETHER and halen == 6:
            self.row["eth_src"] = _mac(self.b, 6)   # the sender's MAC; no destination MAC
        proto = self.u16(14)
        self.row["eth_type"] = proto
        self.l3_after_vlans(proto, C.SLL_HLEN, outer=True)

    def sll2(self) -> None:
        """Linux cooked v2: protocol, reserved, ifindex, hatype, pkttype, halen, address."""
        self.layers.append("sll2")
        self.need(0, C.SLL2_HLEN)
        proto, hatype, halen = self.u16(0), self.u16(8), self.b[11]
        if hatype == C.ARPHRD_ETHER and halen == 6:
            self.row["eth_src"] = _mac(self.b, 12)
        self.row["eth_type"] = proto
        self.l3_after_vlans(proto, C.SLL2_HLEN, outer=True)

    def ether(self, off: int, dsa_kind: int) -> None:
        """Outer Ethernet with an optional DSA tag (stripped, recorded) and VLAN tags."""
        if dsa_kind == C.DSA_BRCM_PREPEND:
            # tag_brcm.c brcm_tag_rcv_prepend: 4-byte tag before the destination MAC.
            self.layers.append("dsa")
            self.need(off, C.BRCM_TAG_LEN)
            self.brcm_tag(off, C.DSA_BRCM_PREPEND)
            off += C.BRCM_TAG_LEN
        self.layers.append("eth")
        self.need(off, 12)
        self.row["eth_dst"] = _mac(self.b, off)
        self.row["eth_src"] = _mac(self.b, off + 6)
        p = off + 12                      # where the EtherType (or a tag) sits
        synth_vlan = None
        if dsa_kind in (C.DSA_BRCM, C.DSA_DSA, C.DSA_EDSA):
            self.layers.append("dsa")
            if dsa_kind == C.DSA_BRCM:
                # tag_brcm.c brcm_tag_rcv: 4-byte tag after the source MAC.
                self.need(p, C.BRCM_TAG_LEN)
                self.brcm_tag(p, C.DSA_BRCM)
                p += C.BRCM_TAG_LEN
            elif dsa_kind == C.DSA_DSA:
                # tag_dsa.c dsa_rcv: the 4-byte tag replaces the EtherType position.
                self.need(p, C.DSA_HLEN)
                self.row["dsa_tag"] = C.DSA_DSA
                synth_vlan = self.marvell_tag(p)
                p += C.DSA_HLEN
            else:
                # tag_dsa.c edsa_rcv: EtherType 0xDADA, 2 reserved bytes, then the DSA tag.
                self.need(p, C.EDSA_HLEN)
                self.row["dsa_tag"] = C.DSA_EDSA
                if self.u16(p) != C.ETH_P_EDSA:
                    raise _Stop(S.STATUS_BAD_L2_HEADER)
                synth_vlan = self.marvell_tag(p + 4)
                p += C.EDSA_HLEN
        self.need(p, 2)
        etype = self.u16(p)
        if synth_vlan is not None:
            # tag_dsa.c dsa_rcv_ll: a "tagged" DSA frame becomes an 802.1Q-tagged frame.
            self.row["eth_type"] = C.ETH_P_8021Q
            self.add_vlan(C.ETH_P_8021Q, synth_vlan, outer=True)
        else:
            self.row["eth_type"] = etype
        self.l3_after_vlans(etype, p + 2, outer=True)

    def brcm_tag(self, off: int, kind: int) -> None:
        """Broadcom 4-byte tag: source port in byte 3 (tag_brcm.c brcm_tag_rcv_ll)."""
        self.row["dsa_tag"] = kind
        self.row["dsa_port"] = self.b[off + 3] & C.BRCM_EG_PID_MASK
        # brcm_tag_rcv_ll drops a non-zero opcode and a reserved reason code.
        if self.b[off] >> C.BRCM_OPCODE_SHIFT or self.b[off + 2] & C.BRCM_EG_RC_RSVD:
            raise _Stop(S.STATUS_BAD_L2_HEADER)

    def marvell_tag(self, off: int) -> int | None:
        """Marvell DSA tag (tag_dsa.c dsa_rcv_ll); returns the 802.1Q TCI it carries, if any."""
        b0, b1, b2, b3 = self.b[off:off + 4]
        self.row["dsa_port"] = (b1 >> 3) & 0x1F
        # dsa_rcv_ll accepts TO_CPU and FORWARD frames only; others are dropped.
        if (b0 >> 6) not in (C.DSA_CMD_TO_CPU, C.DSA_CMD_FORWARD):
            raise _Stop(S.STATUS_BAD_L2_HEADER)
        if b0 & C.DSA_VLAN_TAG:
            hi = b2 & ~0x10 & 0xFF
            if b1 & C.DSA_CFI_BIT:      # the CFI bit moves back to its 802.1Q place
                hi |= 0x10
            return (hi << 8) | b3
        return None

    def add_vlan(self, tpid: int, tci: int, outer: bool) -> None:
        """Count a VLAN tag; the first two of the outer Ethernet are recorded (``vlan_*``),
        and the first two inside the outermost tunnel's Ethernet (``inner_vlan_*``)."""
        self.layers.append("vlan")
        if outer:
            p = "vlan_"
        elif self.depth == 1:
            p = "inner_vlan_"
        else:
            return
        d = self.row[p + "depth"]
        if d == 0:
            self.row[p + "tpid0"], self.row[p + "tci0"] = tpid, tci
        elif d == 1:
            self.row[p + "tpid1"], self.row[p + "tci1"] = tpid, tci
        self.row[p + "depth"] = min(d + 1, 255)

    def l3_after_vlans(self, etype: int, off: int, outer: bool) -> None:
        """Skip 802.1Q/802.1ad/0x9100 tags starting at ``off``, then decode IPv4/IPv6."""
        while etype in _VLAN_TPIDS:
            self.need(off, 4)
            self.add_vlan(etype, self.u16(off), outer)
            etype = self.u16(off + 2)
            off += 4
        if etype == C.ETH_P_IP:
            self.ipv4(off)
        elif etype == C.ETH_P_IPV6:
            self.ipv6(off)
        else:
            raise _Stop(S.STATUS_NOT_IP)

    def inner_ether(self, off: int) -> None:
        """Ethernet inside a tunnel (TEB, ERSPAN, VXLAN, Geneve, GPE)."""
        self.layers.append("eth")
        self.need(off, C.ETH_HLEN)
        self.tun("inner_eth_dst", _mac(self.b, off))
        self.tun("inner_eth_src", _mac(self.b, off + 6))
        etype = self.u16(off + 12)
        self.tun("inner_eth_type", etype)
        self.l3_after_vlans(etype, off + C.ETH_HLEN, outer=False)

    # --- IP -----------------------------------------------------------------------------
    def ipv4(self, off: int) -> None:
        """IPv4 header (RFC 791); fills ip_* then decodes the payload."""
        self.layers.append("ipv4")
        r = self.row
        self.need(off, 20)
        b = self.b
        r["ip_version"] = b[off] >> 4
        r["ip_offset"] = self.where(off)
        if b[off] >> 4 != 4:
            raise _Stop(S.STATUS_BAD_IP_HEADER)
        ihl = (b[off] & 0x0F) * 4
        r["ip_hdr_len"] = ihl
        tot_len = self.u16(off + 2)
        frag = self.u16(off + 6)
        r["ip_tos"] = b[off + 1]
        r["ip_tot_len"] = tot_len
        r["ip_id"] = self.u16(off + 4)
        r["ip_rf"] = bool(frag & C.IP_RF)
        r["ip_df"] = bool(frag & C.IP_DF)
        r["ip_mf"] = bool(frag & C.IP_MF)
        r["ip_frag_off"] = frag & C.IP_OFFMASK
        r["ip_ttl"] = b[off + 8]
        proto = b[off + 9]
        r["ip_proto"] = proto
        r["ip_src"] = _V4MAPPED + b[off + 12:off + 16]
        r["ip_dst"] = _V4MAPPED + b[off + 16:off + 20]
        if ihl < 20:
            raise _Stop(S.STATUS_BAD_IP_HEADER)
        length = tot_len
        if tot_len == 0 and self.wire - off > 0xFFFF:
            # BIG TCP / GSO super-packet: tot_len 0 means "the rest of the skb"
            # (include/linux/ip.h iph_totlen).
            length = self.wire - off
        if length < ihl:
            raise _Stop(S.STATUS_BAD_IP_HEADER)
        if off + length > self.wire:
            raise _Stop(S.STATUS_BAD_LENGTH)
        self.need(off, ihl)                 # options
        r["ip_ext_len"] = ihl - 20
        r["ip_ext_digest"] = digest_or_zero(b[off + 20:off + ihl])
        # A header that checksums to 0xffff (including its checksum field) is valid.
        r["ip_csum_ok"] = fold16(ones_sum(b[off:off + ihl])) == 0xFFFF
        pseudo = ones_sum(b[off + 12:off + 20], proto)   # + L4 length, added per protocol
        nonfirst = (frag & C.IP_OFFMASK) != 0
        fragment = nonfirst or bool(frag & C.IP_MF)
        self.ip_payload(4, proto, off + ihl, length - ihl, pseudo, fragment, nonfirst)

    def ipv6(self, off: int) -> None:
        """IPv6 header (RFC 8200) and its extension-header chain; then the payload."""
        self.layers.append("ipv6")
        r = self.row
        self.need(off, C.IP6_HLEN)
        b = self.b
        w0 = self.u32(off)
        r["ip_version"] = w0 >> 28
        r["ip_offset"] = self.where(off)
        if w0 >> 28 != 6:
            raise _Stop(S.STATUS_BAD_IP_HEADER)
        plen = self.u16(off + 4)
        nh = b[off + 6]
        r["ip_tos"] = (w0 >> 20) & 0xFF
        r["ip_flow_label"] = w0 & 0xFFFFF
        r["ip_tot_len"] = C.IP6_HLEN + plen
        r["ip_ttl"] = b[off + 7]
        r["ip_src"] = b[off + 8:off + 24]
        r["ip_dst"] = b[off + 24:off + 40]
        r["ip_csum_ok"] = True
        r["ip_hdr_len"] = C.IP6_HLEN
        r["ip_proto"] = nh
        length = plen
        if plen == 0 and self.wire - off - C.IP6_HLEN > 0xFFFF:
            # BIG TCP without the jumbo option: payload_len 0 means "the rest of the skb"
            # (include/linux/ipv6.h ipv6_payload_len).
            length = self.wire - off - C.IP6_HLEN
        if off + C.IP6_HLEN + length > self.wire:
            raise _Stop(S.STATUS_BAD_LENGTH)
        end = off + C.IP6_HLEN + length
        cur = off + C.IP6_HLEN
        mask = 0
        final_dst = b[off + 24:off + 40]
        nonfirst = False
        try:
            while nh in C.IP6_EXT_WALK:
                if nh == C.IPPROTO_FRAGMENT:
                    hl = C.IP6_FRAG_HLEN
                    if cur + hl > end:
                        raise _Stop(S.STATUS_BAD_IP_HEADER)
                    self.need(cur, hl)
                    mask |= C.IP6_EXT_FRAGMENT
                    fo = self.u16(cur + 2)
                    r["ip_frag_off"] = fo >> 3
                    r["ip_mf"] = bool(fo & 1)
                    r["ip_id"] = 0      # the 32-bit fragment id has no column; ip_id is IPv4
                    nh = b[cur]
                    cur += hl
                    if fo >> 3:
                        nonfirst = True   # the rest of the chain is in the first fragment
                        break
                    continue
                if cur + 2 > end:
                    raise _Stop(S.STATUS_BAD_IP_HEADER)
                self.need(cur, 2)
                hl = (b[cur + 1] + 1) * 8
                if cur + hl > end or cur + hl - off > 0xFFFF:   # ip_hdr_len is uint16
                    raise _Stop(S.STATUS_BAD_IP_HEADER)
                self.need(cur, hl)
                if nh == C.IPPROTO_HOPOPTS:
                    mask |= C.IP6_EXT_HOPOPTS
                elif nh == C.IPPROTO_DSTOPTS:
                    mask |= C.IP6_EXT_DSTOPTS
                else:
                    mask |= C.IP6_EXT_ROUTING
                    final_dst = self.routing_final_dst(cur, hl, final_dst)
                nh = b[cur]
                cur += hl
            if nh in C.IP6_EXT_STOP_OTHER and not nonfirst:
                mask |= C.IP6_EXT_OTHER
        finally:
            # fields of the chain walked so far, also when the walk stopped early
            r["ip_proto"] = nh
            r["ip_ext_mask"] = mask
            r["ip_ext_len"] = cur - off - C.IP6_HLEN
            r["ip_hdr_len"] = cur - off
            r["ip_ext_digest"] = digest_or_zero(b[off + C.IP6_HLEN:cur])
        pseudo = ones_sum(b[off + 8:off + 24] + final_dst, nh)
        fragment = bool(mask & C.IP6_EXT_FRAGMENT)
        self.ip_payload(6, nh, cur, end - cur, pseudo, fragment, nonfirst)

    def routing_final_dst(self, cur: int, hl: int, dst: bytes) -> bytes:
        """Destination the L4 pseudo-header uses when a routing header is present.

        RFC 8200 8.1: the final destination. Types 0/2 list it last; the segment routing
        header (RFC 8754, type 4) lists it first. With segments_left 0 it is the IPv6 dst.
        """
        rtype, segleft = self.b[cur + 2], self.b[cur + 3]
        naddr = (hl - 8) // 16
        if segleft == 0 or naddr == 0:
            return dst
        if rtype == C.IPV6_SRCRT_TYPE_4:
            return self.b[cur + 8:cur + 24]
        if rtype in (0, 2):
            last = cur + 8 + 16 * (naddr - 1)
            return self.b[last:last + 16]
        return dst

    # --- what an IP header carries ------------------------------------------------------
    def ip_payload(self, ipver: int, proto: int, off: int, length: int, pseudo: int,
                   fragment: bool, nonfirst: bool) -> None:
        """Dispatch on the IP protocol. ``length`` is the IP payload length from IP fields."""
        r = self.row
        r["l4_proto"] = proto
        if fragment:
            self.layers.append("frag")
            if nonfirst:
                # no L4 header in a non-first fragment
                r["l4_offset"] = 0
                r["payload_len"] = length
                return
            # First fragment: the L4 header is here, but the checksum covers the whole
            # datagram and tunnels are only decapsulated after reassembly.
            if proto == C.IPPROTO_TCP:
                self.tcp(off, length, pseudo, verify=False)
            elif proto == C.IPPROTO_UDP:
                self.udp(off, length, pseudo, verify=False, fragment=True)
            else:
                self.other_l4(proto, off, length)
            return
        if proto == C.IPPROTO_TCP:
            self.tcp(off, length, pseudo, verify=True)
        elif proto == C.IPPROTO_UDP:
            self.udp(off, length, pseudo, verify=True, fragment=False)
        elif proto == C.IPPROTO_GRE:
            self.carrier(proto, off, length)
            self.gre(off, length)
        elif proto == C.IPPROTO_IPIP:
            self.carrier(proto, off, length)
            self.enter_tunnel(C.TUN_IPIP if ipver == 4 else C.TUN_IP4IP6, off)
            self.ipv4(off)
        elif proto == C.IPPROTO_IPV6:
            self.carrier(proto, off, length)
            self.enter_tunnel(C.TUN_SIT if ipver == 4 else C.TUN_IP6IP6, off)
            self.ipv6(off)
        else:
            self.other_l4(proto, off, length)

    def carrier(self, proto: int, off: int, length: int) -> None:
        """A tunnel's IP protocol seen as L4 (what stays if the tunnel is not entered)."""
        r = self.row
        r["l4_proto"] = proto
        r["l4_offset"] = self.where(off)
        r["payload_len"] = length

    def other_l4(self, proto: int, off: int, length: int) -> None:
        """Any other protocol: no header decoded, payload_len is the IP payload."""
        name = {C.IPPROTO_ICMP: "icmp", C.IPPROTO_ICMPV6: "icmpv6"}.get(proto)
        self.layers.append(name or f"ipproto-{proto}")
        self.carrier(proto, off, length)

    def enter_tunnel(self, tun_type: int, off: int) -> None:
        """Step into a tunnel: the outermost one fills outer_ip_*/tun_*; ip_*/l4 restart."""
        if self.depth >= C.MAX_ENCAP_DEPTH:
            raise _Stop(S.STATUS_ENCAP_TOO_DEEP)
        self.where(off)
        self.depth += 1
        r = self.row
        if self.depth == 1:
            for col in _IP_COLS:
                r["outer_" + col] = r[col]
            if r["l4_proto"] == C.IPPROTO_UDP:
                r["outer_l4_proto"] = C.IPPROTO_UDP
                r["outer_sport"], r["outer_dport"] = r["sport"], r["dport"]
                r["outer_udp_len"], r["outer_udp_csum"] = r["udp_len"], r["l4_csum"]
            r["tun_type"] = tun_type
            r["tun_offset"] = off
            r["tun_csum_ok"] = True
        for col in _IP_COLS + _L4_COLS:
            r[col] = _EMPTY_ROW[col]

    # --- L4 -----------------------------------------------------------------------------
    def l4_csum_state(self, field: int, off: int, seglen: int, pseudo: int) -> int:
        """CSUM_* for a TCP/UDP checksum ``field`` over ``seglen`` bytes at ``off``.

        GOOD/BAD need the whole segment captured. PARTIAL: the field holds only the
        pseudo-header sum, as Linux leaves it for CHECKSUM_PARTIAL (``th->check =
        ~tcp_v4_check(len, saddr, daddr, 0)``, i.e. the folded sum, not complemented);
        the complemented form is accepted too. PARTIAL needs no payload bytes.
        """
        pseudo_folded = fold16(pseudo + seglen)
        if off + seglen <= self.cap:
            total = fold16(ones_sum(self.b[off:off + seglen], pseudo + seglen))
            if total == 0xFFFF:
                return S.CSUM_GOOD
            full = True
        else:
            full = False
        if field in (pseudo_folded, (~pseudo_folded) & 0xFFFF):
            return S.CSUM_PARTIAL
        return S.CSUM_BAD if full else S.CSUM_UNKNOWN

    def tcp(self, off: int, length: int, pseudo: int, verify: bool) -> None:
        """TCP header (RFC 9293 3.1) and options (tcp_parse_options)."""
        self.layers.append("tcp")
        r = self.row
        r["l4_proto"] = C.IPPROTO_TCP
        r["l4_offset"] = self.where(off)
        if length < 20:     # no room for a TCP header in the IP payload: malformed, not cut
            raise _Stop(S.STATUS_BAD_L4_HEADER)
        self.need(off, 20)
        b = self.b
        r["sport"], r["dport"] = self.u16(off), self.u16(off + 2)
        r["tcp_seq"], r["tcp_ack"] = self.u32(off + 4), self.u32(off + 8)
        doff = b[off + 12] >> 4
        r["tcp_doff"] = doff
        # AE is the low bit of the reserved nibble (kernel TCP_FLAG_AE in tcp_flag_word)
        r["tcp_flags"] = ((b[off + 12] & 0x01) << 8) | b[off + 13]
        r["tcp_window"] = self.u16(off + 14)
        field = self.u16(off + 16)
        r["l4_csum"] = field
        r["tcp_urg_ptr"] = self.u16(off + 18)
        if doff < 5:
            raise _Stop(S.STATUS_BAD_L4_HEADER)
        hl = doff * 4
        r["tcp_opt_len"] = hl - 20
        if hl > length:     # the header does not fit in the IP payload: malformed, not cut
            raise _Stop(S.STATUS_BAD_L4_HEADER)
        self.need(off, hl)
        opts = b[off + 20:off + hl]
        r["tcp_options"] = opts + bytes(C.TCP_MAX_OPTLEN - len(opts))
        self.tcp_options(opts)
        r["payload_len"] = length - hl
        if verify:
            r["l4_csum_state"] = self.l4_csum_state(field, off, length, pseudo)

    def tcp_options(self, opts: bytes) -> None:
        """Known options, as tcp_parse_options reads them: a malformed option ends parsing."""
        r = self.row
        i, n = 0, len(opts)
        while i < n:
            kind = opts[i]
            if kind == C.TCPOPT_EOL:
                break
            if kind == C.TCPOPT_NOP:
                i += 1
                continue
            if i + 1 >= n:
                break
            size = opts[i + 1]
            if size < 2 or i + size > n:    # "silly options"
                break
            if kind == C.TCPOPT_MSS and size == 4:
                r["tcp_mss"] = (opts[i + 2] << 8) | opts[i + 3]
            elif kind == C.TCPOPT_WSCALE and size == 3:
                r["tcp_wscale"] = min(opts[i + 2], C.TCP_MAX_WSCALE)
            elif kind == C.TCPOPT_SACK_PERM and size == 2:
                r["tcp_sack_perm"] = True
            elif kind == C.TCPOPT_SACK and size >= 10 and (size - 2) % 8 == 0:
                r["tcp_sack_blocks"] = (size - 2) // 8
            elif kind == C.TCPOPT_TIMESTAMP and size == 10:
                r["tcp_has_ts"] = True
                r["tcp_tsval"] = int.from_bytes(opts[i + 2:i + 6], "big")
                r["tcp_tsecr"] = int.from_bytes(opts[i + 6:i + 10], "big")
            i += size

    def udp(self, off: int, length: int, pseudo: int, verify: bool, fragment: bool) -> None:
        """UDP header (RFC 768); a UDP tunnel port continues into the tunnel."""
        self.layers.append("udp")
        r = self.row
        r["l4_proto"] = C.IPPROTO_UDP
        r["l4_offset"] = self.where(off)
        if length < 8:      # no room for a UDP header in the IP payload: malformed, not cut
            raise _Stop(S.STATUS_BAD_L4_HEADER)
        self.need(off, 8)
        sport, dport, ulen, field = struct.unpack_from("!HHHH", self.b, off)
        r["sport"], r["dport"], r["udp_len"], r["l4_csum"] = sport, dport, ulen, field
        if fragment:
            # the UDP length covers the reassembled datagram; count this fragment's bytes
            r["payload_len"] = length - 8
            return
        # __udp4_lib_rcv: ulen > IP payload is a short packet (dropped); ulen < IP payload
        # trims the packet to ulen, so the UDP length wins when it is the smaller.
        if ulen < 8 or ulen > length:
            raise _Stop(S.STATUS_BAD_L4_HEADER)
        r["payload_len"] = ulen - 8
        if verify:
            r["l4_csum_state"] = (S.CSUM_ZERO if field == 0 else
                                  self.l4_csum_state(field, off, ulen, pseudo))
        tun_type, fou_proto = self.opts.udp_tunnel(dport)
        if tun_type == C.TUN_NONE:
            return
        self.enter_tunnel(tun_type, off + 8)
        inner, inner_len = off + 8, ulen - 8
        if tun_type == C.TUN_VXLAN:
            self.vxlan(inner)
        elif tun_type == C.TUN_VXLAN_GPE:
            self.vxlan_gpe(inner)
        elif tun_type == C.TUN_GENEVE:
            self.geneve(inner)
        elif tun_type == C.TUN_FOU:
            self.layers.append("fou")
            self.tun("tun_proto", fou_proto)
            self.ip_in_tunnel(fou_proto, inner, inner_len)
        else:
            self.gue(inner, inner_len)

    def ip_in_tunnel(self, proto: int, off: int, length: int) -> None:
        """IP protocol number carried directly by FOU/GUE (no inner Ethernet)."""
        if proto == C.IPPROTO_IPIP:
            self.ipv4(off)
        elif proto == C.IPPROTO_IPV6:
            self.ipv6(off)
        elif proto == C.IPPROTO_GRE:
            self.enter_tunnel(C.TUN_GRE, off)
            self.gre_body(off, length)
        else:
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)

    # --- tunnels ------------------------------------------------------------------------
    def gre(self, off: int, length: int) -> None:
        """GRE carried by IP (proto 47)."""
        self.enter_tunnel(C.TUN_GRE, off)
        self.gre_body(off, length)

    def gre_body(self, off: int, length: int) -> None:
        """GRE header (RFC 2784/2890; gre_parse_header) and what it carries."""
        self.layers.append("gre")
        self.need(off, C.GRE_HLEN)
        flags, proto = self.u16(off), self.u16(off + 2)
        self.tun("tun_flags", flags)
        self.tun("tun_proto", proto)
        # gre_parse_header: version != 0 (e.g. PPTP) and routing are refused
        if flags & (C.GRE_VERSION | C.GRE_ROUTING):
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)
        hl = C.GRE_HLEN + 4 * (bool(flags & C.GRE_CSUM) + bool(flags & C.GRE_KEY)
                               + bool(flags & C.GRE_SEQ))
        self.need(off, hl)
        p = off + C.GRE_HLEN
        if flags & C.GRE_CSUM:
            if off + length <= self.cap:   # verifiable only with the whole GRE packet
                self.tun("tun_csum_ok", fold16(ones_sum(self.b[off:off + length])) == 0xFFFF)
            p += 4
        if flags & C.GRE_KEY:
            self.tun("tun_key", self.u32(p))
            p += 4
        if flags & C.GRE_SEQ:
            self.tun("tun_seq", self.u32(p))
            p += 4
        if proto == C.ETH_P_IP:
            self.ipv4(p)
        elif proto == C.ETH_P_IPV6:
            self.ipv6(p)
        elif proto == C.ETH_P_TEB:
            self.tun("tun_type", C.TUN_GRE_TEB)
            self.inner_ether(p)
        elif proto == C.ETH_P_ERSPAN:
            self.tun("tun_type", C.TUN_ERSPAN2)
            self.erspan(p, C.ERSPAN_V1)
        elif proto == C.ETH_P_ERSPAN2:
            self.tun("tun_type", C.TUN_ERSPAN3)
            self.erspan(p, C.ERSPAN_V2)
        else:
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)

    def erspan(self, off: int, want_ver: int) -> None:
        """ERSPAN type II (ver 1, 8 bytes) / III (ver 2, 12 [+8]) header (erspan.h)."""
        self.layers.append("erspan2" if want_ver == C.ERSPAN_V1 else "erspan3")
        hl = C.ERSPAN2_HLEN if want_ver == C.ERSPAN_V1 else C.ERSPAN3_HLEN
        self.need(off, hl)
        ver = self.b[off] >> 4
        self.tun("erspan_ver", ver)
        self.tun("erspan_session", self.u16(off + 2) & C.ERSPAN_SESSION_MASK)
        if ver != want_ver:
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        if want_ver == C.ERSPAN_V2 and self.b[off + 11] & 0x01:   # O: platform subheader
            hl += C.ERSPAN3_PLATFORM_LEN
            self.need(off, hl)
        self.inner_ether(off + hl)

    def vxlan(self, off: int) -> None:
        """VXLAN header (RFC 7348): flags word, VNI<<8 word; inner Ethernet."""
        self.layers.append("vxlan")
        self.need(off, C.VXLAN_HLEN)
        w0, w1 = self.u32(off), self.u32(off + 4)
        self.tun("tun_flags", w0)
        self.tun("tun_key", w1)
        if not w0 & C.VXLAN_FLAG_I:     # vxlan_rcv: no valid VNI -> dropped
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        self.inner_ether(off + C.VXLAN_HLEN)

    def vxlan_gpe(self, off: int) -> None:
        """VXLAN-GPE header: next protocol 1 IPv4, 2 IPv6, 3 Ethernet (vxlan_parse_gpe_proto)."""
        self.layers.append("vxlan-gpe")
        self.need(off, C.VXLAN_HLEN)
        w0, w1 = self.u32(off), self.u32(off + 4)
        np_ = w0 & 0xFF
        self.tun("tun_flags", w0)
        self.tun("tun_key", w1)
        self.tun("tun_proto", np_)
        b0 = self.b[off]
        if b0 & C.GPE_VER_MASK or not b0 & C.GPE_FLAG_P:
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        if b0 & C.GPE_FLAG_O:           # vxlan_parse_gpe_proto: OAM is not processed, dropped
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)
        p = off + C.VXLAN_HLEN
        if np_ == C.GPE_NP_IPV4:
            self.ipv4(p)
        elif np_ == C.GPE_NP_IPV6:
            self.ipv6(p)
        elif np_ == C.GPE_NP_ETHERNET:
            self.inner_ether(p)
        else:
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)

    def geneve(self, off: int) -> None:
        """Geneve header (RFC 8926 3.4) with its options (digested); then the payload."""
        self.layers.append("geneve")
        self.need(off, C.GENEVE_HLEN)
        w0, w1 = self.u32(off), self.u32(off + 4)
        opt_len = (self.b[off] & 0x3F) * 4
        proto = self.u16(off + 2)
        self.tun("tun_flags", w0)
        self.tun("tun_key", w1)
        self.tun("tun_proto", proto)
        self.tun("tun_opt_len", opt_len)
        if self.b[off] >> 6 != 0:        # geneve_udp_encap_recv: version must be 0
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        hl = C.GENEVE_HLEN + opt_len
        self.need(off, hl)
        self.tun("tun_opt_digest", digest_or_zero(self.b[off + C.GENEVE_HLEN:off + hl]))
        p = off + hl
        if proto == C.ETH_P_TEB:
            self.inner_ether(p)
        elif proto == C.ETH_P_IP:
            self.ipv4(p)
        elif proto == C.ETH_P_IPV6:
            self.ipv6(p)
        else:
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)

    def gue(self, off: int, length: int) -> None:
        """GUE (fou.c gue_udp_recv): version 0 header, or version 1 = direct IPv4/IPv6."""
        self.layers.append("gue")
        self.need(off, C.GUE_HLEN)
        b0 = self.b[off]
        self.tun("tun_flags", self.u32(off))
        ver = b0 >> 6
        if ver == 1:
            # version 1: no GUE header, the IP version nibble (01|00 IPv4, 01|10 IPv6)
            nib = b0 >> 4
            if nib == 4:
                self.tun("tun_proto", C.IPPROTO_IPIP)
                self.ipv4(off)
            elif nib == 6:
                self.tun("tun_proto", C.IPPROTO_IPV6)
                self.ipv6(off)
            else:
                raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
            return
        if ver != 0:
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        proto = self.b[off + 1]
        opt = (b0 & C.GUE_HLEN_MASK) * 4
        self.tun("tun_proto", proto)
        self.tun("tun_opt_len", opt)
        hl = C.GUE_HLEN + opt
        if hl > length:                 # optional fields longer than the UDP payload
            raise _Stop(S.STATUS_BAD_TUNNEL_HEADER)
        self.need(off, hl)
        self.tun("tun_opt_digest", digest_or_zero(self.b[off + C.GUE_HLEN:off + hl]))
        if b0 & C.GUE_FLAG_C:           # control message: carries no packet
            raise _Stop(S.STATUS_UNSUPPORTED_ENCAP)
        self.ip_in_tunnel(proto, off + hl, length - hl)


def decode_frame(frame: bytes, linktype: int, wire_len: int,
                 options: DecodeOptions = DEFAULT_OPTIONS) -> dict:
    """Decode one captured frame into one packet-table row.

    Parameters
    ----------
    frame: the captured bytes (``cap_len == len(frame)``).
    linktype: pcap/pcapng link type of the record.
    wire_len: original length on the wire (lengths in IP headers are checked against it).
    options: :class:`DecodeOptions` (tunnel ports, DSA tag on plain Ethernet).

    Returns a dict with every column of :data:`~gropcap.decode.schema.PACKET_SCHEMA`
    (``encap`` as a plain string). Record columns the frame cannot know (``ts_ns``,
    ``iface``, ``file_index``, ``record``, ``file_offset``, ``epb_flags``) are 0. Never
    raises for packet data: problems become ``status``.

    >>> row = decode_frame(bytes(14), 1, 60)
    >>> row["status"], row["encap"]
    (2, 'eth')
    """
    return _FrameDecoder(frame, linktype, wire_len, options).run()


def decode_batch(batch: RecordBatch, options: DecodeOptions = DEFAULT_OPTIONS, *,
                 file_index: int = 0) -> pa.RecordBatch:
    """Decode every record of ``batch`` into an Arrow batch with exactly ``PACKET_SCHEMA``.

    One row per record, in record order, whatever the bytes are. ``file_index`` fills the
    ``file_index`` column (position of the source file in the input list).

    >>> from tests.craft import make_batch                       # doctest: +SKIP
    >>> decode_batch(make_batch([b"\\x00" * 60])).num_rows        # doctest: +SKIP
    1
    """
    n = len(batch)
    cols: dict[str, list] = {name: [None] * n for name in S.PACKET_COLUMNS}
    buf = batch.buf
    for i in range(n):
        o, cl = int(batch.offset[i]), int(batch.cap_len[i])
        row = decode_frame(bytes(buf[o:o + cl]), int(batch.linktype[i]),
                           int(batch.wire_len[i]), options)
        row["ts_ns"] = int(batch.ts_ns[i])
        row["iface"] = int(batch.iface[i])
        row["file_index"] = file_index
        row["record"] = int(batch.record[i])
        row["file_offset"] = int(batch.file_offset[i])
        row["epb_flags"] = int(batch.epb_flags[i])
        for name in S.PACKET_COLUMNS:
            cols[name][i] = row[name]
    arrays = []
    for field in S.PACKET_FIELDS:
        values = cols[field.name]
        if pa.types.is_dictionary(field.type):
            arr = pa.array(values, pa.string()).dictionary_encode()
            arr = arr.cast(field.type)
        else:
            arr = pa.array(values, field.type)
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=S.PACKET_SCHEMA)
