"""The one result type of an analysis run held in memory: :class:`Analysis` (what
``gropcap.analyze`` returns, ``io.load`` reads back and ``report/`` renders), and its Arrow
views (packets with verdicts, super-packets).

Layer: above gro/ and the receive context, beside run/ (the core builds it; its summary
and totals come from ``run.summary`` and ``run.accumulators``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from gropcap import __version__
from gropcap.arrays import arrow_repeated
from gropcap.decode.options import DecodeOptions
from gropcap.io.columns import readable

if TYPE_CHECKING:
    from gropcap.capture.records import CaptureInfo
    from gropcap.gro.config import GroConfig
    from gropcap.gro.result import GroResult
    from gropcap.run.options import EgressOptions


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
        # gro.coalesced.CoalescedInput when frames were captured already coalesced (else None)
        self.coalesced = None
        # gro.mtu.MtuInference: the receiving device's MTU in use and where it came from
        self.mtu = None
        # ackpolls.AckEvidence when --poll-acks asked for poll ends from the ACKs (else None)
        self.poll_acks = None
        # context.ReceiveContext set by the CLI (options typed) or a receiver profile;
        # None: taken from ``config`` (run.hints.receive_of)
        self.receive = None
        # receiver.ReceiverInfo: the --receiver profile and what it set (None: no profile)
        self.receiver = None
        # --captures: how the input files map to receiver runs (run/receivers.py)
        self.captures = "auto"
        # the GRO engine the results came from ("fast" or "reference"): what a model run
        # again for a hint uses too (run.hints.tunnel_hint)
        self.engine = "fast"
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
        if "packets" not in self._cache:
            self._cache["packets"] = packets_table(self)
        return self._cache["packets"]

    # the name the CLI and io/parquet used before ``packets`` carried the verdicts
    packets_with_verdicts = packets

    @property
    def superpackets(self) -> pa.Table:
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

    @property
    def flow_causes(self) -> list[str] | None:
        """Per flow of the primary model, the probable cause of its breaks
        (``report.explain.flow_causes``; the json summary's ``top_flows``); None without a
        GRO result."""
        if "flow_causes" not in self._cache:
            from gropcap.run.accumulators import flow_causes_of
            self._cache["flow_causes"] = flow_causes_of(self) if self.results else None
        return self._cache["flow_causes"]

    def egress(self) -> dict:
        """Egress accounting per model (``gso.egress`` totals) for :attr:`egress_options`.

        The super-packets that reach the stack leave through the egress device:
        segments, hardware vs software. With the gro_cells stage modelled those are the
        native super-packets no cell took (or dropped) and the cells' super-packets
        (``gro.stages.stages_summary``'s ``delivered``).
        """
        from gropcap.egress import egress, egress_headers, mangleid_df

        opts = self.egress_options
        if opts is None:
            return {}
        out = {}
        for model, result in self.results.items():
            stages = self.stages.get(model)
            if stages and len(stages) > 1:
                out[model] = self._egress_after_cells(stages, opts)
                continue
            table, res = self.decoded, result
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

    def _egress_after_cells(self, stages, opts) -> dict:
        """:meth:`egress` of one model whose gro_cells stage ran: the native super-packets
        that reach the stack as they are, then the cells' super-packets."""
        import numpy as np

        from gropcap.arrays import take_rows
        from gropcap.egress import EgressCounts, header_codes
        native, cells = stages[0], stages[-1]
        counts = EgressCounts.of(opts, self.config.kernel.version)
        keep = np.ones(native.result.num_superpackets, bool)
        keep[cells.source_seg] = False
        if cells.dropped is not None:
            keep[cells.dropped] = False
        for st, rows in ((native, np.flatnonzero(keep)),
                         (cells, np.arange(cells.result.num_superpackets))):
            res = st.result
            heads = res.seg_first_packet[rows]
            counts.add(res.seg_count[rows], res.seg_gso_size[rows], res.seg_gso_type[rows],
                       res.seg_payload_len[rows],
                       header_codes(take_rows(st.table, heads), opts.scenario))
        return counts.as_dict()

    def summary(self) -> dict:
        """The JSON summary (`gropcap analyze --format json`)."""
        from gropcap.run.summary import summary_dict
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
                {"path": i.path, "digest": i.digest, "format": i.format,
                 "linktypes": i.linktypes, "records": i.records,
                 "warnings": list(i.warnings)} for i in self.infos]),
            **({"gropcap.mtu": json.dumps(self.mtu.as_dict())} if self.mtu is not None
               else {}),
            **({"gropcap.receiver": json.dumps(self.receiver.as_dict())}
               if self.receiver is not None else {}),
            "gropcap.captures": self.captures,
        }


def _model_columns(result, prefix: str) -> dict[str, np.ndarray]:
    return {prefix + k: v for k, v in result.packet_columns().items()}


def packets_table(analysis) -> pa.Table:
    """Decoded packets plus GRO verdicts, with the readable columns of
    :func:`gropcap.io.columns.readable` (``reason_name``, ``ip_src_text``, ``ts_ns`` as a
    timestamp, ...).

    The primary model (napi when it ran) fills ``flow_id``, ``gro_seg``, ``gro_role``,
    ``reason``, ``rx_queue``, ``poll_id``; every other model adds the same columns prefixed
    with its name (``ideal_gro_seg``, ...).
    """
    table = analysis.decoded
    primary = analysis.primary_model
    cols = _model_columns(analysis.results[primary], "")
    for model, result in analysis.results.items():
        if model != primary:
            cols.update({k: v for k, v in _model_columns(result, model + "_").items()
                         if k != model + "_flow_id"})
    for name, arr in cols.items():
        table = table.append_column(name, pa.array(arr))
    return readable(table)


def superpackets_table(analysis) -> pa.Table:
    """All models' super-packets, a ``model`` column telling them apart, with the readable
    columns of :func:`gropcap.io.columns.readable` (``end_reason_name``)."""
    parts = []
    for model, result in analysis.results.items():
        t = result.superpackets_table()
        t = t.append_column("model", arrow_repeated(model, t.num_rows))
        parts.append(t)
    return readable(pa.concat_tables(parts))
