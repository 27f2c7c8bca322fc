"""Serving an :class:`~sturdyrpc.mcp.MCPServer` over Streamable HTTP: the glue between the two.

``mcp_http_app(server)`` returns the ASGI app; every handshake-era session runs the same
server object as stdio does (:meth:`MCPServer.create_peer` on the session's pipe), and
2026-07-28 requests go to :meth:`MCPServer.serve_stateless`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..mcp.server import MCPServer
from ..peer import Peer
from ..store import Store, open_store
from .server import StreamableHTTPApp
from .session import HTTPSession, SessionPipe, note_outgoing
from .sessions import Serving
from .shared import SharedSessions

__all__ = ["mcp_http_app", "outgoing_tagger"]


def outgoing_tagger(pipe: SessionPipe) -> Callable[[bytes], None]:
    """A peer's ``on_enqueue`` that tags each message a handler queues with the request being handled.

    The peer writes from its own task, where the handler's :data:`~sturdyrpc.request_context.current_call`
    is no longer visible; tagging at queue time keeps which request a notification or a
    server-to-client request belongs to, so it goes out on that request's SSE stream.
    """
    return lambda data: note_outgoing(pipe, data)


def mcp_http_app(server: MCPServer, *, store: Store | str | None = None, **options: Any) -> StreamableHTTPApp:
    """The Streamable HTTP ASGI app for ``server`` (options: see :class:`StreamableHTTPApp`).

    ``store``: where sessions live. None or ``"memory"``: in this process (the default, and the
    fastest). A shared store (``"redis://host:port/db"`` or a :class:`~sturdyrpc.store.Store`
    whose ``shared`` is True): any worker serves any session (the app's session table is a
    :class:`~.shared.SharedSessions`), and the server's ``requestState`` keys are shared through it too.
    """
    if isinstance(store, str):
        store = open_store(store)
    if store is not None and store.shared:
        shared_store = store

        def shared_table(serving: Serving) -> SharedSessions:
            table = SharedSessions(serving, shared_store, signer=server.request_state, notify_local=server.listeners.publish)
            # tasks polled, fetched, cancelled through any worker; session notifications to every worker
            server.share(shared_store, worker=table.tag, fanout=table.fanout)
            return table

        options["table"] = shared_table

    def open_peer(http: HTTPSession) -> tuple[Peer, Any]:
        peer = server.create_peer(http.pipe, name="mcp-http", session_id=http.id, principal=http.principal,
                                  on_enqueue=outgoing_tagger(http.pipe))
        return peer, server.session_of(peer)

    options.setdefault("modern", server.serve_stateless)  # each 2026-07-28 request on its own, read once by the app
    options.setdefault("limits", server.dispatcher.limits)  # the same limits as the server has on stdio
    options.setdefault("lifespan", server.lifespan.running)
    options.setdefault("scopes_for", server.required_scopes)  # per-tool/resource/prompt scopes= (over auth only)
    options.setdefault("param_headers", server.param_headers)  # SEP-2243 Mcp-Param-* headers of tools/call
    return StreamableHTTPApp(open_peer, **options)
