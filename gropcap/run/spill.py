"""Per-flow results kept on disk instead of in the client's memory.

The Dask runs exchange (``run.dask_core``) seals each receiver run as it is counted: a
flow never spans runs, so the run's flows-table rows, and its flow causes once its
packets are written, are final. They go to an Arrow IPC file in the run's scratch,
appended run by run; when the run ends the file is memory-mapped and unlinked, and the
result's flows table and flow causes are read through the page cache on access. The
client's own (anonymous) memory then stays the same whatever the number of flows: the
kernel may drop the mapped pages at any time and read them again (docs/scale.md,
"What the client holds")."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from gropcap.arrays import arrow_numeric, batch_column, map_ipc_file, slices
from gropcap.run.accumulators import cause_text


class Spill:
    """Tables with one schema appended to an Arrow IPC file at ``path``; ``table()``
    maps the file and unlinks it (the mapping lives as long as the table) and returns
    that table from then on."""

    def __init__(self, path: str):
        self.path = path
        self.num_rows = 0
        self._sink = self._writer = self._table = None

    def add(self, table: pa.Table) -> None:
        if self._table is not None:
            raise ValueError("the spill is mapped already: nothing more can be added")
        if not table.num_rows:
            return
        if self._writer is None:
            self._sink = pa.OSFile(self.path, "wb")
            self._writer = pa.ipc.new_file(self._sink, table.schema)
        self._writer.write_table(table)
        self.num_rows += table.num_rows

    def table(self, empty: pa.Table) -> pa.Table:
        """Everything added, as one table over the mapped file (``empty`` when nothing
        was)."""
        if self._table is None:
            if self._writer is None:
                self._table = empty
            else:
                self._writer.close()
                self._sink.close()
                self._writer = self._sink = None
                try:
                    self._table = map_ipc_file(self.path)
                finally:
                    os.unlink(self.path)
        return self._table


class CauseTexts(Sequence):
    """Per flow, :func:`cause_text` of its counts, made when an item is read (the flow
    causes of a run with more flows than the client should hold as strings):
    ``table``: columns ``total``, ``ahead``, ``back`` in flow order."""

    def __init__(self, table: pa.Table):
        self._t = table

    def __len__(self) -> int:
        return self._t.num_rows

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return cause_text(*(self._t.column(k)[i].as_py() for k in ("ahead", "back", "total")))

    def __iter__(self):
        for _, batch in slices(self._t):
            cols = [batch_column(batch, k).tolist() for k in ("ahead", "back", "total")]
            yield from (cause_text(a, b, n) for a, b, n in zip(*cols))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None


class CausesSpill:
    """Flow causes of sealed runs, in flow order: each run's counts (a ``FlowCauses``
    its write results were folded into under the run's own flow ids, from 0) appended
    once the run is complete (``seal``, runs in order)."""

    def __init__(self, path: str):
        self._spill = Spill(path)

    def seal(self, causes, n: int) -> None:
        """Append a run's ``n`` flows' counts (its ``FlowCauses``, local ids)."""
        causes._grow(n)
        self._spill.add(pa.table({k: arrow_numeric(np.ascontiguousarray(
            getattr(causes, k)[:n]), pa.int64()) for k in ("total", "ahead", "back")}))

    def result(self, n_flows: int) -> CauseTexts:
        none = np.zeros(0, np.int64)
        table = self._spill.table(pa.table({k: arrow_numeric(none, pa.int64())
                                            for k in ("total", "ahead", "back")}))
        if table.num_rows != n_flows:
            raise ValueError(f"flow causes of {table.num_rows} flows for {n_flows} flows")
        return CauseTexts(table)


__all__ = ["Spill", "CausesSpill", "CauseTexts"]
