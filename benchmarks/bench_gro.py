"""Speed of the numba GRO engine alone, on synthetic traffic (no capture file needed).

Builds ``--packets`` rows of interleaved TCP bulk flows (IPv4 and IPv6, PSH every few
segments, pure ACKs, occasional sequence gaps and timestamp changes) directly as a
PACKET_SCHEMA Arrow table, then measures, after warming the JIT on a small table:

- ``prepare``: Arrow -> numpy extraction and per-packet derivations (bypass codes, exact
  same-flow classes, flow ids) - reported, not part of the engine figure;
- ``engine``: the kernels alone (``run_prepared``: held-entry table, NAPI polls) on the
  prepared arrays, for the ideal and the napi model; ``engine+assemble`` adds numbering
  the super-packets and packing the GroResult;
- ``reference``: the plain-Python model on the first ``--reference-packets`` rows, for the
  ratio.

Invariant checked in every run: GroResult.check_invariants (every packet in exactly one
super-packet, payload conserved) and fast == reference on the reference subset.

    python benchmarks/bench_gro.py --packets 1000000 [--out results.json]

Same-run comparison against another checkout of the engine (``--against DIR``, e.g. a
``git archive REV gropcap | tar -x -C DIR``): the table (synthetic, or ``--table`` an
Arrow IPC file of decoded packets) is written once, then fresh child processes alternate
between DIR and this checkout, ``--rounds`` times each, and report per model the first
``prepare`` of the process (large allocations fault their pages in), a second
``prepare``, the kernels alone (first run, best of three), a whole ``simulate`` (first
run after those, best of three), and the child's peak RSS; the
GroResults must be identical bit for bit (a digest of every array), else it fails.

    nice python benchmarks/bench_gro.py --against /tmp/old --packets 2000000 --rounds 3

Measured on the 2-core shared development machine (load ~4, so noisy), 1M packets, 64
flows: ideal engine 12-19 M packets/s (kernels alone), napi with 4 queues 3-5 M
packets/s, prepare (Arrow -> numpy, keys) ~1 M packets/s, reference ~25 k packets/s.
At ``abddb63`` (2026-11-30, after the preparation rewrite, docs/performance.md), same
table: prepare 9.5 M (ideal) / 8.3 M (napi) packets/s, kernels 17.2 M / 5.9 M,
kernels + assemble 8.3 M / 4.5 M, reference 38 k / 33 k.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gropcap.decode.schema import PACKET_SCHEMA  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.gro.engine import (  # noqa: E402
    BatchResult, EngineState, assemble, prepare, run_prepared, simulate,
)


def synthetic_table(n: int, flows: int = 64, seed: int = 1) -> pa.Table:
    """n frames of ``flows`` interleaved bulk TCP flows as a PACKET_SCHEMA table."""
    rng = np.random.default_rng(seed)
    fl = rng.integers(0, flows, n)
    v6 = (fl % 3) == 0
    mss = 1448
    kind = rng.random(n)
    payload = np.where(kind < 0.08, 0, mss).astype(np.int64)       # pure ACKs
    psh = (kind > 0.92) & (payload > 0)
    # per-flow sequence numbers: cumulative payload within each flow
    order = np.argsort(fl, kind="stable")
    seq = np.zeros(n, np.int64)
    pay_sorted = payload[order]
    fl_sorted = fl[order]
    cum = np.cumsum(pay_sorted) - pay_sorted
    starts = np.searchsorted(fl_sorted, np.arange(flows))
    base = np.zeros(flows, np.int64)
    base[:] = cum[np.minimum(starts, n - 1)]
    seq[order] = cum - base[fl_sorted]
    seq += (fl * 7919) % 1000
    gap = rng.random(n) < 0.002
    seq = (seq + np.where(gap, mss, 0)) & 0xFFFFFFFF
    tsval = (np.arange(n) // 2000).astype(np.int64)
    ip_hdr = np.where(v6, 40, 20)
    opt = np.zeros((n, 40), np.uint8)
    opt[:, 0] = 1
    opt[:, 1] = 1
    opt[:, 2] = 8
    opt[:, 3] = 10
    opt[:, 4:8] = tsval.astype(">u4").view(np.uint8).reshape(n, 4)
    tot = ip_hdr + 32 + payload
    wire = 14 + tot
    src = np.zeros((n, 16), np.uint8)
    dst = np.zeros((n, 16), np.uint8)
    src[~v6, 10:12] = 0xFF
    dst[~v6, 10:12] = 0xFF
    src[~v6, 12] = 10
    dst[~v6, 12] = 10
    src[~v6, 15] = (fl[~v6] + 1).astype(np.uint8)
    dst[~v6, 15] = 200
    src[v6, 0] = 0xFD
    dst[v6, 0] = 0xFD
    src[v6, 15] = (fl[v6] + 1).astype(np.uint8)
    dst[v6, 15] = 200
    ts = 1_000_000_000 + np.cumsum(rng.choice([300, 1000, 5000, 200_000], n,
                                              p=[0.6, 0.3, 0.09, 0.01]))
    vals = dict(
        ts_ns=ts, cap_len=wire, wire_len=wire, linktype=np.ones(n), eth_type=np.where(
            v6, 0x86DD, 0x0800), eth_src=np.full(n, 0x020000000001),
        eth_dst=np.full(n, 0x020000000002), dsa_port=np.full(n, -1),
        ip_version=np.where(v6, 6, 4), ip_offset=np.full(n, 14), ip_hdr_len=ip_hdr,
        ip_tot_len=tot, ip_proto=np.full(n, 6), ip_ttl=np.full(n, 64),
        ip_id=np.where(v6, 0, 0), ip_df=~v6, ip_csum_ok=np.ones(n, bool),
        l4_proto=np.full(n, 6), l4_offset=14 + ip_hdr, sport=10000 + fl,
        dport=np.full(n, 443), tcp_seq=seq, tcp_ack=np.full(n, 12345),
        tcp_flags=np.where(psh, 0x18, 0x10), tcp_doff=np.full(n, 8),
        tcp_window=np.full(n, 512), tcp_opt_len=np.full(n, 12), tcp_wscale=np.full(n, -1),
        tcp_has_ts=np.ones(n, bool), tcp_tsval=tsval, l4_csum_state=np.ones(n),
        payload_len=payload, encap_depth=np.zeros(n))
    arrays = []
    for f in PACKET_SCHEMA:
        t = f.type
        if f.name in ("ip_src", "ip_dst"):
            m = src if f.name == "ip_src" else dst
            arrays.append(pa.FixedSizeBinaryArray.from_buffers(
                t, n, [None, pa.py_buffer(np.ascontiguousarray(m).tobytes())]))
        elif f.name == "tcp_options":
            arrays.append(pa.FixedSizeBinaryArray.from_buffers(
                t, n, [None, pa.py_buffer(np.ascontiguousarray(opt).tobytes())]))
        elif pa.types.is_fixed_size_binary(t):
            arrays.append(pa.FixedSizeBinaryArray.from_buffers(
                t, n, [None, pa.py_buffer(bytes(n * t.byte_width))]))
        elif pa.types.is_dictionary(t):
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, np.int32)), pa.array(["eth/ip/tcp"])))
        elif f.name in vals:
            arrays.append(pa.array(np.asarray(vals[f.name]).astype(t.to_pandas_dtype())))
        else:
            arrays.append(pa.array(np.zeros(n, t.to_pandas_dtype())))
    return pa.Table.from_arrays(arrays, schema=PACKET_SCHEMA)


_CHILD = r"""
import hashlib, json, resource, sys, time
root, table_path, model = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
from gropcap.gro.config import GroConfig
from gropcap.gro import engine as E
cfg = GroConfig() if model == "ideal" else GroConfig(model="napi", queues=4)
table = feather.read_table(table_path, memory_map=False)
E.simulate(table.slice(0, 2000), cfg)                      # JIT warm (cache load)
out = {}
for name in ("prepare_first_s", "prepare_again_s"):
    cols = ts = None                      # the second call may reuse the first's memory
    st = E.EngineState.new(cfg)
    t0 = time.perf_counter()
    cols, ts = E.prepare(table, cfg, st)
    out[name] = time.perf_counter() - t0
ks = []
for _ in range(3):                        # fresh state each time, same prepared columns
    st2 = E.EngineState.new(cfg)
    st2.kernel = E._grow(st2.kernel, len(st.key_ids), max(len(st.loose_ids), len(st.key_ids)))
    t0 = time.perf_counter()
    E.run_prepared(cols, ts, cfg, st2, True)
    ks.append(time.perf_counter() - t0)
    del st2
out["kernels_first_s"], out["kernels_s"] = ks[0], min(ks)
del cols, ts, st
sims = []
for _ in range(3):
    res = None
    t0 = time.perf_counter()
    res = E.simulate(table, cfg)
    sims.append(time.perf_counter() - t0)
out["simulate_first_s"], out["simulate_s"] = sims[0], min(sims)
h = hashlib.sha256()
for f in res.__dataclass_fields__:
    a = np.ascontiguousarray(getattr(res, f))
    h.update(f.encode() + str(a.dtype).encode() + a.tobytes())
out["digest"] = h.hexdigest()
out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def against(old_root: str, table: pa.Table, rounds: int) -> dict:
    """Alternate fresh processes on ``old_root`` and this checkout (see module doc)."""
    import subprocess
    import tempfile

    import pyarrow.feather as feather

    new_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "table.arrow")
        feather.write_feather(table, path, compression="uncompressed")
        for model in ("ideal", "napi"):
            runs = {"old": [], "new": []}
            for _ in range(rounds):
                for tag, root in (("old", old_root), ("new", new_root)):
                    p = subprocess.run([sys.executable, "-c", _CHILD, root, path, model],
                                       capture_output=True, text=True, check=True)
                    runs[tag].append(json.loads(p.stdout.strip().splitlines()[-1]))
            digests = {r["digest"] for r in runs["old"] + runs["new"]}
            assert len(digests) == 1, f"{model}: old and new GroResults differ"
            row = {}
            for k in ("prepare_first_s", "prepare_again_s", "kernels_first_s", "kernels_s",
                      "simulate_first_s", "simulate_s", "maxrss_mb"):
                o = min(r[k] for r in runs["old"])
                n = min(r[k] for r in runs["new"])
                row[k] = {"old": round(o, 3), "new": round(n, 3),
                          "old/new": round(o / n, 2) if n else None}
            row["simulate_pps"] = {t: round(table.num_rows / min(r["simulate_s"]
                                                                 for r in runs[t]))
                                   for t in runs}
            res[model] = row
    return res


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--reference-packets", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON here (e.g. "
                                   "benchmarks/results/gro-$(git rev-parse --short HEAD).json)")
    ap.add_argument("--against", metavar="DIR",
                    help="compare with the engine of another checkout (same run)")
    ap.add_argument("--table", help="with --against: an Arrow IPC file of decoded packets "
                                    "instead of the synthetic table")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    from gropcap.gro import reference

    t0 = time.perf_counter()
    if args.against:
        import pyarrow.feather as feather
        table = (feather.read_table(args.table) if args.table
                 else synthetic_table(args.packets))
        out = {"packets": table.num_rows, "table": args.table or "synthetic",
               "against": args.against, "rounds": args.rounds,
               "compare": against(args.against, table, args.rounds)}
        text = json.dumps(out, indent=2)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        return out
    table = synthetic_table(args.packets)
    build_s = time.perf_counter() - t0
    payload = table.column("payload_len").to_numpy()
    configs = {"ideal": GroConfig(), "napi": GroConfig(model="napi", queues=4)}
    # warm the JIT (compiles or loads the on-disk cache) on a small table
    small = table.slice(0, 2000)
    for cfg in configs.values():
        simulate(small, cfg)
    out = {"packets": args.packets, "build_s": round(build_s, 3)}
    for name, cfg in configs.items():
        t1 = time.perf_counter()
        state = EngineState.new(cfg)
        cols, ts = prepare(table, cfg, state)
        prep_s = time.perf_counter() - t1
        eng = []
        asm = []
        for _ in range(args.repeat):
            st = EngineState.new(cfg)
            st.key_ids, st.loose_ids, st.flow_ids = state.key_ids, state.loose_ids, \
                state.flow_ids
            from gropcap.gro.engine import _grow
            st.kernel = _grow(st.kernel, len(st.key_ids), len(st.key_ids))
            st.row_base = len(cols.row)
            t1 = time.perf_counter()
            verdicts, segs, polls = run_prepared(cols, ts, cfg, st, True)
            eng.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa
            part = BatchResult(
                row_start=0, flow_id=cols.flow, rx_queue=cols.queue.astype(np.uint16),
                p_row=cat(verdicts["row"]), p_reason=cat(verdicts["reason"]),
                p_inst=cat(verdicts["inst"]), p_poll=cat(verdicts["poll"]),
                segs={f: cat([x[f] for x in segs]) for f in segs[0]}, poll_base=0,
                poll_time=cat([p[1] for p in polls]), poll_queue=cat([p[2] for p in polls]))
            res = assemble([part], cfg)
            asm.append(time.perf_counter() - t1 + eng[-1])
        res.check_invariants(payload)
        assert res.equals(simulate(table, cfg)), "run_prepared path != simulate"
        eng_s = min(eng)
        # reference on a prefix, fast on the same prefix: equal and timed
        sub = table.slice(0, args.reference_packets)
        t1 = time.perf_counter()
        ref = reference.simulate(sub, cfg)
        ref_s = time.perf_counter() - t1
        t1 = time.perf_counter()
        fast_sub = simulate(sub, cfg)
        fast_sub_s = time.perf_counter() - t1
        assert fast_sub.equals(ref), f"fast != reference ({name})"
        out[name] = {
            "prepare_s": round(prep_s, 3),
            "prepare_pps": round(args.packets / prep_s),
            "engine_s": round(eng_s, 4),
            "engine_pps": round(args.packets / eng_s),
            "engine_assemble_pps": round(args.packets / min(asm)),
            "simulate_subset_pps": round(args.reference_packets / fast_sub_s),
            "reference_pps": round(args.reference_packets / ref_s),
            "engine_vs_reference": round((args.packets / eng_s)
                                         / (args.reference_packets / ref_s), 1),
            "superpackets": int(res.num_superpackets),
            "aggregation": round(args.packets / res.num_superpackets, 2),
        }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return out


if __name__ == "__main__":
    main()
