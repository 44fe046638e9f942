"""The fuzz regression corpus: every hostile input in ``tests/fuzz/corpus/`` replayed.

Each file goes through every capture engine, both decoders and (when it decodes) both
GRO engines with the full invariant check of ``tests/fuzz/harness.py``, and its outcome is
compared with the expectation written when the input was made (``MANIFEST.json``, built
by ``tests/fuzz/make_corpus.py`` from where it put the damage) or found (``found.json``:
inputs from fuzz runs, with what was broken and what the fix made of them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz import harness as H

CORPUS = H.CORPUS
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())
FOUND_FILE = CORPUS / "found.json"
FOUND = json.loads(FOUND_FILE.read_text()) if FOUND_FILE.exists() else {}
CASES = {**MANIFEST, **{k: v["expect"] for k, v in FOUND.items()}}


def test_corpus_is_complete():
    """Every file has an expectation and every expectation a file (no silent drops)."""
    files = {p.name for p in CORPUS.iterdir() if p.name not in ("MANIFEST.json", "found.json")}
    assert files == set(CASES)
    assert len(MANIFEST) >= 25


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_input(name):
    expect = CASES[name]
    path = CORPUS / name
    out = H.check_capture_file(path, gro=True)
    if "error" in expect:
        assert expect["error"] in out.error, out.error
        assert out.records == 0
        if "offset" in expect:
            assert f"byte offset {expect['offset']}" in out.error, out.error
        if "record" in expect:
            assert f"record {expect['record']}" in out.error, out.error
        if expect.get("truncated"):
            from gropcap.capture.reader import read_capture
            from gropcap.errors import CaptureTruncatedError

            with pytest.raises(CaptureTruncatedError):
                read_capture(path)
        return
    assert out.error == "", out.error
    if "records" in expect:
        assert out.records == expect["records"]
    if "records_at_most" in expect:
        assert out.records <= expect["records_at_most"]
    if "status" in expect:
        assert out.statuses == expect["status"]
    if "warning" in expect:
        from gropcap.capture.reader import read_capture

        info, _ = read_capture(path)
        assert any(expect["warning"] in w for w in info.warnings), info.warnings


def test_corpus_is_reproducible(tmp_path):
    """make_corpus.py rebuilds the generated files byte for byte (the corpus is not a
    snapshot of unknown provenance)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus",
                                                  CORPUS.parent / "make_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built = mod.build()
    assert set(built) == set(MANIFEST)
    for name, (data, expect) in built.items():
        assert (CORPUS / name).read_bytes() == data, name
        assert MANIFEST[name] == json.loads(json.dumps(expect)), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_input_through_the_cli(tmp_path, name):
    """``gropcap analyze`` on each hostile input: a report (exit 0) or one located error
    line (exit 1), never a traceback; the JSON summary counts every record."""
    from click.testing import CliRunner

    from gropcap.cli import main

    expect = CASES[name]
    path = CORPUS / name
    r = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--out",
                                  str(tmp_path / "out")])
    assert isinstance(r.exception, (SystemExit, type(None))), r.exception
    if "error" in expect:
        assert r.exit_code == 1
        errors = [ln for ln in r.output.splitlines() if ln.startswith("gropcap: error:")]
        assert len(errors) == 1 and str(path) in errors[0], r.output
        assert not (tmp_path / "out").exists()
        return
    assert r.exit_code == 0, r.output
    text = r.stdout[r.stdout.index("{"):]
    summary = json.loads(text)
    if "records" in expect:
        assert summary["packets"] == expect["records"]
    if "status" in expect:
        assert summary["status"] == expect["status"]
