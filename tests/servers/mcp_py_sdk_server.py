"""The demo's four tools on the official Python SDK's ``MCPServer``, over stdio (interop and benchmark peer).

Run: ``python tests/servers/mcp_py_sdk_server.py``.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("python-sdk-demo")


@server.tool()
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def fail() -> str:
    """Always fails."""
    raise RuntimeError("SECRET-TOKEN-42 /etc/shadow")


@server.tool()
async def slow(seconds: float, steps: int, ctx: Context) -> str:
    """Sleep for ``seconds``, reporting progress ``steps`` times."""
    n = max(steps, 1)
    for i in range(1, n + 1):
        await anyio.sleep(seconds / n)
        if steps > 0:
            await ctx.report_progress(i, steps)
    return f"slept {seconds} seconds"


if __name__ == "__main__":
    server.run("stdio")
