"""The one entry of an analysis run: inputs -> decoded batches -> GRO -> accumulators ->
sinks, whatever runs it.

:func:`analyze_run` is what ``gropcap analyze`` calls. It checks the options once
(``run.options``), then runs the core in one of three ways, each counting into the same
``run.accumulators.Totals`` that ``report/`` renders:

* **batch by batch, bounded memory** (the default): ``run.stream.stream_analyze``: decoded
  batches, GRO with the engine state carried from batch to batch, the Parquet writers as
  sinks; returns a ``run.stream.StreamResult``;
* **collected in memory**: ``run.memory.analyze`` (what ``gropcap.analyze`` returns, the
  core with a collecting sink): when asked (``in_memory``), or when the run uses what only
  the whole-table models implement today (``run.options.memory_reason``: the reference
  engine); returns an ``Analysis`` and writes the sinks
  from it. Plots come from either (``run.plotdata``);
* **on Dask** (``jobs``/``scheduler``): ``run.dask_core.analyze_partitioned``, the
  bounded-memory core per partition, workers writing their own Parquet parts, the
  accumulators merged on the client; returns a ``run.dask_core.PartitionedResult``.
  Asked to collect in memory (``in_memory``), for what the core does not model
  (``memory_reason``), and when the data needs it (``analyze_partitioned``'s fallback),
  ``run.distributed.analyze_distributed`` merges the partitions in memory instead and
  returns a ``DistributedAnalysis``.

Every way gives the same summary, flows and Parquet rows (tests/run/test_stream.py,
tests/run/test_runner.py, tests/run/test_stream_cli.py).

Layer: above run/memory.py, run/stream.py and run/distributed.py, below cli/ and api.py;
the plot sink is passed in by the caller (the CLI's is ``report.plots.save_plots``).
"""

from __future__ import annotations

import os

from gropcap.gro.config import MODELS
from gropcap.run.options import memory_reason, run_options


def analyze_run(paths, config=None, *, models=MODELS, decode_options=None,
                engine: str = "fast", decoder: str = "fast", egress=None,
                out_dir: str | None = None, plot=None, force: bool = False,
                in_memory: bool = False, jobs: int | None = None,
                scheduler: str | None = None, scratch=None, progress=None, receiver=None,
                receive=None, packet_columns="default", threads: int | None = None,
                captures: str = "auto", parallel: str = "workers",
                compile_helper: bool = False):
    """Analyse captures and write the requested sinks.

    Args:
        paths, config, models, decode_options, engine, decoder, egress, receiver: as
            :func:`gropcap.run.memory.analyze`.
        out_dir: write ``packets.parquet``, ``superpackets.parquet``, ``flows.parquet``
            there (``force``: replace existing files).
        plot: the plot sink, a callable given a ``run.plotdata.PlotData`` (a bounded-memory
            run's) or the collected :class:`Analysis` (the CLI passes
            ``report.plots.save_plots`` bound to its ``--plot`` file: it takes either).
        in_memory: collect the whole run in memory (an :class:`Analysis`) even when it
            could run in bounded memory.
        jobs, scheduler, scratch: run on Dask (``run.dask_core.analyze_partitioned``, or
            ``run.distributed.analyze_distributed`` with ``in_memory``).
        receive: the :class:`gropcap.receive.context.ReceiveContext` the summary reports (the
            CLI's: which option was typed); None: from ``config``.
        packet_columns: the columns of ``packets.parquet``: ``"default"``, ``"all"`` or
            a list (``io.columns.parse_packet_columns``).
        parallel: how ``jobs`` (local, without ``scheduler``) uses its cores when the run
            is one the bounded-memory core models: ``"workers"`` (Dask worker processes,
            what Python callers get by default), ``"threads"`` (``jobs`` threads in one
            process) or ``"auto"`` (:func:`jobs_way`, what ``gropcap analyze --jobs``
            does); the choice and its reason go to ``progress.note``.
        threads: the threads of a bounded-memory run (``run.stream.stream_analyze``;
            None: ``run.threads.default_threads``); the other ways ignore it.
        captures: how several input files map to receiver runs (``--captures``:
            ``"auto"``, ``"continuous"``, ``"separate"``; ``run/receivers.py``), the same
            in every way of running.
        compile_helper: on a cold numba cache, compile the GRO kernels in a helper
            process while this one compiles the decoder's (``run.warm``; what the
            command line asks).

    Returns:
        An ``Analysis`` (in memory or Dask) or a ``run.stream.StreamResult`` (bounded
        memory, or its ``run.dask_core.PartitionedResult`` on Dask);
        ``report.summary.report_dict`` / ``render_text`` take either.
    """
    config, decode_options, models = run_options(config, decode_options, models,
                                                 decoder=decoder, engine=engine,
                                                 egress=egress, captures=captures)
    from gropcap.receive.profile import resolve_receiver
    config, receiver = resolve_receiver(config, receiver)
    why = memory_reason(config, engine=engine, decoder=decoder, egress=egress)
    if jobs is not None and scheduler is None and not (in_memory or why):
        way, reason = jobs_way(paths, config, models, jobs, parallel, captures,
                               summary_only=not out_dir)
        if progress is not None:
            progress.note(f"--jobs {jobs}: {reason}")
        if way == "threads":
            threads, jobs = jobs, None
    distributed = jobs is not None or scheduler is not None
    from gropcap import collector
    if not (distributed or in_memory or why):
        from gropcap.run.stream import stream_analyze
        collector.release_on_compile()     # (the stream releases it after its first batch)
        if compile_helper and decoder == "fast":
            from gropcap.run.warm import compile_alongside
            compile_alongside(paths, config, models, decode_options, out_dir=out_dir,
                              egress=egress, packet_columns=packet_columns, threads=threads)
        result = stream_analyze(paths, config, models=models, decode_options=decode_options,
                                out_dir=out_dir, force=force, progress=progress,
                                egress=egress, receiver=receiver, receive=receive,
                                packet_columns=packet_columns, threads=threads,
                                captures=captures, plot=plot is not None)
        if plot is not None:
            from gropcap.run.progress import phase
            with phase(progress, "plotting", 1, "files") as advance:
                plot(result.plot_data)
                advance(1)
        return result
    collector.release()
    if distributed:
        from gropcap.analysis import Analysis
        from gropcap.run.dask_core import analyze_partitioned, partitioned_reason
        from gropcap.run.distributed import analyze_distributed

        def in_memory_merge(client=None, why=None):
            # what the core per partition does not cover yet (docs/scale.md)
            if config.poll_acks:
                from gropcap.errors import ConfigError
                raise ConfigError(
                    "--poll-acks reads the whole capture (an ACK follows the data it "
                    f"closes): the in-memory Dask merge does not run it ({why or 'asked'})",
                    hint="drop --jobs/--scheduler, or --poll-acks, or give the workers a "
                         "shared --scratch")
            if why and progress is not None:
                progress.note(f"{why}: the partitions are merged in memory")
            return analyze_distributed(paths, config, client=client, jobs=jobs,
                                       scheduler=scheduler, models=models,
                                       decode_options=decode_options, engine=engine,
                                       decoder=decoder, egress=egress, scratch=scratch,
                                       progress=progress, captures=captures)
        why_merge = partitioned_reason(config, engine=engine, decoder=decoder,
                                       egress=egress, plot=plot is not None)
        if not in_memory and why_merge is None:
            result = analyze_partitioned(
                paths, config, jobs=jobs, scheduler=scheduler, models=models,
                decode_options=decode_options, out_dir=out_dir, force=force,
                scratch=scratch, progress=progress, receiver=receiver, receive=receive,
                packet_columns=packet_columns, fallback=in_memory_merge,
                captures=captures, egress=egress, plot=plot is not None, decoder=decoder)
            if not isinstance(result, Analysis):
                if plot is not None:
                    from gropcap.run.progress import phase
                    with phase(progress, "plotting", 1, "files") as advance:
                        plot(result.plot_data)
                        advance(1)
                return result
            analysis = result
        else:
            analysis = in_memory_merge(why=None if in_memory else why_merge)
        analysis.receiver = receiver
    else:
        from gropcap.run.memory import analyze
        analysis = analyze(paths, config, models=models, decode_options=decode_options,
                           engine=engine, decoder=decoder, egress=egress,
                           progress=progress, receiver=receiver, captures=captures)
    analysis.receive = receive
    _write_sinks(analysis, out_dir, plot, force, progress, packet_columns)
    return analysis


def _write_sinks(analysis, out_dir, plot, force, progress, packet_columns="default") -> None:
    """The Parquet files and the plots of a collected analysis."""
    from gropcap.run.progress import phase
    if out_dir:
        from gropcap.io.parquet import write_analysis
        with phase(progress, "writing Parquet", 3, "files") as advance:
            write_analysis(analysis, out_dir, force=force, columns=packet_columns)
            advance(3)
    if plot is not None:
        with phase(progress, "plotting", 1, "files") as advance:
            plot(analysis)
            advance(1)


__all__ = ["analyze_run"]


PARALLEL = ("auto", "workers", "threads")

# Below this much input (bytes on disk), ``--jobs N`` runs threads in one process: local
# Dask workers take about 3 s to start and to hand their results back, more than they
# save there (measured: a real 422 MB capture 6.7 s with workers against 3.0 s with
# threads; a synthetic 632 MB one even; docs/scale.md, "Which way --jobs runs")
WORKERS_MIN_BYTES = 1 << 30


def _any_compressed(files) -> bool:
    """Whether one of ``files`` is a compressed capture (gzip, zstd, xz, bzip2)."""
    from gropcap.capture.compress import sniff_compression
    for f in files:
        try:
            with open(f, "rb") as fh:
                if sniff_compression(fh.read(6)):
                    return True
        except OSError:
            pass                    # the run reports it
    return False


def jobs_way(paths, config, models, jobs: int, parallel: str = "auto",
             captures: str = "auto", summary_only: bool = False) -> tuple[str, str]:
    """How ``--jobs N`` on this host uses N cores: ``("workers", why)`` (the Dask core
    per partition, ``run.dask_core``) or ``("threads", why)`` (``run.threads`` in one
    process), and the sentence the run prints.

    ``auto`` picks what measured faster (docs/scale.md, "Which way --jobs runs"):
    threads below :data:`WORKERS_MIN_BYTES` of plain capture files (Dask's start-up
    costs more there than it saves; a compressed file's size says too little about its
    work); above it, workers when several files may be separate receivers (``--captures separate``, or
    ``auto`` with a file that starts no later than the one before:
    ``run.inputs.first_times_rise``): each receiver run is a task of its own, written as
    soon as the runs before it are counted (``run.dask_core``'s runs exchange); workers
    when the work cuts exactly into at least two partitions of one receiver run (RX
    queues for the napi model, same-flow classes for the ideal model alone): each
    worker then decodes the input and replays its own partitions (measured 1.7x one
    process on two cores before one process ran two threads; even with two threads on
    2026-12-05, with ``--out``). Otherwise threads: with one RX queue the napi model has
    one partition (a worker would replay everything). Files whose first timestamps rise (a rotated
    capture) run as one receiver run; should their latest timestamps show separate
    receivers after all, the workers' first pass is redone through the exchange.
    ``summary_only`` (no ``--out``) with at most :data:`run.threads.MAX_USEFUL_THREADS`
    jobs: threads above that size too. One process decodes every input once and counts
    everything in the same pass, where each worker decodes every input it cuts
    (docs/scale.md, "Which way --jobs runs", 2026-12-05: 20 M packets with 4 RX queues
    11.9 s with two threads, 16.1 s with two workers; two 20 M-packet files as separate
    receivers 21.1 s against 26.1 s; with ``--out`` the workers, which write their parts
    in parallel, were even or ahead: 38.1 s against 39.3 s, and 72 s against 87 s).
    ``--plot`` does not change the choice: both ways collect the plots' counts in
    bounded memory (``run.plotdata``: ``PlotRows`` in one process, ``PlotParts`` per
    partition). With ``--poll-acks``, threads: its pass over the capture before GRO is
    serial (on Dask it is one task before the partitions, ``run.dask_tasks.ack_task``).
    With ``--tunnel-gro``, threads: the gro_cells stage runs after the native one over
    its super-packets in delivery order, serially (``run.cells``; on Dask one task per
    model after the partitions, ``run.dask_tasks.cells_task``): 2 M packets with 4 RX
    queues took 8.9 s with two threads, 11.7 s with two workers (``--parallel workers``
    runs them).
    """
    from gropcap.errors import ConfigError
    if parallel not in PARALLEL:
        raise ConfigError(f"unknown --parallel {parallel!r}", hint=f"use one of {PARALLEL}")
    from gropcap.run.threads import MAX_USEFUL_THREADS
    nthreads = min(jobs, MAX_USEFUL_THREADS)
    if parallel == "workers":
        return "workers", f"{jobs} Dask worker processes (--parallel workers)"
    if parallel == "threads":
        return "threads", f"{nthreads} threads in one process (--parallel threads)"
    if jobs < 2:
        return "threads", "one thread in one process"
    if config.poll_acks:
        return "threads", (f"{nthreads} threads in one process: --poll-acks reads the "
                           "whole capture before GRO, in one process")
    if config.tunnel_gro is not None:
        return "threads", (f"{nthreads} threads in one process: --tunnel-gro's gro_cells "
                           "stage replays the native super-packets in delivery order, "
                           "serially (--parallel workers runs it as one task)")
    from gropcap.run.distributed import _nparts
    from gropcap.run.inputs import first_times_rise, input_files
    split = "napi" if "napi" in models else models[0]
    parts = _nparts(config.replace(model=split), jobs)
    files = input_files(paths)
    size = sum(os.path.getsize(f) for f in files)
    if size < WORKERS_MIN_BYTES and not _any_compressed(files):
        # (a compressed capture's work is not known from its size: the rules below)
        return "threads", (f"{nthreads} threads in one process: {size / 2 ** 20:.0f} MiB of "
                           f"input; Dask workers pay off from {WORKERS_MIN_BYTES >> 30} GiB "
                           "(--parallel workers runs them)")
    if summary_only and jobs <= MAX_USEFUL_THREADS:
        return "threads", (f"{nthreads} threads in one process: summary only, one process "
                           "decodes the input once and counts in the same pass; Dask "
                           "workers pay off when they write --out parts "
                           "(--parallel workers runs them)")
    if len(files) > 1 and (captures == "separate" or
                           (captures == "auto" and not first_times_rise(files))):
        return "workers", (f"{jobs} Dask worker processes: {len(files)} files that may be "
                           "separate receivers (--captures), one receiver run per task")
    if parts < 2:
        return "threads", (f"{nthreads} threads in one process: with one RX queue (--queues 1) "
                           "the napi model does not cut into partitions for workers")
    return "workers", f"{jobs} Dask worker processes, {parts} partitions ({split} model)"
