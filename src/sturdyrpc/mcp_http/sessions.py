"""The session table: where the handshake-era sessions of a Streamable HTTP app live.

:class:`SessionTable` is all the app knows of its sessions: find one, create one, delete one,
hand it a POST's messages, open its GET stream, resume one of its streams. Two tables implement
it: :class:`~.local.LocalSessions` (this process only, the default) and
:class:`~.shared.SharedSessions` (a shared store: any worker serves any session, rebuilding a
local *replica* of a session it meets for the first time).

The caps are this module's, the same for both (:class:`SessionCaps`), counted over the
sessions this process holds (a shared table's replicas included):

- **per principal** (authenticated principals, told apart by
  :func:`~sturdyrpc.auth.principal.identity_of`): at ``max_sessions_per_principal`` a new
  session ends that principal's own least recently active one (one with no open response first);
- **global**: at ``max_sessions`` a new session ends the least recently active session idle
  (no request, no open response) for longer than ``evict_idle_after`` seconds; when there is
  none, the new session is refused with 503 and ``Retry-After``: an active session of another
  client is never ended to make room;
- **idle expiry**: a session idle for ``idle_timeout`` seconds ends on a timer;
- **streams**: a response that would open more than ``max_streams_per_session`` streams of one
  session gets 503 (:meth:`SessionTable.check_streams`).

"Ends" means: this table lets the session go. A local session is then gone; a shared one's
replica is, while the session itself lives on in the store until DELETE or its TTL.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import codec
from ..admission import Admission
from ..auth.principal import identity_of
from ..envelope import Envelope, from_message
from ..messages import Notification, Request
from ..peer import Peer
from ..request_context import current_session
from ..store import StoreUnavailable
from ..store.notices import store_warning
from ..transports.asgi import ASGIApp, HTTPRefusal, Send, respond
from .events import EventStore
from .responses import SSEResponse
from .session import HTTPSession, Key, PostReplies, ReplyWaiter, RequestOrigin

__all__ = ["SessionTable", "SessionCaps", "Serving", "Attachment", "OpenPeer", "TableFactory", "STORE_UNAVAILABLE",
           "EVICT_IDLE_AFTER", "store_unavailable", "too_many_streams", "not_found", "unknown_event_id", "session_id_of"]

log = logging.getLogger("sturdyrpc.http")

#: ``open_peer(session) -> (peer, state)``: the peer (not started) that serves one handshake-era
#: session on its pipe, and the protocol's state of the session (made current for its requests).
OpenPeer = Callable[[HTTPSession], tuple[Peer, Any]]

#: Seconds a session must have been idle before the global cap may end it, by default.
EVICT_IDLE_AFTER = 5.0

#: The JSON-RPC error code of a request refused because the shared session store is unavailable
#: (an implementation-defined server error, -32000..-32099; HTTP 503 with ``Retry-After``).
STORE_UNAVAILABLE = -32001

_STATELESS_INIT_ID = "sturdyrpc-stateless-init"


@dataclasses.dataclass(frozen=True)
class SessionCaps:
    """The bounds of a session table (see the module docstring); seconds for the times."""

    max_sessions: int = 1000
    max_sessions_per_principal: int = 16
    max_streams_per_session: int = 64
    idle_timeout: float = 600.0
    evict_idle_after: float = EVICT_IDLE_AFTER


@dataclasses.dataclass(frozen=True)
class Serving:
    """What a session table gets from the app that holds it: how to start a session's peer, the
    server-wide admission its requests take slots of, the caps, the event store the app was given
    (a shared table keeps events in its store instead) and the replay window of finished streams."""

    open_peer: OpenPeer
    admission: Admission
    caps: SessionCaps
    events: EventStore | None
    replay_window: float


#: Builds the table of an app (``StreamableHTTPApp(table=...)``).
TableFactory = Callable[[Serving], "SessionTable"]


class Attachment:
    """An SSE response attached to a session's stream (a GET, a resumption): what to write first
    (``head``), where events arrive (``conn``), and what to undo when it is finished (:meth:`release`)."""

    __slots__ = ("conn", "head", "_done")

    def __init__(self, conn: SSEResponse, head: bytes = b"", done: Callable[[], None] | None = None) -> None:
        self.conn, self.head, self._done = conn, head, done

    def release(self) -> None:
        if self._done is not None:
            self._done()
            self._done = None


def too_many_streams() -> HTTPRefusal:
    return HTTPRefusal(503, -32600, "Too many open streams", [(b"retry-after", b"1")])


async def store_unavailable(send: Send, exc: StoreUnavailable) -> None:
    """503 for a request that needs the shared store while it is unavailable (the worker stays
    up; the next request tries again). The store's address goes to the log, not to the client."""
    store_warning(log, "store unavailable", "session store %s unavailable: %s", exc.store, exc.reason)
    err = {"code": STORE_UNAVAILABLE, "message": "The session store is unavailable"}
    await respond(send, 503, codec.encode({"jsonrpc": "2.0", "error": err}), extra=[(b"retry-after", b"1")])


class SessionTable(abc.ABC):
    """The sessions of one app (see the module docstring). It is the :class:`~.session.SessionHome`
    of every session it holds."""

    #: Replies leave without waiting for state to be saved (a shared table: True).
    saves_state = False

    def __init__(self, serving: Serving) -> None:
        self.open_peer = serving.open_peer
        self.admission = serving.admission
        self.caps = serving.caps
        #: The sessions this process holds, by id (a shared table: the replicas it serves).
        self.sessions: dict[str, HTTPSession] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    #: Where the sessions' streams keep their events (None: no resumption).
    events: EventStore | None

    # ------------------------------------------------------------ the interface

    def guard(self, endpoint: ASGIApp) -> ASGIApp:
        """``endpoint`` with what this table needs before any request (a shared table: its store)."""
        return endpoint

    @abc.abstractmethod
    async def create(self, principal: Any, init_params: Any) -> HTTPSession:
        """A new session for ``principal``, whose ``initialize`` carries ``init_params`` (503 when the table is full)."""

    @abc.abstractmethod
    def find(self, session_id: bytes | None, principal: Any) -> HTTPSession | Awaitable[HTTPSession]:
        """The session of the ``Mcp-Session-Id`` header (400 without one, 404 for an unknown one
        or another principal's); the session's principal becomes this request's. Returns the
        session, or what to await for it (a table that must reach its store)."""

    @abc.abstractmethod
    async def delete(self, session: HTTPSession) -> None:
        """End ``session`` for good (DELETE)."""

    def feed(self, session: HTTPSession, items: list[tuple[Envelope, Key | None]], post: PostReplies) -> Awaitable[None] | None:
        """Hand a POST's messages to the session's peer, in order (``items``: each with its
        request's key, None for a notification or response), each request's reply going to
        ``post``. Returns None when done, or what to await first (a table that must reach its
        store: the caller awaits it before it looks at the replies).

        Fed as :meth:`HTTPSession.feed` feeds one message, with the session current once for
        all of them."""
        peer = session.peer
        if peer is None or session.ended:
            return None  # after the session ended, nothing runs
        feed = peer.feed_envelope
        token = current_session.set(session.mcp_session)
        try:
            for m, k in items:
                feed(m, None if k is None else post if k is post.key else RequestOrigin(post, k))
                if session.ended:
                    break
        finally:
            current_session.reset(token)
        return None

    @abc.abstractmethod
    async def open_get(self, session: HTTPSession, *, prime: bool, retry_ms: int | None) -> Attachment:
        """The session's GET stream, for a new GET (replacing one still open); ``prime``: start
        with a priming event."""

    @abc.abstractmethod
    async def resume(self, session: HTTPSession, last_event_id: str, *, prime: bool, retry_ms: int | None) -> Attachment:
        """A GET with ``Last-Event-ID``: what the stream sent after that event, then the rest live
        (400 for an id that is malformed or names no stream of the session)."""

    def check_streams(self, session: HTTPSession) -> None:
        """503 unless ``session`` may open one more stream."""
        if len(session.streams) + session.relays >= self.caps.max_streams_per_session:
            raise too_many_streams()

    async def stateless(self, version: str | None, principal: Any, *, skip_init: bool) -> HTTPSession:
        """A throw-away session for one POST, held by no table: initialized behind the scenes
        unless the POST is the initialize itself, so that no state has to survive between
        requests (any worker answers)."""
        session = HTTPSession(None, principal, None, admission=self.admission)
        self._start_peer(session)
        if not skip_init:
            v = version or "2025-03-26"
            session.version = v
            waiter = ReplyWaiter()
            session.feed(from_message(Request("initialize", {"protocolVersion": v, "capabilities": {},
                                                             "clientInfo": {"name": "stateless-http", "version": "0"}},
                                              _STATELESS_INIT_ID)), waiter)
            await waiter.wait(30)
            session.version = v
            session.feed(from_message(Notification("notifications/initialized", None)))
        return session

    async def aclose(self) -> None:
        """End every session (server shutdown)."""
        for s in list(self.sessions.values()):
            await s.end()
        for t in list(self._bg):
            t.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    # ---------------------------------------------------- SessionHome of its sessions

    def request_out(self, obj: dict[str, Any], data: bytes) -> bytes:
        return data

    async def save_state(self, session: HTTPSession) -> None:
        return None

    async def ended(self, session: HTTPSession) -> None:
        if session.id is not None and self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        self._forget(session)

    def left(self, session: HTTPSession, stream_id: str) -> None:
        """:meth:`~.session.SessionHome.left`: nothing to do where events are stored as they are sent."""
        return None

    def _forget(self, session: HTTPSession) -> None:
        """What the table keeps of a session beside the session itself, dropped when it ends."""
        return None

    # ---------------------------------------------------------------- the caps

    def _add(self, session_id: str, principal: Any, **options: Any) -> HTTPSession:
        """Make room (or refuse: 503), then register and start a session with this id."""
        self._make_room(principal)
        session = HTTPSession(session_id, principal, self.events, admission=self.admission, home=self, **options)
        self.sessions[session_id] = session
        self._start_peer(session)
        self._ensure_sweeper()
        return session

    def _make_room(self, principal: Any) -> None:
        self._expire_idle()
        caps = self.caps
        if principal is not None:
            who = identity_of(principal)
            own = [s for s in self.sessions.values() if not s.ended and identity_of(s.principal) == who]
            if len(own) >= caps.max_sessions_per_principal:
                # The principal's own least recently active session goes (a client that crashed
                # never sends DELETE); the client holding it gets 404 and initializes again.
                victim = min(own, key=lambda s: (s.has_open_response(), s.last_active))
                self._evict(victim, "its principal opened more than max_sessions_per_principal")
        if len(self.sessions) < caps.max_sessions:
            return
        # Only a session idle for a while may go: ending an active one would let whoever fills
        # the table take other clients' sessions away.
        now = time.monotonic()
        quiet = [s for s in self.sessions.values() if not s.has_open_response()]
        idle = [s for s in quiet if now - s.last_active > caps.evict_idle_after]
        if idle:
            self._evict(min(idle, key=lambda s: s.last_active), "the server reached max_sessions")
            return
        soonest = min((caps.evict_idle_after - (now - s.last_active) for s in quiet), default=caps.evict_idle_after)
        retry = str(max(1, math.ceil(soonest))).encode()
        log.warning("new MCP session refused: max_sessions (%d) reached and none idle for %g s",
                    caps.max_sessions, caps.evict_idle_after)
        raise HTTPRefusal(503, -32000, "Server busy: too many sessions", [(b"retry-after", retry)])

    def _evict(self, victim: HTTPSession, why: str) -> None:
        log.info("MCP session %s evicted: %s", (victim.id or "")[:8], why)
        self.end_session(victim)

    def end_session(self, session: HTTPSession) -> None:
        """Let ``session`` go now (it is no longer found) and end it soon."""
        if session.id is not None and self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        # Background work in a context of its own: it must not keep the request's (headers, principal).
        t = asyncio.get_running_loop().create_task(session.end(), context=contextvars.Context())
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _ensure_sweeper(self) -> None:
        """Idle sessions end on a timer, not only when someone opens a new one."""
        loop = asyncio.get_running_loop()
        t = self._sweeper
        if t is not None and not t.done() and t.get_loop() is loop:
            return
        self._sweeper = loop.create_task(self._sweep(), context=contextvars.Context())

    async def _sweep(self) -> None:
        interval = max(0.01, min(60.0, self.caps.idle_timeout / 4))
        while self.sessions:
            await asyncio.sleep(interval)
            self._expire_idle()

    def _expire_idle(self) -> None:
        now = time.monotonic()
        timeout = self.caps.idle_timeout
        for s in [s for s in self.sessions.values() if now - s.last_active > timeout and not s.has_open_response()]:
            self.end_session(s)

    def _start_peer(self, session: HTTPSession) -> None:
        """Start the peer serving ``session`` now (the POST that made it feeds it on this turn);
        when the peer is done (closed by either side), the session ends."""
        peer, state = self.open_peer(session)
        peer.start_now()
        session.attach(peer, state)

        def peer_done() -> None:
            if not session.ended:
                self.end_session(session)

        # No task waits for that (an idle session would hold one): the flag calls back. In a
        # context of its own: it must not keep the request's (headers, principal).
        peer.closed.when_set(peer_done, context=contextvars.Context())


def session_id_of(raw: bytes | None) -> str:
    """The ``Mcp-Session-Id`` header's value (400 without one)."""
    if raw is None:
        raise HTTPRefusal(400, -32600, "Bad Request: Mcp-Session-Id header is required")
    return raw.decode("latin-1")


def not_found() -> HTTPRefusal:
    # Another principal's session looks exactly like an unknown one: ids are not credentials.
    return HTTPRefusal(404, -32600, "Session not found")


def unknown_event_id() -> HTTPRefusal:
    return HTTPRefusal(400, -32600, "Bad Request: unknown Last-Event-ID")
