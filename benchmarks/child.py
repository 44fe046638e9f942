"""One benchmark child process, measured: wall time, peak RSS and peak anonymous RSS
(used by ``bench_egress.py`` and ``bench_many_flows.py``); and a benchmark's own
preparation run in a child (:func:`in_child`), so its memory does not show in the peaks
of the children it measures.

Linux keeps a parent's peak RSS in its children: ``fork`` copies the high-water mark and
``exec`` keeps the larger one, so a child's ``ru_maxrss`` is never below what its parent
had reached when it started it. A benchmark that scans the capture itself before it
starts the measured runs (counting its records: 273 MB on the real capture) floors every
peak it reports at that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def in_child(module: str, function: str, *args):
    """``module.function(*args)`` (a module of ``benchmarks/``, JSON arguments and
    result) in a fresh Python process, which exits with its peak."""
    code = ("import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            f"from {module} import {function} as f; "
            "print(json.dumps(f(*json.loads(sys.argv[3]))))")
    got = subprocess.run([sys.executable, "-c", code, HERE, os.path.dirname(HERE),
                          json.dumps(list(args))], capture_output=True, text=True)
    if got.returncode:
        sys.exit(f"{module}.{function} failed: {got.stderr[-2000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def _anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(cmd: list[str], out_path: str, sample: float) -> dict:
    """One child: wall seconds, peak RSS and peak RssAnon (KiB); its stdout to
    ``out_path``."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 2)
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.execvp(cmd[0], cmd)
    anon = 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        anon = max(anon, _anon_kib(pid))
        time.sleep(sample)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return {"wall_s": round(wall, 2), "peak_rss_kib": usage.ru_maxrss,
            "peak_anon_kib": anon}
