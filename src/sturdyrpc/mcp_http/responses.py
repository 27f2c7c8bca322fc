"""Writing SSE responses: the buffer a stream puts its events in, and the writer that sends it.

A logical stream (:class:`~.session.Stream`) puts events into the :class:`SSEResponse` attached
to it; :func:`pump` writes them to the client as they come. The status line waits until there is
something to send or :data:`HEADER_DELAY` passes, so that a quick reply leaves in one write with
its length; a quiet stream that stays open gets a comment line every ``keepalive`` seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..transports.asgi import Receive, Send, respond
from ..transports.http_layer import until_disconnect, wait_disconnect

__all__ = ["SSEResponse", "pump", "until_done_or_gone", "KEEPALIVE_INTERVAL", "HEADER_DELAY"]

#: Seconds of silence after which an open SSE stream gets a comment line (keep-alive), by
#: default (``StreamableHTTPApp(keepalive_interval=...)``, ``sturdyrpc run/demo --keepalive``).
KEEPALIVE_INTERVAL = 15.0

#: How long an SSE response may wait for its first event before the headers go out alone
#: (between one and two ticks of this length).
HEADER_DELAY = 0.025


class SSEResponse:
    """One HTTP response currently attached to a stream: SSE chunks waiting to be written.

    Chunks accumulate in a list and one waiter future wakes the writer, so that everything
    ready at once goes out in a single write (fewer syscalls than a queue read per chunk).
    """

    __slots__ = ("chunks", "ended", "closed", "waiter")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ended = False  # no more chunks will come: finish the response
        self.closed = False  # the client is gone (or the response is finished)
        self.waiter: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def put(self, chunk: bytes) -> None:
        if not self.closed and not self.ended:
            self.chunks.append(chunk)
            self._wake()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._wake()

    def gone(self) -> None:
        """The client disconnected."""
        self.closed = True
        self._wake()

    def take(self) -> bytes:
        out = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        return out


class _GenerationTimer:
    """Resolves registered futures after one to two ticks, with ONE timer for all of them.

    A timer per response costs more than the rest of a quick response's bookkeeping; responses
    only need "the headers go out soon if nothing else does", not a precise deadline.
    """

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.current: list[asyncio.Future[None]] = []
        self.previous: list[asyncio.Future[None]] = []
        self.handle: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def add(self, fut: asyncio.Future[None]) -> None:
        loop = fut.get_loop()
        if loop is not self.loop:
            # The timer is module-wide but a timer handle belongs to one event loop: an app served
            # again on a new loop (each asyncio.run) would otherwise wait for a handle whose loop is
            # gone, and its responses would never start (nor notice a disconnect).
            self.loop = loop
            self.current, self.previous, self.handle = [], [], None
        self.current.append(fut)
        if self.handle is None:
            self.handle = loop.call_later(self.tick, self._fire)

    def _fire(self) -> None:
        due, self.previous, self.current = self.previous, self.current, []
        for fut in due:
            if not fut.done():
                fut.set_result(None)
        self.handle = None
        if self.previous and self.loop is not None:
            self.handle = self.loop.call_later(self.tick, self._fire)


_header_timer = _GenerationTimer(HEADER_DELAY)


async def until_done_or_gone(fut: asyncio.Future[Any], receive: Receive) -> None:
    """Wait for ``fut`` or the client's disconnect, whichever first. Quick answers never pay for
    a disconnect watcher: it starts only after ``HEADER_DELAY``."""
    await until_disconnect(fut, receive, grace=HEADER_DELAY)


async def _watch_disconnect(receive: Receive, conn: SSEResponse) -> None:
    await wait_disconnect(receive)
    conn.gone()


async def pump(conn: SSEResponse, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]], head: bytes = b"",
               keepalive: float = KEEPALIVE_INTERVAL) -> bool:
    """Write an SSE response from ``conn`` until it ends (True) or the client disconnects (False).

    ``head`` goes first (a priming event, replayed events). The status line and headers wait
    until there is something to send or ``HEADER_DELAY`` passes, so a quick reply leaves in one
    write together with the headers' flush; a disconnect watcher is only started for responses
    that stay open longer than that.
    """
    loop: asyncio.AbstractEventLoop | None = None  # looked up only when there is something to wait for
    started = False
    watcher: asyncio.Task[None] | None = None
    pending = head
    try:
        while True:
            if not conn.chunks and not conn.ended and not conn.closed:
                if loop is None:
                    loop = asyncio.get_running_loop()
                fut: asyncio.Future[None] = loop.create_future()
                conn.waiter = fut
                if not started:
                    _header_timer.add(fut)
                    await fut
                else:
                    # A quiet open stream gets an SSE comment now and then, so that proxies and
                    # clients with idle-read timeouts do not take it for dead.
                    ping = loop.call_later(keepalive, conn.put, b":\n\n")
                    await fut
                    ping.cancel()
            if conn.closed:
                return False
            chunk = pending + conn.take() if conn.chunks else pending
            pending = b""
            if not started:
                started = True
                if conn.ended and not conn.chunks:
                    # Complete at its first write (a quick reply): one body with its length,
                    # no chunk framing, no terminating chunk.
                    conn.closed = True
                    await respond(send, 200, chunk, None, headers)
                    return True
                await send({"type": "http.response.start", "status": 200, "headers": headers})
            if conn.ended and not conn.chunks:
                conn.closed = True
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                return True
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if watcher is None:
                if loop is None:
                    loop = asyncio.get_running_loop()
                watcher = loop.create_task(_watch_disconnect(receive, conn))
    except OSError:
        conn.closed = True
        return False
    finally:
        if watcher is not None:
            watcher.cancel()
