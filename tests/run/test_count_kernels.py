"""gro._batch_kernels: the accumulators' one-pass kernels equal the numpy definitions they
replaced (kept here as the oracle), on decoded samples whose columns are shuffled and
perturbed at random, batch after batch."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap.decode.schema import CSUM_PARTIAL, STATUS_TRUNCATED
from gropcap.gro.reasons import FLUSH_CWR, FLUSH_ZERO_PAYLOAD
from gropcap.run.accumulators import CaptureCounts, FlowCauses
from gropcap.run.memory import decode_files
from gropcap.run.receivers import NO_TS
from gropcap.run.stream import _FirstRows
from where import TESTS

SAMPLES = os.path.join(TESTS, os.pardir, "sample_pcaps")


@pytest.fixture(scope="module")
def decoded():
    return decode_files([os.path.join(SAMPLES, "real_ipv4.pcap"),
                         os.path.join(SAMPLES, "real_vxlan.pcap")])[0]


def _perturbed(t: pa.Table, rng) -> pa.Table:
    """``t``'s rows shuffled, with the columns CaptureCounts reads redrawn in part: file
    indices over 3 files, timestamps that go backwards, TSO-flagged rows, IPv4 length 0,
    IPv6 jumbogram lengths past 65 535, truncated and offload-partial rows, headers cut."""
    t = t.take(pa.array(rng.permutation(t.num_rows)))
    n = t.num_rows
    cols = {name: t.column(name).to_numpy().copy() for name in (
        "file_index", "ts_ns", "epb_flags", "ip_tot_len", "outer_ip_tot_len", "status",
        "l4_csum_state", "cap_len", "payload_len")}
    pick = lambda p: rng.random(n) < p  # noqa: E731
    cols["file_index"] = rng.integers(0, 3, n).astype(np.uint16)
    cols["ts_ns"] = cols["ts_ns"] + rng.integers(-10**9, 10**9, n)
    cols["epb_flags"][pick(0.1)] |= C.EPB_FLAG_TCP_SEG_OFFLOAD
    cols["ip_tot_len"][pick(0.05)] = 0
    big = pick(0.03)
    cols["ip_tot_len"][big] = rng.integers(65536, 1 << 20, int(big.sum()))
    cols["outer_ip_tot_len"][pick(0.05)] = rng.integers(0, 70000)
    cols["status"][pick(0.05)] = STATUS_TRUNCATED
    cols["l4_csum_state"][pick(0.1)] = CSUM_PARTIAL
    cols["cap_len"][pick(0.1)] = 20
    cols["payload_len"][pick(0.2)] = 0
    for name, a in cols.items():
        t = t.set_column(t.schema.get_field_index(name), name,
                         pa.array(a, t.schema.field(name).type))
    return t


def _capture_oracle(batches) -> dict:
    """The numpy definition of CaptureCounts.add's numeric counts over ``batches``."""
    col = lambda t, name: t.column(name).to_numpy()  # noqa: E731
    t = pa.concat_tables(batches)
    fidx = col(t, "file_index").astype(np.int64)
    wire = col(t, "wire_len").astype(np.int64)
    ts = col(t, "ts_ns")
    has = col(t, "payload_len") > 0
    outer = col(t, "outer_ip_version") != 0
    ver = np.where(outer, col(t, "outer_ip_version"), col(t, "ip_version"))
    tot = np.where(outer, col(t, "outer_ip_tot_len"), col(t, "ip_tot_len")).astype(np.int64)
    pre = ((ver == 4) & (tot == 0)) | ((col(t, "epb_flags") & C.EPB_FLAG_TCP_SEG_OFFLOAD) != 0)
    rest = (ver != 0) & ~pre
    files = int(fidx.max()) + 1
    tot_hist = {int(k): [int(np.count_nonzero(rest & (tot == k))),
                         int(wire[rest & (tot == k)].max())] for k in np.unique(tot[rest])}
    return {
        "packets": t.num_rows, "data_packets": int(has.sum()),
        "file_packets": np.bincount(fidx, minlength=files).tolist(),
        "file_bytes": np.bincount(fidx, wire, minlength=files).astype(np.int64).tolist(),
        "file_data": np.bincount(fidx[has], minlength=files).tolist(),
        "file_first_ts": [int(ts[fidx == f][0]) if (fidx == f).any() else NO_TS
                          for f in range(files)],
        "file_max_ts": [int(ts[fidx == f].max()) if (fidx == f).any() else NO_TS
                        for f in range(files)],
        "wire_bytes": int(wire.sum()),
        "status": np.bincount(col(t, "status"), minlength=256).tolist(),
        "pre": int(pre.sum()), "pre_largest": int(wire[pre].max()) if pre.any() else 0,
        "tot_hist": tot_hist,
        "partial": int(np.count_nonzero(col(t, "l4_csum_state") == CSUM_PARTIAL)),
        "cut": int(np.count_nonzero(col(t, "status") == STATUS_TRUNCATED)),
        "short": int(np.count_nonzero((col(t, "cap_len") < col(t, "wire_len"))
                                      & (col(t, "l4_proto") != 0))),
    }


@pytest.mark.parametrize("seed", range(6))
def test_capture_counts_equal_the_numpy_definition(decoded, seed):
    rng = np.random.default_rng(seed)
    t = _perturbed(decoded, rng)
    cuts = np.sort(rng.choice(np.arange(1, t.num_rows), 4, replace=False))
    batches = [t.slice(lo, hi - lo) for lo, hi in zip([0, *cuts], [*cuts, t.num_rows])]
    got = CaptureCounts()
    for b in batches:
        got.add(b)
    want = _capture_oracle(batches)
    state = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
             for k, v in vars(got).items() if k in want}
    state["tot_hist"] = {k: list(v) for k, v in sorted(got.tot_hist.items())}
    assert state == want
    assert any(k >= 1 << 16 for k in want["tot_hist"])    # the jumbogram path ran


def _causes_oracle(batches) -> tuple[list, list, list]:
    """FlowCauses' numpy definition: rows grouped by flow (stable sort), each row's
    previous end from the row before it in its flow, or from the earlier batches."""
    next_seq = {}
    total, ahead, back = {}, {}, {}
    for fid, seq, pl, proto, reason in batches:
        for i in range(len(fid)):
            f = int(fid[i])
            prev = next_seq.get(f, -1)
            if (proto[i] == C.IPPROTO_TCP and prev >= 0
                    and FLUSH_CWR <= reason[i] <= FLUSH_ZERO_PAYLOAD):
                d = (int(seq[i]) - prev + 2**31) % 2**32 - 2**31
                total[f] = total.get(f, 0) + 1
                ahead[f] = ahead.get(f, 0) + (d > 0)
                back[f] = back.get(f, 0) + (d < 0)
            next_seq[f] = (int(seq[i]) + int(pl[i])) & 0xFFFFFFFF
    n = max(next_seq) + 1
    return ([total.get(f, 0) for f in range(n)], [ahead.get(f, 0) for f in range(n)],
            [back.get(f, 0) for f in range(n)])


@pytest.mark.parametrize("largest", [False, True])
def test_length_bins_keep_counts_across_batches_and_pickles(largest):
    """gro._batch_kernels.LengthBins: bins a kernel adds into batch after batch, lengths
    past the bins, merged and pickled (as its lengths only) to the same counts as a
    dictionary filled one frame at a time."""
    import pickle

    from gropcap.gro._batch_kernels import TOT_BINS, LengthBins
    rng = np.random.default_rng(5)
    want: dict = {}
    parts = [LengthBins(largest), LengthBins(largest)]
    for p in parts:
        for _ in range(3):                              # three batches
            cnt, big = p.bins()
            for k, w in zip(rng.integers(0, 3000, 50).tolist(),
                            rng.integers(60, 9000, 50).tolist()):
                cnt[k] += 1
                if largest:
                    big[k] = max(big[k], w)
                e = want.setdefault(k, [0, 0])
                want[k] = [e[0] + 1, max(e[1], w if largest else 0)]
            k = TOT_BINS + int(rng.integers(0, 5))       # an IPv6 jumbogram
            p.add(k, 2, 70000 if largest else 0)
            e = want.setdefault(k, [0, 0])
            want[k] = [e[0] + 2, max(e[1], 70000 if largest else 0)]
    back = pickle.loads(pickle.dumps(parts[1]))
    assert back.cnt is None and back == parts[1]
    # a batch after the unpickling: its bins and the lengths the pickle held, both
    k = next(iter(back.items()))[0]
    back.bins()[0][k] += 1
    if largest:
        back.bins()[1][k] = 1
    want[k][0] += 1
    parts[0].merge(back)
    assert parts[0].items() == sorted(want.items())
    assert parts[0].frames() == {k: e[0] for k, e in sorted(want.items())}
    back.merge(LengthBins(largest))
    assert back != parts[0]


@pytest.mark.parametrize("seed", range(6))
def test_flow_causes_equal_the_row_by_row_definition(seed):
    rng = np.random.default_rng(seed)
    batches = []
    top = 5
    for _ in range(4):
        n = int(rng.integers(1, 400))
        top += int(rng.integers(0, 20))        # later batches bring new flows
        batches.append((rng.integers(0, top, n), rng.integers(0, 2**32, n, np.uint32)
                        if seed % 2 else (rng.integers(0, 50, n) * 1000).astype(np.uint32),
                        rng.integers(0, 3000, n).astype(np.uint32),
                        rng.choice([C.IPPROTO_TCP, C.IPPROTO_UDP, 0], n).astype(np.uint8),
                        rng.integers(0, FLUSH_ZERO_PAYLOAD + 3, n)))
    acc = FlowCauses()
    for b in batches:
        acc.add(*b)
    total, ahead, back = _causes_oracle(batches)
    n = len(total)
    assert acc.total[:n].tolist() == total and acc.ahead[:n].tolist() == ahead
    assert acc.back[:n].tolist() == back
    assert sum(total) and sum(ahead) and sum(back)


def test_first_rows_mark_each_instance_once_over_batches():
    rng = np.random.default_rng(1)
    first = _FirstRows()
    seen: set[int] = set()
    for _ in range(5):
        inst = rng.integers(0, 300, int(rng.integers(1, 200)))
        got = first(inst)
        want = []
        for k in inst.tolist():
            want.append(k not in seen)
            seen.add(k)
        assert got.tolist() == want


@pytest.mark.parametrize("seed", range(3))
def test_reason_and_flow_sums_equal_bincount(decoded, seed):
    """ModelCounts.add_reasons (``code_hist``) and FlowCounts.add (``flow_sums``) over
    batches of random lengths (odd ones: the four-way loop's tail) equal ``np.bincount``
    of all the rows; the payload sums bit for bit (added in row order, as bincount
    does)."""
    from gropcap.run.accumulators import FlowCounts, ModelCounts
    rng = np.random.default_rng(seed)
    mc, fc = ModelCounts("napi"), FlowCounts()
    reasons, fids, pays = [], [], []
    for size in rng.integers(0, 300, 6):
        t = decoded.take(pa.array(rng.integers(0, decoded.num_rows, size)))
        r = rng.choice(np.array([0, 3, 7, 255], np.uint8), size, p=[0.7, 0.2, 0.05, 0.05])
        # flow ids as the engine numbers them: new ones above the ones seen
        f = rng.integers(0, 4 + 3 * len(fids), size).astype(np.int64)
        mc.add_reasons(r)
        fc.add(t, f)
        reasons.append(r)
        fids.append(f)
        pays.append(t.column("payload_len").to_numpy().astype(np.float64))
    r, f, p = (np.concatenate(x) for x in (reasons, fids, pays))
    assert mc.reason_hist.tolist() == np.bincount(r, minlength=256).tolist()
    want_packets = np.bincount(f)
    n = len(want_packets)
    assert fc.packets[:n].tolist() == want_packets.tolist() and not fc.packets[n:].any()
    assert fc.payload[:n].tolist() == np.bincount(f, weights=p).tolist()
    with pytest.raises(ValueError, match="negative flow id"):
        fc.add(decoded.slice(0, 2), np.array([0, -1]))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("ipos_dtype", [np.int32, np.int64])
def test_verdict_codes_equal_the_numpy_definition(seed, ipos_dtype):
    # packets.parquet's gro_seg / gro_role / reason of each row from its instance's
    # position (-(pos + 1): a super-packet of one packet) and whether it is the
    # instance's first row, as the packets pass computed them with numpy
    from gropcap.gro.reasons import ROLE_ALONE, ROLE_HEAD, ROLE_MERGED
    from gropcap.run.stream import _verdict_columns
    rng = np.random.default_rng(seed)
    n, ninst = 5000, 700
    pos = rng.permutation(ninst).astype(np.int64)
    ipos = np.where(rng.random(ninst) < 0.3, -pos - 1, pos).astype(ipos_dtype)
    inst = rng.integers(0, ninst, n)
    first = rng.random(n) < 0.2
    reason = rng.integers(0, 90, n)
    c = _verdict_columns(rng.integers(-1, 50, n), rng.integers(0, 4, n), reason,
                         rng.integers(-1, 9, n), inst, ipos, first)
    code = ipos[inst].astype(np.int64)
    alone = code < 0
    assert c["gro_seg"].dtype == np.int64 and c["gro_role"].dtype == np.uint8
    assert np.array_equal(c["gro_seg"], np.where(alone, -code - 1, code))
    assert np.array_equal(c["gro_role"], np.where(alone, ROLE_ALONE,
                                                  np.where(first, ROLE_HEAD, ROLE_MERGED)))
    assert np.array_equal(c["reason"], reason.astype(np.uint8)) and \
        c["reason"].dtype == np.uint8
    assert {ROLE_ALONE, ROLE_HEAD, ROLE_MERGED} == set(c["gro_role"].tolist())
