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
