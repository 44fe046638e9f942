"""numba's on-disk cache kept fresh for kernels that read other source files.

numba keys a function's cached machine code on the file that defines it (a hash of its
content: ``numba.core.caching``, ``get_source_stamp``) and on the function's own
bytecode, nothing else. A cached caller is not invalidated when a callee defined in
another file changes (its machine code, callee inlined or linked in, is loaded as it
was), nor when a module-level constant it read from another module changes: numba's
"Notes on Caching" lists both as limitations ("Cache invalidation fails to recognize
changes in symbols defined in a different file"; "Global variables are treated as
constants"), and the pull requests that would track dependencies (numba#8396, #9563)
were not merged (numba 0.58-0.68).

So a set of kernels spread over several modules, or baking in constants from others,
keeps a stamp of all those files next to its cache (:func:`refresh`): when it differs
from the files' current content, every dispatcher of the set has its cache index emptied
(numba then compiles and saves them again), and the new stamp is written.

Layer 0: imports nothing from the package; ``decode/_fast_kernels.py`` and
``gro/fast/`` call it when they are imported, before any kernel loads from the cache.
"""

from __future__ import annotations

import hashlib
import os


def stamp(paths, extra: str = "") -> str:
    """A hash of the contents of ``paths`` (in the order given) and ``extra``."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as fh:
            h.update(fh.read())
    h.update(extra.encode())
    return h.hexdigest()


def dispatchers_of(*modules) -> list:
    """The numba dispatchers defined in ``modules`` (imported ones not counted twice)."""
    found = []
    for mod in modules:
        for obj in vars(mod).values():
            home = getattr(getattr(obj, "py_func", None), "__module__", None)
            if hasattr(obj, "_cache") and home == mod.__name__:
                found.append(obj)
    return found


def refresh(dispatchers, name: str, current: str) -> bool:
    """Empty the cache index of every dispatcher unless the stamp file ``name`` (in the
    first dispatcher's cache directory) holds ``current``; then write ``current`` there.
    Returns True when the caches were emptied. Without a usable cache (no cache
    directory, caching off) nothing is stale and nothing happens."""
    try:
        path = os.path.join(dispatchers[0]._cache.cache_path, name)
    except (AttributeError, IndexError, TypeError):   # NullCache: caching unavailable
        return False
    try:
        with open(path) as fh:
            if fh.read() == current:
                return False
    except OSError:
        pass
    for d in dispatchers:
        try:
            d._cache.flush()
        except (AttributeError, OSError):
            pass
    try:
        with open(path, "w") as fh:
            fh.write(current)
    except OSError:
        pass
    return True


def light_loads(dispatchers) -> int:
    """Let each of ``dispatchers`` load its cached machine code without numba's registry
    refresh. Returns how many were set up.

    numba's ``Cache.load_overload`` calls ``target_context.refresh()`` before it reads
    a cached kernel: on the first load of a process that imports about 40 of numba's
    modules (``numba.np.arraymath``, ``numba.cpython.unicode``, ...) and installs every
    typing and lowering registry, 0.17 s of a 0.55 s warm run. Neither is read when
    machine code is loaded: the registries serve typing and lowering, i.e. compiling.
    What the loaded code needs at run time is numba's runtime (NRT: the allocations of
    ``np.empty`` in a kernel), which ``rtsys.initialize`` sets up here as refresh does.
    A compile later in the process still refreshes everything
    (``numba.core.compiler.compile_extra``), so a cache miss is unaffected.

    Only for gropcap's own kernels, which use neither ``parallel=True`` nor typed
    containers nor ``np.random``: the patch is on each dispatcher's cache object, never
    on numba's classes, so a caller's own jitted functions load as numba loads them.
    Without the internals this relies on (numba changed) nothing is patched."""
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        return 0
    done = 0
    for d in dispatchers:
        cache = getattr(d, "_cache", None)
        if not (hasattr(cache, "_load_overload")
                and hasattr(cache, "_guard_against_spurious_io_errors")):
            continue               # NullCache (no cache) or another numba

        def load_overload(sig, target_context, _cache=cache):
            rtsys.initialize(target_context)
            with _cache._guard_against_spurious_io_errors():
                return _cache._load_overload(sig, target_context)
            return None            # (the guard swallowed an I/O error: numba compiles)
        cache.load_overload = load_overload
        done += 1
    return done
