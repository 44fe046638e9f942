#!/usr/bin/env python3
"""Memory per flow of the flow tables: ``assign_flow_ids`` and the GRO engines' state.

    nice python benchmarks/bench_flows.py --flows 1000000 --packets-per-flow 2

Traffic: ``--flows`` TCP flows (distinct source address and port), each sending
``--packets-per-flow`` in-order segments of 100 bytes; every flow's first segment comes
before any flow's second one, so in the ``ideal`` model every flow is held at once (the
worst case for the table). Frames are built with numpy from one template and decoded by
the fast decoder (falls back to the reference decoder for small runs if absent).

Measured with tracemalloc (numpy allocations are traced) at two sizes, N/10 and N, so the
figure reported is the marginal cost per flow, not the fixed overhead:

- ``assign_flow_ids`` peak heap bytes per flow;
- the numba engine's ``simulate`` (``ideal`` and ``napi``) peak heap bytes per flow;
- the decoded packet table's bytes per packet (Arrow ``nbytes``), for scale;
- the engine state that holds the flows (``simulate_batch(..., final=False)`` over every
  flow's first segment, ideal model: every flow held): bytes of its arrays and key
  tables, and its pickled size (what crosses a process boundary), per held flow.

``--against DIR`` runs the same measurement on another checkout of the engine (e.g.
``git archive REV gropcap tests | tar -x -C DIR``) in a child process, then this
checkout, and prints both with the ratios (same run, same machine load).

Correctness asserted on every run: one flow id per flow, every flow's segments merge
into one super-packet in the ideal model, every packet accounted for.
Results are printed and appended as one JSON line to ``--out`` (default
``benchmarks/results/bench_flows.jsonl``) with the git commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parents[1]
# BENCH_GROPCAP_ROOT: measure another checkout's engine (set by --against)
ROOT = Path(os.environ.get("BENCH_GROPCAP_ROOT") or HERE)
sys.path.insert(0, str(ROOT))

from gropcap.capture.records import RecordBatch  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.gro.flows import assign_flow_ids  # noqa: E402

PAYLOAD = 100
_ETH, _IP = 14, 20


def _template() -> bytes:
    from tests.craft import eth, ipv4, tcp

    return eth(ipv4("10.0.0.1", "10.200.0.1", 6, tcp(1000, 80, seq=1, payload=b"x" * PAYLOAD)))


def build_batch(flows: int, per_flow: int) -> RecordBatch:
    """``flows * per_flow`` frames: segment k of every flow, then segment k+1 of every flow."""
    t = np.frombuffer(_template(), dtype=np.uint8)
    n = flows * per_flow
    flen = len(t)
    buf = np.tile(t, n).reshape(n, flen)
    f = np.tile(np.arange(flows, dtype=np.uint32), per_flow)          # flow of each frame
    k = np.repeat(np.arange(per_flow, dtype=np.uint32), flows)        # segment index
    src = (10 << 24) + (1 << 16) + (f >> 12)                          # 10.1.x.y
    sport = 1024 + (f & 0xFFF)
    buf[:, _ETH + 12:_ETH + 16] = src[:, None].byteswap().view(np.uint8).reshape(n, 4)
    buf[:, _ETH + _IP:_ETH + _IP + 2] = sport.astype(">u2")[:, None].view(np.uint8)
    seq = (1 + k * PAYLOAD).astype(">u4")
    buf[:, _ETH + _IP + 4:_ETH + _IP + 8] = seq[:, None].view(np.uint8).reshape(n, 4)
    # IPv4 header checksum: recomputed per frame (GRO bypasses a bad one)
    buf[:, _ETH + 10:_ETH + 12] = 0
    hdr = buf[:, _ETH:_ETH + _IP].astype(np.uint32)
    s = (hdr[:, 0::2] << 8 | hdr[:, 1::2]).sum(axis=1)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    c = (~s) & 0xFFFF
    buf[:, _ETH + 10] = c >> 8
    buf[:, _ETH + 11] = c & 0xFF
    z = np.zeros(n, dtype=np.int64)
    return RecordBatch(buf=buf.ravel(), offset=np.arange(n, dtype=np.int64) * flen,
                       cap_len=np.full(n, flen, np.uint32), wire_len=np.full(n, flen, np.uint32),
                       ts_ns=1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 100,
                       linktype=np.ones(n, np.uint16), iface=np.zeros(n, np.uint16),
                       epb_flags=np.zeros(n, np.uint32), record=np.arange(n, dtype=np.uint64),
                       file_offset=z.astype(np.uint64))


def decode(batch: RecordBatch) -> pa.Table:
    try:
        from gropcap.decode.fast import decode_batch
    except ImportError:
        from gropcap.decode.reference import decode_batch
    return pa.Table.from_batches([decode_batch(batch)])


def peak(fn):
    """(result, peak traced heap bytes above the start, seconds)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    p = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return out, p, dt


def measure(flows: int, per_flow: int) -> dict:
    from gropcap.gro.engine import simulate

    table = decode(build_batch(flows, per_flow))
    n = table.num_rows
    ids, p_ids, t_ids = peak(lambda: assign_flow_ids(table))
    assert ids.max() + 1 == flows and np.array_equal(ids[:flows], np.arange(flows))
    row = {"flows": flows, "packets": n, "table_bytes": table.nbytes,
           "assign_flow_ids_peak": p_ids, "assign_flow_ids_s": round(t_ids, 3)}
    row.update(held_state(table.slice(0, flows)))
    payload = table.column("payload_len").to_numpy()
    for model in ("ideal", "napi"):
        res, p, dt = peak(lambda: simulate(table, GroConfig(model=model)))
        res.check_invariants(payload)
        if model == "ideal":
            assert res.num_superpackets == flows, res.num_superpackets   # all merged
        row[f"{model}_peak"] = p
        row[f"{model}_s"] = round(dt, 3)
        row[f"{model}_superpackets"] = res.num_superpackets
    return row


def held_state(first: pa.Table) -> dict:
    """Bytes of the engine state holding every flow of ``first`` (one segment each)."""
    import pickle

    from gropcap.gro.engine import simulate_batch

    _, st = simulate_batch(first, GroConfig(), None, final=False)
    held = int(np.count_nonzero(st.kernel.e_first >= 0))
    assert held == first.num_rows, (held, first.num_rows)     # every flow held
    arrays = sum(a.nbytes for a in st.kernel if isinstance(a, np.ndarray))
    tables = sum(kt.sorted_keys.nbytes + kt.sorted_ids.nbytes
                 for kt in (st.key_ids, st.loose_ids, st.flow_ids)
                 if kt.sorted_keys is not None)
    return {"held": held, "state_arrays_bytes": arrays, "key_tables_bytes": tables,
            "state_pickle_bytes": len(pickle.dumps(st, protocol=5))}


def against(old_root: str, argv: list[str]) -> int:
    """Run this benchmark on ``old_root`` and on this checkout; print both and ratios."""
    import tempfile

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tag, root in (("old", old_root), ("new", str(HERE))):
            out = os.path.join(tmp, tag + ".jsonl")
            env = dict(os.environ, BENCH_GROPCAP_ROOT=root)
            subprocess.run([sys.executable, __file__, *argv, "--out", out], env=env,
                           check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                results[tag] = json.loads(f.readline())
    old, new = (results[t]["bytes_per_flow_marginal"] for t in ("old", "new"))
    print(json.dumps({"old": results["old"], "new": results["new"],
                      "bytes_per_flow_old_over_new": {
                          k: round(old[k] / new[k], 2) if new.get(k) else None
                          for k in new if k in old}}, indent=2))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", type=int, default=1_000_000)
    ap.add_argument("--packets-per-flow", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results" / "bench_flows.jsonl"))
    ap.add_argument("--against", metavar="DIR",
                    help="also measure the engine of another checkout (same run)")
    args = ap.parse_args(argv)
    if args.against:
        return against(args.against, ["--flows", str(args.flows),
                                      "--packets-per-flow", str(args.packets_per_flow)])
    small = max(1000, args.flows // 10)
    measure(1000, args.packets_per_flow)             # warm the JIT outside the numbers
    a = measure(small, args.packets_per_flow)
    b = measure(args.flows, args.packets_per_flow)
    df = b["flows"] - a["flows"]
    per_flow = {k: round((b[k] - a[k]) / df, 1) for k in
                ("assign_flow_ids_peak", "ideal_peak", "napi_peak", "table_bytes",
                 "state_arrays_bytes", "key_tables_bytes", "state_pickle_bytes")}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    if ROOT != HERE:
        commit = f"checkout {ROOT}"
    result = {"commit": commit, "root": str(ROOT), "python": platform.python_version(),
              "packets_per_flow": args.packets_per_flow, "small": a, "large": b,
              "bytes_per_flow_marginal": per_flow,
              "bytes_per_packet_table": round(b["table_bytes"] / b["packets"], 1)}
    print(json.dumps(result, indent=2))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
