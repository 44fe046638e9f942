"""The tests are in folders per layer (capture, decode, gro, receive, run, report, cli,
replay, fuzz), beside the package's layers (docs/architecture.md). The helpers they share
live here, at tests/, which pytest puts on ``sys.path`` for this conftest: ``craft.py``
(frame builders), ``live.py`` (the live-kernel fixture), ``where.py`` (the repository's
paths). A test module that uses another's helpers imports it by its package path
(``from tests.gro.test_gro_reference import v4``)."""

from __future__ import annotations

import os

# `pytest` runs the suite on pytest-xdist workers (pyproject's addopts: `-n auto --dist
# worksteal`), one per CPU this process may use, at most XDIST_MAX_WORKERS: each worker
# holds its own numba kernels and some tests start Dask clusters or veth pairs of their
# own. `-n 0` (or `-p no:xdist`) runs everything in one process.
XDIST_MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: the CPUs this process may run on (its affinity where the system has
    one, not the host's count), capped at XDIST_MAX_WORKERS."""
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(cpus, XDIST_MAX_WORKERS))


def pytest_sessionstart(session):
    """Compile the GRO, single-pass and decode kernels (or load them from numba's cache)
    before any test: a small capture on a cold cache would otherwise run on the
    reference path with its own note (gro.engine.cold_start_reference), or compile
    inside whichever test came first, so results and stderr would depend on test order.
    The cold-cache behaviour is tested on its own, with fresh NUMBA_CACHE_DIRs
    (tests/cli/test_cold_cache.py, tests/gro/test_startup_tiers.py). With xdist the
    controller runs this first, on a cold cache compiling once, and the workers it then
    starts load the kernels from the cache."""
    import gropcap
    from gropcap.gro import fused
    from where import SAMPLES

    gropcap.analyze(f"{SAMPLES}/real_ipv4_p4.pcap", engine="fast", decoder="fast")
    fused.warm_up()             # the single pass of summary-only runs (kernels_cached)
