"""Poll ends from the receiver's ACKs against the kernel (docs/gro-model.md, "Poll ends
from the receiver's ACKs").

    python scripts/ack_polls_table.py [DIR ...]   # default: sample_pcaps/pairs/acks1..3

For pairs recorded with ``make_pairs.py --acks`` (``<name>.both.pcap``: the wire view with
the receiver's ACKs). First table, per pair: the kernel's count, the ideal model, the napi
model timing only (50 us default, on the wire view), polling as the kernel did
(``kernel_polls``), and with ``poll_acks`` at 50 and 75 us (on ``both``, the wire view's
directions counted). Then the poll-gap sweep, timing only and with the ACKs: the largest
difference from the kernel over all pairs at each gap. Then how close each ACK view's
timestamps are to the kernel's poll end (``napi:napi_poll`` tracepoint time).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from gropcap.receive import ackpolls
from gropcap.run.memory import decode_files
from gropcap.replay.pairs import count_pair, find_pairs, format_table

GAPS_US = (20, 30, 50, 75, 100, 150, 300)


def _ack_delays(pair) -> dict:
    """T(ACK) - T(tracepoint of the poll) in us, per ACK view: for each poll's last frame
    (``kernel_polls.work_sequence`` places the frames), the first ACK of exactly its end."""
    seq, when = (pair.meta["kernel_polls"].get(k) for k in ("work_sequence", "time_ns"))
    if not when:
        return {}
    wire, _ = decode_files(pair.wire)
    poll = np.repeat(np.arange(len(seq)), seq)[sum(seq) - wire.num_rows:]
    col = lambda t, c: t.column(c).to_numpy(zero_copy_only=False).astype(np.int64)  # noqa
    end = (col(wire, "tcp_seq") + col(wire, "payload_len")) & 0xFFFFFFFF
    dport = col(wire, "dport")
    out = {}
    views = {"receiver veth -Q out (acks.pcap)": pair.file("acks"),
             "wire veth -Q in (both.pcap)": pair.both}
    for label, path in views.items():
        acks, _ = decode_files(path)
        first: dict = {}
        for t, a, sp in zip(col(acks, "ts_ns"), col(acks, "tcp_ack"), col(acks, "sport")):
            first.setdefault((int(sp), int(a)), int(t))
        delays = []
        for i in range(len(poll)):
            if (i + 1 == len(poll) or poll[i + 1] != poll[i]) and col(wire, "payload_len")[i]:
                t = first.get((int(dport[i]), int(end[i])))
                if t is not None:
                    delays.append((t - when[poll[i]]) / 1000)
        out[label] = delays
    return out


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent / "sample_pcaps" / "pairs"
    dirs = [Path(a) for a in argv] or [root / "acks1", root / "acks2", root / "acks3"]
    rows, sweep, delays = [], {}, {}
    for d in dirs:
        for p in find_pairs(d):
            r = count_pair(p, {"ideal": p.config(model="ideal"),
                               "napi 50us": p.config(model="napi")})
            r.models["kernel's polls"] = count_pair(
                p, {"k": p.config(model="napi", poll_gap_ns=0)},
                kernel_polls=True).models["k"]
            for g in (50, 75):
                r.models[f"acks {g}us"] = count_pair(
                    p, {"a": p.config(model="napi", poll_acks=True, poll_gap_ns=g * 1000)},
                    both=True).models["a"]
            rows.append(dataclasses.replace(r, name=f"{d.name}/{p.name}"))
            for g in GAPS_US:
                for acks in (False, True):
                    c = count_pair(p, {"x": p.config(model="napi", poll_acks=acks,
                                                     poll_gap_ns=g * 1000)}, both=acks)
                    e = abs(c.error("x"))
                    sweep[(acks, g)] = max(sweep.get((acks, g), 0.0), e)
            for label, v in _ack_delays(p).items():
                delays.setdefault(label, []).extend(v)
    print(format_table(rows))
    print("\nlargest |napi - kernel| over the pairs, by poll gap (us):")
    print(f"{'':22}" + "".join(f"{g:>8}" for g in GAPS_US))
    for acks in (False, True):
        label = "with the ACKs" if acks else "timing only (wire)"
        print(f"{label:22}" + "".join(f"{sweep[(acks, g)]:>8.1%}" for g in GAPS_US))
    print("\nACK time - poll tracepoint time (us), ACKs closing a poll's last frame:")
    for label, v in delays.items():
        v = np.array(v)
        print(f"  {label:36} n={len(v):4}  p10 {np.percentile(v, 10):+6.1f}  "
              f"median {np.median(v):+6.1f}  p90 {np.percentile(v, 90):+6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
