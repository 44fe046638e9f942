"""gropcap: replay the Linux kernel's Generic Receive Offload over packet captures.

Layers (each hands one named type to the next):
capture/ (bytes -> RecordBatch) -> decode/ (RecordBatch -> packet columns, Arrow)
-> gro/ (packet columns -> GRO verdicts and super-packets) -> run/ (the core: an
Analysis or a streamed result) -> report/, io/ -> cli/ (docs/architecture.md).

The public API (``dir(gropcap)``), imported on first use so ``import gropcap`` stays cheap::

    a = gropcap.analyze("sample_pcaps/real_ipv4.pcap", kernel="6.1")   # Analysis
    gropcap.write_analysis(a, "out/")       # Parquet, as `gropcap analyze --out`
    gropcap.load("out/")                    # ... and back
    print(gropcap.explain_flow(a, 0))       # as `gropcap explain`
    gropcap.plot_segments(a)                # the report plots

See docs/example.ipynb.
"""

__version__ = "0.1.0"

# name -> (module, attribute): the public API, imported lazily (no numba on `import gropcap`)
_API = {
    "analyze": ("gropcap.api", "analyze"),
    "analyze_keywords": ("gropcap.api", "keywords"),
    "decode_files": ("gropcap.run.memory", "decode_files"),
    "Analysis": ("gropcap.analysis", "Analysis"),
    "EgressOptions": ("gropcap.run.options", "EgressOptions"),
    "GroConfig": ("gropcap.gro.config", "GroConfig"),
    "KernelProfile": ("gropcap.gro.config", "KernelProfile"),
    "DecodeOptions": ("gropcap.decode.options", "DecodeOptions"),
    "load": ("gropcap.io.load", "load"),
    "write_analysis": ("gropcap.io.parquet", "write_analysis"),
    "explain_flow": ("gropcap.report.explain", "explain_flow"),
    "explain_dict": ("gropcap.report.explain", "explain_dict"),
    "plot_segments": ("gropcap.report.plots", "plot_segments"),
    "plot_ratio_over_time": ("gropcap.report.plots", "plot_ratio_over_time"),
    "plot_reasons_per_flow": ("gropcap.report.plots", "plot_reasons_per_flow"),
    "REASONS": ("gropcap.gro.reasons", "REASONS"),
    "GropcapError": ("gropcap.errors", "GropcapError"),
    "ConfigError": ("gropcap.errors", "ConfigError"),
}

__all__ = ["__version__", *_API]


def __getattr__(name):
    """Lazy public API, so `import gropcap` stays cheap (no numba import)."""
    if name in _API:
        import importlib

        module, attr = _API[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'gropcap' has no attribute {name!r}")


def __dir__():
    """The public API (lazy names included) and the module's own attributes."""
    return sorted(set(globals()) | set(__all__))
