"""Ctrl-C that never lands inside numba-compiled code, and sections it must not split.

Python runs a SIGINT handler between bytecodes of the main thread, and its default handler
raises KeyboardInterrupt there. numba-compiled functions call back into Python while they
run (``numba.core.serialize._numba_unpickle`` for constants, the dispatcher's ``typeof``
for arguments); a KeyboardInterrupt raised in such a callback is not seen by the compiled
caller, which then returns with an exception set (``SystemError: CPUDispatcher(...)
returned a result with an exception set``) or crashes the interpreter (exit 139).

:func:`handling_interrupts` installs a handler that raises KeyboardInterrupt as Python does,
except

- when the interrupted Python code was called from compiled code (a numba/llvmlite frame
  not below ``Dispatcher._compile_for_args``): it notes the interrupt and asks again every
  :data:`RETRY_S` seconds (``_thread.interrupt_main``) until the main thread is back in
  ordinary Python code, a few milliseconds later for a batch-sized call;
- inside a callback whose exceptions its caller swallows (llvmlite's object-cache
  callbacks while numba compiles, distributed's gc callback, importlib's module-lock
  weakref callback: ``_SWALLOWING``, ``_SWALLOWING_FROZEN``): retried the same way;
- inside :func:`deferred` (renaming finished outputs into place): the interrupt waits for
  the end of the block.

Layer: none (used by the CLI around a command; the library itself never installs handlers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

RETRY_S = 0.02

_RUNTIME_DIRS: tuple[str, ...] = ()
# depth: nested deferred() blocks; finished: a deferred(drop=True) block ended, the
# command's outputs are complete and an interrupt no longer stops it; raised: a
# KeyboardInterrupt was raised in the block (interrupt_raised)
_state = {"depth": 0, "pending": False, "drop": False, "finished": False, "raised": False}


def _runtime_dirs() -> tuple[str, ...]:
    global _RUNTIME_DIRS
    if not _RUNTIME_DIRS:
        import importlib.util
        dirs = []
        for name in ("numba", "llvmlite"):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                dirs.append(os.path.abspath(list(spec.submodule_search_locations)[0]) + os.sep)
        _RUNTIME_DIRS = tuple(dirs)
    return _RUNTIME_DIRS


def called_from_compiled_code(frame) -> bool:
    """True when ``frame`` is numba/llvmlite runtime code that compiled code called (a
    KeyboardInterrupt raised there would be lost in the compiled caller).

    numba's compiler (below ``_compile_for_args``) is ordinary Python called through the
    dispatcher, which checks for errors: an interrupt may stop a compile."""
    dirs = _runtime_dirs()
    inside = False
    f = frame
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(dirs):
            return inside
        if f.f_code.co_name == "_compile_for_args":
            return False
        inside = True
        f = f.f_back
    return inside


# Python callbacks whose exceptions the caller swallows ("Exception ignored ..."): an
# interrupt raised inside one is printed with a traceback and lost, so it waits for the
# callback to return. (function name, package): llvmlite's object-cache callbacks, called
# from LLVM through ctypes while numba compiles; distributed's gc callback; numba's weakref
# callback that forgets a disposed type (it runs wherever the garbage collector frees one:
# CI lost an interrupt there once). Any ``__del__`` is one too.
_SWALLOWING = {("_raw_object_cache_notify", "llvmlite"),
               ("_raw_object_cache_getbuffer", "llvmlite"),
               ("_gc_callback", "distributed"),
               ("_on_type_disposal", "numba")}
# the same, in frozen modules (no package directory in their file name): importlib's
# weakref callback that drops a module lock once the import that made it is done (CI lost
# an interrupt there too, during a lazy import of the in-memory run)
_SWALLOWING_FROZEN = {("cb", "<frozen importlib._bootstrap>")}


def in_swallowing_callback(frame) -> bool:
    """True when ``frame`` runs inside a callback whose exceptions are swallowed."""
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == "__del__":
            return True
        for name, package in _SWALLOWING:
            if code.co_name == name and f"{os.sep}{package}{os.sep}" in code.co_filename:
                return True
        if (code.co_name, code.co_filename) in _SWALLOWING_FROZEN:
            return True
        f = f.f_back
    return False


def _retry() -> None:
    import _thread
    _thread.interrupt_main(signal.SIGINT)


def on_signal(signum, frame):
    """The handler :func:`handling_interrupts` installs (cli/app.py also uses it for SIGTERM)."""
    if _state["finished"]:
        return
    if _state["depth"]:
        _state["pending"] = True
        return
    if called_from_compiled_code(frame) or in_swallowing_callback(frame):
        _state["pending"] = True
        t = threading.Timer(RETRY_S, _retry)
        t.daemon = True
        t.start()
        return
    _state["pending"] = False
    _state["raised"] = True
    raise KeyboardInterrupt


def interrupt_raised() -> bool:
    """Whether a KeyboardInterrupt was raised inside :func:`handling_interrupts` (by
    :func:`on_signal` or at the end of a :func:`deferred` block). The command line then
    treats whatever exception ends the command as the interrupt: C code that catches
    the KeyboardInterrupt may raise another in its place (an extension module being
    imported: ``ImportError: numba._devicearray failed to import``, the KeyboardInterrupt
    printed and cleared by the module's init)."""
    return _state["raised"]


def exit_at_once(signum, frame):
    """The handler from the start of the process until a command installs
    :func:`on_signal` (imports, option parsing: nothing is written yet)."""
    if _state["finished"]:
        return
    os.write(2, b"gropcap: interrupted\n")
    os._exit(130)


def run_command(main) -> None:
    """Run a click entry point with :func:`exit_at_once` installed first. Once it is
    over (its exit status decided), interrupts are ignored: the interpreter's teardown
    would otherwise die of SIGINT with no word (Python restores SIG_DFL at shutdown).
    The process then ends by :func:`exit_now` (no teardown) unless a thread that is not
    a daemon still runs (the interpreter waits for it) or the status is a message."""
    signal.signal(signal.SIGINT, exit_at_once)
    code = 0
    try:
        main()
    except SystemExit as e:
        if e.code == 130:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            exit_now(130)
        if e.code is not None and not isinstance(e.code, int):
            raise                          # a message: Python prints it (status 1)
        code = e.code or 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _forget_handled_interrupt()
    if _only_daemon_threads():
        exit_now(code)
    sys.exit(code)


def _only_daemon_threads() -> bool:
    """Whether every thread but this one is a daemon (nothing the interpreter's
    shutdown would wait for)."""
    main = threading.current_thread()
    return all(t is main or t.daemon for t in threading.enumerate())


def exit_now(code: int) -> None:
    """End the process with ``code`` without the interpreter's finalization: the standard
    streams flushed, the atexit callbacks run (a Dask cluster, temporary directories,
    logging), then ``os._exit``.

    A finished command's teardown (module dictionaries, numba's dispatchers and LLVM
    modules, Arrow's pools) took 0.17-0.21 s of a warm 0.8-1.0 s run; its outputs are
    written and closed by then. An interrupt that landed while a C extension was being
    imported leaves a half-initialised module whose teardown can crash (measured:
    SIGSEGV once in 300 runs interrupted in the first half second); the run's own
    outputs were removed before this point. A stream that cannot be flushed (a closed
    pipe: ``gropcap ... | head``) is left, as the status already says how the run
    ended."""
    import atexit
    _flush_streams()
    try:
        atexit._run_exitfuncs()
    finally:
        _flush_streams()                  # what the callbacks printed
        os._exit(code)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _forget_handled_interrupt() -> None:
    """Clear CPython's ``_Py_UnhandledKeyboardInterrupt``: a KeyboardInterrupt that passes
    out of code run through ``PyRun_String`` (Cython modules such as pyarrow's, while
    they are imported) sets it even when Python code above catches it, and ``Py_Main``
    then ends the process with SIGINT (status -2) instead of our exit status 130
    (measured: 1 run in 40 interrupted in the first half second). The interrupt was
    handled here; a no-op where the symbol does not exist."""
    try:
        import ctypes
        flag = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except (ImportError, AttributeError, ValueError, OSError):
        return
    flag.value = 0


@contextlib.contextmanager
def handling_interrupts():
    """Install the SIGINT handler for the block (main thread only; elsewhere a no-op), and
    a ``sys.excepthook`` that prints no KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, on_signal)
    _state.update(depth=0, pending=False, drop=False, finished=False, raised=False)
    hook = sys.excepthook

    def quiet_interrupt(kind, value, tb):
        # C code that catches a KeyboardInterrupt prints it (PyErr_Print, through this
        # hook: an extension module's init) before raising its own error; the command
        # says "gropcap: interrupted" itself (interrupt_raised)
        if not issubclass(kind, KeyboardInterrupt):
            hook(kind, value, tb)
    sys.excepthook = quiet_interrupt
    try:
        yield
    finally:
        sys.excepthook = hook
        signal.signal(signal.SIGINT, previous)
        # "finished" stays: a late interrupt must not turn a complete run into exit 130
        _state.update(depth=0, pending=False, drop=False)


@contextlib.contextmanager
def deferred(*, drop: bool = False):
    """An interrupt during the block waits for its end (then KeyboardInterrupt), or with
    ``drop=True`` is ignored, then and until the command ends: for the last steps of a
    command whose outputs are already complete, finishing is better than exiting 130."""
    _state["depth"] += 1
    _state["drop"] = _state["drop"] or drop
    try:
        yield
    finally:
        _state["depth"] -= 1
        if not _state["depth"]:
            pending, dropping = _state["pending"], _state["drop"]
            _state.update(pending=False, drop=False, finished=dropping)
            if pending and not dropping:
                _state["raised"] = True
                raise KeyboardInterrupt


__all__ = ["handling_interrupts", "deferred", "on_signal", "exit_at_once", "run_command",
           "called_from_compiled_code", "interrupt_raised"]
