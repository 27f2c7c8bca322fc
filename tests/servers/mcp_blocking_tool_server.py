"""An MCP stdio server with a blocking sync tool (``block``: ``time.sleep(seconds)``) and an async
one (``slow``), for the SIGTERM and EOF tests of tests/unit/test_stdio_transport.py."""

from __future__ import annotations

import asyncio
import time

from sturdyrpc.mcp import MCPServer, run_mcp_stdio

server = MCPServer("blocking-tool-server", "1.0")


@server.tool()
def block(seconds: float) -> str:
    """Sleep in a thread for ``seconds``."""
    time.sleep(seconds)
    return "done"


@server.tool()
async def slow(seconds: float, n: int) -> str:
    """Sleep on the loop for ``seconds``; returns ``n``."""
    await asyncio.sleep(seconds)
    return str(n)


if __name__ == "__main__":
    raise SystemExit(run_mcp_stdio(server))
