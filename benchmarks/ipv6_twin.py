"""An IPv6 twin of an Ethernet / IPv4 / TCP capture, for measuring IPv6 runs on the same
traffic: every IPv4 header (without options) carrying TCP is replaced by an IPv6 one
with the same addresses in fd00::/96, the TTL as hop limit and the TOS as traffic
class; frames 20 bytes longer on the wire and as captured; other frames as they are.

    python benchmarks/ipv6_twin.py /work/rec/real3m.pcap /work/rec/real3m_v6.pcap

Session 39 measured the single pass's IPv6 path with it (docs/performance.md). The TCP
checksums are left as they were (wrong for IPv6): GRO does not verify them by default,
and a capture cut at 128 bytes holds no whole data segment to verify.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def twin(frame: bytes) -> bytes:
    """The IPv6 twin of one Ethernet frame (the frame itself when it is not IPv4 / TCP
    without IP options)."""
    if frame[12:14] != b"\x08\x00" or len(frame) < 34 or frame[14] != 0x45 \
            or frame[23] != 6:
        return frame
    tot = struct.unpack("!H", frame[16:18])[0]
    h6 = struct.pack("!IHBB", (6 << 28) | (frame[15] << 20), tot - 20, 6, frame[22]) + \
        b"\xfd" + bytes(11) + frame[26:30] + b"\xfd" + bytes(11) + frame[30:34]
    return frame[:12] + b"\x86\xdd" + h6 + frame[34:]


def main(argv=None) -> None:
    from gropcap.capture.scan import iter_scan_batches
    from gropcap.capture.writer import write_pcap
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("out")
    args = ap.parse_args(argv)
    frames, ts, wire = [], [], []
    for _, b in iter_scan_batches(args.capture, digest=False):
        for i in range(len(b)):
            o = int(b.offset[i])
            f = bytes(b.buf[o:o + int(b.cap_len[i])])
            t = twin(f)
            frames.append(t)
            ts.append(int(b.ts_ns[i]))
            wire.append(int(b.wire_len[i]) + len(t) - len(f))
    write_pcap(args.out, frames, ts, wire_lens=wire, nanosecond=True)
    print(f"{len(frames)} frames -> {args.out}")


if __name__ == "__main__":
    main()
