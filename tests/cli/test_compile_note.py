"""While numba compiles (a cold cache), `gropcap analyze` says so on stderr, once; with a
warm cache it does not. Both runs keep --format json stdout pure JSON.

Regression: a first run sat silent for minutes (the bar at 100% with no label).
Runs in a fresh NUMBA_CACHE_DIR, so the first run really compiles (1-3 minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gropcap.run.progress import COMPILE_NOTE

from where import ROOT

SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")


def _run(cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "gropcap", "analyze", SAMPLE, "--format",
                        "json"], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=900)
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)
    return p.stderr.splitlines()


@pytest.mark.slow
def test_compile_note_on_a_cold_cache_only(tmp_path):
    cache = tmp_path / "numba-cache"
    first = _run(cache)
    assert first[0] == f"gropcap: {COMPILE_NOTE}", first
    assert first.count(f"gropcap: {COMPILE_NOTE}") == 1
    assert any(os.scandir(cache))                   # the kernels were cached there
    second = _run(cache)
    assert f"gropcap: {COMPILE_NOTE}" not in second, second
    assert len(second) == 1 and second[0].startswith("gropcap: ") and " packets in " in \
        second[0]
