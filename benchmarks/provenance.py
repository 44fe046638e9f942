"""The commit a benchmark result was measured on (every ``results/*.json`` records it)."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*a) -> str:
    try:
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def commit() -> dict:
    """``commit`` (short sha, "unknown" outside a checkout), ``commit_full`` and ``dirty``
    (tracked files changed since that commit)."""
    return {"commit": _git("rev-parse", "--short", "HEAD") or "unknown",
            "commit_full": _git("rev-parse", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}
