"""MCP Streamable HTTP server as an ASGI application: the endpoint and its wiring.

One endpoint (default ``/mcp``) serving two eras:

- **2025-03-26 .. 2025-11-25** (handshake era): POST (:mod:`.post`), GET and DELETE
  (:mod:`.get_delete`) with sessions, held by the app's session table (:mod:`.sessions`: in
  this process, :mod:`.local`, or in a shared store, :mod:`.shared`). Every session runs the MCP
  server over a :class:`~.session.SessionPipe` (the same server object as on stdio); see
  :mod:`.session` for how outgoing messages find their stream. With ``stateless=True`` there are
  no sessions: every POST gets a fresh, pre-initialized pipe, so any worker of a multi-process
  server can answer it.
- **2026-07-28** (``MCP-Protocol-Version: 2026-07-28``): POST only, no sessions; the request
  metadata headers are checked against the body and closing the response stream cancels the
  request (:mod:`.modern`).

Security on every request: the HTTP layer the plain JSON-RPC endpoint has too
(:func:`sturdyrpc.transports.http_layer.http_layer`: Host/Origin allow-lists and trusted proxies
(403), optional bearer auth (401), content negotiation (415, 406), the busy 503, body bound
(413) and deadline (408)); then the caps of the session table (503), session ids bound to the
principal that created them (another principal gets 404: session ids are never credentials).

Limits (:class:`~sturdyrpc.limits.Limits`, the MCP server's own when built by
:func:`~sturdyrpc.mcp_http.mcp_http_app`) apply as on stdio, in every mode: a body over
``max_message_bytes`` (413), nesting over ``max_depth`` or a batch over ``max_batch`` (400) gets
the same single -32600 error stdio sends, and nothing runs. Every request that will run (each
batch element) takes a slot of one server-wide :class:`~sturdyrpc.admission.Admission` of
``max_server_in_flight`` slots until it is answered; a POST that finds too few free slots gets
503 with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..admission import Admission
from ..auth.principal import UnidentifiedPrincipal, missing_scopes
from ..auth.resource_server import insufficient_scope_refusal
from ..envelope import Envelope, Refused, read
from ..errors import RPCError
from ..limits import DEFAULT_LIMITS, Limits
from ..mcp.versions import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from ..request_context import current_principal
from ..store import StoreUnavailable
from ..transports.asgi import HTTPRefusal, HTTPSecurity, Receive, Scope, Send, error_body, header, header_index, refuse, respond
from ..transports.http_layer import JSON, SSE, http_layer
from .events import REPLAY_WINDOW, EventStore, MemoryEventStore
from .get_delete import SessionStreams
from .local import LocalSessions
from .modern import HeaderProblem, ModernHandler, ModernPost, ParamHeaders, header_version, is_modern_request, send_problem
from .post import HandshakePost, params_of
from .responses import KEEPALIVE_INTERVAL
from .session import HTTPSession
from .sessions import (
    EVICT_IDLE_AFTER,
    STORE_UNAVAILABLE,
    OpenPeer,
    Serving,
    SessionCaps,
    SessionTable,
    TableFactory,
    store_unavailable,
)

__all__ = ["StreamableHTTPApp", "OpenPeer", "ModernHandler", "KEEPALIVE_INTERVAL", "STORE_UNAVAILABLE"]

log = logging.getLogger("sturdyrpc.http")

#: The media types a POST may be answered with (the first one that Accept admits, per ``json_response``).
_POST_TYPES = (SSE, JSON)


def _not_allowed() -> HTTPRefusal:
    return HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])


class StreamableHTTPApp:
    """The MCP endpoint. ``open_peer(session)`` makes the peer that serves one session on its pipe;
    ``modern`` (optional) serves 2026-07-28 requests statelessly (each read once by the app).

    Options: ``json_response`` (answer requests with ``application/json`` instead of an SSE
    stream), ``stateless`` (no sessions in the handshake era), ``event_store`` (resumability;
    in-memory by default, None disables it), ``retry_ms`` (the SSE ``retry`` hint),
    ``replay_window`` (seconds a finished stream stays resumable in the default event store and
    in a shared one), the caps of the session table (:class:`~.sessions.SessionCaps`):
    ``max_sessions``, ``max_sessions_per_principal`` (authenticated principals only),
    ``max_streams_per_session``, ``session_idle_timeout`` (seconds without a request or an open
    response), ``evict_idle_after`` (seconds a session must have been idle before ``max_sessions``
    may end it for a new one); ``limits`` (message size, depth, batch size and the server-wide
    in-flight cap; ``max_depth`` overrides ``limits.max_depth``), ``table`` (builds the session
    table from a :class:`~.sessions.Serving`; default :class:`~.local.LocalSessions`;
    :func:`~sturdyrpc.mcp_http.mcp_http_app` gives a :class:`~.shared.SharedSessions` for
    ``store="redis://..."``), ``keepalive_interval`` (seconds of silence after which an open SSE
    stream gets a comment line, so that proxies and clients with idle timeouts keep it; default
    :data:`~.responses.KEEPALIVE_INTERVAL`), ``param_headers`` (a tool's SEP-2243 ``Mcp-Param-*``
    headers by tool name, checked against a 2026-07-28 ``tools/call``'s arguments; None: not checked).
    """

    def __init__(
        self,
        open_peer: OpenPeer,
        *,
        modern: ModernHandler | None = None,
        path: str | None = "/mcp",
        security: HTTPSecurity | None = None,
        json_response: bool = False,
        stateless: bool = False,
        event_store: EventStore | None | bool = True,
        retry_ms: int | None = 1000,
        replay_window: float = REPLAY_WINDOW,
        max_sessions: int = 1000,
        max_sessions_per_principal: int = 16,
        max_streams_per_session: int = 64,
        session_idle_timeout: float = 600.0,
        evict_idle_after: float = EVICT_IDLE_AFTER,
        limits: Limits | None = None,
        max_depth: int | None = None,
        handshake_versions: tuple[str, ...] = HANDSHAKE_VERSIONS,
        modern_versions: tuple[str, ...] = MODERN_VERSIONS,
        lifespan: Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None = None,
        table: TableFactory | None = None,
        scopes_for: Callable[[str, Any], frozenset[str]] | None = None,
        keepalive_interval: float | None = None,
        param_headers: ParamHeaders | None = None,
    ) -> None:
        if keepalive_interval is not None and not keepalive_interval > 0:
            raise ValueError("keepalive_interval must be positive")
        #: ``scopes_for(method, params)``: the OAuth scopes a request needs (checked against the
        #: request's principal before it runs: 403 ``insufficient_scope``); None: no per-request scopes.
        self.scopes_for = scopes_for
        self._path = path
        self.security = security or HTTPSecurity()
        self.json_response = json_response
        self.stateless = stateless
        self.retry_ms = retry_ms
        self.session_idle_timeout = session_idle_timeout
        #: Seconds of silence after which an open SSE stream gets a comment line.
        self.keepalive_interval = KEEPALIVE_INTERVAL if keepalive_interval is None else float(keepalive_interval)
        self.limits = limits or DEFAULT_LIMITS
        self.max_depth = self.limits.max_depth if max_depth is None else max_depth
        self._read_limits = dataclasses.replace(self.limits, max_depth=self.max_depth)
        #: Requests running now across all sessions and modes (batch elements each).
        self.admission = Admission(self.limits.max_server_in_flight)
        self.handshake_versions = handshake_versions
        self.modern_versions = modern_versions if modern is not None else ()
        #: ``MCP-Protocol-Version`` values seen, as sent (None: no header) -> the supported version
        #: they name, and whether it is a 2026-07-28-era one.
        self._versions_seen: dict[bytes | None, tuple[str | None, bool]] = {None: (None, False)}
        caps = SessionCaps(max_sessions=max_sessions, max_sessions_per_principal=max_sessions_per_principal,
                           max_streams_per_session=max_streams_per_session, idle_timeout=session_idle_timeout,
                           evict_idle_after=evict_idle_after)
        events = MemoryEventStore(replay_window=replay_window) if event_store is True else (event_store or None)
        #: Where the handshake-era sessions live (:class:`~.sessions.SessionTable`).
        self.table: SessionTable = (table or LocalSessions)(Serving(open_peer, self.admission, caps, events, replay_window))
        check = self._check_scopes if scopes_for is not None else None
        self._handshake = HandshakePost(self.table, self.admission, stateless=stateless, json_response=json_response,
                                        check_scopes=check, retry_ms=retry_ms, keepalive=self.keepalive_interval)
        self._streams = SessionStreams(self.table, retry_ms=retry_ms, keepalive=self.keepalive_interval)
        self._modern = None if modern is None else ModernPost(modern, self.admission, versions=list(self.modern_versions),
                                                                  check_scopes=check, keepalive=self.keepalive_interval,
                                                                  param_headers=param_headers)
        # MCP over HTTP: an error body that answers no readable message has no id (the spec allows
        # it on HTTP from 2025-03-26 on; the schemas from 2025-11-25 have no null id).
        self._layer = http_layer(self.table.guard(self._endpoint), security=self.security, admission=self.admission,
                                 max_message_bytes=self.limits.max_message_bytes, path=path,
                                 methods=("POST",) if stateless else ("GET", "POST", "DELETE"),
                                 produces={"POST": _POST_TYPES, "GET": (SSE,)}, null_id=False,
                                 may_free=_in_session, lifespan=lifespan, on_shutdown=self.aclose)

    @property
    def path(self) -> str | None:
        """The endpoint's path (None: any path)."""
        return self._path

    @property
    def sessions(self) -> Mapping[str, HTTPSession]:
        """The sessions this process holds now, by id (read only)."""
        return self.table.sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._layer(scope, receive, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request the HTTP layer let through (a POST's body read whole)."""
        principal = current_principal.get()
        hx = header_index(scope)  # the request's headers, indexed once
        try:
            if scope["method"] != "POST":
                await self._get_or_delete(scope["method"], hx, receive, send, principal)
                return
            sse_ok, json_ok = scope["sturdyrpc.media"]  # as the layer negotiated them (_POST_TYPES; one at least)
            got = read(scope["sturdyrpc.body"], self._read_limits)  # the one decode of this POST (the layer read it whole)
            try:
                version, modern = self._versions_seen.get(hx.get(b"mcp-protocol-version")) or self._header_version(hx)
            except _Problem as p:
                # the error answers the request: it carries its id when the body has a readable one
                sent_id = got.id if type(got) is Envelope else None
                await send_problem(send, p.problem, sent_id if type(sent_id) in (str, int) else None)
                return
            if type(got) is Refused:
                await self._refused(send, got.error)
            elif modern:
                await self._modern.serve(hx, receive, send, got, version, sse_ok)  # type: ignore[union-attr, arg-type]  # (modern: a version)
            elif version is None and self.modern_versions and is_modern_request(got):
                # a 2026-07-28 request (its _meta says so) without the required header: HeaderMismatch
                id_ = got.id  # type: ignore[union-attr]
                await send_problem(send, HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header is required"),
                                   id_ if type(id_) in (str, int) else None)
            else:
                await self._handshake.serve(hx, receive, send, got, version, sse_ok, json_ok, principal)
        except HTTPRefusal as r:
            await refuse(send, r, with_null_id=False)
        except UnidentifiedPrincipal as exc:
            # The verifier's principals cannot be told apart (see identity_of): nothing is bound to them.
            log.error("MCP session refused: %s; the verifier must return principals with a well-defined identity", exc)
            await respond(send, 500, error_body(-32603, "Internal error", with_null_id=False))
        except StoreUnavailable as exc:
            await store_unavailable(send, exc)

    async def _get_or_delete(self, method: str, hx: dict[bytes, bytes], receive: Receive, send: Send, principal: Any) -> None:
        if self.stateless:
            raise _not_allowed()
        try:
            _, modern = self._header_version(hx)
        except _Problem:
            raise _not_allowed() from None
        if modern:  # 2026-07-28 has no sessions: 405
            raise _not_allowed()
        if method == "GET":
            await self._streams.get(hx, receive, send, principal)
        else:
            await self._streams.delete(hx, send, principal)

    def _header_version(self, hx: dict[bytes, bytes]) -> tuple[str | None, bool]:
        """The version ``MCP-Protocol-Version`` names (None: no header) and whether it is a
        2026-07-28-era one; 400 for one not supported."""
        raw = hx.get(b"mcp-protocol-version")
        known = self._versions_seen.get(raw)
        if known is not None:
            return known
        assert raw is not None  # (no header is known from the start)
        try:
            known = header_version(raw, self.handshake_versions, self.modern_versions)
        except HeaderProblem as p:
            raise _Problem(p) from None
        if len(self._versions_seen) < 64:
            self._versions_seen[raw] = known
        return known

    def _check_scopes(self, principal: Any, requests: list[Envelope]) -> None:
        """403 ``insufficient_scope`` unless ``principal`` holds the scopes of every request (a
        batch is refused whole: nothing of it runs)."""
        assert self.scopes_for is not None
        for r in requests:
            needed = self.scopes_for(r.method, params_of(r))  # type: ignore[arg-type]
            if needed and missing_scopes(principal, needed):
                raise insufficient_scope_refusal(self.security.auth, principal, needed)

    @staticmethod
    async def _refused(send: Send, err: RPCError) -> None:
        """400 for a body that cannot be read as a message: the error stdio sends for it, without
        an id (an HTTP error body may have none; the schemas from 2025-11-25 have no null id)."""
        if err.message == "Invalid Request":
            raise HTTPRefusal(400, -32600, "Invalid Request: empty batch")
        await respond(send, 400, error_body(err.code, err.message, with_null_id=False, data=err.data if err.has_data else None))

    async def aclose(self) -> None:
        """End every session (server shutdown)."""
        await self.table.aclose()


def _in_session(scope: Scope) -> bool:
    """Whether a POST belongs to a session: it may carry only a cancellation or the client's
    answers to server-to-client requests, which running requests need to finish. The layer lets
    such a POST through a full server; :class:`~.post.HandshakePost` counts its slots decoded."""
    return header(scope, b"mcp-session-id") is not None


class _Problem(Exception):
    def __init__(self, problem: HeaderProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem
