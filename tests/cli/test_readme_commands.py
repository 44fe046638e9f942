"""The README's two quick-start commands, as a new user types them.

Regression: `pip install -e '.[test]' && pytest` stopped with 13 collection errors
(`No module named 'tests'`), because only `python -m pytest` put the checkout on sys.path
and CI used that form. CI must run the README's command verbatim.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from where import TESTS

ROOT = Path(TESTS).parent


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim():
    install_and_run, install_and_test = _readme_commands()[:2]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install_and_test in ci, f".ci/run does not run {install_and_test!r}"
    assert install_and_run.endswith("gropcap analyze sample_pcaps/real_ipv4.pcap")


def test_bare_pytest_collects_without_the_checkout_on_sys_path():
    # The `pytest` console script (unlike `python -m pytest`) does not add the current
    # directory to sys.path: collection must still import `tests.craft`.
    script = Path(sys.executable).with_name("pytest")
    exe = str(script) if script.exists() else shutil.which("pytest")
    if exe is None:
        pytest.skip("no pytest console script next to this interpreter or on PATH")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([exe, "--co", "-q", "-p", "no:cacheprovider",
                          "tests/report/test_explain.py", "tests/gro/test_gro_rules.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "error" not in out.stdout.splitlines()[-1].lower()
