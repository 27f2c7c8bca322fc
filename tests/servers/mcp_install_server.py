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
