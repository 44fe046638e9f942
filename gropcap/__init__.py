"""gropcap: replay the Linux kernel's Generic Receive Offload over packet captures.

Layers (each hands one named type to the next):
capture/ (bytes -> RecordBatch) -> decode/ (RecordBatch -> packet columns, Arrow)
-> gro/ (packet columns -> GRO verdicts and super-packets) -> report/, io/ -> cli.py.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "decode_files", "Analysis", "GroConfig", "KernelProfile",
           "DecodeOptions", "load"]


def __getattr__(name):
    """Lazy public API, so `import gropcap` stays cheap (no numba import)."""
    if name in ("analyze", "decode_files", "Analysis"):
        from gropcap import pipeline
        return getattr(pipeline, name)
    if name in ("GroConfig", "KernelProfile"):
        from gropcap.gro import config
        return getattr(config, name)
    if name == "load":
        from gropcap.io.load import load
        return load
    if name == "DecodeOptions":
        from gropcap.decode.options import DecodeOptions
        return DecodeOptions
    raise AttributeError(f"module 'gropcap' has no attribute {name!r}")
