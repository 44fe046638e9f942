"""The fuzz harness catches what it claims to: each invariant breaks on a planted bug.

A fuzzer whose checks cannot fail finds nothing; these tests plant one fault per
invariant (by monkeypatching the code under test) and expect the named InvariantError.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from gropcap.errors import CaptureError
from tests.craft import make_batch
from tests.fuzz import harness as H

SEED = H.generated_seeds()["gen.pcap"]


def test_clean_seed_passes(tmp_path):
    out = H.check_capture_bytes(SEED, tmp_path, "gen.pcap", gro=True)
    assert out.error == "" and out.records == 11


def test_foreign_exception_is_caught(tmp_path, monkeypatch):
    import gropcap.capture.pcap as pcap

    real = pcap.PcapScanner.step

    def broken(self, win, pos, *a, **kw):
        if pos > 100:
            raise IndexError("planted")
        return real(self, win, pos, *a, **kw)

    monkeypatch.setattr(pcap.PcapScanner, "step", broken)
    with pytest.raises(H.InvariantError, match="foreign exception"):
        H.check_capture_bytes(SEED, tmp_path, "gen.pcap")


def test_unlocated_error_is_caught(tmp_path, monkeypatch):
    import gropcap.capture.pcap as pcap

    def broken(self, *a, **kw):
        raise CaptureError("planted, no offset", path=self.path)

    monkeypatch.setattr(pcap.PcapScanner, "step", broken)
    with pytest.raises(H.InvariantError, match="no byte offset"):
        H.check_capture_bytes(SEED, tmp_path, "gen.pcap")


def test_engine_disagreement_is_caught(tmp_path, monkeypatch):
    """The fast reader dropping the last record is caught by the comparison."""
    import gropcap.capture.reader as reader

    real = reader.read_capture

    def lossy(path, *, max_records=None, engine="fast"):
        info, b = real(path, max_records=max_records, engine=engine)
        if engine == "fast" and len(b) > 1:
            b = b._replace(**{f: getattr(b, f)[:-1] for f in b._fields if f != "buf"})
        return info, b

    monkeypatch.setattr(H, "read_capture", lossy)
    with pytest.raises(H.InvariantError, match="engines agree|row count"):
        H.check_capture_bytes(SEED, tmp_path, "gen.pcap")


def test_decoder_disagreement_is_caught(monkeypatch):
    if H.fast_decode is None:
        pytest.skip("gropcap.decode.fast is not available")
    real = H.fast_decode

    def off_by_one(batch, options=None):
        t = real(batch, options)
        i = t.schema.get_field_index("ip_ttl")
        ttl = t.column(i).to_numpy().copy()
        ttl[-1] ^= 1
        return t.set_column(i, t.schema.field(i), pa.array(ttl, pa.uint8()))

    monkeypatch.setattr(H, "fast_decode", off_by_one)
    batch = make_batch([H.deep_frame(1), H.deep_frame(2)])
    with pytest.raises(H.InvariantError, match="decoders agree: .*ip_ttl differs at record 1"):
        H.check_batch(batch)


def test_unknown_status_is_caught(monkeypatch):
    real = H.ref_decode

    def bad_status(batch, options=None, **kw):
        t = real(batch, options, **kw)
        i = t.schema.get_field_index("status")
        return t.set_column(i, t.schema.field(i), pa.array(np.full(t.num_rows, 200, np.uint8)))

    monkeypatch.setattr(H, "ref_decode", bad_status)
    monkeypatch.setattr(H, "fast_decode", None)
    with pytest.raises(H.InvariantError, match="every packet has a status"):
        H.check_batch(make_batch([H.deep_frame(0)]))


def test_lost_packet_in_gro_is_caught(monkeypatch):
    import gropcap.gro.engine as engine

    real = engine.simulate

    def loses(packets, config, **kw):
        r = real(packets, config, **kw)
        r.seg_count = r.seg_count.copy()
        r.seg_count[0] += 1
        return r

    monkeypatch.setattr(engine, "simulate", loses)
    frames = [H.deep_frame(0), H.deep_frame(1)]
    with pytest.raises(H.InvariantError, match="nothing lost"):
        H.check_batch(make_batch(frames), gro=True)


def test_hang_is_caught(tmp_path, monkeypatch):
    import gropcap.capture.pcap as pcap

    def slow(self, *a, **kw):
        time.sleep(30)

    H.warm_up()
    monkeypatch.setattr(pcap.PcapScanner, "step", slow)
    with pytest.raises(H.InvariantError, match="hang"):
        H.check_capture_bytes(SEED, tmp_path, "gen.pcap", time_budget=1)


def test_memory_blowup_is_caught(tmp_path, monkeypatch):
    import gropcap.capture.pcap as pcap

    real = pcap.PcapScanner.step
    hog = []

    def greedy(self, *a, **kw):
        hog.append(np.ones(64 << 20, dtype=np.uint8))      # 64 MiB for a 2 KiB file
        return real(self, *a, **kw)

    H.warm_up()
    monkeypatch.setattr(pcap.PcapScanner, "step", greedy)
    with pytest.raises(H.InvariantError, match="memory bounded"):
        H.check_capture_bytes(SEED, tmp_path, "gen.pcap")
    hog.clear()


def test_length_fields_cover_every_record():
    """The mutator knows every pcap record's caplen and wire length (2 per record + 2)."""
    fields = H.length_fields(SEED)
    assert len(fields) == 2 + 2 * 11
    offs = [f[0] for f in fields]
    assert offs[:2] == [16, 20] and offs[2] == 24 + 8
