"""The floor under ``bench_mcp``: a Peer over stdio (same transport as ``sturdyrpc demo --mcp``)
whose ``tools/call`` is a trivial inline handler, with the MCP profile's checks.

It shows what the two-way peer and runner cost per message before any MCP server logic, so
``bench_mcp`` can say how much of the gap to the bare loop is ours.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sturdyrpc.dispatch import Dispatcher
from sturdyrpc.mcp.profile import MCPProfile
from sturdyrpc.peer import Peer
from sturdyrpc.transports.stdio import StdioTransport, claim_stdout

d = Dispatcher()


@d.method(name="initialize", blocking=False)
def initialize(**kw: Any) -> dict[str, Any]:
    return {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "floor", "version": "1"}}


@d.method(name="notifications/initialized", blocking=False)
def initialized(**kw: Any) -> None:
    return None


@d.method(name="tools/call", blocking=False)
def call(**kw: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": kw["arguments"]["text"]}], "isError": False}


async def main() -> None:
    # The transport of `sturdyrpc demo --mcp`, without its tools/call fast path: every message
    # goes through the peer.
    transport = StdioTransport(0, claim_stdout())
    await transport.start()
    async with Peer(transport, d, profile=MCPProfile()) as peer:
        await peer.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
