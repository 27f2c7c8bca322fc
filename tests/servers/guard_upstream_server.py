"""An MCP server without authorization, for the HTTP guard's tests: its ``authorization`` tool
says which ``Authorization`` header reached it (``"none"`` when none did), so a test can tell
what guard hands on upstream. Served with ``sturdyrpc run tests/servers/guard_upstream_server.py:mcp --http``."""

from __future__ import annotations

from sturdyrpc.mcp import MCPServer
from sturdyrpc.request_context import current_headers

mcp = MCPServer("guard-upstream")


@mcp.tool()
def authorization() -> str:
    """The Authorization header of the HTTP request that carried this call, or "none"."""
    headers = current_headers.get()
    return (headers or {}).get("authorization", "none")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text as it came."""
    return text


_running = {"now": 0, "peak": 0}


@mcp.tool()
async def slow(seconds: float) -> str:
    """Sleep ``seconds`` (at most 5); counts how many calls of it run at once."""
    import asyncio

    _running["now"] += 1
    _running["peak"] = max(_running["peak"], _running["now"])
    try:
        await asyncio.sleep(min(max(seconds, 0.0), 5.0))
    finally:
        _running["now"] -= 1
    return f"slept {seconds:g}"


@mcp.tool()
def peak() -> int:
    """The most calls of ``slow`` that ran at once so far."""
    return _running["peak"]
