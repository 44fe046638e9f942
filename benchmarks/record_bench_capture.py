"""Record the benchmark's REAL capture: multi-stream TCP between namespaces (root).

Issue 14 measures speed on "a 3 M-packet real multi-stream TCP capture at snaplen 128".
This records one: iperf3 with several parallel streams from a sender namespace to a
receiver namespace over a veth pair, captured with tcpdump on the sender's veth in both
directions (data frames out, the receiver's ACKs in), snaplen 128. The sender's veth has
its segmentation offloads off, so every data frame is wire-sized, as on a NIC's wire.
The traffic is rate-limited so that tcpdump keeps up; the script fails if tcpdump reports
a dropped frame, and prints the frame count.

    sudo python3 benchmarks/record_bench_capture.py /tmp/real3m.pcap            # ~3 M frames
    sudo python3 benchmarks/record_bench_capture.py /tmp/r.pcap --bytes 300M    # smaller

Real traffic is not reproducible byte for byte (timing, ports, sequence numbers): the
benchmark's ratios are taken against the reference path in the same run on the same file,
so two recordings of the same arguments give comparable ratios, not identical rates.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "sample_pcaps"))

import make_pairs  # noqa: E402


def record(out: Path, *, streams: int, total: str, rate: str) -> int:
    """Record ``total`` bytes of iperf3 over ``streams`` streams (each at most ``rate``)
    into ``out``; returns the number of frames tcpdump captured."""
    case = dataclasses.replace(make_pairs.CASES["bulk"],
                               app=("iperf3", "-P", str(streams), "-n", total, "-b", rate),
                               what=f"iperf3 IPv4, {streams} streams, {total} bytes")
    lab = make_pairs.PairLab(case)
    tmp = out.with_name(f".{out.name}.part")
    try:
        lab.setup()
        wns, wdev = lab.wire_ns_dev
        dump = lab._bg(wns, "tcpdump", "-i", wdev, "-s", str(make_pairs.SNAPLEN), "-B",
                       "262144", "-n", "-w", str(tmp), "tcp", err=subprocess.PIPE)
        line = dump.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")
        time.sleep(0.3)
        lab.run_traffic()
        time.sleep(1.0)
        dump.send_signal(signal.SIGINT)
        tail = dump.communicate(timeout=60)[1]
        n = {k: int(v.split()[0]) for k in ("captured", "dropped by kernel")
             for v in tail.splitlines() if v.endswith(k)}
        if len(n) != 2 or n["dropped by kernel"]:
            raise RuntimeError(f"tcpdump lost frames: {tail!r}; lower --rate")
        tmp.replace(out)
        return n["captured"]
    finally:
        tmp.unlink(missing_ok=True)
        lab.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="pcap to write")
    ap.add_argument("--streams", type=int, default=8, help="parallel TCP streams (8)")
    ap.add_argument("--bytes", dest="total", default="4000M",
                    help="bytes iperf3 sends in all (4000M: about 3 M frames, ACKs included)")
    ap.add_argument("--rate", default="100M",
                    help="iperf3 -b: bit rate per stream (100M), so that tcpdump keeps up")
    a = ap.parse_args(argv)
    missing = make_pairs.missing_tools()
    if missing:
        print(f"record_bench_capture: needs {', '.join(missing)}", file=sys.stderr)
        return 1
    frames = record(a.out, streams=a.streams, total=a.total, rate=a.rate)
    print(f"{a.out}: {frames} frames, {a.out.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
