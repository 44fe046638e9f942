"""Machine instructions and simulated cache misses per record, for every numba kernel and
native function of a run, under valgrind's callgrind: counts that repeat exactly from run
to run, where timings on a shared machine move by 10-30% and this machine's ``perf`` has
no hardware counters.

    python benchmarks/callgrind_kernels.py CAPTURE                  # 400 000 records
    python benchmarks/callgrind_kernels.py CAPTURE --records 200000 --top 40 --json out.json
    python benchmarks/callgrind_kernels.py CAPTURE -- --format json -q --threads 1 --mtu 9000

``--marginal-from M`` runs the first M records too and prints what one more record
costs, per function: (cost of the ``--records`` run - cost of the M run) / (records - M).
Start-up, imports and the numba cache loading cancel out, which the per-record figures of
one run include (a third of them at 400 000 records).

    python benchmarks/callgrind_kernels.py CAPTURE --records 600000 --marginal-from 200000

``--annotate FUNCTION`` adds that kernel function's costliest machine instructions (per
record, in address order, disassembled by objdump from the code the run dumps at exit).

Everything after ``--`` is ``gropcap analyze``'s options (default ``--format json -q
--threads 1``). The run reads the first ``--records`` records of CAPTURE (a prefix file).

How: numba compiles for a fixed CPU (``NUMBA_CPU_NAME=haswell``) into a cache directory
of this tool's own, in a native run first; the run under callgrind then loads that cache
(valgrind's virtual CPU has no AVX-512, so a cache made for the host's CPU would be
compiled again under valgrind, 10 minutes). At its exit the run writes the address of
every function of the kernels it loaded (``perf_map.functions``), which names callgrind's
anonymous JIT code. The figures are *self* costs (a function's own instructions, not its
callees'), divided by the records; they include start-up (imports, cache loading), which
a larger ``--records`` dilutes.

Read them with care: instructions are not time. The decode kernel went from 1 165 to 677
instructions a frame (header fields read by an intrinsic) and ran barely faster; it then
ran 2.4 times faster with the same instructions once its output rows stopped sharing
cache sets, which only the cache simulation showed (L1 write misses 30 -> 2.5 a frame).
Runs before the capture digest became XXH3-128 (``capture.fingerprint``) counted the
sha256 under valgrind in OpenSSL's plain x86 code (no SHA-NI): about 4 000 instructions a
record, in an unnamed libcrypto function.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

# the command line in process; at exit, "address name" of every function of the loaded
# kernels into $GROPCAP_JIT_MAP
_DRIVER = """
import atexit, os, sys
sys.path.insert(0, {here!r})
def _names():
    import ctypes, perf_map
    funcs = perf_map.functions()
    with open(os.environ["GROPCAP_JIT_MAP"], "w") as f:
        for addr, name in funcs:
            f.write(f"{{addr:x}} {{name}}\\n")
    want = os.environ.get("GROPCAP_JIT_DUMP")
    if want and funcs:
        # --annotate: the machine code of the named function, up to the next function
        # (at most 256 KiB), as "address size" and the bytes
        ends = [a for a, _ in funcs[1:]] + [funcs[-1][0] + 4096]
        with open(os.environ["GROPCAP_JIT_MAP"] + ".code", "wb") as f:
            for (addr, name), end in zip(funcs, ends):
                if name == want:
                    size = min(end - addr, 1 << 18)
                    f.write(f"{{addr:x}} {{size}}\\n".encode())
                    f.write(ctypes.string_at(addr, size))
                    break
atexit.register(_names)
sys.argv = ["gropcap", "analyze", *sys.argv[1:]]
from gropcap.__main__ import main
main()
"""


def parse(path: str) -> tuple[list[str], dict[str, list[int]]]:
    """Self costs per function of a callgrind output file: (events, {function: costs})."""
    names: dict[str, str] = {}
    events: list[str] = []
    cost: dict[str, list[int]] = {}
    fn = None
    after_call = False
    npos = 1                            # "positions: line", or "instr line" (--annotate)
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
                continue
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
                continue
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line.strip())
                if m is None:
                    continue
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "fn":
                    fn = names.get(m.group(2), m.group(2))
                continue
            if line.startswith("calls="):
                after_call = True       # the next cost line is the call's inclusive cost
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                parts = line.split()[npos:]
                c = cost.setdefault(fn, [0] * len(events))
                for k, v in enumerate(parts):
                    c[k] += int(v)
    return events, cost


def parse_instr(path: str, lo: int, hi: int) -> dict[int, list[int]]:
    """Self costs per instruction address in ``[lo, hi)`` of a ``--dump-instr=yes``
    callgrind file (positions ``instr line``; a position may be relative to the one
    before, ``+n`` / ``-n``, or the same, ``*``)."""
    out: dict[int, list[int]] = {}
    last = 0
    after_call = False
    with open(path) as f:
        for line in f:
            if line.startswith("calls="):
                after_call = True
                continue
            c0 = line[:1]
            if not (c0 == "0" or c0 in "+-*"):
                continue
            parts = line.split()
            p = parts[0]
            if p.startswith("0x"):
                addr = int(p, 16)
            elif p[0] in "+-":
                step = int(p[1:], 16) if p[1:].startswith("0x") else int(p[1:])
                addr = last + step if p[0] == "+" else last - step
            else:
                addr = last
            last = addr
            if after_call:
                after_call = False          # the call's inclusive cost, not self
                continue
            if lo <= addr < hi:
                c = out.setdefault(addr, [0] * len(EVENTS))
                for k, v in enumerate(parts[2:]):
                    c[k] += int(v)
    return out


def annotate(work: str, name: str, callgrind_out: str, records: int, top: int) -> None:
    """The costliest instructions of ``name`` (self cost per record), in address order,
    disassembled by objdump from the code the run dumped at its exit."""
    code_file = os.path.join(work, "jit.map.code")
    if not os.path.exists(code_file) or os.path.getsize(code_file) == 0:
        print(f"annotate: no function named {name} in the run", file=sys.stderr)
        return
    with open(code_file, "rb") as f:
        head = f.readline().split()
        addr, size = int(head[0], 16), int(head[1])
        code = f.read(size)
    binf = os.path.join(work, "code.bin")
    with open(binf, "wb") as f:
        f.write(code)
    dis = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64",
                          f"--adjust-vma={addr:#x}", binf], capture_output=True, text=True,
                         check=True).stdout
    text = {}
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\t[0-9a-f ]+\t(.*)", line)
        if m:
            text[int(m.group(1), 16)] = m.group(2).strip()
    cost = parse_instr(callgrind_out, addr, addr + size)
    total = [sum(c[k] for c in cost.values()) for k in range(len(EVENTS))]
    print(f"\n{name}: {total[0] / records:.1f} instructions a record at {len(cost)} "
          f"addresses; the costliest {top} (offset, Ir and L1 misses per record):")
    for a in sorted(sorted(cost, key=lambda a: -cost[a][0])[:top]):
        c = cost[a]
        print(f"  {a - addr:#8x} {c[0] / records:7.2f} {(c[4] + c[5]) / records:6.2f}  "
              f"{text.get(a, '?')}")


def named(cost: dict[str, list[int]], jit_map: str) -> dict[str, list[int]]:
    """``cost`` with callgrind's ``0x...`` JIT functions named from the run's map."""
    addrs = {}
    if os.path.exists(jit_map):
        with open(jit_map) as f:
            for line in f:
                a, name = line.split(None, 1)
                addrs[int(a, 16)] = name.strip()
    out: dict[str, list[int]] = collections.defaultdict(lambda: [0] * len(EVENTS))
    for fn, c in cost.items():
        name = fn or "?"
        m = re.match(r"0x([0-9a-f]+)", name)      # (a recursion level may follow: '2)
        if m:
            name = addrs.get(int(m.group(1), 16), name + " (no kernel's)")
        acc = out[name]
        for k, v in enumerate(c):
            acc[k] += v
    return dict(out)


def split_analyze(argv) -> tuple[list[str], list[str]]:
    """``(this tool's arguments, gropcap analyze's)``: what follows ``--`` is the
    latter. (argparse fills a trailing ``nargs="*"`` positional together with
    ``capture``, empty, and then rejects the words after ``--``.)"""
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    return argv[:cut], argv[cut + 1:]


def marginal(big: dict, small: dict) -> dict:
    """Per function, the costs of the larger run less those of the smaller one (0 for a
    function the smaller run did not reach); functions only the smaller run reached are
    left out (start-up noise: none of them is per record)."""
    return {n: [v - w for v, w in zip(c, small.get(n, [0] * len(c)))]
            for n, c in big.items()}


def _measure(args, work, driver, opts, env, want, write_prefix, annotate_it):
    """The first ``want`` records of the capture run under callgrind: ``(records,
    {function: costs})`` (whole-run costs, not per record)."""
    prefix = os.path.join(work, f"prefix-{want}" + os.path.splitext(args.capture)[1])
    records = write_prefix(args.capture, want, prefix)
    cmd = [sys.executable, driver, prefix, *opts]
    # native, twice: compile for the fixed CPU (on the fast engine, whatever the size)
    for extra in (["--engine", "fast"], []):
        subprocess.run(cmd + extra, env=env, check=True, stdout=subprocess.DEVNULL,
                       cwd=work)
    out = os.path.join(work, f"callgrind-{want}.out")
    instr = ["--dump-instr=yes"] if annotate_it else []
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", *instr,
                    f"--callgrind-out-file={out}", *cmd], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    events, cost = parse(out)
    assert tuple(events) == EVENTS, events
    table = named(cost, env["GROPCAP_JIT_MAP"])
    if annotate_it:
        annotate(work, args.annotate, out, records, args.annotate_top)
    return records, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", help="write the per-function figures here")
    ap.add_argument("--keep", help="keep the work directory here (cache, callgrind file)")
    ap.add_argument("--annotate", metavar="FUNCTION",
                    help="also the costliest machine instructions of this kernel function "
                         "(its name as the table prints it)")
    ap.add_argument("--annotate-top", type=int, default=80)
    ap.add_argument("--marginal-from", type=int, metavar="M",
                    help="also run the first M records and report what a record costs "
                         "beyond them: (cost of --records - cost of M) / (--records - M), "
                         "start-up and cache loading cancelled out")
    argv, analyze = split_analyze(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    args.analyze = analyze
    if shutil.which("valgrind") is None:
        print("callgrind_kernels: valgrind is not installed (apt install valgrind)",
              file=sys.stderr)
        return 2
    sys.path.insert(0, HERE)
    from bench_targets import write_prefix
    work = args.keep or tempfile.mkdtemp(prefix="gropcap-callgrind-")
    os.makedirs(work, exist_ok=True)
    try:
        driver = os.path.join(work, "driver.py")
        with open(driver, "w") as f:
            f.write(_DRIVER.format(here=HERE))
        opts = args.analyze or ["--format", "json", "-q", "--threads", "1"]
        env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="",
                   NUMBA_CACHE_DIR=os.path.join(work, "numba-cache"),
                   GROPCAP_JIT_MAP=os.path.join(work, "jit.map"), PYTHONPATH=ROOT,
                   GROPCAP_COMPILE_HELPER="0")
        if args.annotate:
            env["GROPCAP_JIT_DUMP"] = args.annotate
        records, table = _measure(args, work, driver, opts, env, args.records,
                                  write_prefix, annotate_it=bool(args.annotate))
        base = None
        if args.marginal_from is not None:
            if not 0 <= args.marginal_from < records:
                raise SystemExit("--marginal-from must be below the records measured")
            base = _measure(args, work, driver, opts, env, args.marginal_from,
                            write_prefix, annotate_it=False)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    per = records
    if base is not None:
        # what one more record costs: start-up, imports and cache loading cancel out
        per = records - base[0]
        table = marginal(table, base[1])
    rows = sorted(table.items(), key=lambda kv: -kv[1][0])
    total = [sum(c[k] for c in table.values()) for k in range(len(EVENTS))]
    what = "per record" if base is None else \
        f"per record beyond the first {base[0]} (marginal)"
    print(f"{records} records of {os.path.basename(args.capture)}, gropcap analyze "
          f"{' '.join(opts)}; {what}:")
    print(f"{'function':58s}" + "".join(f"{e:>9s}" for e in EVENTS))
    for name, c in [("TOTAL", total)] + rows[:args.top]:
        print(f"{name[:58]:58s}" + "".join(f"{v / per:9.1f}" for v in c))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"capture": args.capture, "records": records, "analyze": opts,
                       "marginal_from": None if base is None else base[0],
                       "events": list(EVENTS),
                       "total_per_record": [round(v / per, 2) for v in total],
                       # the 200 costliest functions (of some 20 000)
                       "per_record": {n: [round(v / per, 2) for v in c]
                                      for n, c in rows[:max(args.top, 200)]}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
