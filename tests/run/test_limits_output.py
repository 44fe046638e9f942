"""Output safety, end to end through the CLI: atomic Parquet, --force, one-line I/O errors.

- an interrupted run (Ctrl-C, SIGTERM, SIGKILL) never leaves a half-written file under the
  output name (Ctrl-C also removes the hidden temporary file);
- existing outputs are not replaced without --force (``decode -o`` and ``analyze --out``);
- a full filesystem (a tiny tmpfs mounted by the test, root only) and a permission error
  (root without CAP_DAC_OVERRIDE via setpriv, or a plain user on a 0555 directory) are one
  clear line and exit status 1, with no temporary file left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gropcap.cli import main

from where import ROOT

ROOT = Path(ROOT)
REAL = str(ROOT / "sample_pcaps" / "real_ipv4.pcap")
SMALL = str(ROOT / "sample_pcaps" / "crafted_gre.pcap")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def cli(*args, **kw):
    """Run the CLI in a fresh interpreter: exit code, stdout, stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([*kw.pop("prefix", []), sys.executable, "-m", "gropcap.cli",
                        *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600, **kw)
    return p.returncode, p.stdout, p.stderr


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("gropcap: error:")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".gropcap-"))


# --- --force ---------------------------------------------------------------------------------

def test_analyze_out_refuses_to_replace_any_existing_output(tmp_path):
    """With one of the three outputs present, nothing is written and nothing replaced."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "flows.parquet").write_bytes(b"keep me")
    r = CliRunner().invoke(main, ["analyze", SMALL, "--out", str(out), "--format", "json"])
    assert r.exit_code == 1, r.output
    assert "output exists" in r.output and "--force" in r.output
    assert (out / "flows.parquet").read_bytes() == b"keep me"
    assert sorted(p.name for p in out.iterdir()) == ["flows.parquet"], \
        "outputs were written before the existing one was noticed"


def test_analyze_out_force_replaces_all(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "flows.parquet").write_bytes(b"old")
    r = CliRunner().invoke(main, ["analyze", SMALL, "--out", str(out), "--force",
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    for name in ("packets", "superpackets", "flows"):
        assert pq.read_table(out / f"{name}.parquet").num_rows > 0
    assert _leftovers(out) == []


# --- interrupted writes -------------------------------------------------------------------

_SLOW_WRITE = r"""
import os, sys, time
import pyarrow.parquet as pq
import gropcap.io.parquet as P

real = pq.write_table
def slow(table, where, **kw):
    # half a file, then stall as a slow disk would, until the signal arrives
    real(table, where, **kw)
    size = os.path.getsize(where)
    with open(where, "r+b") as f:
        f.truncate(size // 2)
    print("WRITING", where, flush=True)
    time.sleep(120)
P.pq.write_table = slow
from gropcap.cli import main
sys.argv = ["gropcap"] + sys.argv[1:]
main()
"""


def _interrupt_write(tmp_path, sig):
    """Start a decode whose Parquet write stalls half-way, send ``sig``; (rc, stderr)."""
    out = tmp_path / "p.parquet"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, "decode", SMALL, "-o",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        line = proc.stdout.readline()
        assert line.startswith("WRITING"), (line, proc.stderr.read() if proc.poll() else "")
        tmp = Path(line.split(maxsplit=1)[1].strip())
        assert tmp.parent == tmp_path and tmp.name.startswith(".gropcap-") and tmp.exists()
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not out.exists(), "a half-written file appeared under the output name"
    return rc, proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_write_leaves_no_partial_output(tmp_path, sig):
    rc, stderr = _interrupt_write(tmp_path, sig)
    if sig == signal.SIGINT:                 # Ctrl-C: one line, exit 130, temp file removed
        assert rc == 130 and "interrupted" in stderr and "Traceback" not in stderr
        assert _leftovers(tmp_path) == []


def test_sigterm_removes_the_temporary_file(tmp_path):
    _interrupt_write(tmp_path, signal.SIGTERM)
    assert _leftovers(tmp_path) == []


def test_kill_at_any_moment_never_exposes_a_partial_file(tmp_path):
    """SIGKILL at several moments of a real run: the output is absent or complete."""
    out = tmp_path / "p.parquet"
    import time

    for delay in (0.5, 1.0, 2.0, 3.0, 4.0):
        if out.exists():
            out.unlink()
        proc = subprocess.Popen([sys.executable, "-m", "gropcap.cli", "decode", REAL, SMALL,
                                 "-o", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
        time.sleep(delay)
        proc.kill()
        proc.wait()
        if out.exists():
            t = pq.read_table(out)        # complete and readable, never a torn file
            assert t.num_rows > 0


# --- disk full / permission denied ----------------------------------------------------------

@pytest.fixture
def tiny_tmpfs():
    """A 32 KiB tmpfs (root only): writing a Parquet file to it runs out of space."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs to fill needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount(8)")
    d = Path(tempfile.mkdtemp(prefix="gropcap-full-"))
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k,mode=0755", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount tmpfs: {p.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        os.rmdir(d)


@pytest.mark.root
def test_disk_full_is_one_line(tiny_tmpfs):
    out = tiny_tmpfs / "p.parquet"
    rc, stdout, stderr = cli("decode", REAL, "-o", out)
    assert rc == 1, (stdout, stderr)
    line = _one_error_line(stderr)
    assert str(out) in line and "No space left on device" in line, line
    assert not out.exists() and _leftovers(tiny_tmpfs) == []


@pytest.mark.root
def test_disk_full_analyze_out_is_one_line(tiny_tmpfs):
    rc, stdout, stderr = cli("analyze", REAL, "--out", tiny_tmpfs, "--format", "json")
    assert rc == 1, (stdout, stderr)
    line = _one_error_line(stderr)
    assert "No space left on device" in line, line
    assert _leftovers(tiny_tmpfs) == []


def _no_dac_prefix() -> list[str]:
    """Run as root without the capabilities that bypass file permissions."""
    if not IS_ROOT:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root bypasses permissions and setpriv is not installed to drop them")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
            "--inh-caps=-dac_override,-dac_read_search"]


def test_permission_denied_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    out = locked / "p.parquet"
    try:
        rc, stdout, stderr = cli("decode", SMALL, "-o", out, prefix=_no_dac_prefix())
    finally:
        locked.chmod(0o755)
    assert rc == 1, (stdout, stderr)
    line = _one_error_line(stderr)
    assert str(out) in line and "Permission denied" in line, line
    assert not out.exists() and _leftovers(locked) == []


def test_output_is_a_directory_is_one_line(tmp_path):
    """``-o`` naming an existing directory: click refuses it as bad usage (exit 2)."""
    rc, stdout, stderr = cli("decode", SMALL, "-o", tmp_path)
    assert rc == 2 and "Traceback" not in stderr, stderr
