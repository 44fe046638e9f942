"""Python's cyclic garbage collector while a command starts.

A warm ``gropcap analyze`` of the sample took about 0.55 s of CPU, and the collector
about 0.05 s of it: some 180 collections while click, numpy, numba, pyarrow and
gropcap's own modules import and the cached kernels load, each traversing the objects
made since the one before, and one full collection (16-25 ms) traversing every object.
Almost nothing start-up makes is garbage (docs/performance.md, "Session 39").

The console script holds the collector (:func:`hold`) from its first moment, and the
run releases it (:func:`release`) where its long part starts:

- a bounded-memory run after its first batch: every kernel it uses is loaded by then,
  and a batch loop makes almost no cyclic garbage (a warm run over the 3 M-frame
  capture made no collection at all);
- at once when numba starts compiling a kernel (:func:`release_on_compile`): a compile
  makes cyclic garbage by the megabyte (a cold first run peaked at 565 MB held against
  432 MB collected);
- at once for an in-memory or Dask run, and for every command but ``analyze``
  (``cli.app``): an event loop makes cycles all the time.

:func:`release` moves what start-up made to the permanent generation first
(``gc.freeze``), so no later collection traverses it again. Only the console script
holds: ``gropcap.analyze`` in a notebook leaves the collector as it is.

Layer: the bottom (stdlib only; numba imported by :func:`release_on_compile` alone).
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Turn the collector off until :func:`release` (a no-op when it is off already:
    whoever turned it off turns it on)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def held() -> bool:
    """Whether :func:`hold` turned the collector off and nothing released it yet."""
    return _held


def release() -> None:
    """Start-up's objects to the permanent generation, the collector on again; a no-op
    unless :func:`hold` turned it off."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()


def release_on_compile() -> None:
    """While the collector is held, numba's first compile of a kernel releases it."""
    if not _held:
        return
    from numba.core import event

    class _Compiling(event.Listener):
        def on_start(self, ev):
            release()       # (stays registered: unregistering while numba broadcasts
                            # the event would skip the listener after it)

        def on_end(self, ev):
            pass

    event.register("numba:compile", _Compiling())
