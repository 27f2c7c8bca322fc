"""Two worker processes on one port, sharing sessions through Redis: any worker serves any
request of any session (no sticky routing). Needs the http and redis extras and a redis-server.

    sturdyrpc run examples/workers_server.py:server --http 127.0.0.1:8000 --workers 2 \\
        --store redis://127.0.0.1:6379/0
"""

import os

from sturdyrpc.mcp import MCPContext, MCPServer

server = MCPServer("counter", "1.0")


@server.tool()
async def count(ctx: MCPContext) -> dict[str, int]:
    """Count the calls of this session; the count lives in the store, so every worker sees it."""
    ctx.state["calls"] = ctx.state.get("calls", 0) + 1
    return {"calls": ctx.state["calls"], "worker": os.getpid()}
