"""The HTTP layer's lifecycle pieces: the ASGI lifespan, the one "wait for this or the client's
disconnect" helper, and what every wrapper uses to call the next one."""

from __future__ import annotations

import asyncio
import contextlib
import types
from collections.abc import Awaitable, Callable
from typing import Any

from ..asgi import ASGIApp, Receive, Scope, Send

__all__ = ["Lifespan", "LifespanContext", "wait_disconnect", "until_disconnect", "bound_call", "remember"]

LifespanContext = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def bound_call(app: ASGIApp) -> ASGIApp:
    """What to call to run ``app``: an object's ``__call__`` bound once (calling the object itself
    looks the method up again on every request, at every layer)."""
    if isinstance(app, (types.FunctionType, types.MethodType)):
        return app
    for klass in type(app).__mro__:
        func = klass.__dict__.get("__call__")
        if func is not None:
            return types.MethodType(func, app) if isinstance(func, types.FunctionType) else app
    return app


def remember(cache: dict[Any, Any], key: Any, value: Any, bound: int) -> None:
    """Keep a verdict by header value, up to ``bound`` of them (a client sending endless
    variations cannot grow the cache)."""
    if len(cache) < bound:
        cache[key] = value


# ------------------------------------------------------------------ lifespan


class Lifespan:
    """Answers the ASGI lifespan protocol; passes ``http`` scopes on; ends any other (websockets).

    At startup it enters ``context()`` when given (a failure is ``lifespan.startup.failed`` with
    the exception's message, for the server's log: the server stops, never half started); at
    shutdown it awaits ``on_shutdown()`` and then leaves the context.
    """

    def __init__(self, app: ASGIApp, *, context: LifespanContext | None = None,
                 on_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
        self.app = app
        self._next = bound_call(app)
        self.context = context
        self.on_shutdown = on_shutdown
        self._entered: contextlib.AbstractAsyncContextManager[Any] | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        kind = scope["type"]
        if kind == "http":
            return self._next(scope, receive, send)
        if kind == "lifespan":
            return self._lifespan(receive, send)
        return _nothing()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                if self.context is not None:
                    cm = self.context()
                    try:
                        await cm.__aenter__()
                    except Exception as exc:
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    self._entered = cm
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self.on_shutdown is not None:
                    await self.on_shutdown()
                entered, self._entered = self._entered, None
                if entered is not None:
                    await entered.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _nothing() -> None:
    return None  # returning closes a websocket this layer does not serve


# ------------------------------------------------------------------ disconnects


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has gone (``http.disconnect``), discarding anything else it sends."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def until_disconnect(fut: asyncio.Future[Any], receive: Receive, *, grace: float = 0.0) -> bool:
    """Wait for ``fut`` or the client's disconnect, whichever comes first: True when ``fut`` is
    done, False when the client left first (``fut`` is left as it is: the caller decides). With
    ``grace``, no disconnect watcher runs for the first ``grace`` seconds, so that quick answers
    never pay for one."""
    if grace > 0:
        done, _ = await asyncio.wait((fut,), timeout=grace)
        if done:
            return True
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait((fut, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    return fut.done()
