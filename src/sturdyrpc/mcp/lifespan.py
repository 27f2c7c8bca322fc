"""The server's lifespan: startup before the first request, shutdown after the last, once per process.

``MCPServer(lifespan=fn)`` takes ``fn(server)`` returning an async context manager (an
``@contextlib.asynccontextmanager`` function, or a plain async generator function). What it
yields is ``ctx.lifespan`` in every handler and middleware. Every transport enters it through
:meth:`LifespanRunner.running`: stdio before reading stdin, the HTTP app on the ASGI lifespan
startup, the test client before connecting. Entries nest (an HTTP app and a test client in the
same process): the first runs the startup, the last to leave runs the shutdown.

A startup that raises is a :class:`LifespanError`: the transports stop with its message and a
non-zero exit instead of serving half started.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["Lifespan", "LifespanError", "LifespanRunner"]

log = logging.getLogger("sturdyrpc.mcp")

#: ``fn(server)`` -> an async context manager (or an async generator yielding once).
Lifespan = Callable[[Any], Any]


class LifespanError(RuntimeError):
    """The lifespan's startup failed; the message says why (the cause is chained)."""


class LifespanRunner:
    """Runs one server's lifespan at most once at a time, shared by every transport of the process.

    ``fn(server)`` is called with ``server``: the object the user registered on (the
    :class:`~sturdyrpc.mcp.server.MCPServer`); ``on_start(server)`` runs on each entry first.
    """

    def __init__(self, server: Any, fn: Lifespan | None, on_start: Callable[[Any], None] | None = None) -> None:
        self.server = server
        self.fn = fn
        #: ``on_start(server)`` on each entry, before the startup (OpenTelemetry's check: see
        #: :func:`.serving.telemetry`).
        self.on_start = on_start
        #: What the lifespan yielded while it runs (None otherwise).
        self.value: Any = None
        self._users = 0
        self._cm: Any = None
        self._lock: asyncio.Lock | None = None
        #: The lifespans of mounted servers, run inside this one.
        self.children: list[LifespanRunner] = []

    @property
    def active(self) -> bool:
        """Whether the startup has run and the shutdown has not."""
        return self._cm is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Any]:
        """Startup on the first entry (raises :class:`LifespanError` when it fails), shutdown when
        the last entry leaves; yields the lifespan's value. The lifespans of mounted servers
        (:meth:`nest`) run inside this one: started after it, stopped before it."""
        if self.on_start is not None:
            self.on_start(self.server)
        async with contextlib.AsyncExitStack() as stack:
            value = await stack.enter_async_context(self._own())
            for child in list(self.children):
                await stack.enter_async_context(child.running())
            yield value

    def nest(self, child: LifespanRunner) -> None:
        """Run ``child`` (a mounted server's lifespan) inside this one from the next entry on."""
        if child.holds(self):
            raise ValueError("a server cannot be mounted in itself (directly or through the servers mounted in it)")
        self.children.append(child)

    def holds(self, other: LifespanRunner) -> bool:
        """Whether ``other`` is this lifespan or one nested in it, at any depth."""
        return other is self or any(c.holds(other) for c in self.children)

    @contextlib.asynccontextmanager
    async def _own(self) -> AsyncIterator[Any]:
        if self.fn is None:
            yield None
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._users == 0:
                await self._startup()
            self._users += 1
        try:
            yield self.value
        finally:
            self._users -= 1
            if self._users == 0:
                await self._shutdown()
                self._lock = None

    async def _startup(self) -> None:
        assert self.fn is not None
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        try:
            cm = self.fn(self.server)
            if inspect.isasyncgen(cm):
                gen = cm
                cm = contextlib.asynccontextmanager(lambda: gen)()
            if not hasattr(cm, "__aenter__"):
                raise TypeError(f"{name}(server) must return an async context manager, not {type(cm).__name__}")
            self.value = await cm.__aenter__()
        except Exception as exc:
            self.value = None
            raise LifespanError(f"lifespan startup failed in {name}(): {type(exc).__name__}: {exc}") from exc
        self._cm = cm

    async def _shutdown(self) -> None:
        cm, self._cm = self._cm, None
        try:
            if cm is not None:
                await cm.__aexit__(None, None, None)
        except Exception:
            log.exception("the lifespan failed at shutdown")
        finally:
            self.value = None
