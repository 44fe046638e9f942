"""Short fuzz run (CI): mutated captures and frames through every reader, decoder and engine.

Seeded from the bundled samples and generated writer variants (``tests/fuzz/harness.py``),
mutated with truncations, bit flips, hostile length fields (0, 1, huge, negative-looking),
pcapng blocks with bad lengths, and tunnel stacks many layers deep. Each input is checked
against the invariants of ``docs/fuzzing.md``: only located gropcap errors, no hang, bounded
memory, every capture engine and both decoders agree, one row per record, every row with a
status, and the GRO engines account for every packet.

Hypothesis runs derandomized (a fixed seed) so CI is reproducible; the number of examples
scales with ``GROPCAP_FUZZ_SCALE`` (default 1; the long run is ``scripts/fuzz_long.py``).
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.decode import schema as S
from tests.craft import make_batch
from tests.fuzz import harness as H

SCALE = float(os.environ.get("GROPCAP_FUZZ_SCALE", "1"))


def _ci(examples: int) -> settings:
    """Derandomized, no per-example deadline (the whole-input time bound is the harness's)."""
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None,
                    derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


SEEDS = H.all_seeds()
SEED_NAMES = sorted(SEEDS)
_META = {n: (H.frame_spans(SEEDS[n]), H.length_fields(SEEDS[n])) for n in SEED_NAMES}


def test_seeds_cover_every_sample_and_pass_unmutated(tmp_path):
    """The unmutated seeds decode cleanly: a broken seed would make the fuzzing blind."""
    assert len(SEEDS) >= 30
    for name in SEED_NAMES:
        out = H.check_capture_bytes(SEEDS[name], tmp_path, name)
        assert out.error == "" and out.records > 0, (name, out.error)
    gen = H.check_capture_bytes(SEEDS["gen.pcap"], tmp_path, "gen.pcap")
    # deep_frame(9) and deep_frame(12) are beyond MAX_ENCAP_DEPTH
    assert gen.statuses.get("ENCAP_TOO_DEEP") == 2


@_ci(1200)
@given(name=st.sampled_from(SEED_NAMES), rng=st.randoms(use_true_random=False))
def test_fuzz_mutated_captures(tmp_path, name, rng):
    spans, fields = _META[name]
    data = H.mutate(SEEDS[name], rng, spans, fields)
    H.check_capture_bytes(data, tmp_path, name, pipe=True)


@_ci(300)
@given(name=st.sampled_from(SEED_NAMES), rng=st.randoms(use_true_random=False),
       kind=st.sampled_from(H.COMPRESSORS), cut=st.floats(0.0, 1.0))
def test_fuzz_mutated_then_compressed(tmp_path, name, rng, kind, cut):
    """Damage inside a compressed capture (and a cut compressed stream) is reported the
    same way as in a plain file, by every engine."""
    data = H.compress(H.mutate(SEEDS[name], rng, *_META[name]), kind)
    if cut < 0.3:
        data = data[:int(len(data) * cut / 0.3)]
    H.check_capture_bytes(data, tmp_path, "fuzz.pcap." + kind, pipe=True)


@_ci(300)
@given(name=st.sampled_from([n for n in SEED_NAMES if n.endswith(".pcapng")]),
       picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(H.HOSTILE_U32)),
                      min_size=1, max_size=3))
def test_fuzz_pcapng_bad_block_lengths(tmp_path, name, picks):
    data = bytearray(SEEDS[name])
    fields = _META[name][1]
    for k, value in picks:
        off, width, bo = fields[k % len(fields)]
        value &= (1 << (8 * width)) - 1
        data[off:off + width] = value.to_bytes(width, "little" if bo == "<" else "big")
    H.check_capture_bytes(bytes(data), tmp_path, name)


@_ci(300)
@given(name=st.sampled_from([n for n in SEED_NAMES if n.endswith(".pcap")]),
       rec=st.integers(0, 30), which=st.sampled_from([8, 12]),
       value=st.sampled_from(H.HOSTILE_U32))
def test_fuzz_pcap_record_lengths(tmp_path, name, rec, which, value):
    """caplen (+8) / wire length (+12) of one record set to a hostile value."""
    data = bytearray(SEEDS[name])
    recs = [f for f in _META[name][1] if f[0] >= 24]
    off, _, bo = recs[(2 * rec + (which == 12)) % len(recs)]
    data[off:off + 4] = value.to_bytes(4, "little" if bo == "<" else "big")
    out = H.check_capture_bytes(bytes(data), tmp_path, name)
    if which == 8 and value > C.MAX_RECORD_LEN:
        assert "256 KiB" in out.error      # refused as corrupt, never allocated


@_ci(120)
@given(rng=st.randoms(use_true_random=False), n=st.integers(1, 40))
def test_fuzz_deep_nesting(rng, n):
    frames = H.deep_nesting_frames(rng, n)
    batch = make_batch([f for f, _ in frames])
    H.check_batch(batch, gro=True, what="deep nesting")


@_ci(120)
@given(lt=st.sampled_from(sorted(C.SUPPORTED_LINKTYPES) + [2, 147, 0xFFFF]),
       frames=st.lists(st.binary(max_size=200), min_size=1, max_size=20),
       extra=st.lists(st.sampled_from([0, 0, 1, 60, 1500, 65535, 70000, 2**32 - 1]),
                      min_size=1, max_size=20),
       dsa=st.sampled_from([None, "dsa", "edsa", "brcm", "brcm-prepend"]))
def test_fuzz_random_frames(lt, frames, extra, dsa):
    from gropcap.decode.options import DecodeOptions

    wires = [min(len(f) + extra[i % len(extra)], 2**32 - 1) for i, f in enumerate(frames)]
    batch = make_batch(frames, linktype=lt, wire_lens=wires)
    opts = DecodeOptions(dsa_tag=dsa, gue_ports=(6080,), fou_ports=((5555, 4),))
    H.check_batch(batch, opts, gro=True, what=f"random frames linktype {lt}")


@_ci(100)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_mutated_frames_with_gro(rng):
    """Frames of a real TCP capture with header bytes damaged: GRO still loses nothing."""
    name = rng.choice(["real_ipv4.pcap", "real_vxlan.pcap", "crafted_gre_seq.pcap",
                       "crafted_geneve.pcap", "real_ipv6.pcap"])
    spans = _META[name][0]
    data = bytearray(SEEDS[name])
    for _ in range(rng.randint(1, 6)):
        s, e = rng.choice(spans)
        i = s + rng.randrange(min(e - s, 100))
        data[i] = rng.randrange(256)
    from gropcap.capture.reader import read_capture
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
        f.write(bytes(data))
        f.flush()
        _, batch = read_capture(f.name)
    statuses = H.check_batch(batch, gro=True, what=name)
    assert sum(statuses.values()) == len(batch)


@_ci(30)
@given(name=st.sampled_from(SEED_NAMES), rng=st.randoms(use_true_random=False))
def test_fuzz_whole_pipeline(tmp_path, name, rng):
    """analyze -> summary -> text report -> explain -> baseline -> Parquet on damaged
    captures: a located error or a report that counts every record."""
    data = H.mutate(SEEDS[name], rng, *_META[name])
    p = tmp_path / name
    p.write_bytes(data)
    H.check_pipeline(p, rng, outdir=tmp_path)


def test_vlan_flood_is_one_row_with_a_status():
    """Thousands of stacked VLAN tags: one row, decoded by both decoders, no recursion."""
    batch = make_batch([H.vlan_flood_frame(4000), H.vlan_flood_frame(3)])
    statuses = H.check_batch(batch, gro=True, what="vlan flood")
    assert statuses == {"OK": 2}


@pytest.mark.parametrize("seed", range(3))
def test_mutation_is_deterministic(seed):
    """A fuzz finding is replayable from its seed alone."""
    name = SEED_NAMES[seed]
    a = H.mutate(SEEDS[name], random.Random(seed), *_META[name])
    b = H.mutate(SEEDS[name], random.Random(seed), *_META[name])
    assert a == b


def test_status_names_cover_schema():
    """The 'every packet has a status' invariant checks against the full status list."""
    codes = {v for k, v in vars(S).items() if k.startswith("STATUS_") and isinstance(v, int)}
    assert codes == set(S.STATUS_NAMES)
