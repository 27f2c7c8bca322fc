"""One Streamable HTTP session (2025-03-26 .. 2025-11-25): the message pipe the MCP server runs
on, and the routing of everything it sends onto the right HTTP stream.

The server side sees a plain :class:`~sturdyrpc.peer.MessageTransport` (:class:`SessionPipe`):
POSTed messages come out of :meth:`SessionPipe.receive`, and what the server sends goes
through :meth:`HTTPSession.route`:

- a response goes to the stream of the POST that carried its request (then that stream ends
  once all its requests are answered);
- a request or notification the server sends while handling a client request goes to that
  request's stream, before its response. Which request it belongs to is read from
  :data:`sturdyrpc.request_context.current_call` when the message is queued (see :func:`note_outgoing`),
  else from the progress token it carries, else it is the only request in flight;
- anything unrelated goes to the standalone GET stream (held, bounded, until one is open).

Streams are logical: every event is recorded in the :class:`~.events.EventStore` under the
stream's id, and a dropped connection can be resumed by a GET with ``Last-Event-ID`` that
attaches a new HTTP response to the same stream.

A session in a shared store (:mod:`.shared`, ``mcp_http_app(server, store="redis://...")``)
has ``shared`` set: its stream ids name the worker, its GET stream is the one stream ``g`` every
worker writes to, its requests to the client carry ids that name the worker, and what a request
changed is saved before its response leaves. Without it (the default) none of this runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import codec
from ..admission import Admission
from ..dispatch import Call
from ..request_context import current_call
from .events import SSE_HEADERS, EventStore, sse_event

__all__ = ["HTTPSession", "SessionPipe", "Stream", "SSEResponse", "current_http_session", "close_current_stream", "note_outgoing"]

log = logging.getLogger("sturdyrpc.http")

Key = tuple[type, Any]

#: The session whose server task is running (set around the MCP server's run; handler tasks inherit it).
current_http_session: contextvars.ContextVar[HTTPSession | None] = contextvars.ContextVar("sturdyrpc_http_session", default=None)


def key_of(id_: Any) -> Key:
    # 1 and True and 1.0 are equal dict keys; ids must stay apart by type.
    return (type(id_), id_)


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


class Stream:
    """A logical SSE stream of a session: the POST stream of some requests, or the standalone GET stream."""

    __slots__ = ("id", "session", "pending", "conn", "finished", "standalone", "json_waiter", "json_replies", "headers", "principal")

    def __init__(self, session: HTTPSession, *, standalone: bool = False) -> None:
        session.stream_counter += 1
        # Unique within the session, which is all event ids need: the session id (random) guards access.
        # Shared sessions: the prefix names the worker, and the GET stream is one stream ``g`` for all.
        self.id = "g" if standalone and session.shared is not None else f"{session.stream_prefix}{session.stream_counter}"
        self.session = session
        self.pending: set[Key] = set()
        self.conn: SSEResponse | None = None
        self.finished = False
        self.standalone = standalone
        #: JSON mode: the responses collected so far, handed over when ``pending`` empties.
        self.json_waiter: asyncio.Future[list[bytes]] | None = None
        self.json_replies: list[bytes] = []
        #: The headers of the POST that opened the stream (``ctx.headers`` of its requests).
        self.headers: Mapping[str, str] | None = None
        #: The principal of the POST's token (``ctx.principal`` of its requests; None: the session's).
        self.principal: Any = None

    async def emit(self, data: bytes) -> None:
        store = self.session.store
        eid: str | None = None
        if store is not None and self.session.id is not None:
            try:
                eid = await store.store(self.session.id, self.id, data)
            except Exception as exc:  # a shared store that is down: deliver anyway, without resumability
                log.warning("event not stored: %s", exc)
        conn = self.conn
        if conn is not None:
            conn.put(sse_event(data, eid))

    def attach(self, conn: SSEResponse) -> None:
        old = self.conn
        self.conn = conn
        if old is not None and old is not conn:
            old.end()  # a resumed stream replaces the old connection; never two at once

    def detach(self, conn: SSEResponse) -> None:
        if self.conn is conn:
            self.conn = None

    def finish(self) -> None:
        self.finished = True
        if self.conn is not None:
            self.conn.end()
        self.session.streams.pop(self.id, None)
        if self.session.shared is not None:
            self.session.shared.stream_finished(self)


class SessionPipe:
    """The :class:`~sturdyrpc.peer.MessageTransport` the MCP server runs on for one session."""

    def __init__(self, session: HTTPSession, max_queued: int = 1024) -> None:
        self.session = session
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue(max_queued)
        self._closed = False
        #: Messages queued by a handler, tagged with the request they belong to (see note_outgoing).
        self.tags: dict[int, Key] = {}
        #: ``answer(message) -> reply | None``, set by whoever runs the server on this pipe
        #: (:meth:`sturdyrpc.mcp.MCPServer.fast_path`): a request the server would answer at once
        #: the same way is answered on the POST's own turn, without the round trip through the
        #: server's queues; None means "feed it". Called ``answer(message, decoded)``, ``decoded``
        #: being the message as the POST decoded it (not decoded a second time).
        self.early_answer: Callable[[bytes, Any], bytes | None] | None = None

    def answer_now(self, data: bytes, decoded: Any = None) -> bytes | None:
        """The server's reply to request ``data`` (``decoded``: as decoded already) if it can be
        had right now, else None (then feed it)."""
        early = self.early_answer
        if early is None or self._closed:
            return None
        return early(data, decoded)

    async def feed(self, data: bytes) -> None:
        if not self._closed:
            try:
                self._inbox.put_nowait(data)
            except asyncio.QueueFull:  # the server is behind: wait for room (backpressure on this POST)
                await self._inbox.put(data)

    async def receive(self) -> bytes | None:
        if self._closed and self._inbox.empty():
            return None
        return await self._inbox.get()

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionError("session ended")
        await self.session.route(data, self.tags.pop(id(data), None))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._inbox.put_nowait(None)
            except asyncio.QueueFull:
                pass


def note_outgoing(transport: Any, data: bytes) -> None:
    """Tag ``data`` (about to be queued for sending) with the request whose handler sends it.

    Peers that write from a separate task lose the handler's context by the time
    ``transport.send`` runs; calling this when the message is queued keeps it.
    """
    tags = getattr(transport, "tags", None)
    if tags is None:
        return
    call: Call | None = current_call.get()
    if call is not None and not call.is_notification:
        tags[id(data)] = key_of(call.request_id)


class HTTPSession:
    """A client's session: its pipe, its streams, and the task running the MCP server on it.

    ``admission`` is the app's server-wide counter of running requests: every request opened
    with ``holds_slots`` keeps one of its slots until its response is routed, the client cancels
    it, or the session ends.
    """

    def __init__(self, session_id: str | None, principal: Any, store: EventStore | None, *, hold_unrouted: int = 100,
                 admission: Admission | None = None) -> None:
        self.id = session_id
        self.principal = principal
        self.store = store
        self.version: str | None = None
        self.pipe = SessionPipe(self)
        self.task: asyncio.Task[None] | None = None
        self.streams: dict[str, Stream] = {}
        self.by_request: dict[Key, Stream] = {}
        self.progress: dict[Key, Key] = {}  # progress token -> request
        self.standalone: Stream | None = None
        self._held: deque[bytes] = deque(maxlen=hold_unrouted)
        self.last_active = time.monotonic()
        self.stream_counter = 0
        self.ended = False
        self.on_end: Callable[[HTTPSession], Awaitable[None]] | None = None
        self.admission = admission
        self._slots: set[Key] = set()  # requests holding a slot of ``admission``
        #: The :class:`~.shared.SharedSessions` when the session lives in a shared store (else None).
        self.shared: Any = None
        #: The MCP server's :class:`~sturdyrpc.mcp.session_state.SessionState` of this session, when known.
        self.mcp_state: Any = None
        self.stream_prefix = "s"
        #: Headers every response of this session carries, and those plus the SSE headers:
        #: built once, not per response.
        self.response_headers: list[tuple[bytes, bytes]] = [] if session_id is None else [
            (b"mcp-session-id", session_id.encode("ascii"))]
        self.sse_headers: list[tuple[bytes, bytes]] = SSE_HEADERS + self.response_headers
        #: The same for an SSE response complete when it starts (sent with its length, like a
        #: JSON reply): what only matters to a stream that stays open left out (``Cache-Control:
        #: no-transform`` and ``X-Accel-Buffering`` keep proxies from holding events back).
        self.sse_whole_headers: list[tuple[bytes, bytes]] = [SSE_HEADERS[0]] + self.response_headers

    # -------------------------------------------------------------- requests in

    def open_stream(self, request_ids: list[Any], params_of: list[Any], *, holds_slots: bool = False,
                    keys: list[Key] | None = None) -> Stream:
        """A stream for a POST carrying these requests (their ids must not be in flight).

        ``holds_slots``: the caller took one slot of :attr:`admission` per request; the session
        gives each back when that request is done. ``keys``: ``key_of`` of each id, when the
        caller has them already.
        """
        st = Stream(self)
        if keys is None:
            keys = [key_of(id_) for id_ in request_ids]
        for k, params in zip(keys, params_of, strict=True):
            st.pending.add(k)
            self.by_request[k] = st
            if holds_slots:
                self._slots.add(k)
            token = _progress_token(params)
            if token is not None:
                self.progress[key_of(token)] = k
        self.streams[st.id] = st
        return st

    def in_flight(self, id_: Any) -> bool:
        return key_of(id_) in self.by_request

    def headers_of(self, id_: Any) -> Mapping[str, str] | None:
        """The headers of the POST that carried request ``id_`` while it is in flight (else None)."""
        st = self.by_request.get(key_of(id_))
        return st.headers if st is not None else None

    def principal_of(self, id_: Any) -> Any:
        """The principal of the POST that carried request ``id_`` while it is in flight, else (no
        such request: a notification, a task's background work) the session's latest."""
        st = self.by_request.get(key_of(id_)) if id_ is not None else None
        p = st.principal if st is not None else None
        return p if p is not None else self.principal

    def key_in_flight(self, k: Key) -> bool:
        """:meth:`in_flight` for a request's ``key_of(id)``."""
        return k in self.by_request

    def cancelled(self, id_: Any) -> None:
        """The client cancelled request ``id_``: the server will not answer it, so its slot is free."""
        self._release(key_of(id_))

    def _release(self, k: Key) -> None:
        if k in self._slots:
            self._slots.discard(k)
            if self.admission is not None:
                self.admission.release()

    def has_open_response(self) -> bool:
        """Whether an HTTP response (SSE stream or awaited JSON reply) of this session is open now."""
        return any(st.conn is not None and not st.conn.closed or st.json_waiter is not None and not st.json_waiter.done()
                   for st in self.streams.values())

    def open_standalone(self) -> Stream:
        st = self.standalone
        if st is None or st.finished:
            st = self.standalone = Stream(self, standalone=True)
            self.streams[st.id] = st
        return st

    def take_held(self) -> list[bytes]:
        out = list(self._held)
        self._held.clear()
        return out

    # ------------------------------------------------------------- messages out

    async def route(self, data: bytes, tag: Key | None) -> None:
        """Put one outgoing message on the stream it belongs to."""
        try:
            obj = codec.decode(data)
        except Exception:
            obj = None
        if type(obj) is dict and "method" not in obj and ("result" in obj or "error" in obj):
            await self._route_response(obj, data)
            return
        if self.shared is not None and type(obj) is dict and "id" in obj:
            data = self.shared.outgoing(obj)  # a request to the client: its answer may reach another worker
        target = self._related_stream(obj, tag)
        if target is not None:
            await target.emit(data)
            return
        if type(obj) is dict and "id" not in obj and self._json_mode_related(obj, tag):
            # A request answered with application/json has no stream for its notifications; held for
            # the GET stream they would arrive after the reply (progress MUST stop at the reply).
            log.debug("notification of a JSON-mode request dropped: %s", obj.get("method"))
            return
        st = self.standalone
        if st is not None and not st.finished:
            await st.emit(data)
        else:
            self._held.append(data)  # delivered when a GET stream opens; bounded

    async def _route_response(self, obj: dict[str, Any], data: bytes) -> None:
        id_ = obj.get("id")
        if self.version is None and type(obj.get("result")) is dict:
            v = obj["result"].get("protocolVersion")
            if type(v) is str:
                self.version = v
        await self.deliver(key_of(id_), data)

    async def deliver(self, k: Key, data: bytes) -> None:
        """Put the response ``data`` to the request keyed ``k`` on its stream (ending the stream
        once all of its requests are answered) and give back the request's slot."""
        st = self.by_request.pop(k, None)
        self._release(k)
        if self.progress:
            for tok in [t for t, r in self.progress.items() if r == k]:
                del self.progress[tok]
        if st is None:
            log.debug("response for %r has no open stream; dropped", k[1])
            return
        if self.shared is not None:
            await self.shared.before_response(self)  # other workers see what this request changed first
        st.pending.discard(k)
        if st.json_waiter is not None:
            # JSON mode: responses are collected and sent as the POST's body once all are in.
            st.json_replies.append(data)
            if not st.pending:
                if not st.json_waiter.done():
                    st.json_waiter.set_result(st.json_replies)
                st.finish()
            return
        await st.emit(data)
        if not st.pending:
            st.finish()

    def _json_mode_related(self, obj: dict[str, Any], tag: Key | None) -> bool:
        """Whether notification ``obj`` belongs to a request still running that gets a JSON reply."""
        k = tag
        params = obj.get("params")
        if k is None and obj.get("method") == "notifications/progress" and type(params) is dict and "progressToken" in params:
            k = self.progress.get(key_of(params["progressToken"]))
        st = self.by_request.get(k) if k is not None else None
        return st is not None and st.json_waiter is not None

    def _related_stream(self, obj: Any, tag: Key | None) -> Stream | None:
        k = tag
        if k is None and type(obj) is dict:
            params = obj.get("params")
            if obj.get("method") == "notifications/progress" and type(params) is dict and "progressToken" in params:
                k = self.progress.get(key_of(params["progressToken"]))
        if k is None:
            open_posts = [s for s in self.streams.values() if not s.standalone and s.json_waiter is None]
            if len(self.by_request) == 1 and len(open_posts) == 1:
                return open_posts[0]  # only one request in flight: the message can only be about it
            return None
        st = self.by_request.get(k)
        if st is None or st.finished or st.json_waiter is not None:
            return None
        return st

    # ---------------------------------------------------------------- lifecycle

    def close_request_stream(self, id_: Any) -> bool:
        """End the HTTP response carrying request ``id_`` without ending the logical stream (the
        client resumes with ``Last-Event-ID``). Used for SSE polling (SEP-1699)."""
        st = self.by_request.get(key_of(id_))
        if st is None or st.conn is None:
            return False
        conn = st.conn
        st.conn = None
        conn.end()
        return True

    async def end(self) -> None:
        """End the session: close every stream, stop the server, forget stored events."""
        if self.ended:
            return
        self.ended = True
        for k in list(self._slots):
            self._release(k)
        for st in list(self.streams.values()):
            if st.json_waiter is not None and not st.json_waiter.done():
                st.json_waiter.cancel()
            st.finish()
        await self.pipe.close()
        if self.store is not None and self.id is not None:
            await self.store.drop_session(self.id)
        if self.on_end is not None:
            await self.on_end(self)


def _progress_token(params: Any) -> Any:
    if type(params) is dict:
        meta = params.get("_meta")
        if type(meta) is dict:
            tok = meta.get("progressToken")
            if type(tok) in (str, int):
                return tok
    return None


def close_current_stream() -> bool:
    """From inside a handler: close the SSE response carrying the current request, keeping the
    request running; the client reconnects (GET + ``Last-Event-ID``) after the ``retry`` delay
    and receives the rest. Returns False where there is no such stream (stdio, JSON responses)."""
    session = current_http_session.get()
    call = current_call.get()
    if session is None or call is None or call.is_notification:
        return False
    return session.close_request_stream(call.request_id)
