"""The split of ``mcp/server.py``: public names keep their import paths, one job per module."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import sturdyrpc.mcp

PUBLIC_FROM_SERVER = [
    "MCPServer", "MCPContext", "ToolError", "ToolResult", "text_content", "image_content", "audio_content",
    "embedded_resource", "LOG_LEVELS", "SessionState",
]


def test_every_public_name_is_importable_from_sturdyrpc_mcp_and_sturdyrpc_mcp_server() -> None:
    for name in sturdyrpc.mcp.__all__:
        assert getattr(sturdyrpc.mcp, name) is not None, name
    server = importlib.import_module("sturdyrpc.mcp.server")
    for name in PUBLIC_FROM_SERVER:
        assert getattr(server, name) is not None, name
        if name in sturdyrpc.mcp.__all__:
            assert getattr(server, name) is getattr(sturdyrpc.mcp, name), name


def test_the_old_session_name_still_works_with_a_deprecation_warning() -> None:
    server = importlib.import_module("sturdyrpc.mcp.server")
    for module in (sturdyrpc.mcp, server):
        with pytest.warns(DeprecationWarning, match="SessionState"):
            assert module.Session is sturdyrpc.mcp.SessionState
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from sturdyrpc.mcp import MCPServer, SessionState  # noqa: F401  # no warning for the new names


def test_mcp_server_is_a_facade_and_no_mcp_module_holds_several_jobs() -> None:
    root = Path(sturdyrpc.mcp.__file__).parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in root.glob("*.py")}
    assert sizes["server.py"] <= 600, sizes
    assert max(sizes.values()) <= 900, sizes


# ----------------------------------------------------------------------------- one way, small parts

ROOT = Path(sturdyrpc.mcp.__file__).parent
#: The modules above the facade: they serve an MCPServer, or build one (a proxy); every other
#: module receives the core.
ABOVE_THE_FACADE = {"sturdyrpc.mcp", "sturdyrpc.mcp.stdio", "sturdyrpc.mcp.proxying"}


def _module_name(path: Path) -> str:
    parts = ("sturdyrpc", *path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path: Path) -> set[str]:
    """Every module of sturdyrpc.mcp that ``path`` imports, anywhere in the file (under
    ``TYPE_CHECKING`` and inside functions too); imports of a package's ``__init__`` are left
    out (re-exports), its submodules count."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for t in targets:
            if t in modules and t != here and modules[t].name != "__init__.py":
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports_of(p) for p in ROOT.rglob("*.py")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_inside_mcp_counting_type_checking_and_function_imports() -> None:
    assert _cycles(_graph()) == []


def test_the_import_walk_counts_type_checking_and_function_level_imports() -> None:
    # scopes.py names the core only under TYPE_CHECKING; server.py imports testing inside a method
    assert "sturdyrpc.mcp.core" in _imports_of(ROOT / "scopes.py")
    assert "sturdyrpc.mcp.testing" in _imports_of(ROOT / "server.py")
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_only_the_entry_points_import_the_facade_every_other_part_receives_the_core() -> None:
    graph = _graph()
    importers = sorted(m for m, targets in graph.items() if "sturdyrpc.mcp.server" in targets)
    assert set(importers) <= ABOVE_THE_FACADE, importers
    for part in ("handlers", "tools_call", "stateless", "scopes"):
        assert "sturdyrpc.mcp.core" in graph[f"sturdyrpc.mcp.{part}"], part
    for part in ("session_state", "context", "registry", "lifespan", "dispatcher", "tasks.service", "tasks.methods"):
        assert "sturdyrpc.mcp.core" not in graph[f"sturdyrpc.mcp.{part}"], part


def test_every_mcp_module_and_function_is_small() -> None:
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 700, (path.name, len(text.splitlines()))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, (path.name, node.name, length)
