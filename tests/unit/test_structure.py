"""The shape of the code, held by a test: no import cycle anywhere in ``sturdyrpc`` (imports under
``TYPE_CHECKING`` and inside functions count: a cycle there is still two modules that need each
other), and files and functions a reader can hold (modules of at most ~700 lines, functions of at
most ~80).

The imports are read from the source (``ast``), so nothing is imported to check them. An import of
a package counts as an import of its ``__init__``; ``from .pkg import name`` counts as an import of
``pkg.name`` when that is a module, else of ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sturdyrpc

ROOT = Path(sturdyrpc.__file__).resolve().parent
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, level: int, name: str | None, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (``level`` dots, relative to ``module``)."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node.level, node.module, is_package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return {m for m in found if m in MODULES and m != module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_the_import_graph_is_read_as_python_resolves_it() -> None:
    # a few edges the checker must see, whatever else changes: plain, relative, from a package
    graph = {m: _imports(m, p) for m, p in MODULES.items()}
    assert "sturdyrpc.errors" in graph["sturdyrpc.messages"]
    assert "sturdyrpc.codec" in graph["sturdyrpc.envelope"]
    assert all(m.startswith("sturdyrpc") for edges in graph.values() for m in edges)


def test_no_import_cycle_in_sturdyrpc() -> None:
    graph = {m: _imports(m, p) for m, p in MODULES.items()}
    cycles = _cycles(graph)
    assert cycles == [], "import cycles (TYPE_CHECKING and function-level imports count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_a_cycle_is_found_where_there_is_one() -> None:
    # the detector itself: a small graph with a cycle of three and a self-contained rest
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_functions_are_of_a_size_a_reader_can_hold(module: str) -> None:
    path = MODULES[module]
    text = path.read_text()
    lines = text.count("\n") + 1
    assert lines <= MAX_MODULE_LINES, f"{module}: {lines} lines (split it by job)"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{module}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"
