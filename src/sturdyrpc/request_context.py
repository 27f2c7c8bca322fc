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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatch import Call

__all__ = ["current_call", "current_headers", "current_principal", "current_session", "request_principal"]

#: The call whose handler is running in this task (None outside handlers). Transports that route
#: messages by the request they belong to (Streamable HTTP puts a request's progress and
#: notifications on that request's own response stream) read it when a message is sent.
current_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("sturdyrpc_current_call", default=None)

#: The headers of the HTTP request being served (lower-case names; repeated ones joined with
#: ", "), set by the HTTP transports beside :data:`current_principal`; None off HTTP.
current_headers: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("sturdyrpc_headers", default=None)

#: The authenticated principal of the HTTP request being served (None without auth), set by the
#: HTTP transports before anything of the request runs. Everything the request starts runs in a
#: copy of the request's context and sees it: a handler of a plain HTTP or 2026-07-28 request, a
#: request of a Streamable HTTP session (fed to the session's peer from the POST that carried
#: it), a task a tool started (its creating request's). Read it with :func:`request_principal`.
current_principal: contextvars.ContextVar[Any] = contextvars.ContextVar("sturdyrpc_principal", default=None)


def request_principal() -> Any:
    """The principal of the request being served (None without authentication)."""
    return current_principal.get()


#: The protocol session of the request being served (MCP: its ``SessionState``); None where the
#: protocol has none. Typed loosely because the session's type lives in a layer above this one.
current_session: contextvars.ContextVar[Any] = contextvars.ContextVar("sturdyrpc_session", default=None)
