"""An MCP server whose async tool blocks the event loop (``time.sleep`` in an ``async def``), for
the loop-stall warning tests of tests/integration/test_loopwatch.py.

``python mcp_loop_blocking_server.py [off]`` serves it on stdio (``off``: ``stall_warning=None``);
``sturdyrpc run mcp_loop_blocking_server.py:server --http ...`` over HTTP.
"""

from __future__ import annotations

import asyncio
import sys
import time

from sturdyrpc.mcp import MCPServer, run_mcp_stdio

server = MCPServer("loop-blocker", "1.0")


@server.tool(timeout=0.2)  # which it overruns: a timeout cannot cut code that blocks the loop
async def block_loop(seconds: float) -> str:
    """Block the whole event loop for ``seconds`` (the mistake the warning is for)."""
    time.sleep(seconds)
    return "done"


@server.tool()
async def fine(text: str) -> str:
    """Await like a well-behaved tool; returns ``text``."""
    await asyncio.sleep(0.01)
    return text


if __name__ == "__main__":
    raise SystemExit(run_mcp_stdio(server, stall_warning=None) if sys.argv[1:] == ["off"] else run_mcp_stdio(server))
