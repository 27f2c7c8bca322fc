"""GET (the session's standalone SSE stream, or a stream resumed with ``Last-Event-ID``) and
DELETE (the end of a session), on the app's session table."""

from __future__ import annotations

import time
from typing import Any

from ..transports.asgi import Receive, Send, respond
from .responses import pump
from .session import HTTPSession, primes
from .sessions import SessionTable

__all__ = ["SessionStreams"]


class SessionStreams:
    """Serves the GETs and DELETEs of the sessions in ``table``; ``retry_ms``: the SSE ``retry``
    hint of priming events; ``keepalive``: seconds of silence before a comment line."""

    def __init__(self, table: SessionTable, *, retry_ms: int | None, keepalive: float) -> None:
        self.table = table
        self.retry_ms = retry_ms
        self.keepalive = keepalive

    async def get(self, hx: dict[bytes, bytes], receive: Receive, send: Send, principal: Any) -> None:
        table = self.table
        found = table.find(hx.get(b"mcp-session-id"), principal)
        session = found if isinstance(found, HTTPSession) else await found
        session.last_active = time.monotonic()
        prime = primes(session) and table.events is not None
        last = hx.get(b"last-event-id")
        if last is not None:
            att = await table.resume(session, last.decode("latin-1"), prime=prime, retry_ms=self.retry_ms)
        else:
            att = await table.open_get(session, prime=prime, retry_ms=self.retry_ms)
        try:
            await pump(att.conn, receive, send, session.sse_headers, att.head, self.keepalive)
        finally:
            att.release()
            session.last_active = time.monotonic()

    async def delete(self, hx: dict[bytes, bytes], send: Send, principal: Any) -> None:
        found = self.table.find(hx.get(b"mcp-session-id"), principal)
        session = found if isinstance(found, HTTPSession) else await found
        await self.table.delete(session)
        await respond(send, 200)
