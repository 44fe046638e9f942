"""The single pass in a run: both GRO models and the columns the accumulators read, from
``gro.fused``'s pass over each batch of records, without the decoder.

A run of a capture the pass covers (:func:`single_pass_covers`) hands each batch of
records from the capture scan to :meth:`SinglePass.records` instead of the decoder
(``run.inputs.decode_file``'s ``decode``). It gives what the decoder and the engine
would have given the rest of the run:

* per model the engine's ``BatchResult`` (every row's flow, reason, super-packet and
  poll, every super-packet as it goes up), equal to the engine's;
* a *narrow table*: the decoder's columns that a summary-only run reads
  (:func:`narrow_columns`: the capture counts, the coalesced-input statistics, flows,
  encapsulation counts, flow causes), and those of ``packets.parquet``'s default
  selection and of ``--plot``, equal to the decoder's, row for row. Their values come
  from three places:

  - the record (time, lengths, link type, flags, number in the file) from the scan's
    batch;
  - the pass, which read the headers: each TCP row's lengths, sequence and
    acknowledgement numbers, flags, MSS option, checksum state and data offset
    (``gro.fused.NARROW_*``);
  - the decoder itself, on the few records it is run on: the first record of each flow
    (the columns a flow's key decides: addresses, ports, MACs, encapsulation, status,
    are the same on every row of a TCP flow the pass covers, and are taken from it for
    each row) and every record GRO passes by (ARP, ICMP: all their columns).

A run that reads other decoded columns (``--packet-columns`` beyond the narrow table's,
egress accounting, which reads every header: ``decoded``) takes the decoder's whole
table of each batch with the pass's results: the pass then takes only the engine's
place. On the 3 M-frame capture an ``--out`` run's CPU went from 1.68 s (decoder and
engine) to 1.25 s (decoder and pass) to 1.02 s (the narrow table).

A frame the pass does not cover raises :class:`Uncovered`, and the run starts again
on the decoder and the engine (``run/stream.py``); the probe of
:func:`single_pass_covers` reads the first :data:`PROBE_BYTES` of the capture before a
run starts, where other traffic shows itself.

Layer: run/, calls gro/, capture/ and decode/.
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np
import pyarrow as pa

from gropcap.gro.config import GroConfig

# the narrow table's columns: from the record, from the pass (TCP rows), from the flow's
# first record (decoded), and the file's index
RECORD_COLUMNS = ("ts_ns", "cap_len", "wire_len", "linktype", "epb_flags", "record")
FLOW_COLUMNS = ("status", "encap", "ip_version", "l4_proto", "outer_ip_version",
                "outer_ip_tot_len", "outer_l4_proto", "outer_dport", "outer_ip_offset",
                "ip_offset", "tun_type", "tun_key", "vlan_tci0", "dsa_port", "eth_src",
                "eth_dst", "ip_src", "ip_dst", "outer_ip_src", "outer_ip_dst", "sport",
                "dport")


def narrow_columns() -> tuple:
    """Every column of the narrow table."""
    from gropcap.gro.fused import NARROW_U8, NARROW_U16, NARROW_U32
    return RECORD_COLUMNS + ("file_index",) + NARROW_U32 + NARROW_U16 + NARROW_U8 + \
        FLOW_COLUMNS


class Uncovered(Exception):
    """The single pass met what it does not cover (the message says what): the run
    goes again on the engine (``run.engines.BatchGroModels``)."""


# the bytes of a capture the probe reads before a run (``gro.fused.uncovered_at``): a
# frame the pass does not cover past them stops the pass, and the run goes again on the
# engine (stream.py). Probing the whole file cost 15-20% of a covered run (the record
# headers are a chain of dependent loads, read once more by the capture scan); a
# capture of other traffic shows it early (the first frame of UDP or IPv6 in the first
# 64 MiB, 450 000 frames at snaplen 128), and the frames that come rarely on a link
# (ARP, LLDP, spanning tree) the pass covers.
PROBE_BYTES = 64 << 20


def single_pass_covers(config: GroConfig, models, paths, options=None) -> str | None:
    """Why :class:`SinglePass` cannot run ``models`` over the files ``paths`` in
    ``config`` with decoder options ``options`` (None: it can; the run's own options,
    ``--poll-acks``, ``--tunnel-gro``, the engine and decoder, ``run.stream`` checks
    before): regular files (pcap or
    pcapng, compressed or not: the run can read them again), read as plain Ethernet,
    both models, what ``gro.fused.uncovered`` allows (several files on one receiver or
    on receivers of their own: :meth:`SinglePass.records` splits the runs). A plain
    pcap file first is probed: every record in its first :data:`PROBE_BYTES` a frame
    the pass covers (``gro.fused.uncovered_at``: the record headers and the frames'
    first bytes). The records of other files are checked as the pass meets them
    (:meth:`SinglePass.records`: their link type and interface too), and the run goes
    again on the engine where one is not covered (:class:`Uncovered`)."""
    from gropcap.gro import fused
    if tuple(models) != ("ideal", "napi"):
        return "not both models"
    if options is not None and options.dsa_tag:
        return "a DSA tag on plain Ethernet (--dsa-tag)"
    if not all(os.path.isfile(p) for p in paths):
        return "not a regular file"     # (a pipe: the run could not read it again)
    why = fused.uncovered(config)
    if why:
        return why
    body = fused.pcap_body(paths[0]) if paths else "no file"
    if isinstance(body, str):
        # (pcapng or compressed: no probe; a pcap file of another link type: refused)
        return None if body == "not a pcap file" else body
    # the first records read for what the pass covers, before the run starts (where
    # the pass stops later, the run starts again on the engine)
    buf, be, _ = body
    at = fused.uncovered_at(buf, be, config.mtu or 0xFFFF, limit=PROBE_BYTES)
    return None if at < 0 else f"a frame the single pass does not cover at byte {at}"


def _sub_batch(batch, rows: np.ndarray):
    """The records ``rows`` of a ``capture.records.RecordBatch`` (the same buffer)."""
    return batch._replace(**{f: getattr(batch, f)[rows] for f in batch._fields
                             if f != "buf"})


class _FlowValues:
    """The :data:`FLOW_COLUMNS` of each flow (by flow id), from its first record
    decoded, and per column the value every flow GRO does not pass by has, when they
    all have the same (then a row's value needs no lookup)."""

    def __init__(self):
        self.n = 0
        self.vals: dict = {}
        self.same: dict = {}
        self.names: list[str] = []          # encap strings (codes in vals["encap"])
        self.code: dict[str, int] = {}
        self.filled: dict = {}              # rows(): the columns of one value

    def add(self, ids: np.ndarray, t, at: np.ndarray, bypass: np.ndarray) -> None:
        """Flows ``ids`` (new ones), their first records (rows ``at`` of the decoded
        ``t``); ``bypass``: the flows GRO passes by."""
        top = int(ids.max()) + 1
        for name in FLOW_COLUMNS:
            col = self.column(t, name)[at]
            old = self.vals.get(name)
            if old is None or top > len(old):
                grown = np.zeros((max(top, 2 * self.n, 64),) + col.shape[1:], col.dtype)
                if old is not None:
                    grown[:len(old)] = old
                self.vals[name] = old = grown
            old[ids] = col
            gro = col[~bypass]
            if not len(gro):
                continue
            first = self.same.get(name, gro[0])
            self.same[name] = first if first is not None and (gro == first).all() \
                else None
        self.n = max(self.n, top)

    def column(self, t: pa.Table, name: str) -> np.ndarray:
        """Column ``name`` of decoded rows ``t`` as the flow values hold it: encap as
        codes into :attr:`names`, a fixed-size binary column as a matrix of bytes."""
        from gropcap.arrays import numpy_of
        col = t.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if name == "encap":
            names = col.dictionary.to_pylist()
            for s in names:
                if s not in self.code:
                    self.code[s] = len(self.names)
                    self.names.append(s)
            local = np.array([self.code[s] for s in names], np.int32)
            return local[numpy_of(col.indices)]
        if pa.types.is_fixed_size_binary(col.type):
            from gropcap.gro.flows import _column_bytes
            return _column_bytes(col)
        return np.asarray(numpy_of(col))

    def rows(self, name: str, fid: np.ndarray) -> np.ndarray:
        """Column ``name`` of rows of flows ``fid``: a new array, or, where every flow
        has the same value, a read-only view of one array of it (filled once, not a
        batch)."""
        v = self.vals[name]
        same = self.same.get(name)
        if same is None:
            return np.take(v, fid, axis=0)      # (16x faster than v[fid] for a matrix)
        return constant(same, len(fid), v.dtype, self.filled)


def constant(value, n: int, dtype, filled: dict) -> np.ndarray:
    """``n`` rows of ``value`` (a scalar, or a row of a matrix column): a read-only view
    of an array kept in ``filled`` (by dtype and value) and refilled only when a longer
    batch comes."""
    value = np.asarray(value, dtype)
    key = (np.dtype(dtype).str, value.shape, value.tobytes())
    got = filled.get(key)
    if got is None or len(got) < n:
        got = np.empty((max(n, 1024),) + value.shape, dtype)
        got[...] = value
        got.flags.writeable = False
        filled[key] = got
    return got[:n]


class SinglePass:
    """Both models by ``gro.fused``'s single pass and the narrow table, batch by batch
    (the module docstring): :meth:`records` takes the place of the decoder of a run
    (splitting its receiver runs), :meth:`feed` of ``run.engines.BatchGroModels`` at the
    end (``final``)."""

    def __init__(self, config: GroConfig, options=None, batch: int | None = None,
                 captures: str = "auto", decoded: bool = False, defer: bool = False):
        from gropcap.decode.options import DecodeOptions
        from gropcap.gro import fused
        from gropcap.run.receivers import RunSplit
        self.fused = fused
        # the receiver runs (run/receivers.py), split here: the pass runs in the decode
        # step, ahead of the run's own split
        self.split = RunSplit(captures)
        self.run = 0
        self.pass_ = fused.FusedRun(config, batch or fused.BATCH)
        self.options = options or DecodeOptions()
        self.flows = _FlowValues()
        self.polls = 0
        self.iface = None           # the interface of the records (pcapng), once seen
        self.seconds = 0.0          # wall seconds in the pass (the run's "engine" phase)
        # the decoder's whole table of each batch instead of the narrow one (a run that
        # keeps columns the narrow table lacks, or counts egress, which reads every
        # header)
        self.decoded = decoded
        # records() hands back a function that builds the table instead of the table:
        # with two threads the caller's thread builds it while the pass goes on with the
        # next batch (the pass is the run's longest stage)
        self.defer = defer

    def records(self, batch, options=None, *, file_index: int = 0):
        """One batch of records (``capture.records.RecordBatch``): ``(table, one
        engine.BatchResult per model, ended)``; the table (:meth:`_table`) or, with
        ``defer``, a function of no arguments that builds it (to be called in the
        batches' order); ``ended``: None, or when the batch
        starts a receiver run (``run.receivers.RunSplit``; the pass runs in the decode
        step, ahead of the run's own split) the run before's held super-packets, one
        ``BatchResult`` per model, to count before the batch's own."""
        F, run = self.fused, self.pass_
        self._one_link(batch)
        ended = None
        if len(batch) and self.split.starts(file_index, batch.ts_ns):
            # a new receiver run: the one before flushed, fresh receivers
            ended = self.feed(None, final=True)
            run.next_run()
            self.run += 1
        t0 = time.perf_counter()
        n, segs, cols = run.take(batch.buf, batch.offset, batch.cap_len, batch.wire_len,
                                 batch.ts_ns)
        self.seconds += time.perf_counter() - t0
        if run.status != F.DONE:
            at = int(batch.file_offset[int(run.ctr[F.C_AT])])
            raise Uncovered(f"{F.STOPPED[run.status]} at byte {at}")
        parts = self._parts(n, segs, int(run.ctr[F.C_NPT]))
        # (what the table reads of the pass: copies, the pass reuses its buffers)
        new = run.r_new[:int(run.ctr[F.C_NEW])].copy()
        table = functools.partial(self._table, batch, n, cols, options or self.options,
                                  file_index, parts[F.IDEAL].flow_id,
                                  parts[F.IDEAL].p_reason, new)
        return table if self.defer else table(), parts, ended

    def _one_link(self, batch) -> None:
        """Every record of ``batch`` Ethernet, on the interface of the run's first
        record: the pass's flows have no interface in their key (the engine's have:
        ``gro_list_prepare``'s ``skb->dev``); a pcapng file can have several, of other
        link types too."""
        lt, ifc = batch.linktype, batch.iface
        if not len(lt):
            return
        if self.iface is None:
            self.iface = int(ifc[0])
        bad = np.flatnonzero((lt != 1) | (ifc != self.iface))
        if len(bad):
            i = int(bad[0])
            what = "a frame of another interface" if lt[i] == 1 else \
                f"a frame of link type {int(lt[i])}"
            raise Uncovered(f"{what} at byte {int(batch.file_offset[i])}")

    def _table(self, batch, n: int, cols, options, file_index: int, fid: np.ndarray,
               reason: np.ndarray, new: np.ndarray) -> pa.Table:
        """The batch's table (:meth:`records`; called in order, batch after batch):
        the decoder's (``decoded``), or the narrow one from the pass's columns ``cols``,
        each record's flow ``fid`` and ideal-model ``reason``, and ``new``, the records
        that started a flow."""
        from gropcap.arrays import arrow_numeric, arrow_strings
        from gropcap.decode.fast import decode_batch
        from gropcap.decode.schema import PACKET_SCHEMA
        from gropcap.gro.reasons import BYPASS_NO_L4_OFFLOAD, BYPASS_NOT_IP
        if self.decoded:
            return pa.Table.from_batches([decode_batch(batch, options,
                                                       file_index=file_index)])
        F = self.fused
        byp = (reason == BYPASS_NOT_IP) | (reason == BYPASS_NO_L4_OFFLOAD)
        by_rows = np.flatnonzero(byp)
        # the decoder over the first record of each new flow and every bypass record
        rows = np.union1d(new, by_rows)
        dec = decode_batch(_sub_batch(batch, rows), options, file_index=file_index) \
            if len(rows) else None
        if len(new):
            self.flows.add(fid[new], dec, np.searchsorted(rows, new), byp[new])
        out: dict = {name: np.asarray(getattr(batch, name)) for name in RECORD_COLUMNS}
        out["file_index"] = constant(file_index, n, np.uint16, self.flows.filled)
        for names, group in zip((F.NARROW_U32, F.NARROW_U16, F.NARROW_U8), cols):
            out.update(zip(names, group))
        for name in FLOW_COLUMNS:
            out[name] = self.flows.rows(name, fid)
        if len(by_rows):
            # the rows GRO passes by: every column as the decoder gives it
            at = np.searchsorted(rows, by_rows)
            for name in out:
                if not out[name].flags.writeable:
                    out[name] = out[name].copy()
                out[name][by_rows] = self.flows.column(dec, name)[at]
        arrays = {}
        for name, a in out.items():
            t = PACKET_SCHEMA.field(name).type
            a = np.ascontiguousarray(a)
            if name == "encap":
                arrays[name] = pa.DictionaryArray.from_arrays(
                    arrow_numeric(a, pa.int32()), arrow_strings(self.flows.names))
            elif pa.types.is_fixed_size_binary(t):
                arrays[name] = pa.FixedSizeBinaryArray.from_buffers(
                    t, n, [None, pa.py_buffer(a)])
            else:
                arrays[name] = arrow_numeric(a, t)
        return pa.table(arrays)

    def _parts(self, n: int, segs, npt: int, rest=None) -> list:
        """The call's results as one ``engine.BatchResult`` per model (ideal, napi): each
        field a contiguous copy, as the engine's (the counting kernels compiled for
        those take these too; the pass reuses its buffers); the rows' flows, queues and
        numbers one copy that both models share."""
        from gropcap.gro.engine import BatchResult
        F, run = self.fused, self.pass_
        row0 = int(run.ctr[F.C_ROW]) - n
        times = run.pt[:npt].copy()
        if rest is not None:
            segs = [np.concatenate([a, b]) for a, b in zip(segs, rest[0])]
            times = np.concatenate([times, rest[1]])
        parts = []
        # (the rows' flows, queues and numbers: one array for both models, which nothing
        # writes to; left writable, the type the counting kernels were compiled for)
        flow_id, rx_queue = run.r_flow[:n].copy(), np.zeros(n, np.uint16)
        p_row = np.arange(row0, row0 + n)
        for m in (F.IDEAL, F.NAPI):
            s = segs[m]
            napi = m == F.NAPI
            seg = {f: s[:, x].copy() for x, f in enumerate(F.SEG_FIELDS)}
            seg["queue"] = np.zeros(len(s), np.int64)
            parts.append(BatchResult(
                row_start=row0, flow_id=flow_id, rx_queue=rx_queue, p_row=p_row,
                p_reason=run.r_reason[m, :n].copy(), p_inst=run.r_inst[m, :n].copy(),
                p_poll=run.r_poll[:n].copy() if napi else np.full(n, -1, np.int64),
                segs=seg, poll_base=self.polls if napi else 0,
                poll_time=times if napi else np.zeros(0, np.int64),
                poll_queue=np.zeros(len(times) if napi else 0, np.int64), run=self.run))
        self.polls += len(times)
        return parts

    def feed(self, table: pa.Table | None, *, final: bool = False,
             coalesced=None) -> list:
        """``run.engines.BatchGroModels.feed`` for the end of the run (an empty table,
        ``final``): the super-packets still held, one ``BatchResult`` per model."""
        if coalesced is not None:
            raise Uncovered("frames captured coalesced")
        if (table is not None and table.num_rows) or not final:
            raise ValueError("the single pass takes records (SinglePass.records)")
        F, run = self.fused, self.pass_
        rest = [s.copy() for s in run.finish()]
        times = run.pt[:int(run.ctr[F.C_NPT])].copy()
        empty = [np.zeros((0, F.S_N), np.int64)] * 2
        return self._parts(0, empty, 0, rest=(rest, times))

    def instances(self) -> list[int]:
        """``run.engines.BatchGroModels.instances``: the super-packet instances each
        model (ideal, napi) numbered so far."""
        F = self.fused
        return [int(self.pass_.ctr[F.C_INST + m]) for m in (F.IDEAL, F.NAPI)]

    def close(self) -> None:
        pass


__all__ = ["SinglePass", "Uncovered", "single_pass_covers", "narrow_columns",
           "RECORD_COLUMNS", "FLOW_COLUMNS"]
