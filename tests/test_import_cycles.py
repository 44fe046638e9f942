"""The pipeline, CLI and report modules import each other without cycles (issue 14: one
core, no `pipeline` <-> `stream` or `cli` <-> `report/commands` loops). Every import
counts, those inside functions too: a cycle hidden in a function is still a cycle."""

from __future__ import annotations

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gropcap")
# the layers this test holds to no cycle (capture/ and replay/ have their own)
CHECKED = ("gropcap.pipeline", "gropcap.stream", "gropcap.runner", "gropcap.run",
           "gropcap.report", "gropcap.io", "gropcap.cli", "gropcap.cliopts",
           "gropcap.clihelp", "gropcap.api")


def _graph() -> dict[str, set[str]]:
    mods = {}
    for dirpath, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path[:-3], os.path.dirname(ROOT)).replace(os.sep, ".")
                mods[rel[:-9] if rel.endswith(".__init__") else rel] = path
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
            edges[m].update(t for t in targets if t in mods and t != m)
    keep = {m for m in mods if m.startswith(CHECKED)}
    return {m: edges[m] & keep for m in keep}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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


def test_no_import_cycles():
    edges = _graph()
    assert "gropcap.run.core" in edges and "gropcap.stream" in edges["gropcap.run.core"]
    assert _cycles(edges) == []


def test_the_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
