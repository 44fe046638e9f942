"""The garbage collector while a command starts (``gropcap.collector``).

The console script holds the collector from its first moment, so start-up's imports
and kernel loading run without the 180 or so collections they made (a tenth of a warm
run's CPU); the run releases it where its long part starts, and every other command
releases it when it is invoked. A held collector that nothing releases would let a long
run's cyclic garbage grow without bound, so each case checks that it is on again by the
end; a compile releases it at once (a cold compile held 133 MB more).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

from gropcap import collector

from where import ROOT, SAMPLES

SAMPLE = os.path.join(SAMPLES, "real_ipv4.pcap")

# runs the console script's main() with ARGS, and at exit writes what the collector
# did to OUT: the collections (whether the collector was held at each), how many came
# before each call of collector.hold and collector.release, and its state at the end
DRIVER = r"""
import atexit, gc, json, sys
from gropcap import collector
out, args = sys.argv[1], sys.argv[2:]
seen, holds, releases = [], [], []

def on_gc(phase, info):
    if phase == "start":
        seen.append([info["generation"], collector.held()])

def hold(_hold=collector.hold):
    holds.append(len(seen))
    _hold()

def release(_release=collector.release):
    releases.append(len(seen))
    _release()

gc.callbacks.append(on_gc)
collector.hold, collector.release = hold, release

def report():
    with open(out, "w") as f:
        json.dump({"collections": seen, "holds": holds, "releases": releases,
                   "enabled": gc.isenabled(),
                   "held": collector.held(), "frozen": gc.get_freeze_count()}, f)

atexit.register(report)
sys.argv = ["gropcap"] + args
from gropcap.__main__ import main
main()
"""


def _run(tmp_path, *args) -> dict:
    out = tmp_path / "gc.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(out), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_analyze_starts_without_collections_and_ends_with_the_collector_on(tmp_path):
    got = _run(tmp_path, "analyze", SAMPLE, "--format", "json", "--engine", "fast")
    # nothing collected before the run released the collector (after its first batch,
    # or at a compile on a cold cache); start-up made about 180 collections before
    assert got["holds"] and got["releases"], got
    assert got["releases"][0] == got["holds"][0], got
    assert not [c for c in got["collections"] if c[1]]
    # start-up's objects frozen, the collector on at the end
    assert got["enabled"] and not got["held"] and got["frozen"] > 10000


def test_other_commands_run_with_the_collector_on(tmp_path):
    got = _run(tmp_path, "decode", SAMPLE, "-o", str(tmp_path / "p.parquet"))
    assert got["enabled"] and not got["held"]
    assert not [c for c in got["collections"] if c[1]]


@pytest.fixture
def restored_gc():
    was = gc.isenabled()
    yield
    collector.release()
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_hold_and_release(restored_gc):
    gc.enable()
    frozen = gc.get_freeze_count()
    collector.hold()
    assert not gc.isenabled() and collector.held()
    collector.release()
    assert gc.isenabled() and not collector.held()
    assert gc.get_freeze_count() >= frozen
    collector.release()                  # a second release changes nothing
    assert gc.isenabled()
    # whoever turned the collector off turns it on: hold and release leave it off
    gc.disable()
    collector.hold()
    assert not collector.held()
    collector.release()
    assert not gc.isenabled()


def test_a_compile_releases_the_collector(restored_gc):
    import numba

    gc.enable()
    collector.hold()
    collector.release_on_compile()

    def add_one(x):
        return x + 1

    assert not gc.isenabled()
    assert numba.njit(add_one)(1) == 2       # compiles here (no cache)
    assert gc.isenabled() and not collector.held()
