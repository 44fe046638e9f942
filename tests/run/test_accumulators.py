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
    got = {k: v for k, v in vars(obj).items()
           if k not in ("key_parts", "key_ids") and not k.startswith("_top")}
    if isinstance(obj, ModelCounts):    # (the keys still to fold in, folded)
        got.update(top_keys=obj.top_keys, top_counts=obj.top_counts)
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in got.items()}


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


def test_ip_length_histogram_equals_one_row_at_a_time(two_files):
    # per outermost IP length: frames and the largest frame, for the rows not marked
    # coalesced (what report.summary's above-the-MTU warning reads)
    t = two_files.decoded
    c = CaptureCounts()
    c.add(t)
    col = {k: t.column(k).to_pylist() for k in ("outer_ip_version", "ip_version",
                                                 "outer_ip_tot_len", "ip_tot_len",
                                                 "wire_len", "epb_flags")}
    want: dict = {}
    for i in range(t.num_rows):
        outer = col["outer_ip_version"][i] != 0
        ver = col["outer_ip_version"][i] if outer else col["ip_version"][i]
        tot = col["outer_ip_tot_len"][i] if outer else col["ip_tot_len"][i]
        if ver == 0 or (ver == 4 and tot == 0) or col["epb_flags"][i] & (1 << 11):
            continue
        e = want.setdefault(tot, [0, 0])
        e[0] += 1
        e[1] = max(e[1], col["wire_len"][i])
    assert len(want) > 3 and c.tot_hist == want


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


@pytest.mark.parametrize("table_min", [1, 4, 1 << 10])
def test_top_reasons_counted_in_a_growing_table_equal_one_count(monkeypatch, table_min):
    """ModelCounts counts each batch's (flow, end reason) keys in an open-addressing
    table that grows as keys come (from 2 slots: a rehash every key or two): the counts
    (read between batches too), the top reason per flow and a merge equal one count
    over every super-packet."""
    import gropcap.run.accumulators as acc
    monkeypatch.setattr(acc, "TOP_TABLE_MIN", table_min)
    rng = np.random.default_rng(11)
    flows, ends = [], []
    a, b = ModelCounts("napi"), ModelCounts("napi")
    for i in range(40):
        m = int(rng.integers(0, 50))
        flow = rng.integers(0, 30 + 20 * i, m)
        end = rng.choice([1, 2, 3, 7, 200], m)
        flows.append(flow)
        ends.append(end)
        (a if i % 3 else b).add_segs(count=np.ones(m, np.int64), end=end,
                                     payload=np.ones(m), flow=flow, file=np.zeros(m))
        if i == 17:                                         # a read between batches
            mine = [f * 256 + e for j, (f, e) in enumerate(zip(flows, ends)) if j % 3]
            k, c = np.unique(np.concatenate(mine), return_counts=True)
            assert a.top_keys.tolist() == k.tolist()
            assert a.top_counts.tolist() == c.tolist()
    key = np.concatenate(flows) * 256 + np.concatenate(ends)
    want_k, want_c = np.unique(key, return_counts=True)
    n_flows = int(np.concatenate(flows).max()) + 1
    whole = ModelCounts("napi")
    whole._top(want_k, want_c)
    a.merge(b)
    assert a.top_keys.tolist() == want_k.tolist()
    assert a.top_counts.tolist() == want_c.tolist()
    assert a.top_reasons(n_flows).equals(whole.top_reasons(n_flows))


def test_segment_histograms_equal_numpy_counts():
    """ModelCounts.add_segs' one-pass histograms (gro._batch_kernels.seg_hists) equal
    np.bincount's, lengths included, over batches of any dtype, empty batches and
    files or flows that appear late."""
    rng = np.random.default_rng(5)
    mc = ModelCounts("ideal")
    want = {k: np.zeros(0, np.int64) for k in ("seg_hist", "file_segs", "file_data_segs",
                                                "flow_segs")}
    end_hist = np.zeros(256, np.int64)
    largest = data = n = 0
    for i in range(12):
        m = int(rng.integers(0, 300)) if i != 4 else 0
        count = rng.integers(1, 3 + 10 * i, m).astype(np.int32 if i % 2 else np.int64)
        end = rng.integers(0, 256, m).astype(np.uint8)
        payload = np.where(rng.random(m) < 0.3, 0, rng.integers(1, 9000, m))
        flow = rng.integers(0, 5 + 40 * i, m)
        file = rng.integers(0, 1 + i // 3, m).astype(np.uint16)
        mc.add_segs(count=count, end=end, payload=payload, flow=flow, file=file)
        if not m:
            continue
        for k, v in (("seg_hist", count), ("file_segs", file),
                     ("file_data_segs", file[payload > 0]), ("flow_segs", flow)):
            b = np.bincount(np.asarray(v, np.int64))
            out = np.zeros(max(len(want[k]), len(b)), np.int64)
            out[:len(want[k])] += want[k]
            out[:len(b)] += b
            want[k] = out
        end_hist += np.bincount(end, minlength=256)
        largest, data, n = max(largest, int(count.max())), data + int((payload > 0).sum()), \
            n + m
    for k, v in want.items():
        assert getattr(mc, k).tolist() == v.tolist(), k
    assert mc.end_hist.tolist() == end_hist.tolist()
    assert (mc.largest, mc.data_segs, mc.nseg) == (largest, data, n)


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


def _random_flows(seed: int, n: int):
    """A flows table with few hosts and ports (reversed keys and repeated keys occur),
    some rows without ports, some UDP, IPv4 and IPv6 addresses."""
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    hosts = ["10.0.0.1", "10.0.0.2", "fe80::1", "192.168.1.9"]
    return pa.table({
        "encap": pa.array(rng.choice(["", "vxlan"], n).tolist()),
        "src": pa.array(rng.choice(hosts, n).tolist()),
        "dst": pa.array(rng.choice(hosts, n).tolist()),
        "sport": pa.array(rng.choice([0, 80, 5000], n), pa.uint16()),
        "dport": pa.array(rng.choice([0, 80, 5000], n), pa.uint16()),
        "l4_proto": pa.array(rng.choice([6, 6, 17], n), pa.uint8()),
        "payload_bytes": pa.array(rng.choice([0, 100], n), pa.int64()),
    })


@pytest.mark.parametrize("seed", range(8))
def test_one_way_and_ack_hints_by_join_equal_the_set_definition(seed):
    """warnings_of's one-way TCP flows and acks_hint's directions (hash joins over the
    flows table) equal their definitions over Python sets of keys."""
    import re
    from gropcap.run.hints import acks_hint
    from gropcap.run.summary import warnings_of
    flows = _random_flows(seed, 300)
    rows = flows.to_pylist()
    tcp = [i for i, r in enumerate(rows) if r["l4_proto"] == 6 and (r["sport"] or r["dport"])]
    present = {(rows[i]["src"], rows[i]["sport"], rows[i]["dst"], rows[i]["dport"])
               for i in tcp}
    one_way = [i for i in tcp if (rows[i]["dst"], rows[i]["dport"], rows[i]["src"],
                                  rows[i]["sport"]) not in present]
    from gropcap.run.summary import mtu_of
    a = analyze([os.path.join(SAMPLES, "real_ipv4.pcap")])
    got = [w for w in warnings_of(a.totals, mtu_of(a), flows) if "one direction" in w]
    assert one_way, "the table must hold one-way flows"
    assert len(got) == 1
    r = rows[one_way[0]]
    assert re.match(rf"{len(one_way)} of {len(tcp)} TCP flows .* \(e\.g\. flow "
                    rf"{one_way[0]}, {re.escape(r['src'])}:{r['sport']} > ", got[0])
    keys = {(r["encap"], r["src"], r["dst"], r["sport"], r["dport"], r["l4_proto"])
            for r in rows}
    want = sum(1 for r in rows if r["l4_proto"] == 6 and r["payload_bytes"] > 0 and
               (r["encap"], r["dst"], r["src"], r["dport"], r["sport"], 6) in keys)
    hint = acks_hint(flows, GroConfig())
    assert (hint or {}).get("directions", 0) == want and want > 0


@pytest.mark.parametrize("seed", range(3))
def test_reverse_seen_with_wide_and_signed_keys_equals_the_set_definition(seed):
    """reverse_seen packs the key columns into int64 words: a signed key column with
    values far apart takes several words (the np.unique path), and a flow is still
    found exactly when its reversed key is among the others."""
    import pyarrow as pa

    from gropcap.run.accumulators import reverse_seen
    rng = np.random.default_rng(seed)
    n = 400
    flows = _random_flows(seed, n).append_column(
        "k", pa.array(rng.choice([-(2 ** 40), 0, 2 ** 40 + 7], n), pa.int64()))
    keys = ("src", "sport", "dst", "dport", "k")
    rows = flows.to_pylist()
    pick, among = np.arange(0, n, 2), np.arange(n // 3, n)
    present = {(rows[i]["dst"], rows[i]["dport"], rows[i]["src"], rows[i]["sport"],
                rows[i]["k"]) for i in among}
    want = [(rows[i]["src"], rows[i]["sport"], rows[i]["dst"], rows[i]["dport"],
             rows[i]["k"]) in present for i in pick]
    got = reverse_seen(flows, pick, among, keys=keys)
    assert got.tolist() == want and any(want) and not all(want)


@pytest.mark.parametrize("python_max", [0, 4096])
def test_address_texts_equal_one_at_a_time(monkeypatch, python_max):
    # both ways: Arrow compute (many distinct addresses) and Python (few)
    import pyarrow as pa
    from gropcap.run import accumulators
    from gropcap.run.accumulators import addr_text, addr_texts
    monkeypatch.setattr(accumulators, "ADDR_TEXTS_PYTHON", python_max)
    rng = np.random.default_rng(1)
    raw, ver = [], []
    for _ in range(500):
        v = int(rng.choice([4, 6, 0]))
        b = bytes(10) + b"\xff\xff" + bytes(rng.integers(0, 3, 4).tolist()) if v == 4 else \
            bytes(rng.integers(0, 256, 16).tolist()) if v == 6 else bytes(16)
        raw.append(b)
        ver.append(v)
    # two chunks, the second a slice (an offset into its buffer)
    col = pa.chunked_array([pa.array(raw[:200], pa.binary(16)),
                            pa.array(raw[190:], pa.binary(16)).slice(10)])
    got = addr_texts(col, np.array(ver, np.uint8)).to_pylist()
    assert got == [addr_text(b, v) for b, v in zip(raw, ver)]
    assert len(set(got)) < len(got)         # repeated addresses: converted once each


def test_top_reasons_pick_the_most_frequent_then_the_lower_code():
    mc = ModelCounts("ideal")
    # flow 0: reason 7 twice, 3 twice (tie: 3); flow 2: 9 three times, 1 once; flow 1: none
    mc._top(np.array([0 * 256 + 7, 0 * 256 + 3, 2 * 256 + 1, 2 * 256 + 9]),
            np.array([2, 2, 1, 3]))
    from gropcap.gro.reasons import reason_name
    assert mc.top_reasons(3).to_pylist() == [reason_name(3), "", reason_name(9)]
    assert mc.top_reasons(1).to_pylist() == [reason_name(3)]


def _mapped_from(buf, name: str) -> bool:
    """Whether an Arrow buffer lies in a mapping of a (deleted) file called ``name``."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.rstrip("\n").split(maxsplit=5)
            path = fields[5] if len(fields) > 5 else ""
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= buf.address < hi:
                return os.path.basename(path.replace(" (deleted)", "")) == name
    return False


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "spilled"])
@pytest.mark.parametrize("slice_rows", [1, 3, 1 << 19])
def test_partition_flows_on_disk_give_the_flows_table_of_one_pass(
        two_files, on_disk, slice_rows, tmp_path, monkeypatch):
    """The Dask runner's flows (run.spill): two receiver runs (one per file), each cut
    into two partitions by flow; every partition's flows-table rows under its own flow
    ids go to its work directory, the client numbers the flows by first appearance and
    appends the rows in that order, a slice at a time: the table equals the one-process
    flows table. Spilled (the Dask runner's client): the rows are not in the client's
    memory but in a mapped file, deleted once mapped."""
    import pyarrow as pa

    from gropcap import arrays
    from gropcap.run.accumulators import Totals
    from gropcap.run.spill import (FLOWS, Spill, in_flow_order, number_flows,
                                   save_partition_flows)
    monkeypatch.setattr(arrays, "SLICE_ROWS", slice_rows)
    t = two_files.decoded
    fidx = file_index_of(t)
    models = list(two_files.results)
    whole = totals_of_analysis(two_files).flows_table()
    spill = Spill(str(tmp_path / "flows.arrow")) if on_disk else None
    sealed = Totals(models, spill=spill)
    gfid = np.asarray(two_files.results[models[0]].flow_id).astype(np.int64)
    base = 0
    for f in (0, 1):
        works = []
        for half in (0, 1):
            rows = np.flatnonzero((fidx == f) & (gfid % 2 == half))
            sub = t.take(rows)
            # local ids: the partition's flows by first appearance
            uniq, first_at, inv = np.unique(gfid[rows], return_index=True,
                                            return_inverse=True)
            rank = np.empty(len(uniq), np.int64)
            rank[np.argsort(first_at, kind="stable")] = np.arange(len(uniq))
            part = Totals(models)
            part.flows.add(sub, rank[inv.ravel()])
            for m in models:
                r = two_files.results[m]
                segs = np.isin(np.asarray(r.seg_first_packet), rows)
                part.models[m] = model_counts(
                    m, t, fidx, reasons=np.asarray(r.reason)[rows],
                    count=np.asarray(r.seg_count)[segs],
                    end=np.asarray(r.seg_end_reason)[segs],
                    payload=np.asarray(r.seg_payload_len)[segs],
                    flow=rank[np.searchsorted(uniq, np.asarray(r.seg_flow_id)[segs])],
                    first=np.asarray(r.seg_first_packet)[segs])
            work = str(tmp_path / f"run{f}-part{half}")
            os.mkdir(work)
            save_partition_flows(work, part.flows.table(part.models),
                                 np.sort(rows[first_at]), uniq.astype(np.uint64), None)
            works.append(work)
        n = number_flows(works, base)
        held = pa.total_allocated_bytes()
        for rows_of in in_flow_order(works, FLOWS, base, n):
            assert rows_of.num_rows <= slice_rows
            sealed.add_flow_rows(rows_of)
        if on_disk:                     # the run's rows went to the file
            assert pa.total_allocated_bytes() - held < 4096 + whole.nbytes / 8
        base += n
    assert sealed.sealed_flows == base == whole.num_rows > 0
    assert sealed.flows_table().equals(whole)
    if on_disk:
        assert not os.path.exists(spill.path)
        assert sealed.flows_table().column("src").chunk(0).buffers()[2] is not None
        assert all(_mapped_from(c.buffers()[1], "flows.arrow")
                   for c in sealed.flows_table().column("packets").chunks)


def test_partition_flow_keys_that_meet_are_found(tmp_path, monkeypatch):
    """run.spill.disjoint (the client's check that no flow or loose class is in two
    partitions): a shared value is found wherever it lies in a slice, none when the
    arrays only interleave."""
    from gropcap import arrays
    from gropcap.run.spill import disjoint, write_array
    rng = np.random.default_rng(4)
    for trial in range(40):
        monkeypatch.setattr(arrays, "SLICE_ROWS", int(rng.integers(1, 9)))
        vals = rng.choice(1000, int(rng.integers(2, 60)), replace=False).astype(np.uint64)
        cut = np.sort(rng.choice(np.arange(1, len(vals)), 2 if len(vals) > 2 else 1,
                                 replace=False))
        parts = np.split(vals, cut)
        meet = trial % 2 == 1 and len(parts[0]) and len(parts[-1])
        if meet:
            parts[-1] = np.append(parts[-1], parts[0][rng.integers(len(parts[0]))])
        paths = []
        for i, p in enumerate(parts):
            paths.append(str(tmp_path / f"{trial}-{i}.npy"))
            write_array(paths[-1], np.unique(p))
        assert disjoint(paths) == (not meet)


def _set_reverse(rows, pick, among, key, swapped):
    """(picked, with their reverse among the candidates, first picked without) by sets."""
    present = {swapped(rows[i]) for i in among}
    got = [i for i in pick if key(rows[i]) in present]
    miss = [i for i in pick if key(rows[i]) not in present]
    return len(pick), len(got), (miss[0] if miss else -1)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("limit", [4, 16, 64, 10_000])
def test_reverse_count_in_buckets_equals_the_set_definition(seed, limit):
    """reverse_count takes a table larger than ``limit`` flows in buckets by an endpoint
    hash (a flow and its reverse in the same bucket) over slices of ``limit`` rows: its
    counts and first row equal the set definition whatever the bucket count."""
    from gropcap.arrays import batch_column as col
    from gropcap.run.accumulators import reverse_count
    flows = _random_flows(seed, 300)
    # several chunks, one a slice with an offset into its buffers
    import pyarrow as pa
    flows = pa.concat_tables([flows.slice(0, 120), flows.slice(120, 100),
                              flows.slice(220)])
    rows = flows.to_pylist()
    tcp = [i for i, r in enumerate(rows) if r["l4_proto"] == 6 and (r["sport"] or r["dport"])]
    want = _set_reverse(rows, tcp, tcp, lambda r: (r["src"], r["sport"], r["dst"], r["dport"]),
                        lambda r: (r["dst"], r["dport"], r["src"], r["sport"]))

    def is_tcp(b):
        return (col(b, "l4_proto") == 6) & ((col(b, "sport") != 0) | (col(b, "dport") != 0))
    assert reverse_count(flows, is_tcp, is_tcp, limit=limit) == want
    assert 0 < want[1] < want[0]
    keys = ("encap", "src", "sport", "dst", "dport", "l4_proto")
    data = [i for i, r in enumerate(rows) if r["l4_proto"] == 6 and r["payload_bytes"] > 0]
    want = _set_reverse(rows, data, range(len(rows)),
                        lambda r: (r["encap"], r["src"], r["sport"], r["dst"], r["dport"], 6),
                        lambda r: (r["encap"], r["dst"], r["dport"], r["src"], r["sport"],
                                   r["l4_proto"]))
    got = reverse_count(flows, lambda b: (col(b, "l4_proto") == 6)
                        & (col(b, "payload_bytes") > 0),
                        lambda b: np.ones(b.num_rows, bool), keys=keys, limit=limit)
    assert got == want and want[1] > 0


def test_endpoint_buckets_keep_reverses_together_and_spread():
    import pyarrow as pa
    from gropcap.run.accumulators import _endpoint_bucket
    rng = np.random.default_rng(3)
    n = 5000
    src = [f"10.{a}.{b}.1" for a, b in rng.integers(0, 256, (n, 2)).tolist()]
    dst = [f"fe80::{a:x}" for a in rng.integers(0, 65536, n).tolist()]
    sp, dp = rng.integers(0, 65536, n), rng.integers(0, 65536, n)
    fwd = pa.record_batch({"src": pa.array(src), "dst": pa.array(dst),
                           "sport": pa.array(sp, pa.uint16()), "dport": pa.array(dp, pa.uint16())})
    rev = pa.record_batch({"src": pa.array(dst), "dst": pa.array(src),
                           "sport": pa.array(dp, pa.uint16()), "dport": pa.array(sp, pa.uint16())})
    b = _endpoint_bucket(fwd, 16)
    assert np.array_equal(b, _endpoint_bucket(rev, 16))
    counts = np.bincount(b, minlength=16)
    assert counts.min() > n / 16 / 2 and counts.max() < n / 16 * 2, counts


def test_top_flows_by_slices_equal_one_sort(monkeypatch):
    """top_flows keeps the top of each slice of the flows table (a table mapped from
    disk is never held whole): the same flows, in the same order, as one sort with ties
    in flow order."""
    import pyarrow as pa

    import gropcap.arrays as arrays
    from gropcap.report.summary import top_flows
    rng = np.random.default_rng(5)
    n = 500
    flows = _random_flows(5, n).append_column(
        "napi_superpackets", pa.array(rng.integers(0, 6, n), pa.int64()))
    for k, v in (("packets", rng.integers(1, 99, n)), ("napi_ratio", rng.random(n)),
                 ("napi_top_reason", np.array(["x"] * n))):
        flows = flows.append_column(k, pa.array(v))
    segs = flows.column("napi_superpackets").to_pylist()
    want = sorted(range(n), key=lambda i: (-segs[i], i))
    whole = top_flows(flows, "napi", 40)
    assert [r["flow_id"] for r in whole["flows"]] == want[:40]
    for rows in (1, 7, 100):
        monkeypatch.setattr(arrays, "SLICE_ROWS", rows)
        assert top_flows(flows, "napi", 40) == whole
    assert top_flows(flows, "napi", 0) == {"total": n, "shown": 0, "flows": []}


def test_spilled_flow_causes_equal_the_list():
    """The runs exchange's flow causes: each run's counts appended in flow order, read
    as text on access, equal FlowCauses.result over all the flows."""
    import tempfile

    from gropcap.gro.reasons import FLUSH_CWR, FLUSH_ZERO_PAYLOAD
    from gropcap.run.accumulators import FlowCauses
    from gropcap.run.spill import CausesSpill, causes_table
    rng = np.random.default_rng(2)
    whole = FlowCauses()
    with tempfile.TemporaryDirectory() as d:
        spill = CausesSpill(os.path.join(d, "causes.arrow"))
        base = 0
        for n in (5, 0, 12):
            run = FlowCauses()
            for _ in range(3):
                fid = rng.integers(0, max(n, 1), 30) if n else np.zeros(0, np.int64)
                seq = rng.integers(0, 5000, len(fid))
                args = (seq, np.full(len(fid), 100), np.full(len(fid), 6),
                        rng.integers(FLUSH_CWR, FLUSH_ZERO_PAYLOAD + 1, len(fid)))
                run.add(fid, *args)
                whole.add(fid + base, *args)
            spill.add(causes_table(run, n))
            base += n
        got = spill.result(base)
        want = whole.result(base)
        assert got == want and list(got) == want and len(got) == 17
        assert got[3] == want[3] and got[-1] == want[-1] and got[2:6] == want[2:6]
        assert any(want) and not os.listdir(d)


def _mapping_rss_kib(address: int) -> int:
    """Resident KiB of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1])
    raise AssertionError("no mapping holds the address")


def test_a_pass_by_slices_leaves_a_mapped_table_off_the_rss(tmp_path):
    """arrays.slices drops a mapped table's resident pages after each slice: a pass
    over a 32 MB table mapped from an unlinked file leaves none of it in the process's
    RSS, where reading it whole leaves all of it."""
    import pyarrow as pa

    from gropcap.arrays import batch_column, map_ipc_file, numpy_of, slices
    n = 1 << 22
    path = str(tmp_path / "t.arrow")
    with pa.ipc.new_file(path, pa.schema([("a", pa.int64())])) as w:
        for lo in range(0, n, 1 << 20):
            w.write_table(pa.table({"a": np.arange(lo, lo + (1 << 20), dtype=np.int64)}))
    t = map_ipc_file(path)
    os.unlink(path)
    address = t.column("a").chunk(0).buffers()[1].address
    assert sum(int(batch_column(b, "a").sum()) for _, b in slices(t, 1 << 18)) == \
        n * (n - 1) // 2
    assert _mapping_rss_kib(address) < 1024
    assert sum(int(numpy_of(c).sum()) for c in t.column("a").chunks) == n * (n - 1) // 2
    assert _mapping_rss_kib(address) > 30 * 1024        # a plain pass: all resident
