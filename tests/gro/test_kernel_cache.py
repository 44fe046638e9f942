"""numba's on-disk cache and kernels split over several files (gropcap.numba_cache).

numba invalidates a cached function only when its own file changes: a caller cached
from one file keeps the machine code of a callee from another file after that callee
changed. The GRO kernels (gro/fast/, one module per kernel area) call across files, so
importing the package compares a stamp of every file they depend on with the one next
to the cache and empties the kernels' cache indexes when it differs. Each check runs in
a child process with its own NUMBA_CACHE_DIR.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from where import ROOT

CALLEE = """import numba


@numba.njit(cache=True)
def f(x):
    return x + {add}
"""

CALLER = """import numba

from callee import f


@numba.njit(cache=True)
def g(x):
    return f(x) * 10
"""

MAIN = """import json, sys
import callee, caller
from gropcap import numba_cache
refreshed = False
if sys.argv[1] == "refresh":
    refreshed = numba_cache.refresh(
        numba_cache.dispatchers_of(callee, caller), "toy.deps",
        numba_cache.stamp([callee.__file__, caller.__file__]))
print(json.dumps({"g": caller.g(1), "refreshed": refreshed}))
"""


def _child(code: str, *args: str, cwd: str, cache: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, ROOT]), NUMBA_CACHE_DIR=cache,
               PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=cwd, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def _toy(tmp_path, mode: str) -> list[dict]:
    src = tmp_path / mode
    src.mkdir()
    cache = str(tmp_path / f"cache-{mode}")
    (src / "caller.py").write_text(CALLER)
    got = []
    for add in (1, 22):
        (src / "callee.py").write_text(CALLEE.format(add=add))
        got.append(_child(MAIN, mode, cwd=str(src), cache=cache))
    return got


def test_numba_keeps_a_caller_compiled_against_a_changed_callee_in_another_file(tmp_path):
    # the premise of gropcap.numba_cache: if this fails, numba now tracks callees in
    # other files and the stamps may go
    first, second = _toy(tmp_path, "plain")
    assert first["g"] == 20
    assert second["g"] == 20        # stale: f(x) = x + 1 still, from caller's cache


def test_the_stamp_recompiles_a_caller_whose_callee_changed(tmp_path):
    first, second = _toy(tmp_path, "refresh")
    assert first == {"g": 20, "refreshed": True}      # no stamp yet: indexes emptied
    assert second == {"g": 230, "refreshed": True}    # x + 22, recompiled


_FAST = r"""
import json, os
from gropcap.gro import fast
from gropcap.gro.fast import napi
path = os.path.join(napi.run._cache.cache_path, fast.CACHE_STAMP)
print(json.dumps({"stamp": os.path.exists(path), "again": fast._refresh_cache()}))
"""


def test_importing_the_gro_kernels_writes_their_stamp_next_to_their_cache(tmp_path):
    # the import refreshed (a new cache directory has no stamp) and wrote it where the
    # kernels' indexes are; a second refresh finds it current and empties nothing
    got = _child(_FAST, cwd=ROOT, cache=str(tmp_path / "cache"))
    assert got == {"stamp": True, "again": False}


def test_the_stamp_covers_every_module_the_gro_kernels_import():
    # a kernel bakes in the constants of the modules it imports: each of them, and each
    # kernel module, must be in the stamp; and every kernel of them is refreshed
    from gropcap import numba_cache
    from gropcap.gro import fast

    stamped = {m.__name__ for m in fast.STAMP_MODULES}
    assert {m.__name__ for m in fast.MODULES} <= stamped
    imported, jitted = set(), set()
    for mod in fast.MODULES:
        with open(mod.__file__) as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("gropcap"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("gropcap"))
            elif isinstance(node, ast.FunctionDef) and any(
                    "njit" in ast.unparse(d) for d in node.decorator_list):
                jitted.add(f"{mod.__name__}.{node.name}")
    assert "gropcap.gro.reasons" in imported
    assert imported - stamped == set()
    found = numba_cache.dispatchers_of(*fast.MODULES)
    assert fast.run in found
    assert {f"{d.py_func.__module__}.{d.py_func.__name__}" for d in found} == jitted


LIGHT = """import json, sys
import numba, numpy as np
import gropcap
out = {}
for name in sys.argv[1:]:
    a = gropcap.analyze(name, engine="fast", decoder="fast")
    out[name] = {m: [r.gro_seg.tolist(), r.reason.tolist(), r.seg_end_reason.tolist()]
                 for m, r in a.results.items()}
refreshed = "numba.np.arraymath" in sys.modules    # imported by the registry refresh only


@numba.njit
def total(x):                 # a compile after the light loads: refreshes as numba does
    return np.sum(x * 2)


print(json.dumps({"results": out, "refreshed": refreshed,
                  "compiled": int(total(np.arange(4)))}))
"""


def test_cached_kernels_load_without_the_registry_refresh():
    """On a warm cache the kernels load without numba's registry refresh
    (numba_cache.light_loads, 0.17 s of a warm run), give the results of this process's
    runs, and a function compiled afterwards in the same process still compiles and runs.
    The first child fills whatever the cache misses; the second loads everything."""
    import gropcap
    from where import SAMPLES
    names = [f"{SAMPLES}/{n}" for n in ("real_ipv4_p4.pcap", "real_vxlan.pcap",
                                        "crafted_gre.pcap", "real_ipv6.pcap")]
    want = {}
    for name in names:
        a = gropcap.analyze(name, engine="fast", decoder="fast")
        want[name] = {m: [r.gro_seg.tolist(), r.reason.tolist(), r.seg_end_reason.tolist()]
                      for m, r in a.results.items()}
    env = dict(os.environ, PYTHONPATH=ROOT)
    for child in range(2):
        p = subprocess.run([sys.executable, "-c", LIGHT, *names], capture_output=True,
                           text=True, cwd=ROOT, env=env, timeout=900)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout.splitlines()[-1])
        assert got["results"] == want and got["compiled"] == 12
    assert got["refreshed"] is False


LAZY = """import json, sys
import llvmlite.binding as ll
import numba
from numba.core import codegen
import gropcap
from gropcap import numba_cache

seen = []                        # (object code, bitcode) of every cached library loaded
base = codegen.JITCodeLibrary._unserialize.__func__
lazy = numba_cache._lazy_class(codegen.JITCodeLibrary)
mine = lazy._unserialize.__func__


def spy(cls, cg, state):
    if state[1] == "object":
        seen.append(state[2])
    return mine(cls, cg, state)


lazy._unserialize = classmethod(spy)
parsed = []
real_parse = ll.parse_bitcode
ll.parse_bitcode = lambda data: parsed.append(len(data)) or real_parse(data)
a = gropcap.analyze(sys.argv[1], engine="fast", decoder="fast")
loads_parsed = len(parsed)
same = []
for obj, bitcode in seen:
    mod = real_parse(bitcode)
    want = {g.name for gs in (mod.functions, mod.global_variables) for g in gs
            if not g.is_declaration}
    same.append(numba_cache.object_symbols(obj) == want)

from gropcap.gro.fast.napi import _jiffy

t = 5_000_000_123
first = int(_jiffy(t, 1000))     # loaded from the cache, its module not parsed


@numba.njit
def later(t):                    # compiled now: links _jiffy's library, parsing it
    return _jiffy(t, 1000) + 1


print(json.dumps({"libraries": len(seen), "same": same, "loads_parsed": loads_parsed,
                  "first": first, "later": int(later(t)), "parsed": len(parsed),
                  "packets": int(a.packets.num_rows)}))
"""


def test_cached_kernels_load_without_parsing_their_llvm_module():
    """A warm run loads each cached kernel's machine code with the symbols of its object
    file (numba_cache.object_symbols: the same names numba takes from the kernel's LLVM
    module) and parses no module; a function compiled later that calls a loaded kernel
    parses that kernel's module then, and runs. The project's own cache: the first
    child fills whatever it misses, the second loads everything."""
    from where import SAMPLES
    env = dict(os.environ, PYTHONPATH=ROOT)
    for child in range(2):
        p = subprocess.run([sys.executable, "-c", LAZY, f"{SAMPLES}/real_ipv4_p4.pcap"],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout.splitlines()[-1])
    assert got["libraries"] >= 10 and all(got["same"])
    assert got["loads_parsed"] == 0
    assert got["first"] == 5000 and got["later"] == 5001
    assert got["parsed"] >= 1 and got["packets"] > 0
