"""The numba engine on the kernel's own GRO selftest (gropcap/selftest_cases.py): every
case, every protocol, kernels on both sides of each rule change. Expected sizes are the
kernel's (gro.c receiver, live 6.18 replay, version notes), not the engine's; the
reference model must give the same GroResult."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gropcap import selftest_cases as ST
from gropcap.decode.reference import decode_batch
from gropcap.gro import reference
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import simulate
from gropcap.gro.result import GroResult

KERNELS = [(4, 7), (5, 17), (5, 18), (6, 9), (6, 10), (6, 15), (6, 18)]
CASES = [(p, c.name) for p in ST.PROTOS for c in ST.cases_for(p)]


def _table(frames) -> pa.Table:
    from craft import make_batch      # tests/craft.py: frames -> RecordBatch
    return pa.Table.from_batches([decode_batch(make_batch(frames))])


def _sizes(res: GroResult, frames, proto) -> list[int]:
    """gro.c's view: bytes per super-packet (its own per-frame count), up to the FIN."""
    per_frame = [sum(ST.received_sizes(proto, [f])) for f in frames]
    groups = [[] for _ in range(res.num_superpackets)]
    for i, s in enumerate(res.gro_seg):
        groups[int(s)].append(i)
    fin = len(frames) - 1
    out = []
    for g in groups:
        if fin in g:
            break
        out.append(sum(per_frame[i] for i in g))
    return out


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k[0]}.{k[1]}")
@pytest.mark.parametrize("proto,name", CASES, ids=[f"{p}-{n}" for p, n in CASES])
def test_engine_selftest_case(proto, name, kernel):
    case = ST.CASES[name]
    cf = case.case_frames(proto)
    table = _table(cf.frames)
    cfg = GroConfig(kernel=KernelProfile(kernel), model="napi", rss="none",
                    verify_checksums=True)
    polls = np.array(cf.bursts, dtype=np.int64)
    res = simulate(table, cfg, polls=polls)
    res.check_invariants(table.column("payload_len").to_numpy())
    assert _sizes(res, cf.frames, proto) == case.expected(proto, kernel)
    assert res.equals(reference.simulate(table, cfg, polls=polls))
