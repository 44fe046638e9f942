"""The engine's held-entry table is one record array (``fast.state.ENTRY``): every
``e_*`` array of ``EngineState.kernel`` is a strided view of its fields, a record per
key, through growth, retirement and a pickle round trip (docs/performance.md, "The
held-entry table as records"). Results are the other tests' business; these check the
layout the kernels are compiled for, and that the copies keep every field."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gropcap.gro import fast as K
from gropcap.gro.config import GroConfig
from gropcap.gro.engine import _grow, assemble, new_states, simulate
from gropcap.gro.fast.state import ENTRY_DTYPES
from tests.gro.test_gro_engine_stream import assert_equal
from tests.gro.test_gro_engine_traffic import packet_table, random_traffic
from tests.gro.test_retire import fed_in_batches, retiring


def _record_of(st: K.State) -> np.ndarray:
    rec = K.entries(st)
    assert rec is not None and rec.dtype == K.ENTRY
    for f in K.ENTRY_FIELDS:
        a = getattr(st, f)
        assert a.base is rec, f
        assert a.shape[0] == rec.shape[0] and a.strides[0] == K.ENTRY.itemsize, f
    return rec


def test_entry_record_holds_every_field_in_its_width():
    assert set(K.ENTRY.names) == set(K.ENTRY_FIELDS)
    for f in K.ENTRY_FIELDS:
        want = ENTRY_DTYPES.get(f, np.uint64 if f == "e_opt" else np.int64)
        assert K.ENTRY.fields[f][0].base == np.dtype(want), f
    assert K.ENTRY.fields["e_opt"][0].shape == (K.OPT_WORDS + 1,)
    assert K.ENTRY.itemsize <= 192                 # three cache lines a key
    assert all(K.ENTRY.fields[f][1] % K.ENTRY.fields[f][0].base.alignment == 0
               for f in K.ENTRY_FIELDS)            # no field straddles its alignment


@pytest.mark.parametrize("retire", [False, True])
def test_entries_stay_one_record_array_through_growth_retirement_and_pickle(retire):
    table = packet_table(random_traffic(np.random.default_rng(5), 3000, 200, True))
    cfgs = [GroConfig(), GroConfig(model="napi", queues=2)]
    with retiring(False):
        want = [simulate(table, c) for c in cfgs]
    grew = []

    def check(states, a):
        for s in states:
            assert len(_record_of(s.kernel)) >= len(s.key_ids)
            grew.append(len(s.kernel.e_first))
        if a == 1000:
            # each view travels as an array of its own; the next batch packs them
            states = pickle.loads(pickle.dumps(states))
            assert all(K.entries(s.kernel) is None for s in states)
            return states

    with retiring(retire):
        parts = fed_in_batches(table, cfgs, 250, check)
    assert max(grew) > 64                   # it grew past the first table
    for p, c, w in zip(parts, cfgs, want):
        assert_equal(assemble(p, c), w)


def test_packing_and_growing_keep_every_field():
    rng = np.random.default_rng(3)
    st = new_states([GroConfig()])[0].kernel
    rec = _record_of(st)
    rec[:] = np.frombuffer(rng.bytes(rec.nbytes), K.ENTRY)      # every byte set
    old = {f: getattr(st, f).copy() for f in K.ENTRY_FIELDS}
    loose = st._replace(**old)                                  # arrays of their own
    assert K.entries(loose) is None
    for nkeys in (len(rec), 5 * len(rec)):
        grown = _grow(loose, nkeys, 1)
        new = _record_of(grown)
        assert len(new) >= nkeys
        for f in K.ENTRY_FIELDS:
            assert np.array_equal(getattr(grown, f)[:len(rec)], old[f]), f
            if len(new) > len(rec):
                assert (getattr(grown, f)[len(rec):] == (-1 if f == "e_first" else 0)).all()
    # a packed state with room enough is returned as it is
    assert _grow(st, len(rec), 1) is st
