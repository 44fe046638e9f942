"""Start-up (issue 14): what a first run compiles, and the cold-cache check a first run
can use to take the reference path.

- A TCP-only configuration runs the GRO kernel ``run`` with ``udp=None``: numba prunes the
  UDP rules from that variant before typing, so a first run does not compile them
  (``_udp_receive`` stays uncompiled); a UDP GRO configuration runs the other variant.
- ``engine.kernels_cached`` / ``cold_start_reference`` read numba's cache index only:
  an empty cache directory is cold, and a small capture on it takes the reference path.

Each check runs in a child process (its own numba dispatchers, the test's cache
directory): in this process other tests have compiled other variants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4.pcap")

_VARIANTS = r"""
import json, sys
import gropcap
from gropcap.gro import _kernels as K
kw = json.loads(sys.argv[1])
gropcap.analyze(sys.argv[2], **kw)
print(json.dumps({"run_udp_arg": sorted({str(sig[-1]) for sig in K.run.signatures}),
                  "udp_receive_signatures": len(K._udp_receive.signatures)}))
"""

_COLD = r"""
import json, os, sys
from gropcap.gro import engine
print(json.dumps({"cached": engine.kernels_cached(),
                  "small": engine.cold_start_reference(os.path.getsize(sys.argv[1])),
                  "large": engine.cold_start_reference(engine.COLD_REFERENCE_MAX_BYTES + 1)}))
"""


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
                       timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_a_tcp_only_run_uses_the_kernel_without_udp_rules():
    got = _child(_VARIANTS, json.dumps({}), SAMPLE)
    assert got == {"run_udp_arg": ["none"], "udp_receive_signatures": 0}


def test_a_udp_gro_run_uses_the_kernel_with_udp_rules():
    got = _child(_VARIANTS, json.dumps({"udp_gro": "forward"}), SAMPLE)
    assert got["run_udp_arg"] == ["bool"], got


def test_an_empty_cache_is_cold_and_a_small_capture_takes_the_reference_path(tmp_path):
    got = _child(_COLD, SAMPLE, env={"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")})
    assert got == {"cached": False, "small": True, "large": False}


@pytest.mark.slow
def test_a_run_fills_the_cache_it_checks(tmp_path):
    # the kernels a TCP-only analysis compiles on a cold cache are what kernels_cached
    # looks for; and compiling ``run`` there did not compile the UDP rules
    cache = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    code = r"""
import json, sys
import gropcap
from gropcap.gro import _kernels as K, engine
before = engine.kernels_cached()
gropcap.analyze(sys.argv[1])
print(json.dumps({"before": before, "after": engine.kernels_cached(),
                  "udp_receive_signatures": len(K._udp_receive.signatures)}))
"""
    assert _child(code, SAMPLE, env=cache) == {"before": False, "after": True,
                                               "udp_receive_signatures": 0}
