"""A small MCP server on the official Python SDK (``mcp``), over stdio, for ``sturdyrpc check``.

Tools: ``echo`` (returns its text), ``add``, ``sleep`` (waits, reporting progress; used for the
cancellation and progress checks) and ``fail`` (raises, to see whether the error leaks).
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("check-sdk-demo")


@server.tool()
def echo(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def sleep(seconds: float, ctx: Context) -> str:
    """Wait ``seconds`` (at most 10), reporting progress every 0.1 s."""
    seconds = min(max(seconds, 0.0), 10.0)
    steps = max(1, int(seconds / 0.1))
    for i in range(steps):
        await anyio.sleep(seconds / steps)
        await ctx.report_progress(i + 1, steps)
    return "done"


@server.tool()
def fail() -> str:
    """Always raises (the message holds a fake secret and a file path)."""
    raise RuntimeError("SECRET-TOKEN-42 /etc/shadow")


if __name__ == "__main__":
    server.run("stdio")
