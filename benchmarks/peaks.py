"""Exact peak memory of a benchmarked process tree: each process writes its own peak at exit.

A sampler reading ``/proc/PID/status`` every half second misses what a process reaches in
its last interval (a run's flows table is built at its end), and ``ru_maxrss`` from
``wait4`` is the largest of a process and its reaped descendants (a Dask client's local
workers included). So each process reports itself:

- the **client**: ``python peaks.py DIR -m gropcap analyze ...`` runs the module as
  ``__main__`` with an ``atexit`` hook that writes ``DIR/client-PID.json``;
- each **Dask worker**: :func:`worker_env` puts this file in
  ``distributed.worker.preload`` (``DASK_DISTRIBUTED__WORKER__PRELOAD``), whose
  ``dask_setup`` registers the same hook in the worker's process and whose
  ``dask_teardown`` writes at the worker's close (``DIR/worker-PID.json``; the later write
  wins).

Each file holds ``VmHWM`` (peak RSS) and ``VmRSS``/``RssAnon`` at the time of writing, in
KiB. :func:`read` collects them. An interrupt of gropcap (``os._exit(130)``) writes
nothing: only completed runs are measured.

Used by ``bench_scale.py``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys

ENV_DIR = "GROPCAP_BENCH_PEAKS"


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmHWM", "VmRSS", "RssAnon"):
                out[key] = int(line.split()[1])
    return out


def _write(role: str) -> None:
    d = os.environ.get(ENV_DIR)
    if not d:
        return
    path = os.path.join(d, f"{role}-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(_status(), f)
    os.replace(path + ".tmp", path)


def dask_setup(worker=None) -> None:                    # a Dask preload's hook
    atexit.register(_write, "worker")


def dask_teardown(worker=None) -> None:                 # a Dask preload's hook
    _write("worker")


def worker_env(directory: str) -> dict:
    """The environment that makes the client and its Dask workers write their peaks into
    ``directory``."""
    return {ENV_DIR: directory,
            "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([os.path.abspath(__file__)])}


def read(directory: str) -> dict:
    """``{"client": [KiB...], "worker": [KiB...]}``: each process's VmHWM, largest first."""
    got: dict = {"client": [], "worker": []}
    for name in sorted(os.listdir(directory)):
        role = name.split("-", 1)[0]
        if name.endswith(".json") and role in got:
            with open(os.path.join(directory, name)) as f:
                got[role].append(json.load(f)["VmHWM"])
    return {k: sorted(v, reverse=True) for k, v in got.items()}


def main(argv: list[str]) -> None:
    """``peaks.py DIR -m MODULE ARGS...``: run MODULE as ``__main__``, writing the peak at
    exit."""
    if len(argv) < 3 or argv[1] != "-m":
        sys.exit("usage: peaks.py DIR -m MODULE [ARGS...]")
    os.environ[ENV_DIR] = argv[0]
    atexit.register(_write, "client")
    sys.argv = [argv[2], *argv[3:]]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
