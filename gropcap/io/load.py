"""Load the Parquet files `gropcap analyze --out DIR` wrote back into an :class:`Analysis`.

Layer: Parquet (io/parquet.py output) -> the same :class:`gropcap.analysis.Analysis` a
notebook gets from :func:`gropcap.analyze`: ``.packets``, ``.superpackets``, ``.flows``
(pyarrow Tables) and ``.summary()``. The GRO results are rebuilt from the stored verdict
columns and super-packet rows, the configuration and sources from the provenance metadata,
so nothing is re-simulated and the capture need not be present.

``packets.parquet`` written with the default columns (``--packet-columns default``) lacks
most decoded header fields. :func:`load` then gives the same ``.packets`` (the columns
written), ``.superpackets``, ``.flows``, ``.results`` and ``.summary()`` (stored with the
flows, ``gropcap.summary``); what needs the whole decoded table (``Analysis.decoded``:
``explain_flow``, the plots, a recomputed summary) re-decodes the capture when it is still
at its recorded path with the recorded digest, and otherwise raises :class:`LoadError`
naming the option that writes every column.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gropcap.capture import fingerprint
from gropcap.capture.records import CaptureInfo
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_COLUMNS, PACKET_SCHEMA
from gropcap.errors import LoadError
from gropcap.gro.config import DEFAULT_RSS_KEY, GroConfig, KernelProfile
from gropcap.gro.result import PACKET_RESULT_DTYPES, SEG_DTYPES, GroResult
from gropcap.io.columns import IDEAL_CONSTANTS
from gropcap.io.parquet import as_built

if TYPE_CHECKING:  # the pipeline imports the engines; load it only when called
    from gropcap.analysis import Analysis

FILES = ("packets.parquet", "superpackets.parquet", "flows.parquet")


def config_from_dict(d: dict) -> GroConfig:
    """Inverse of :meth:`GroConfig.to_dict` (unknown keys from newer versions are ignored).

    >>> config_from_dict(GroConfig().to_dict()) == GroConfig()
    True
    """
    import dataclasses

    known = {f.name for f in dataclasses.fields(GroConfig)}
    kw = {k: v for k, v in d.items() if k in known}
    kw["kernel"] = KernelProfile.parse(str(d.get("kernel")) if d.get("kernel") else None)
    kw["rss_key"] = bytes.fromhex(d["rss_key"]) if d.get("rss_key") else DEFAULT_RSS_KEY
    return GroConfig(**kw)


def decode_options_from_dict(d: dict) -> DecodeOptions:
    """Inverse of ``dataclasses.asdict(DecodeOptions)`` (lists back to tuples)."""
    kw = dict(d)
    if "fou_ports" in kw:
        kw["fou_ports"] = tuple(tuple(x) for x in kw["fou_ports"])
    return DecodeOptions(**kw)


def _result_from_tables(packets: pa.Table, segs: pa.Table, prefix: str) -> GroResult:
    """One model's GroResult from its verdict columns and its super-packet rows."""
    kw = {}
    for name, dtype in PACKET_RESULT_DTYPES.items():
        col = prefix + name
        # flow_id is stored once (identical in every model)
        if name == "flow_id" and col not in packets.column_names:
            col = "flow_id"
        if col not in packets.column_names and prefix == "ideal_" and \
                name in IDEAL_CONSTANTS:
            # the ideal model's RX queue and poll: one value, written only when asked
            kw[name] = np.full(packets.num_rows, IDEAL_CONSTANTS[name], dtype)
            continue
        kw[name] = packets.column(col).to_numpy()
    order = np.argsort(segs.column("seg_id").to_numpy(), kind="stable")
    for key in SEG_DTYPES:
        if key != "seg_id":
            kw["seg_" + key] = segs.column(key).to_numpy()[order]
    return GroResult(**kw)


def _partial_analysis_class():
    """An :class:`Analysis` whose decoded table is rebuilt when first needed (re-decoding
    the recorded captures) and whose summary is the stored one."""
    from gropcap.analysis import Analysis

    class LoadedAnalysis(Analysis):
        __doc__ = Analysis.__doc__

        @property
        def decoded(self) -> pa.Table:
            if self._decoded is None:
                self._decoded = _redecode(self)
            return self._decoded

        @decoded.setter
        def decoded(self, table) -> None:
            self._decoded = table

        def summary(self) -> dict:
            stored = self.metadata_loaded.get("gropcap.summary")
            return json.loads(stored) if stored else super().summary()

        def __repr__(self) -> str:
            return (f"Analysis({self.packets.num_rows} packets, {len(self.infos)} file(s), "
                    f"kernel {self.config.kernel.name}, models {self.models})")

    return LoadedAnalysis


def _redecode(analysis) -> pa.Table:
    """The decoded table of a directory written with a subset of the packet columns: the
    recorded captures decoded again (same decode options), when each is at its path with
    its digest (``capture.fingerprint``)."""
    from gropcap.run.memory import decode_files
    where = analysis.metadata_loaded.get("gropcap.directory", "the directory")
    hint = ("write it with `gropcap analyze --out DIR --packet-columns all` "
            "(gropcap.write_analysis(a, DIR, columns=\"all\")), or keep the capture "
            "at its recorded path")
    paths = [i.path for i in analysis.infos]
    missing = [p for p in paths if not p or not os.path.isfile(p)]
    if missing or not paths:
        raise LoadError("packets.parquet holds the default columns, not the whole decoded "
                        f"table, and the capture {', '.join(missing) or '(none recorded)'} "
                        "is not there to decode again", path=where, hint=hint)
    table, infos = decode_files(paths, analysis.decode_options)
    changed = [i.path for i, j in zip(infos, analysis.infos)
               if not fingerprint.matches(j.digest, i.digest, i.path)]
    if changed or table.num_rows != analysis.packets.num_rows:
        raise LoadError("packets.parquet holds the default columns, not the whole decoded "
                        f"table, and the capture {', '.join(changed) or paths[0]} changed "
                        "since (its digest)", path=where, hint=hint)
    return table


def _read(path: str, order: tuple) -> pa.Table:
    """One Parquet file, or a directory of parts (``--jobs`` writes ``packets/`` and
    ``superpackets/``: each worker its partitions' rows) read as one table in the
    one-process order: sorted by ``order`` (capture order for packets, delivery order
    per model for super-packets), with the provenance metadata of its first part."""
    if os.path.isfile(path):
        return pq.read_table(path)
    import pyarrow.dataset as ds
    data = ds.dataset(path, format="parquet")
    if not data.files:
        raise OSError(f"{path}: no Parquet part")
    table = data.to_table()
    missing = [c for c in order if c not in table.column_names]
    if missing:
        raise KeyError(missing[0])
    table = table.sort_by([(c, "ascending") for c in order])
    return table.replace_schema_metadata(pq.read_schema(sorted(data.files)[0]).metadata)


def load(directory) -> Analysis:
    """Read ``packets.parquet``, ``superpackets.parquet`` and ``flows.parquet`` from a
    directory written by ``gropcap analyze --out DIR`` into an :class:`Analysis`
    (``--jobs`` writes ``packets/`` and ``superpackets/`` as directories of parts: read
    as one table each, in the one-process row order).

    Args:
        directory: the ``--out`` directory.

    Returns:
        An :class:`gropcap.analysis.Analysis` equal (tables, results, config, sources) to
        the one that was written; ``summary()`` gives the same dict. With the default
        packet columns, ``decoded`` is rebuilt from the captures when first used (module
        docstring).

    Raises:
        LoadError: a file is missing, unreadable, or lacks gropcap metadata.

    Example:
        >>> a = load("out/")                     # doctest: +SKIP
        >>> a.flows.to_pandas().head()           # doctest: +SKIP
    """
    from gropcap.analysis import Analysis

    directory = os.fspath(directory)
    paths = {name: os.path.join(directory, name) for name in FILES}
    for name, sub in (("packets.parquet", "packets"), ("superpackets.parquet",
                                                       "superpackets")):
        if not os.path.isfile(paths[name]) and os.path.isdir(os.path.join(directory, sub)):
            paths[name] = os.path.join(directory, sub)    # a dataset (--jobs)
    missing = [name for name, path in paths.items() if not os.path.exists(path)]
    if missing:
        raise LoadError(f"missing {', '.join(missing)}", path=directory,
                        hint="give a directory written by `gropcap analyze --out DIR`")
    try:
        packets = _read(paths["packets.parquet"], ("file_index", "record"))
        segs = _read(paths["superpackets.parquet"], ("model", "seg_id"))
    except (OSError, pa.ArrowInvalid) as e:
        raise LoadError(f"cannot read Parquet: {e}", path=directory) from None
    except KeyError as e:
        raise LoadError(f"the packets dataset has no {e} column to put its parts in "
                        "capture order", path=directory,
                        hint="write it with the default --packet-columns") from None
    meta = {k.decode(): v.decode() for k, v in (packets.schema.metadata or {}).items()
            if k.startswith(b"gropcap.")}
    if "gropcap.config" not in meta or "gropcap.models" not in meta:
        raise LoadError("packets.parquet has no gropcap metadata", path=directory,
                        hint="was it written by `gropcap analyze --out`?")
    config = config_from_dict(json.loads(meta["gropcap.config"]))
    models = json.loads(meta["gropcap.models"])
    options = decode_options_from_dict(json.loads(meta.get("gropcap.decode_options", "{}")))
    infos = [CaptureInfo(path=s.get("path", ""), format=s.get("format", ""),
                         linktypes=list(s.get("linktypes", [])), records=s.get("records", 0),
                         digest=s.get("digest") or fingerprint.legacy(s.get("sha256", "")),
                         warnings=list(s.get("warnings", [])))
             for s in json.loads(meta.get("gropcap.sources", "[]"))]

    primary = "napi" if "napi" in models else models[0]
    model_col = segs.column("model").to_numpy(zero_copy_only=False)
    results = {}
    for m in models:
        part = segs.filter(pa.array(model_col == m))
        results[m] = _result_from_tables(packets, part, "" if m == primary else m + "_")
    try:
        flows = pq.read_table(paths["flows.parquet"])
    except (OSError, pa.ArrowInvalid) as e:
        raise LoadError(f"cannot read Parquet: {e}", path=directory) from None
    whole = set(PACKET_COLUMNS) <= set(packets.column_names)
    if whole:
        # drop the metadata so the decoded table equals a freshly decoded one
        decoded = packets.select(PACKET_COLUMNS).cast(PACKET_SCHEMA)
        analysis = Analysis(packets=decoded, infos=infos, config=config, results=results,
                            decode_options=options)
    else:
        analysis = _partial_analysis_class()(packets=None, infos=infos, config=config,
                                             results=results, decode_options=options)
        meta.update({k.decode(): v.decode() for k, v in (flows.schema.metadata or {}).items()
                     if k == b"gropcap.summary"})
        meta["gropcap.directory"] = directory
    # the files declare their never-null columns so (io.parquet.required); the tables
    # are given back as analyze() builds them
    analysis._cache["packets"] = as_built(packets.replace_schema_metadata(None))
    analysis._cache["superpackets"] = as_built(segs.replace_schema_metadata(None))
    analysis._cache["flows"] = as_built(flows.replace_schema_metadata(None))
    analysis.metadata_loaded = meta
    if "gropcap.mtu" in meta:
        from gropcap.gro.mtu import MtuInference
        analysis.mtu = MtuInference(**json.loads(meta["gropcap.mtu"]))
    analysis.captures = meta.get("gropcap.captures", "auto")
    return analysis


__all__ = ["load", "LoadError", "config_from_dict", "decode_options_from_dict"]
