"""Capture records -> the Ethernet frames a replay injects, and why records of a link type
give none (``gropcap kernel-replay`` and the guest replays use both).
"""

from __future__ import annotations

import struct

import numpy as np

from gropcap import constants as C

_DSA_LINKTYPES = (C.LINKTYPE_DSA_TAG_BRCM, C.LINKTYPE_DSA_TAG_BRCM_PREPEND,
                  C.LINKTYPE_DSA_TAG_DSA, C.LINKTYPE_DSA_TAG_EDSA)

_FAKE_MACS = bytes.fromhex("aa0000000002aa0000000001")   # dst, src for non-Ethernet captures


def capture_frames(batch) -> tuple[list[bytes], list[int], list[bool], list[int]]:
    """Ethernet frames from a RecordBatch: (frames, wire_lens, csum_not_ready, records).

    Ethernet records are used as they are; raw IP, Linux cooked (SLL, SLL2), BSD loopback
    records get a synthetic Ethernet header; other link types are skipped.
    """
    frames, wires, cnr, recs = [], [], [], []
    for i in range(len(batch)):
        f = batch.frame(i)
        lt = int(batch.linktype[i])
        wl = int(batch.wire_len[i])
        if lt == C.LINKTYPE_ETHERNET:
            eth = f
        else:
            if lt in (C.LINKTYPE_RAW, C.LINKTYPE_RAW_OPENBSD, C.LINKTYPE_RAW_BSDOS,
                      C.LINKTYPE_IPV4, C.LINKTYPE_IPV6):
                ip, hl = f, 0
            elif lt == C.LINKTYPE_LINUX_SLL:
                ip, hl = f[C.SLL_HLEN:], C.SLL_HLEN
            elif lt == C.LINKTYPE_LINUX_SLL2:
                ip, hl = f[C.SLL2_HLEN:], C.SLL2_HLEN
            elif lt in (C.LINKTYPE_NULL, C.LINKTYPE_LOOP):
                ip, hl = f[4:], 4
            else:
                continue
            if not ip:
                continue
            ver = ip[0] >> 4
            if ver not in (4, 6):
                continue
            et = C.ETH_P_IP if ver == 4 else C.ETH_P_IPV6
            eth = _FAKE_MACS + struct.pack("!H", et) + ip
            wl = wl - hl + C.ETH_HLEN
        frames.append(eth)
        wires.append(max(wl, len(eth)))
        cnr.append(bool(int(batch.epb_flags[i]) & C.EPB_FLAG_CSUM_NOT_READY))
        recs.append(i)
    return frames, wires, cnr, recs


def unreplayable_reason(linktypes) -> str:
    """Why records of these link types gave no replayable frame (the ``skipped`` line)."""
    if not len(linktypes):
        return "no records"
    types = sorted({int(t) for t in np.asarray(linktypes)})
    dsa = [t for t in types if t in _DSA_LINKTYPES]
    if dsa:
        return (f"DSA-tagged link type {', '.join(map(str, dsa))}: a veth cannot be a DSA "
                f"conduit (no tag stripping); `gropcap analyze --dsa-tag` models it")
    replayable = {C.LINKTYPE_ETHERNET, C.LINKTYPE_RAW, C.LINKTYPE_RAW_OPENBSD,
                  C.LINKTYPE_RAW_BSDOS, C.LINKTYPE_IPV4, C.LINKTYPE_IPV6,
                  C.LINKTYPE_LINUX_SLL, C.LINKTYPE_LINUX_SLL2, C.LINKTYPE_NULL,
                  C.LINKTYPE_LOOP}
    other = [t for t in types if t not in replayable]
    if other:
        return (f"link type {', '.join(map(str, other))} is not replayable (Ethernet, raw "
                f"IP, Linux cooked or BSD loopback are)")
    return "no IPv4 or IPv6 frames"


def _left_out(linktypes, recs):
    """The link types of the records ``capture_frames`` did not turn into frames."""
    keep = np.ones(len(linktypes), bool)
    keep[np.asarray(recs, dtype=np.int64)] = False
    return np.asarray(linktypes)[keep]
