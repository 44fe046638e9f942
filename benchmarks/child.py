"""One benchmark child process, measured: wall time, peak RSS and peak anonymous RSS.

Used by ``bench_egress.py`` and ``bench_many_flows.py``.
"""

from __future__ import annotations

import os
import sys
import time


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
