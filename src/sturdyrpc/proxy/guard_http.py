"""``sturdyrpc guard --url http://HOST:PORT/PATH --http LISTEN``: the guard in front of a Streamable
HTTP server, as an ASGI app (:class:`GuardHTTPApp`) and its serving (:func:`serve_guard_http`).

The endpoint is served at the upstream's path behind the project's one HTTP layer
(:func:`~sturdyrpc.transports.http_layer.http_layer`: Host/Origin 403, bearer auth 401/403,
path 404, method 405, Content-Type 415, Accept 406, body bound 413 and deadline 408; uvicorn's
bounded heads 431/408), so the upstream gets none of what those refuse. Then the rules of the
endpoint itself, as :class:`~sturdyrpc.mcp_http.StreamableHTTPApp` has them:

- ``MCP-Protocol-Version`` validated (:func:`~sturdyrpc.mcp_http.modern.header_version`: 400),
  a 2026-07-28 request's ``Mcp-Method``/``Mcp-Name`` and ``_meta`` checked against its body
  (:func:`~sturdyrpc.mcp_http.modern.check_modern_headers`: 400), and so are a ``tools/call``'s
  SEP-2243 ``Mcp-Param-*`` headers, for the tools guard saw listed (:mod:`.guard_http_params`:
  learned from the 2026-07-28 ``tools/list`` results it passed on), GET and DELETE refused (405)
  for 2026-07-28;
- guard's own table of sessions: an ``initialize`` opens one (guard's id, never the upstream's,
  is what the client sees), any other request needs ``Mcp-Session-Id`` (400) of a session
  guard holds for the same principal (404 otherwise), DELETE ends it here even when the upstream
  has no DELETE, and a request id already in flight in the session is refused (409). The table is
  bounded (``max_sessions``): a full one ends its least recently used idle session, or answers 503.

Each session's messages go through one :class:`~.guard.GuardCore`
(:mod:`.guard_http_session`), a 2026-07-28 request through a core of its own. With an
``auth`` :class:`~sturdyrpc.transports.asgi.HTTPSecurity` guard is the OAuth resource server,
and the upstream gets no ``Authorization`` unless ``forward_authorization``. With a ``log``
(:class:`~.tracelog.TraceLog`, ``guard --url --log``) each session's messages are recorded in it,
flushed every half second and closed at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..admission import Admission
from ..auth.principal import identity_of, missing_scopes
from ..auth.resource_server import insufficient_scope_refusal
from ..codec import DecodeFailure, decode, encode
from ..limits import DEFAULT_LIMITS, Limits
from ..mcp.versions import HANDSHAKE_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS
from ..mcp_http.events import SSE_HEADERS, sse_event
from ..mcp_http.modern import HeaderProblem, check_modern_headers, header_version, send_problem
from ..mcp_http.sessions import SessionCaps, not_found, session_id_of
from ..request_context import current_principal
from ..transports.asgi import HTTPRefusal, HTTPSecurity, Receive, Scope, Send, error_body, header_index, refuse, respond
from ..transports.http_layer import JSON, SSE, http_layer, wait_disconnect
from .guard import GuardCore
from .guard_http_params import ParamHeaderTable
from .guard_http_session import UNNAMED, Channel, GuardSession, Upstream, requests_in
from .monitor import key_of
from .tracelog import UNREADABLE, TraceLog
from .view import report_contained

__all__ = ["GuardHTTPApp", "serve_guard_http"]

log = logging.getLogger("sturdyrpc.guard")

#: Seconds of silence after which an open SSE stream gets a comment line.
KEEPALIVE = 15.0
#: Seconds a POST waits for its answer before guard watches for the client's disconnect.
_WATCH_AFTER = 0.05
#: Seconds between two flushes of the log (``tail -f`` shows it within that).
_FLUSH_EVERY = 0.5
_UNREADABLE = UNREADABLE  # a body that is no JSON (the log writes it as text)
#: The message guard sends with an upstream's refusal of a message without an id (never the upstream's text).
_REFUSALS = {-32700: "Parse error", -32600: "Invalid Request", -32601: "Method not found", -32602: "Invalid params"}


def _not_allowed() -> HTTPRefusal:
    return HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])


def _is_modern_body(value: Any) -> bool:
    """A request whose ``_meta`` names a 2026-07-28-era version (it needs the header)."""
    if type(value) is not dict or "id" not in value or value.get("method") in (None, "initialize"):
        return False
    params = value.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
    return type(v) is str and v not in HANDSHAKE_VERSIONS


class GuardHTTPApp:
    """The HTTP guard in front of the Streamable HTTP endpoint at ``upstream_url``.

    ``core_factory()`` makes the :class:`~.guard.GuardCore` of each session (and of each
    2026-07-28 request); ``security``: the HTTP layer's checks (Host/Origin, auth, body bound);
    ``tool_scopes``: OAuth scopes per tool name (``"*"``: every tool) a ``tools/call`` needs
    (403 ``insufficient_scope`` otherwise); ``limits``: the message bounds; ``max_sessions``: the
    size of guard's session table; ``idle_timeout``: seconds without a request after which a
    session no client waits on ends (as ``sturdyrpc run``'s sessions do; its next request gets
    404, and the upstream a DELETE); ``keepalive``: seconds of silence before an SSE comment line;
    ``log``: where the traffic is recorded (its file is flushed every half second, and closed by :meth:`aclose`).
    """

    def __init__(self, upstream_url: str, *, core_factory: Callable[[], GuardCore], security: HTTPSecurity | None = None,
                 forward_authorization: bool = False, tool_scopes: Mapping[str, frozenset[str]] | None = None,
                 limits: Limits | None = None, max_sessions: int = 1000, keepalive: float = KEEPALIVE,
                 report: str | None = None, idle_timeout: float = SessionCaps.idle_timeout, log: TraceLog | None = None) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.limits = limits or DEFAULT_LIMITS
        self.security = security or HTTPSecurity()
        self.core_factory = core_factory
        self.forward_authorization = forward_authorization
        self.tool_scopes = dict(tool_scopes or {})
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self._ending: set[asyncio.Task[None]] = set()  # sessions ended for idleness, telling the upstream
        self.keepalive = keepalive
        self.report = report
        self.log = log
        self._flusher: asyncio.Task[None] | None = None
        #: What the cores of ended sessions and requests answered for the server or repaired, by
        #: rule, and the 2026-07-28 header mismatches guard refused (``mcp.header-mismatch``).
        self.contained: Counter[str] = Counter()
        #: Each listed tool's ``Mcp-Param-*`` headers (one table for every request: 2026-07-28 has no sessions).
        self.param_table = ParamHeaderTable()
        self.path = urlsplit(upstream_url).path or "/"
        self.upstream = Upstream(upstream_url, max_bytes=self.limits.max_message_bytes)
        #: Guard's sessions by its own id, least recently used first.
        self.sessions: OrderedDict[str, GuardSession] = OrderedDict()
        #: Sessions and 2026-07-28 requests whose cores the deadline ticker visits.
        self._live: set[GuardSession] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._ticking = False
        self._layer = http_layer(self._endpoint, security=self.security, admission=Admission(self.limits.max_server_in_flight),
                                 max_message_bytes=self.limits.max_message_bytes, path=self.path,
                                 methods=("GET", "POST", "DELETE"), produces={"POST": (SSE, JSON), "GET": (SSE,)},
                                 null_id=False, on_shutdown=self.aclose)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._layer(scope, receive, send)

    # -- the endpoint ----------------------------------------------------------------------------

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        hx = header_index(scope)
        owner = identity_of(current_principal.get())
        self._start_ticker()
        try:
            raw = hx.get(b"mcp-protocol-version")
            try:
                version, modern = (None, False) if raw is None else header_version(raw, HANDSHAKE_VERSIONS, MODERN_VERSIONS)
            except HeaderProblem as p:
                if scope["method"] != "POST":
                    raise _not_allowed() from None
                await send_problem(send, p, None)
                return
            if scope["method"] == "POST":
                await self._post(scope, hx, receive, send, owner, version, modern)
            elif modern:
                raise _not_allowed()  # 2026-07-28 has no sessions
            elif scope["method"] == "GET":
                await self._get(hx, receive, send, owner)
            else:
                await self._delete(hx, send, owner)
        except HTTPRefusal as r:
            await refuse(send, r, with_null_id=False)

    def _expire_idle(self, now: float) -> None:
        """End the sessions idle for longer than ``idle_timeout``. The table is in the order of
        the clients' last requests, so the walk stops at the first session used since (a session
        whose long reply ended after a later one's request may so end one walk late: never early)."""
        expired = []
        for session in self.sessions.values():
            if session.idle_for(now) > self.idle_timeout:
                expired.append(session)
            elif not session.busy:
                break  # used since the timeout began: so is every session after it
        for session in expired:
            task = asyncio.ensure_future(self._drop(session))
            self.sessions.pop(session.sid or "", None)  # gone from the table at once; the upstream is told meanwhile
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)

    async def _find(self, hx: dict[bytes, bytes], owner: str | None) -> GuardSession:
        sid = session_id_of(hx.get(b"mcp-session-id"))
        now = time.monotonic()
        self._expire_idle(now)
        session = self.sessions.get(sid)
        if session is None or session.owner != owner:
            raise not_found()  # another principal's session looks exactly like an unknown one
        if session.upstream_lost:
            await self._drop(session)
            raise not_found()
        self.sessions.move_to_end(sid)
        session.touch(now)
        return session

    async def _open(self, owner: str | None) -> GuardSession:
        self._expire_idle(time.monotonic())
        if len(self.sessions) >= self.max_sessions:
            idle = next((s for s in self.sessions.values() if not s.busy), None)
            if idle is None:
                raise HTTPRefusal(503, -32000, "Server busy: too many sessions", [(b"retry-after", b"1")])
            await self._drop(idle)
        sid = secrets.token_urlsafe(24)
        session = GuardSession(sid, self.core_factory(), self.upstream, owner=owner, forward_authorization=self.forward_authorization,
                               log=self.log)
        self.sessions[sid] = session
        self._live.add(session)
        return session

    async def _drop(self, session: GuardSession) -> None:
        if session.sid is not None:
            self.sessions.pop(session.sid, None)
        self._live.discard(session)
        await session.end(tell_upstream=session.sid is not None)
        self.contained.update(session.core.contained)

    # -- POST ------------------------------------------------------------------------------------

    async def _post(self, scope: Scope, hx: dict[bytes, bytes], receive: Receive, send: Send, owner: str | None,
                    version: str | None, modern: bool) -> None:
        body: bytes = scope["sturdyrpc.body"]
        try:
            value = decode(body)
        except DecodeFailure:
            value = _UNREADABLE  # the core answers it (as a correct server would)
        self._check_scopes(value)
        ids = requests_in(value)
        created = False
        if modern or (version is None and _is_modern_body(value)):
            problem = _modern_problem(value, version, hx, self.param_table)
            if problem is not None:
                if problem.code == -32020:
                    self.contained["mcp.header-mismatch"] += 1
                rid = value.get("id") if type(value) is dict else None
                answer = encode(problem.error(rid if type(rid) in (str, int) else None))
                self._record_refused(None, body, value, answer)
                await respond(send, problem.status, answer)
                return
            session = GuardSession(None, self.core_factory(), self.upstream, owner=owner, forward_authorization=self.forward_authorization,
                                   param_table=self.param_table, log=self.log)
            if type(value) is dict and value.get("method") == "tools/list" and type(value.get("id")) in (str, int):
                session.lists_tools(value["id"])  # its result teaches guard the tools' Mcp-Param-* headers
            self._live.add(session)
        elif hx.get(b"mcp-session-id") is None and type(value) is dict and value.get("method") == "initialize":
            session, created = await self._open(owner), True
        else:
            session = await self._find(hx, owner)
        try:
            await self._exchange(session, body, value, ids, hx, scope["sturdyrpc.media"], receive, send,
                                 [(b"mcp-session-id", session.sid.encode())] if created and session.sid else [])
        finally:
            if session.sid is None:
                await self._drop(session)

    def _record_refused(self, sid: str | None, body: bytes, value: Any, answer: bytes) -> None:
        """A POST guard answered before its session's core saw it, into the log: the body (c2s),
        then guard's answer (g2c), as the core's own answers are recorded."""
        if self.log is not None:
            now = time.monotonic()
            self.log.http_message("c2s", sid, body, now, value=value)
            self.log.http_message("g2c", sid, answer, now)

    def _check_scopes(self, value: Any) -> None:
        if not self.tool_scopes:
            return
        principal = current_principal.get()
        for m in value if type(value) is list else [value]:
            if type(m) is dict and m.get("method") == "tools/call" and type(m.get("params")) is dict:
                needed = self.tool_scopes.get(m["params"].get("name"), frozenset()) | self.tool_scopes.get("*", frozenset())
                if needed and missing_scopes(principal, needed):
                    raise insufficient_scope_refusal(self.security.auth, principal, needed)

    async def _exchange(self, session: GuardSession, body: bytes, value: Any, ids: list[Any], hx: dict[bytes, bytes],
                        media: tuple[bool, bool], receive: Receive, send: Send, extra: list[tuple[bytes, bytes]]) -> None:
        """Hand the POST's message to the session; answer the POST with what comes back for it."""
        keys = [key_of(i) for i in ids]
        if len(set(keys)) != len(keys) or any(k in session.waiting for k in keys):
            # With the request's id when there is one: the client can tell which of its requests it is.
            conflict = {"code": -32600, "message": "Conflict: a request with this id is already in flight"}
            answer = encode({"jsonrpc": "2.0", "id": ids[0], "error": conflict} if len(ids) == 1 and type(ids[0]) in (str, int)
                            else {"jsonrpc": "2.0", "error": conflict})
            self._record_refused(session.sid, body, value, answer)
            await respond(send, 409, answer, extra=extra)
            return
        channel = Channel()
        for k in keys:
            session.waiting[k] = channel
        session.note_headers(hx)
        tasks = session.client_message(body, channel, value)
        if not ids:
            if tasks:  # a notification or the client's answer: on to the upstream before the next request
                await asyncio.wait(tasks)
            answers = [item[0] for item in channel.drain() if item[1] == UNNAMED]
            if answers:  # the answer to an unreadable body or batch
                status, out = _whole_answer(answers, type(value) is list)
                await respond(send, status, out, extra=extra)
            elif channel.refused is not None:  # the upstream refused it: its status and code, in guard's words
                await respond(send, channel.status, _refusal(channel), extra=extra)
            else:
                await respond(send, 202, extra=extra)
            return
        if not tasks and channel.items:
            # The core answered the POST itself and sent nothing upstream (a batch refused whole,
            # invalid requests): that is all there is for it.
            channel.open = False
            for k in keys:
                if session.waiting.get(k) is channel:
                    del session.waiting[k]
            status, out = _whole_answer([p for p, _ in channel.drain()], type(value) is list)
            await respond(send, status, out, extra=extra)
            return
        sse_ok, json_ok = media
        try:
            await self._answer(channel, len(ids), tasks if type(value) is list else None, sse_ok, json_ok, receive, send, extra)
        finally:
            channel.open = False
            if not session.closed:
                session.abandon(ids, channel)  # only those still unanswered: the client left

    async def _answer(self, channel: Channel, expected: int, batch: list[asyncio.Task[None]] | None, sse_ok: bool, json_ok: bool,
                      receive: Receive, send: Send, extra: list[tuple[bytes, bytes]]) -> None:
        """Send the POST's replies: one JSON body when they come without anything before them
        (and JSON is accepted), else an SSE stream of everything for the POST, in order.
        ``batch``: the upstream calls of a batch POST, whose answers to unreadable elements (id
        null) may come after every request is answered: they are waited for, briefly."""
        watch = _Watch(receive, channel, after=_WATCH_AFTER)
        streaming, is_batch = False, batch is not None
        replies: list[bytes] = []
        try:
            while expected > 0 or batch:
                if expected <= 0:
                    assert batch is not None
                    await asyncio.wait(batch, timeout=1.0)
                    pending, batch = channel.drain(), None
                    replies += [p for p, n in pending if n and not streaming]
                    if streaming:
                        for p, _ in pending:
                            await send({"type": "http.response.body", "body": sse_event(p), "more_body": True})
                    break
                item = await self._next(channel, send if streaming else None)
                if item is None:
                    break  # the client left, or the session ended
                payload, n = item
                expected -= max(n, 0)
                if not streaming and (n == 0 or not json_ok) and sse_ok:
                    streaming = True
                    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]})
                    for r in replies:
                        await send({"type": "http.response.body", "body": sse_event(r), "more_body": True})
                    replies = []
                if streaming:
                    await send({"type": "http.response.body", "body": sse_event(payload), "more_body": True})
                elif n:
                    replies.append(payload)
            if streaming:
                await send({"type": "http.response.body", "body": b""})
            elif is_batch and channel.refused is not None:  # a batch refused whole: one error, as the upstream sent it
                await respond(send, channel.status, _refusal(channel), extra=extra)
            elif replies:
                await respond(send, channel.status, _joined(replies) if is_batch else replies[0], extra=extra)
            elif not channel.gone:  # the session ended with nothing for the POST (the core answers what it ends)
                await respond(send, 500, error_body(-32603, "Internal error", with_null_id=False), extra=extra)
        finally:
            watch.stop()

    async def _next(self, channel: Channel, stream: Send | None) -> tuple[bytes, int] | None:
        """The next item for ``channel``, or None when the client has gone or it closed empty;
        keep-alive comments on an open ``stream`` while none comes."""
        while True:
            if channel.items:
                return channel.items.popleft()
            if channel.gone or not channel.open:
                return None
            if not await channel.wait(self.keepalive if stream is not None else None) and stream is not None:
                await stream({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})

    # -- GET and DELETE --------------------------------------------------------------------------

    async def _get(self, hx: dict[bytes, bytes], receive: Receive, send: Send, owner: str | None) -> None:
        session = await self._find(hx, owner)
        if session.get_stream is not None and session.get_stream.open:
            raise HTTPRefusal(409, -32600, "Conflict: the session has a GET stream open already")
        channel = session.get_stream = Channel()
        session.note_headers(hx)
        listener = asyncio.ensure_future(session.listen(channel))
        watch = _Watch(receive, channel, after=0.0)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": list(SSE_HEADERS)})
            await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
            while True:
                item = await self._next(channel, send)
                if item is None:
                    break
                await send({"type": "http.response.body", "body": sse_event(item[0]), "more_body": True})
            if not channel.gone:
                await send({"type": "http.response.body", "body": b""})
        finally:
            channel.open = False
            if session.get_stream is channel:
                session.get_stream = None
                session.touch(time.monotonic())
            listener.cancel()
            watch.stop()

    async def _delete(self, hx: dict[bytes, bytes], send: Send, owner: str | None) -> None:
        await self._drop(await self._find(hx, owner))
        await respond(send, 200)

    # -- deadlines and the end -------------------------------------------------------------------

    def _start_ticker(self) -> None:
        if self._ticking:
            return
        self._ticking = True  # on the first request: the serving loop runs it
        if self.log is not None:
            self._flusher = asyncio.ensure_future(self._flush(self.log))
        deadline = self.core_factory().deadline
        if deadline is not None:
            self._ticker = asyncio.ensure_future(self._tick(max(min(deadline / 4, 0.5), 0.01)))

    async def _tick(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for session in list(self._live):
                session.apply(session.core.tick(now), None, own=True)

    @staticmethod
    async def _flush(log: TraceLog) -> None:
        """The log out of its buffer now and then (one write of what the records since hold)."""
        while True:
            await asyncio.sleep(_FLUSH_EVERY)
            log.file.flush()

    async def aclose(self) -> None:
        """End every session (the upstream's too) and close the HTTP client (server shutdown)."""
        if self._ticker is not None:
            self._ticker.cancel()
        sessions = list(self.sessions.values())
        drops = [asyncio.ensure_future(self._drop(s)) for s in sessions]
        if drops:
            await asyncio.wait(drops, timeout=5.0)  # an upstream that does not answer its DELETEs holds no shutdown
        await self.upstream.aclose()
        self._write_report()
        self._close_log([*sessions, *self._live])

    def _close_log(self, sessions: list[GuardSession]) -> None:
        """The log's last record (what guard contained), then its file closed: nothing is written after."""
        log, self.log = self.log, None
        if log is None:
            return
        if self._flusher is not None:
            self._flusher.cancel()
        for s in sessions:
            s.log = None  # a session still ending (its upstream's DELETE) writes no more
        log.note("contained", time.monotonic(), contained=dict(sorted(self.contained.items())))
        log.close()

    def _write_report(self) -> None:
        """What guard contained, by the rule check names: one line on stderr, and ``report`` as JSON."""
        report_contained(sys.stderr, self.contained, self.report, upstream=self.upstream.url)


class _Watch:
    """Tells ``channel`` when the client has gone (:meth:`Channel.leave`), watching from ``after``
    seconds on: a POST answered sooner never pays for the watcher task."""

    def __init__(self, receive: Receive, channel: Channel, *, after: float) -> None:
        self._receive, self._channel = receive, channel
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(after, self._start)

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        await wait_disconnect(self._receive)
        self._channel.leave()

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


def _modern_problem(value: Any, version: str | None, hx: dict[bytes, bytes], tools: ParamHeaderTable) -> HeaderProblem | None:
    """What is wrong with the headers of a 2026-07-28 POST (None: nothing); ``tools``: the
    ``Mcp-Param-*`` headers of each tool listed, checked against a ``tools/call``'s arguments."""
    if version is None:
        return HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header is required")
    if type(value) is not dict or value.get("jsonrpc") != "2.0" or type(value.get("method")) is not str or (
            "id" in value and type(value["id"]) not in (str, int)):
        return None  # not a valid request or notification: answered as one (the headers come second)
    try:
        check_modern_headers(value["method"], value.get("params"), "id" in value, version, list(MODERN_VERSIONS), hx, tools.get)
    except HeaderProblem as p:
        return p
    return None


def _whole_answer(answers: list[bytes], batch: bool) -> tuple[int, bytes]:
    """The status and body of a POST the core answered alone: 400 for one error (a message, or a
    batch refused whole), 200 for a batch's array of answers."""
    if batch and (len(answers) > 1 or answers[0].lstrip().startswith(b"[")):
        return 200, _joined(answers)
    try:
        value = decode(answers[0])
    except DecodeFailure:
        value = None
    return (400 if type(value) is dict and "error" in value else 200), answers[0]


def _refusal(channel: Channel) -> bytes:
    """The upstream's refusal of a POST as guard words it: its code, a fixed message, its id rule."""
    code = channel.refused
    assert code is not None
    return error_body(code, _REFUSALS.get(code, "Bad Request"), with_null_id=channel.refused_null_id)


def _joined(replies: list[bytes]) -> bytes:
    """The replies of a batch POST as one JSON array (each reply an element, or a batch of them)."""
    parts = [r.strip() for r in replies]
    return b"[" + b",".join(p[1:-1] if p.startswith(b"[") else p for p in parts) + b"]"


def serve_guard_http(app: GuardHTTPApp, host: str, port: int, *, allow_remote: bool = False, loop: str | None = None) -> None:
    """Serve ``app`` on uvicorn at ``host:port`` (the bounded heads and the event loop of ``sturdyrpc
    run --http``; ``loop``: as its ``--loop``)."""
    from ..transports.serve_http import run_uvicorn

    run_uvicorn(app, host, port, allow_remote=allow_remote, loop=loop)
