"""The request at hand: one neutral home for what a handler may ask about the request it serves.

Transports and protocol layers set these context variables before a handler runs; the handler,
the middleware and the protocol's helpers read them. Each asyncio task runs in a copy of its
creator's context, so a value set for one request is never seen by another.

- :data:`current_call` -- the call whose handler is running (set by the runner);
- :data:`current_headers` -- the HTTP request's headers (None off HTTP);
- :data:`current_principal` -- the authenticated principal of the HTTP request that started the
  running code (None without auth); :func:`request_principal` -- the principal of the request
  being served, which is what handlers and ``ctx.principal`` see;
- :data:`current_session` -- the protocol session the request belongs to (MCP: its
  ``SessionState``; None for plain JSON-RPC).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatch import Call

__all__ = ["current_call", "current_headers", "current_principal", "current_session", "principal_source", "request_principal"]

#: The call whose handler is running in this task (None outside handlers). Transports that route
#: messages by the request they belong to (Streamable HTTP puts a request's progress and
#: notifications on that request's own response stream) read it when a message is sent.
current_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("sturdyrpc_current_call", default=None)

#: The headers of the HTTP request being served (lower-case names; repeated ones joined with
#: ", "), set by the HTTP transports beside :data:`current_principal`; None off HTTP.
current_headers: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("sturdyrpc_headers", default=None)

#: The authenticated principal of the HTTP request being served (None without auth), set by the
#: HTTP transports. Code started by a request sees it: a handler of a plain HTTP or 2026-07-28
#: request, and a task made by a tool (its creating request's). The server of a Streamable HTTP
#: session runs in a task of its own, started by the session's first request: it reads each
#: request's principal through :data:`principal_source`. Read :func:`request_principal`.
current_principal: contextvars.ContextVar[Any] = contextvars.ContextVar("sturdyrpc_principal", default=None)

#: Set by a transport whose connection outlives one HTTP request (a Streamable HTTP session):
#: ``principal_of(request_id)``, the principal of the HTTP request that carried the request
#: with that id (``None``: no request at hand, e.g. a notification), each request's own token.
principal_source: contextvars.ContextVar[Callable[[Any], Any] | None] = contextvars.ContextVar(
    "sturdyrpc_principal_source", default=None)


def request_principal() -> Any:
    """The principal of the request being served (None without authentication): the one of the
    request :data:`current_call` names where the transport tracks them (:data:`principal_source`),
    else :data:`current_principal`."""
    source = principal_source.get()
    if source is None:
        return current_principal.get()
    call = current_call.get()
    return source(None if call is None else call.request_id)

#: The protocol session of the request being served (MCP: its ``SessionState``); None where the
#: protocol has none. Typed loosely because the session's type lives in a layer above this one.
current_session: contextvars.ContextVar[Any] = contextvars.ContextVar("sturdyrpc_session", default=None)
