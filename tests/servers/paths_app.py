"""The application tests/integration/test_paths.py serves on every way in: a plain ``Dispatcher`` (``rpc``)
and an ``MCPServer`` (``server``) with the same handlers and the same middleware.

Every handler exists three times, once per way a handler can run (``_inline``: sync with
``blocking=False``, run on the reader's turn; ``_async``: a coroutine; ``_thread``: sync, on the
pool of threads), because each is a different way for a call to go wrong. Every handler
returns an object, so an MCP tool's text content is the JSON of the same value a plain call
returns as its result.

- ``echo_*(text)``: ``{"echo": text}``; ``slow_async(text, ms)`` answers after ``ms``.
- ``fail_*(kind)``: raises what ``kind`` names: ``secret`` a ``RuntimeError`` whose text must
  never reach a client, ``exit`` ``sys.exit()``, ``interrupt`` ``KeyboardInterrupt``.
- ``whoami_*(ms=0)``: the principal of the request (subject, client, scopes; None without one),
  after ``ms`` (so that requests of two tokens are in flight together).
- ``intercepted_*``: answered by the middleware, never by the handler (which would raise).
- ``middleware_raises``: the middleware raises ``RuntimeError(SECRET)`` before the handler runs.
- ``admin``: an MCP tool that needs the ``paths:admin`` scope (a plain method has no scopes).

Run by ``sturdyrpc run tests/servers/paths_app.py:rpc`` or ``:server`` (stdio, ``--http``, any
number of workers), by tests/servers/paths_tcp.py over TCP, and imported in process.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from sturdyrpc import Context, Dispatcher, Limits
from sturdyrpc.mcp import MCPContext, MCPServer

#: Small bounds, so that breaching them is cheap on every path; the same for both servers.
LIMITS = Limits(max_message_bytes=64 * 1024, max_depth=32, max_batch=16)
#: The scope the ``admin`` tool needs (tests give tokens with and without it).
ADMIN_SCOPE = "paths:admin"
#: The text a ``fail_*("secret")`` raises: none of it may reach a client.
SECRET = "SECRET sk-live-4242 in /srv/paths/credentials"
#: What the middleware answers for ``intercepted_*`` (the handlers would raise).
MIDDLEWARE_ANSWER = {"answered_by": "middleware"}

rpc = Dispatcher(LIMITS)
server = MCPServer("paths", "1.0", limits=LIMITS)


def _raise(kind: str) -> dict[str, Any]:
    if kind == "exit":
        sys.exit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise RuntimeError(SECRET)


def _who(principal: Any) -> dict[str, Any] | None:
    if principal is None:
        return None
    subject = getattr(principal, "subject", principal)
    return {"subject": str(subject), "client": getattr(principal, "client_id", None),
            "scopes": sorted(getattr(principal, "scopes", ()))}


def echo_inline(text: str) -> dict[str, Any]:
    return {"echo": text}


async def echo_async(text: str) -> dict[str, Any]:
    return {"echo": text}


def echo_thread(text: str) -> dict[str, Any]:
    return {"echo": text}


async def slow_async(text: str, ms: int) -> dict[str, Any]:
    await asyncio.sleep(ms / 1000)
    return {"echo": text}


def fail_inline(kind: str) -> dict[str, Any]:
    return _raise(kind)


async def fail_async(kind: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return _raise(kind)


def fail_thread(kind: str) -> dict[str, Any]:
    return _raise(kind)


def intercepted_inline() -> dict[str, Any]:
    raise RuntimeError("the middleware answers this call")


async def intercepted_async() -> dict[str, Any]:
    raise RuntimeError("the middleware answers this call")


def intercepted_thread() -> dict[str, Any]:
    raise RuntimeError("the middleware answers this call")


def middleware_raises() -> dict[str, Any]:
    return {"reached": "the handler"}


INLINE = (echo_inline, fail_inline, intercepted_inline, middleware_raises)
OTHERS = (echo_async, echo_thread, slow_async, fail_async, fail_thread, intercepted_async, intercepted_thread)

for inline in INLINE:
    rpc.method(blocking=False)(inline)
    server.tool(blocking=False)(inline)
for other in OTHERS:
    rpc.method(other)
    server.tool()(other)


@rpc.method(blocking=False)
def whoami_inline(ctx: Context) -> dict[str, Any]:
    return {"principal": _who(ctx.principal)}


@rpc.method(name="whoami_async")
async def rpc_whoami_async(ctx: Context, ms: int = 0) -> dict[str, Any]:
    if ms:
        await asyncio.sleep(ms / 1000)
    return {"principal": _who(ctx.principal)}


@server.tool(name="whoami_inline", blocking=False)
def mcp_whoami_inline(ctx: MCPContext) -> dict[str, Any]:
    return {"principal": _who(ctx.principal)}


@server.tool(name="whoami_async")
async def mcp_whoami_async(ctx: MCPContext, ms: int = 0) -> dict[str, Any]:
    if ms:
        await asyncio.sleep(ms / 1000)
    return {"principal": _who(ctx.principal)}


@server.tool(scopes=[ADMIN_SCOPE], blocking=False)
def admin() -> dict[str, Any]:
    return {"admin": True}


def _intercepted(ctx: Context) -> bool:
    """Whether the middleware answers this request itself (and raises for ``middleware_raises``)."""
    params = ctx.params
    name = params.get("name") if ctx.method == "tools/call" and isinstance(params, dict) else ctx.method
    if name == "middleware_raises":
        raise RuntimeError(SECRET)
    return isinstance(name, str) and name.startswith("intercepted_")


@rpc.middleware
async def rpc_answers_intercepted(ctx: Context, call_next: Any) -> Any:
    if _intercepted(ctx):
        return dict(MIDDLEWARE_ANSWER)
    return await call_next(ctx)


@server.middleware
async def mcp_answers_intercepted(ctx: Context, call_next: Any) -> Any:
    if _intercepted(ctx):
        return {"content": [{"type": "text", "text": json.dumps(MIDDLEWARE_ANSWER)}], "isError": False}
    return await call_next(ctx)
