"""bench_middleware's stdio servers: the plain ``echo`` of bench_stdio, or (``--mcp``) the inline
``echo`` tool of bench_mcp, with N pass-through middleware.

``python bench/mw_server.py N [--mcp]``
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sturdyrpc import Context, Dispatcher
from sturdyrpc.transports.stdio import run_stdio


def make(n: int) -> Dispatcher:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        return value

    for _ in range(n):

        async def passthrough(ctx: Context, call_next: Any) -> Any:
            return await call_next(ctx)

        rpc.middleware(passthrough)
    return rpc


def make_mcp(n: int) -> Any:
    from sturdyrpc.mcp import MCPServer

    server = MCPServer("mw-bench", "1.0")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    for _ in range(n):

        async def passthrough(ctx: Context, call_next: Any) -> Any:
            return await call_next(ctx)

        server.middleware(passthrough)
    return server


if __name__ == "__main__":
    if "--mcp" in sys.argv:
        from sturdyrpc.mcp import run_mcp_stdio

        code = run_mcp_stdio(make_mcp(int(sys.argv[1])))
    else:
        code = run_stdio(make(int(sys.argv[1])))
    sys.stderr.flush()
    os._exit(code)
