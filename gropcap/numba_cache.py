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

import contextlib
import hashlib
import os
import struct


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


@contextlib.contextmanager
def as_python(module_names):
    """For the block, every numba dispatcher defined in the modules ``module_names``
    runs as its Python function: the module's attribute, and any other attribute of a
    loaded ``gropcap`` module holding it (``from module import kernel``), is swapped for
    the function and put back afterwards (in a module imported inside the block too).
    A call from Python, and a call from one kernel to another (a global read at call
    time), then runs Python: nothing compiles.

    For the command line's first run on a cold cache with a small capture (the reference
    decoder and engine, ``cli.app``): compiling the counting kernels took 7-9 s of that
    run's 10 s; their Python loops over a few thousand rows take milliseconds. numpy's
    overflow warnings are off in the Python functions: the kernels' hashes wrap on
    purpose, as machine integers do.
    """
    import importlib
    import sys

    modules = [importlib.import_module(n) for n in module_names]
    python = {id(d): (d, _quiet(d.py_func)) for d in dispatchers_of(*modules)}
    back = {id(f): (f, d) for d, f in python.values()}

    def replace(table):
        # every loaded gropcap module's attribute holding a key of ``table``
        for name in list(sys.modules):
            mod = sys.modules.get(name)
            if mod is None or not (name == "gropcap" or name.startswith("gropcap.")):
                continue
            for attr, obj in list(vars(mod).items()):
                if id(obj) in table and table[id(obj)][0] is obj:
                    setattr(mod, attr, table[id(obj)][1])
    replace(python)
    try:
        yield
    finally:
        # the dispatchers back, also where a module imported inside the block took a
        # Python function (``from module import kernel`` at its import): a later run in
        # the same process (a notebook) would otherwise run it as Python
        replace(back)


def _quiet(fn):
    """``fn`` with numpy's overflow warnings off (:func:`as_python`)."""
    import functools

    import numpy as np

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with np.errstate(over="ignore"):
            return fn(*args, **kwargs)
    return call


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

    Each load also skips parsing the kernel's LLVM module (:func:`_lazy_class`).

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
            with _cache._guard_against_spurious_io_errors(), \
                    _lazy_libraries(target_context.codegen()):
                return _cache._load_overload(sig, target_context)
            return None            # (the guard swallowed an I/O error: numba compiles)
        cache.load_overload = load_overload
        done += 1
    return done


def object_symbols(obj: bytes) -> set[str] | None:
    """The symbols an ELF64 little-endian relocatable object defines (its ``.symtab``
    entries with a section, sections and file names left out), or None for any other
    object format.

    For a kernel numba loads from its cache these are the names
    ``JitEngine._load_defined_symbols`` takes from the kernel's LLVM module (its
    functions and globals that are not declarations): equal sets for every gropcap
    kernel (``tests/gro/test_kernel_cache.py``)."""
    if len(obj) < 64 or obj[:6] != b"\x7fELF\x02\x01":
        return None
    try:
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        heads = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + k * shentsize)
                 for k in range(shnum)]
        names = set()
        for head in heads:
            if head[1] != 2:                         # SHT_SYMTAB
                continue
            strings = heads[head[6]][4]              # sh_link: its string table
            for at in range(head[4], head[4] + head[5], 24):
                name, info, _other, section = struct.unpack_from("<IBBH", obj, at)
                # defined (a section), named, not a section or file symbol
                if section != 0 and name != 0 and (info & 0xF) not in (3, 4):
                    end = obj.index(b"\0", strings + name)
                    names.add(obj[strings + name:end].decode())
        return names
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None


_LAZY_CLASSES: dict = {}


def _lazy_class(base):
    """``base`` (numba's JIT code library class) whose cached-object libraries parse
    their LLVM module for linking only when it is asked for.

    numba loads a cached kernel as its machine code plus the kernel's whole optimised
    LLVM module as bitcode, which it parses at once (``CPUCodeLibrary._unserialize``,
    kind ``"object"``): to list the symbols the code defines, and in case a function
    compiled later in the process links the kernel in. The parse and the walk over
    the module were 75-90 ms of a warm run's 0.25 s of kernel loading (20 kernels,
    860 kB of bitcode), and a run that compiles nothing never needs the module. Here
    the symbols come from the object's own symbol table (:func:`object_symbols`) and
    the bitcode is parsed on the first read of ``_shared_module`` (a link into a later
    compile, or the library pickled)."""
    cls = _LAZY_CLASSES.get(base)
    if cls is not None:
        return cls

    def _get(self):
        mod = self.__dict__.get("_shared_module")
        pending = self.__dict__.pop("_gropcap_bitcode", None)
        if mod is None and pending is not None:
            import llvmlite.binding as ll
            mod = self.__dict__["_shared_module"] = ll.parse_bitcode(pending)
        return mod

    def _set(self, mod):
        self.__dict__["_shared_module"] = mod

    def _unserialize(cls, codegen, state):
        name, kind, data = state
        symbols = object_symbols(data[0]) if kind == "object" else None
        if symbols is None:
            return super(cls, cls)._unserialize.__func__(cls, codegen, state)
        object_code, shared_bitcode = data
        self = codegen.create_library(name)
        self.enable_object_caching()
        self._set_compiled_object(object_code)
        self.__dict__["_gropcap_bitcode"] = shared_bitcode
        self._finalize_final_module()
        codegen._engine._defined_symbols |= symbols
        return self

    cls = type("Lazy" + base.__name__, (base,), {
        "_shared_module": property(_get, _set),
        "_unserialize": classmethod(_unserialize), "__module__": __name__})
    _LAZY_CLASSES[base] = cls
    return cls


class _lazy_libraries:
    """Within the block, libraries ``codegen`` creates are :func:`_lazy_class` ones (the
    codegen's ``_library_class``, set on the instance, then removed). Entered where
    numba loads a cached kernel, i.e. under its global compiler lock, which every
    compile and load holds: no other library is made meanwhile. Without the internals
    this relies on, nothing changes."""

    def __init__(self, codegen):
        self.codegen = codegen
        base = getattr(type(codegen), "_library_class", None)
        self.cls = None
        if base is not None and hasattr(base, "_unserialize") and hasattr(
                base, "_set_compiled_object") and hasattr(
                getattr(codegen, "_engine", None), "_defined_symbols"):
            self.cls = _lazy_class(base)

    def __enter__(self):
        if self.cls is not None:
            self.saved = self.codegen.__dict__.get("_library_class", self)
            self.codegen._library_class = self.cls
        return self

    def __exit__(self, *exc):
        if self.cls is not None:
            if self.saved is self:                   # (no instance attribute before)
                self.codegen.__dict__.pop("_library_class", None)
            else:
                self.codegen._library_class = self.saved
        return False
