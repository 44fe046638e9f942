"""While numba compiles (a cold cache), `gropcap analyze` says so on stderr, once; with a
warm cache it does not. A small capture on a cold cache runs on the reference decoder and
engine instead (a first run in seconds, same results) and says that. Every run keeps
--format json stdout pure JSON.

Regression: a first run sat silent for minutes (the bar at 100% with no label).
Runs in a fresh NUMBA_CACHE_DIR, so the first run really compiles (1-3 minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gropcap.gro.engine import COLD_REFERENCE_MAX_BYTES
from gropcap.run.progress import COLD_REFERENCE_NOTE, COMPILE_NOTE

from where import ROOT

SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")


def _run(cache, *args):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "gropcap", "analyze", SAMPLE, "--format",
                        "json", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr.splitlines()


@pytest.mark.slow
def test_compile_note_on_a_cold_cache_only(tmp_path):
    """The small sample on a cold cache runs on the reference path (same JSON, its own
    note, nothing compiled for it); --engine fast compiles once, saying so; afterwards
    the default run uses the compiled kernels and says nothing."""
    cache = tmp_path / "numba-cache"
    cold = COLD_REFERENCE_NOTE.format(mib=COLD_REFERENCE_MAX_BYTES >> 20)
    summary, first = _run(cache)
    assert first[0] == f"gropcap: {cold}", first
    assert f"gropcap: {COMPILE_NOTE}" not in first
    fast, compiled = _run(cache, "--engine", "fast")
    assert fast == summary
    assert compiled[0] == f"gropcap: {COMPILE_NOTE}", compiled
    assert compiled.count(f"gropcap: {COMPILE_NOTE}") == 1
    assert any(os.scandir(cache))                   # the kernels were cached there
    again, second = _run(cache, "--engine", "fast")
    assert again == summary and f"gropcap: {COMPILE_NOTE}" not in second, second
    assert len(second) == 1 and second[0].startswith("gropcap: ") and " packets in " in \
        second[0]
    default, third = _run(cache)
    assert default == summary and len(third) == 1 and " packets in " in third[0], third
