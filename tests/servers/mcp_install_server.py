"""A small MCP server for ``sturdyrpc install`` tests: its tool says which interpreter runs it
and what ``UNITS`` its environment holds."""

from __future__ import annotations

import os
import sys

from sturdyrpc.mcp import MCPServer

server = MCPServer("weather")


@server.tool
def forecast(city: str) -> str:
    """Tomorrow's weather in ``city``."""
    return f"{city}: sunny, 21 {os.environ.get('UNITS', '?')} ({sys.executable})"


@server.tool
def has(module: str) -> bool:
    """Whether ``module`` can be imported where the server runs."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def make_server() -> MCPServer:
    """A factory: ``sturdyrpc run`` calls it; ``install`` does not (it names the entry after the module)."""
    return server
