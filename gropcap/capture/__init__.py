"""Capture layer: pcap / pcapng bytes (plain or compressed) -> :class:`RecordBatch`.

Hands on a :class:`~gropcap.capture.records.RecordBatch` (frames in file order, int64 ns
timestamps, link type and interface per record) plus a
:class:`~gropcap.capture.records.CaptureInfo` describing the file.
"""

from gropcap.capture.records import CaptureInfo, RecordBatch
from gropcap.capture.writer import write_pcap, write_pcapng

__all__ = ["CaptureInfo", "RecordBatch", "write_pcap", "write_pcapng"]
