"""fast (numba) decoder == reference decoder, column for column, on shared inputs.

The reference (``gropcap.decode.reference``) is the oracle; any difference is reported with
the record, the column and both values.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from gropcap import constants as C
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch as ref_decode
from tests.craft import make_batch
from tests.decode.test_decode_robust import _SEEDS, TUNNELLED

from where import TESTS

fast = pytest.importorskip("gropcap.decode.fast")

SAMPLES = Path(TESTS).parent / "sample_pcaps"
OPTS = DecodeOptions(gue_ports=(6080,), fou_ports=((5555, 41),))


def assert_same(batch, options=DecodeOptions(), file_index=0):
    want = ref_decode(batch, options, file_index=file_index)
    got = fast.decode_batch(batch, options, file_index=file_index)
    assert got.schema.equals(want.schema)
    assert got.num_rows == want.num_rows == len(batch)
    w, g = want.to_pydict(), got.to_pydict()
    for col in w:
        if w[col] != g[col]:
            i = next(k for k, (a, b) in enumerate(zip(w[col], g[col])) if a != b)
            pytest.fail(f"column {col!r} differs at record {i}: reference {w[col][i]!r}, "
                        f"fast {g[col][i]!r}; frame {batch.frame(i).hex()} "
                        f"linktype {int(batch.linktype[i])} wire_len {int(batch.wire_len[i])}")


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.pcap*")
                                        if not p.name.endswith(".py")))
def test_sample_captures(name):
    reader = pytest.importorskip("gropcap.capture.reader")
    _, batch = reader.read_capture(str(SAMPLES / name))
    assert_same(batch, file_index=2)


@pytest.mark.parametrize("name", sorted(TUNNELLED))
def test_every_truncation_of_tunnelled_packets(name):
    lt, frame = TUNNELLED[name]
    frames = [frame[:cut] for cut in range(len(frame) + 1)]
    assert_same(make_batch(frames, linktype=lt, wire_lens=[len(frame)] * len(frames)), OPTS)


def test_mutated_headers():
    rng = random.Random(1234)
    frames, lts, wires = [], [], []
    for _ in range(3000):
        k = rng.randrange(len(_SEEDS))
        f = bytearray(_SEEDS[k])
        for _ in range(rng.randint(1, 3)):
            f[rng.randrange(min(len(f), 120))] = rng.randrange(256)
        cut = rng.randint(0, len(f))
        frames.append(bytes(f[:cut]))
        lts.append(C.LINKTYPE_DSA_TAG_EDSA if k == 4 else 1)
        wires.append(len(f) + rng.choice([0, 0, -20, 100, 70000]))
    assert_same(make_batch(frames, linktype=lts, wire_lens=[max(0, w) for w in wires]), OPTS)


@pytest.mark.parametrize("dsa", [None, "dsa", "edsa", "brcm", "brcm-prepend"])
def test_random_bytes_every_linktype(dsa):
    rng = random.Random(hash(dsa) & 0xFFFF)
    lts = list(C.SUPPORTED_LINKTYPES) + [2, 147]
    frames, types = [], []
    for i in range(1500):
        lt = lts[i % len(lts)]
        n = rng.randint(0, 90)
        head = rng.choice([b"", b"\x45", b"\x60", struct.pack("<I", 2), bytes(12) + b"\x08\x00"])
        frames.append((head + bytes(rng.randrange(256) for _ in range(n)))[:n + 4])
        types.append(lt)
    assert_same(make_batch(frames, linktype=types), DecodeOptions(dsa_tag=dsa))
