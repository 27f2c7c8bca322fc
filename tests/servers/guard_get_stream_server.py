"""An MCP server that speaks outside any request, for the HTTP guard's log tests: its
``announce`` tool answers at once and, ``after`` seconds later, sends every session a
``notifications/tools/list_changed`` and a ``ping`` request: on Streamable HTTP both go on the
session's GET stream, there being no POST they belong to. Served with
``sturdyrpc run tests/servers/guard_get_stream_server.py:mcp --http``."""

from __future__ import annotations

import asyncio

from sturdyrpc.mcp import MCPServer

mcp = MCPServer("guard-get-stream")
_later: set[asyncio.Task[None]] = set()  # held: a task nothing refers to may be collected before it runs


@mcp.tool()
async def announce(after: float) -> str:
    """In ``after`` seconds (at most 5): a tools/list_changed notification and a ping to every session."""

    async def speak() -> None:
        await asyncio.sleep(min(max(after, 0.0), 5.0))
        for s in mcp.sessions():
            await s.notify("notifications/tools/list_changed")
            peer = s.peer
            if peer is not None:
                await peer.request("ping", timeout=10)

    task = asyncio.get_running_loop().create_task(speak())
    _later.add(task)
    task.add_done_callback(_later.discard)
    return "announced"
