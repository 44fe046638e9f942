"""How fast one fused pass could be: a floor for issue 14's 5 M packets/s, measured.

``docs/performance.md`` ("What 5 M packets/s would take", session 34) argues that 5 M
packets/s needs one numba pass per batch that decodes only what GRO reads and runs both
models record by record, instead of today's dozen passes over materialised columns with
Python between them, and estimates such a pass at 150-180 ns a record. This benchmark
measures that estimate instead of guessing it, on the traffic the estimate is about.

``fused_pass`` is a skeleton of that pass, for pcap files of Ethernet / IPv4 (no
options) / TCP only, kernel 6.18, the default receive context (one RX queue, Toeplitz
RSS, budget 64, polls cut at 50 us gaps, no gro_flush_timeout): per record it reads the
pcap header, the Ethernet, IPv4 and TCP headers straight from the mapped file, finds the
flow's entry in an open-addressing table, and runs the ideal model (one unlimited table)
and the napi model (polls, the 8 x 8 GRO table with eviction, a flush at each poll end)
with the tcp_gro_receive and inet_gro_flush checks of those headers (flags word, ack,
options, TTL, TOS, DF, the IP ID with its fixed-ID bit, size, sequence), counting each
model's super-packets and each flow's packets. Any other frame goes up alone, as a
bypass. It is not gropcap's engine and nothing uses it: no other link type, layer or
kernel, no per-packet output. What it gives is the cost of the work itself.

Its kernels are compiled in each process (no on-disk cache: a benchmark script is loaded
under several module names, and numba's cache would tie the machine code to one of them).
The benchmark runs it over a capture and reports ns a record, next to ``gropcap analyze
--format json`` measured in the same run (a warm process, the same capture), and checks
that both models' super-packet counts equal the engine's: the skeleton does the engine's
work on this traffic, not less.

    python benchmarks/bench_fused_floor.py /tmp/real3m.pcap --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numba
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# the record scan's own field readers (``be``: big-endian), inlined into the pass
from gropcap.capture.fast import _u16, _u32  # noqa: E402

SLOTS = 1 << 16             # flow table slots (open addressing); at most half used
BUCKETS, PER_BUCKET = 8, 8  # GRO_HASH_BUCKETS, MAX_GRO_SKBS
BUDGET = 64
GAP_NS = 50_000
LIMIT = 65536               # gro_ipv4_max_size
FIN, SYN, RST, PSH, URG, CWR = 0x01, 0x02, 0x04, 0x08, 0x20, 0x80
# flow entry fields, one int64 row per flow and model
(F_FIRST, F_COUNT, F_LEN, F_GROLEN, F_SEQ, F_ACK, F_WORD, F_TTL, F_TOS, F_DF, F_ID,
 F_FIXED, F_MSS, F_B, F_O0) = range(15)
F_N = F_O0 + 5


@numba.njit(nogil=True, inline="always")
def _word(b, p, n):
    """Up to 8 bytes at p as one big-endian word, zero-padded past n bytes."""
    w = np.uint64(0)
    for j in range(8):
        w <<= np.uint64(8)
        if j < n:
            w |= np.uint64(b[p + j])
    return w


@numba.njit(nogil=True, inline="always")
def _pair(e, m, k, flags, ack, word, ttl, tos, df, ipid, opt, ln, seq):
    """tcp_gro_receive + inet_gro_flush (6.18, one IPv4 header) of a packet against the
    held entry of flow k in model m: True when it must not merge."""
    bad = (flags & CWR) != 0
    bad |= ((word ^ e[m, k, F_WORD]) & ~np.int64((FIN | PSH) << 16)) != 0
    bad |= ack != e[m, k, F_ACK]
    for w in range(5):
        bad |= opt[w] != e[m, k, F_O0 + w]
    bad |= ttl != e[m, k, F_TTL] or tos != e[m, k, F_TOS] or df != e[m, k, F_DF]
    count = e[m, k, F_COUNT]
    off = (ipid - e[m, k, F_ID]) & 0xFFFF
    if count == 1 and off == 0:
        e[m, k, F_FIXED] = 1
    bad |= off != ((count * (1 - e[m, k, F_FIXED])) & 0xFFFF)
    bad |= ln == 0 or ln > e[m, k, F_MSS]
    bad |= ((e[m, k, F_SEQ] + e[m, k, F_GROLEN]) & 0xFFFFFFFF) != seq
    bad |= e[m, k, F_LEN] + ln >= LIMIT
    return bad


@numba.njit(nogil=True, inline="always")
def _hold(e, m, k, flags, ack, word, ttl, tos, df, ipid, opt, ln, seq, plen, i, b):
    e[m, k, F_FIRST] = i
    e[m, k, F_COUNT] = 1
    e[m, k, F_LEN] = plen
    e[m, k, F_GROLEN] = ln
    e[m, k, F_SEQ] = seq
    e[m, k, F_ACK] = ack
    e[m, k, F_WORD] = word
    e[m, k, F_TTL] = ttl
    e[m, k, F_TOS] = tos
    e[m, k, F_DF] = df
    e[m, k, F_ID] = ipid
    e[m, k, F_FIXED] = 0
    e[m, k, F_MSS] = ln
    e[m, k, F_B] = b
    for w in range(5):
        e[m, k, F_O0 + w] = opt[w]


@numba.njit(nogil=True, inline="always")
def _unlink(tbl, tcnt, b, k):
    n = tcnt[b]
    pos = 0
    while pos < n and tbl[b, pos] != k:
        pos += 1
    for x in range(pos, n - 1):
        tbl[b, x] = tbl[b, x + 1]
    tcnt[b] = n - 1


@numba.njit(nogil=True)
def fused_pass(buf, pos, end, be, frac_ns, rss, keys, e, tbl, tcnt, counts, flow_pkts):
    """Every record of the pcap body ``buf[pos:end]`` through both models; returns the
    records read (negated when the flow table filled up). ``counts[m]``: super-packets
    of model m (0 ideal, 1 napi);
    ``counts[2]``: bypass frames; ``counts[3]``: flows; ``flow_pkts[k]``: frames of
    flow k (every frame but the bypasses)."""
    n = 0
    nflows = counts[3]
    poll_n = 0
    last = np.int64(-1)
    arr = np.int64(-1)
    opt = np.zeros(5, np.int64)
    while end - pos >= 16:
        ts = _u32(buf, pos, be) * 1_000_000_000 + _u32(buf, pos + 4, be) * frac_ns
        incl = _u32(buf, pos + 8, be)
        wire = _u32(buf, pos + 12, be)
        p = pos + 16
        pos = p + incl
        if pos > end:
            break
        n += 1
        arr = max(arr, ts)
        # the napi model's poll: the packet joins the current one while it arrives
        # within the gap and the budget is not spent (__napi_poll); else the poll ended
        # and, with gro_flush_timeout 0, napi_complete_done flushed everything held
        # (napi_gro_flush; at a full budget with HZ < 1000, __napi_poll did)
        if poll_n == 0 or poll_n >= BUDGET or arr > last + GAP_NS:
            for b in range(BUCKETS):
                counts[1] += tcnt[b]
                for x in range(tcnt[b]):
                    e[1, tbl[b, x], F_FIRST] = -1
                tcnt[b] = 0
            poll_n = 0
        poll_n += 1
        last = arr
        # --- Ethernet / IPv4 / TCP, else a bypass frame that both models deliver:
        # inet_gro_receive leaves at once for IP options (*(u8 *)iph != 0x45) and for
        # a fragment (ip_is_fragment), held entries untouched
        if incl < 54 or buf[p + 12] != 0x08 or buf[p + 13] != 0 or buf[p + 14] != 0x45 \
                or buf[p + 23] != 6 or (_u16(buf, p + 20, True) & 0x3FFF) != 0:
            counts[0] += 1
            counts[1] += 1
            counts[2] += 1
            continue
        ip = p + 14
        tot = _u16(buf, ip + 2, True)
        th = ip + 20
        doff = np.int64(buf[th + 12] >> 4) * 4
        if doff < 20 or 34 + doff > incl or tot < 20 + doff:
            counts[0] += 1
            counts[1] += 1
            counts[2] += 1
            continue
        tos = np.int64(buf[ip + 1])
        ipid = _u16(buf, ip + 4, True)
        df = (_u16(buf, ip + 6, True) >> 14) & 1
        ttl = np.int64(buf[ip + 8])
        seq = _u32(buf, th + 4, True)
        ack = _u32(buf, th + 8, True)
        word = _u32(buf, th + 12, True)          # doff, flags, window: tcp_flag_word
        flags = word >> 16 & 0x1FF
        olen = doff - 20
        for w in range(5):
            opt[w] = np.int64(_word(buf, th + 20 + 8 * w, olen - 8 * w))
        ln = wire - 14 - 20 - doff          # skb_gro_len at TCP
        plen = wire - 14
        # inet_gro_receive: tot_len != skb_gro_len (padding) sets the skb's own flush
        short = tot != plen
        # --- the flow: the MAC header (dev_gro_receive's same_flow), the addresses
        # (inet_gro_receive) and the ports (tcp_gro_lookup), in an open-addressing table
        k0 = (_u32(buf, p, True) << 16) | _u16(buf, p + 4, True)
        k1 = (_u32(buf, p + 6, True) << 16) | _u16(buf, p + 10, True)
        k2 = (_u32(buf, ip + 12, True) << 32) | _u32(buf, ip + 16, True)
        k3 = _u32(buf, th, True)
        h = np.uint64(k0 ^ k1 * 31 ^ k2 * 1000003 ^ k3 * 0x9E3779B1)
        h ^= h >> np.uint64(29)
        slot = np.int64(h & np.uint64(SLOTS - 1))
        while keys[slot, 0] != -1 and (keys[slot, 0] != k0 or keys[slot, 1] != k1 or
                                       keys[slot, 2] != k2 or keys[slot, 3] != k3):
            slot = (slot + 1) & (SLOTS - 1)
        if keys[slot, 0] == -1:
            if nflows == SLOTS // 2:
                return -n                   # the table is full: the caller refuses
            keys[slot, 0] = k0
            keys[slot, 1] = k1
            keys[slot, 2] = k2
            keys[slot, 3] = k3
            # the RSS hash of the 4-tuple (Toeplitz, by byte tables): the GRO bucket
            hv = np.uint32(0)
            for j in range(12):
                hv ^= rss[j, buf[ip + 12 + j] if j < 8 else buf[th + j - 8]]
            keys[slot, 4] = np.int64(hv & np.uint32(BUCKETS - 1))
            keys[slot, 5] = nflows
            nflows += 1
        k = keys[slot, 5]
        flow_pkts[k] += 1
        for m in range(2):
            held = e[m, k, F_FIRST] >= 0
            if held and not _pair(e, m, k, flags, ack, word, ttl, tos, df, ipid, opt, ln,
                                  seq) and not short:
                # skb_gro_receive merged it; out_check_final: pp when len < mss or
                # one of URG, PSH, RST, SYN, FIN (no RST or SYN is ever merged)
                e[m, k, F_COUNT] += 1
                e[m, k, F_LEN] += ln
                e[m, k, F_GROLEN] += ln
                if (flags & (FIN | PSH | URG)) != 0 or ln < e[m, k, F_MSS]:
                    counts[m] += 1                  # pp: p goes up now
                    e[m, k, F_FIRST] = -1
                    if m == 1:
                        _unlink(tbl, tcnt, e[1, k, F_B], k)
                continue
            if held:
                counts[m] += 1                      # p completed, the packet not merged
                e[m, k, F_FIRST] = -1
                if m == 1:
                    _unlink(tbl, tcnt, e[1, k, F_B], k)
            # tcp_gro_receive with nothing held (mss 1), or the skb's own flush:
            # dev_gro_receive delivers it at once, else holds it as a new entry
            if (flags & (SYN | RST | URG | FIN | PSH)) != 0 or ln < 1 or short:
                counts[m] += 1
                continue
            b = keys[slot, 4]
            if m == 1:
                if tcnt[b] >= PER_BUCKET:           # gro_flush_oldest
                    old = tbl[b, 0]
                    counts[1] += 1
                    e[1, old, F_FIRST] = -1
                    _unlink(tbl, tcnt, b, old)
                tbl[b, tcnt[b]] = k
                tcnt[b] += 1
            _hold(e, m, k, flags, ack, word, ttl, tos, df, ipid, opt, ln, seq, plen, n, b)
    # the end of the capture: everything held goes up (the ideal model's only flush)
    for m in range(2):
        for k in range(nflows):
            if e[m, k, F_FIRST] >= 0:
                counts[m] += 1
                e[m, k, F_FIRST] = -1
    counts[3] = nflows
    return n


def run_fused(path: str) -> dict:
    """One fused pass over ``path``: records, super-packets per model, bypass frames,
    flows, CPU seconds."""
    from gropcap.gro.config import GroConfig
    from gropcap.gro.rss import toeplitz_table
    with open(path, "rb") as fh:
        head = fh.read(24)
    magic = head[:4]
    le = magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    if len(head) < 24 or not le and magic not in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        raise SystemExit(f"{path}: not a pcap file (a pcapng file is not covered)")
    linktype = int.from_bytes(head[20:24], "little" if le else "big")
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}; only Ethernet (1) is covered")
    buf = np.memmap(path, np.uint8, mode="r")       # the page cache, mapped
    rss = toeplitz_table(bytes(GroConfig().rss_key).ljust(40, b"\0"))
    keys = np.full((SLOTS, 6), -1, np.int64)
    e = np.full((2, SLOTS // 2, F_N), -1, np.int64)
    tbl = np.full((BUCKETS, PER_BUCKET), -1, np.int64)
    tcnt = np.zeros(BUCKETS, np.int64)
    counts = np.zeros(4, np.int64)
    flow_pkts = np.zeros(SLOTS // 2, np.int64)
    c0 = time.process_time()
    n = fused_pass(buf, 24, len(buf), not le, 1 if nano else 1000, rss, keys, e, tbl, tcnt,
                   counts, flow_pkts)
    cpu = time.process_time() - c0
    del buf
    if n < 0:
        raise SystemExit(f"{path}: more than {SLOTS // 2} flows; the skeleton stops there")
    return {"records": int(n), "ideal_superpackets": int(counts[0]),
            "napi_superpackets": int(counts[1]), "bypass": int(counts[2]),
            "flows": int(counts[3]), "flow_packets": int(flow_pkts.sum()),
            "cpu_seconds": cpu}


def run_digest(path: str) -> float:
    """CPU seconds of the capture's digest over the mapped file (``capture.fingerprint``,
    what every run computes on a helper thread, from the scan's mapped windows): a
    complete single pass would pay it too."""
    from gropcap.capture import fingerprint
    buf = np.memmap(path, np.uint8, mode="r")
    c0 = time.process_time()
    h = fingerprint.new()
    for lo in range(0, len(buf), 1 << 24):
        h.update(memoryview(buf[lo:lo + (1 << 24)]))
    cpu = time.process_time() - c0
    del buf
    return cpu


def run_engine(path: str, engine: str = "fast") -> dict:
    """``gropcap analyze --format json --threads 1`` in this (warm) process: super-packets
    per model and CPU seconds. ``engine="reference"``: the plain-Python decoder and
    models (the same counts; nothing to compile)."""
    from gropcap.gro.config import GroConfig
    from gropcap.report.summary import report_dict
    from gropcap.run.core import analyze_run
    c0 = time.process_time()
    r = analyze_run([path], GroConfig(), threads=1, engine=engine, decoder=engine)
    doc = report_dict(r)
    cpu = time.process_time() - c0
    return {"ideal_superpackets": doc["models"]["ideal"]["superpackets_out"],
            "napi_superpackets": doc["models"]["napi"]["superpackets_out"],
            "records": doc["models"]["napi"]["packets_in"], "cpu_seconds": cpu}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="result JSON (default: print only)")
    args = ap.parse_args(argv)
    from gropcap.__main__ import arrow_pool, tune_malloc
    tune_malloc()
    arrow_pool()
    fused, engine, digest = [], [], []
    for r in range(args.rounds + 1):            # the first round warms both up
        f, g, d = run_fused(args.capture), run_engine(args.capture), run_digest(args.capture)
        if r:
            fused.append(f)
            engine.append(g)
            digest.append(d)
    f, g = fused[0], engine[0]
    same = all(f[k] == g[k] for k in ("records", "ideal_superpackets", "napi_superpackets"))
    fcpu = min(x["cpu_seconds"] for x in fused)
    gcpu = min(x["cpu_seconds"] for x in engine)
    res = {"capture": os.path.abspath(args.capture), "records": f["records"],
           "fused": f, "engine": g, "same_superpackets": same,
           "fused_ns_per_record": fcpu / f["records"] * 1e9,
           "engine_ns_per_record": gcpu / f["records"] * 1e9,
           "fused_pps": f["records"] / fcpu, "engine_pps": f["records"] / gcpu,
           "fused_cpu": [round(x["cpu_seconds"], 4) for x in fused],
           "engine_cpu": [round(x["cpu_seconds"], 4) for x in engine],
           "digest_ns_per_record": min(digest) / f["records"] * 1e9,
           "digest_cpu": [round(x, 4) for x in digest]}
    print(f"fused pass: {res['fused_ns_per_record']:6.1f} ns a record "
          f"({res['fused_pps'] / 1e6:.2f} M packets/s), both models")
    print(f"digest:     {res['digest_ns_per_record']:6.1f} ns a record "
          f"(XXH3-128 of the file, on a helper thread in a run)")
    print(f"engine:     {res['engine_ns_per_record']:6.1f} ns a record "
          f"({res['engine_pps'] / 1e6:.2f} M packets/s), analyze --format json, warm")
    print(f"super-packets: ideal {f['ideal_superpackets']} / {g['ideal_superpackets']}, "
          f"napi {f['napi_superpackets']} / {g['napi_superpackets']} (fused / engine): "
          + ("equal" if same else "DIFFERENT"))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
