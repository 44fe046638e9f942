"""numba kernels of the GRO engine (private: arrays in, arrays out; see ``gro/engine.py``).

Layer: per-packet numpy arrays prepared by ``engine.py`` -> per-packet verdicts and
super-packet rows. Nothing here raises for data: every packet ends in a super-packet with a
reason code. The rules mirror the kernel functions named next to them; the batch models
follow docs/gro-model.md. One module per kernel area, lowest first (a module imports only
the ones above it in this list; tests/test_layout.py holds them to it):

=============  ==========================================================================
``state``      the arrays (Cols, Cfg, State, Out), their constants, and how a packet or
               a held entry goes up (GRO_NORMAL delivery, napi_gro_complete)
``keys``       flow interning: same-flow, loose and flow keys packed into words and
               interned in persistent tables (engine._classes)
``bypass``     the checks that send a packet past GRO, in the kernel's order, and the
               IP layers' skb flush (engine._pre_and_flush)
``columns``    per-packet lengths and gso_type code in; per-packet result rows out
``ip``         inet/ipv6 gro_receive and gro_flush pair rules, the IP ID eras
               (net/ipv4/af_inet.c, net/ipv6/ip6_offload.c)
``tcp``        tcp_gro_receive's flush items and out_check_final (net/ipv4/tcp_offload.c)
``udp``        udp_gro_receive_segment (net/ipv4/udp_offload.c)
``dev``        dev_gro_receive, gro_flush_oldest, __gro_flush (net/core/gro.c)
``napi``       the poll loop: __napi_poll, napi_complete_done, napi_watchdog
               (net/core/dev.c); :func:`run` is the kernel engine.py calls per batch
=============  ==========================================================================

The names engine.py uses are imported here (``from gropcap.gro import fast as K``).

numba's cache is per source file: a cached ``napi.run`` would not notice a change in
``tcp.py`` it inlined, nor in a constant of ``reasons.py`` it baked in. Importing this
package compares a stamp of every module of it and of the modules whose constants the
kernels read (:data:`STAMP_MODULES`) with the one stored next to the cache, and empties
every kernel's cache index when they differ (:mod:`gropcap.numba_cache`).
"""

from __future__ import annotations

from gropcap import constants, numba_cache
from gropcap.decode import schema
from gropcap.gro import reasons
from gropcap.gro.fast import bypass, columns, dev, ip, keys, napi, state, tcp, udp
from gropcap.gro.fast.bypass import PreCfg, PreIn, pre_and_flush
from gropcap.gro.fast.columns import (
    BIG_ANY, BIG_NONE, BIG_V6_PLAIN, assemble_rows, derive_lengths,
)
from gropcap.gro.fast.dev import flush_ideal
from gropcap.gro.fast.keys import (
    FLOW_WORDS, SAME_FLOW_WORDS, UNION_CHUNK, UNION_WORDS, FlowIn, SameFlowIn, classify,
    dedup_reps, flow_ids_of, gather_rows, intern_rows, key_classes, rehash,
)
from gropcap.gro.fast.napi import napi_finish, run
from gropcap.gro.fast.state import (
    ERA_FLUSH_ID, ERA_INNER_ID, ERA_ONE_BIT, ERA_TWO_BIT, GCODE_DELIVERED, MAX_GRO_SKBS,
    MODEL_IDEAL, MODEL_NAPI, MODEL_WINDOWS, OPT_BYTES, OPT_WORDS, QS_CONT, QS_HAS_TIMER,
    QS_LAST_POLL, QS_N, QS_NEXT, UDP_FRAGLIST, UDP_SEGMENT, Cfg, Cols, ENTRY, ENTRY_FIELDS,
    Out, State, entries, entry_arrays,
)

__all__ = [
    "BIG_ANY", "BIG_NONE", "BIG_V6_PLAIN", "Cfg", "Cols", "ENTRY", "ENTRY_FIELDS",
    "ERA_FLUSH_ID", "ERA_INNER_ID", "ERA_ONE_BIT", "ERA_TWO_BIT", "FLOW_WORDS", "FlowIn",
    "GCODE_DELIVERED", "MAX_GRO_SKBS", "MODEL_IDEAL", "MODEL_NAPI", "MODEL_WINDOWS",
    "OPT_BYTES", "OPT_WORDS", "Out", "PreCfg", "PreIn", "QS_CONT", "QS_HAS_TIMER",
    "QS_LAST_POLL", "QS_N", "QS_NEXT", "SAME_FLOW_WORDS", "SameFlowIn", "State",
    "UDP_FRAGLIST", "UDP_SEGMENT", "UNION_CHUNK", "UNION_WORDS", "assemble_rows",
    "classify", "dedup_reps", "derive_lengths", "entries", "entry_arrays", "flow_ids_of",
    "flush_ideal", "gather_rows", "intern_rows", "key_classes", "napi_finish",
    "pre_and_flush", "rehash", "run",
]

# the kernel modules, lowest first, and every module whose source a cached kernel depends
# on: the kernel modules and those they read constants from (a test holds this list to
# the imports of the kernel modules)
MODULES = (state, keys, bypass, columns, ip, tcp, udp, dev, napi)
STAMP_MODULES = MODULES + (constants, schema, reasons)
CACHE_STAMP = "gro_fast.deps"


def _refresh_cache() -> bool:
    stamp = numba_cache.stamp([m.__file__ for m in STAMP_MODULES],
                              " ".join(m.__name__ for m in STAMP_MODULES))
    return numba_cache.refresh(numba_cache.dispatchers_of(*MODULES), CACHE_STAMP, stamp)


_refresh_cache()
numba_cache.light_loads(numba_cache.dispatchers_of(*MODULES))
