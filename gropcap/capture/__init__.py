"""Capture layer: pcap / pcapng bytes (plain or compressed) -> :class:`RecordBatch`.

Hands on a :class:`~gropcap.capture.records.RecordBatch` (frames in file order, int64 ns
timestamps, link type and interface per record) plus a
:class:`~gropcap.capture.records.CaptureInfo` describing the file. Modules, bottom up:
``compress`` (bytes: mmap or stream decompression, format sniffing), ``pcap`` / ``pcapng``
(record scanners), ``reader`` (the public functions below), ``writer`` (the reverse).
"""

from gropcap.capture.reader import expand_inputs, iter_batches, read_capture, sniff_format
from gropcap.capture.records import CaptureInfo, RecordBatch
from gropcap.capture.writer import write_pcap, write_pcapng

__all__ = ["CaptureInfo", "RecordBatch", "expand_inputs", "iter_batches", "read_capture",
           "sniff_format", "write_pcap", "write_pcapng"]
