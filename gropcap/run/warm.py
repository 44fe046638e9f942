"""A first run on a cold numba cache compiles in two processes at once (issue 14).

Layer: run/, beside ``run.stream``; :func:`gropcap.run.core.analyze_run` calls
:func:`compile_alongside` before the bounded-memory core when the command line asks
(``compile_helper``).

On a cold cache a run compiles every kernel it calls, one after the other (about 30 s
of CPU: the decoder kernel a third, the GRO and counting kernels the rest) while the
second core idles. numba compiles under one lock per process, so a thread cannot help; a
process can. A helper process runs the same analysis over the first
:data:`HELPER_RECORDS` records of the first input with the reference decoder and the
fast engine, so the GRO and counting kernels compile there and not the decoder's,
while this process compiles the decoder's (``decode.fast.warm_up``). This process then
waits for the helper and loads the kernels it compiled from the cache (numba writes a
cache file under a temporary name and renames it). A kernel the helper did not need
(say the UDP rules, absent from the first records) still compiles here when the run
needs it: the helper changes how long a first run takes, never what it computes.

Nothing happens with a warm cache (``gro.engine.kernels_cached``), with one CPU, for an
input that is not a regular file, or with ``GROPCAP_COMPILE_HELPER=0``.
"""

from __future__ import annotations

import os
import sys
import tempfile

HELPER_RECORDS = 4096     # records of the first input the helper analyses
HELPER_WAIT_S = 600       # at most this long a wait for the helper, then the run goes on
HELPER_ENV = "GROPCAP_COMPILE_HELPER"


def wanted(files: list[str]) -> bool:
    """Whether a helper would save time: a cold cache, two CPUs or more, regular input
    files, not switched off by :data:`HELPER_ENV`."""
    if os.environ.get(HELPER_ENV, "1") == "0" or not files:
        return False
    if not all(os.path.isfile(f) for f in files):
        return False
    from gropcap.run.threads import default_threads
    if default_threads() < 2:                       # fewer than two CPUs for the process
        return False
    from gropcap.gro.engine import kernels_cached
    return not kernels_cached()


def compile_alongside(paths, config, models, decode_options, *, out_dir=None, egress=None,
                      packet_columns="default", threads=None) -> bool:
    """Compile the decoder's kernels here and the rest in a helper process, both at once,
    when :func:`wanted`; returns whether a helper ran. The helper is killed if this
    process stops first (an error, an interrupt). Inputs that cannot be read are left
    to the run, which reports them.

    The helper is a ``multiprocessing`` "spawn" process: a fresh interpreter with this
    one's ``sys.path`` (the very source this run compiles) and environment (its numba
    cache directory)."""
    from gropcap.errors import GropcapError
    from gropcap.run.inputs import input_files
    try:
        files = input_files(paths)
    except (GropcapError, OSError, ValueError):
        return False
    if not wanted(files):
        return False
    import multiprocessing
    import shutil
    work = tempfile.mkdtemp(prefix="gropcap-warm-")
    proc = None
    try:
        prefix = _prefix_capture(files[0], os.path.join(work, "first"))
        if prefix is None:
            return False
        job = dict(path=prefix, config=config, models=tuple(models),
                   decode_options=decode_options, egress=egress,
                   packet_columns=packet_columns, threads=threads,
                   out_dir=os.path.join(work, "out") if out_dir else None)
        proc = multiprocessing.get_context("spawn").Process(
            target=helper_main, args=(job,), name="gropcap-compile-helper", daemon=True)
        _start_clean(proc)
        from gropcap.decode.fast import warm_up
        warm_up()
        _count_kernels(prefix, decode_options)
        from gropcap.gro import fused
        fused.warm_up()             # the single pass (the helper's run takes the engine)
        proc.join(HELPER_WAIT_S)   # a helper still busy then is killed; the run compiles
        return True
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join()
        shutil.rmtree(work, ignore_errors=True)


def _count_kernels(prefix: str, decode_options) -> None:
    """The capture-level counting kernels compiled (or loaded) here, on the helper's
    capture decoded by the fast decoder this process has just compiled: the helper
    reaches them last, after the GRO kernels, and finds them in the cache instead of
    compiling them while this process waits (about 3 s of a first run)."""
    from gropcap.gro.coalesced import CoalescedStats
    from gropcap.run.accumulators import CaptureCounts
    from gropcap.run.inputs import decode_table
    table, _ = decode_table(prefix, 0, decode_options, decoder="fast")
    CaptureCounts().add(table)
    CoalescedStats().add(table)


def _start_clean(proc) -> None:
    """Start ``proc`` with /dev/null as its stdout and stderr from its first instruction,
    and without this process's ``__main__``.

    Ctrl-C on a terminal goes to the whole process group, and the helper must not print
    a traceback of its own (this process reports the interrupt and stops the helper);
    this process's own descriptors are back before anything can print on them. A
    "spawn" child runs the parent's main module again (as ``__mp_main__``) before its
    target: a script that calls the command line without a ``__name__`` guard would run
    twice. The child's preparation data is taken from ``sys.modules["__main__"]`` when
    ``start`` is called, so an empty module stands there meanwhile: the child imports
    only ``helper_main``'s own module."""
    import types
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    main = sys.modules["__main__"]
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.modules["__main__"] = types.ModuleType("__main__")
        proc.start()
    finally:
        sys.modules["__main__"] = main
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


def _prefix_capture(path: str, out: str) -> str | None:
    """The first :data:`HELPER_RECORDS` records of ``path`` as a capture file (pcap
    for a pcap input, else pcapng with one interface per link type), or None when it has
    none or cannot be read here (the run itself reports why)."""
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.capture.writer import write_pcap, write_pcapng
    from gropcap.errors import GropcapError
    try:
        batch = next(iter(b for _, b in iter_scan_batches(path, batch_records=HELPER_RECORDS,
                                                          digest=False)), None)
    except (GropcapError, OSError, ValueError):
        return None
    if batch is None or not len(batch):
        return None
    linktypes = sorted({int(x) for x in batch.linktype})
    frames = [batch.frame(i) for i in range(len(batch))]
    ts, wire = [int(t) for t in batch.ts_ns], [int(w) for w in batch.wire_len]
    try:
        if len(linktypes) == 1 and _is_pcap(path):
            # the scan kernel this run loaded (or compiled) above: none more to compile
            write_pcap(out, frames, ts, linktype=linktypes[0], nanosecond=True,
                       wire_lens=wire)
        else:
            write_pcapng(out, frames, ts, linktypes=linktypes, wire_lens=wire,
                         ifaces=[linktypes.index(int(x)) for x in batch.linktype])
    except (OSError, ValueError):     # e.g. a timestamp before 1970: no helper, no harm
        return None
    return out


def _is_pcap(path: str) -> bool:
    """Whether ``path`` is a plain (uncompressed) classic pcap file."""
    from gropcap.capture.reader import sniff_format
    with open(path, "rb") as f:
        return sniff_format(f.read(6)) == "pcap"


def helper_main(job: dict) -> None:
    """The helper process (:func:`compile_alongside`): the job's analysis, its results
    discarded, its messages in /dev/null (:func:`_start_clean`); only the kernels it
    compiled into the cache matter."""
    from gropcap.run.stream import stream_analyze
    stream_analyze([job["path"]], job["config"], models=job["models"],
                   decode_options=job["decode_options"], out_dir=job["out_dir"], force=True,
                   egress=job["egress"], packet_columns=job["packet_columns"],
                   threads=job["threads"], decoder="reference", engine="fast")
