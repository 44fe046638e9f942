"""The package's layers (docs/architecture.md): no import cycle and no upward import.
Every import counts, those inside functions too: a cycle or an upward reach hidden in a
function is still one."""

from __future__ import annotations

import ast
import os

from where import ROOT

PKG = os.path.join(ROOT, "gropcap")

# docs/architecture.md's table: the longest matching prefix gives a module's rank; a
# module may import from its rank or below
RANKS = {
    "gropcap.errors": 0, "gropcap.constants": 0, "gropcap.interrupt": 0, "gropcap.arrays": 0,
    "gropcap.numba_cache": 0, "gropcap.addresses": 0, "gropcap.priority": 0,
    "gropcap.collector": 0,
    "gropcap.capture": 1,
    "gropcap.decode": 2,
    "gropcap.gro": 3,
    "gropcap.egress": 4, "gropcap.receive": 4, "gropcap.io": 4, "gropcap.selftest_cases": 4,
    "gropcap.analysis": 5, "gropcap.run": 5,
    "gropcap.io.load": 6, "gropcap.report": 6, "gropcap.calibrate": 6, "gropcap.replay": 6,
    "gropcap.cli.options": 7, "gropcap.cli.help": 7,
    "gropcap.cli": 8, "gropcap.api": 8,
    "gropcap.cli.__main__": 9, "gropcap.__main__": 9,
}

# inside gro/fast (the numba GRO kernels, one module per kernel area): a module imports
# only modules of a lower rank here, and nothing of gro/ but reasons.py (the package's
# __init__ gathers them for engine.py); docs/architecture.md lists them in this order
FAST = "gropcap.gro.fast"
FAST_RANKS = {"state": 0, "keys": 0, "bypass": 0, "columns": 0, "ip": 1, "tcp": 2, "udp": 2,
              "dev": 3, "napi": 4}


def _modules() -> dict[str, str]:
    mods = {}
    for dirpath, _, names in os.walk(PKG):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
                mods[rel[:-9] if rel.endswith(".__init__") else rel] = path
    return mods


def _graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import sub`` counts as both
    the package and the submodule)."""
    mods = _modules()
    edges = {m: set() for m in mods}
    for m, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            edges[m].update(t for t in targets if t in mods and t not in (m, "gropcap"))
    return edges


def rank(module: str) -> int | None:
    best = max((p for p in RANKS if module == p or module.startswith(p + ".")),
               key=len, default=None)
    return None if best is None else RANKS[best]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert [m for m in _modules() if m != "gropcap" and rank(m) is None] == []


def test_no_upward_import():
    edges = _graph()
    assert "gropcap.run.stream" in edges["gropcap.run.core"]       # the walk sees imports
    up = sorted(f"{m} ({rank(m)}) -> {t} ({rank(t)})" for m, ts in edges.items()
                for t in ts if m != "gropcap" and rank(t) > rank(m))
    assert up == []


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_gro_kernel_modules_import_downward_only():
    edges = _graph()
    mods = sorted(m for m in edges if m.startswith(FAST + "."))
    assert sorted(m[len(FAST) + 1:] for m in mods) == sorted(FAST_RANKS)
    assert f"{FAST}.ip" in edges[f"{FAST}.tcp"]                       # the walk sees them
    bad = []
    for m in mods:
        for t in sorted(edges[m]):
            if t.startswith(FAST + "."):
                if FAST_RANKS[t[len(FAST) + 1:]] >= FAST_RANKS[m[len(FAST) + 1:]]:
                    bad.append(f"{m} -> {t}")
            elif t.startswith("gropcap.gro") and t != "gropcap.gro.reasons":
                bad.append(f"{m} -> {t}")
    assert bad == []


def test_the_checks_find_what_they_look_for():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert rank("gropcap.io.load") > rank("gropcap.io.parquet") == rank("gropcap.receive.mtu")
    assert rank("gropcap.cli.app") > rank("gropcap.cli.options") > rank("gropcap.report.plots")
