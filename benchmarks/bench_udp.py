#!/usr/bin/env python3
"""UDP GRO and UDP tunnel sockets: the numba engine against the reference model, one run.

    python benchmarks/bench_udp.py [--copies 100] [--out benchmarks/results/bench_udp.jsonl]

Capture: the UDP samples tiled ``--copies`` times into one pcap in a temporary directory
(``sample_pcaps/pairs/udpgso.wire.pcap``: 80 x 16 x 1400-byte UDP_SEGMENT sends, and
``sample_pcaps/real_vxlan.pcap``: iperf3 through VXLAN), each copy's timestamps shifted
past the previous one so flows and NAPI polls stay realistic. For each configuration
(``--udp-gro forward``, ``--udp-gro fraglist``, ``--udp-tunnel vxlan:4789``) it measures,
after one warm-up run:

- ``engine``: ``gro.engine.simulate`` vs ``gro.reference.simulate`` on the decoded table
  (ideal and napi models), and checks the results are equal (every GroResult array);
- ``cli``: ``gropcap analyze FILE --format json --engine fast|reference`` end to end
  (both models), and checks the two JSON summaries are equal.

Rates are packets per second of wall-clock time; the ratios are fast / reference in the
same run. Results are printed and appended as one JSON line to ``--out`` with the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import dpkt
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SOURCES = {"udpgso": os.path.join(ROOT, "sample_pcaps", "pairs", "udpgso.wire.pcap"),
           "vxlan": os.path.join(ROOT, "sample_pcaps", "real_vxlan.pcap")}
CONFIGS = {"forward": {"udp_gro": "forward"}, "fraglist": {"udp_gro": "fraglist"},
           "vxlan_socket": {"udp_tunnels": "vxlan:4789"}}
CLI = {"forward": ["--udp-gro", "forward"], "fraglist": ["--udp-gro", "fraglist"],
       "vxlan_socket": ["--udp-tunnel", "vxlan:4789"]}


def tile(src: str, dst: str, copies: int) -> int:
    """``copies`` copies of ``src``'s records into ``dst`` (microsecond pcap); returns the
    number of records."""
    with open(src, "rb") as f:
        recs = [(ts, bytes(buf)) for ts, buf in dpkt.pcap.Reader(f)]
    span = recs[-1][0] - recs[0][0] + 0.01
    with open(dst, "wb") as f:
        w = dpkt.pcap.Writer(f, snaplen=65535)
        for k in range(copies):
            for ts, buf in recs:
                w.writepkt(buf, ts=ts + k * span)
    return copies * len(recs)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench(path: str, n: int, name: str) -> dict:
    from gropcap.gro import engine, reference
    from gropcap.gro.config import GroConfig
    from gropcap.gro.result import GroResult
    from gropcap.run.memory import decode_files

    table, _ = decode_files(path)
    out = {}
    for model in ("ideal", "napi"):
        config = GroConfig(model=model, **CONFIGS[name])
        engine.simulate(table.slice(0, 2000), config)          # JIT warm-up
        tf, f = timed(lambda: engine.simulate(table, config))
        tr, r = timed(lambda: reference.simulate(table, config))
        for field in GroResult.__dataclass_fields__:
            assert np.array_equal(getattr(f, field), getattr(r, field)), (name, model, field)
        out[f"engine_{model}"] = {"fast_pps": round(n / tf), "reference_pps": round(n / tr),
                                  "ratio": round(tr / tf, 1)}
    runs = {}
    for eng in ("fast", "reference"):
        cmd = [sys.executable, "-m", "gropcap", "analyze", path, "--format", "json",
               "--engine", eng, *CLI[name]]
        if eng == "fast":
            subprocess.run(cmd, check=True, capture_output=True)       # warm the cache
        t, p = timed(lambda: subprocess.run(cmd, check=True, capture_output=True, text=True))
        runs[eng] = (t, json.loads(p.stdout))
    a, b = runs["fast"][1], runs["reference"][1]
    assert a.get("models") == b.get("models"), f"{name}: CLI summaries differ"
    out["cli"] = {"fast_s": round(runs["fast"][0], 2), "reference_s": round(runs["reference"][0], 2),
                  "fast_pps": round(n / runs["fast"][0]),
                  "reference_pps": round(n / runs["reference"][0]),
                  "ratio": round(runs["reference"][0] / runs["fast"][0], 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_udp.jsonl"))
    args = ap.parse_args()
    res = {"copies": args.copies}
    with tempfile.TemporaryDirectory() as tmp:
        for src, cfgs in (("udpgso", ("forward", "fraglist")), ("vxlan", ("vxlan_socket",))):
            path = os.path.join(tmp, f"{src}.pcap")
            n = tile(SOURCES[src], path, args.copies)
            for name in cfgs:
                res[f"{src}/{name}"] = {"packets": n, **bench(path, n, name)}
                print(json.dumps({f"{src}/{name}": res[f"{src}/{name}"]}), flush=True)
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    res["commit"] = sha
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
