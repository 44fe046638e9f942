"""How a finished command ends its process (``gropcap.interrupt.run_command``): with its
exit status, its output flushed and the atexit callbacks run, but without the
interpreter's finalization (``exit_now``: 0.17-0.21 s of a warm run), unless a thread
that is not a daemon still runs, which the interpreter then waits for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from where import ROOT, SAMPLES

CHILD = """
import atexit, sys, threading, time
from gropcap.interrupt import run_command


class Noisy:
    def __del__(self):                 # runs in the interpreter's finalization only
        sys.stdout.write("finalized\\n")


keep = Noisy()
atexit.register(lambda: sys.stdout.write("atexit ran\\n"))


def main():
    sys.stdout.write("x" * 100000 + "\\n")     # more than a pipe's buffer: flushed at exit
    if sys.argv[1] == "thread":
        def late():
            time.sleep(0.3)
            sys.stdout.write("thread done\\n")
        threading.Thread(target=late).start()
    raise SystemExit(int(sys.argv[2]))


run_command(main)
"""


def _child(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_a_finished_command_skips_the_interpreter_teardown():
    for status in (0, 1, 2):
        p = _child("plain", str(status))
        assert p.returncode == status, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0] == "x" * 100000 and "atexit ran" in lines
        assert "finalized" not in lines


def test_a_running_thread_is_waited_for_as_python_does():
    p = _child("thread", "3")
    assert p.returncode == 3, p.stderr
    lines = p.stdout.splitlines()
    assert "thread done" in lines and "atexit ran" in lines and "finalized" in lines


def _gropcap(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "gropcap", *args], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)


def test_the_command_line_output_is_whole_and_the_status_kept():
    run = _gropcap
    ok = run("analyze", f"{SAMPLES}/real_ipv4.pcap", "--format", "json", "-q")
    assert ok.returncode == 0 and json.loads(ok.stdout)["packets"] == 2373
    missing = run("analyze", f"{SAMPLES}/does-not-exist.pcap")
    assert missing.returncode == 1 and "no such file" in missing.stderr
    usage = run("analyze", "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr
    assert run("--version").stdout.startswith("gropcap, version")
