"""Recorded pairs: a wire view and the kernel's own post-GRO view of the same traffic.

``sample_pcaps/make_pairs.py`` records ``<name>.wire.pcap`` (tcpdump on the veth that sends
to the receiver, segmentation offloads off: wire-sized frames), ``<name>.postgro.pcap``
(tcpdump on the receiving veth: one frame per skb that GRO delivered) and ``<name>.json``
(the receiver's settings). Both views hold only the direction the receiver aggregates, with
the same BPF filter, so the post-GRO frame count is the kernel's packet count for the wire
view's traffic. Recordings made with ``--acks`` also have ``<name>.both.pcap``: the wire
view with the receiver's ACKs, both directions as a tap on the link takes them (what
``--poll-acks`` reads); their models' counts are those of the wire view's directions.
A pair's captures may be stored zstd-compressed (``<file>.zst``, as the committed
``acks1``/``acks2`` sets are); gropcap reads them as they are. This module loads a pair, builds the GroConfig its metadata describes, and
counts what the models deliver on the wire view next to the kernel's count.

Layer: capture paths -> :class:`PairCounts` (runs decode + GRO through ``pipeline``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from gropcap.errors import GropcapError
from gropcap.gro.config import GroConfig


def frame_lengths(path) -> list[int]:
    """Original (wire) lengths of the records of a little-endian microsecond pcap, as
    tcpdump writes them (make_pairs.py checks the wire view with it); a ``.zst`` file is
    decompressed first."""
    data, off, out = Path(path).read_bytes(), 24, []
    if str(path).endswith(".zst"):
        import zstandard
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    while off + 16 <= len(data):
        incl, orig = struct.unpack_from("<II", data, off + 8)
        out.append(orig)
        off += 16 + incl
    return out


@dataclass(frozen=True)
class Pair:
    """One recording: the two views and its metadata (``<name>.json``)."""

    name: str
    wire: Path
    postgro: Path
    meta: dict

    @property
    def both(self) -> Path | None:
        """The capture of both directions (``make_pairs.py --acks``), or None."""
        return self.file("both")

    def file(self, key: str) -> Path | None:
        """The pair's file the JSON names under ``key`` (``acks``, ``both``), as stored
        (plain or ``.zst``), or None."""
        name = self.meta.get(key)
        return _stored(self.wire.parent / name) if name else None

    def config(self, **changes) -> GroConfig:
        """The GroConfig of the recorded receiver: the gropcap options the recording names
        (UDP tunnel sockets, UDP_GRO sockets), the receiving veth's queues, gro_max_size,
        gro_flush_timeout and napi_defer_hard_irqs, and the kernel's HZ; ``changes`` on top."""
        rcv = self.meta.get("receiver", {})
        kw: dict = dict(self.meta.get("gropcap_options", {}))
        for key, field in (("rx_queues", "queues"), ("gro_flush_timeout_ns",
                                                     "gro_flush_timeout_ns"),
                           ("napi_defer_hard_irqs", "napi_defer_hard_irqs"),
                           ("gro_max_size", "gro_max_size"),
                           ("gro_ipv4_max_size", "gro_ipv4_max_size")):
            if rcv.get(key):
                kw[field] = rcv[key]
        if self.meta.get("hz"):
            kw["hz"] = self.meta["hz"]
        kw.update(changes)
        return GroConfig(**kw)


def _stored(path: Path) -> Path:
    """``path``, or its zstd-compressed ``path.zst`` when only that exists."""
    z = path.with_name(path.name + ".zst")
    return z if not path.exists() and z.exists() else path


def load_pair(path) -> Pair:
    """Load the pair named by ``path``: ``DIR/NAME`` or any of ``NAME.json``,
    ``NAME.wire.pcap``, ``NAME.postgro.pcap``."""
    p = Path(path)
    name = p.name
    for suffix in (".json", ".wire.pcap", ".postgro.pcap", ".wire.pcap.zst",
                   ".postgro.pcap.zst"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    base = p.parent / name
    files = [_stored(base.with_name(name + s))
             for s in (".wire.pcap", ".postgro.pcap", ".json")]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise GropcapError(f"pair {base}: missing {', '.join(missing)}",
                           hint="record pairs with sample_pcaps/make_pairs.py")
    return Pair(name, files[0], files[1], json.loads(files[2].read_text()))


def find_pairs(directory) -> list[Pair]:
    """Every pair in ``directory`` (by its ``*.json``), sorted by name."""
    return [load_pair(j) for j in sorted(Path(directory).glob("*.json"))]


@dataclass(frozen=True)
class PairCounts:
    """Packets on the wire, what the kernel delivered, what each model delivers."""

    name: str
    wire: int
    kernel: int
    models: dict           # label -> super-packets delivered
    wire_payload: int      # L4 payload bytes of the wire view
    kernel_payload: int    # L4 payload bytes of the post-GRO view (equal when all merged)

    def error(self, label: str) -> float:
        """Relative difference of a model's count from the kernel's."""
        return (self.models[label] - self.kernel) / self.kernel


def kernel_poll_times(ts_ns, work_sequence, time_ns=None) -> "np.ndarray":
    """Timestamps that make the napi model poll exactly as the kernel did.

    ``work_sequence``: the frames each NAPI poll with work took, in order
    (``napi:napi_poll`` ``work``, recorded by make_pairs.py as ``kernel_polls``). The
    tracepoint also counts the few frames the views' BPF filter leaves out (ARP, neighbour
    discovery before the first TCP frame), so the first ``sum - len(ts_ns)`` are taken as
    those. Every frame of a poll gets the arrival time of the poll's last frame (the poll
    ran after it arrived), at least 1 ns after the previous poll; with ``poll_gap_ns=0`` the
    model's gap rule then joins exactly one kernel poll's frames and nothing else.

    ``time_ns``: each poll's tracepoint time on the views' clock (``kernel_polls.time_ns``
    of ``make_pairs.py --acks``), when recorded. The tracepoint fires after the poll took
    its frames, so a wire frame placed in a poll that ran before it arrived means the
    counts do not line up (a frame one view holds and the poll did not take, or the other
    way round): refused rather than placed wrong.
    """
    import numpy as np

    ts = np.asarray(ts_ns, dtype=np.int64)
    extra = int(sum(work_sequence)) - len(ts)
    if not 0 <= extra <= max(2, len(ts) // 100):
        raise GropcapError(f"the recorded polls took {sum(work_sequence)} frames for a "
                           f"{len(ts)}-frame wire view: not the same traffic",
                           hint="record the pair again (perf may have lost events)")
    poll = np.repeat(np.arange(len(work_sequence)), work_sequence)[extra:]
    if time_ns is not None:
        late = np.flatnonzero(ts > np.asarray(time_ns, dtype=np.int64)[poll])
        if len(late):
            raise GropcapError(f"{len(late)} wire frames (the first: frame {late[0]}) "
                               f"arrived after the recorded poll that took them: the "
                               f"polls' frame counts do not line up with the wire view",
                               hint="record the pair again")
    last = np.maximum.reduceat(ts, np.flatnonzero(np.r_[True, poll[1:] != poll[:-1]]))
    out = np.empty_like(last)
    t = np.iinfo(np.int64).min
    for i, v in enumerate(last):       # one value per poll (hundreds): plain loop
        t = out[i] = max(int(v), t + 1)
    return out[np.unique(poll, return_inverse=True)[1]]


def _directions(table) -> list:
    """Per row: its (addresses, ports) direction."""
    cols = [table.column(c).to_pylist() for c in ("ip_src", "ip_dst", "sport", "dport")]
    return list(zip(*cols))


def count_pair(pair: Pair, configs: dict[str, GroConfig], *,
               engine: str = "fast", kernel_polls: bool = False,
               both: bool = False) -> PairCounts:
    """Decode both views and run each configuration on the wire view.

    ``configs``: label -> GroConfig (e.g. ``{"ideal": pair.config(model="ideal")}``).
    The wire view is wire-sized by construction (make_pairs.py checks it), so it is fed as
    one segment per frame. ``kernel_polls``: retime the wire view with
    :func:`kernel_poll_times` from the pair's recorded polls (the configurations should
    then use ``poll_gap_ns=0``): the napi model polls as the kernel did, and what remains
    is the GRO rules alone. ``both``: run the models on :attr:`Pair.both` (the receiver's
    ACKs with the data, for ``poll_acks``) and count the super-packets of the wire view's
    directions only (the kernel's view has no others).
    """
    import pyarrow as pa

    from gropcap.run.engines import simulate
    from gropcap.run.memory import decode_files

    wire, _ = decode_files([pair.wire])
    post, _ = decode_files([pair.postgro])
    if both:
        import numpy as np

        if pair.both is None:
            raise GropcapError(f"pair {pair.name}: no capture of both directions",
                               hint="record it with make_pairs.py --acks")
        table, _ = decode_files([pair.both])
        ours = set(_directions(wire))
        mine = np.array([d in ours for d in _directions(table)], bool)
        models = {}
        for label, cfg in configs.items():
            first = np.asarray(simulate(table, cfg, engine=engine).seg_first_packet, np.int64)
            models[label] = int(mine[first].sum())
        return PairCounts(pair.name, wire.num_rows, post.num_rows, models,
                          int(wire.column("payload_len").to_numpy().sum()),
                          int(post.column("payload_len").to_numpy().sum()))
    if kernel_polls:
        seq = pair.meta.get("kernel_polls", {}).get("work_sequence")
        if not seq:
            raise GropcapError(f"pair {pair.name}: no recorded poll sequence",
                               hint="record it with make_pairs.py where perf is installed")
        ts = kernel_poll_times(wire.column("ts_ns").to_numpy(), seq,
                               pair.meta["kernel_polls"].get("time_ns"))
        wire = wire.set_column(wire.schema.get_field_index("ts_ns"), "ts_ns",
                               pa.array(ts, pa.int64()))
    models = {label: simulate(wire, cfg, engine=engine).num_superpackets
              for label, cfg in configs.items()}
    return PairCounts(pair.name, wire.num_rows, post.num_rows, models,
                      int(wire.column("payload_len").to_numpy().sum()),
                      int(post.column("payload_len").to_numpy().sum()))


def format_table(rows: list[PairCounts]) -> str:
    """A plain-text table: pair, wire packets, kernel, then each model (and its error)."""
    labels = list(rows[0].models) if rows else []
    head = f"{'pair':12} {'wire':>6} {'kernel':>6} " + " ".join(
        f"{lab:>16}" for lab in labels)
    lines = [head]
    for r in rows:
        cells = " ".join(f"{r.models[lab]:>7} ({r.error(lab):+6.1%})" for lab in labels)
        lines.append(f"{r.name:12} {r.wire:>6} {r.kernel:>6} {cells}")
    return "\n".join(lines)
