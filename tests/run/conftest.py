"""Shared fixtures of the run/ tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def stream_calls(monkeypatch) -> list:
    """The keyword arguments of every ``run.stream.stream_analyze`` call (a bounded-memory
    run) while the test runs; the calls go through."""
    import gropcap.run.stream as streaming
    calls: list = []
    real = streaming.stream_analyze

    def spy(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)
    monkeypatch.setattr(streaming, "stream_analyze", spy)
    return calls


@pytest.fixture
def reference_decodes(monkeypatch) -> list:
    """The record count of every batch ``decode.reference.decode_batch`` decodes while
    the test runs (in this process, its threads included); the calls go through."""
    import gropcap.decode.reference as ref
    calls: list = []
    real = ref.decode_batch

    def counted(batch, *args, **kw):
        calls.append(len(batch.offset))
        return real(batch, *args, **kw)
    monkeypatch.setattr(ref, "decode_batch", counted)
    return calls


@pytest.fixture
def decode_passes(monkeypatch) -> list:
    """One entry per decode pass (``run.stream._decode_pass``) a run makes while the
    test runs: a fused run makes one, a run that starts over unfused two."""
    import gropcap.run.stream as streaming
    passes: list = []
    real = streaming._decode_pass

    def counted(*args, **kw):
        passes.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(streaming, "_decode_pass", counted)
    return passes
