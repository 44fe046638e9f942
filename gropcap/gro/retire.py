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
        ukey = st.union_key[:2 * nu].reshape(-1, 2) if nu else np.zeros((0, 2), np.int64)
        kmap, lmap = _retire_keys(st)
        key = ukey[:, 0]
        has = key >= 0
        new_key = np.where(has, kmap[np.where(has, key, 0)], -1)
        loose = ukey[:, 1]
        new_loose = np.where(has, lmap[np.where(has, loose, 0)], -1)
        # a class whose key is kept keeps its loose key (a held key's loose key is live)
        renumbered.append(np.stack([new_key, new_loose], axis=1))
        if counts:
            live_union |= new_key >= 0
    keep = np.flatnonzero(live_union)
    new_union = _kept_table(union, keep)
    new_union.flow = np.full(len(new_union.keys), -1, np.int64)
    new_union.flow[:len(keep)] = union.flow[keep]
    new_union.live = len(keep)
    for st, pairs in zip(states, renumbered):
        ukey = np.full(max(64, 2 * len(new_union.keys)), -1, np.int64)
        ukey[:2 * len(keep)] = pairs[keep].ravel()
        st.union_key = ukey
        st.union_ids = new_union
    return True


def _retire_keys(st) -> tuple[np.ndarray, np.ndarray]:
    """Drop ``st``'s idle keys and loose keys (tables, state rows, NAPI table, pending
    rows renumbered); returns old -> new id maps (-1: retired) for keys and loose keys."""
    kt, lt, ks = st.key_ids, st.loose_ids, st.kernel
    nk = len(kt)
    live = ks.e_first[:nk] >= 0
    pend = st.pending
    if pend is not None:
        pk = pend.key[pend.key >= 0]
        live[pk[pk < nk]] = True
    keep = np.flatnonzero(live)
    kmap = np.full(max(nk, 1), -1, np.int64)
    kmap[keep] = np.arange(len(keep), dtype=np.int64)
    separate = len(lt) > 0          # loose keys of their own (before 5.18), else = keys
    if separate:
        nl = len(lt)
        lheld = ks.loose_held[:nl] > 0
        if pend is not None:
            pl = pend.loose[(pend.key >= 0) & (pend.loose < nl)]
            lheld[pl] = True
        lkeep = np.flatnonzero(lheld)
        lmap = np.full(max(nl, 1), -1, np.int64)
        lmap[lkeep] = np.arange(len(lkeep), dtype=np.int64)
        st.loose_ids = _kept_table(lt, lkeep)
    else:
        lkeep, lmap = keep, kmap
    st.key_ids = _kept_table(kt, keep)
    changes = {}
    rows = max(64, len(keep) + len(keep) // 2)
    for f in ks._fields:
        if not f.startswith("e_"):
            continue
        old = getattr(ks, f)
        new = np.full((rows,) + old.shape[1:], -1 if f == "e_first" else 0, old.dtype)
        new[:len(keep)] = old[keep]
        changes[f] = new
    held = changes["e_first"][:len(keep)] >= 0
    loose_col = changes["e_loose"]
    loose_col[:len(keep)] = np.where(held, lmap[np.where(held, loose_col[:len(keep)], 0)], 0)
    lrows = max(64, len(lkeep) + len(lkeep) // 2)
    loose_held = np.zeros(lrows, ks.loose_held.dtype)
    loose_held[:len(lkeep)] = ks.loose_held[lkeep]
    changes["loose_held"] = loose_held
    tbl = ks.tbl.copy()
    used = tbl >= 0
    tbl[used] = kmap[tbl[used]]
    changes["tbl"] = tbl
    st.kernel = ks._replace(**changes)
    if pend is not None:
        k = pend.key
        new_key = np.where(k >= 0, kmap[np.clip(k, 0, None)], k)
        new_loose = np.where(k >= 0, lmap[np.clip(pend.loose, 0, None)], pend.loose)
        st.pending = pend._replace(key=new_key, loose=new_loose)
    return kmap, lmap


def _kept_table(table, keep: np.ndarray):
    """A new table of ``table``'s type holding the keys ``keep`` (old ids, ascending),
    numbered 0.. in that order, with room for half as many again (capacity a power of
    two, at most half the slots used); other attributes shared with ``table`` (the caller gives a
    ``UnionTable`` its own ``flow``)."""
    new = type(table).__new__(type(table))
    new.__dict__.update(table.__dict__)
    m = len(keep)
    cap = 32
    while cap < m + m // 2:
        cap *= 2
    keys = np.zeros((cap, table.words), np.uint64)
    keys[:m] = table.keys[keep]
    new.keys = keys
    new.cnt = np.array([m], np.int64)
    new.slots = np.full(2 * cap, -1, np.int64)
    K.rehash(keys, m, new.slots, np.empty(table.words, np.uint64))
    return new
