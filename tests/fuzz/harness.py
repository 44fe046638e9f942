"""Fuzz harness: hostile capture files and frames -> every gropcap invariant checked.

Shared by the CI smoke run (``tests/fuzz/test_fuzz_smoke.py``), the regression corpus
(``tests/fuzz/test_regressions_fuzz.py``) and the long run (``scripts/fuzz_long.py``). Nothing
here knows about pytest: a broken invariant raises :class:`InvariantError` naming it.

Invariants checked on every input (see ``docs/fuzzing.md``):

1. Only gropcap's own errors escape, and they are located: a ``GropcapError`` whose
   ``path`` is the input file and whose ``offset`` is set (capture errors), never a
   ``struct.error``, ``IndexError``, ``MemoryError``... Decoders never raise for bytes.
2. Every capture engine agrees: the reference reader, the numba record scan, streamed
   batches of a few records, the windowed mmap scan (tiny windows) and, with
   ``pipe=True``, the same bytes through a FIFO return the same records, warnings and
   the same error (class, offset, record).
3. Row count equals the records read; every row has a known ``status``; ``record`` numbers
   are 0..n-1 in order; every frame lies inside its buffer.
4. Both decoders (reference and numba) produce the same table, bit for bit.
5. Optionally, both GRO engines account for every packet (``check_invariants``) and agree.
6. Bounded: each check runs under a wall-clock budget, and the Python-heap peak of
   reading a capture stays within ``MEM_SLOPE * file size + MEM_BASE``.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import signal
import struct
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gropcap import constants as C
from gropcap.capture.reader import iter_batches, read_capture
from gropcap.decode import schema as S
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch as ref_decode
from gropcap.errors import CaptureError, GropcapError

try:
    from gropcap.decode.fast import decode_batch as fast_decode
except ImportError:          # fast decoder not landed: the parity invariant is skipped
    fast_decode = None
try:
    from gropcap.capture.scan import iter_scan_batches
except ImportError:
    iter_scan_batches = None

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_pcaps"
CORPUS = Path(__file__).resolve().parent / "corpus"

# Decoder options that turn on every optional tunnel decoder (GUE, FOU) so fuzzed frames
# reach as much decoding code as possible.
FUZZ_OPTIONS = DecodeOptions(gue_ports=(6080,), fou_ports=((5555, 4), (5556, 41)))

MEM_SLOPE = 48               # heap bytes allowed per file byte while reading a capture
MEM_BASE = 24 << 20          # plus a constant (numba scratch, Arrow pools, small lists)
TIME_BUDGET_S = 60.0         # per input; generous for loaded CI machines (JIT is warmed first)

HOSTILE_U32 = (0, 1, 2, 3, 4, 7, 8, 11, 12, 16, 20, 27, 28, 31, 32, 0x7F, 0x80, 0xFF, 0x100,
               0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0x40001, 0x3FFFFFF, 0x4000000, 0x4000004,
               0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, 0xFFFFFFFC, 0xFFFFFFFF)
HOSTILE_U16 = (0, 1, 2, 4, 5, 8, 0x14, 0x28, 0x3C, 0x7F, 0x80, 0xFF, 0x5DC, 0x7FFF, 0x8000,
               0xFFFF)


class InvariantError(AssertionError):
    """A fuzz invariant does not hold; the message names it and the input."""


@dataclass
class Outcome:
    """What one capture input did: records decoded, or the located error it raised."""

    records: int = 0
    error: str = ""                      # "" or the error's one_line()
    statuses: dict = field(default_factory=dict)
    engines: list = field(default_factory=list)


# --- time bound ---------------------------------------------------------------------------

class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so library code cannot swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raise InvariantError when the block runs longer than ``seconds`` (main thread only).

    Python code is interrupted by SIGALRM; a loop inside a numba kernel is not, which is
    why the long run also watches its worker from a parent process (``scripts/fuzz_long.py``).
    """
    if seconds <= 0 or not hasattr(signal, "setitimer") or \
            signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        yield
        return

    def _alarm(_sig, _frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Timeout:
        raise InvariantError(f"hang: {what} took longer than {seconds:.0f} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --- checks -------------------------------------------------------------------------------

def _fail(invariant: str, detail: str) -> None:
    raise InvariantError(f"{invariant}: {detail}")


def _located(err: GropcapError, path: str, engine: str) -> None:
    if not isinstance(err, CaptureError):
        _fail("error class", f"{engine} raised {type(err).__name__}, expected CaptureError: "
                             f"{err.one_line()}")
    if err.path != path:
        _fail("error location", f"{engine}: path {err.path!r} != {path!r}: {err.one_line()}")
    if err.offset is None or err.offset < 0:
        _fail("error location", f"{engine}: no byte offset: {err.one_line()}")
    line = err.one_line()
    if "\n" in line or not line:
        _fail("error message", f"{engine}: not one line: {line!r}")


def _read_all(run, path: str, engine: str):
    """(info, [batches]) or the GropcapError; anything else breaks invariant 1."""
    batches = []
    info = None
    try:
        for info, b in run():
            batches.append(b)
    except GropcapError as e:
        _located(e, path, engine)
        return None, batches, e
    except InvariantError:
        raise
    except Exception as e:                      # noqa: BLE001 - the invariant under test
        _fail("foreign exception", f"{engine} raised {type(e).__name__}: {e}")
    return info, batches, None


def _frames(batch) -> list[bytes]:
    return [batch.frame(i) for i in range(len(batch))]


def _batch_summary(batches):
    """Concatenated per-record values of a list of batches, comparable across engines."""
    cols = {}
    for name in ("cap_len", "wire_len", "ts_ns", "linktype", "iface", "epb_flags", "record",
                 "file_offset"):
        parts = [np.asarray(getattr(b, name)) for b in batches]
        cols[name] = np.concatenate(parts) if parts else np.zeros(0)
    cols["frames"] = [f for b in batches for f in _frames(b)]
    return cols


def _same_records(a, b, what: str) -> None:
    for name in a:
        if name == "frames":
            if a[name] != b[name]:
                i = next(k for k, (x, y) in enumerate(zip(a[name], b[name])) if x != y) \
                    if len(a[name]) == len(b[name]) else -1
                _fail("engines agree", f"{what}: frame bytes differ (record {i}, counts "
                                       f"{len(a[name])} vs {len(b[name])})")
        elif len(a[name]) != len(b[name]) or not np.array_equal(
                np.asarray(a[name], dtype=np.int64), np.asarray(b[name], dtype=np.int64)):
            _fail("engines agree", f"{what}: column {name} differs")


def _same_error(e1, e2, what: str) -> None:
    if (e1 is None) != (e2 is None):
        _fail("engines agree", f"{what}: one raised, the other did not: "
                               f"{e1 and e1.one_line()!r} vs {e2 and e2.one_line()!r}")
    if e1 is not None and (type(e1) is not type(e2) or e1.offset != e2.offset
                           or e1.record != e2.record):
        _fail("engines agree", f"{what}: different errors: {e1.one_line()!r} vs "
                               f"{e2.one_line()!r}")


def check_batch(batch, options: DecodeOptions = FUZZ_OPTIONS, *, gro: bool = False,
                what: str = "batch") -> dict:
    """Decode ``batch`` with both decoders and check invariants 3-5; returns status counts."""
    warm_up()
    n = len(batch)
    nbuf = len(batch.buf)
    for i in range(n):
        o, cl = int(batch.offset[i]), int(batch.cap_len[i])
        if o < 0 or o + cl > nbuf:
            _fail("frame inside buffer", f"{what}: record {i} [{o}, {o + cl}) > {nbuf}")
    try:
        want = ref_decode(batch, options)
    except Exception as e:                      # noqa: BLE001
        _fail("decoders never raise", f"reference on {what}: {type(e).__name__}: {e}")
    if want.num_rows != n:
        _fail("row count", f"{what}: reference {want.num_rows} rows for {n} records")
    if not want.schema.equals(S.PACKET_SCHEMA):
        _fail("schema", f"{what}: reference table schema differs from PACKET_SCHEMA")
    status = want.column("status").to_numpy()
    unknown = set(np.unique(status).tolist()) - set(S.STATUS_NAMES)
    if unknown:
        _fail("every packet has a status", f"{what}: unknown status codes {sorted(unknown)}")
    rec = want.column("record").to_numpy()
    if n and not np.array_equal(rec, np.asarray(batch.record, dtype=np.uint64)):
        _fail("records kept", f"{what}: record column differs from the batch")
    if fast_decode is not None:
        try:
            got = fast_decode(batch, options)
        except Exception as e:                  # noqa: BLE001
            _fail("decoders never raise", f"fast on {what}: {type(e).__name__}: {e}")
        if not got.equals(want):
            w, g = want.to_pydict(), got.to_pydict()
            bad = [c for c in w if w[c] != g.get(c)]
            col = bad[0] if bad else "(schema)"
            i = next((k for k, (x, y) in enumerate(zip(w[col], g[col])) if x != y), -1) \
                if bad else -1
            frame = batch.frame(i).hex() if i >= 0 else ""
            _fail("decoders agree", f"{what}: column {col} differs at record {i} "
                                    f"(reference {w[col][i] if i >= 0 else ''!r}, fast "
                                    f"{g[col][i] if i >= 0 else ''!r}); linktype "
                                    f"{int(batch.linktype[i]) if i >= 0 else -1} frame {frame}")
    if gro and n:
        check_gro(want, what)
    names = S.STATUS_NAMES
    return {names[k]: int(v) for k, v in zip(*np.unique(status, return_counts=True))}


def check_gro(table, what: str = "table") -> None:
    """Both GRO engines account for every packet and agree (invariant 5)."""
    import pyarrow as pa

    from gropcap.gro.config import GroConfig

    packets = pa.Table.from_batches([table]) if not isinstance(table, pa.Table) else table
    payload = packets.column("payload_len").to_numpy()
    results = {}
    for engine in ("reference", "fast"):
        try:
            if engine == "reference":
                from gropcap.gro.reference import simulate
            else:
                from gropcap.gro.engine import simulate
        except ImportError:
            continue
        for model in ("ideal", "napi"):
            try:
                r = simulate(packets, GroConfig(model=model))
            except Exception as e:              # noqa: BLE001
                _fail("GRO never raises", f"{engine}/{model} on {what}: "
                                          f"{type(e).__name__}: {e}")
            try:
                r.check_invariants(payload)
            except AssertionError as e:
                _fail("nothing lost", f"{engine}/{model} on {what}: {e}")
            results[(engine, model)] = r
    for model in ("ideal", "napi"):
        a, b = results.get(("reference", model)), results.get(("fast", model))
        if a is not None and b is not None and not a.equals(b):
            _fail("GRO engines agree", f"{model} on {what}")


_WARM = False


def warm_up() -> None:
    """Compile (or load) every numba kernel once, outside the time and memory bounds.

    Compiling under tracemalloc is slow and allocates a lot: the bounds are meant for the
    input, not for the JIT.
    """
    global _WARM
    if _WARM:
        return
    import tempfile

    seeds = generated_seeds()
    with tempfile.TemporaryDirectory() as d:
        for name in ("gen.pcap", "gen.pcapng", "gen_spb.pcapng"):
            p = os.path.join(d, name)
            Path(p).write_bytes(seeds[name])
            for _info, _b in iter_batches(p, batch_records=2):
                pass
            if iter_scan_batches is not None:
                for _info, _b in iter_scan_batches(p, batch_records=4, window_bytes=97):
                    pass
            _, b = read_capture(p)
            if fast_decode is not None:
                fast_decode(b, FUZZ_OPTIONS)
            check_gro(ref_decode(b, FUZZ_OPTIONS), "warm-up")
    _WARM = True


def _read_pipe(path: str):
    """The file's bytes streamed through a FIFO (the reader's non-seekable path)."""
    import threading

    fifo = path + ".fifo"
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    data = Path(path).read_bytes()

    def feed():
        try:
            with open(fifo, "wb") as fh:
                for i in range(0, len(data), 1000):     # several writes: partial reads
                    fh.write(data[i:i + 1000])
        except BrokenPipeError:
            pass                                        # reader stopped at an error

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        info, batches, err = _read_all(lambda: iter_batches(fifo, batch_records=5), fifo,
                                       "pipe")
    finally:
        if t.is_alive():                  # reader gave up early: unblock the writer
            try:
                fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                while t.is_alive():
                    try:
                        os.read(fd, 1 << 16)
                    except BlockingIOError:
                        pass
                    t.join(0.01)
                os.close(fd)
            except OSError:
                pass
        t.join()
        os.unlink(fifo)
    return info, batches, err


def check_capture_file(path, *, options: DecodeOptions = FUZZ_OPTIONS, gro: bool = False,
                       memory: bool = True, time_budget: float = TIME_BUDGET_S,
                       windowed: bool = True, pipe: bool = False) -> Outcome:
    """Run every capture engine and both decoders on one file; check invariants 1-6."""
    warm_up()
    path = os.fspath(path)
    size = os.path.getsize(path)
    out = Outcome()
    with time_limit(time_budget, f"reading and decoding {path}"):
        if memory:
            tracemalloc.start()
        try:
            info_r, b_r, e_r = _read_all(
                lambda: [read_capture(path, engine="reference")], path, "reference reader")
            if memory:
                peak = tracemalloc.get_traced_memory()[1]
        finally:
            if memory:
                tracemalloc.stop()
        if memory and peak > MEM_SLOPE * size + MEM_BASE:
            _fail("memory bounded", f"reading a {size}-byte file peaked at {peak} bytes")
        ref = _batch_summary(b_r)
        runs = [("fast reader", lambda: [read_capture(path, engine="fast")]),
                ("streamed batches of 3", lambda: iter_batches(path, batch_records=3,
                                                               engine="reference")),
                ("fast streamed batches of 2", lambda: iter_batches(path, batch_records=2))]
        if windowed and iter_scan_batches is not None:
            runs.append(("windowed scan", lambda: iter_scan_batches(
                path, batch_records=4, window_bytes=97)))
        if pipe and hasattr(os, "mkfifo"):
            runs.append(("pipe", None))
        for name, run in runs:
            if name == "pipe":
                info, batches, err = _read_pipe(path)
            else:
                info, batches, err = _read_all(run, path, name)
            out.engines.append(name)
            _same_error(e_r, err, f"reference reader vs {name}")
            got = _batch_summary(batches)
            if err is None:
                _same_records(ref, got, f"reference reader vs {name}")
                if info.records != len(got["frames"]):
                    _fail("row count", f"{name}: info.records {info.records} != "
                                       f"{len(got['frames'])} records yielded")
                if info.warnings != info_r.warnings:
                    _fail("engines agree", f"{name}: warnings {info.warnings} vs "
                                           f"{info_r.warnings}")
            else:
                # streamed: whatever was yielded before the error is a prefix of the file
                k = len(got["frames"])
                if got["frames"] != _prefix_frames(path, k):
                    _fail("engines agree", f"{name}: batches before the error are not "
                                           "the file's first records")
        if e_r is not None:
            out.error = e_r.one_line()
            return out
        if not b_r:
            _fail("row count", "read_capture returned no batch")
        batch = b_r[-1]
        if info_r.records != len(batch):
            _fail("row count", f"info.records {info_r.records} != {len(batch)} records")
        rec = np.asarray(batch.record, dtype=np.int64)
        if not np.array_equal(rec, np.arange(len(batch))):
            _fail("records kept", "record numbers are not 0..n-1")
        out.records = len(batch)
        out.statuses = check_batch(batch, options, gro=gro, what=path)
    return out


def check_pipeline(path, rng: random.Random | None = None, outdir=None) -> int:
    """The whole user path on one file: analyze, summary, text report, tables, explain,
    baseline, Parquet output. Only a located GropcapError may escape; the summary counts
    every record (invariant 3 end to end). Returns the packets analysed (-1: refused)."""
    import tempfile

    from gropcap.gro.config import GroConfig
    from gropcap.io.parquet import write_analysis
    from gropcap.run.memory import analyze
    from gropcap.report.baseline import check_baseline, make_baseline
    from gropcap.report.explain import explain_flow
    from gropcap.report.summary import render_text

    warm_up()
    rng = rng or random.Random(0)
    path = os.fspath(path)
    config = GroConfig(queues=rng.choice((1, 4)), budget=rng.choice((1, 8, 64)))
    engine = rng.choice(("fast", "reference"))
    try:
        a = analyze(path, config, engine=engine)
        s = a.summary()
        render_text(a, color=False)
        nflows = a.flows.num_rows
        for fid in range(min(2, nflows)):
            explain_flow(a, fid)
        check_baseline(make_baseline([a]), [a])
        with tempfile.TemporaryDirectory(dir=outdir) as d:
            write_analysis(a, d, force=True)
    except GropcapError as e:
        if e.path is None and not isinstance(e, CaptureError):
            _fail("error location", f"pipeline: {type(e).__name__} without a path: "
                                    f"{e.one_line()}")
        return -1
    except Exception as e:                      # noqa: BLE001
        _fail("foreign exception", f"pipeline ({engine} engine) raised "
                                   f"{type(e).__name__}: {e}")
    records = sum(i.records for i in a.infos)
    if s["packets"] != records or sum(s["status"].values()) != records \
            or a.packets.num_rows != records:
        _fail("nothing lost", f"pipeline: {records} records, summary {s['packets']} packets, "
                              f"statuses {s['status']}, {a.packets.num_rows} rows")
    return records


def _prefix_frames(path: str, k: int) -> list[bytes]:
    """The first ``k`` frames of a possibly damaged file, read record by record."""
    if k == 0:
        return []
    _, b = read_capture(path, max_records=k, engine="reference")
    return _frames(b)


def check_capture_bytes(data: bytes, workdir, name: str = "fuzz.pcap", **kw) -> Outcome:
    """Write ``data`` to ``workdir/name`` and :func:`check_capture_file` it."""
    p = Path(workdir) / name
    p.write_bytes(bytes(data))
    return check_capture_file(p, **kw)


# --- seeds --------------------------------------------------------------------------------

def _head_records(path: Path, k: int) -> bytes:
    """The file's bytes up to the end of its ``k``-th record (small seeds from big samples)."""
    data = path.read_bytes()
    info, b = read_capture(path, max_records=k + 1, engine="reference")
    if len(b) <= k:
        return data
    return data[:int(b.file_offset[k])]


def sample_seeds(max_records: int = 24) -> dict[str, bytes]:
    """Every bundled sample capture, cut after ``max_records`` records."""
    out = {}
    for p in sorted(SAMPLES.glob("*.pcap*")):
        out[p.name] = _head_records(p, max_records)
    return out


def deep_frame(depth: int, kinds: list[str] | None = None, inner: bytes | None = None,
               rng: random.Random | None = None) -> bytes:
    """An Ethernet frame with ``depth`` nested tunnels around a TCP segment.

    ``kinds`` (outermost first) picks each tunnel from ``ipip``, ``sit``, ``ip6ip6``,
    ``4in6``, ``gre``, ``gretap``, ``vxlan``, ``geneve``, ``fou``, ``gue``; default cycles
    through them (or draws with ``rng``).
    """
    from tests.craft import eth, geneve, gre, gue, ipv4, ipv6, tcp, udp, vxlan

    all_kinds = ["ipip", "sit", "ip6ip6", "4in6", "gre", "gretap", "vxlan", "geneve", "fou",
                 "gue"]
    if kinds is None:
        kinds = [(rng.choice(all_kinds) if rng else all_kinds[i % len(all_kinds)])
                 for i in range(depth)]
    payload = inner if inner is not None else tcp(40000, 80, seq=1, payload=b"x" * 16)
    # innermost first: (bytes, family of the IP header they start with)
    pkt = ipv4("10.9.0.1", "10.9.0.2", C.IPPROTO_TCP, payload)
    fam = 4
    for kind in reversed(kinds):
        proto_in = C.IPPROTO_IPIP if fam == 4 else C.IPPROTO_IPV6
        etype_in = C.ETH_P_IP if fam == 4 else C.ETH_P_IPV6
        if kind in ("ipip", "sit"):
            pkt, fam = ipv4("10.1.0.1", "10.1.0.2", proto_in, pkt), 4
        elif kind in ("ip6ip6", "4in6"):
            pkt, fam = ipv6("2001:db8::1", "2001:db8::2", proto_in, pkt), 6
        elif kind == "gre":
            pkt, fam = ipv4("10.2.0.1", "10.2.0.2", C.IPPROTO_GRE,
                            gre(etype_in, pkt, key=7)), 4
        elif kind == "gretap":
            pkt, fam = ipv4("10.3.0.1", "10.3.0.2", C.IPPROTO_GRE,
                            gre(C.ETH_P_TEB, eth(pkt, etype_in))), 4
        elif kind == "vxlan":
            pkt, fam = ipv4("10.4.0.1", "10.4.0.2", C.IPPROTO_UDP,
                            udp(5000, 4789, vxlan(eth(pkt, etype_in), 42))), 4
        elif kind == "geneve":
            pkt, fam = ipv6("2001:db8:6::1", "2001:db8:6::2", C.IPPROTO_UDP,
                            udp(5001, 6081, geneve(eth(pkt, etype_in), 43))), 6
        elif kind == "fou":
            port = 5555 if fam == 4 else 5556
            pkt, fam = ipv4("10.5.0.1", "10.5.0.2", C.IPPROTO_UDP, udp(5002, port, pkt)), 4
        elif kind == "gue":
            pkt, fam = ipv4("10.6.0.1", "10.6.0.2", C.IPPROTO_UDP,
                            udp(5003, 6080, gue(pkt, proto_in))), 4
        else:
            raise ValueError(kind)
    return eth(pkt, C.ETH_P_IP if fam == 4 else C.ETH_P_IPV6)


def generated_seeds() -> dict[str, bytes]:
    """Writer variants the samples lack: pcapng options/sections/SPB, big-endian, nested."""
    import tempfile

    from gropcap.capture.writer import write_pcap, write_pcapng
    from tests.craft import eth, ipv4, tcp, udp, vxlan

    frames = [deep_frame(d) for d in (0, 1, 2, 3, 8, 9, 12)]
    frames += [eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP, tcp(1, 2, seq=s,
                                                                  payload=b"p" * 30)))
               for s in (1, 31, 61)]
    frames.append(eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_UDP,
                           udp(1, 4789, vxlan(eth(b"\x00" * 20, 0x88CC), 5)))))
    ts = [1_700_000_000_000_000_000 + 1000 * i for i in range(len(frames))]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        variants = {
            "gen.pcap": lambda p: write_pcap(p, frames, ts),
            "gen_be_ns.pcap": lambda p: write_pcap(p, frames, ts, nanosecond=True,
                                                   big_endian=True),
            "gen.pcapng": lambda p: write_pcapng(
                p, frames, ts, linktypes=(1, 101), ifaces=[i % 2 for i in range(len(frames))],
                epb_flags=[i for i in range(len(frames))], tsresol=0x86, tsoffset=3,
                sections=[0] * 6 + [1] * (len(frames) - 6)),
            "gen_be.pcapng": lambda p: write_pcapng(p, frames, ts, big_endian=True),
            "gen_spb.pcapng": lambda p: write_pcapng(p, frames, ts, spb=True),
        }
        for name, make in variants.items():
            p = os.path.join(d, name)
            make(p)
            out[name] = Path(p).read_bytes()
    out["gen_opb_custom.pcapng"] = _opb_custom_file(frames[:6])
    out["gen.pcap.gz"] = gzip.compress(out["gen.pcap"], mtime=0)
    try:
        import zstandard
        out["gen.pcapng.zst"] = zstandard.ZstdCompressor().compress(out["gen.pcapng"])
    except ImportError:
        pass
    return out


def _opb_custom_file(frames) -> bytes:
    """pcapng with obsolete packet blocks (type 2), a custom block, a name resolution
    block and an interface statistics block between the packets."""
    from gropcap.capture.writer import pcapng_block, pcapng_options

    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = pcapng_block(1, struct.pack("<HHI", 1, 0, 0) + pcapng_options([(9, b"\x09")]))
    out = [shb, idb]
    for i, f in enumerate(frames):
        ts = 1_700_000_000_000_000_000 + i
        body = struct.pack("<HHIIII", 0, 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f)) + f
        body += bytes(-len(f) % 4) + pcapng_options([(2, struct.pack("<I", i))])
        out.append(pcapng_block(2, body))
        if i == 2:
            out.append(pcapng_block(0x40000BAD, struct.pack("<I", 32473) + b"custom"))
            out.append(pcapng_block(4, struct.pack("<HH", 1, 8) + bytes([10, 0, 0, 1]) +
                                    b"abc\0" + bytes(4)))
            out.append(pcapng_block(5, struct.pack("<III", 0, 0, 0)))
    return b"".join(out)


COMPRESSORS = ("gzip", "zstd", "xz", "bzip2")


def compress(data: bytes, kind: str) -> bytes:
    """``data`` compressed as ``kind`` (one of COMPRESSORS)."""
    import bz2
    import lzma

    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "xz":
        return lzma.compress(data)
    if kind == "bzip2":
        return bz2.compress(data)
    import zstandard
    return zstandard.ZstdCompressor().compress(data)


def all_seeds(max_records: int = 24) -> dict[str, bytes]:
    """Samples and generated seeds, name -> bytes."""
    seeds = sample_seeds(max_records)
    seeds.update(generated_seeds())
    return seeds


# --- structure-aware mutation ---------------------------------------------------------------

def length_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, width, byte order) of the framing length/count fields of a capture.

    pcap: snaplen, linktype, each record's caplen and wire length. pcapng: every block's
    leading and trailing total length, EPB/OPB interface, caplen and wire length, SPB wire
    length, IDB link type and snaplen, and each option length. Best effort on damaged
    input: the walk stops where the structure stops making sense.
    """
    out: list[tuple[int, int, str]] = []
    n = len(data)
    if n >= 24 and data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1",
                                b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        bo = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        out += [(16, 4, bo), (20, 4, bo)]
        pos = 24
        while pos + 16 <= n and len(out) < 4096:
            out += [(pos + 8, 4, bo), (pos + 12, 4, bo)]
            pos += 16 + struct.unpack_from(bo + "I", data, pos + 8)[0]
        return out
    pos, bo = 0, "<"
    while pos + 12 <= n and len(out) < 4096:
        btype = struct.unpack_from("<I", data, pos)[0]
        if btype == 0x0A0D0D0A:
            bo = ">" if data[pos + 8:pos + 12] == b"\x1a\x2b\x3c\x4d" else "<"
        blen = struct.unpack_from(bo + "I", data, pos + 4)[0]
        btype = struct.unpack_from(bo + "I", data, pos)[0]
        if blen < 12 or blen & 3 or pos + blen > n:
            out.append((pos + 4, 4, bo))
            break
        out += [(pos + 4, 4, bo), (pos + blen - 4, 4, bo)]
        opts = None
        if btype == 6 and blen >= 32:          # EPB
            out += [(pos + 8, 4, bo), (pos + 20, 4, bo), (pos + 24, 4, bo)]
            cap = struct.unpack_from(bo + "I", data, pos + 20)[0]
            opts = pos + 28 + cap + (-cap & 3)
        elif btype == 3 and blen >= 16:        # SPB
            out.append((pos + 8, 4, bo))
        elif btype == 1 and blen >= 20:        # IDB
            out += [(pos + 8, 2, bo), (pos + 12, 4, bo)]
            opts = pos + 16
        elif btype == 0x0A0D0D0A and blen >= 28:
            opts = pos + 24
        if opts is not None:
            end = pos + blen - 4
            while opts + 4 <= end:
                out.append((opts + 2, 2, bo))
                olen = struct.unpack_from(bo + "H", data, opts + 2)[0]
                if struct.unpack_from(bo + "H", data, opts)[0] == 0:
                    break
                opts += 4 + olen + (-olen & 3)
        pos += blen
    return out


def frame_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) byte spans of the frames of a capture that the reference reader accepts."""
    try:
        import tempfile
        with tempfile.NamedTemporaryFile(suffix=".cap") as f:
            f.write(data)
            f.flush()
            _, b = read_capture(f.name, engine="reference")
    except GropcapError:
        return []
    return [(int(o), int(o) + int(c)) for o, c in zip(b.offset, b.cap_len)]


def mutate(data: bytes, rng: random.Random, spans=None, fields=None) -> bytes:
    """One to four random mutations of a capture file (bytes -> bytes).

    Truncation, bit flips, byte runs set to 00/ff, framing length fields set to hostile
    values (0, 1, huge, "negative-looking" 0x80000000/0xffffffff, off by one), header bytes
    inside frames (IP lengths, IHL, next headers, tunnel flags), duplicated or deleted
    spans, splices of another part of the file.
    """
    b = bytearray(data)
    if fields is None:
        fields = length_fields(data)
    if spans is None:
        spans = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        n = len(b)
        op = rng.randrange(10)
        if n == 0:
            b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            continue
        if op == 0:                                 # truncation
            del b[rng.randrange(n):]
        elif op == 1:                               # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(n)
                b[i] ^= 1 << rng.randrange(8)
        elif op in (2, 3) and fields:               # framing length fields
            off, width, bo = rng.choice(fields)
            if off + width <= n:
                old = int.from_bytes(b[off:off + width], "little" if bo == "<" else "big")
                cands = HOSTILE_U32 if width == 4 else HOSTILE_U16
                val = rng.choice(cands + (old + 1, old - 1, old + 4, old - 4, old * 2))
                val &= (1 << (8 * width)) - 1
                b[off:off + width] = val.to_bytes(width, "little" if bo == "<" else "big")
        elif op in (4, 5) and spans:                # header bytes inside a frame
            s, e = rng.choice(spans)
            if e > s and e <= n:
                i = s + min(rng.randrange(e - s), rng.randrange(120))
                if rng.random() < 0.5 and i + 1 < e:
                    v = rng.choice(HOSTILE_U16)
                    b[i:i + 2] = v.to_bytes(2, "big")
                else:
                    b[i] = rng.choice((0, 1, 0x40, 0x45, 0x4F, 0x60, 0x80, 0xFF,
                                       rng.randrange(256)))
        elif op == 6:                               # byte run to 00 / ff / random
            i = rng.randrange(n)
            k = rng.randint(1, 16)
            fill = rng.choice((0, 0xFF, None))
            b[i:i + k] = bytes(fill if fill is not None else rng.randrange(256)
                               for _ in range(len(b[i:i + k])))
        elif op == 7:                               # duplicate a span
            i = rng.randrange(n)
            k = rng.randint(1, 64)
            j = rng.randrange(n)
            b[j:j] = b[i:i + k]
        elif op == 8:                               # delete a span
            i = rng.randrange(n)
            del b[i:i + rng.randint(1, 32)]
        else:                                       # splice from elsewhere
            i, j = rng.randrange(n), rng.randrange(n)
            k = rng.randint(4, 64)
            chunk = bytes(b[i:i + k])
            b[j:j + len(chunk)] = chunk
    return bytes(b)


def deep_nesting_frames(rng: random.Random, count: int) -> list[tuple[bytes, int]]:
    """Frames with random tunnel stacks 0..20 deep, some cut or damaged; (frame, linktype)."""
    out = []
    for _ in range(count):
        depth = rng.randint(0, 20)
        f = bytearray(deep_frame(depth, rng=rng))
        r = rng.random()
        if r < 0.3:
            del f[rng.randrange(len(f) + 1):]
        elif r < 0.5 and len(f):
            f[rng.randrange(len(f))] = rng.randrange(256)
        out.append((bytes(f), 1))
    return out


def vlan_flood_frame(tags: int) -> bytes:
    """An Ethernet frame with ``tags`` stacked 802.1Q tags before IPv4/TCP."""
    from tests.craft import eth, ipv4, tcp

    return eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP, tcp(1, 2)),
               vlans=[(C.ETH_P_8021Q, i & 0xFFF) for i in range(tags)])
