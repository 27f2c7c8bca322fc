"""An application as `sturdyrpc run` serves it: an MCPServer and a plain Dispatcher using the app
model (middleware, lifespan, ctx fields, per-tool timeout). Driven by tests/unit/test_app_model.py and tests/integration/test_app_model_transports.py.

Environment: APP_LOG (a file: lifespan startup/shutdown lines), APP_FAIL_STARTUP=1 (the lifespan
raises at startup), APP_PRINT=1 (print to stdout at import time and inside a tool).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from sturdyrpc import ApplicationError, Context, Dispatcher
from sturdyrpc.mcp import MCPContext, MCPServer

if os.environ.get("APP_PRINT"):
    print("importing the app")  # must not reach stdout under `sturdyrpc run` (stdio)


def note(line: str) -> None:
    path = os.environ.get("APP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@contextlib.asynccontextmanager
async def lifespan(server: MCPServer) -> AsyncIterator[dict[str, Any]]:
    if os.environ.get("APP_FAIL_STARTUP"):
        raise RuntimeError("database unreachable")
    note("startup")
    yield {"db": "pool-1"}
    note("shutdown")


def view(ctx: Context) -> dict[str, Any]:
    """What a middleware saw of a request."""
    headers = ctx.headers or {}
    return {"method": ctx.method, "id": ctx.id, "session_id": ctx.session_id, "principal": ctx.principal,
            "lifespan": ctx.lifespan, "x_app": headers.get("x-app"), "has_state": ctx.state is not None}


def make_server(**options: Any) -> MCPServer:
    server = MCPServer("app", "1.0", lifespan=lifespan, **options)
    seen: list[dict[str, Any]] = []
    server.seen = seen  # type: ignore[attr-defined]

    @server.middleware
    async def record(ctx: Context, call_next: Any) -> Any:
        seen.append(view(ctx))
        return await call_next(ctx)

    @server.middleware
    async def policy(ctx: Context, call_next: Any) -> Any:
        name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
        if ctx.method == "tools/call" and name == "forbidden":
            raise ApplicationError(4003, "Forbidden by policy")
        if ctx.method == "tools/call" and name == "explode":
            raise ValueError("secret middleware text")
        if ctx.method == "tools/call" and name == "canned":
            return {"content": [{"type": "text", "text": "from the middleware"}], "isError": False}
        return await call_next(ctx)

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        """An inline tool (answered on the reader's turn, through the chain when there is middleware)."""
        return text

    @server.tool()
    def forbidden() -> str:
        return "never"

    @server.tool()
    def explode() -> str:
        return "never"

    @server.tool()
    def canned() -> str:
        return "never"

    @server.tool()
    async def whoami(ctx: MCPContext) -> dict[str, Any]:
        """The context fields as the tool sees them, and what the middleware saw of this call."""
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
        if os.environ.get("APP_PRINT"):
            print("a tool printing")
        return {"session_id": ctx.session_id, "principal": ctx.principal, "lifespan": ctx.lifespan,
                "x_app": (ctx.headers or {}).get("x-app"), "calls": ctx.state["calls"], "seen": len(seen), "mw": seen[-1]}

    @server.tool(timeout=0.3)
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    return server


server = make_server()


def make_rpc() -> Dispatcher:
    rpc = Dispatcher()
    seen: list[dict[str, Any]] = []

    @rpc.middleware
    async def record(ctx: Context, call_next: Any) -> Any:
        seen.append(view(ctx))
        if ctx.method == "blocked":
            raise ApplicationError(4003, "Blocked by policy")
        if ctx.method == "boom":
            raise ValueError("secret middleware text")
        return await call_next(ctx)

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @rpc.method(blocking=False)
    def seen_count() -> int:
        return len(seen)

    @rpc.method(blocking=False)
    def last_seen(back: int = 1) -> dict[str, Any]:
        return seen[-1 - back] if len(seen) > back else {}

    @rpc.method(blocking=False)
    def blocked() -> str:
        return "never"

    @rpc.method(blocking=False)
    def boom() -> str:
        return "never"

    return rpc


rpc = make_rpc()
