"""Limits: encapsulation depth, absurd record lengths, flow tables that grow with flows.

Documented in ``docs/fuzzing.md`` ("Limits"). Each limit is checked on both sides: just
inside it works normally, just beyond it the input gets a status or a located error, and
nothing is allocated in proportion to a length field that the file does not back.
"""

from __future__ import annotations

import gzip
import struct
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.capture.reader import iter_batches, read_capture
from gropcap.capture.writer import write_pcap, write_pcapng
from gropcap.decode import schema as S
from gropcap.decode.reference import decode_batch as ref_decode
from gropcap.errors import CaptureError
from tests.craft import eth, ipv4, make_batch, tcp
from tests.fuzz import harness as H

from where import ROOT

fast_decode = H.fast_decode
KINDS = ["ipip", "sit", "ip6ip6", "4in6", "gre", "gretap", "vxlan", "geneve", "fou", "gue"]
FRAME = eth(ipv4("10.0.0.1", "10.0.0.2", C.IPPROTO_TCP, tcp(1, 2, payload=b"z" * 20)))


# --- encapsulation depth -------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_encap_depth_limit(kind):
    """Up to MAX_ENCAP_DEPTH tunnels decode; one more gives ENCAP_TOO_DEEP (both decoders)."""
    m = C.MAX_ENCAP_DEPTH
    depths = [0, 1, m - 1, m, m + 1, 3 * m]
    batch = make_batch([H.deep_frame(d, [kind] * d) for d in depths])
    table = ref_decode(batch, H.FUZZ_OPTIONS)
    status = table.column("status").to_pylist()
    depth = table.column("encap_depth").to_pylist()
    want = [S.STATUS_OK if d <= m else S.STATUS_ENCAP_TOO_DEEP for d in depths]
    assert status == want
    assert depth == [min(d, m) for d in depths]
    # the innermost TCP header is reached exactly when the stack is within the limit
    sport = table.column("sport").to_pylist()
    assert [s == 40000 for s in sport] == [d <= m for d in depths]
    if fast_decode is not None:
        assert fast_decode(batch, H.FUZZ_OPTIONS).equals(table)


def test_encap_too_deep_packets_are_accounted_by_gro():
    """A too-deep packet is not lost: GRO passes it up alone with a bypass reason (the
    undecoded status, or gre_gro_receive refusing a nested tunnel, whichever the kernel
    meets first)."""
    from gropcap.gro.config import GroConfig
    from gropcap.gro.engine import simulate
    from gropcap.gro.reasons import BYPASS_DECODE, BYPASS_TUNNEL

    m = C.MAX_ENCAP_DEPTH
    frames = [H.deep_frame(m + 1, ["gre"] * (m + 1)) for _ in range(3)] + [FRAME]
    table = pa.Table.from_batches([ref_decode(make_batch(frames))])
    res = simulate(table, GroConfig(model="ideal"))
    res.check_invariants(table.column("payload_len").to_numpy())
    assert res.num_superpackets == 4
    assert set(res.reason[:3].tolist()) <= {BYPASS_DECODE, BYPASS_TUNNEL}
    assert res.seg_count.tolist() == [1, 1, 1, 1]


def test_vlan_tags_are_bounded_by_the_frame_only():
    """Stacked VLAN tags are not tunnels: 16000 of them (64 KB) decode to one OK row."""
    batch = make_batch([H.vlan_flood_frame(16000)])
    row = ref_decode(batch).to_pylist()[0]
    assert row["status"] == S.STATUS_OK and row["vlan_depth"] == 255 and row["sport"] == 1
    if fast_decode is not None:
        assert fast_decode(batch).equals(ref_decode(batch))


# --- absurd record lengths -------------------------------------------------------------------

def _peak(fn):
    tracemalloc.start()
    try:
        try:
            fn()
            err = None
        except CaptureError as e:
            err = e
        return err, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _read_all(path, engine):
    def run():
        for _ in iter_batches(path, engine=engine):
            pass
    return run


LIMIT_BYTES = 4 << 20     # far below any of the lengths claimed below


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("caplen", [C.MAX_RECORD_LEN + 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF])
@pytest.mark.parametrize("gz", [False, True])
def test_pcap_absurd_caplen_refused_without_allocating(tmp_path, engine, caplen, gz):
    H.warm_up()
    p = tmp_path / "a.pcap"
    write_pcap(p, [FRAME] * 5, list(range(5)))
    data = bytearray(p.read_bytes())
    rec3 = 24 + 3 * (16 + len(FRAME))
    struct.pack_into("<I", data, rec3 + 8, caplen)
    if gz:
        p = tmp_path / "a.pcap.gz"
        p.write_bytes(gzip.compress(bytes(data)))
    else:
        p.write_bytes(bytes(data))
    err, peak = _peak(_read_all(p, engine))
    assert err is not None and err.offset == rec3 and err.record == 3
    assert "256 KiB" in err.message
    assert peak < LIMIT_BYTES


def _epb_file(tmp_path, n=4):
    p = tmp_path / "a.pcapng"
    write_pcapng(p, [FRAME] * n, [10**9 * i for i in range(n)])
    data = bytearray(p.read_bytes())
    # first EPB: after the SHB and IDB
    pos = 0
    epbs = []
    while pos < len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            epbs.append(pos)
        pos += blen
    return p, data, epbs


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("field,value", [
    ("caplen", 0xFFFFFFFF), ("caplen", 0x80000000), ("caplen", C.MAX_RECORD_LEN + 4),
    ("blen", 0xFFFFFFFC), ("blen", 0x80000000), ("blen", 60 << 20), ("blen", 1 << 20),
])
@pytest.mark.parametrize("gz", [False, True])
def test_pcapng_absurd_lengths_refused_without_allocating(tmp_path, engine, field, value, gz):
    """Block lengths and captured lengths that the file does not back cost nothing."""
    H.warm_up()
    p, data, epbs = _epb_file(tmp_path)
    at = epbs[2]
    struct.pack_into("<I", data, at + (20 if field == "caplen" else 4), value)
    if gz:
        p = tmp_path / "a.pcapng.gz"
        p.write_bytes(gzip.compress(bytes(data)))
    else:
        p.write_bytes(bytes(data))
    seen = []

    def run():
        for info, b in iter_batches(p, engine=engine):
            seen.append((info, len(b)))

    err, peak = _peak(run)
    assert peak < LIMIT_BYTES
    if err is not None:
        assert err.offset == at and err.path == str(p)
    else:
        # a block running past the end of the file is a cut capture: the records before
        # it are kept and the cut is reported
        info = seen[-1][0]
        assert info.records == 2 and any("ends inside" in w or "cut" in w
                                         for w in info.warnings), info.warnings


def test_record_lengths_just_inside_the_limit_are_read(tmp_path):
    """MAX_RECORD_LEN itself is a valid record (the limit is not off by one)."""
    p = tmp_path / "big.pcap"
    big = FRAME + bytes(C.MAX_RECORD_LEN - len(FRAME))
    write_pcap(p, [big, FRAME], [1, 2], snaplen=C.MAX_RECORD_LEN)
    info, b = read_capture(p)
    assert info.records == 2 and int(b.cap_len[0]) == C.MAX_RECORD_LEN
    t = ref_decode(b)
    assert t.column("status").to_pylist() == [S.STATUS_OK, S.STATUS_OK]


# --- flow tables ---------------------------------------------------------------------------

def _bench():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_flows", Path(ROOT) / "benchmarks" / "bench_flows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_flow_tables_grow_linearly_with_flows():
    """assign_flow_ids and the engine state: no flow cap, memory per flow within the
    documented bound (docs/fuzzing.md: measured ~400 / ~630 bytes per packet)."""
    bench = _bench()
    bench.measure(500, 2)                      # JIT outside the figures
    a = bench.measure(20_000, 2)
    b = bench.measure(200_000, 2)
    assert b["ideal_superpackets"] == 200_000  # every flow held and merged at once
    dp = b["packets"] - a["packets"]
    per_packet_ids = (b["assign_flow_ids_peak"] - a["assign_flow_ids_peak"]) / dp
    per_packet_gro = (b["ideal_peak"] - a["ideal_peak"]) / dp
    assert per_packet_ids < 1024, per_packet_ids
    assert per_packet_gro < 2048, per_packet_gro
    # linear, not quadratic: 10x the flows costs at most ~12x the memory
    assert b["ideal_peak"] < 12 * a["ideal_peak"]
    assert b["assign_flow_ids_peak"] < 12 * a["assign_flow_ids_peak"]


def test_flow_ids_for_many_flows_are_first_appearance_order():
    bench = _bench()
    batch = bench.build_batch(50_000, 2)
    table = bench.decode(batch)
    from gropcap.gro.flows import assign_flow_ids

    ids = assign_flow_ids(table)
    assert np.array_equal(ids, np.tile(np.arange(50_000), 2))
