"""The layering docs/architecture.md describes, checked on the source: who may import whom.

Every import statement counts, including the deferred ones inside functions (a deferred import
hides a dependency from the reader, it does not remove it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpufailover", "schemas", "streams", "consumers", "producers", "deploy")
COMPONENTS = ("streams", "producers", "consumers")
# Parts of the gpufailover package that sit on top of everything: the command line and the
# harnesses it runs. The rest of the package is the shared kernel.
LAUNCHERS = ("gpufailover.cli", "gpufailover.chaos", "gpufailover.bench", "gpufailover.__main__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(f): f for pkg in PACKAGES for f in sorted((ROOT / pkg).rglob("*.py"))}


def _imported_names(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            # `from pkg import sub` imports the module pkg.sub when there is one
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (None: not ours)."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def graph() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for module, path in modules().items():
        targets = {_resolve(n) for n in _imported_names(path)}
        out[module] = frozenset(t for t in targets if t is not None and t != module)
    return out


def imports_of(module: str) -> frozenset[str]:
    return graph()[module]


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def is_kernel(module: str) -> bool:
    return _within(module, ("gpufailover",)) and not _within(module, LAUNCHERS)


def test_the_graph_sees_the_tree() -> None:
    # the rules below are vacuous if the walk finds nothing
    assert len(modules()) > 200
    assert "deploy.topics" in imports_of("gpufailover.cli.topics")
    assert "gpufailover.security" in imports_of("gpufailover.kafka")


@pytest.mark.parametrize("component", COMPONENTS)
def test_components_import_no_deploy_module_and_no_launcher(component: str) -> None:
    bad = {
        m: sorted(t for t in imports_of(m) if _within(t, ("deploy", *LAUNCHERS)))
        for m in modules()
        if _within(m, (component,))
    }
    assert {m: t for m, t in bad.items() if t} == {}


def test_the_kernel_imports_only_the_kernel() -> None:
    bad = {
        m: sorted(t for t in imports_of(m) if not is_kernel(t)) for m in modules() if is_kernel(m)
    }
    assert {m: t for m, t in bad.items() if t} == {}


def test_schemas_import_only_schemas() -> None:
    bad = {
        m: sorted(t for t in imports_of(m) if not _within(t, ("schemas",)))
        for m in modules()
        if _within(m, ("schemas",))
    }
    assert {m: t for m, t in bad.items() if t} == {}


def test_nothing_shipped_imports_tests() -> None:
    bad = {
        m: [n for n in _imported_names(p) if n == "tests" or n.startswith("tests.")]
        for m, p in modules().items()
    }
    assert {m: n for m, n in bad.items() if n} == {}


def strongly_connected(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert strongly_connected(edges) == [["a", "b", "c"]]


def test_there_is_no_import_cycle() -> None:
    assert strongly_connected(graph()) == []
