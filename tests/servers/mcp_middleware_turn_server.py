"""An MCP stdio server with one middleware, for tests/unit/test_middleware_same_turn.py: the
middleware notes whether its first step ran outside any task (the chain started on the reader's
turn, as the frame is read) and, for the tool ``wait``, suspends before going on."""

from __future__ import annotations

import asyncio
from typing import Any

from sturdyrpc import Context
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp.stdio import run_mcp_stdio

server = MCPServer("middleware-turn", "1.0")


@server.tool(blocking=False)
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool(blocking=False)
def wait(text: str) -> str:
    """Echo the text (the middleware waits first)."""
    return text


@server.tool(blocking=False)
def boom() -> str:
    """Fail."""
    raise RuntimeError("secret text")


@server.middleware
async def mark(ctx: Context, call_next: Any) -> Any:
    on_readers_turn = asyncio.current_task() is None
    if ctx.method == "tools/call" and type(ctx.params) is dict and ctx.params.get("name") == "wait":
        await asyncio.sleep(0.02)
    result = await call_next(ctx)
    if ctx.method == "tools/call" and type(result) is dict and not result.get("isError"):
        result = {**result, "content": [{"type": "text", "text": f"{result['content'][0]['text']} on_readers_turn={on_readers_turn}"}]}
    return result


if __name__ == "__main__":
    run_mcp_stdio(server)
