"""The split of ``mcp/server.py``: public names keep their import paths, one job per module."""

from __future__ import annotations

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
