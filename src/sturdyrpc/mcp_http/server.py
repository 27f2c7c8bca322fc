"""MCP Streamable HTTP server as an ASGI application.

One endpoint (default ``/mcp``) serving two eras:

- **2025-03-26 .. 2025-11-25** (handshake era): POST / GET / DELETE with sessions. Every session
  runs the MCP server over a :class:`~.session.SessionPipe` (the same server object as on stdio);
  see :mod:`.session` for how outgoing messages find their stream. With ``stateless=True``
  there are no sessions: every POST gets a fresh, pre-initialized pipe, so any worker of a
  multi-process server can answer it.
- **2026-07-28** (``MCP-Protocol-Version: 2026-07-28``): POST only, no sessions; the request
  metadata headers are checked against the body (:mod:`.modern`) and closing the response
  stream cancels the request.

Security on every request: the HTTP layer the plain JSON-RPC endpoint has too
(:func:`sturdyrpc.transports.http_layer.http_layer`: Host/Origin allow-lists and trusted proxies
(403), optional bearer auth (401), content negotiation (415, 406), the busy 503, body bound
(413) and deadline (408)); then caps on sessions and open streams (503), session ids bound to
the principal that created them (another principal gets 404: session ids are never credentials).

Limits (:class:`~sturdyrpc.limits.Limits`, the MCP server's own when built by
:func:`~sturdyrpc.mcp_http.mcp_http_app`) apply as on stdio, in every mode: a body over
``max_message_bytes`` (413), nesting over ``max_depth`` or a batch over ``max_batch`` (400) gets
the same single -32600 error stdio sends, and nothing runs. Every request that will run (each
batch element) takes a slot of one server-wide :class:`~sturdyrpc.admission.Admission` of
``max_server_in_flight`` slots until it is answered; a POST that finds too few free slots gets
503 with ``Retry-After``.

Sessions idle (no request and no open response) for ``session_idle_timeout`` seconds end on a
timer. At ``max_sessions`` a new session evicts the least recently active one (idle ones
first), and an authenticated principal at ``max_sessions_per_principal`` evicts its own least
recently active session: an abandoned client can never lock anyone out.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import codec
from ..admission import Admission
from ..auth.principal import missing_scopes, principal_source
from ..auth.resource_server import insufficient_scope_refusal
from ..errors import InvalidRequest, RPCError
from ..limits import DEFAULT_LIMITS, Limits
from ..mcp.versions import HANDSHAKE_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS
from ..messages import InvalidMessage, classify
from ..request_context import current_headers, current_principal
from ..store import StoreUnavailable
from ..transports.asgi import (
    HTTPRefusal,
    HTTPSecurity,
    Receive,
    Scope,
    Send,
    error_body,
    header,
    header_index,
    refuse,
    refuse_busy,
    respond,
)
from ..transports.http_layer import JSON, SSE, http_layer, until_disconnect, wait_disconnect
from .events import SSE_HEADERS, EventStore, MemoryEventStore, sse_event, sse_priming
from .modern import HeaderProblem, check_modern_headers
from .session import HTTPSession, Key, SSEResponse, Stream, current_http_session, key_of

if TYPE_CHECKING:
    from .shared import SharedSessions

__all__ = ["StreamableHTTPApp", "ServeSession", "ModernHandler"]

log = logging.getLogger("sturdyrpc.http")

#: Runs the MCP server over one session's transport until the transport closes.
ServeSession = Callable[[Any], Awaitable[None]]
#: Serves one 2026-07-28 message: ``(body, emit)`` -> reply bytes (None for a notification),
#: or an awaitable of them. ``emit(bytes)`` sends a notification related to the request before
#: the reply (:meth:`sturdyrpc.mcp.MCPServer.handle_stateless` has this shape;
#: :meth:`~sturdyrpc.mcp.MCPServer.start_stateless` returns a reply that is ready at once as it is,
#: which spares the request a task).
ModernHandler = Callable[[bytes, Callable[[bytes], Awaitable[None]]], Awaitable[bytes | None] | bytes | None]

_STATELESS_INIT_ID = "sturdyrpc-stateless-init"

#: The JSON-RPC error code of a request refused because the shared session store is unavailable
#: (an implementation-defined server error, -32000..-32099; HTTP 503 with ``Retry-After``).
STORE_UNAVAILABLE = -32001

#: The reply to a batch element that is no JSON-RPC message (its id cannot be read: null, as 2025-03-26 wants).


#: The media types a POST may be answered with (the first one that Accept admits, per ``json_response``).
_POST_TYPES = (SSE, JSON)


class StreamableHTTPApp:
    """The MCP endpoint. ``serve_session(transport)`` runs the MCP server on one session's pipe;
    ``modern`` (optional) serves 2026-07-28 requests statelessly; ``modern_early`` (optional)
    answers those it can at once (:meth:`~sturdyrpc.mcp.MCPServer.answer_stateless_now`).

    Options: ``json_response`` (answer requests with ``application/json`` instead of an SSE
    stream), ``stateless`` (no sessions in the handshake era), ``event_store`` (resumability;
    in-memory by default, None disables it), ``retry_ms`` (the SSE ``retry`` hint),
    ``max_sessions``, ``max_sessions_per_principal`` (authenticated principals only),
    ``max_streams_per_session``, ``session_idle_timeout`` (seconds without a request or an
    open response), ``limits`` (message size, depth, batch size and the server-wide
    in-flight cap; ``max_depth`` overrides ``limits.max_depth``), ``shared`` (a
    :class:`~.shared.SharedSessions`: sessions live in a shared store and any worker serves
    them; :func:`~sturdyrpc.mcp_http.mcp_http_app` sets it for ``store="redis://..."``),
    ``keepalive_interval`` (seconds of silence after which an open SSE stream gets a comment
    line, so that proxies and clients with idle timeouts keep it; default
    :data:`KEEPALIVE_INTERVAL`).
    """

    def __init__(
        self,
        serve_session: ServeSession,
        *,
        modern: ModernHandler | None = None,
        modern_early: Callable[[bytes, Any], bytes | None] | None = None,
        path: str | None = "/mcp",
        security: HTTPSecurity | None = None,
        json_response: bool = False,
        stateless: bool = False,
        event_store: EventStore | None | bool = True,
        retry_ms: int | None = 1000,
        max_sessions: int = 1000,
        max_sessions_per_principal: int = 16,
        max_streams_per_session: int = 64,
        session_idle_timeout: float = 600.0,
        limits: Limits | None = None,
        max_depth: int | None = None,
        handshake_versions: tuple[str, ...] = HANDSHAKE_VERSIONS,
        modern_versions: tuple[str, ...] = MODERN_VERSIONS,
        lifespan: Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None = None,
        shared: SharedSessions | None = None,
        scopes_for: Callable[[str, Any], frozenset[str]] | None = None,
        keepalive_interval: float | None = None,
    ) -> None:
        self.serve_session = serve_session
        #: Entered on the ASGI lifespan startup, left at its shutdown (the MCP server's lifespan).
        self.lifespan = lifespan
        #: ``scopes_for(method, params)``: the OAuth scopes a request needs (checked against the
        #: request's principal before it runs: 403 ``insufficient_scope``); None: no per-request scopes.
        self.scopes_for = scopes_for
        self.modern = modern
        #: ``answer(body, decoded) -> reply | None``: a 2026-07-28 request the server answers at
        #: once, answered on the POST's own turn (None: ``modern`` serves it).
        self.modern_early = modern_early
        #: Whether ``modern`` takes ``decoded=`` (the body as decoded here: not decoded twice).
        self._modern_decoded = _takes_decoded(modern)
        self._path = path
        self.security = security or HTTPSecurity()
        self.json_response = json_response
        self.stateless = stateless
        self.store: EventStore | None = MemoryEventStore() if event_store is True else (event_store or None)
        self.retry_ms = retry_ms
        self.max_sessions = max_sessions
        self.max_sessions_per_principal = max_sessions_per_principal
        self.max_streams_per_session = max_streams_per_session
        self.session_idle_timeout = session_idle_timeout
        self.limits = limits or DEFAULT_LIMITS
        self.max_depth = self.limits.max_depth if max_depth is None else max_depth
        self.max_body_bytes = min(self.security.max_body_bytes, self.limits.max_message_bytes)
        #: Requests running now across all sessions and modes (batch elements each).
        self.admission = Admission(self.limits.max_server_in_flight)
        self._sweeper: asyncio.Task[None] | None = None
        self.handshake_versions = handshake_versions
        self.modern_versions = modern_versions if modern is not None else ()
        self._modern_list = list(self.modern_versions)  # as the header check names them
        self.sessions: dict[str, HTTPSession] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        #: Sessions kept in a shared store, so that any worker serves any session (:mod:`.shared`).
        self.shared = shared
        if shared is not None:
            shared.bind(self)
            self.store = shared.events
        #: ``MCP-Protocol-Version`` values seen, as sent -> the supported version they name.
        self._versions_seen: dict[bytes, str] = {}
        if keepalive_interval is not None and not keepalive_interval > 0:
            raise ValueError("keepalive_interval must be positive")
        #: Seconds of silence after which an open SSE stream gets a comment line.
        self.keepalive_interval = KEEPALIVE_INTERVAL if keepalive_interval is None else float(keepalive_interval)
        # MCP's schema has no null id: refusals carry none (null_id=False).
        self._layer = http_layer(self._endpoint, security=self.security, admission=self.admission,
                                 max_message_bytes=self.limits.max_message_bytes, path=path,
                                 methods=("POST",) if stateless else ("GET", "POST", "DELETE"),
                                 produces={"POST": _POST_TYPES, "GET": (SSE,)}, null_id=False,
                                 may_free=_in_session, lifespan=lifespan, on_shutdown=self.aclose)

    @property
    def path(self) -> str | None:
        """The endpoint's path (None: any path)."""
        return self._path

    # ------------------------------------------------------------------ entry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._layer(scope, receive, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request the HTTP layer let through (a POST's body read whole)."""
        principal = current_principal.get()
        try:
            if self.shared is not None:
                await self.shared.ready()
            method = scope["method"]
            if method == "POST":
                await self._post(scope, receive, send, principal)
            elif method == "GET":
                await self._get(scope, receive, send, principal)
            else:
                await self._delete(scope, send, principal)
        except HTTPRefusal as r:
            await refuse(send, r, with_null_id=False)
        except StoreUnavailable as exc:
            # The shared store is down or slow: say so (the worker stays up; the next request tries again).
            log.warning("%s", exc)
            err = {"code": STORE_UNAVAILABLE, "message": f"Session store unavailable: {exc.store}", "data": {"store": exc.store}}
            await respond(send, 503, codec.encode({"jsonrpc": "2.0", "error": err}), extra=[(b"retry-after", b"1")])

    # -------------------------------------------------------------- versions

    def _header_version(self, scope: Scope) -> str | None:
        raw = header(scope, b"mcp-protocol-version")
        if raw is None:
            return None
        known = self._versions_seen.get(raw)
        if known is not None:
            return known
        v = raw.decode("latin-1").strip()
        if v in self.handshake_versions or v in self.modern_versions:
            if len(self._versions_seen) < 64:
                self._versions_seen[raw] = v
            return v
        if self.modern is not None and v > self.handshake_versions[-1]:
            supported = list(self.handshake_versions) + list(self.modern_versions)
            raise _Problem(HeaderProblem(400, -32022, "Unsupported protocol version", {"supported": supported, "requested": v}))
        raise HTTPRefusal(400, -32600, "Bad Request: unsupported MCP-Protocol-Version")

    # ------------------------------------------------------------------ POST

    async def _post(self, scope: Scope, receive: Receive, send: Send, principal: Any) -> None:
        hx = header_index(scope)  # the request's headers, indexed once
        sse_ok, json_ok = scope["sturdyrpc.media"]  # as the layer negotiated them (_POST_TYPES; one at least)
        body = (await receive())["body"]  # the layer handed the whole body on
        try:
            version = self._header_version(scope)
        except _Problem as p:
            await _send_problem(send, p.problem, None)
            return
        try:
            obj = codec.decode_bounded(body, self.max_depth)
        except codec.DecodeFailure as exc:
            if exc.too_deep:
                await respond(send, 400, _limit_error("Nesting too deep", "max_depth", self.max_depth))
            else:
                await respond(send, 400, error_body(-32700, "Parse error", with_null_id=False))
            return
        if type(obj) is list and len(obj) > self.limits.max_batch:
            # As on stdio: one error for the whole batch, and none of it runs.
            await respond(send, 400, _limit_error("Batch too large", "max_batch", self.limits.max_batch))
            return
        if version is not None and version in self.modern_versions:
            await self._post_modern(scope, receive, send, body, obj, version, sse_ok)
            return
        if version is None and self.modern_versions and _modern_envelope(obj):
            # a 2026-07-28 request (its _meta says so) without the required header: HeaderMismatch
            id_ = obj.get("id")
            await _send_problem(send, HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header is required"),
                                id_ if type(id_) in (str, int) else None)
            return
        items = obj if type(obj) is list else [obj]
        if not items:
            raise HTTPRefusal(400, -32600, "Invalid Request: empty batch")
        batch = type(obj) is list
        requests: list[dict[str, Any]] = []
        request_keys: list[Key] = []
        is_init = False
        # JSON-RPC §6: in a batch, each element that is no valid message gets its own -32600 in the
        # reply array (a request reusing an id of the same batch too); the others are served.
        invalid: list[bytes] = []
        valid: list[Any] = items
        cancels: list[Any] = []
        if not batch and _kind(obj) == "request":
            # The usual POST, one request: what the loop below makes of it, without the loop.
            requests.append(obj)
            request_keys.append(key_of(obj["id"]))
            is_init = obj["method"] == "initialize"
        else:
            valid = self._sort_out(items, batch, requests, request_keys, invalid, cancels)
            is_init = any(r["method"] == "initialize" for r in requests)
        items = valid
        # A batch is fed element by element (the server answers each alone); a single message as it came.
        raw = None if batch else body
        if self.scopes_for is not None and principal is not None:
            self._check_scopes(principal, requests)
        if is_init and batch:
            raise HTTPRefusal(400, -32600, "Invalid Request: initialize must not be part of a batch")
        # Every request that will run holds a server-wide slot from here until it is answered.
        if requests and not (self.admission.try_acquire() if len(requests) == 1 else self._admit(len(requests))):
            await refuse_busy(send, with_null_id=False)
            return
        slots = len(requests)
        try:
            if self.stateless:
                session = await self._stateless_session(version, principal, skip_init=is_init)
            elif is_init:
                if hx.get(b"mcp-session-id") is not None:
                    raise HTTPRefusal(400, -32600, "Bad Request: initialize must not carry Mcp-Session-Id")
                session = self._new_session(principal)
                if self.shared is not None:
                    await self.shared.created(session, requests[0].get("params"))
            else:
                session = self._find_session(scope, principal) if self.shared is None else await self.shared.find(scope, principal)
        except BaseException:
            self._give_back(slots)
            raise
        try:
            if batch and session.version not in (None, "2025-03-26"):
                raise HTTPRefusal(400, -32600, "Invalid Request: batches are not supported in this protocol version")
            session.last_active = time.monotonic()
            extra = session.response_headers
            for id_ in cancels:
                session.cancelled(id_)
            if not requests and not invalid:
                await self._feed(session, items, raw)
                await respond(send, 202, b"", extra=extra)
                return
            for k in request_keys:
                if session.key_in_flight(k):
                    raise HTTPRefusal(409, -32600, "Conflict: a request with this id is already in flight")
            if len(session.streams) >= self.max_streams_per_session:
                raise HTTPRefusal(503, -32600, "Too many open streams", [(b"retry-after", b"1")])
            use_sse = sse_ok and (not self.json_response or not json_ok)
            if requests and not batch and not is_init and session.shared is None:
                # A single request the server answers at once (a tools/call of an inline tool on
                # a negotiated session: the one tools/call path, entered before the session's
                # queues) is answered on this turn. Nothing else runs between taking it and
                # sending the reply, so no other request can see it in flight: it needs no
                # stream, and there is nothing to resume (as with a JSON reply): no priming
                # event (it primes a stream that stays open, SEP-1699), no event id, no
                # event-store write. Not for a shared session: its requests pass through the
                # store first (.shared).
                early = session.pipe.answer_now(body, obj)
                if early is not None:
                    try:
                        if use_sse:
                            await respond(send, 200, sse_event(early), None, session.sse_whole_headers)
                        else:
                            await respond(send, 200, early, extra=extra)
                    except OSError:
                        pass  # the client is gone: nothing to answer
                    return
            if not requests:
                # Only invalid elements need an answer (the rest are notifications or responses): reply now.
                await self._feed(session, items, raw)
                if use_sse:
                    await respond(send, 200, b"".join(sse_event(e) for e in invalid), None, session.sse_headers)
                else:
                    await respond(send, 200, b"[" + b",".join(invalid) + b"]", extra=extra)
                return
            stream = session.open_stream([r["id"] for r in requests], [r.get("params") for r in requests], holds_slots=True,
                                         keys=request_keys)
            stream.headers = current_headers.get()
            slots = 0  # the session gives them back as the requests finish
            if use_sse:
                await self._answer_sse(session, stream, items, raw, invalid, receive, send, prime=not is_init)
            else:
                await self._answer_json(session, stream, items, raw, invalid, receive, send, extra)
        finally:
            self._give_back(slots)
            session.last_active = time.monotonic()  # idle time counts from the end of the last response
            if self.stateless:
                await session.end()

    @staticmethod
    def _sort_out(items: list[Any], batch: bool, requests: list[dict[str, Any]], request_keys: list[Key],
                  invalid: list[bytes], cancels: list[Any]) -> list[Any]:
        """Sort a POST's messages: requests (and their keys), -32600 errors of invalid batch
        elements, ids of cancelled requests; returns the valid messages."""
        valid: list[Any] = []
        seen: set[Key] = set()
        for m in items:
            kind = _kind(m)
            if kind is None:
                err = _why_invalid(m)
                if not batch:
                    raise HTTPRefusal(400, -32600, err.message if err is not None else "Invalid Request: not a JSON-RPC message")
                if err is None:
                    err = InvalidRequest("Invalid Request")
                invalid.append(codec.encode({"jsonrpc": "2.0", "error": err.to_dict(), "id": None}))
                continue
            if kind == "request":
                k = key_of(m["id"])
                if k in seen:
                    invalid.append(codec.encode({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"},
                                                 "id": m["id"]}))
                    continue
                seen.add(k)
                requests.append(m)
                request_keys.append(k)
            elif kind == "notification" and m["method"] == "notifications/cancelled":
                params = m.get("params")
                if type(params) is dict and type(params.get("requestId")) in (str, int):
                    cancels.append(params["requestId"])
            valid.append(m)
        return valid

    def _check_scopes(self, principal: Any, requests: list[dict[str, Any]]) -> None:
        """403 ``insufficient_scope`` unless ``principal`` holds the scopes of every request (a
        batch is refused whole: nothing of it runs)."""
        assert self.scopes_for is not None
        for r in requests:
            needed = self.scopes_for(r["method"], r.get("params"))
            if needed and missing_scopes(principal, needed):
                raise insufficient_scope_refusal(self.security.auth, principal, needed)

    def _admit(self, n: int) -> bool:
        """Take ``n`` server-wide slots, all or none."""
        if n == 1:
            return self.admission.try_acquire()
        for taken in range(n):
            if not self.admission.try_acquire():
                self._give_back(taken)
                return False
        return True

    def _give_back(self, n: int) -> None:
        if n == 1:
            self.admission.release()
            return
        for _ in range(n):
            self.admission.release()

    async def _feed(self, session: HTTPSession, items: list[Any], body: bytes | None) -> None:
        """Feed a single message (``body``, as received) or a batch's elements (``body`` None) one by one."""
        if session.shared is not None:
            items, body = await session.shared.incoming(session, items, body)
        if body is not None:
            await session.pipe.feed(body)
        else:
            for m in items:
                await session.pipe.feed(codec.encode(m))

    async def _answer_sse(self, session: HTTPSession, stream: Stream, items: list[Any], body: bytes | None,
                          invalid: list[bytes], receive: Receive, send: Send, *, prime: bool) -> None:
        conn = SSEResponse()
        stream.attach(conn)
        head = b""
        if prime and self._primes(session) and self.store is not None and session.id is not None:
            try:
                head = sse_priming(await self.store.store(session.id, stream.id, None), self.retry_ms)
            except StoreUnavailable as exc:  # the requests are open already: answer them, without a priming event
                log.warning("no priming event: %s", exc)
        for e in invalid:  # a batch's invalid elements: their -32600 errors, each its own event like the replies
            await stream.emit(e)
        await self._feed(session, items, body)
        await self._pump(conn, receive, send, session.sse_headers, head)
        stream.detach(conn)

    async def _answer_json(self, session: HTTPSession, stream: Stream, items: list[Any], body: bytes | None,
                           invalid: list[bytes], receive: Receive, send: Send, extra: list[tuple[bytes, bytes]]) -> None:
        waiter: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        stream.json_waiter = waiter
        stream.json_replies.extend(invalid)  # a batch's invalid elements: -32600 each, in the reply array
        await self._feed(session, items, body)
        if not waiter.done():
            await _until_done_or_gone(waiter, receive)
        if not waiter.done():
            waiter.cancel()  # the client left; the requests keep running (2025: a disconnect is no cancel)
            return
        replies = waiter.result()
        out = replies[0] if body is not None else b"[" + b",".join(replies) + b"]"  # a batch always gets an array
        await respond(send, 200, out, extra=extra)

    def _primes(self, session: HTTPSession) -> bool:
        # The priming event is from 2025-11-25 (SEP-1699); older clients may not expect empty data.
        return session.version is not None and session.version >= "2025-11-25" and self.store is not None

    async def _pump(self, conn: SSEResponse, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]],
                    head: bytes = b"") -> bool:
        """Write an SSE response from ``conn`` until it ends (True) or the client disconnects (False).

        The status line and headers wait until there is something to send or ``HEADER_DELAY``
        passes, so a quick reply leaves in one write together with the headers' flush; a
        disconnect watcher is only started for responses that stay open longer than that.
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
                        ping = loop.call_later(self.keepalive_interval, conn.put, b":\n\n")
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

    # --------------------------------------------------------------- sessions

    def _new_session(self, principal: Any) -> HTTPSession:
        self._expire_idle()
        if principal is not None:
            own = [s for s in self.sessions.values() if s.principal == principal and not s.ended]
            if len(own) >= self.max_sessions_per_principal:
                # The principal's own least recently active session goes (a client that crashed
                # never sends DELETE); the client holding it gets 404 and initializes again.
                self._evict(own, "its principal opened more than max_sessions_per_principal")
        if len(self.sessions) >= self.max_sessions:
            # Refusing would let whoever filled the table lock every other client out until the
            # idle timeout; evicting the least recently active session keeps the server usable.
            self._evict(list(self.sessions.values()), "the server reached max_sessions")
        sid = secrets.token_urlsafe(32)  # 256 random bits, visible ASCII (A-Z a-z 0-9 - _)
        session = HTTPSession(sid, principal, self.store, admission=self.admission)
        self.sessions[sid] = session
        session.on_end = self._forget
        self._start(session)
        self._ensure_sweeper()
        return session

    def _evict(self, candidates: list[HTTPSession], why: str) -> None:
        """End the least recently active of ``candidates``, preferring one with no open response."""
        victim = min(candidates, key=lambda s: (s.has_open_response(), s.last_active))
        log.info("MCP session %s evicted: %s", (victim.id or "")[:8], why)
        if victim.id is not None:
            self.sessions.pop(victim.id, None)  # gone at once, even before its end() has run
        self._end_later(victim)

    def _end_later(self, session: HTTPSession) -> None:
        t = asyncio.get_running_loop().create_task(session.end())
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _ensure_sweeper(self) -> None:
        """Idle sessions end on a timer, not only when someone opens a new one."""
        loop = asyncio.get_running_loop()
        t = self._sweeper
        if t is not None and not t.done() and t.get_loop() is loop:
            return
        self._sweeper = loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        interval = max(0.01, min(60.0, self.session_idle_timeout / 4))
        while self.sessions:
            await asyncio.sleep(interval)
            self._expire_idle()

    async def _forget(self, session: HTTPSession) -> None:
        if session.id is not None and self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        if session.shared is not None:
            session.shared.forget(session)

    def add_session(self, session_id: str, principal: Any) -> HTTPSession:
        """Register and start a session with a known id (a shared session this worker serves
        for the first time; :mod:`.shared` then replays its ``initialize``)."""
        session = HTTPSession(session_id, principal, self.store, admission=self.admission)
        self.sessions[session_id] = session
        session.on_end = self._forget
        self._start(session)
        self._ensure_sweeper()
        return session

    def end_session(self, session: HTTPSession) -> None:
        """End ``session`` on this worker soon (it was deleted or expired elsewhere)."""
        if session.id is not None and self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        self._end_later(session)

    def _start(self, session: HTTPSession) -> None:
        async def run() -> None:
            current_http_session.set(session)
            principal_source.set(lambda: session.principal)
            try:
                await self.serve_session(session.pipe)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("MCP session %s failed", "(stateless)" if session.id is None else session.id[:8])
            finally:
                await session.end()

        task = asyncio.get_running_loop().create_task(run())
        session.task = task
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _find_session(self, scope: Scope, principal: Any) -> HTTPSession:
        raw = header(scope, b"mcp-session-id")
        if raw is None:
            raise HTTPRefusal(400, -32600, "Bad Request: Mcp-Session-Id header is required")
        session = self.sessions.get(raw.decode("latin-1"))
        # Another principal's session looks exactly like an unknown one: ids are not credentials.
        if session is None or session.ended or session.principal != principal:
            raise HTTPRefusal(404, -32600, "Session not found")
        # The same principal, with this request's token (a refresh or step-up may change its
        # scopes): what the session's server sees from now on (principal_source).
        session.principal = principal
        return session

    def _expire_idle(self) -> None:
        now = time.monotonic()
        for s in list(self.sessions.values()):
            if now - s.last_active > self.session_idle_timeout and not s.has_open_response():
                if s.id is not None:
                    self.sessions.pop(s.id, None)
                self._end_later(s)

    async def _stateless_session(self, version: str | None, principal: Any, *, skip_init: bool) -> HTTPSession:
        """A throw-away session for one POST: initialized behind the scenes unless the POST is the
        initialize itself, so that no state has to survive between requests (any worker answers)."""
        session = HTTPSession(None, principal, None, admission=self.admission)
        self._start(session)
        if not skip_init:
            v = version or "2025-03-26"
            session.version = v
            init_stream = session.open_stream([_STATELESS_INIT_ID], [None])
            waiter: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
            init_stream.json_waiter = waiter
            await session.pipe.feed(codec.encode({
                "jsonrpc": "2.0", "id": _STATELESS_INIT_ID, "method": "initialize",
                "params": {"protocolVersion": v, "capabilities": {}, "clientInfo": {"name": "stateless-http", "version": "0"}},
            }))
            await asyncio.wait_for(waiter, 30)
            session.version = v
            await session.pipe.feed(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return session

    # ------------------------------------------------------------------- GET

    async def _get(self, scope: Scope, receive: Receive, send: Send, principal: Any) -> None:
        if self.stateless:
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])
        try:
            version = self._header_version(scope)
        except _Problem:
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")]) from None
        if version is not None and version in self.modern_versions:
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])
        session = self._find_session(scope, principal) if self.shared is None else await self.shared.find(scope, principal)
        session.last_active = time.monotonic()
        extra = [(b"mcp-session-id", session.id.encode("ascii"))] if session.id else []
        last = header(scope, b"last-event-id")
        if self.shared is not None:
            try:
                if last is not None:
                    await self.shared.resume(session, last.decode("latin-1"), receive, send, SSE_HEADERS + extra, self._pump)
                else:
                    await self.shared.serve_get(session, receive, send, SSE_HEADERS + extra, self._pump,
                                                prime=self._primes(session), retry_ms=self.retry_ms)
            finally:
                session.last_active = time.monotonic()
            return
        if last is not None and self.store is not None and session.id is not None:
            await self._resume(session, last.decode("latin-1"), receive, send, extra)
            return
        st = session.standalone
        if (st is None or st.finished) and len(session.streams) >= self.max_streams_per_session:
            raise HTTPRefusal(503, -32600, "Too many open streams", [(b"retry-after", b"1")])
        st = session.open_standalone()
        conn = SSEResponse()
        # A new GET replaces the one still open (its response ends cleanly): a client that
        # reconnects before the server noticed the old connection is gone must not be refused.
        st.attach(conn)
        head = b""
        if self._primes(session) and self.store is not None and session.id is not None:
            eid = await self.store.store(session.id, st.id, None)
            head = sse_priming(eid, self.retry_ms)
        for data in session.take_held():
            await st.emit(data)
        try:
            await self._pump(conn, receive, send, SSE_HEADERS + extra, head)
        finally:
            st.detach(conn)
            session.last_active = time.monotonic()

    async def _resume(self, session: HTTPSession, last_event_id: str, receive: Receive, send: Send,
                      extra: list[tuple[bytes, bytes]]) -> None:
        assert self.store is not None and session.id is not None
        found = await self.store.replay_after(session.id, last_event_id)
        if found is None:
            raise HTTPRefusal(400, -32600, "Bad Request: unknown Last-Event-ID")
        stream_id, events = found
        st = session.streams.get(stream_id)
        conn = SSEResponse()
        if st is not None and not st.finished:
            st.attach(conn)  # events from now on go to this connection; older ones are replayed first
        else:
            conn.end()
        replay = b"".join(sse_event(data, eid) for eid, data in events)
        await self._pump(conn, receive, send, SSE_HEADERS + extra, replay)
        if st is not None:
            st.detach(conn)

    # ---------------------------------------------------------------- DELETE

    async def _delete(self, scope: Scope, send: Send, principal: Any) -> None:
        if self.stateless:
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])
        try:
            version = self._header_version(scope)
        except _Problem:
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")]) from None
        if version is not None and version in self.modern_versions:  # 2026-07-28 has no sessions: 405, as for GET
            raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])
        if self.shared is not None:
            session = await self.shared.find(scope, principal)
            await self.shared.delete(session)
        else:
            session = self._find_session(scope, principal)
        await session.end()
        await respond(send, 200)

    # ---------------------------------------------------------------- modern

    async def _post_modern(self, scope: Scope, receive: Receive, send: Send, body: bytes, obj: Any, version: str,
                           sse_ok: bool) -> None:
        assert self.modern is not None
        if type(obj) is not dict:
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a single JSON-RPC message")
        kind = _kind(obj)
        if kind is None or kind == "response":
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a request or a notification")
        id_ = obj.get("id")
        try:
            check_modern_headers(obj, version, self._modern_list, header_index(scope))
        except HeaderProblem as p:
            await _send_problem(send, p, id_)
            return
        if kind == "notification":
            started = self._call_modern(body, _drop, obj)
            if started is not None and not isinstance(started, bytes):
                await started
            await respond(send, 202)
            return
        principal = current_principal.get()
        if self.scopes_for is not None and principal is not None:
            self._check_scopes(principal, [obj])
        if not sse_ok and obj.get("method") == "subscriptions/listen":
            # the listen channel IS this response's SSE stream; a JSON-only client cannot have one
            raise HTTPRefusal(406, -32600, "Not Acceptable: subscriptions/listen needs Accept: text/event-stream")
        if not self.admission.try_acquire():
            await refuse_busy(send, with_null_id=False)
            return
        try:
            early = self.modern_early
            reply = early(body, obj) if early is not None else None
            if reply is not None:  # answered at once: no task, no timer, no watcher
                await respond(send, 200 if b'"error"' not in reply else _status_for(reply), reply)
                return
            await self._run_modern(receive, send, body, id_, sse_ok, obj)
        finally:
            self.admission.release()

    def _call_modern(self, body: bytes, emit: Callable[[bytes], Awaitable[None]], obj: Any) -> Any:
        assert self.modern is not None
        if self._modern_decoded:
            return self.modern(body, emit, decoded=(obj, self.max_depth))  # type: ignore[call-arg]
        return self.modern(body, emit)

    async def _run_modern(self, receive: Receive, send: Send, body: bytes, id_: Any, sse_ok: bool, obj: Any = None) -> None:
        assert self.modern is not None
        started = False

        async def emit(data: bytes) -> None:
            nonlocal started
            if not sse_ok:
                return  # a JSON-only client gets the reply alone
            if not started:
                started = True
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": sse_event(data), "more_body": True})

        try:
            started_reply = self._call_modern(body, emit, obj)
        except Exception:
            log.exception("2026-07-28 request failed in the server")
            started_reply = codec.encode({"jsonrpc": "2.0", "id": id_, "error": {"code": -32603, "message": "Internal error"}})
        if started_reply is None or isinstance(started_reply, bytes):
            # answered at once (an inline tool, an error): no task, no timer, no watcher
            if started_reply is None:
                await respond(send, 202)
            else:
                await respond(send, _status_for(started_reply), started_reply)
            return
        task = asyncio.ensure_future(started_reply)
        done, _ = await asyncio.wait((task,), timeout=HEADER_DELAY)
        if not done:
            # A slow request: watch for the client leaving, and keep a quiet stream alive.
            gone = asyncio.ensure_future(wait_disconnect(receive))
            try:
                while not task.done():
                    await asyncio.wait((task, gone), timeout=self.keepalive_interval, return_when=asyncio.FIRST_COMPLETED)
                    if gone.done():
                        task.cancel()  # 2026-07-28: closing the response stream IS the cancellation
                        return
                    if not task.done() and sse_ok:
                        if not started:
                            started = True
                            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                        await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
            finally:
                gone.cancel()
        try:
            reply = task.result()
        except Exception:
            log.exception("2026-07-28 request failed in the server")
            reply = codec.encode({"jsonrpc": "2.0", "id": id_, "error": {"code": -32603, "message": "Internal error"}})
        if started:
            if reply is not None:
                await send({"type": "http.response.body", "body": sse_event(reply), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if reply is None:
            await respond(send, 202)
            return
        await respond(send, _status_for(reply), reply)

    # ------------------------------------------------------------- lifecycle

    async def aclose(self) -> None:
        """End every session (server shutdown)."""
        for s in list(self.sessions.values()):
            await s.end()
        if self.shared is not None:
            await self.shared.aclose()
        for t in list(self._bg):
            t.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


def _in_session(scope: Scope) -> bool:
    """Whether a POST belongs to a session: it may carry only a cancellation or the client's
    answers to server-to-client requests, which running requests need to finish. The layer lets
    such a POST through a full server; :meth:`StreamableHTTPApp._post` counts its slots decoded."""
    return header(scope, b"mcp-session-id") is not None


class _Problem(Exception):
    def __init__(self, problem: HeaderProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


async def _send_problem(send: Send, p: HeaderProblem, id_: Any) -> None:
    await respond(send, p.status, codec.encode(p.error(id_)))


def _limit_error(message: str, limit: str, value: int) -> bytes:
    """The error stdio sends for a breached limit (same class, message and data; id null)."""
    return codec.encode({"jsonrpc": "2.0", "error": InvalidRequest(message, {"limit": limit, "max": value}).to_dict(), "id": None})


async def _drop(data: bytes) -> None:
    return None


def _status_for(reply: bytes) -> int:
    """HTTP status of a 2026-07-28 JSON reply: 404 for an unknown method, 400 for a request the client got wrong."""
    if b'"error"' not in reply:
        return 200
    try:
        obj = codec.decode(reply)
    except Exception:
        return 200
    err = obj.get("error") if type(obj) is dict else None
    code = err.get("code") if type(err) is dict else None
    return _MODERN_STATUS.get(code, 200) if type(code) is int else 200


#: 2026-07-28: HTTP status of a JSON error reply (the same table as the official SDKs).
_MODERN_STATUS = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400, -32601: 404}


def _takes_decoded(handler: Any) -> bool:
    if handler is None:
        return False
    try:
        return "decoded" in inspect.signature(handler).parameters
    except (TypeError, ValueError):
        return False


def _modern_envelope(obj: Any) -> bool:
    """Whether ``obj`` is a request whose ``_meta`` names a 2026-07-28-era protocol version."""
    if type(obj) is not dict or "id" not in obj or obj.get("method") == "initialize":
        return False  # notifications: this revision defines no header rules for them; initialize is legacy
    params = obj.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
    return type(v) is str and v not in HANDSHAKE_VERSIONS


def _why_invalid(m: Any) -> RPCError | None:
    """What to answer a message that is none of the shapes served here: the core's own reason
    (e.g. an id that cannot be echoed exactly, naming the bound) when it has one."""
    try:
        classify(m)
    except InvalidMessage as bad:
        if bad.error.code == -32600 and bad.error.message != "Invalid Request":
            return bad.error
    return None


def _kind(m: Any) -> str | None:
    if type(m) is not dict or m.get("jsonrpc") != "2.0":
        return None
    if "method" in m:
        if type(m["method"]) is not str:
            return None
        if "id" in m:
            i = m["id"]
            return "request" if type(i) in (str, int) else None
        return "notification"
    if "id" in m and ("result" in m or "error" in m):
        return "response"
    return None


#: Seconds of silence after which an open SSE stream gets a comment line (keep-alive), by
#: default (``StreamableHTTPApp(keepalive_interval=...)``, ``sturdyrpc run/demo --keepalive``).
KEEPALIVE_INTERVAL = 15.0

#: How long an SSE response may wait for its first event before the headers go out alone
#: (between one and two ticks of this length).
HEADER_DELAY = 0.025


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


async def _until_done_or_gone(fut: asyncio.Future[Any], receive: Receive) -> None:
    """Wait for ``fut`` or the client's disconnect, whichever first. Quick answers never pay for
    a disconnect watcher: it starts only after ``HEADER_DELAY``."""
    await until_disconnect(fut, receive, grace=HEADER_DELAY)


async def _watch_disconnect(receive: Receive, conn: SSEResponse) -> None:
    await wait_disconnect(receive)
    conn.gone()
