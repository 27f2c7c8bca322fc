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
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import codec
from ..admission import Admission
from ..auth.principal import UnidentifiedPrincipal, identity_of, missing_scopes
from ..auth.resource_server import insufficient_scope_refusal
from ..envelope import UNSET, Envelope, Refused, from_message, read
from ..errors import InvalidRequest, RPCError
from ..limits import DEFAULT_LIMITS, Limits
from ..mcp.versions import HANDSHAKE_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS
from ..messages import InvalidMessage, Notification, Request
from ..peer import Peer
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
from .session import HTTPSession, Key, PostReplies, ReplyWaiter, SSEResponse, Stream, key_of

if TYPE_CHECKING:
    from ..mcp.stateless import StatelessRequest
    from .shared import SharedSessions

__all__ = ["StreamableHTTPApp", "OpenPeer", "ModernHandler"]

log = logging.getLogger("sturdyrpc.http")

#: ``open_peer(session) -> (peer, state)``: the peer (not started) that serves one handshake-era
#: session on its pipe, and the protocol's state of the session (made current for its requests).
OpenPeer = Callable[[HTTPSession], tuple[Peer, Any]]
#: Starts serving one 2026-07-28 message read already: ``(read, emit)`` -> the request, ``done``
#: at once when its reply is ready, else awaited with ``wait()`` (cancelled with ``cancel()``).
#: ``emit(bytes)`` sends a notification related to the request before the reply
#: (:meth:`sturdyrpc.mcp.MCPServer.serve_stateless` has this shape).
ModernHandler = Callable[[Any, Callable[[bytes], Awaitable[None]]], "StatelessRequest"]

_STATELESS_INIT_ID = "sturdyrpc-stateless-init"

#: The JSON-RPC error code of a request refused because the shared session store is unavailable
#: (an implementation-defined server error, -32000..-32099; HTTP 503 with ``Retry-After``).
STORE_UNAVAILABLE = -32001

#: The reply to a batch element that is no JSON-RPC message (its id cannot be read: null, as 2025-03-26 wants).


#: The media types a POST may be answered with (the first one that Accept admits, per ``json_response``).
_POST_TYPES = (SSE, JSON)


class StreamableHTTPApp:
    """The MCP endpoint. ``open_peer(session)`` makes the peer that serves one session on its pipe;
    ``modern`` (optional) serves 2026-07-28 requests statelessly (each read once by the app).

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
        open_peer: OpenPeer,
        *,
        modern: ModernHandler | None = None,
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
        self.open_peer = open_peer
        #: Entered on the ASGI lifespan startup, left at its shutdown (the MCP server's lifespan).
        self.lifespan = lifespan
        #: ``scopes_for(method, params)``: the OAuth scopes a request needs (checked against the
        #: request's principal before it runs: 403 ``insufficient_scope``); None: no per-request scopes.
        self.scopes_for = scopes_for
        self.modern = modern
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
        self._read_limits = dataclasses.replace(self.limits, max_depth=self.max_depth)
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
        # MCP over HTTP: an error body that answers no readable message has no id (the spec allows
        # it on HTTP from 2025-03-26 on; the schemas from 2025-11-25 have no null id).
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
        except UnidentifiedPrincipal as exc:
            # The verifier's principals cannot be told apart (see identity_of): nothing is bound to them.
            log.error("MCP session refused: %s; the verifier must return principals with a well-defined identity", exc)
            await respond(send, 500, error_body(-32603, "Internal error", with_null_id=False))
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
        got = read(body, self._read_limits)  # the one decode of this POST
        if type(got) is Refused:
            await self._refused(send, got.error, False)
            return
        if version is not None and version in self.modern_versions:
            await self._post_modern(scope, receive, send, got, version, sse_ok)
            return
        if version is None and self.modern_versions and _modern_envelope(got):
            # a 2026-07-28 request (its _meta says so) without the required header: HeaderMismatch
            id_ = got.id  # type: ignore[union-attr]
            await _send_problem(send, HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header is required"),
                                id_ if type(id_) in (str, int) else None)
            return
        batch = type(got) is list
        msgs = _sort_out(got if batch else [got], batch)  # type: ignore[arg-type, list-item]
        requests = msgs.requests
        is_init = any(r.method == "initialize" for r in requests)
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
                    await self.shared.created(session, _params(requests[0]))
            else:
                session = self._find_session(scope, principal) if self.shared is None else await self.shared.find(scope, principal)
        except BaseException:
            self._give_back(slots)
            raise
        try:
            slots = await self._serve_post(session, msgs, batch, is_init, sse_ok, json_ok, receive, send, slots)
        finally:
            self._give_back(slots)
            session.last_active = time.monotonic()  # idle time counts from the end of the last response
            if self.stateless:
                await session.end()

    async def _serve_post(self, session: HTTPSession, msgs: _Sorted, batch: bool, is_init: bool, sse_ok: bool, json_ok: bool,
                          receive: Receive, send: Send, slots: int) -> int:
        """Serve a POST's messages on ``session``; returns how many of its ``slots`` are still the
        POST's to give back (the others went with the requests to their stream)."""
        if batch and session.version not in (None, "2025-03-26"):
            raise HTTPRefusal(400, -32600, "Invalid Request: batches are not supported in this protocol version")
        session.last_active = time.monotonic()
        extra = session.response_headers
        requests, invalid = msgs.requests, msgs.invalid
        for id_ in msgs.cancels:
            session.cancelled(id_)
        if requests:
            for k in msgs.keys:
                if session.key_in_flight(k):
                    raise HTTPRefusal(409, -32600, "Conflict: a request with this id is already in flight")
            if len(session.streams) >= self.max_streams_per_session:
                raise HTTPRefusal(503, -32600, "Too many open streams", [(b"retry-after", b"1")])
        post = PostReplies(session)
        await self._feed(session, msgs, post)
        use_sse = sse_ok and (not self.json_response or not json_ok)
        if not requests and not invalid:
            await respond(send, 202, b"", extra=extra)
            return slots
        pending = [(k, r) for k, r in zip(msgs.keys, requests, strict=True) if k not in post.ready]
        if not pending:
            # Every request was answered on this turn (inline handlers: the runner answers them
            # before feeding returns), so no other request could see one in flight: no stream,
            # nothing to resume (no priming event, event id or store write; SEP-1699 primes a
            # stream that stays open), the replies sent whole as the POST's body.
            if self.shared is not None and requests:
                await self.shared.before_response(session)  # other workers see what they changed first
            replies = [post.ready[k] for k in msgs.keys] + invalid
            try:
                if use_sse:
                    await respond(send, 200, b"".join(sse_event(e) for e in replies), None,
                                  session.sse_whole_headers if requests else session.sse_headers)
                else:
                    await respond(send, 200, replies[0] if not batch else b"[" + b",".join(replies) + b"]", extra=extra)
            except OSError:
                pass  # the client is gone: nothing to answer
            return slots
        stream = session.open_stream([r.id for _, r in pending], [_params(r) for _, r in pending], holds_slots=True,
                                     keys=[k for k, _ in pending])
        stream.headers = current_headers.get()
        slots -= len(pending)  # the session gives them back as the requests finish
        post.open(stream)
        early = [post.ready[k] for k in msgs.keys if k in post.ready]
        if use_sse:
            await self._answer_sse(session, stream, early + invalid, receive, send, prime=not is_init)
        else:
            await self._answer_json(stream, early + invalid, batch, receive, send, extra)
        return slots

    def _check_scopes(self, principal: Any, requests: list[Envelope]) -> None:
        """403 ``insufficient_scope`` unless ``principal`` holds the scopes of every request (a
        batch is refused whole: nothing of it runs)."""
        assert self.scopes_for is not None
        for r in requests:
            needed = self.scopes_for(r.method, _params(r))  # type: ignore[arg-type]
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

    @staticmethod
    async def _refused(send: Send, err: RPCError, null_id: bool) -> None:
        """400 for a body that cannot be read as a message: the error stdio sends for it, its id
        by the version's rule (``null_id``: ``"id": null``, else none)."""
        if err.message == "Invalid Request":
            raise HTTPRefusal(400, -32600, "Invalid Request: empty batch")
        await respond(send, 400, error_body(err.code, err.message, with_null_id=null_id, data=err.data if err.has_data else None))

    async def _feed(self, session: HTTPSession, msgs: _Sorted, post: PostReplies) -> None:
        """Hand a POST's messages to the session's peer, in order, each request's reply going to
        ``post``. A shared session first sends answers and cancellations meant for another
        worker there (:mod:`.shared`)."""
        items = msgs.valid
        if session.shared is not None:
            items = await session.shared.incoming(session, items)
        feed = session.feed
        for m in items:
            if m.method is not UNSET and m.id is not UNSET:
                feed(m, post.origin(key_of(m.id)))
            else:
                feed(m, None)

    async def _answer_sse(self, session: HTTPSession, stream: Stream, early: list[bytes], receive: Receive, send: Send, *,
                          prime: bool) -> None:
        conn = SSEResponse()
        stream.attach(conn)
        head = b""
        if prime and self._primes(session) and self.store is not None and session.id is not None:
            try:
                head = sse_priming(await self.store.store(session.id, stream.id, None), self.retry_ms)
            except StoreUnavailable as exc:  # the requests are open already: answer them, without a priming event
                log.warning("no priming event: %s", exc)
        for e in early:  # replies ready at once and a batch's invalid elements' errors: each its own event
            await stream.emit(e)
        await self._pump(conn, receive, send, session.sse_headers, head)
        stream.detach(conn)

    async def _answer_json(self, stream: Stream, early: list[bytes], batch: bool, receive: Receive, send: Send,
                           extra: list[tuple[bytes, bytes]]) -> None:
        waiter: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        stream.json_waiter = waiter
        stream.json_replies.extend(early)  # replies ready at once, a batch's invalid elements: in the reply array
        if not waiter.done():
            await _until_done_or_gone(waiter, receive)
        if not waiter.done():
            waiter.cancel()  # the client left; the requests keep running (2025: a disconnect is no cancel)
            return
        replies = waiter.result()
        out = replies[0] if not batch else b"[" + b",".join(replies) + b"]"  # a batch always gets an array
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
            who = identity_of(principal)
            own = [s for s in self.sessions.values() if identity_of(s.principal) == who and not s.ended]
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
        """Start the peer serving ``session`` now (the POST that made it feeds it on this turn) and
        the task that ends the session when the peer is done."""
        peer, state = self.open_peer(session)
        peer.start_now()
        session.attach(peer, state)

        async def run() -> None:
            try:
                await peer.wait_closed()
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
        if session is None or session.ended or identity_of(session.principal) != identity_of(principal):
            raise HTTPRefusal(404, -32600, "Session not found")
        # The same principal, with this request's token (a refresh or step-up may change its
        # scopes); each request's handlers see their own request's (request_context).
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
            waiter = ReplyWaiter()
            session.feed(from_message(Request("initialize", {"protocolVersion": v, "capabilities": {},
                                                             "clientInfo": {"name": "stateless-http", "version": "0"}}, _STATELESS_INIT_ID)),
                         waiter)
            await waiter.wait(30)
            session.version = v
            session.feed(from_message(Notification("notifications/initialized", None)))
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

    async def _post_modern(self, scope: Scope, receive: Receive, send: Send, got: Any, version: str, sse_ok: bool) -> None:
        assert self.modern is not None
        if type(got) is not Envelope:
            if type(got) is list:
                raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a single JSON-RPC message")
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a request or a notification")
        method: Any = got.method
        id_ = got.id
        if method is UNSET or (id_ is not UNSET and type(id_) is not str and type(id_) is not int):
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a request or a notification")
        kind = "notification" if id_ is UNSET else "request"
        if id_ is UNSET:
            id_ = None
        try:
            check_modern_headers(method, got.params, kind == "request", version, self._modern_list, header_index(scope))
        except HeaderProblem as p:
            await _send_problem(send, p, id_)
            return
        if kind == "notification":
            request = self.modern(got, _drop)
            if not request.done:
                await request.wait()
            await respond(send, 202)
            return
        principal = current_principal.get()
        if self.scopes_for is not None and principal is not None:
            self._check_scopes(principal, [got])
        if not sse_ok and method == "subscriptions/listen":
            # the listen channel IS this response's SSE stream; a JSON-only client cannot have one
            raise HTTPRefusal(406, -32600, "Not Acceptable: subscriptions/listen needs Accept: text/event-stream")
        if not self.admission.try_acquire():
            await refuse_busy(send, with_null_id=False)  # 2026-07-28: no null id
            return
        try:
            await self._run_modern(receive, send, got, sse_ok)
        finally:
            self.admission.release()

    async def _run_modern(self, receive: Receive, send: Send, got: Envelope, sse_ok: bool) -> None:
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
            request = self.modern(got, emit)
        except Exception:  # a bug of the server's below: the client still gets an answer, without it
            log.exception("2026-07-28 request failed in the server")
            await self._modern_reply(send, _internal_error(got.id))
            return
        if request.done:
            # answered at once (an inline tool, an error): no task, no timer, no watcher
            await self._modern_reply(send, request.value)
            return
        waiting = asyncio.ensure_future(request.wait())
        done, _ = await asyncio.wait((waiting,), timeout=HEADER_DELAY)
        if not done:
            # A slow request: watch for the client leaving, and keep a quiet stream alive.
            gone = asyncio.ensure_future(wait_disconnect(receive))
            try:
                while not waiting.done():
                    await asyncio.wait((waiting, gone), timeout=self.keepalive_interval, return_when=asyncio.FIRST_COMPLETED)
                    if gone.done():
                        request.cancel()  # 2026-07-28: closing the response stream IS the cancellation
                        waiting.cancel()
                        return
                    if not waiting.done() and sse_ok:
                        if not started:
                            started = True
                            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                        await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
            finally:
                gone.cancel()
        try:
            reply = waiting.result()
        except Exception:
            log.exception("2026-07-28 request failed in the server")
            reply = _internal_error(got.id)
        if started:
            if reply is not None:
                await send({"type": "http.response.body", "body": sse_event(reply), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await self._modern_reply(send, reply)

    @staticmethod
    async def _modern_reply(send: Send, reply: bytes | None) -> None:
        if reply is None:
            await respond(send, 202)
        else:
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


def _internal_error(id_: Any) -> bytes:
    return codec.encode({"jsonrpc": "2.0", "id": None if id_ is UNSET else id_, "error": {"code": -32603, "message": "Internal error"}})


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


def _modern_envelope(got: Any) -> bool:
    """Whether ``got`` is a request whose ``_meta`` names a 2026-07-28-era protocol version."""
    if type(got) is not Envelope or got.method is UNSET or got.id is UNSET or got.method == "initialize":
        return False  # notifications: this revision defines no header rules for them; initialize is legacy
    params = got.params
    meta = params.get("_meta") if type(params) is dict else None
    v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
    return type(v) is str and v not in HANDSHAKE_VERSIONS


def _params(env: Envelope) -> Any:
    return None if env.params is UNSET else env.params


class _Sorted:
    """A POST's messages sorted out: the requests (and their id keys, in order), the messages to
    hand to the session (requests, notifications, responses, in order), the -32600 errors of a
    batch's invalid elements, the ids of requests the POST cancels."""

    __slots__ = ("requests", "keys", "valid", "invalid", "cancels")

    def __init__(self) -> None:
        self.requests: list[Envelope] = []
        self.keys: list[Key] = []
        self.valid: list[Envelope] = []
        self.invalid: list[bytes] = []
        self.cancels: list[Any] = []


_INVALID = InvalidRequest("Invalid Request")


def _sort_out(items: list[Envelope | InvalidMessage], batch: bool) -> _Sorted:
    """Sort what a POST carried (as :func:`~sturdyrpc.envelope.read` made it). JSON-RPC §6: in a
    batch each element that is no valid message gets its own -32600 in the reply array (a request
    reusing an id of the same batch too); the others are served. MCP ids are strings or integers."""
    out = _Sorted()
    seen: set[Key] = set()
    for m in items:
        if type(m) is not Envelope:
            err = _INVALID if m.is_response or m.error.message == "Invalid Request" else m.error  # type: ignore[union-attr]
            if not batch:
                raise HTTPRefusal(400, -32600, err.message if err is not _INVALID else "Invalid Request: not a JSON-RPC message")
            out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": err.to_dict(), "id": None}))
            continue
        if m.method is UNSET:
            out.valid.append(m)  # a response (to a request the server sent)
            continue
        if m.id is UNSET:
            if m.method == "notifications/cancelled":
                params = m.params
                if type(params) is dict and type(params.get("requestId")) in (str, int):
                    out.cancels.append(params["requestId"])
            out.valid.append(m)
            continue
        id_ = m.id
        if type(id_) is not str and type(id_) is not int:  # null or a fraction: no MCP request id
            if not batch:
                raise HTTPRefusal(400, -32600, "Invalid Request: not a JSON-RPC message")
            out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": _INVALID.to_dict(), "id": None}))
            continue
        k = key_of(id_)
        if k in seen:
            out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": _INVALID.to_dict(), "id": id_}))
            continue
        seen.add(k)
        out.requests.append(m)
        out.keys.append(k)
        out.valid.append(m)
    return out


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
