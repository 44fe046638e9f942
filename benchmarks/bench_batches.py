"""What one batch costs besides its records: the bounded-memory run's fixed cost per batch.

``gropcap analyze FILE --format json`` runs batch by batch (``run.stream.STREAM_BATCH``
records, 131 072); around the kernels each batch pays Python and Arrow glue (column
conversions, accumulators, the engine's preparation) whatever its size. This runs
``stream_analyze`` (summary only, one thread) in one warm process with several batch sizes,
alternating, ``--rounds`` times, and keeps the least CPU time of each. With ``N`` records,
``T(B) = F + N c + ceil(N / B) o`` (``F`` the run's own fixed cost, ``c`` a record's):
two batch sizes give ``o``, the fixed cost of a batch (``F`` and ``N c`` cancel out). The
report gives it for every size against the largest, and the share of the largest size's
run that the batches' fixed costs take.

    python benchmarks/bench_batches.py /work/rec/pre300k.pcap --sizes 4096,131072 \
        --rounds 3 --json benchmarks/results/batches-<sha>.json

Nothing here is a timed test: the figures are for the closing notes and
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def batches(records: int, size: int) -> int:
    return -(-records // size)


def per_batch(records: int, a: tuple[int, float], b: tuple[int, float]) -> float:
    """Seconds a batch costs besides its records, from two ``(batch size, seconds)`` runs
    over the same ``records`` (``T = F + records * c + batches * o``)."""
    na, nb = batches(records, a[0]), batches(records, b[0])
    if na == nb:
        raise ValueError(f"batch sizes {a[0]} and {b[0]} give the same number of batches "
                         f"({na}) for {records} records")
    return (a[1] - b[1]) / (na - nb)


def measure(capture: str, sizes: list[int], rounds: int, *, cli_malloc: bool = True) -> dict:
    """Least CPU seconds of ``rounds`` runs per batch size (sizes alternating).
    ``cli_malloc``: glibc's malloc set for this process as the command line sets it
    (``gropcap.__main__.tune_malloc``), which lasts to the process's end."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if cli_malloc:
        from gropcap.__main__ import tune_malloc
        tune_malloc()
    from gropcap.run.stream import stream_analyze

    def run(size: int) -> tuple[float, int]:
        c0 = time.process_time()
        r = stream_analyze(capture, force=True, threads=1, batch_records=size)
        return time.process_time() - c0, int(r.summary["packets"])

    run(max(sizes))                    # kernels loaded, pages of the capture cached
    best = {s: float("inf") for s in sizes}
    records = 0
    for _ in range(rounds):
        for s in sizes:
            cpu, records = run(s)
            best[s] = min(best[s], cpu)
    top = max(sizes)
    pairs = {}
    for s in sizes:
        if s == top:
            continue
        o = per_batch(records, (s, best[s]), (top, best[top]))
        pairs[f"{s}/{top}"] = {"ms_per_batch": round(o * 1e3, 3),
                               "share_of_largest": round(batches(records, top) * o
                                                         / best[top], 3)}
    return {"capture": os.path.basename(capture), "records": records, "rounds": rounds,
            "cpu_seconds": {str(s): round(best[s], 4) for s in sizes}, "pairs": pairs}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--sizes", default="4096,16384,131072",
                    help="batch sizes in records, comma-separated (the largest is the "
                         "reference of every pair)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the result here too")
    a = ap.parse_args(argv)
    sizes = sorted({int(x) for x in a.sizes.split(",")})
    if len(sizes) < 2:
        ap.error("--sizes needs at least two batch sizes")
    res = measure(a.capture, sizes, a.rounds)
    print(f"{res['records']} records of {res['capture']}, least CPU of {a.rounds} rounds:")
    for s, cpu in res["cpu_seconds"].items():
        print(f"  batches of {s:>7}: {cpu:.3f} s")
    for pair, d in res["pairs"].items():
        print(f"  {pair}: {d['ms_per_batch']} ms a batch besides its records; the "
              f"batches' fixed costs {d['share_of_largest']:.0%} of the largest size's run")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
