"""The run collected in memory: capture files -> packet table -> GRO results -> an
:class:`~gropcap.analysis.Analysis` (``run.core.analyze_run`` with the collecting sink; what
``gropcap.analyze`` returns)::

    import gropcap
    a = gropcap.analyze("sample_pcaps/real_ipv4.pcap")
    a.summary()                     # dict, the same as `gropcap analyze --format json`
    a.packets.to_pandas()           # one row per frame, decode columns + GRO verdicts
    a.superpackets.to_pandas()      # one row per packet the stack receives, per model
    a.flows.to_pandas()

Layer: run/; takes paths, calls capture/ (RecordBatch), decode/ (packet columns), gro/
(GroResult) and hands an Analysis to report/ and io/.
"""

from __future__ import annotations

import pyarrow as pa

from gropcap.capture.records import CaptureInfo
from gropcap.analysis import Analysis
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.gro.config import MODELS, GroConfig
from gropcap.run.options import EgressOptions, run_options


def decode_files(paths, options: DecodeOptions | None = None, *,
                 decoder: str = "fast", progress=None) -> tuple[pa.Table, list[CaptureInfo]]:
    """Read and decode capture files (and directories) into one packet table.

    Args:
        paths: a path or a list of files/directories; directories are expanded in sorted
            order to the captures they hold.
        options: decoder options (UDP tunnel ports, DSA tag); defaults when None.
        decoder: ``"fast"`` (numba scan and decode over a windowed memory map) or
            ``"reference"`` (the plain-Python reader and decoder); identical tables.
        progress: a :class:`gropcap.run.progress.Progress` told of every batch.

    Returns:
        ``(packets, infos)``: the table (:data:`PACKET_SCHEMA`, one row per record, files
        concatenated in input order, ``file_index`` telling them apart) and one
        :class:`CaptureInfo` per file.

    Raises:
        DecodeError: a file none of whose frames has a link type gropcap decodes
            (``decode.support``); files where only some have one get a warning instead.
    """
    from gropcap.run.inputs import check_decoder, decode_file, drain, input_files
    check_decoder(decoder)
    options = options or DecodeOptions()
    batches: list[pa.RecordBatch] = []
    infos: list[CaptureInfo] = []
    for file_index, path in enumerate(input_files(paths)):
        info = drain(decode_file(path, file_index, options, decoder=decoder,
                                     progress=progress), batches)
        infos.append(info)
    table = pa.Table.from_batches(batches, schema=PACKET_SCHEMA) if batches \
        else PACKET_SCHEMA.empty_table()
    return table, infos


def analyze(paths, config: GroConfig | None = None, *, models=MODELS,
            decode_options: DecodeOptions | None = None, engine: str = "fast",
            decoder: str = "fast", egress: EgressOptions | None = None,
            progress=None, receiver=None, captures: str = "auto") -> Analysis:
    """Decode captures and run GRO under each model.

    Args:
        paths: capture file(s) or directories.
        config: GRO configuration; its ``model`` field is overridden per entry of
            ``models``.
        models: which batch models to run (``"ideal"``, ``"napi"``).
        decode_options: decoder options.
        engine: ``"fast"`` (numba) or ``"reference"``.
        decoder: ``"fast"`` or ``"reference"``.
        egress: also account for egress segmentation (:class:`EgressOptions`).
        receiver: a receiver profile (path, from ``gropcap calibrate``): its values apply
            to the fields ``config`` leaves at their defaults (``receiver.apply_profile``);
            or a ``receiver.ReceiverInfo`` of a profile the caller already applied (the
            CLI). ``Analysis.receiver`` and the Parquet metadata record it.
        captures: how several files map to receiver runs (``run/receivers.py``):
            ``"auto"``, ``"continuous"`` (one timeline) or ``"separate"`` (a receiver
            per file).

    When ``config.tunnel_gro`` is not None the gro_cells second stage runs too
    (``gro.stages.simulate_stages``), per model.

    Frames captured already coalesced (after TSO/GRO: IP packet above the MTU, IPv4 total
    length 0, pcapng TCP_SEG_OFFLOAD flag; ``gso.coalesced_input``) are found
    automatically; the MTU is ``config.mtu`` or inferred from the capture
    (``Analysis.mtu``, a :class:`gropcap.gro.mtu.MtuInference`) and arrive as TCP GSO packets with the inferred gso_size, in both
    engines; ``Analysis.coalesced`` keeps the detection (None when there is none).

    Returns:
        An :class:`Analysis`.

    Example:
        >>> a = analyze("sample_pcaps/real_ipv4.pcap")  # doctest: +SKIP
        >>> a.summary()["models"]["ideal"]["aggregation_ratio"]  # doctest: +SKIP
    """
    from gropcap.arrays import pandas_shim_ready
    pandas_shim_ready()         # (it imports pandas: see there)
    config, decode_options, models = run_options(config, decode_options, models,
                                                 captures=captures)
    from gropcap.receive.profile import resolve_receiver
    config, receiver = resolve_receiver(config, receiver)
    packets, infos = decode_files(paths, decode_options, decoder=decoder, progress=progress)
    from gropcap.run.receivers import table_runs
    runs = table_runs(packets, len(infos), captures)     # None: one receiver run
    from gropcap.gro.coalesced import CoalescedStats
    stats = CoalescedStats(config.mtu)
    stats.add(packets)
    coalesced = stats.infer(packets)
    if not coalesced.num_coalesced:
        coalesced = None
    from gropcap.run.progress import phase
    from gropcap.run.engines import simulate_batches
    # the decoded batches, each fed to the engine with the state carried (run/engines.py)
    batches = [pa.Table.from_batches([b]) for b in packets.to_batches()]
    results = {}
    acks = None
    for m in models:
        cfg, feed = config.replace(model=m), batches
        if m == "napi" and config.poll_acks:
            # poll ends from the receiver's ACKs: the polls reach the engine as arrival
            # times (gropcap/receive/ackpolls.py); without ACK evidence the gap rule stays
            from gropcap.receive import ackpolls
            timed, acks = ackpolls.retimed(packets, cfg, runs)
            if acks:
                cfg, feed = ackpolls.engine_config(cfg), [
                    pa.Table.from_batches([b]) for b in timed.to_batches()]
        with phase(progress, f"GRO {m}", packets.num_rows) as advance:
            results[m] = simulate_batches(feed, cfg, engine=engine, coalesced=coalesced,
                                          runs=runs)
            advance(packets.num_rows)
    stages = {}
    if config.tunnel_gro is not None:
        from gropcap.gro.stages import simulate_stages
        stages = {m: simulate_stages(packets, config.replace(model=m), native=results[m],
                                     engine=engine, coalesced=coalesced, runs=runs)
                  for m in models}
    if egress is not None:
        egress.features  # validate the feature names before any work is reported
    analysis = Analysis(packets=packets, infos=infos, config=config, results=results,
                        decode_options=decode_options, stages=stages, egress=egress)
    analysis.coalesced = coalesced
    analysis.poll_acks = acks      # ackpolls.AckEvidence of --poll-acks (None: not asked)
    analysis.mtu = stats.mtu_inference()
    analysis.receiver = receiver
    analysis.captures = captures
    analysis.engine = engine
    return analysis
