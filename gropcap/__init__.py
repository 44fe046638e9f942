"""gropcap: replay the Linux kernel's Generic Receive Offload over packet captures.

Layers (each hands one named type to the next):
capture/ (bytes -> RecordBatch) -> decode/ (RecordBatch -> packet columns, Arrow)
-> gro/ (packet columns -> GRO verdicts and super-packets) -> report/, io/ -> cli.py.
"""

__version__ = "0.1.0"
