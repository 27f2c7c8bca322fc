"""An MCP stdio server with one async tool that sleeps: ``python mcp_slow_tool_server.py``.

For the end-of-input tests: every ``tools/call`` of ``slow`` that was running or still queued
when stdin closed must be answered before the process exits.
"""

from __future__ import annotations

import asyncio

from sturdyrpc.mcp import MCPServer, run_mcp_stdio

server = MCPServer("slow-tool", "1.0")


@server.tool()
async def slow(seconds: float, value: int) -> int:
    """Sleep ``seconds``, then return ``value``."""
    await asyncio.sleep(seconds)
    return value


if __name__ == "__main__":
    raise SystemExit(run_mcp_stdio(server))
