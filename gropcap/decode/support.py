"""Inputs the decoders cannot read at all: a capture whose link type gropcap does not decode.

A frame of an unsupported link type gets status ``UNSUPPORTED_LINKTYPE`` and passes GRO
alone, which is right for one interface of a multi-interface pcapng, but a file made only
of such frames would give a report of ratio 1.00 that looks like a finding.
:class:`LinktypeCheck` counts a file's records by link type as they are read;
:meth:`LinktypeCheck.finish` raises :class:`DecodeError` (one line: file, link type, what
to do) when no record of the file has a decoded link type, and adds a warning to the
file's ``CaptureInfo.warnings`` when only some have (they keep their status code).

Layer: decode/, over RecordBatch link types (capture/); used by run/inputs.py.
"""

from __future__ import annotations

import numpy as np

from gropcap.constants import SUPPORTED_LINKTYPES
from gropcap.errors import DecodeError

# names of the link types seen instead of the supported ones most often
# (https://www.tcpdump.org/linktypes.html)
_NAMES = {105: "IEEE 802.11", 127: "802.11 radiotap", 192: "PPI", 9: "PPP",
          50: "PPP over HDLC", 104: "Cisco HDLC", 138: "Apple IP over IEEE 1394",
          143: "DOCSIS", 195: "IEEE 802.15.4", 220: "USB Linux mmapped",
          249: "Linux netlink", 253: "Linux netlink", 147: "user DLT 0"}
_SUPPORTED_TEXT = ("Ethernet, raw IPv4/IPv6, NULL/LOOP, Linux SLL/SLL2 and DSA tags "
                   "(281, 282, 284, 285)")


def linktype_name(lt: int) -> str:
    """``"link type 105 (IEEE 802.11)"``."""
    name = _NAMES.get(int(lt))
    return f"link type {int(lt)}" + (f" ({name})" if name else "")


class LinktypeCheck:
    """Records of one file counted by whether their link type is decoded."""

    def __init__(self):
        self.records = 0
        self.unsupported: dict[int, int] = {}
        self._supported = np.array(SUPPORTED_LINKTYPES, np.int64)

    def add(self, batch) -> None:
        """Count one RecordBatch."""
        n = len(batch)
        if not n:
            return
        self.records += n
        lt = np.asarray(batch.linktype)
        first = int(lt[0])
        if first in SUPPORTED_LINKTYPES and (lt == first).all():
            return                     # one supported link type (the usual case)
        lt = lt.astype(np.int64)
        bad = ~np.isin(lt, self._supported)
        if bad.any():
            u, c = np.unique(lt[bad], return_counts=True)
            for k, v in zip(u.tolist(), c.tolist()):
                self.unsupported[k] = self.unsupported.get(k, 0) + v

    def finish(self, info) -> None:
        """Raise when no record of the file can be decoded because of its link type, or
        note the records that cannot in ``info.warnings``.

        A file with no records is judged by the link types its header declares."""
        declared = [int(lt) for lt in (info.linktypes or [])]
        names = ", ".join(linktype_name(lt) for lt in sorted(self.unsupported)
                          or sorted(set(declared)))
        none_decoded = (self.records and sum(self.unsupported.values()) == self.records) or \
            (not self.records and declared and
             not any(lt in SUPPORTED_LINKTYPES for lt in declared))
        if none_decoded:
            raise DecodeError(
                f"{names} is not supported: none of its {self.records} frames can be "
                f"decoded", path=info.path,
                hint=f"gropcap reads {_SUPPORTED_TEXT}; capture on the receiving host's "
                     f"interface (tcpdump -i IFACE, or -i any for Linux SLL2)")
        if self.unsupported:
            n = sum(self.unsupported.values())
            info.warnings.append(
                f"{n} of {self.records} frames have {names}, which gropcap does not "
                f"decode: they pass GRO alone with status UNSUPPORTED_LINKTYPE")


__all__ = ["LinktypeCheck", "linktype_name"]
