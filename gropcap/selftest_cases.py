"""The Linux kernel's GRO selftest as data: crafted frames, burst boundaries, expected sizes.

Layer: test data, outside the pipeline. It hands on complete Ethernet frames (``bytes``) in
send order, the burst (sleep-separated group) of each frame, and the payload sizes the
receiver sees before the FIN, per protocol and kernel version.

Source: tools/testing/selftests/net/lib/gro.c (newest, one sub-test per case) and
tools/testing/selftests/drivers/net/gro.py (which protocols run which case). Frames are
built byte for byte as gro.c builds them, including its quirks:

* frames are sent unpadded (a pure ACK over IPv4 is 54 bytes, ``data_lrg_1byte`` 55);
* ``tcp_ts``: the timestamp option is written through an unpacked C struct (kind, len,
  2 bytes of struct padding, TSval in host = little-endian order, TSecr), so the option bytes
  are ``08 0a 00 00 <tsval LE> 00..`` and order 2 leaves byte 10 zero ("TS EOL NOP");
* ``tcp_opt``: NOP + window scale are written at ``MAX_HDR_LEN`` (74), not at the TCP
  options, so over IPv4 (54-byte headers) the 4 option bytes stay zero (EOL);
* ``ip_frag4``: the TCP checksum covers 200 payload bytes of which 100 are sent; over ipip
  ``fill_networklayer`` rewrites the OUTER header as a plain IPv4/TCP fragment header;
* ``ip_opt`` over ipip: the 40-byte option goes after the inner header while the OUTER
  header gets ihl 15, so the outer "options" are the inner header plus 20 option bytes;
* ``tcp_csum``: ``check - 1`` on the little-endian u16 view of the checksum field;
* IP-ID, TTL, TOS and ECN edits over ipip go to the outer header (``buf + ETH_HLEN``).

Expected values come from gro.c's receiver and, for 6.18, from replaying every case through
a live 6.18 kernel (gropcap.replay.kernel; tests/replay/test_kernel_replay.py checks them again on
every root run). Where the kernel and the selftest disagree the kernel wins (``flags_cwr``).
Values for older kernels are derived from the version notes of docs/kernel-gro-spec.md
section 7 and say so in :attr:`SelftestCase.notes`.

Example::

    >>> from gropcap.selftest_cases import CASES
    >>> c = CASES["data_same"]
    >>> [len(f) for f in c.frames("ipv4")]
    [154, 154, 54]
    >>> c.expected("ipv4")
    [200]
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from gropcap import constants as C

__all__ = [
    "PROTOS", "CASES", "SelftestCase", "CaseFrames", "cases_for", "frames", "bursts",
    "expected", "write_case_pcap", "PAYLOAD_LEN", "SPORT", "DPORT", "FIN_SEQ_OFFSET",
    "Builder", "inet_checksum", "received_sizes", "large_geometry",
]

PROTOS = ("ipv4", "ipv6", "ipip")

# gro.c constants
DPORT = 8000
SPORT = 1500
PAYLOAD_LEN = 100
NUM_PACKETS = 4
START_SEQ = 100
START_ACK = 100
ASSUMED_MTU = 4096
IP_MAXPACKET = 65535
MIN_EXTHDR_SIZE = 8
CAPACITY_PAYLOAD_LEN = 200
TCP_MAXWIN = 65535
FIN_SEQ_OFFSET = 2 * PAYLOAD_LEN    # create_packet(fin_pkt, PAYLOAD_LEN * 2, 0, 0, 1)
SRC_MAC = bytes.fromhex("aa0000000001")   # gro.sh --smac
DST_MAC = bytes.fromhex("aa0000000002")   # gro.sh --dmac
ADDR4_SRC = socket.inet_pton(socket.AF_INET, "192.168.1.200")
ADDR4_DST = socket.inet_pton(socket.AF_INET, "192.168.1.100")
ADDR6_SRC = socket.inet_pton(socket.AF_INET6, "fdaa::2")
ADDR6_DST = socket.inet_pton(socket.AF_INET6, "fdaa::1")
MAX_HDR_LEN = C.ETH_HLEN + 40 + 20    # ETH + ipv6hdr + tcphdr
TCPOLEN_TIMESTAMP = 10
TCPOLEN_TSTAMP_APPA = 12
TCPOLEN_WINDOW = 3
IPOPT_TS = 0x44
IP_TS_OPTLEN = 40                     # sizeof(struct ip_timestamp)

KernelVersion = tuple[int, int]
NEWEST = (6, 18)


def inet_checksum(data: bytes, start: int = 0) -> int:
    """RFC 1071 one's-complement checksum of ``data`` with an initial partial sum."""
    if len(data) & 1:
        data = data + b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


class Builder:
    """gro.c's packet constructor for one protocol ("ipv4", "ipv6" or "ipip").

    Offsets follow gro.c ``main()``: ``tcp_offset`` and ``total_hdr_len``.
    """

    def __init__(self, proto: str):
        if proto not in PROTOS:
            raise ValueError(f"unknown protocol {proto!r}; expected one of {PROTOS}")
        self.proto = proto
        self.v6 = proto == "ipv6"
        self.ip_hlen = 40 if self.v6 else 20
        if proto == "ipip":
            self.tcp_offset = C.ETH_HLEN + 40
        else:
            self.tcp_offset = C.ETH_HLEN + self.ip_hlen
        self.total_hdr_len = self.tcp_offset + 20
        self.ethertype = C.ETH_P_IPV6 if self.v6 else C.ETH_P_IP

    # --- gro.c fill_* / create_packet ---
    def tcp_checksum(self, tcp: bytes, payload_len: int) -> int:
        """gro.c tcp_checksum(): pseudo header (length 20 + payload_len) + tcp bytes."""
        ln = 20 + payload_len
        if self.v6:
            ph = ADDR6_SRC + ADDR6_DST + struct.pack("!HH", C.IPPROTO_TCP, ln)
        else:
            ph = ADDR4_SRC + ADDR4_DST + struct.pack("!HH", C.IPPROTO_TCP, ln)
        return inet_checksum(ph + tcp[:ln])

    def _tcp(self, seq_off: int, ack_off: int, payload: bytes, fin: int) -> bytearray:
        flags = C.TCP_FLAG_ACK | (C.TCP_FLAG_FIN if fin else 0)
        th = bytearray(struct.pack("!HHIIBBHHH", SPORT, DPORT, (START_SEQ + seq_off) & 0xFFFFFFFF,
                                   (START_ACK + ack_off) & 0xFFFFFFFF, 5 << 4, flags,
                                   TCP_MAXWIN, 0, 0))
        struct.pack_into("!H", th, 16, self.tcp_checksum(bytes(th) + payload, len(payload)))
        return th

    def _ip(self, payload_len: int, protocol: int) -> bytearray:
        """gro.c fill_networklayer(): payload_len counts bytes after the TCP header."""
        if self.v6:
            return bytearray(struct.pack("!IHBB", 6 << 28, 20 + payload_len, protocol, 8)
                             + ADDR6_SRC + ADDR6_DST)
        ih = bytearray(struct.pack("!BBHHHBBH", 0x45, 0, 20 + payload_len + 20, 0, 0x4000, 8,
                                   protocol, 0) + ADDR4_SRC + ADDR4_DST)
        struct.pack_into("!H", ih, 10, inet_checksum(bytes(ih)))
        return ih

    def create(self, seq_off: int, ack_off: int = 0, payload_len: int = PAYLOAD_LEN,
               fin: int = 0, fill: int = ord("a")) -> bytearray:
        """gro.c create_packet(): Ethernet + IP (+ outer IPv4 for ipip) + TCP + 'a' * len."""
        payload = bytes([fill]) * payload_len
        out = bytearray(struct.pack("!6s6sH", DST_MAC, SRC_MAC, self.ethertype))
        if self.proto == "ipip":
            out += self._ip(payload_len + 20, C.IPPROTO_IPIP)
        out += self._ip(payload_len, C.IPPROTO_TCP)
        out += self._tcp(seq_off, ack_off, payload, fin)
        out += payload
        return out

    def data(self, seq_off: int, payload_len: int = PAYLOAD_LEN) -> bytearray:
        """A data segment P(seq_off, payload_len)."""
        return self.create(seq_off, 0, payload_len)

    def fin(self) -> bytearray:
        """The FIN gro.c sends after every case: seq 300, ACK|FIN, no payload."""
        return self.create(FIN_SEQ_OFFSET, 0, 0, 1)

    # --- in-place edits, each recomputing what gro.c recomputes ---
    def refresh_tcp_csum(self, buf: bytearray, payload_len: int) -> None:
        """tcph->check = 0; tcph->check = tcp_checksum(tcph, payload_len)."""
        t = self.tcp_offset
        struct.pack_into("!H", buf, t + 16, 0)
        struct.pack_into("!H", buf, t + 16, self.tcp_checksum(bytes(buf[t:]), payload_len))

    def refresh_ip4_csum(self, buf: bytearray, off: int = C.ETH_HLEN, hlen: int = 20) -> None:
        """fix_ip4_checksum(): IPv4 header checksum over ``hlen`` bytes at ``off``."""
        struct.pack_into("!H", buf, off + 10, 0)
        struct.pack_into("!H", buf, off + 10, inet_checksum(bytes(buf[off:off + hlen])))

    def set_tcp_flags(self, buf: bytearray, add: int, payload_len: int) -> None:
        """gro.c set_flags(): OR flags into the TCP flag byte, recompute the checksum."""
        buf[self.tcp_offset + 13] |= add
        self.refresh_tcp_csum(buf, payload_len)

    def add_tcp_options(self, buf: bytearray, opts: bytes, payload_len: int) -> bytearray:
        """gro.c recompute_packet(): insert ``opts`` after the TCP header, fix doff/lengths."""
        t, h = self.tcp_offset, self.total_hdr_len
        extlen = len(opts)
        out = bytearray(buf[:h]) + opts + buf[h:]
        out[t + 12] += (extlen // 4) << 4
        self.refresh_tcp_csum(out, payload_len + extlen)
        off = C.ETH_HLEN
        while off < t:
            if self.v6:
                pl = struct.unpack_from("!H", out, off + 4)[0]
                struct.pack_into("!H", out, off + 4, pl + extlen)
                off += 40
            else:
                tl = struct.unpack_from("!H", out, off + 2)[0]
                struct.pack_into("!H", out, off + 2, tl + extlen)
                self.refresh_ip4_csum(out, off)
                off += 20
        return out


def _ts_option_bytes(ts: int, order: int) -> bytes:
    """gro.c add_standard_tcp_options(): 12 option bytes, struct layout quirks included."""
    area = bytearray(16)

    def write_ts(at: int) -> None:
        # struct tcp_option_ts {u8 kind, len; u32 tsval, tsecr} is NOT packed: 12 bytes,
        # tsval at +4 in host (little-endian) order; the memset clears all 12.
        area[at:at + 12] = bytes(12)
        area[at] = C.TCPOPT_TIMESTAMP
        area[at + 1] = TCPOLEN_TIMESTAMP
        struct.pack_into("<II", area, at + 4, ts, 0)

    if order == 0:
        area[0] = area[1] = C.TCPOPT_NOP
        write_ts(2)
    elif order == 1:
        area[0] = C.TCPOPT_NOP
        write_ts(1)
        area[1 + TCPOLEN_TIMESTAMP] = C.TCPOPT_NOP
    else:
        write_ts(0)
        area[TCPOLEN_TIMESTAMP + 1] = C.TCPOPT_NOP
        area[TCPOLEN_TIMESTAMP + 2] = C.TCPOPT_NOP   # overwritten by the payload
    return bytes(area[:TCPOLEN_TSTAMP_APPA])


@dataclass
class CaseFrames:
    """Frames of one case in send order, with the burst number of each frame.

    ``bursts[i]`` counts the sleeps gro.c made before frame ``i``; ``sleeps_s[k]`` is how
    long gro.c slept before burst ``k + 1``. The trailing FIN is the last frame.
    """

    frames: list[bytes]
    bursts: list[int]
    sleeps_s: list[float] = field(default_factory=list)


class _Seq:
    """Collects frames and burst boundaries while a case is being built."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.bursts: list[int] = []
        self.sleeps: list[float] = []

    def send(self, *frames) -> None:
        for f in frames:
            self.frames.append(bytes(f))
            self.bursts.append(len(self.sleeps))

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def done(self) -> CaseFrames:
        return CaseFrames(self.frames, self.bursts, self.sleeps)


FIN_DELAY_S = 0.1      # gro.c fin_delay_us = 100 ms


@dataclass(frozen=True)
class SelftestCase:
    """One GRO selftest case.

    ``name``: gro.c sub-test name (extra cases not in gro.c have ``in_selftest=False``).
    ``protos``: protocols gro.py runs it for. ``group``: the older grouped test it belonged
    to. ``build(builder, seq)`` sends the frames; ``expect(proto, kernel)`` gives the sizes.
    """

    name: str
    protos: tuple[str, ...]
    group: str
    build: Callable[[Builder, _Seq], None] = field(repr=False)
    expect: Callable[[str, KernelVersion], list[int]] = field(repr=False)
    notes: str = ""
    in_selftest: bool = True

    def case_frames(self, proto: str) -> CaseFrames:
        """Frames (FIN included), burst ids and sleeps for ``proto``."""
        self._check(proto)
        b, s = Builder(proto), _Seq()
        self.build(b, s)
        s.send(b.fin())
        return s.done()

    def frames(self, proto: str) -> list[bytes]:
        """Complete Ethernet frames in send order, the trailing FIN included."""
        return self.case_frames(proto).frames

    def bursts(self, proto: str) -> list[int]:
        """Burst number of each frame (gro.c sleeps between bursts)."""
        return self.case_frames(proto).bursts

    def expected(self, proto: str, kernel: KernelVersion = NEWEST) -> list[int]:
        """Payload sizes the receiver sees, in order, before the FIN."""
        self._check(proto)
        return list(self.expect(proto, tuple(kernel[:2])))

    def _check(self, proto: str) -> None:
        if proto not in self.protos:
            raise ValueError(f"case {self.name} does not run over {proto} "
                             f"(runs over {', '.join(self.protos)})")


def _const(sizes: list[int]) -> Callable[[str, KernelVersion], list[int]]:
    return lambda proto, kernel: list(sizes)


ALL = PROTOS
V4 = ("ipv4", "ipip")
V6 = ("ipv6",)


# ---------------------------------------------------------------- data / ack
def _data_pair(l1: int, l2: int):
    def build(b: Builder, s: _Seq) -> None:       # gro.c send_data_pkts()
        s.send(b.data(0, l1), b.data(l1, l2))
    return build


def _data_burst(b: Builder, s: _Seq) -> None:
    s.send(b.data(0), b.data(100))
    s.sleep(0.1)
    s.send(b.data(200), b.data(300))


def _ack(b: Builder, s: _Seq) -> None:           # gro.c send_ack()
    a = b.create(0, 0, 0)
    s.send(a, a, b.create(0, 1, 0))


# ---------------------------------------------------------------- flags
def _flags(psh=0, syn=0, rst=0, urg=0, cwr=0):
    """gro.c send_flags(): the flag packet(s) at i = NUM_PACKETS/2 (and /2 - 1 for CWR)."""
    bits = ((C.TCP_FLAG_PSH if psh else 0) | (C.TCP_FLAG_SYN if syn else 0)
            | (C.TCP_FLAG_RST if rst else 0) | (C.TCP_FLAG_URG if urg else 0)
            | (C.TCP_FLAG_CWR if cwr else 0))

    def build(b: Builder, s: _Seq) -> None:
        plen = PAYLOAD_LEN * bool(psh or cwr)
        flag = (NUM_PACKETS // 2, NUM_PACKETS // 2 - 1)
        fbuf = []
        for f in flag:
            p = b.create(f * plen, 0, plen)
            b.set_tcp_flags(p, bits, plen)
            fbuf.append(p)
        for i in range(NUM_PACKETS + 1):
            if i == flag[0]:
                s.send(fbuf[0])
            elif i == flag[1] and cwr:
                s.send(fbuf[1])
            else:
                s.send(b.data(i * PAYLOAD_LEN))
    return build


def _expect_cwr(proto: str, kernel: KernelVersion) -> list[int]:
    if kernel >= (6, 15):
        # tcp_gro_receive: CWR flushes and, since AccECN (6.15), differs in the flag word,
        # so CWR segments never merge: measured on 6.18 (gro.c itself expects [100,200,200]).
        return [100, 100, 100, 200]
    # before 6.15 the flag-word comparison masked CWR: a CWR head absorbs later segments.
    return [100, 100, 300]


# ---------------------------------------------------------------- tcp
def _tcp_csum(b: Builder, s: _Seq) -> None:     # gro.c send_changed_checksum()
    s.send(b.data(0))
    p = b.data(100)
    o = b.tcp_offset + 16
    v = (int.from_bytes(p[o:o + 2], "little") - 1) & 0xFFFF
    p[o:o + 2] = v.to_bytes(2, "little")
    s.send(p)
    s.sleep(FIN_DELAY_S)


def _tcp_seq(b: Builder, s: _Seq) -> None:      # gro.c send_changed_seq()
    s.send(b.data(0), b.data(101))
    s.sleep(FIN_DELAY_S)


def _tcp_ts(b: Builder, s: _Seq) -> None:       # gro.c send_changed_ts()
    for i, (ts, order) in enumerate([(0, 0), (0, 0), (100, 0), (100, 1), (100, 2)]):
        s.send(b.add_tcp_options(b.data(i * 100), _ts_option_bytes(ts, order), PAYLOAD_LEN))
    s.sleep(FIN_DELAY_S)


def _tcp_opt(b: Builder, s: _Seq) -> None:      # gro.c send_diff_opt()
    ts = _ts_option_bytes(0, 0)
    s.send(b.add_tcp_options(b.data(0), ts, PAYLOAD_LEN),
           b.add_tcp_options(b.data(100), ts, PAYLOAD_LEN))
    # NOP + WS(0) is written at MAX_HDR_LEN: inside the option area only when
    # total_hdr_len == MAX_HDR_LEN (ipv6, ipip); over ipv4 the 4 bytes stay zero.
    if b.total_hdr_len == MAX_HDR_LEN:
        opt = bytes([C.TCPOPT_NOP, C.TCPOPT_WSCALE, TCPOLEN_WINDOW, 0])
    else:
        opt = bytes(4)
    s.send(b.add_tcp_options(b.data(200), opt, PAYLOAD_LEN))
    s.sleep(FIN_DELAY_S)


# ---------------------------------------------------------------- ip
def _ip_ecn(b: Builder, s: _Seq) -> None:       # gro.c send_changed_ECN()
    s.send(b.data(0))
    p = b.data(100)
    if b.v6:
        p[C.ETH_HLEN + 1] ^= 0x20        # traffic class low nibble: ECN 10
    else:
        p[C.ETH_HLEN + 1] ^= 0x02
        b.refresh_ip4_csum(p)
    s.send(p)


def _ip_tos(b: Builder, s: _Seq) -> None:       # gro.c send_changed_tos()
    s.send(b.data(0))
    p = b.data(100)
    if b.v6:
        p[C.ETH_HLEN] = (p[C.ETH_HLEN] & 0xF0) | 0x0F    # ip6h->priority = 0xf: TC 0xF0
    else:
        p[C.ETH_HLEN + 1] = 1
        b.refresh_ip4_csum(p)
    s.send(p)


def _ip_ttl(b: Builder, s: _Seq) -> None:       # gro.c send_changed_ttl()
    s.send(b.data(0))
    p = b.data(100)
    p[C.ETH_HLEN + 8] = 7
    b.refresh_ip4_csum(p)
    s.send(p)


def _ip_hoplimit6(b: Builder, s: _Seq) -> None:   # not in gro.c: the IPv6 twin of ip_ttl
    s.send(b.data(0))
    p = b.data(100)
    p[C.ETH_HLEN + 7] = 7
    s.send(p)


def _expect_hoplimit6(proto: str, kernel: KernelVersion) -> list[int]:
    if kernel >= (5, 18):
        return [100, 100]       # ipv6_gro_flush: hop limit differs -> flush (measured 6.18)
    # before 5.18 a different hop limit was a different flow: both segments are held, the
    # FIN completes P(0) and overtakes P(100), which is delivered after the FIN.
    return [100]


def _ip_opt(b: Builder, s: _Seq) -> None:       # gro.c send_ip_options()
    s.send(b.data(0))
    buf = b.data(100)
    t = b.tcp_offset
    ts = bytearray(IP_TS_OPTLEN)
    ts[0:4] = bytes([IPOPT_TS, IP_TS_OPTLEN, 5, 0])  # ptr 5, flags TSONLY (0), oflw 0
    opt = bytearray(buf[:t]) + ts + buf[t:]
    o = C.ETH_HLEN                     # the header at ETH_HLEN: the outer one for ipip
    opt[o] = 0x40 | (5 + IP_TS_OPTLEN // 4)
    tl = struct.unpack_from("!H", opt, o + 2)[0]
    struct.pack_into("!H", opt, o + 2, tl + IP_TS_OPTLEN)
    b.refresh_ip4_csum(opt, o, 20 + IP_TS_OPTLEN)
    s.send(opt, b.data(200))
    s.sleep(FIN_DELAY_S)


def _ip_frag4(b: Builder, s: _Seq) -> None:     # gro.c send_fragment4()
    s.send(b.data(0))
    buf = b.create(0)                  # the static buffer still holds P(0)'s headers
    payload = b"a" * (2 * PAYLOAD_LEN)
    th = b._tcp(PAYLOAD_LEN, 0, payload, 0)    # checksum over 200 bytes, 100 sent
    t = b.tcp_offset
    buf[t:t + 20] = th
    # fill_networklayer(buf + ETH_HLEN, PAYLOAD_LEN, IPPROTO_TCP): for ipip this replaces
    # the OUTER header by a plain IPv4/TCP header.
    buf[C.ETH_HLEN:C.ETH_HLEN + 20] = b._ip(PAYLOAD_LEN, C.IPPROTO_TCP)
    struct.pack_into("!H", buf, C.ETH_HLEN + 6, 0x6000)    # DF + MF, offset 0
    b.refresh_ip4_csum(buf)
    s.send(buf[:b.total_hdr_len + PAYLOAD_LEN])
    s.sleep(FIN_DELAY_S)


_ID_CASES = {
    # name: ((df, id) per frame)       gro.c send_flush_id_case()
    "ip_id_df1_inc": ((1, 8), (1, 9)),
    "ip_id_df1_fixed": ((1, 8), (1, 8)),
    "ip_id_df0_inc": ((0, 8), (0, 9)),
    "ip_id_df0_fixed": ((0, 8), (0, 8)),
    "ip_id_df1_inc_fixed": ((1, 8), (1, 9), (1, 9)),
    "ip_id_df1_fixed_inc": ((1, 8), (1, 8), (1, 9)),
}


def _ip_id(spec):
    def build(b: Builder, s: _Seq) -> None:
        for i, (df, ipid) in enumerate(spec):
            p = b.data(i * PAYLOAD_LEN)
            o = C.ETH_HLEN             # the outer header for ipip
            struct.pack_into("!H", p, o + 4, ipid)
            struct.pack_into("!H", p, o + 6, C.IP_DF if df else 0)
            b.refresh_ip4_csum(p, o)
            s.send(p)
        s.sleep(FIN_DELAY_S)
    return build


def _expect_id(name: str):
    newest = {"ip_id_df1_inc": [200], "ip_id_df1_fixed": [200], "ip_id_df0_inc": [200],
              "ip_id_df0_fixed": [200], "ip_id_df1_inc_fixed": [200, 100],
              "ip_id_df1_fixed_inc": [200, 100]}[name]

    def expect(proto: str, kernel: KernelVersion) -> list[int]:
        if kernel >= (6, 18):
            return list(newest)        # inet_gro_flush, 2-bit ip_fixedid (measured 6.18)
        if name == "ip_id_df0_fixed":
            return [100, 100]          # before 6.18 a fixed ID needed DF
        if proto == "ipip" and name in ("ip_id_df1_inc_fixed", "ip_id_df1_fixed_inc"):
            # before 6.18 an outer header with DF had its ID ignored; inner IDs are fixed (0)
            return [300]
        return list(newest)
    return expect


def _ip_frag6(b: Builder, s: _Seq) -> None:     # gro.c send_fragment6()
    s.send(b.data(0), b.data(100))
    s.sleep(1.0)
    p = b.data(200)
    t = b.tcp_offset
    frag = bytes([C.IPPROTO_TCP]) + bytes(7)
    out = bytearray(p[:t]) + frag + p[t:]
    out[C.ETH_HLEN + 6] = C.IPPROTO_FRAGMENT
    pl = struct.unpack_from("!H", out, C.ETH_HLEN + 4)[0]
    struct.pack_into("!H", out, C.ETH_HLEN + 4, pl + 8)
    s.send(out, b.data(300))
    s.sleep(FIN_DELAY_S)


def _v6ext(exthdr_type: int, data1: bytes, data2: bytes):
    def build(b: Builder, s: _Seq) -> None:     # gro.c send_ipv6_exthdr()
        for i, data in enumerate((data1, data2)):
            p = b.data(i * PAYLOAD_LEN)
            t = b.tcp_offset
            ext = bytes([C.IPPROTO_TCP, 0]) + data
            out = bytearray(p[:t]) + ext + p[t:]
            out[C.ETH_HLEN + 6] = exthdr_type
            pl = struct.unpack_from("!H", out, C.ETH_HLEN + 4)[0]
            struct.pack_into("!H", out, C.ETH_HLEN + 4, pl + MIN_EXTHDR_SIZE)
            s.send(out)
        s.sleep(FIN_DELAY_S)
    return build


EXT_PAYLOAD_1 = b"\x00" * 6
EXT_PAYLOAD_2 = b"\x11" * 6


# ---------------------------------------------------------------- large
def large_geometry(proto: str) -> tuple[int, int, int, int]:
    """(mss, max_payload, N, remainder) of the newest gro.c for ``proto``.

    >>> large_geometry("ipv4")
    (4056, 65495, 16, 599)
    """
    b = Builder(proto)
    hdrs = b.total_hdr_len - C.ETH_HLEN
    mss = ASSUMED_MTU - hdrs
    max_payload = IP_MAXPACKET - hdrs
    n = max_payload // mss
    return mss, max_payload, n, max_payload % mss


def _large(extra: int):
    def build(b: Builder, s: _Seq) -> None:     # gro.c send_large()
        mss, _mp, n, rem = large_geometry(b.proto)
        rem += extra
        s.send(*[b.data(i * mss, mss) for i in range(n)])
        s.send(b.data(n * mss, rem), b.data((n + 1) * mss, rem))
    return build


def _expect_large_max(proto: str, kernel: KernelVersion) -> list[int]:
    _mss, mp, _n, rem = large_geometry(proto)
    return [mp, rem]


def _expect_large_rem(proto: str, kernel: KernelVersion) -> list[int]:
    _mss, mp, _n, rem = large_geometry(proto)
    return [mp - rem, rem + 1, rem + 1]


# ---------------------------------------------------------------- single / capacity
def _single(b: Builder, s: _Seq) -> None:
    s.send(b.data(0))


def _capacity(num_flows: int):
    def build(b: Builder, s: _Seq) -> None:     # gro.c send_capacity()
        for pkt_idx in (0, 1):
            for i in range(num_flows):
                p = b.create(pkt_idx * CAPACITY_PAYLOAD_LEN, 0, CAPACITY_PAYLOAD_LEN,
                             fill=ord("a") + i)
                struct.pack_into("!H", p, b.tcp_offset, SPORT + i)
                if pkt_idx:
                    p[b.tcp_offset + 13] |= C.TCP_FLAG_PSH
                b.refresh_tcp_csum(p, CAPACITY_PAYLOAD_LEN)
                s.send(p)
        s.sleep(FIN_DELAY_S)
    return build


def _expect_capacity(num_flows: int):
    def expect(proto: str, kernel: KernelVersion) -> list[int]:
        if num_flows <= C_MAX_GRO_SKBS:
            return [2 * CAPACITY_PAYLOAD_LEN] * num_flows
        # veth delivers with skb->hash 0 (measured on 6.18, see gropcap.replay.kernel), so
        # every flow lands in GRO bucket 0, which holds MAX_GRO_SKBS = 8 packets: each
        # first segment beyond 8 evicts the oldest held one (gro_flush_oldest), whose
        # second segment then arrives with PSH and nothing to merge with.
        k = num_flows - C_MAX_GRO_SKBS
        return ([CAPACITY_PAYLOAD_LEN] * k + [CAPACITY_PAYLOAD_LEN] * k
                + [2 * CAPACITY_PAYLOAD_LEN] * (num_flows - k))
    return expect


C_MAX_GRO_SKBS = 8      # include/net/gro.h MAX_GRO_SKBS


# ---------------------------------------------------------------- the table
def _mk() -> dict[str, SelftestCase]:
    cases = [
        SelftestCase("data_same", ALL, "data", _data_pair(100, 100), _const([200])),
        SelftestCase("data_lrg_sml", ALL, "data", _data_pair(100, 50), _const([150])),
        SelftestCase("data_lrg_1byte", ALL, "data", _data_pair(100, 1), _const([101]),
                     "newest gro.c only; not in gro.py's list but run here"),
        SelftestCase("data_sml_lrg", ALL, "data", _data_pair(50, 100), _const([50, 100])),
        SelftestCase("data_burst", ALL, "data", _data_burst, _const([200, 200])),
        SelftestCase("ack", ALL, "ack", _ack, _const([0, 0, 0])),
        SelftestCase("flags_psh", ALL, "flags", _flags(psh=1), _const([300, 200])),
        SelftestCase("flags_syn", ALL, "flags", _flags(syn=1), _const([200, 0, 200])),
        SelftestCase("flags_rst", ALL, "flags", _flags(rst=1), _const([200, 0, 200])),
        SelftestCase("flags_urg", ALL, "flags", _flags(urg=1), _const([200, 0, 200])),
        SelftestCase("flags_cwr", ALL, "flags", _flags(cwr=1), _expect_cwr,
                     "gro.c expects [100,200,200]; 6.18 gives [100,100,100,200]; before "
                     "6.15 derived from the spec (CWR masked in the flag word)"),
        SelftestCase("tcp_csum", ALL, "tcp", _tcp_csum, _const([100, 100]),
                     "the bad-checksum frame overtakes the held P(0)"),
        SelftestCase("tcp_seq", ALL, "tcp", _tcp_seq, _const([100, 100])),
        SelftestCase("tcp_ts", ALL, "tcp", _tcp_ts, _const([200, 100, 100, 100])),
        SelftestCase("tcp_opt", ALL, "tcp", _tcp_opt, _const([200, 100])),
        SelftestCase("ip_ecn", ALL, "ip", _ip_ecn, _const([100, 100])),
        SelftestCase("ip_tos", ALL, "ip", _ip_tos, _const([100, 100])),
        SelftestCase("ip_ttl", V4, "ip", _ip_ttl, _const([100, 100])),
        SelftestCase("ip_opt", V4, "ip", _ip_opt, _const([100, 100, 100]),
                     "the options frame overtakes the held P(0)"),
        SelftestCase("ip_frag4", V4, "ip", _ip_frag4, _const([100, 100]),
                     "the fragment overtakes the held P(0)"),
        *[SelftestCase(n, V4, "ip", _ip_id(spec), _expect_id(n),
                       "before 6.18 derived from the spec" if n == "ip_id_df0_fixed"
                       or n.endswith(("inc_fixed", "fixed_inc")) else "")
          for n, spec in _ID_CASES.items()],
        SelftestCase("ip_frag6", V6, "ip", _ip_frag6, _const([200, 100, 100])),
        SelftestCase("ip_v6ext_same", V6, "ip",
                     _v6ext(C.IPPROTO_DSTOPTS, EXT_PAYLOAD_1, EXT_PAYLOAD_1), _const([200])),
        SelftestCase("ip_v6ext_diff", V6, "ip",
                     _v6ext(C.IPPROTO_DSTOPTS, EXT_PAYLOAD_1, EXT_PAYLOAD_2),
                     _const([100, 100])),
        SelftestCase("ip_v6ext_same_hbh", V6, "ip",
                     _v6ext(C.IPPROTO_HOPOPTS, EXT_PAYLOAD_1, EXT_PAYLOAD_1), _const([200]),
                     "older gro.c variant with a Hop-by-Hop header"),
        SelftestCase("ip_v6ext_diff_hbh", V6, "ip",
                     _v6ext(C.IPPROTO_HOPOPTS, EXT_PAYLOAD_1, EXT_PAYLOAD_2),
                     _const([100, 100]), "older gro.c variant with a Hop-by-Hop header"),
        SelftestCase("ip_hoplimit6", V6, "ip", _ip_hoplimit6, _expect_hoplimit6,
                     "not in gro.c (its comment says hop limit is not checked, stale since "
                     "5.18); before 5.18 derived from the spec", in_selftest=False),
        SelftestCase("large_max", ALL, "large", _large(0), _expect_large_max),
        SelftestCase("large_rem", ALL, "large", _large(1), _expect_large_rem),
        SelftestCase("single", ALL, "single", _single, _const([100])),
        SelftestCase("capacity_8", ALL, "capacity", _capacity(8), _expect_capacity(8),
                     "expected for a receiver without RX hash (veth): all flows share "
                     "GRO bucket 0"),
        SelftestCase("capacity_16", ALL, "capacity", _capacity(16), _expect_capacity(16),
                     "more flows than one GRO bucket holds; expected for a receiver "
                     "without RX hash (veth, measured on 6.18), see gropcap.replay.kernel"),
    ]
    return {c.name: c for c in cases}


CASES: dict[str, SelftestCase] = _mk()


def cases_for(proto: str) -> list[SelftestCase]:
    """The cases gro.py (plus the extra ones here) runs over ``proto``, in table order."""
    return [c for c in CASES.values() if proto in c.protos]


def frames(name: str, proto: str) -> list[bytes]:
    """Frames of case ``name`` over ``proto`` (the FIN included)."""
    return CASES[name].frames(proto)


def bursts(name: str, proto: str) -> list[int]:
    """Burst number of each frame of case ``name`` over ``proto``."""
    return CASES[name].bursts(proto)


def expected(name: str, proto: str, kernel: KernelVersion = NEWEST) -> list[int]:
    """Expected payload sizes of case ``name`` over ``proto`` for ``kernel``."""
    return CASES[name].expected(proto, kernel)


def write_case_pcap(path, name: str, proto: str, *, start_ns: int = 1_700_000_000 * 10**9,
                    gap_ns: int = 1_000, nanosecond: bool = True) -> None:
    """Write case ``name`` over ``proto`` as an Ethernet pcap.

    Frames of one burst are ``gap_ns`` apart; gro.c's sleeps become timestamp gaps of the
    same length, so a NAPI model that infers polls from timestamps sees the bursts.

    >>> write_case_pcap("/tmp/data_same_ipv4.pcap", "data_same", "ipv4")
    """
    from gropcap.capture.writer import write_pcap

    cf = CASES[name].case_frames(proto)
    ts, t, prev = [], start_ns, 0
    for i, bno in enumerate(cf.bursts):
        if i:
            t += gap_ns
            if bno != prev:
                t += int(cf.sleeps_s[bno - 1] * 1e9)
        prev = bno
        ts.append(t)
    write_pcap(path, cf.frames, ts, linktype=C.LINKTYPE_ETHERNET, nanosecond=nanosecond)


def received_sizes(proto: str, packets: list[bytes]) -> list[int]:
    """Sizes as gro.c's ``check_recv_pkts()`` counts them, up to (not including) the FIN.

    Only packets of the test flow count (gro.c's BPF filter: ethertype, TCP directly or
    after one 8-byte extension header / the IPv4 option block, dport 8000).
    ``data_len = pkt_size - total_hdr_len - tcp_opt_len - ip_ext_len``; a 60-byte IPv4
    frame uses ``tot_len`` (Ethernet padding).
    """
    b = Builder(proto)
    out = []
    for pkt in packets:
        if len(pkt) < b.total_hdr_len or struct.unpack_from("!H", pkt, 12)[0] != b.ethertype:
            continue
        ip_ext = 0
        ver = pkt[C.ETH_HLEN] >> 4
        if ver == 4:
            ip_ext = ((pkt[C.ETH_HLEN] & 0xF) - 5) * 4
        elif ver == 6 and pkt[C.ETH_HLEN + 6] != C.IPPROTO_TCP:
            ip_ext = MIN_EXTHDR_SIZE
        t = b.tcp_offset + ip_ext
        if t + 20 > len(pkt) or struct.unpack_from("!H", pkt, t + 2)[0] != DPORT:
            continue
        if pkt[t + 13] & C.TCP_FLAG_FIN:
            break
        tcp_ext = ((pkt[t + 12] >> 4) - 5) * 4
        n = len(pkt) - b.total_hdr_len - tcp_ext - ip_ext
        if len(pkt) == C.ETH_ZLEN and ver == 4:
            n = struct.unpack_from("!H", pkt, C.ETH_HLEN + 2)[0] - 40
        out.append(n)
    return out
