"""Build the benchmark capture: millions of TCP packets, snaplen 128, deterministic.

Thousands of TCP flows over IPv4 and IPv6, a share encapsulated (VXLAN over IPv4, GRE over
IPv4), each a bulk sender plus its reverse pure ACKs: SYN at the start, MSS-sized data
segments with the Linux NOP,NOP,TS option block (10% of flows without timestamps), PSH
every few segments, rare retransmissions and CWR, ECT(0) on some flows, IPv4 IDs
incrementing per flow, header checksums valid, pure ACKs/SYNs with valid TCP checksums
(data segments are cut by the snap length, so theirs cannot be verified anyway). Packets
of different flows interleave in bursts, as NIC RSS and host schedulers produce them.

Written with numpy in chunks (bounded memory), nanosecond pcap. The same arguments give
the same bytes.

    python benchmarks/make_bench_capture.py /tmp/bench.pcap --packets 4000000 --flows 8000
    python benchmarks/make_bench_capture.py /tmp/tcp.pcap --kinds v4,v6   # no tunnels
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import struct
import sys
import time

import numpy as np

SNAPLEN = 128
MSS4, MSS6 = 1448, 1428
KINDS = ("v4", "v6", "vxlan", "gre")
KIND_SHARE = (0.60, 0.25, 0.10, 0.05)
TS_OPT = b"\x01\x01\x08\x0a" + bytes(8)                       # NOP NOP TS(tsval, tsecr)
NOTS_OPT = b""
SYN_OPT = b"\x02\x04\x05\xb4\x01\x03\x03\x07\x01\x01\x04\x02"  # MSS, NOP WS 7, NOP NOP SACKOK
ETH_SRC, ETH_DST = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def _csum(data: bytes) -> int:
    if len(data) & 1:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def _ipv4(src, dst, proto, plen, tos=0, ident=0):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + plen, ident, 0x4000, 64, proto, 0,
                    ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return h[:10] + struct.pack("!H", _csum(h)) + h[12:]


def _ipv6(src, dst, nh, plen, tc=0, flow=0):
    return struct.pack("!IHBB", (6 << 28) | (tc << 20) | flow, plen, nh, 64) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed


def _tcp(sport, dport, flags, opts):
    doff = 5 + len(opts) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, 0, 0, doff << 4, flags, 502, 0, 0) + opts


def template(f: int, kind: str, reverse: bool, opts: bytes, payload: int, tos: int):
    """One flow direction's frame header; returns (bytes, wire_len, ip_off, tcp_off, v6)."""
    a4, b4 = f"10.{(f >> 8) & 255}.{f & 255}.1", f"10.{128 + ((f >> 8) & 127)}.{f & 255}.2"
    # (a group holds 16 bits: flows from 65 536 on take two, the ones before stay as
    # they were)
    net = f"{f:x}" if f < 0x10000 else f"{f >> 16:x}:{f & 0xFFFF:x}"
    a6, b6 = f"2001:db8:{net}::1", f"2001:db8:{net}::2"
    sport, dport = 32768 + f % 28000, (5201 if f % 3 else 443)
    if reverse:
        a4, b4, a6, b6, sport, dport = b4, a4, b6, a6, dport, sport
    th = _tcp(sport, dport, 0x10, opts)
    v6 = kind == "v6"
    inner = (_ipv6(a6, b6, 6, len(th) + payload, tos, f & 0xFFFFF) if v6 else
             _ipv4(a4, b4, 6, len(th) + payload, tos))
    inner_len = len(inner) + len(th) + payload
    if kind in ("v4", "v6"):
        hdr = ETH_DST + ETH_SRC + (b"\x86\xdd" if v6 else b"\x08\x00") + inner + th
        return hdr, len(hdr) + payload, 14, 14 + len(inner), v6
    o_src, o_dst = ("192.0.2.1", "192.0.2.2") if not reverse else ("192.0.2.2", "192.0.2.1")
    if kind == "vxlan":
        ieth = ETH_DST + ETH_SRC + b"\x08\x00"
        udp_len = 8 + 8 + 14 + inner_len
        udp = struct.pack("!HHHH", 49152 + f % 16000, 4789, udp_len, 0)
        vx = struct.pack("!II", 0x08000000, (100 + f % 1000) << 8)
        outer = _ipv4(o_src, o_dst, 17, udp_len)
        hdr = ETH_DST + ETH_SRC + b"\x08\x00" + outer + udp + vx + ieth + inner + th
        ip_off = 14 + 20 + 8 + 8 + 14
    else:
        gre = struct.pack("!HH", 0, 0x0800)
        outer = _ipv4(o_src, o_dst, 47, 4 + inner_len)
        hdr = ETH_DST + ETH_SRC + b"\x08\x00" + outer + gre + inner + th
        ip_off = 14 + 20 + 4
    return hdr, len(hdr) + payload, ip_off, ip_off + len(inner), v6


class Flows:
    """Per flow-direction templates, as arrays indexed by ``2 * flow + reverse``."""

    def __init__(self, nflows: int, rng: np.random.Generator, kinds=KINDS):
        # (the shares of the kinds asked for, in KIND_SHARE's proportions)
        share = np.array([KIND_SHARE[i] if k in kinds else 0.0
                          for i, k in enumerate(KINDS)])
        self.kind = rng.choice(len(KINDS), size=nflows, p=share / share.sum())
        self.has_ts = rng.random(nflows) < 0.9
        self.ect = rng.random(nflows) < 0.05
        self.psh_period = rng.integers(4, 33, size=nflows)
        self.isn = rng.integers(0, 2**32, size=nflows, dtype=np.uint64)
        self.ts0 = rng.integers(0, 2**31, size=nflows, dtype=np.uint64)
        n2 = 2 * nflows
        self.tmpl = np.zeros((n2, SNAPLEN), np.uint8)
        self.syn = np.zeros((n2, SNAPLEN), np.uint8)
        self.hlen = np.zeros(n2, np.int64)
        self.wire = np.zeros(n2, np.int64)
        self.syn_hlen = np.zeros(n2, np.int64)
        self.ip_off = np.zeros(n2, np.int64)
        self.tcp_off = np.zeros(n2, np.int64)
        self.v6 = np.zeros(n2, bool)
        for f in range(nflows):
            kind = KINDS[self.kind[f]]
            opts = TS_OPT if self.has_ts[f] else NOTS_OPT
            mss = MSS6 if kind == "v6" else MSS4
            tos = 0x02 if self.ect[f] else 0
            for rev in (0, 1):
                t = 2 * f + rev
                hdr, wire, ipo, tco, v6 = template(f, kind, bool(rev), opts,
                                                   0 if rev else mss, tos)
                self.tmpl[t, :len(hdr)] = np.frombuffer(hdr, np.uint8)
                self.hlen[t], self.wire[t] = len(hdr), wire
                self.ip_off[t], self.tcp_off[t], self.v6[t] = ipo, tco, v6
                shdr, _w, _i, _t, _v = template(f, kind, bool(rev), SYN_OPT, 0, tos)
                self.syn[t, :len(shdr)] = np.frombuffer(shdr, np.uint8)
                self.syn_hlen[t] = len(shdr)


def _put32(buf, pos, val):
    val = val.astype(np.uint64)
    for k in range(4):
        buf[pos + k] = ((val >> np.uint64(24 - 8 * k)) & np.uint64(0xFF)).astype(np.uint8)


def _put16(buf, pos, val):
    val = val.astype(np.int64)
    buf[pos] = (val >> 8) & 0xFF
    buf[pos + 1] = val & 0xFF


def _sum16(buf, start, nbytes_max, nbytes):
    """Unfolded one's-complement sums of buf[start[i] : start[i] + nbytes[i]] (even)."""
    k = np.arange(0, nbytes_max, 2)
    last = len(buf) - 1
    hi = buf[np.minimum(start[:, None] + k, last)].astype(np.int64)
    lo = buf[np.minimum(start[:, None] + k + 1, last)].astype(np.int64)
    w = (hi << 8) | lo
    w[k[None, :] >= nbytes[:, None]] = 0
    return w.sum(axis=1)


def _fold(s):
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def build(path: str, packets: int, nflows: int, seed: int, chunk: int = 65536,
          kinds=KINDS) -> dict:
    """Write the capture; returns a small description (counts per kind, bytes).
    ``kinds``: the flows' kinds, a subset of :data:`KINDS` (all: the default mix)."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds: {sorted(unknown) or 'none'}; known: {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    fl = Flows(nflows, rng, tuple(kinds))
    counter = np.zeros(nflows, np.int64)          # packets emitted per flow so far
    t_ns = 1_700_000_000 * 10**9
    written = 0
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, SNAPLEN, 1))
        while written < packets:
            m = min(chunk, packets - written)
            # bursts of 1..8 packets per flow, flows drawn with a skew (some are heavier)
            nb = m // 2 + 8
            bflow = (rng.zipf(1.3, size=nb) - 1 + rng.integers(0, nflows, size=nb)) % nflows
            blen = rng.integers(1, 9, size=nb)
            f = np.repeat(bflow, blen)[:m]
            # per-flow rank within the chunk, added to the running counter
            order = np.argsort(f, kind="stable")
            fs = f[order]
            first = np.r_[0, np.flatnonzero(np.diff(fs)) + 1]
            rank_sorted = np.arange(m) - np.repeat(first, np.diff(np.r_[first, m]))
            rank = np.empty(m, np.int64)
            rank[order] = rank_sorted
            k = counter[f] + rank
            np.add.at(counter, f, 1)
            rev = (k % 3 == 1).astype(np.int64)          # every third packet: the reverse ACK
            t = 2 * f + rev
            ndata = k - (k + 1) // 3                     # forward packets before this one
            syn = k < 2                                  # SYN, then the SYN-ACK
            hlen = np.where(syn, fl.syn_hlen[t], fl.hlen[t])
            wire = np.where(syn, hlen, fl.wire[t])
            cap = np.minimum(wire, SNAPLEN)
            rec = 16 + cap
            off = np.r_[0, np.cumsum(rec)[:-1]]
            buf = np.zeros(int(rec.sum()), np.uint8)
            gaps = rng.exponential(250.0, size=m).astype(np.int64) + 1
            ts = t_ns + np.cumsum(gaps)
            t_ns = int(ts[-1])
            hdr = np.zeros((m, 4), np.uint32)
            hdr[:, 0] = ts // 10**9
            hdr[:, 1] = ts % 10**9
            hdr[:, 2] = cap
            hdr[:, 3] = wire
            buf[off[:, None] + np.arange(16)] = hdr.view(np.uint8).reshape(m, 16)
            col = np.arange(SNAPLEN)
            valid = col[None, :] < cap[:, None]
            src = np.where(syn[:, None], fl.syn[t], fl.tmpl[t])
            buf[((off + 16)[:, None] + col)[valid]] = src[valid]
            fr = off + 16
            tcp = fr + fl.tcp_off[t]
            ip = fr + fl.ip_off[t]
            mss = np.where(fl.v6[t], MSS6, MSS4).astype(np.uint64)
            isn = fl.isn[f]
            seq = (isn + ndata.astype(np.uint64) * mss) & np.uint64(0xFFFFFFFF)
            retrans = (rev == 0) & (rng.random(m) < 0.001) & (ndata > 4)
            seq = np.where(retrans, (seq - np.uint64(3) * mss) & np.uint64(0xFFFFFFFF), seq)
            flags = np.full(m, 0x10, np.int64)
            flags[(rev == 0) & (ndata % fl.psh_period[f] == 0)] |= 0x08
            flags[(rev == 0) & (rng.random(m) < 0.0005)] |= 0x80
            flags[syn & (k == 0)] = 0x02
            flags[syn & (k == 1)] = 0x12
            data_seq = np.where(rev == 1, isn ^ np.uint64(0x5A5A5A5A), seq)
            _put32(buf, tcp + 4, data_seq)
            ackv = np.where(rev == 1, seq, np.uint64(0))
            _put32(buf, tcp + 8, np.where(k == 0, np.uint64(0), ackv))
            buf[tcp + 13] = flags.astype(np.uint8)
            has_ts = fl.has_ts[f] & ~syn
            tsv = (fl.ts0[f] + (ts // 1_000_000).astype(np.uint64)) & np.uint64(0xFFFFFFFF)
            _put32(buf, (tcp + 24)[has_ts], tsv[has_ts])
            _put32(buf, (tcp + 28)[has_ts], (tsv[has_ts] - np.uint64(3)) & np.uint64(0xFFFFFFFF))
            # inner IPv4: incrementing ID per flow direction, then the header checksum
            v4 = ~fl.v6[t]
            ipv4 = ip[v4]
            _put16(buf, ipv4 + 4, (k[v4] * 7 + f[v4]) & 0xFFFF)
            if syn.any():           # SYN lengths differ from the data template's
                sv4 = v4 & syn
                _put16(buf, ip[sv4] + 2, wire[sv4] - fl.ip_off[t][sv4])
                sv6 = ~v4 & syn
                _put16(buf, ip[sv6] + 4, wire[sv6] - fl.ip_off[t][sv6] - 40)
            buf[ipv4 + 10] = 0
            buf[ipv4 + 11] = 0
            _put16(buf, ipv4 + 10, _fold(_sum16(buf, ipv4, 20, np.full(len(ipv4), 20))))
            # TCP checksum on fully captured segments (pure ACKs and SYNs)
            full = cap == wire
            tf, ipf, v6f = tcp[full], ip[full], fl.v6[t][full]
            tlen = (fr[full] + wire[full]) - tf
            ps = np.where(v6f, _sum16(buf, ipf + 8, 32, np.full(len(ipf), 32)),
                          _sum16(buf, ipf + 12, 8, np.full(len(ipf), 8))) + 6 + tlen
            buf[tf + 16] = 0
            buf[tf + 17] = 0
            _put16(buf, tf + 16, _fold(ps + _sum16(buf, tf, 64, tlen)))
            out.write(buf.tobytes())
            written += m
    return {"packets": packets, "flows": nflows, "seed": seed, "snaplen": SNAPLEN,
            "bytes": os.path.getsize(path),
            "flows_by_kind": {KINDS[i]: int((fl.kind == i).sum()) for i in range(len(KINDS))}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--packets", type=int, default=4_000_000)
    ap.add_argument("--flows", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the flows' kinds, comma-separated (v4,v6: plain TCP only, what "
                         "the single pass covers)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        desc = build(a.path, a.packets, a.flows, a.seed, kinds=a.kinds.split(","))
    except ValueError as e:
        ap.error(str(e))
    print(f"{a.path}: {desc} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
