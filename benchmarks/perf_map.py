"""Name the numba kernels in a ``perf`` profile: run a Python command with a fresh numba
cache directory, and at its exit write ``/tmp/perf-PID.map`` (perf's map of JIT code)
with the address range of every function numba compiled for gropcap's modules.

``perf report`` then shows ``gro4fast3dev8_receive`` instead of ``[JIT] tid 1234``:
per kernel, and per function a kernel calls without inlining it. cProfile cannot see
inside a kernel, and charges numpy calls their own overhead; ``perf`` alone sees the
kernels as anonymous memory.

    perf record -F 2000 -o perf.data python benchmarks/perf_map.py -m gropcap analyze CAP
    perf report -i perf.data --sort sym

The kernels compile in the run (a fresh cache directory), so the first seconds are
compilation; keep the measured part long. :func:`functions` names kernels loaded from a
cache too (``callgrind_kernels.py`` uses it that way). A range runs from one
function's entry to the next one's (at most 256 KiB): a function that numba inlined is
charged to its caller.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import tempfile


def functions() -> list[tuple[int, str]]:
    """``(address, name)`` of every function compiled in this process for the numba
    dispatchers of gropcap's modules (names shortened to the Python path)."""
    from numba.core.registry import CPUDispatcher
    seen: dict[int, str] = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("gropcap") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if not isinstance(obj, CPUDispatcher):
                continue
            for cres in obj.overloads.values():
                lib = cres.library
                # compiled here: the final module; loaded from the cache (an empty final
                # module): the module numba keeps for linking, which defines them too
                names = []
                for attr in ("_final_module", "_shared_module"):
                    try:
                        names = [f.name for f in getattr(lib, attr).functions
                                 if not f.is_declaration]
                    except Exception:
                        continue
                    if names:
                        break
                for fn in names:
                    try:
                        addr = lib._codegen._engine.get_function_address(fn)
                    except Exception:
                        continue
                    if addr:
                        seen[addr] = _python_name(fn)
    return sorted(seen.items())


def _python_name(symbol: str) -> str:
    """``_ZN7gropcap3gro4fast3dev8_receiveB3v32...`` -> ``gropcap.gro.fast.dev._receive``
    (numba's mangling: length-prefixed parts; a wrapper's prefix kept)."""
    head, _, rest = symbol.partition("_ZN")
    parts = []
    while rest[:1].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        n = int(rest[:digits])
        parts.append(rest[digits:digits + n])
        rest = rest[digits + n:]
    return head + ".".join(parts) if parts else symbol[:80]


def write_map(path: str | None = None) -> int:
    """Write perf's map for this process; returns the functions named."""
    items = functions()
    if not items:
        return 0
    path = path or f"/tmp/perf-{os.getpid()}.map"
    ends = [a for a, _ in items[1:]] + [items[-1][0] + (1 << 16)]
    with open(path, "w") as f:
        for (addr, name), end in zip(items, ends):
            f.write(f"{addr:x} {min(end - addr, 1 << 18):x} {name}\n")
    return len(items)


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="gropcap-perfmap-")
    atexit.register(lambda: print(f"[perf_map] {write_map()} functions named in "
                                  f"/tmp/perf-{os.getpid()}.map", file=sys.stderr))
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
