"""The end-to-end run around decode and the GRO engine, old against new in the same run.

``gropcap analyze FILE --format json`` and ``gropcap analyze FILE --out DIR`` on a capture
and on its first ``--small-records`` records, each in a fresh process, the old checkout
(``--against DIR``, e.g. ``git archive <commit> gropcap | tar -x -C /tmp/old``) and this
one alternating, ``--rounds`` times; the figure is the child's CPU time (user + sys), the
least of the rounds. Marginal packets/s = (records of the capture - records of the small
one) / (CPU of the capture - CPU of the small one): start-up and JIT cache loading cancel
out. The new checkout also runs ``--out DIR --packet-columns all`` (``out-all``: every
column, what the old one writes); both checkouts run with ``--threads 1`` (one core; an
old one without the option runs on one anyway; ``--threads N`` to change it).
``--phases`` adds the bounded-memory run's phases (``StreamResult.timings`` with CPU
time in place of wall time) for both checkouts.

Invariants: the JSON summaries of old and new are equal (but for the files' digests); the
small capture's ``packets.parquet`` written with ``--packet-columns all`` holds every
column the old checkout wrote, equal (all of them before ``--packet-columns``, the
default ones after), and its other two files are equal.

    git archive HEAD~3 gropcap | (mkdir -p /tmp/old && tar -x -C /tmp/old)
    python benchmarks/bench_glue.py /work/rec/real3m.pcap --against /tmp/old --rounds 3 \
        --phases --json benchmarks/results/glue-<sha>.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_PHASES = r"""
import json, shutil, sys, tempfile, time
time.perf_counter = time.process_time       # the phases in CPU seconds
from gropcap.run.stream import stream_analyze
cap, out = sys.argv[1], sys.argv[2] == "out"
d = tempfile.mkdtemp(prefix="bench-glue-")
c0 = time.process_time()
import inspect
kw = {"threads": 1} if "threads" in inspect.signature(stream_analyze).parameters else {}
r = stream_analyze(cap, out_dir=d if out else None, force=True, tmp_dir=d, **kw)
tm = {k: round(v, 3) for k, v in r.timings.items()}
tm["total"] = round(time.process_time() - c0, 3)
shutil.rmtree(d)
print(json.dumps(tm))
"""


def head_pcap(src: str, dst: str, records: int) -> int:
    """The first ``records`` records of a classic pcap (either byte order, µs or ns)."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        hdr = f.read(24)
        endian = "<" if hdr[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        out.write(hdr)
        n = 0
        while n < records:
            rec = f.read(16)
            if len(rec) < 16:
                break
            caplen = struct.unpack(endian + "IIII", rec)[2]
            out.write(rec + f.read(caplen))
            n += 1
    return n


def count_records(path: str) -> int:
    with open(path, "rb") as f:
        hdr = f.read(24)
        endian = "<" if hdr[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        n = 0
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return n
            f.seek(struct.unpack(endian + "IIII", rec)[2], 1)
            n += 1


def run_cli(root: str, cap: str, args: list) -> tuple[float, str]:
    """CPU seconds of ``gropcap analyze CAP ARGS`` with ``root`` first on the path."""
    env = dict(os.environ, PYTHONPATH=root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "gropcap.cli", "analyze", cap, "--format",
                        "json", "-q", *args], env=env, cwd=tempfile.gettempdir(),
                       stdout=subprocess.PIPE, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            p.stdout.decode())


def without_identity(summary: dict) -> dict:
    """The summary without each file's digest: a tree before the digest became XXH3-128
    (``capture.fingerprint``) gave a sha256 in its place."""
    for f in summary.get("files", []):
        f.pop("digest", None)
        f.pop("sha256", None)
    return summary


def phases(root: str, cap: str, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=root)
    p = subprocess.run([sys.executable, "-c", _PHASES, cap, mode], env=env, check=True,
                       cwd=tempfile.gettempdir(), stdout=subprocess.PIPE)
    return json.loads(p.stdout)


def same_files(a: str, b: str) -> bool:
    """The three files of ``a`` hold what ``b``'s hold, column for column (``a`` may have
    more packet columns: an old checkout that writes the default columns)."""
    import pyarrow.parquet as pq
    for name in ("packets.parquet", "superpackets.parquet", "flows.parquet"):
        ta, tb = pq.read_table(os.path.join(a, name)), pq.read_table(os.path.join(b, name))
        if set(tb.column_names) <= set(ta.column_names):
            ta = ta.select(tb.column_names)
        if not _nullable(ta).equals(_nullable(tb)):
            return False
    return True


def _nullable(t):
    """``t`` without metadata, every field nullable: from session 23 on the files declare
    their never-null columns REQUIRED (``io.parquet.required``), older ones do not."""
    import pyarrow as pa
    return t.cast(pa.schema([f.with_nullable(True) for f in t.schema]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--against", required=True, help="old checkout (holds gropcap/)")
    ap.add_argument("--small-records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--threads", type=int, default=1,
                    help="--threads of the runs (of the old checkout too when it has the "
                         "option)")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="bench-glue-")
    try:
        small = os.path.join(tmp, "small.pcap")
        n_small = head_pcap(args.capture, small, args.small_records)
        n_big = count_records(args.capture)
        roots = {"old": os.path.abspath(args.against), "new": ROOT}
        caps = {"small": small, "big": args.capture}
        cpu: dict = {}
        summaries: dict = {}
        modes = {"old": ("json", "out"), "new": ("json", "out", "out-all")}
        for _ in range(args.rounds):
            for side, root in roots.items():
                for mode in modes[side]:
                    for size, cap in caps.items():
                        extra = []
                        if mode.startswith("out"):
                            out = os.path.join(tmp, f"{side}-{size}")
                            shutil.rmtree(out, ignore_errors=True)
                            extra = ["--out", out]
                        if mode == "out-all":      # every column, as the old files
                            extra += ["--packet-columns", "all"]
                        if side == "new" or os.path.exists(
                                os.path.join(root, "gropcap", "run", "threads.py")):
                            extra += ["--threads", str(args.threads)]
                        c, text = run_cli(root, cap, extra)
                        cpu.setdefault(f"{side}/{mode}/{size}", []).append(round(c, 3))
                        if mode == "json":
                            summaries[(side, size)] = without_identity(json.loads(text))
                print({k: min(v) for k, v in cpu.items()}, file=sys.stderr, flush=True)
        # invariants: same summaries; every column written equals the old files
        for size in caps:
            assert summaries[("old", size)] == summaries[("new", size)], size
            assert summaries[("new", size)]["packets"] == (n_small if size == "small"
                                                           else n_big)
        every = os.path.join(tmp, "new-all")
        run_cli(ROOT, small, ["--out", every, "--packet-columns", "all"])
        assert same_files(every, os.path.join(tmp, "old-small"))
        result = {"capture": os.path.basename(args.capture), "records": n_big,
                  "small_records": n_small, "rounds": args.rounds, "cpu_seconds": cpu,
                  "figures": {}}
        for side in roots:
            for mode in modes[side]:
                big, sm = min(cpu[f"{side}/{mode}/big"]), min(cpu[f"{side}/{mode}/small"])
                result["figures"][f"{side}/{mode}"] = {
                    "cpu_seconds": big, "small_cpu_seconds": sm,
                    "pps_cpu": round(n_big / big),
                    "marginal_pps_cpu": round((n_big - n_small) / (big - sm))}
        if args.phases:
            # old and new alternating, the run with the least total CPU kept
            best: dict = {}
            for _ in range(args.rounds):
                for side, root in roots.items():
                    for mode in ("json", "out"):
                        got = phases(root, args.capture, mode)
                        key = f"{side}/{mode}"
                        if key not in best or got["total"] < best[key]["total"]:
                            best[key] = got
            result["phases_cpu_seconds"] = best
        text = json.dumps(result, indent=1)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
