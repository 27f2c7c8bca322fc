"""The shape of the code, held by a test: no import cycle anywhere in ``sturdyrpc`` (imports under
``TYPE_CHECKING`` and inside functions count: a cycle there is still two modules that need each
other), and files and functions a reader can hold (modules of at most ~700 lines, functions of at
most ~80). And the shape of the test suite: every test module in ``unit/``, ``integration/`` or
``interop/``, none importing another (what they share is in ``support/``), every program the tests
start in ``servers/``, importing no test helper (each runs on its own).

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

TESTS = Path(__file__).resolve().parents[1]
KINDS = ("unit", "integration", "interop")
#: What a program the tests start can be written in (Python, and Node for the TypeScript SDKs).
SCRIPT_SUFFIXES = {".py", ".mjs", ".cjs", ".js"}


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


# ---------------------------------------------------------------- the test suite's shape


def _files_in_tests(suffixes: set[str]) -> list[Path]:
    return sorted(p for p in TESTS.rglob("*") if p.suffix in suffixes and p.is_file()
                  and "__pycache__" not in p.parts and "node_modules" not in p.parts)


TEST_MODULES = [p for p in _files_in_tests({".py"}) if p.name.startswith("test_")]
HELPERS = [TESTS / "conftest.py", *sorted((TESTS / "support").glob("*.py"))]
SERVER_SCRIPTS = [p for p in _files_in_tests(SCRIPT_SUFFIXES) if TESTS / "servers" in p.parents]


def _imported(source: str) -> set[str]:
    """Every module ``source`` imports (function level included): dotted names, leading dots for
    a relative import, and the literal of an ``importlib.import_module`` or ``__import__`` call."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


def _test_imports(source: str) -> list[str]:
    """What ``source`` imports of the tests themselves: a test module, the conftest, ``tests.*``,
    anything relative (test modules are in no package)."""
    test_modules = {p.stem for p in TEST_MODULES}
    return sorted(m for m in _imported(source)
                  if m.startswith(".") or m.split(".")[0] in test_modules | {"tests", "conftest"})


def test_the_check_sees_every_way_to_import_a_test_module() -> None:
    source = ("import test_otel\nfrom test_conformance import _suite\nfrom . import test_x\nimport tests.unit.test_codec\n"
              "def f():\n    import conftest\n    importlib.import_module('test_http_interop')\n"
              "from support.http import free_port\nfrom servers import check_http_zoo\nimport sturdyrpc.test_client\n")
    assert _test_imports(source) == [".", "conftest", "test_conformance", "test_http_interop", "test_otel", "tests.unit.test_codec"]


def test_every_test_module_is_unit_integration_or_interop() -> None:
    assert len(TEST_MODULES) > 50
    misplaced = [str(p.relative_to(TESTS)) for p in TEST_MODULES if p.parent.parent != TESTS or p.parent.name not in KINDS]
    assert not misplaced, f"test modules outside tests/unit, tests/integration and tests/interop: {misplaced}"


def test_no_test_module_or_helper_imports_a_test_module() -> None:
    found = {str(p.relative_to(TESTS)): _test_imports(p.read_text()) for p in TEST_MODULES + HELPERS}
    bad = {k: v for k, v in found.items() if v}
    assert not bad, f"share through tests/support/, never by importing a test module: {bad}"


def test_every_program_the_tests_start_lives_in_servers_and_runs_on_its_own() -> None:
    # Outside servers/ the tests' folder holds nothing but test modules, their helpers and data.
    stray = [str(p.relative_to(TESTS)) for p in _files_in_tests(SCRIPT_SUFFIXES)
             if p not in TEST_MODULES and p not in HELPERS and p not in SERVER_SCRIPTS]
    assert not stray, f"programs outside tests/servers/: {stray}"
    assert len(SERVER_SCRIPTS) > 20
    # A server imports its neighbours at most: no helper of the tests, no test module.
    leaning = {str(p.relative_to(TESTS)): [m for m in sorted(_imported(p.read_text())) if m.split(".")[0] == "support"]
               + _test_imports(p.read_text()) for p in SERVER_SCRIPTS if p.suffix == ".py"}
    bad = {k: v for k, v in leaning.items() if v}
    assert not bad, f"servers importing test helpers or tests: {bad}"
