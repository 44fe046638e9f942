"""run.accumulators: counts added batch by batch and merged from pieces equal the counts of
one pass over the whole run (the property the bounded-memory core and the Dask runner
rely on); the summary rendered from them is the one report/ renders for an Analysis."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze
from gropcap.run.summary import render_summary, summary_dict
from gropcap.run.accumulators import (CaptureCounts, FlowCounts, ModelCounts, file_index_of,
                                      model_counts, totals_of_analysis)
from where import TESTS

SAMPLES = os.path.join(TESTS, os.pardir, "sample_pcaps")


def _state(obj) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in vars(obj).items() if k not in ("key_parts", "key_ids")}


@pytest.fixture(scope="module")
def two_files():
    return analyze([os.path.join(SAMPLES, "real_ipv4.pcap"),
                    os.path.join(SAMPLES, "real_vxlan.pcap")], GroConfig(queues=2))


def test_capture_counts_merged_from_chunks_equal_one_pass(two_files):
    t = two_files.decoded
    whole = CaptureCounts(True)
    whole.add(t)
    merged = CaptureCounts(True)
    for lo in range(0, t.num_rows, 997):
        part = CaptureCounts(True)
        part.add(t.slice(lo, 997))
        merged.merge(part)
    assert merged.packets == t.num_rows and len(merged.file_packets) == 2
    assert _state(merged) | {"encap": dict(sorted(merged.encap.items())),
                             "tot_hist": dict(sorted(merged.tot_hist.items()))} == \
        _state(whole) | {"encap": dict(sorted(whole.encap.items())),
                         "tot_hist": dict(sorted(whole.tot_hist.items()))}


def test_renumbered_file_counts(two_files):
    t = two_files.decoded
    second = t.filter(file_index_of(t) == 1)
    c = CaptureCounts()
    c.add(second)
    c.renumber_file(1, 0)
    assert c.file_packets.tolist() == [second.num_rows]


@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_model_counts_merged_from_pieces_equal_one_pass(two_files, model):
    a = two_files
    t, r = a.decoded, a.results[model]
    fidx = file_index_of(t)
    kw = dict(count=r.seg_count, end=r.seg_end_reason, payload=r.seg_payload_len,
              flow=r.seg_flow_id, first=r.seg_first_packet)
    whole = model_counts(model, t, fidx, reasons=r.reason, **kw)
    merged = ModelCounts(model)
    rows = np.array_split(np.arange(t.num_rows), 3)
    segs = np.array_split(np.arange(r.num_superpackets), 3)
    for rr, ss in zip(rows, segs):
        merged.merge(model_counts(model, t, fidx, reasons=r.reason[rr],
                                  **{k: np.asarray(v)[ss] for k, v in kw.items()}))
    assert whole.nseg == r.num_superpackets > 0 and whole.encap
    assert _state(merged) == _state(whole)


def test_flow_counts_merged_in_row_order_equal_one_pass(two_files):
    t = two_files.decoded
    flow = two_files.results["napi"].flow_id
    whole = FlowCounts()
    whole.add(t, flow)
    merged = FlowCounts()
    for lo in range(0, t.num_rows, 1500):     # pieces counted alone, merged in row order
        part = FlowCounts()
        part.add(t.slice(lo, 1500), flow[lo:lo + 1500])
        merged.merge(part)
    models = {m: model_counts(m, t, file_index_of(t), reasons=r.reason, count=r.seg_count,
                              end=r.seg_end_reason, payload=r.seg_payload_len,
                              flow=r.seg_flow_id, first=r.seg_first_packet)
              for m, r in two_files.results.items()}
    assert merged.n_flows == whole.n_flows > 4
    assert merged.table(models).equals(whole.table(models))
    assert whole.table(models).equals(two_files.flows)


def test_summary_rendered_from_totals_is_summary_dict(two_files):
    a = two_files
    from gropcap.receive.context import ReceiveContext
    s = render_summary(totals_of_analysis(a), infos=a.infos, config=a.config, mtu=a.mtu,
                       receive=ReceiveContext.from_config(a.config))
    assert s == summary_dict(a)
    assert len(s["files"]) == 2 and s["encapsulations"]
