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

What differs between a session of this process and one in a shared store is asked of the
session's *home*, the table that holds it (:class:`SessionHome`: :mod:`.local`, :mod:`.shared`):
whether a reply waits until the session's state is saved, what a request to the client is sent
as, and what happens when the session ends. Stream ids and the GET stream's id are given to the
session when it is made (a shared session's name the worker; its GET stream is the one stream
``g`` every worker writes to).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec

from .. import codec
from ..admission import Admission
from ..dispatch import Call
from ..flag import Flag
from ..framing import BadHeader, FrameTooLarge
from ..peer import Peer
from ..request_context import current_call, current_session
from ..runner import Origin
from ..store.notices import store_warning
from .events import SSE_HEADERS, EventStore, sse_event
from .responses import SSEResponse

__all__ = ["HTTPSession", "SessionHome", "SessionPipe", "Stream", "SSEResponse", "PostReplies", "RequestOrigin",
           "ReplyWaiter", "close_current_stream", "note_outgoing", "primes"]

log = logging.getLogger("sturdyrpc.http")

Key = tuple[type, Any]
#: The empty table every idle one shares until its first element (an empty set is 216 bytes).
_NONE: frozenset[Any] = frozenset()
#: The held messages of a session that has held none yet: shared, always empty (nothing is added to it).
_NOTHING_HELD: deque[bytes] = deque(maxlen=0)


def key_of(id_: Any) -> Key:
    # 1 and True and 1.0 are equal dict keys; ids must stay apart by type.
    return (type(id_), id_)


class Stream:
    """A logical SSE stream of a session: the POST stream of some requests, or the standalone GET stream."""

    __slots__ = ("id", "session", "pending", "conn", "finished", "standalone", "json_waiter", "json_replies", "headers")

    def __init__(self, session: HTTPSession, *, standalone: bool = False) -> None:
        session.stream_counter += 1
        # Unique within the session, which is all event ids need: the session id (random) guards access.
        # Shared sessions: the prefix names the worker, and the GET stream is one stream ``g`` for all.
        fixed = session.standalone_id if standalone else None
        self.id = fixed if fixed is not None else f"{session.stream_prefix}{session.stream_counter}"
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

    def emit_nowait(self, data: bytes) -> bool:
        """:meth:`emit` without waiting; False (nothing sent) when the store needs a wait."""
        events = self.session.events
        eid: str | None = None
        if events is not None and self.session.id is not None:
            try:
                eid = events.store_nowait(self.session.id, self.id, data)
            except Exception as exc:  # a shared store that is down: deliver anyway, without resumability
                store_warning(log, "event not stored", "event not stored: %s", exc)
            else:
                if eid is None:
                    return False
        conn = self.conn
        if conn is not None:
            conn.put(sse_event(data, eid))
        return True

    async def emit(self, data: bytes) -> None:
        if self.emit_nowait(data):
            return
        events = self.session.events
        eid: str | None = None
        if events is not None and self.session.id is not None:
            try:
                eid = await events.store(self.session.id, self.id, data)
            except Exception as exc:  # a shared store that is down: deliver anyway, without resumability
                store_warning(log, "event not stored", "event not stored: %s", exc)
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
            home = self.session.home
            if not self.finished and home is not None:
                home.left(self.session, self.id)

    def finish(self) -> None:
        self.finished = True
        if self.conn is not None:
            self.conn.end()
        session = self.session
        session.streams.pop(self.id, None)
        if not self.standalone and session.events is not None and session.id is not None:
            session.events.end_stream(session.id, self.id)  # resumable for the store's replay window only


class SessionPipe:
    """The :class:`~sturdyrpc.peer.MessageTransport` the MCP server's peer runs on for one session.

    Only what the server sends goes through it (to :meth:`HTTPSession.route`); what a POST
    carries is read once by the app and handed to the peer by :meth:`HTTPSession.feed`, each
    request's reply going to the POST that carried it (:class:`PostReplies`). As a
    :class:`~sturdyrpc.peer.FrameSource` it delivers no frame itself (the session feeds the
    peer); its input ends when the session does, which ends the peer, with no task waiting for
    that (an idle session holds none)."""

    def __init__(self, session: HTTPSession) -> None:
        self.session = session
        self._closed = Flag()
        #: Messages queued by a handler, tagged with the request they belong to (see note_outgoing).
        self.tags: dict[int, Key] = {}

    async def receive(self) -> bytes | None:
        await self._closed.wait()
        return None

    def deliver(self, on_frame: Callable[[bytes | FrameTooLarge | BadHeader], None], context: contextvars.Context | None = None) -> None:
        """Nothing to hand over: a POST's messages reach the peer through :meth:`HTTPSession.feed`."""

    def hold(self, on: bool) -> None:
        """Nothing is read here to hold back (a POST's requests wait in the peer)."""

    async def wait_input_done(self) -> None:
        await self._closed.wait()

    def when_input_done(self, callback: Callable[[], object], context: contextvars.Context | None = None) -> None:
        self._closed.when_set(callback, context=context)

    async def send(self, data: bytes) -> None:
        if self._closed.is_set():
            raise ConnectionError("session ended")
        await self.session.route(data, self.tags.pop(id(data), None))

    def send_nowait(self, data: bytes) -> bool:
        """:meth:`send` at once where nothing needs a wait (see :meth:`HTTPSession.route_nowait`)."""
        if self._closed.is_set():
            return False
        tag = self.tags.get(id(data))
        if self.session.route_nowait(data, tag):
            self.tags.pop(id(data), None)
            return True
        return False

    async def close(self) -> None:
        self._closed.set()


class PostReplies(msgspec.Struct):
    """The replies to the requests of one POST. A reply that comes while the POST has no stream
    (answered on the POST's own turn) is kept in :attr:`ready` for the POST to send as its body;
    once the POST opened its stream (:meth:`open`), replies go to it.

    The :class:`~sturdyrpc.runner.Origin` of a POST's only request is the POST's replies
    themselves (``key``: that request's; :meth:`reply`); each request of a batch has a
    :class:`RequestOrigin`. (Structs: made in C, per POST.)"""

    session: HTTPSession
    #: the key of the POST's only request (None: a batch, or no request)
    key: Key | None = None
    #: request key -> reply, for the replies that came before the stream was opened
    ready: dict[Key, bytes] = msgspec.field(default_factory=dict)
    stream: Stream | None = None

    def reply(self, data: bytes | None) -> None:
        """The reply of the POST's only request."""
        self.replied(self.key, data)  # type: ignore[arg-type]

    def replied(self, k: Key, data: bytes | None) -> None:
        if data is None:
            return  # (a request always gets a reply; None only for a notification)
        session = self.session
        if session.version is None:
            session.note_reply(data)
        if self.stream is None:
            self.ready[k] = data
        else:
            session.deliver_reply(k, data)

    def open(self, stream: Stream) -> None:
        """From now on replies go to ``stream`` (the replies ready already are sent on it first)."""
        self.stream = stream


class RequestOrigin(msgspec.Struct):
    """Where the reply of one request of a batch POST goes (see :class:`PostReplies`)."""

    post: PostReplies
    key: Key

    def reply(self, data: bytes | None) -> None:
        self.post.replied(self.key, data)


class ReplyWaiter:
    """An :class:`~sturdyrpc.runner.Origin` that can be awaited (a request the server sends to
    itself, such as a replayed ``initialize``)."""

    __slots__ = ("value", "_future")

    def __init__(self) -> None:
        self.value: bytes | None = None
        self._future: asyncio.Future[bytes | None] | None = None

    def reply(self, data: bytes | None) -> None:
        self.value = data
        if self._future is not None and not self._future.done():
            self._future.set_result(data)

    async def wait(self, timeout: float) -> bytes | None:
        if self.value is not None:
            return self.value
        self._future = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(self._future, timeout)


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


class SessionHome(Protocol):
    """What a session asks of the table that holds it (:class:`~.sessions.SessionTable`)."""

    #: Whether a reply leaves only after :meth:`save_state` (state that other workers read).
    saves_state: bool

    def request_out(self, obj: dict[str, Any], data: bytes) -> bytes:
        """What a request to the client (``obj``, encoded ``data``) is sent as."""

    async def save_state(self, session: HTTPSession) -> None:
        """Save what the session's requests changed (before their replies leave)."""

    async def ended(self, session: HTTPSession) -> None:
        """The session ended (its streams are closed, its peer stopped)."""

    def left(self, session: HTTPSession, stream_id: str) -> None:
        """A client connection left the stream ``stream_id`` before it finished (a resume, on any
        worker, may follow at once)."""


class HTTPSession:
    """A client's session: its pipe, its streams, and the task running the MCP server on it.

    ``events``: where its streams' events are kept for resumption (None: nowhere). ``admission``
    is the app's server-wide counter of running requests: every request opened with
    ``holds_slots`` keeps one of its slots until its response is routed, the client cancels it,
    or the session ends. ``home``: the table holding the session (None: a session of one
    request, held by nobody). ``stream_prefix`` starts its stream ids; ``standalone_id``, when
    given, is the id of its GET stream, which is then open from the start.
    """

    def __init__(self, session_id: str | None, principal: Any, events: EventStore | None, *, hold_unrouted: int = 100,
                 admission: Admission | None = None, home: SessionHome | None = None, stream_prefix: str = "s",
                 standalone_id: str | None = None) -> None:
        self.id = session_id
        self.principal = principal
        self.events = events
        self.home = home
        #: Replies wait for the home to save the session's state (read once: replies are frequent).
        self.saves_state = home is not None and home.saves_state
        self.version: str | None = None
        self.pipe = SessionPipe(self)
        #: The peer serving the session (its MCP server), once :meth:`attach` gave it.
        self.peer: Peer | None = None
        self.streams: dict[str, Stream] = {}
        self.by_request: dict[Key, Stream] = {}
        self.progress: dict[Key, Key] = {}  # progress token -> request
        self.standalone: Stream | None = None
        self._held: deque[bytes] = _NOTHING_HELD  # made on first use (see _hold)
        self._hold_unrouted = hold_unrouted
        self.last_active = time.monotonic()
        self.stream_counter = 0
        self.ended = False
        self.admission = admission
        # requests holding a slot of ``admission``, replies on their way to a stream (made with the first)
        self._slots: set[Key] | frozenset[Key] = _NONE
        self._deliveries: set[asyncio.Task[None]] | frozenset[asyncio.Task[None]] = _NONE
        #: The MCP server's :class:`~sturdyrpc.mcp.session_state.SessionState` of this session, when known
        #: (what :class:`~sturdyrpc.mcp.session_state.SessionPeer` calls ``mcp_session``).
        self.mcp_session: Any = None
        self.stream_prefix = stream_prefix
        self.standalone_id = standalone_id
        #: Open responses that follow one of the session's streams from the store (resumed on
        #: this worker): they count toward the cap of open streams with :attr:`streams`.
        self.relays = 0
        #: Headers every response of this session carries, and those plus the SSE headers:
        #: built once, not per response.
        self.response_headers: list[tuple[bytes, bytes]] = [] if session_id is None else [
            (b"mcp-session-id", session_id.encode("ascii"))]
        self.sse_headers: list[tuple[bytes, bytes]] = SSE_HEADERS + self.response_headers
        #: The same for an SSE response complete when it starts (sent with its length, like a
        #: JSON reply): what only matters to a stream that stays open left out (``Cache-Control:
        #: no-transform`` and ``X-Accel-Buffering`` keep proxies from holding events back).
        self.sse_whole_headers: list[tuple[bytes, bytes]] = [SSE_HEADERS[0]] + self.response_headers
        if standalone_id is not None:
            self.open_standalone()  # a GET stream every worker writes to: unrelated messages go there

    # -------------------------------------------------------------- requests in

    def attach(self, peer: Peer, state: Any) -> None:
        """The session is served by ``peer`` (started); ``state``: the protocol's session object
        (MCP's ``SessionState``), made current for everything fed to the peer."""
        self.peer = peer
        self.mcp_session = state

    def feed(self, got: Any, origin: Origin | None = None) -> None:
        """Hand a message read already to the session's peer, now, in the caller's context (the
        POST's principal and headers) with the session current; its reply goes to ``origin``
        (None: the peer's transport). After the session ended, nothing runs."""
        peer = self.peer
        if peer is None or self.ended:
            return
        token = current_session.set(self.mcp_session)
        try:
            peer.feed_envelope(got, origin)
        finally:
            current_session.reset(token)

    def open_stream(self, keys: list[Key], params_of: list[Any], *, holds_slots: bool = False) -> Stream:
        """A stream for a POST carrying the requests ``keys`` (``key_of`` of their ids, which must
        not be in flight), whose params are ``params_of``.

        ``holds_slots``: the caller took one slot of :attr:`admission` per request; the session
        gives each back when that request is done.
        """
        st = Stream(self)
        for k, params in zip(keys, params_of, strict=True):
            st.pending.add(k)
            self.by_request[k] = st
            if holds_slots:
                if not isinstance(self._slots, set):
                    self._slots = set()
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

    def key_in_flight(self, k: Key) -> bool:
        """:meth:`in_flight` for a request's ``key_of(id)``."""
        return k in self.by_request

    def cancelled(self, id_: Any) -> None:
        """The client cancelled request ``id_``: the server will not answer it, so its slot is free."""
        self._release(key_of(id_))

    def _release(self, k: Key) -> None:
        if k in self._slots:
            self._slots.discard(k)  # type: ignore[union-attr]  # holds k: a set
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

    def _hold(self, data: bytes) -> None:
        """Keep a message for the GET stream: delivered when one opens; bounded (the oldest go)."""
        held = self._held
        if held is _NOTHING_HELD:
            # An idle session holds no deque (760 bytes: its first block) until it must hold one.
            held = self._held = deque(maxlen=self._hold_unrouted)
        held.append(data)

    def take_held(self) -> list[bytes]:
        out = list(self._held)
        self._held.clear()
        return out

    # ------------------------------------------------------------- messages out

    def route_nowait(self, data: bytes, tag: Key | None) -> bool:
        """:meth:`route` without waiting, for a session whose replies need not wait for its
        state to be saved: False, nothing done, when it would have to wait."""
        if self.saves_state:
            return False
        try:
            obj = codec.decode(data)
        except Exception:
            obj = None
        if type(obj) is dict and "method" not in obj and ("result" in obj or "error" in obj):
            if self.version is None:
                self._learn_version(obj)
            self._deliver_now(key_of(obj.get("id")), data)
            return True
        target = self._related_stream(obj, tag)
        if target is not None:
            return target.emit_nowait(data)
        if type(obj) is dict and "id" not in obj and self._json_mode_related(obj, tag):
            log.debug("notification of a JSON-mode request dropped: %s", obj.get("method"))
            return True
        st = self.standalone
        if st is not None and not st.finished:
            return st.emit_nowait(data)
        self._hold(data)
        return True

    async def route(self, data: bytes, tag: Key | None) -> None:
        """Put one outgoing message on the stream it belongs to."""
        try:
            obj = codec.decode(data)
        except Exception:
            obj = None
        if type(obj) is dict and "method" not in obj and ("result" in obj or "error" in obj):
            await self._route_response(obj, data)
            return
        if self.home is not None and type(obj) is dict and "id" in obj:
            data = self.home.request_out(obj, data)  # a request to the client: its answer may reach another worker
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
            self._hold(data)

    async def _route_response(self, obj: dict[str, Any], data: bytes) -> None:
        if self.version is None:
            self._learn_version(obj)
        await self.deliver(key_of(obj.get("id")), data)

    def note_reply(self, data: bytes) -> None:
        """A reply of the server's, while the negotiated version is not known yet: learn it
        from the reply to ``initialize``."""
        try:
            self._learn_version(codec.decode(data))
        except Exception:
            pass

    def _learn_version(self, obj: Any) -> None:
        """The negotiated version, from the reply to ``initialize`` (until it is known)."""
        result = obj.get("result") if type(obj) is dict else None
        v = result.get("protocolVersion") if type(result) is dict else None
        if type(v) is str:
            self.version = v

    def deliver_reply(self, k: Key, data: bytes) -> None:
        """:meth:`deliver` without waiting, unless the reply must wait for the session's state
        to be saved (then in a task)."""
        if not self.saves_state:
            self._deliver_now(k, data)
            return
        self._later(self.deliver(k, data))

    def _later(self, aw: Any) -> None:
        task = asyncio.get_running_loop().create_task(aw)
        d = self._deliveries
        if not isinstance(d, set):
            d = self._deliveries = set()
        d.add(task)
        task.add_done_callback(d.discard)

    def _forget_progress(self, k: Key) -> None:
        if self.progress:
            for tok in [t for t, r in self.progress.items() if r == k]:
                del self.progress[tok]

    async def deliver(self, k: Key, data: bytes) -> None:
        """Put the response ``data`` to the request keyed ``k`` on its stream (ending the stream
        once all of its requests are answered) and give back the request's slot."""
        if self.saves_state and k in self.by_request:
            await self.home.save_state(self)  # type: ignore[union-attr]  # other workers see what this request changed first
        self._deliver_now(k, data)

    def _deliver_now(self, k: Key, data: bytes) -> None:
        st = self.by_request.pop(k, None)
        self._release(k)
        self._forget_progress(k)
        if st is None:
            log.debug("response for %r has no open stream; dropped", k[1])
            return
        st.pending.discard(k)
        if st.json_waiter is not None:
            # JSON mode: responses are collected and sent as the POST's body once all are in.
            st.json_replies.append(data)
            if not st.pending:
                if not st.json_waiter.done():
                    st.json_waiter.set_result(st.json_replies)
                st.finish()
            return
        if st.emit_nowait(data):
            if not st.pending:
                st.finish()
            return
        self._later(self._emit_then_finish(st, data))

    @staticmethod
    async def _emit_then_finish(st: Stream, data: bytes) -> None:
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
        self.peer = None  # the peer ends with its pipe; nothing here keeps it
        if self.events is not None and self.id is not None:
            await self.events.drop_session(self.id)
        if self.home is not None:
            await self.home.ended(self)


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
    call = current_call.get()
    if call is None:
        return False
    origin = call.origin
    if isinstance(origin, RequestOrigin):
        origin = origin.post
    if not isinstance(origin, PostReplies):
        return False
    return origin.session.close_request_stream(call.request_id)


def primes(session: HTTPSession) -> bool:
    """Whether the session's streams start with a priming event: from 2025-11-25 (SEP-1699);
    older clients may not expect empty data."""
    return session.version is not None and session.version >= "2025-11-25"
