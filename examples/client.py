"""A client: start a server as a subprocess, call it over its stdio, and print what came back.

    python examples/client.py
"""

import asyncio
import sys
from pathlib import Path

from sturdyrpc.client import connect_stdio
from sturdyrpc.errors import RPCError
from sturdyrpc.mcp.client import connect as connect_mcp

HERE = Path(__file__).parent


async def main() -> None:
    # Plain JSON-RPC: every request settles (a result, a typed error, a timeout), never hangs.
    async with connect_stdio([sys.executable, str(HERE / "jsonrpc_server.py")]) as conn:
        print("divide:", await conn.peer.request("divide", [6, 3], timeout=5))
        try:
            await conn.peer.request("divide", {"a": 1, "b": 0}, timeout=5)
        except RPCError as exc:
            print("error:", exc.code, exc.message)
    # MCP: the client negotiates the newest protocol version the server speaks.
    async with connect_mcp([sys.executable, str(HERE / "mcp_server.py")]) as client:
        print("tools:", [t["name"] for t in await client.list_tools()])
        result = await client.call_tool("add", {"a": 2, "b": 3})
        print("add:", result["structuredContent"]["result"])


if __name__ == "__main__":
    asyncio.run(main())
