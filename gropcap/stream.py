"""Streaming analysis: capture files -> Parquet and the summary, in bounded memory.

The in-memory :func:`gropcap.pipeline.analyze` holds the whole decoded table and every
GroResult array at once (a 4 M-packet capture peaked at 4.9 GB). :func:`stream_analyze`
gives the same ``packets.parquet`` / ``superpackets.parquet`` / ``flows.parquet`` and the
same summary dict, batch by batch:

1. **GRO pass**: fast scan -> fast decode -> ``gro.engine.simulate_batch`` per model
   (state carried across batches and files). The decoded batches go to a temporary
   Parquet file; the engine's partial results (``BatchResult``) are spilled to temporary
   files; the summary counters are accumulated.
2. **super-packets pass**: the napi model's delivery order is known only when every poll
   is in (``engine.assemble``: polls ordered by time, queue, number). With the poll ranks
   and the super-packets per poll, each super-packet's delivery position is
   ``offset[rank[poll]] + its index within the poll``; a small reorder buffer writes them
   in that order (a queue's polls are already in time order, so the buffer stays small).
3. **packets pass**: the temporary decoded Parquet is read back batch by batch and joined
   with the spilled verdicts (``gro_seg`` from the instance -> position map).

Memory that stays in RAM, per model: 5 bytes per super-packet (instance -> delivery
position, int32 with the sign telling single packets, and a "head seen" byte) and 24
bytes per NAPI poll (time, queue, rank); per flow: its key row and counters. Nothing per packet:
the per-packet arrays go through the spill files. Batches are ``batch_records`` rows.

Layer: takes paths, calls capture/ (scan), decode/ (fast), gro/ (engine) and writes
Parquet through pyarrow; hands back a :class:`StreamResult` (summary dict, flows table,
paths written).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gropcap import __version__
from gropcap.decode.options import DecodeOptions
from gropcap.decode.schema import PACKET_SCHEMA, STATUS_NAMES
from gropcap.errors import ConfigError
from gropcap.gro.config import MODELS, GroConfig
from gropcap.gro.reasons import ROLE_ALONE, ROLE_HEAD, ROLE_MERGED, reason_name
from gropcap.io.columns import readable

# `gropcap analyze --out DIR` streams by itself above this much input (files' bytes): the
# in-memory path needs ~1.2 kB of RAM per packet, ~9x a 128-byte-snaplen capture's size
STREAM_AUTO_BYTES = 512 << 20
OUT_NAMES = ("packets.parquet", "superpackets.parquet", "flows.parquet")
# zstd as io.parquet; Parquet dictionary pages only for the string columns: for numeric
# columns they cost ~35% of the write time and made the files larger (measured on the
# benchmark capture's packets table)
_PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": ["encap", "model"]}


@dataclasses.dataclass
class StreamResult:
    """What :func:`stream_analyze` hands back.

    Attributes:
        summary: the same dict as ``Analysis.summary()`` (``gropcap analyze --format json``
            adds ``top_flows``: ``report.summary.report_dict``).
        flows: the flows table (one row per flow; in memory, it grows with flows only).
        paths: the Parquet files written (empty when ``out_dir`` was None).
        metadata: the provenance written into every Parquet file.
        peak_spill_bytes: largest size of the temporary files (decoded table + verdicts).
        timings: wall seconds per phase (``decode``, ``gro`` of which ``engine`` and
            ``coalesced``, ``superpackets``, ``packets``, ``flows``).
        flow_causes: per flow, the probable cause of its breaks
            (``report.explain.flow_causes``).
    """

    summary: dict
    flows: pa.Table
    paths: list
    metadata: dict
    peak_spill_bytes: int = 0
    # UDP tunnels on ports without a tunnel socket (report.receive.tunnel_hint, not run
    # again), or None
    udp_tunnel_hint: dict | None = None
    timings: dict = dataclasses.field(default_factory=dict)
    flow_causes: list = dataclasses.field(default_factory=list)

    @property
    def primary_model(self) -> str:
        """The model whose verdicts fill the unprefixed packet columns (napi if run)."""
        models = list(self.summary["models"])
        return "napi" if "napi" in models else models[0]

    @property
    def models(self) -> list[str]:
        return list(self.summary["models"])


def render_text(result: StreamResult, **kwargs) -> str:
    """The terminal report of ``gropcap analyze`` for a :class:`StreamResult`.

    ``report.summary.render_text`` run with this result's summary instead of one computed
    from in-memory tables (it reads only the summary, ``flows`` and ``primary_model``).
    """
    import types

    from gropcap.report import summary as S
    f = S.render_text
    g = dict(f.__globals__)
    g["summary_dict"] = lambda _analysis: result.summary
    fn = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    fn.__kwdefaults__ = f.__kwdefaults__
    return fn(result, **kwargs)


def streamable(config: GroConfig, *, engine: str = "fast", decoder: str = "fast",
               egress=None) -> str | None:
    """None when :func:`stream_analyze` models this run, else why not (one line)."""
    try:
        _check(config, MODELS, engine, decoder, egress)
    except ConfigError as e:
        return str(e.args[0]) if e.args else "not streamable"
    return None


class _Spill:
    """Arrays written one after another to a temporary file and read back in order."""

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "w+b")

    # record: dtype string (8 bytes, e.g. b"<i8") and element count, then the raw bytes
    _HEAD = struct.Struct("<8sQ")

    def put(self, *arrays) -> None:
        for a in arrays:
            a = np.ascontiguousarray(a).ravel()
            self.f.write(self._HEAD.pack(a.dtype.str.encode(), len(a)))
            self.f.write(memoryview(a).cast("B"))

    def rewind(self) -> None:
        self.f.flush()
        self.f.seek(0)

    def get(self, k: int) -> list[np.ndarray]:
        out = []
        for _ in range(k):
            code, n = self._HEAD.unpack(self.f.read(self._HEAD.size))
            a = np.empty(n, np.dtype(code.rstrip(b"\0").decode()))
            if n:
                self.f.readinto(memoryview(a).cast("B"))
            out.append(a)
        return out

    def size(self) -> int:
        return os.path.getsize(self.path)

    def close(self) -> None:
        self.f.close()


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    if n <= len(a):
        return a
    out = np.zeros(max(n, 2 * len(a)), a.dtype)
    out[:len(a)] = a
    return out


def _add_counts(acc_keys, acc_counts, keys):
    """Running histogram of int64 keys (keys, counts) merged with new values."""
    if not len(keys):
        return acc_keys, acc_counts
    u, c = np.unique(keys, return_counts=True)
    k = np.concatenate([acc_keys, u])
    v = np.concatenate([acc_counts, c])
    uu, inv = np.unique(k, return_inverse=True)
    return uu, np.bincount(inv.ravel(), weights=v, minlength=len(uu)).astype(np.int64)


def _by_name(hist: np.ndarray) -> dict[str, int]:
    """report.tables.count_by_name from a 256-bin histogram."""
    codes = np.nonzero(hist)[0]
    pairs = sorted(((int(hist[c]), int(c)) for c in codes), key=lambda p: (-p[0], p[1]))
    return {reason_name(c): n for n, c in pairs}


class _ModelRun:
    """One model's engine state, spill files and counters."""

    def __init__(self, model: str, config: GroConfig, tmp: str):
        self.model = model
        self.config = config.replace(model=model)
        self.state = None
        self.rows = _Spill(os.path.join(tmp, f"{model}.rows"))
        self.verdicts = _Spill(os.path.join(tmp, f"{model}.verdicts"))
        self.segs = _Spill(os.path.join(tmp, f"{model}.segs"))
        self.parts = 0
        self.reason_hist = np.zeros(256, np.int64)
        self.end_hist = np.zeros(256, np.int64)
        self.nseg = 0
        self.largest = 0
        self.data_segs = 0      # super-packets with payload (counted in the segments pass)
        self.file_segs = np.zeros(0, np.int64)       # super-packets per input file
        self.file_data_segs = np.zeros(0, np.int64)  # ... with payload
        self.flow_segs = np.zeros(0, np.int64)
        self.top_keys = np.zeros(0, np.int64)
        self.top_counts = np.zeros(0, np.int64)
        self.poll_time: list = []
        self.poll_queue: list = []
        self.encap: dict[str, int] = {}

    def feed(self, table: pa.Table, final: bool, coalesced=None):
        from gropcap.gro.engine import simulate_batch
        part, self.state = simulate_batch(table, self.config, self.state, final=final,
                                          coalesced=coalesced)
        self.parts += 1
        self.rows.put(part.flow_id, part.rx_queue)
        self.verdicts.put(part.p_row, part.p_reason, part.p_inst, part.p_poll)
        s = part.segs
        from gropcap.gro.engine import _SEG_FIELDS
        self.segs.put(*[s[f] for f in _SEG_FIELDS])
        self.reason_hist += np.bincount(part.p_reason, minlength=256)
        m = len(s["first"])
        if m:
            self.nseg += m
            self.end_hist += np.bincount(s["end"].astype(np.int64), minlength=256)
            self.largest = max(self.largest, int(s["count"].max()))
            flow = s["flow"].astype(np.int64)
            self.flow_segs = _grow(self.flow_segs, int(flow.max()) + 1)
            self.flow_segs[:int(flow.max()) + 1] += np.bincount(flow)
            self.top_keys, self.top_counts = _add_counts(
                self.top_keys, self.top_counts, flow * 256 + s["end"].astype(np.int64))
        if self.poll_time or len(part.poll_time):
            assert part.poll_base == sum(len(t) for t in self.poll_time)
        self.poll_time.append(part.poll_time)
        self.poll_queue.append(part.poll_queue)
        return part


class _SegOrder:
    """Delivery position of every super-packet (engine.assemble's order, online)."""

    def __init__(self, run: _ModelRun):
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        p_time, p_queue = cat(run.poll_time), cat(run.poll_queue)
        self.napi = run.config.model == "napi"
        self.inferred = self.napi and len(p_time) > 0
        run.poll_time = run.poll_queue = None
        if self.inferred:
            order = np.lexsort((np.arange(len(p_time)), p_queue, p_time))
            self.rank = np.empty(len(order), np.int64)
            self.rank[order] = np.arange(len(order))
            self.poll_segs = np.zeros(len(p_time), np.int64)

    def count(self, polls: np.ndarray) -> None:
        """First sweep: super-packets per poll."""
        if self.inferred and len(polls):
            self.poll_segs += np.bincount(polls, minlength=len(self.poll_segs))

    def start(self) -> None:
        if self.inferred:
            by_rank = np.zeros(len(self.rank), np.int64)
            by_rank[self.rank] = self.poll_segs
            start = np.concatenate([[0], np.cumsum(by_rank)[:-1]])
            self.offset = start[self.rank]          # first position of each poll
            self.seen = np.zeros(len(self.rank), np.int64)
        self.next = 0

    def positions(self, polls: np.ndarray) -> np.ndarray:
        """Second sweep (same order): positions of the next super-packets."""
        m = len(polls)
        if not self.inferred:
            pos = np.arange(self.next, self.next + m, dtype=np.int64)
            self.next += m
            return pos
        if not m:
            return np.zeros(0, np.int64)
        o = np.argsort(polls, kind="stable")
        ps = polls[o]
        starts = np.concatenate([[0], np.nonzero(np.diff(ps))[0] + 1])
        within_sorted = np.arange(m) - np.repeat(starts, np.diff(np.append(starts, m)))
        within = np.empty(m, np.int64)
        within[o] = within_sorted
        pos = self.offset[polls] + self.seen[polls] + within
        self.seen += np.bincount(polls, minlength=len(self.seen))
        return pos

    def poll_ids(self, polls: np.ndarray) -> np.ndarray:
        if self.inferred:
            return self.rank[polls]
        return polls if self.napi else np.full(len(polls), -1, np.int64)


class _Coalesced:
    """gso.CoalescedStats over a stream, counting what the summary reports: the first
    pass :meth:`add` s every batch, the GRO pass then gives each batch its
    :class:`gso.CoalescedInput` (gso_size needs the whole capture: the peer's SYN or the
    direction's most common segment may come later)."""

    def __init__(self, mtu: int | None = None):
        from gropcap.gso import CoalescedStats
        self.stats = CoalescedStats(mtu)
        self.gso_segs = 0       # segments of the coalesced frames
        self.segs_total = 0     # segments of every row (segments_in)
        self.data_segs = 0      # segments of the rows with payload
        self.file_segs = np.zeros(0, np.int64)        # segments per input file
        self.file_data_segs = np.zeros(0, np.int64)   # ... of the rows with payload
        self.sizes_seen: set[int] = set()

    @property
    def num(self) -> int:
        """Coalesced frames."""
        return self.stats.num

    def add(self, t: pa.Table) -> None:
        self.stats.add(t)

    def batch(self, t: pa.Table):
        """The batch's gso.CoalescedInput (after every batch went through :meth:`add`)."""
        co = self.stats.infer(t)
        rows = co.is_gso
        if rows.any():
            self.gso_segs += int(co.segs[rows].sum())
            self.sizes_seen.update(np.unique(co.gso_size[rows]).tolist())
        segs = co.segs.astype(np.int64)
        self.segs_total += int(segs.sum())
        # per file and for the rows with payload (report.summary.file_summaries/data_counts)
        has = t.column("payload_len").to_numpy() > 0
        self.data_segs += int(segs[has].sum())
        fidx = t.column("file_index").to_numpy().astype(np.int64)
        n = max(len(self.file_segs), int(fidx.max()) + 1 if len(fidx) else 0)
        self.file_segs = np.pad(self.file_segs, (0, n - len(self.file_segs))) + \
            np.bincount(fidx, segs, minlength=n).astype(np.int64)
        self.file_data_segs = np.pad(self.file_data_segs, (0, n - len(self.file_data_segs))) \
            + np.bincount(fidx[has], segs[has], minlength=n).astype(np.int64)
        return co


class _Counters:
    """Capture-level counters for the summary (report.summary.summary_dict)."""

    def __init__(self, verify_checksums: bool):
        self.verify = verify_checksums
        self.packets = 0
        self.data_packets = 0     # rows with payload (report.summary.data_counts)
        # per input file (report.summary.file_summaries); rows arrive file after file
        self.file_packets = np.zeros(0, np.int64)
        self.file_bytes = np.zeros(0, np.int64)
        self.file_data = np.zeros(0, np.int64)
        self.last_file = 0
        self.wire_bytes = 0
        self.status = np.zeros(256, np.int64)
        self.encap: dict[str, int] = {}
        self.pre = 0            # frames marked coalesced whatever the MTU
        self.pre_largest = 0
        self.tot_hist: dict[int, list[int]] = {}  # IP length -> [frames, largest frame]
        self.udp_tunnels: dict = {}   # (kind, port) -> packets (report.receive)
        self.partial = 0
        self.cut = 0
        self.short = 0
        self.coalesced: _Coalesced | None = None

    def _add_per_file(self, fidx: np.ndarray, wire: np.ndarray, has: np.ndarray) -> None:
        if not len(fidx):
            return
        if fidx[0] < self.last_file or np.any(np.diff(fidx) < 0):
            self.file_packets = None            # not file after file: no per-file table
        self.last_file = int(fidx[-1])
        if self.file_packets is None:
            return
        n = max(len(self.file_packets), int(fidx.max()) + 1)
        grow = lambda a: np.pad(a, (0, n - len(a)))  # noqa: E731
        self.file_packets = grow(self.file_packets) + np.bincount(fidx, minlength=n)
        self.file_bytes = grow(self.file_bytes) + np.bincount(fidx, wire, minlength=n) \
            .astype(np.int64)
        self.file_data = grow(self.file_data) + np.bincount(fidx[has], minlength=n)

    def file_of(self, rows: np.ndarray) -> np.ndarray:
        """Input file of packet rows (rows are numbered file after file)."""
        return np.searchsorted(np.cumsum(self.file_packets), rows, side="right")

    def add(self, t: pa.Table) -> None:
        from gropcap.constants import EPB_FLAG_TCP_SEG_OFFLOAD
        from gropcap.decode.schema import CSUM_PARTIAL, STATUS_TRUNCATED

        col = lambda name: t.column(name).to_numpy()  # noqa: E731
        self.packets += t.num_rows
        has = col("payload_len") > 0
        self.data_packets += int(np.count_nonzero(has))
        wire = col("wire_len")
        self._add_per_file(col("file_index").astype(np.int64), wire.astype(np.int64), has)
        self.wire_bytes += int(wire.astype(np.int64).sum())
        self.status += np.bincount(col("status").astype(np.int64), minlength=256)
        for name, c in _encap_counts(t, np.ones(t.num_rows, np.bool_)).items():
            self.encap[name] = self.encap.get(name, 0) + c
        # report.summary.capture_warnings, counted per batch
        outer = col("outer_ip_version") != 0
        ver = np.where(outer, col("outer_ip_version"), col("ip_version"))
        tot = np.where(outer, col("outer_ip_tot_len"), col("ip_tot_len")).astype(np.int64)
        # frames above the MTU are counted when it is known (warnings())
        pre = ((ver == 4) & (tot == 0)) | ((col("epb_flags") & EPB_FLAG_TCP_SEG_OFFLOAD) != 0)
        if pre.any():
            self.pre += int(pre.sum())
            self.pre_largest = max(self.pre_largest, int(wire[pre].max()))
        rest = (ver != 0) & ~pre
        if rest.any():
            u, inv, cnt = np.unique(tot[rest], return_inverse=True, return_counts=True)
            big = np.zeros(len(u), np.int64)
            np.maximum.at(big, inv.ravel(), wire[rest].astype(np.int64))
            for k, c, b in zip(u.tolist(), cnt.tolist(), big.tolist()):
                e = self.tot_hist.setdefault(k, [0, 0])
                e[0] += c
                e[1] = max(e[1], b)
        from gropcap.report.receive import udp_tunnel_counts
        for k, n in udp_tunnel_counts(t).items():
            self.udp_tunnels[k] = self.udp_tunnels.get(k, 0) + n
        self.partial += int(np.count_nonzero(col("l4_csum_state") == CSUM_PARTIAL))
        self.cut += int(np.count_nonzero(col("status") == STATUS_TRUNCATED))
        if self.verify:
            self.short += int(np.count_nonzero((col("cap_len") < wire)
                                               & (col("l4_proto") != 0)))

    def warnings(self, flows: pa.Table) -> list[str]:
        """The text of report.summary.capture_warnings from the counters."""
        from gropcap.constants import IPPROTO_TCP
        out: list[str] = []
        if not self.packets:
            return out
        mtu = self.coalesced.stats.mtu_inference()
        if mtu.conflict:
            out.append(mtu.conflict)
        above = [e for k, e in self.tot_hist.items() if k > mtu.mtu]
        pre = self.pre + sum(e[0] for e in above)
        if pre:
            largest = max([self.pre_largest] + [e[1] for e in above])
            out.append(f"{pre} frames are already coalesced (more IP bytes than the "
                       f"{mtu.mtu}-byte MTU, IPv4 total length 0 or the pcapng TSO flag; "
                       f"largest {largest} bytes): captured after GRO/TSO or on a "
                       f"jumbo MTU, so the capture does not show the segments on the wire")
            co = self.coalesced
            if co is not None and co.num:
                sizes = sorted(co.sizes_seen)
                shown = ", ".join(str(int(x)) for x in sizes[:4]) + (", ..." if len(sizes) > 4
                                                                     else "")
                out[-1] += (f"; {co.num} TCP frames are treated as arriving GSO packets "
                            f"of {co.gso_segs} segments with the gso_size "
                            f"inferred from their flow ({shown} bytes: SYN MSS, else the most "
                            f"common full segment)")
        if self.partial:
            out.append(f"{self.partial} TCP/UDP checksums hold only the pseudo-header sum "
                       f"(offload partial: captured on the sending host)")
        if self.cut:
            out.append(f"{self.cut} frames are cut by the snap length inside their "
                       f"headers: GRO cannot compare them (BYPASS_DECODE); capture with a "
                       f"larger snap length (tcpdump -s)")
        if self.verify and self.short:
            out.append(f"{self.short} frames are cut by the snap length: their "
                       f"TCP/UDP checksums cannot be verified")
        if flows.num_rows:
            proto = flows.column("l4_proto").to_pylist()
            keys = list(zip(flows.column("src").to_pylist(), flows.column("sport").to_pylist(),
                            flows.column("dst").to_pylist(),
                            flows.column("dport").to_pylist()))
            tcp = [bool(p == IPPROTO_TCP and (k[1] or k[3])) for k, p in zip(keys, proto)]
            present = {k for k, t in zip(keys, tcp) if t}
            one_way = [i for i, (k, t) in enumerate(zip(keys, tcp))
                       if t and (k[2], k[3], k[0], k[1]) not in present]
            if one_way:
                a, ap, b, bp = keys[one_way[0]]
                out.append(f"{len(one_way)} of {sum(tcp)} TCP flows are seen in one direction "
                           f"only (e.g. flow {one_way[0]}, {a}:{ap} > {b}:{bp}): a filtered, "
                           f"mirrored or asymmetric capture")
        return out


def _encap_counts(t: pa.Table, mask: np.ndarray) -> dict[str, int]:
    """Rows of ``t`` where ``mask`` counted per ``encap`` string."""
    out: dict[str, int] = {}
    if not t.num_rows or not mask.any():
        return out
    enc = t.column("encap").cast(pa.string()).combine_chunks().dictionary_encode()
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)[mask]
    names = enc.dictionary.to_pylist()
    for k, c in enumerate(np.bincount(idx, minlength=len(names)).tolist()):
        if c:
            out[names[k]] = out.get(names[k], 0) + c
    return out


_FLOW_KEY_COLS = ("encap", "ip_version", "ip_src", "ip_dst", "l4_proto", "sport", "dport",
                  "tun_type", "tun_key", "vlan_tci0", "dsa_port")


def _flows_table(keys: pa.Table, packets: np.ndarray, payload: np.ndarray,
                 runs: list[_ModelRun]) -> pa.Table:
    """report.tables.flows_table from per-flow counters."""
    from gropcap.report.tables import flow_key_columns

    n_flows = keys.num_rows
    cols = {
        **flow_key_columns(keys),
        "packets": packets[:n_flows].astype(np.int64),
        "payload_bytes": payload[:n_flows].astype(np.int64),
    }
    for run in runs:
        segs = np.zeros(n_flows, np.int64)
        k = min(n_flows, len(run.flow_segs))
        segs[:k] = run.flow_segs[:k]
        cols[f"{run.model}_superpackets"] = segs
        with np.errstate(divide="ignore", invalid="ignore"):
            cols[f"{run.model}_ratio"] = np.where(segs > 0, cols["packets"] / np.maximum(segs, 1),
                                                  0.0)
        top = [""] * n_flows
        best: dict[int, tuple[int, int]] = {}
        for key, c in zip(run.top_keys.tolist(), run.top_counts.tolist()):
            f, r = divmod(key, 256)
            if f not in best or c > best[f][0]:
                best[f] = (c, r)
        for f, (_, r) in best.items():
            top[f] = reason_name(r)
        cols[f"{run.model}_top_reason"] = pa.array(top, pa.string())
    return pa.table(cols)


class _RowCursor:
    """Per-row arrays spilled in row order (flow_id, rx_queue), served in row ranges."""

    def __init__(self, spill: _Spill, k: int):
        self.spill, self.k = spill, k
        self.buf = [np.zeros(0, np.int64)] * k

    def take(self, n: int) -> list[np.ndarray]:
        while len(self.buf[0]) < n:
            got = self.spill.get(self.k)
            self.buf = [np.concatenate([b, g]) for b, g in zip(self.buf, got)]
        out = [b[:n] for b in self.buf]
        self.buf = [b[n:] for b in self.buf]
        return out


class _VerdictCursor:
    """Verdicts spilled in processing order (a NAPI queue's rows may be decided a batch
    later), served by row range."""

    def __init__(self, spill: _Spill):
        self.spill = spill
        self.buf = [np.zeros(0, np.int64) for _ in range(4)]

    def take(self, r0: int, r1: int) -> list[np.ndarray]:
        while int(np.count_nonzero((self.buf[0] >= r0) & (self.buf[0] < r1))) < r1 - r0:
            got = self.spill.get(4)
            self.buf = [np.concatenate([b, g.astype(np.int64)]) for b, g in zip(self.buf, got)]
        inside = (self.buf[0] >= r0) & (self.buf[0] < r1)
        rows = self.buf[0][inside] - r0
        out = []
        for b in self.buf[1:]:
            a = np.zeros(r1 - r0, np.int64)
            a[rows] = b[inside]
            out.append(a)
        self.buf = [b[~inside] for b in self.buf]
        return out


def _check(config: GroConfig, models, engine: str, decoder: str, egress) -> None:
    from gropcap.gro.reference import needs_reference
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"unknown model {m!r}", hint=f"use one of {MODELS}")
    if engine != "fast" or decoder != "fast":
        raise ConfigError("streaming runs the fast decoder and engine only",
                          hint="drop --stream to use the reference path")
    if needs_reference(config):
        raise ConfigError("streaming does not model UDP GRO or UDP tunnel sockets (reference "
                          "engine only)", hint="analyze without --stream (in memory)")
    if config.tunnel_gro is not None or egress is not None:
        raise ConfigError("streaming does not model the gro_cells stage or egress yet",
                          hint="analyze without --stream (in memory)")


def stream_analyze(paths, config: GroConfig | None = None, *, models=MODELS,
                   decode_options: DecodeOptions | None = None, out_dir: str | None = None,
                   force: bool = False, batch_records: int = 65536,
                   engine: str = "fast", decoder: str = "fast", egress=None,
                   tmp_dir: str | None = None, progress=None,
                   receiver=None) -> StreamResult:
    """Analyse captures batch by batch in bounded memory (see the module docstring).

    Args:
        paths: capture file(s) or directories (as :func:`gropcap.pipeline.analyze`).
        config: GRO configuration; ``model`` is overridden per entry of ``models``.
        models: batch models to run.
        decode_options: decoder options.
        out_dir: write ``packets.parquet``, ``superpackets.parquet``, ``flows.parquet``
            there (temporary name + rename; existing files need ``force``); None: only the
            summary and the flows table.
        batch_records: records per batch: transient memory ~1.8 kB x batch_records
            (65536: ~120 MB) on top of ~330 MB of code, JIT and Arrow pools.
        tmp_dir: where the temporary decoded table and verdicts go (default: ``out_dir``,
            else the system temporary directory); about the size of the packets output.
        receiver: a receiver profile (path) or the ``receiver.ReceiverInfo`` of one
            already applied to ``config``, as :func:`gropcap.pipeline.analyze` takes it.

    Returns:
        A :class:`StreamResult`; ``summary`` equals ``analyze(...).summary()`` and the
        Parquet files hold the same rows as ``io.parquet.write_analysis``.

    Raises:
        ConfigError for what only the in-memory path models (gro_cells stage, egress,
        UDP GRO, captures already coalesced).

    Example:
        >>> r = stream_analyze("big.pcap", out_dir="out")          # doctest: +SKIP
        >>> r.summary["models"]["napi"]["aggregation_ratio"]        # doctest: +SKIP
    """
    from gropcap.capture import expand_inputs
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.decode.fast import decode_batch
    from gropcap.io.parquet import OutputError
    from gropcap.pipeline import Analysis

    config = config or GroConfig()
    from gropcap.receiver import resolve_receiver
    config, receiver = resolve_receiver(config, receiver)
    decode_options = decode_options or DecodeOptions()
    models = list(models)
    _check(config, models, engine, decoder, egress)
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    files = expand_inputs([str(p) for p in paths])
    targets = [os.path.join(out_dir, n) for n in OUT_NAMES] if out_dir else []
    if not force:
        for p in targets:
            if os.path.exists(p):
                raise OutputError("output exists", path=p, hint="use --force to replace it")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gropcap-stream-", dir=tmp_dir or out_dir)
    written: list[str] = []
    try:
        runs = [_ModelRun(m, config, tmp) for m in models]
        counters = _Counters(config.verify_checksums)
        # Arrow IPC with lz4 buffers: 3-4x cheaper to write and read back than Parquet
        dec_path = os.path.join(tmp, "decoded.arrow")
        dec_writer = None
        infos = []
        key_parts: list[pa.Table] = []
        flow_pk = np.zeros(0, np.int64)
        flow_pay = np.zeros(0, np.float64)
        n_flows = 0
        peak = 0
        import time
        clock = time.perf_counter
        tm = {"engine": 0.0, "coalesced": 0.0}
        t_start = clock()
        # 1. decode pass: decoded rows to a temporary Parquet, counters, coalesced stats
        coal = _Coalesced(config.mtu)
        counters.coalesced = coal
        from gropcap.decode.support import LinktypeCheck
        for file_index, path in enumerate(files):
            info = None
            linktypes = LinktypeCheck()
            for info, rb in iter_scan_batches(path, batch_records=batch_records):
                if progress is not None:
                    progress.batch(path, info, rb)
                if not len(rb):
                    continue
                linktypes.add(rb)
                dec = decode_batch(rb, decode_options, file_index=file_index)
                t = pa.Table.from_batches([dec])
                counters.add(t)
                coal.add(t)
                if dec_writer is None:
                    dec_sink = pa.OSFile(dec_path, "wb")
                    # the stream format: each batch keeps its own encap dictionary
                    dec_writer = pa.ipc.new_stream(
                        dec_sink, PACKET_SCHEMA,
                        options=pa.ipc.IpcWriteOptions(compression="lz4"))
                dec_writer.write_table(t)
            linktypes.finish(info)
            infos.append(info)
        if dec_writer is not None:
            dec_writer.close()
            dec_sink.close()

        def decoded():
            # read, not mapped: mapped pages of the temporary file would count as resident
            if counters.packets:
                with pa.OSFile(dec_path, "rb") as src:
                    yield from pa.ipc.open_stream(src)

        tm["decode"] = clock() - t_start
        t_start = clock()
        # 2. GRO pass: every model over the decoded rows, state carried
        from gropcap.report.progress import phase
        gro_phase = phase(progress, f"GRO {'+'.join(models)}", counters.packets)
        for dec in decoded():
            gro_phase.advance(dec.num_rows)
            t = pa.Table.from_batches([dec])
            t0 = clock()
            co = coal.batch(t) if coal.num else None
            t1 = clock()
            parts = [run.feed(t, final=False, coalesced=co) for run in runs]
            tm["coalesced"] += t1 - t0
            tm["engine"] += clock() - t1
            if parts:
                fid = parts[0].flow_id.astype(np.int64)
                top = int(fid.max()) + 1
                flow_pk = _grow(flow_pk, top)
                flow_pay = _grow(flow_pay, top)
                flow_pk[:top] += np.bincount(fid)
                flow_pay[:top] += np.bincount(fid, weights=t.column("payload_len")
                                              .to_numpy().astype(np.float64))
                if top > n_flows:
                    new = np.nonzero(fid >= n_flows)[0]
                    _, first = np.unique(fid[new], return_index=True)
                    key_parts.append(t.select(_FLOW_KEY_COLS).take(new[first]))
                    n_flows = top
        for run in runs:
            run.feed(PACKET_SCHEMA.empty_table(), final=True)
        gro_phase.end()
        peak = sum(r.rows.size() + r.verdicts.size() + r.segs.size() for r in runs) + \
            (os.path.getsize(dec_path) if os.path.exists(dec_path) else 0)

        tm["gro"] = clock() - t_start
        t_start = clock()
        keys = pa.concat_tables(key_parts) if key_parts else \
            PACKET_SCHEMA.empty_table().select(_FLOW_KEY_COLS)
        flows = _flows_table(keys, flow_pk, flow_pay, runs)
        meta_of = Analysis(PACKET_SCHEMA.empty_table(), infos, config,
                           {m: None for m in models}, decode_options)
        meta_of.mtu = coal.stats.mtu_inference()
        meta_of.receiver = receiver   # receiver.ReceiverInfo of a profile the CLI applied
        meta = meta_of.metadata()

        tm["flows"] = clock() - t_start
        t_start = clock()
        # 3. super-packets pass: delivery positions, inst -> position map, Parquet rows
        from gropcap.gro.engine import _SEG_FIELDS, _gso_table
        orders = {}
        inst_pos = {}
        inst_first = {}
        sp_writer = None
        sp_tmp = None
        if out_dir:
            sp_tmp = os.path.join(tmp, "superpackets.parquet")
        sp_phase = phase(progress, "super-packets", sum(r.parts for r in runs), "batches")
        for run in runs:
            so = _SegOrder(run)
            run.segs.rewind()
            for _ in range(run.parts):
                s = dict(zip(_SEG_FIELDS, run.segs.get(len(_SEG_FIELDS))))
                so.count(s["poll"])
            so.start()
            ninst = int(run.state.kernel.ctr[1])
            # delivery position per instance; -(pos + 1) for a super-packet of one packet
            ipos = np.full(ninst, -1, np.int32 if run.nseg < 2 ** 31 - 1 else np.int64)
            gtable = _gso_table(run.config)
            run.segs.rewind()
            pend: dict[str, np.ndarray] | None = None
            next_pos = 0
            for i in range(run.parts):
                sp_phase.advance(1)
                s = dict(zip(_SEG_FIELDS, run.segs.get(len(_SEG_FIELDS))))
                run.data_segs += int(np.count_nonzero(s["payload"] > 0))
                if counters.file_packets is not None and len(s["first"]):
                    n_files = len(counters.file_packets)
                    f = counters.file_of(s["first"])
                    run.file_segs = run.file_segs[:n_files] + np.bincount(
                        f, minlength=n_files)[:n_files] if len(run.file_segs) else \
                        np.bincount(f, minlength=n_files)[:n_files]
                    d = np.bincount(f[s["payload"] > 0], minlength=n_files)[:n_files]
                    run.file_data_segs = run.file_data_segs + d if len(
                        run.file_data_segs) else d
                pos = so.positions(s["poll"])
                if len(pos):
                    ipos[s["inst"]] = np.where(s["count"] > 1, pos, -pos - 1)
                if not out_dir:
                    continue
                gso_type = np.zeros(len(pos), np.uint32)
                multi = s["count"] > 1
                gso_type[multi] = gtable[s["gcode"][multi], s["fixed"][multi] & 3]
                rows = {
                    "seg_id": pos, "flow_id": s["flow"], "first_packet": s["first"],
                    "last_packet": s["last"], "count": s["count"].astype(np.int32),
                    "payload_len": s["payload"], "gso_size": s["gso"].astype(np.int32),
                    "gso_type": gso_type, "end_reason": s["end"].astype(np.uint8),
                    "rx_queue": s["queue"].astype(np.uint16),
                    "poll_id": so.poll_ids(s["poll"]).astype(np.int64),
                }
                pend = rows if pend is None else {k: np.concatenate([pend[k], rows[k]])
                                                  for k in rows}
                o = np.argsort(pend["seg_id"], kind="stable")
                pend = {k: v[o] for k, v in pend.items()}
                exp = next_pos + np.arange(len(o))
                ready = len(o) if i == run.parts - 1 else \
                    int(np.argmin(np.append(pend["seg_id"] == exp, False)))
                if ready:
                    chunk = {k: v[:ready] for k, v in pend.items()}
                    tbl = readable(pa.table(chunk).append_column(
                        "model", pa.array([run.model] * ready, pa.string())))
                    if sp_writer is None:
                        from gropcap.io.parquet import with_metadata
                        sp_writer = pq.ParquetWriter(
                            sp_tmp, with_metadata(tbl.slice(0, 0), meta).schema,
                            **_PARQUET_OPTIONS)
                    sp_writer.write_table(tbl)
                    next_pos += ready
                    pend = {k: v[ready:] for k, v in pend.items()}
            orders[run.model] = so
            inst_pos[run.model] = ipos
            # head = the first row of an instance (a flow's rows keep their order)
            inst_first[run.model] = np.zeros(ninst, np.bool_)
            run.segs.close()
            os.unlink(run.segs.path)

        sp_phase.end()
        tm["superpackets"] = clock() - t_start
        t_start = clock()
        # 4. packets pass: decoded rows + verdicts; per-model encapsulation counts
        primary = "napi" if "napi" in models else models[0]
        pk_tmp = os.path.join(tmp, "packets.parquet") if out_dir else None
        pk_writer = None
        for run in runs:
            run.rows.rewind()
            run.verdicts.rewind()
        cursors = {r.model: (_RowCursor(r.rows, 2), _VerdictCursor(r.verdicts)) for r in runs}

        from gropcap.report.explain import FlowCauses
        causes = FlowCauses()
        r0 = 0
        pk_phase = phase(progress, "packets.parquet" if out_dir else "verdicts",
                         counters.packets)
        for dec in decoded():
            pk_phase.advance(dec.num_rows)
            n = dec.num_rows
            r1 = r0 + n
            t = pa.Table.from_batches([dec])
            cols = {}
            for run in runs:
                fid, rxq = cursors[run.model][0].take(n)
                reason, inst, poll = cursors[run.model][1].take(r0, r1)
                so = orders[run.model]
                code = inst_pos[run.model][inst].astype(np.int64)
                alone = code < 0
                gro_seg = np.where(alone, -code - 1, code)
                role = np.where(alone, ROLE_ALONE, ROLE_MERGED).astype(np.uint8)
                seen = inst_first[run.model]
                multi = np.flatnonzero(~alone)
                _, first_idx = np.unique(inst[multi], return_index=True)
                cand = multi[first_idx]
                head = cand[~seen[inst[cand]]]
                role[head] = ROLE_HEAD
                seen[inst[multi]] = True
                poll_id = so.rank[poll] if so.inferred else poll
                c = {"flow_id": fid.astype(np.int64), "gro_seg": gro_seg, "gro_role": role,
                     "reason": reason.astype(np.uint8), "rx_queue": rxq.astype(np.uint16),
                     "poll_id": poll_id.astype(np.int64)}
                for name, c_ in _encap_counts(t, role != ROLE_MERGED).items():
                    run.encap[name] = run.encap.get(name, 0) + c_
                if run.model == primary:
                    cols = {**c, **cols}
                    causes.add(fid, t.column("tcp_seq").to_numpy(),
                               t.column("payload_len").to_numpy(),
                               t.column("l4_proto").to_numpy(), reason)
                else:
                    cols.update({f"{run.model}_{k}": v for k, v in c.items() if k != "flow_id"})
            order = [k for k in ("flow_id", "gro_seg", "gro_role", "reason", "rx_queue",
                                 "poll_id")] + [k for k in cols if "_" in k and
                                                k.split("_", 1)[0] in models]
            for name in order:
                t = t.append_column(name, pa.array(cols[name]))
            if not out_dir:
                r0 = r1
                continue
            t = readable(t)
            if pk_writer is None:
                from gropcap.io.parquet import with_metadata
                pk_writer = pq.ParquetWriter(pk_tmp, with_metadata(t.slice(0, 0), meta).schema,
                                             **_PARQUET_OPTIONS)
            pk_writer.write_table(t)
            r0 = r1
        pk_phase.end()
        summary = _summary(counters, runs, infos, config, flows)
        tm["packets"] = clock() - t_start
        if out_dir:
            if pk_writer is None:
                empty = readable(_empty_packets(models, primary))
                from gropcap.io.parquet import with_metadata
                pq.write_table(with_metadata(empty, meta), pk_tmp, compression="zstd")
            else:
                pk_writer.close()
            if sp_writer is None:
                empty = readable(_empty_superpackets())
                from gropcap.io.parquet import with_metadata
                pq.write_table(with_metadata(empty, meta), sp_tmp, compression="zstd")
            else:
                sp_writer.close()
            from gropcap.io.parquet import write_table
            fl_tmp = os.path.join(tmp, "flows.parquet")
            write_table(flows, fl_tmp, meta, force=True)
            for src, dst in zip((pk_tmp, sp_tmp, fl_tmp), targets):
                shutil.move(src, dst) if os.path.dirname(os.path.abspath(src)) != \
                    os.path.dirname(os.path.abspath(dst)) else os.replace(src, dst)
                written.append(dst)
        from gropcap.report.receive import missing_tunnels
        return StreamResult(summary=summary, flows=flows, paths=written, metadata=meta,
                            peak_spill_bytes=peak, timings=tm,
                            udp_tunnel_hint=missing_tunnels(counters.udp_tunnels, config),
                            flow_causes=causes.result(flows.num_rows))
    finally:
        for run in locals().get("runs", []):
            for sp in (run.rows, run.verdicts, run.segs):
                try:
                    sp.close()
                except Exception:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)


def _empty_packets(models, primary) -> pa.Table:
    from gropcap.gro.result import PACKET_RESULT_DTYPES
    t = PACKET_SCHEMA.empty_table()
    for k, dt in PACKET_RESULT_DTYPES.items():
        t = t.append_column(k, pa.array(np.zeros(0, dt)))
    for m in models:
        if m != primary:
            for k, dt in PACKET_RESULT_DTYPES.items():
                if k != "flow_id":
                    t = t.append_column(f"{m}_{k}", pa.array(np.zeros(0, dt)))
    return t


def _empty_superpackets() -> pa.Table:
    from gropcap.gro.result import SEG_DTYPES
    cols = {k: pa.array(np.zeros(0, dt)) for k, dt in SEG_DTYPES.items()}
    cols["model"] = pa.array([], pa.string())
    return pa.table(cols)


def _summary(c: _Counters, runs, infos, config: GroConfig, flows: pa.Table) -> dict:
    """report.summary.summary_dict from the streaming counters."""
    from gropcap.context import ReceiveContext
    from gropcap.report.receive import napi_dependence
    from gropcap.report.summary import data_counts
    statuses = {STATUS_NAMES.get(int(s), str(int(s))): int(c.status[s])
                for s in np.nonzero(c.status)[0]}
    models = {}
    co = c.coalesced if c.coalesced is not None and c.coalesced.num else None
    seg_in = co.segs_total if co else c.packets
    for r in runs:
        n_out = r.nseg
        models[r.model] = {
            "packets_in": c.packets, "segments_in": seg_in, "superpackets_out": n_out,
            "aggregation_ratio": round(seg_in / n_out, 4) if n_out else 0.0,
            **data_counts(co.data_segs if co else c.data_packets, r.data_segs),
            "merged_packets": int(r.reason_hist[0]),
            "largest_superpacket": r.largest if n_out else 0,
            "reasons": _by_name(r.reason_hist), "end_reasons": _by_name(r.end_hist),
        }
    enc = {}
    for name in sorted(c.encap, key=lambda k: (-c.encap[k], k)):
        row: dict = {"packets": c.encap[name]}
        for r in runs:
            sp = r.encap.get(name, 0)
            row[r.model] = {"superpackets": sp,
                            "aggregation_ratio": round(c.encap[name] / sp, 4) if sp else 0.0}
        enc[name or "(none)"] = row
    files = [{"path": i.path, "records": i.records, "sha256": i.sha256,
              "warnings": list(i.warnings)} for i in infos]
    if c.file_packets is not None:
        for k, f in enumerate(files):
            get = lambda a: int(a[k]) if k < len(a) else 0  # noqa: E731
            f.update(packets=get(c.file_packets), wire_bytes=get(c.file_bytes), models={})
            segs = get(co.file_segs) if co else f["packets"]
            data = get(co.file_data_segs) if co else get(c.file_data)
            for r in runs:
                sp = get(r.file_segs)
                f["models"][r.model] = {
                    "superpackets_out": sp,
                    "aggregation_ratio": round(segs / sp, 4) if sp else 0.0,
                    **data_counts(data, get(r.file_data_segs))}
    return {
        "gropcap": __version__,
        "kernel": config.kernel.name,
        "files": files,
        "packets": c.packets,
        "wire_bytes": c.wire_bytes,
        "status": statuses,
        "models": models,
        "encapsulations": enc,
        "warnings": c.warnings(flows),
        "mtu": c.coalesced.stats.mtu_inference().as_dict(),
        "receive": ReceiveContext.from_config(config).with_mtu(
            c.coalesced.stats.mtu_inference()).as_dict(),
        "napi_dependence": napi_dependence(models),
    }


__all__ = ["stream_analyze", "StreamResult", "render_text", "streamable",
           "STREAM_AUTO_BYTES"]
