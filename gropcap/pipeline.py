"""The pipeline: capture files -> packet table -> GRO results -> an :class:`Analysis`.

This is the library entry point the CLI and notebooks share::

    import gropcap
    a = gropcap.analyze("sample_pcaps/real_ipv4.pcap")
    a.summary()                     # dict, the same as `gropcap analyze --format json`
    a.packets.to_pandas()           # one row per frame, decode columns + GRO verdicts
    a.superpackets.to_pandas()      # one row per packet the stack receives, per model
    a.flows.to_pandas()

Layer: takes paths, calls capture/ (RecordBatch), decode/ (packet columns), gro/
(GroResult) and hands an Analysis to report/ and io/.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from gropcap import __version__
from gropcap.capture.records import CaptureInfo
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_SCHEMA
from gropcap.gro.config import MODELS, GroConfig
from gropcap.gro.result import GroResult
# the names pipeline has always offered; defined in run/ (options checked once, the
# engine chosen in one place)
from gropcap.run.engines import simulate  # noqa: F401
from gropcap.run.options import (DECODERS, ENGINES, EgressOptions,  # noqa: F401
                                 run_options)


def decode_files(paths, options: DecodeOptions | None = None, *,
                 decoder: str = "fast", progress=None) -> tuple[pa.Table, list[CaptureInfo]]:
    """Read and decode capture files (and directories) into one packet table.

    Args:
        paths: a path or a list of files/directories; directories are expanded in sorted
            order to the captures they hold.
        options: decoder options (UDP tunnel ports, DSA tag); defaults when None.
        decoder: ``"fast"`` (numba scan and decode over a windowed memory map) or
            ``"reference"`` (the plain-Python reader and decoder); identical tables.
        progress: a :class:`gropcap.report.progress.Progress` told of every batch.

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


class Analysis:
    """Packets, GRO results per model, and the tables built from them.

    Attributes:
        packets: one row per frame: the decoded columns plus the GRO verdicts
            (``flow_id``, ``gro_seg``, ``gro_role``, ``reason``, ``rx_queue``, ``poll_id``
            of the primary model, ``<model>_*`` for the others). Built on first use.
        decoded: the decoded packet table alone (:data:`PACKET_SCHEMA`), what the GRO
            engines read.
        superpackets: every model's super-packets, a ``model`` column telling them apart.
        flows: one row per flow and direction.
        infos: one :class:`CaptureInfo` per input file.
        config: the :class:`GroConfig` (its ``model`` is overridden per result).
        results: ``{model: GroResult}``.

    ``Analysis(packets=decoded_table, ...)`` keeps its original keyword: the argument is the
    decoded table.
    """

    def __init__(self, packets: pa.Table, infos: list[CaptureInfo], config: GroConfig,
                 results: dict[str, GroResult], decode_options: DecodeOptions | None = None,
                 stages: dict | None = None, egress: "EgressOptions | None" = None):
        self.decoded = packets
        self.infos = list(infos)
        self.config = config
        self.results = dict(results)
        self.decode_options = decode_options or DecodeOptions()
        # {model: [StageResult, ...]} when the gro_cells stage is modelled (tunnel_gro set)
        self.stages = dict(stages or {})
        self.egress_options = egress
        # gso.CoalescedInput when frames were captured already coalesced (else None)
        self.coalesced = None
        # mtu.MtuInference: the receiving device's MTU in use and where it came from
        self.mtu = None
        # ackpolls.AckEvidence when --poll-acks asked for poll ends from the ACKs (else None)
        self.poll_acks = None
        # context.ReceiveContext set by the CLI (options typed) or a receiver profile;
        # None: taken from ``config`` (report.receive.receive_of)
        self.receive = None
        # receiver.ReceiverInfo: the --receiver profile and what it set (None: no profile)
        self.receiver = None
        self._cache: dict = {}

    def __repr__(self) -> str:
        return (f"Analysis({self.decoded.num_rows} packets, {len(self.infos)} file(s), "
                f"kernel {self.config.kernel.name}, models {self.models})")

    @property
    def models(self) -> list[str]:
        return list(self.results)

    @property
    def primary_model(self) -> str:
        """The model whose verdicts fill the unprefixed per-packet columns: napi if run."""
        return "napi" if "napi" in self.results else self.models[0]

    @property
    def packets(self) -> pa.Table:
        """Decoded columns plus GRO verdicts, one row per frame (see the class docstring)."""
        from gropcap.report.tables import packets_table
        if "packets" not in self._cache:
            self._cache["packets"] = packets_table(self)
        return self._cache["packets"]

    # the name the CLI and io/parquet used before ``packets`` carried the verdicts
    packets_with_verdicts = packets

    @property
    def superpackets(self) -> pa.Table:
        from gropcap.report.tables import superpackets_table
        if "superpackets" not in self._cache:
            self._cache["superpackets"] = superpackets_table(self)
        return self._cache["superpackets"]

    @property
    def totals(self):
        """The run's finished accumulators (``run.accumulators.Totals``): what the summary
        and the flows table are rendered from."""
        if "totals" not in self._cache:
            from gropcap.run.accumulators import totals_of_analysis
            tot = self._cache["totals"] = totals_of_analysis(self)
            if "flows" in self._cache:       # loaded from flows.parquet (io.load)
                tot._flows_table = self._cache["flows"]
        return self._cache["totals"]

    @property
    def flows(self) -> pa.Table:
        """One row per flow and direction (``Totals.flows_table``)."""
        if "flows" not in self._cache:
            self._cache["flows"] = self.totals.flows_table()
        return self._cache["flows"]

    def egress(self) -> dict:
        """Egress accounting per model (``gso.egress`` totals) for :attr:`egress_options`.

        The super-packets that reach the stack (after the gro_cells stage when it is
        modelled) leave through the egress device: segments, hardware vs software.
        """
        from gropcap.gso import egress, egress_headers, mangleid_df

        opts = self.egress_options
        if opts is None:
            return {}
        out = {}
        for model, result in self.results.items():
            stages = self.stages.get(model)
            table, res = (stages[-1].table, stages[-1].result) if stages else \
                (self.decoded, result)
            hdr_len, df, ip_hdr_len = egress_headers(table, res.seg_first_packet,
                                                     opts.scenario)
            r = egress(res.seg_count, res.seg_gso_size, res.seg_gso_type, res.seg_payload_len,
                       scenario=opts.scenario, features=opts.features,
                       kernel_version=self.config.kernel.version, hdr_len=hdr_len, df=df,
                       ip_hdr_len=ip_hdr_len, mtu=opts.mtu,
                       mangleid_df=mangleid_df(table, res.seg_first_packet))
            out[model] = {"scenario": opts.scenario, "features": opts.feature_text,
                          "mtu": opts.mtu, **r.totals()}
        return out

    def summary(self) -> dict:
        """The JSON summary (`gropcap analyze --format json`)."""
        from gropcap.report.summary import summary_dict
        return summary_dict(self)

    def _config_json(self) -> str:
        """The configuration as JSON; ``receiver_profile`` names the profile it came from
        (``io.load.config_from_dict`` ignores the key)."""
        import json
        # the models run are gropcap.models; the config's own model field is only a
        # default that each run overrides, so it is not recorded
        d = {k: v for k, v in self.config.to_dict().items() if k != "model"}
        if self.receiver is not None:
            d["receiver_profile"] = self.receiver.path
        return json.dumps(d, sort_keys=True)

    def metadata(self) -> dict[str, str]:
        """Provenance stored in every Parquet file's key-value metadata."""
        import json
        return {
            "gropcap.version": __version__,
            "gropcap.config": self._config_json(),
            "gropcap.models": json.dumps(self.models),
            "gropcap.decode_options": json.dumps(dataclasses.asdict(self.decode_options)),
            "gropcap.sources": json.dumps([
                {"path": i.path, "sha256": i.sha256, "format": i.format,
                 "linktypes": i.linktypes, "records": i.records,
                 "warnings": list(i.warnings)} for i in self.infos]),
            **({"gropcap.mtu": json.dumps(self.mtu.as_dict())} if self.mtu is not None
               else {}),
            **({"gropcap.receiver": json.dumps(self.receiver.as_dict())}
               if self.receiver is not None else {}),
        }


def analyze(paths, config: GroConfig | None = None, *, models=MODELS,
            decode_options: DecodeOptions | None = None, engine: str = "fast",
            decoder: str = "fast", egress: EgressOptions | None = None,
            progress=None, receiver=None) -> Analysis:
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

    When ``config.tunnel_gro`` is not None the gro_cells second stage runs too
    (``gro.stages.simulate_stages``), per model.

    Frames captured already coalesced (after TSO/GRO: IP packet above the MTU, IPv4 total
    length 0, pcapng TCP_SEG_OFFLOAD flag; ``gso.coalesced_input``) are found
    automatically; the MTU is ``config.mtu`` or inferred from the capture
    (``Analysis.mtu``, a :class:`gropcap.mtu.MtuInference`) and arrive as TCP GSO packets with the inferred gso_size, in both
    engines; ``Analysis.coalesced`` keeps the detection (None when there is none).

    Returns:
        An :class:`Analysis`.

    Example:
        >>> a = analyze("sample_pcaps/real_ipv4.pcap")  # doctest: +SKIP
        >>> a.summary()["models"]["ideal"]["aggregation_ratio"]  # doctest: +SKIP
    """
    config, decode_options, models = run_options(config, decode_options, models)
    from gropcap.receiver import resolve_receiver
    config, receiver = resolve_receiver(config, receiver)
    packets, infos = decode_files(paths, decode_options, decoder=decoder, progress=progress)
    from gropcap.gso import CoalescedStats
    stats = CoalescedStats(config.mtu)
    stats.add(packets)
    coalesced = stats.infer(packets)
    if not coalesced.num_coalesced:
        coalesced = None
    from gropcap.report.progress import phase
    from gropcap.run.engines import simulate_batches
    # the decoded batches, each fed to the engine with the state carried (run/engines.py)
    batches = [pa.Table.from_batches([b]) for b in packets.to_batches()]
    results = {}
    acks = None
    for m in models:
        cfg, feed = config.replace(model=m), batches
        if m == "napi" and config.poll_acks:
            # poll ends from the receiver's ACKs: the polls reach the engine as arrival
            # times (gropcap/ackpolls.py); without ACK evidence the gap rule stays
            from gropcap import ackpolls
            timed, acks = ackpolls.retimed(packets, cfg)
            if acks:
                cfg, feed = ackpolls.engine_config(cfg), [
                    pa.Table.from_batches([b]) for b in timed.to_batches()]
        with phase(progress, f"GRO {m}", packets.num_rows) as advance:
            results[m] = simulate_batches(feed, cfg, engine=engine, coalesced=coalesced)
            advance(packets.num_rows)
    stages = {}
    if config.tunnel_gro is not None:
        from gropcap.gro.stages import simulate_stages
        stages = {m: simulate_stages(packets, config.replace(model=m), native=results[m],
                                     engine=engine, coalesced=coalesced)
                  for m in models}
    if egress is not None:
        egress.features  # validate the feature names before any work is reported
    analysis = Analysis(packets=packets, infos=infos, config=config, results=results,
                        decode_options=decode_options, stages=stages, egress=egress)
    analysis.coalesced = coalesced
    analysis.poll_acks = acks      # ackpolls.AckEvidence of --poll-acks (None: not asked)
    analysis.mtu = stats.mtu_inference()
    analysis.receiver = receiver
    return analysis
