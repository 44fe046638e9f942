"""A first run on a cold numba cache compiles the decoder's kernels in its own process and
the GRO and counting kernels in a helper process at the same time (``run.warm``): when a
helper starts, and that it never outlives the run. What a cold run compiles where, and
that its results are a warm run's, is tested from the command line on a fresh
NUMBA_CACHE_DIR with the other first-run checks (tests/cli/test_cold_cache.py)."""

from __future__ import annotations

import os

import pytest

from gropcap.run import warm

from where import SAMPLES

SAMPLE = os.path.join(SAMPLES, "real_ipv4_p4.pcap")


def test_no_helper_on_a_warm_cache_one_cpu_a_fifo_or_when_switched_off(monkeypatch,
                                                                      tmp_path):
    """The conditions of ``wanted``: the test session's cache is warm (conftest), so no
    helper; with a cold cache none either for one CPU, a FIFO or the switch off."""
    assert not warm.wanted([SAMPLE])                 # the kernels are cached
    import gropcap.gro.engine as E
    monkeypatch.setattr(E, "kernels_cached", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert warm.wanted([SAMPLE])
    monkeypatch.setenv(warm.HELPER_ENV, "0")
    assert not warm.wanted([SAMPLE])
    monkeypatch.delenv(warm.HELPER_ENV)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not warm.wanted([SAMPLE])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert not warm.wanted([SAMPLE, str(fifo)])
    assert not warm.wanted([])
    assert warm.compile_alongside([str(tmp_path / "missing.pcap")], None, (), None) is False


def test_the_helper_is_killed_and_its_files_removed_when_the_run_stops(monkeypatch):
    """An interrupt (or any error) while this process compiles kills the helper and
    removes the helper's capture: nothing outlives the run."""
    monkeypatch.setattr(warm, "wanted", lambda files: True)
    import multiprocessing.context as mpc
    started = []
    real_start = mpc.SpawnProcess.start

    def start(self):
        started.append(self)
        return real_start(self)
    monkeypatch.setattr(mpc.SpawnProcess, "start", start)
    made = []
    real_mkdtemp = warm.tempfile.mkdtemp
    monkeypatch.setattr(warm.tempfile, "mkdtemp",
                        lambda **k: made.append(real_mkdtemp(**k)) or made[-1])

    def interrupted():
        raise KeyboardInterrupt
    import gropcap.decode.fast as F
    monkeypatch.setattr(F, "warm_up", interrupted)
    from gropcap.gro.config import GroConfig
    with pytest.raises(KeyboardInterrupt):
        warm.compile_alongside([SAMPLE], GroConfig(), ("napi",), None)
    assert len(started) == 1 and not started[0].is_alive()        # killed, reaped
    assert started[0].exitcode is not None
    assert made and not os.path.exists(made[0])


@pytest.mark.parametrize("name", ["real_ipv4_p4.pcap", "crafted_two_ifaces.pcapng"])
def test_the_helper_reads_the_first_records_of_the_input(tmp_path, name):
    """The helper's capture: the first HELPER_RECORDS records of the input, bytes, times
    and lengths as they are, every link type kept; a pcap input gives a pcap file (the
    scan kernel the run has compiled already)."""
    from gropcap.capture.scan import iter_scan_batches
    path = os.path.join(SAMPLES, name)
    out = warm._prefix_capture(path, str(tmp_path / "first"))
    assert warm._is_pcap(out) == name.endswith(".pcap")
    (_, want), = [x for x in iter_scan_batches(path, batch_records=warm.HELPER_RECORDS,
                                                digest=False)][:1]
    (_, got), = list(iter_scan_batches(out, digest=False))
    assert len(got) == min(len(want), warm.HELPER_RECORDS) > 0
    assert [got.frame(i) for i in range(len(got))] == \
        [want.frame(i) for i in range(len(got))]
    assert list(got.ts_ns) == list(want.ts_ns[:len(got)])
    assert list(got.wire_len) == list(want.wire_len[:len(got)])
    assert list(got.linktype) == list(want.linktype[:len(got)])
