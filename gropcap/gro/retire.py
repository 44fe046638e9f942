"""Idle same-flow classes retired from the engine's tables, so its memory follows the
flows that hold something, not every flow the capture ever had.

The numba engine (``gro/engine.py``) numbers every union class (the key the kernel
looks up per row), every same-flow key and loose key in interning tables, and keeps a
row of held-entry fields per key (``fast.state.State``). Nothing in that row is read
while the key holds nothing: ``dev_gro_receive`` without a held ``p`` (``e_first`` -1)
looks at the packet alone, and ``_hold`` writes every field again. So a key with
nothing held, no held entry on its loose key and no row waiting in a NAPI queue
(``EngineState.pending``) can leave the tables: if its flow comes back, the flow's
packets intern it again under a new id and find it empty, as they would have found
the old one. What stays for every flow is its flow id (``EngineState.flow_ids``): the
results number flows by first appearance, a returning flow keeps its number.

:func:`retire_idle` does that at a batch boundary for every state sharing one union
table, once the union table has grown :data:`RETIRE_GROWTH` times past what was live
after the last retirement and holds at least :data:`RETIRE_MIN` classes (amortised:
each retirement is linear in the tables, and the tables at least doubled since the one
before). Kept keys keep their relative order; nothing in the results depends on the
numbering (``tests/gro/test_retire.py`` checks results with a retirement at every
batch against none).

The union classes kept are those of the keys live in a model with polls (napi, or
explicit windows), the flows active now. The ideal model has no timer: a flow whose
last packet was held keeps that entry, and its key, until the end of the capture, but
not its union class (a returning flow's class is made again and finds the key). An
ideal model alone keeps the classes of its live keys.

Not retired: states with UDP GRO views (``EngineState.udp_ids``: their key tables
hold the engine's key ids inside their keys).

Layer: gro/, used by ``gro/engine.py`` only.
"""

from __future__ import annotations

import numpy as np

from gropcap.gro import fast as K

# a union table smaller than this is never retired (a retirement costs a pass over the
# tables; captures with fewer flows keep every class, as before)
RETIRE_MIN = 1 << 16
# ... and it is retired once it holds this many times the classes live after the last one
RETIRE_GROWTH = 2
# a model's key tables are copied in a retirement only when they hold at least this many
# times their live keys (else they stay as they are: the copy would free little)
KEYS_GROWTH = 2


def due(union) -> bool:
    """Whether the union table ``union`` (``engine.UnionTable``) is due a retirement."""
    n = len(union)
    return n >= RETIRE_MIN and n >= RETIRE_GROWTH * union.live


def retire_idle(states: list) -> bool:
    """Retire the idle classes of ``states`` (``engine.EngineState``s between batches,
    every state that shares their union table; see the module docstring) when their
    union table is :func:`due`. Returns whether it did."""
    if not states:
        return False
    union = states[0].union_ids
    if any(st.union_ids is not union for st in states) or union.sharers != len(states):
        return False                 # only some of the states sharing the table: leave it
    if any(st.udp_ids for st in states) or not due(union):
        return False
    nu = len(union)
    live_union = np.zeros(nu, np.bool_)
    renumbered = []
    # the classes kept: those of keys live in a model with polls (napi, windows), the
    # flows active now; the ideal model holds a flow's last entry until the end of the
    # capture, and its key (not its class) is what it needs when the flow comes back
    polled = [st.model != K.MODEL_IDEAL for st in states]
    if not any(polled):
        polled = [True] * len(states)
    for st, counts in zip(states, polled):
        ukey = st.union_key[:2 * nu]
        if len(ukey) < 2 * nu:
            # models prepared apart (configs that differ in more than the model) share
            # the table too, and a state never looked up the classes the others added
            # after its last batch: no key for them here
            ukey = np.concatenate([ukey, np.full(2 * nu - len(ukey), -1, np.int64)])
        pairs = ukey.reshape(-1, 2)
        kmap, lmap = _retire_keys(st)
        has = pairs[:, 0] >= 0
        # a class whose key is kept keeps its loose key (a held key's loose key is live)
        pairs = np.stack([_mapped(pairs[:, 0], kmap, has, -1),
                          _mapped(pairs[:, 1], lmap, has, -1)], axis=1)
        renumbered.append(pairs)
        if counts:
            live_union |= pairs[:, 0] >= 0
    keep = np.flatnonzero(live_union)
    new_union = union.kept(keep)
    for st, pairs in zip(states, renumbered):
        ukey = np.full(max(64, 2 * len(new_union.keys)), -1, np.int64)
        ukey[:2 * len(keep)] = pairs[keep].ravel()
        st.union_key = ukey
        st.union_ids = new_union
    return True


def _mapped(ids: np.ndarray, id_map: np.ndarray, valid: np.ndarray, fill) -> np.ndarray:
    """``id_map[ids]`` where ``valid``, else ``fill`` (an array or a value)."""
    out = np.where(valid, 0, fill).astype(np.int64)
    out[valid] = id_map[ids[valid]]
    return out


def _retire_keys(st) -> tuple[np.ndarray, np.ndarray]:
    """Drop ``st``'s idle keys and loose keys (tables, state rows, NAPI table, pending
    rows renumbered); returns old -> new id maps (-1: retired) for keys and loose keys.
    Nothing is dropped (identity maps) unless at least half of the keys are idle
    (:data:`KEYS_GROWTH`): each retirement copies the tables, so one that frees little
    would make a capture of many long-held flows pay a copy of every key per retirement
    (the ideal model on 1.55 M flows: 7 s of a 37 s run, docs/performance.md)."""
    kt, lt, ks = st.key_ids, st.loose_ids, st.kernel
    nk = len(kt)
    live = ks.e_first[:nk] >= 0
    pend = st.pending
    if pend is not None:
        pk = pend.key[pend.key >= 0]
        live[pk[pk < nk]] = True
    keep = np.flatnonzero(live)
    if KEYS_GROWTH * len(keep) > nk:
        # less than 1 - 1/KEYS_GROWTH of them idle: the copy would free little (the
        # ideal model holds an entry for nearly every flow it saw), so this state keeps
        # its tables as they are; the union table still drops the classes (a returning
        # flow's class is made again and finds its key here)
        same = np.arange(nk, dtype=np.int64)
        return same, (np.arange(len(lt), dtype=np.int64) if len(lt) else same)
    kmap = _numbering(keep, nk)
    if len(lt):                     # loose keys of their own (before 5.18), else = keys
        nl = len(lt)
        lheld = ks.loose_held[:nl] > 0
        if pend is not None:
            lheld[pend.loose[(pend.key >= 0) & (pend.loose < nl)]] = True
        lkeep = np.flatnonzero(lheld)
        lmap = _numbering(lkeep, nl)
        st.loose_ids = lt.kept(lkeep)
    else:
        lkeep, lmap = keep, kmap
    del lt
    st.key_ids = kt.kept(keep)
    del kt
    m = len(keep)
    rows = max(64, m + m // 2)
    # the kept entries' records into a fresh record array (K.entry_arrays: e_first -1
    # is "nothing held"); the old one goes as soon as they are copied
    kind, fields = type(ks), ks._asdict()
    rec = K.entries(ks)
    st.kernel = ks = None
    new = K.entry_arrays(rows)
    if rec is not None:
        np.take(rec, keep, out=new["e_first"].base[:m])
    else:
        for f in K.ENTRY_FIELDS:
            np.take(fields[f], keep, axis=0, out=new[f][:m])
    del rec
    fields.update(new)
    held = fields["e_first"][:m] >= 0
    fields["e_loose"][:m] = _mapped(fields["e_loose"][:m], lmap, held, 0)
    old = fields["loose_held"]
    fields["loose_held"] = np.zeros(max(64, len(lkeep) + len(lkeep) // 2), old.dtype)
    fields["loose_held"][:len(lkeep)] = old[lkeep]
    del old
    fields["tbl"] = _mapped(fields["tbl"], kmap, fields["tbl"] >= 0, fields["tbl"])
    st.kernel = kind(**fields)
    if pend is not None:
        use = pend.key >= 0
        st.pending = pend._replace(key=_mapped(pend.key, kmap, use, pend.key),
                                   loose=_mapped(pend.loose, lmap, use, pend.loose))
    return kmap, lmap


def _numbering(keep: np.ndarray, n: int) -> np.ndarray:
    """Old id -> new id (-1: retired) of ``n`` ids of which ``keep`` stay, in order."""
    id_map = np.full(n, -1, np.int64)
    id_map[keep] = np.arange(len(keep), dtype=np.int64)
    return id_map
