"""A first run on a cold numba cache (issue 14): a small capture runs on the reference
decoder and engine instead of compiling the kernels first.

On a fresh install every kernel compiles (about a minute of CPU); the plain-Python
decoder and engine give the same verdicts bit for bit with nothing to compile, so for an
input of at most ``gro.engine.COLD_REFERENCE_MAX_BYTES`` on a cold cache
(``gro.engine.cold_start_reference``) they finish first. The few numba kernels that path
still calls (the counts, the RSS hash, the address texts) run as their Python functions
there (:func:`reference_path`): compiling them was 8.6 s of the sample's 10 s first run.

Both entry points decide here, and only when the caller named neither an engine nor a
decoder: the command line (``cli.app``, with a note on stderr) and the notebook API
(``api.analyze``; ``Analysis.engine`` says ``"reference"``).

Layer: run/; reads gro/ (the cache check) and the numba cache helpers.
"""

from __future__ import annotations

# the modules whose numba kernels a run on the reference decoder and engine still calls;
# a kernel the cold path calls and this list lacks would compile on a first run:
# tests/cli/test_cold_cache.py's test_the_cold_path_calls_no_other_kernel fails then
REFERENCE_PATH_KERNELS = ("gropcap.gro._batch_kernels", "gropcap.gro.rss",
                          "gropcap.io._text_kernels")


def takes_reference_path(paths) -> bool:
    """Whether a run over ``paths`` (files or directories) takes the reference decoder and
    engine: the kernels are not compiled yet and the input is small."""
    from gropcap.gro.engine import cold_start_reference
    from gropcap.run.inputs import capture_bytes
    return cold_start_reference(capture_bytes(paths))


def reference_path():
    """A context manager for the run on that path: :data:`REFERENCE_PATH_KERNELS`' kernels
    run as Python (``numba_cache.as_python``), so nothing compiles."""
    from gropcap.numba_cache import as_python
    return as_python(REFERENCE_PATH_KERNELS)


def note() -> str:
    """What the command line says on stderr when it takes that path."""
    from gropcap.gro.engine import COLD_REFERENCE_MAX_BYTES
    from gropcap.run.progress import COLD_REFERENCE_NOTE
    return COLD_REFERENCE_NOTE.format(mib=COLD_REFERENCE_MAX_BYTES >> 20)


def fill(analysis) -> None:
    """Compute what an :class:`~gropcap.analysis.Analysis` keeps once computed (its
    accumulators, flows, packet and super-packet tables, the flows' probable causes),
    inside :func:`reference_path`: on a small capture the Python kernels take
    milliseconds, where the notebook's first ``summary()``, ``packets`` or json summary
    (``report_dict``) would otherwise compile them."""
    for name in ("totals", "flows", "packets", "superpackets", "flow_causes"):
        getattr(analysis, name)
