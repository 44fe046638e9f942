"""Every output target is checked before the first packet is read: one line, exit 1 (a
bad --plot file type or an --out that is a file: bad usage, exit 2), nothing left behind.

"Before the first packet": the input here is a damaged capture, so a run that read it
would fail on the capture instead of naming the output.
Regression: `--plot /nonexistent/p.png` ended in a traceback after the whole run (the
report lost); `--out` into an existing or unwritable directory failed after the run.
"""

from __future__ import annotations

import os
import stat

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gropcap.cli import main

from where import ROOT

SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
NAMES = ("packets.parquet", "superpackets.parquet", "flows.parquet")


@pytest.fixture
def damaged(tmp_path):
    p = tmp_path / "damaged.pcap"
    p.write_bytes(b"not a capture at all, and long enough to be sniffed" * 4)
    return str(p)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error(r, code=1):
    assert r.exit_code == code, (r.exit_code, r.output)
    assert "Traceback" not in r.output and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gropcap: error: "), r.stderr
    return lines[0]


def _no_staging(d):
    return [n for n in os.listdir(d) if ".gropcap-" in n or n.startswith(".gropcap")]


def _unwritable_dir(tmp_path):
    """A directory this process cannot create files in (root ignores modes: sysfs)."""
    if os.geteuid() == 0:
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("root bypasses directory modes and /sys/kernel is absent")
        return "/sys/kernel"
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return str(d)


def test_out_existing_outputs_refused_before_reading(tmp_path, damaged):
    out = tmp_path / "out"
    out.mkdir()
    (out / "superpackets.parquet").write_bytes(b"keep")
    line = _one_error(run("analyze", damaged, "--out", out))
    assert line == (f"gropcap: error: {out / 'superpackets.parquet'}: output exists; "
                    "use --force to replace it")
    assert sorted(os.listdir(out)) == ["superpackets.parquet"]


def test_out_missing_parent_refused_before_reading(tmp_path, damaged):
    out = tmp_path / "no" / "such" / "out"
    line = _one_error(run("analyze", damaged, "--out", out))
    assert line == (f"gropcap: error: {out}: cannot write: directory {out.parent} does not "
                    f"exist; create it first or choose another path")
    assert os.listdir(tmp_path) == ["damaged.pcap"]


@pytest.mark.parametrize("option,name", [("--out", "out"), ("--plot", "p.png")])
def test_unwritable_directory_refused_before_reading(tmp_path, damaged, option, name):
    target = os.path.join(_unwritable_dir(tmp_path), name)
    line = _one_error(run("analyze", damaged, option, target))
    assert line.startswith(f"gropcap: error: {target}: cannot write: "), line


def test_out_that_is_a_file_is_bad_usage(tmp_path, damaged):
    f = tmp_path / "f"
    f.write_bytes(b"")
    r = run("analyze", damaged, "--out", f)
    assert r.exit_code == 2 and "--out" in r.stderr


def test_plot_missing_directory_refused_before_reading(tmp_path, damaged):
    line = _one_error(run("analyze", damaged, "--plot", "/nonexistent-gropcap/p.png"))
    assert line == ("gropcap: error: /nonexistent-gropcap/p.png: cannot write: directory "
                    "/nonexistent-gropcap does not exist; create it first or choose another "
                    "path")


def test_plot_existing_needs_force_and_bad_type_is_usage(tmp_path, damaged):
    p = tmp_path / "p.png"
    p.write_bytes(b"old")
    line = _one_error(run("analyze", damaged, "--plot", p))
    assert line == f"gropcap: error: {p}: output exists; use --force to replace it"
    r = run("analyze", damaged, "--plot", tmp_path / "p.pdf")
    assert r.exit_code == 2 and "--plot" in r.stderr and ".png or .svg" in r.stderr


def test_decode_and_baseline_outputs_checked_before_reading(tmp_path, damaged):
    existing = tmp_path / "x.parquet"
    existing.write_bytes(b"old")
    assert _one_error(run("decode", damaged, "-o", existing)) == \
        f"gropcap: error: {existing}: output exists; use --force to replace it"
    assert "does not exist" in _one_error(run("decode", damaged, "-o", tmp_path / "n" / "x"))
    assert "does not exist" in _one_error(
        run("baseline", "save", damaged, "-o", tmp_path / "n" / "b.json"))
    base = tmp_path / "b.json"
    base.write_text("{}")
    assert _one_error(run("baseline", "save", damaged, "-o", base)) == \
        f"gropcap: error: {base}: output exists; use --force to replace it"
    assert _no_staging(tmp_path) == []


def test_failed_run_leaves_no_out_directory_nor_staging(tmp_path, damaged):
    """The outputs pass the check, the capture then fails: nothing stays."""
    out = tmp_path / "out"
    line = _one_error(run("analyze", damaged, "--out", out, "--plot", tmp_path / "p.png"))
    assert damaged in line
    assert sorted(os.listdir(tmp_path)) == ["damaged.pcap"]


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_force_replaces_every_output_and_new_dir_follows_umask(tmp_path, stream):
    out = tmp_path / "out"
    r = run("analyze", SAMPLE, "--out", out, stream, "--format", "json")
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~_umask()
    r = run("analyze", SAMPLE, "--out", out, stream, "--format", "json")
    assert r.exit_code == 1 and "output exists" in r.stderr
    r = run("analyze", SAMPLE, "--out", out, stream, "--format", "json", "--force")
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(out)) == sorted(NAMES)
    for n in NAMES:
        assert pq.read_metadata(out / n).num_rows > 0
    assert _no_staging(tmp_path) == [] and _no_staging(out) == []


def test_plot_written_with_open_mode(tmp_path):
    p = tmp_path / "p.png"
    r = run("analyze", SAMPLE, "--plot", p, "--model", "ideal")
    assert r.exit_code == 0, r.output
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~_umask()
    assert r.stderr.splitlines()[-1].endswith(f"wrote {p}")


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m
