"""What the server knows about one MCP connection (or one stateless request).

:class:`SessionState` holds the connection's profile (negotiated version, client
capabilities), its log level and resource subscriptions. The session of the request at hand
is :data:`sturdyrpc.request_context.current_session` (read here by :func:`request_session`),
set for a peer's reader task (and so for everything it starts) by :class:`SessionPeer`, and
around each stateless request.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import codec
from ..dispatch import Call, Context, Dispatcher
from ..peer import MessageTransport, Peer
from ..request_context import current_headers, current_session, request_principal
from .lifespan import LifespanRunner
from .profile import MCPProfile
from .versions import LATEST, META_PROTOCOL_VERSION, RULES, VersionRules

__all__ = ["SessionState", "SessionPeer", "StatelessContext", "request_session", "use_session", "reset_session"]

log = logging.getLogger("sturdyrpc.mcp")


class SessionState:
    """What the server knows about one connection (or, stateless, one request)."""

    def __init__(
        self,
        profile: MCPProfile,
        lifespan: LifespanRunner,
        peer: Peer | None = None,
        *,
        session_id: str | None = None,
        principal: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = profile
        #: The server's lifespan: what it yielded is ``ctx.lifespan`` in this session's requests.
        self._lifespan = lifespan
        self._peer = weakref.ref(peer) if peer is not None else None
        #: Minimum level of ``notifications/message`` set by ``logging/setLevel`` (None: send none).
        self.log_level: str | None = None
        #: URIs the client subscribed to (``resources/subscribe``).
        self.subscriptions: set[str] = set()
        #: ``Mcp-Session-Id`` on HTTP, a random id per connection elsewhere; None for a
        #: 2026-07-28 request, which belongs to no session.
        self.session_id = session_id
        #: What the transport's security step produced for the client (None on stdio): for a
        #: Streamable HTTP session, the principal it is bound to (:func:`~sturdyrpc.auth.identity_of`);
        #: a request's own is :meth:`request_principal`.
        self.principal = principal
        #: The application's per-session data (``ctx.state``): lives as long as the session.
        self.state: dict[str, Any] = {}
        self._headers = headers

    def headers_for(self, request_id: Any) -> Mapping[str, str] | None:
        """The headers of the HTTP request that carried request ``request_id`` (None off HTTP):
        the request at hand's, which its transport made current."""
        headers = current_headers.get()
        return headers if headers is not None else self._headers

    def request_principal(self) -> Any:
        """The principal of the request at hand: its own token's (a refreshed or stepped-up token
        has other scopes than the one the session was opened with, and two requests in flight
        may carry two tokens), :func:`~sturdyrpc.request_context.request_principal`; the
        session's own where there is none."""
        latest = request_principal()
        return latest if latest is not None else self.principal

    @property
    def lifespan_state(self) -> Any:
        """What the server's lifespan yielded (None before startup, after shutdown, or without one)."""
        return self._lifespan.value

    def fill(self, ctx: Context) -> None:
        """Set what this session knows on a request's context (before the middleware sees it)."""
        ctx.session_id = self.session_id
        ctx.principal = self.request_principal()
        ctx.lifespan = self._lifespan.value
        ctx.state = self.state
        ctx.headers = self.headers_for(ctx.id)

    @property
    def peer(self) -> Peer | None:
        """The connection's peer (None for a stateless request, or once it is gone)."""
        return self._peer() if self._peer is not None else None

    @property
    def rules(self) -> VersionRules:
        """The negotiated version's rules (the latest version's before negotiation)."""
        v = self.profile.version
        return RULES[v] if v is not None else RULES[LATEST]

    def rules_for(self, meta: Any) -> VersionRules:
        """The rules a request is served under: on 2026-07-28 each request names its version in
        ``_meta`` (``meta``: that object, or anything else when absent)."""
        if self.profile.era == "modern" and type(meta) is dict:
            v = meta.get(META_PROTOCOL_VERSION)
            if isinstance(v, str) and v in RULES:
                return RULES[v]
        return self.rules

    def rules_of(self, params: Any) -> VersionRules:
        """:meth:`rules_for` the ``_meta`` of request ``params``."""
        profile = self.profile
        rules = profile.session_rules  # the handshake era's (and before negotiation): one for every request
        if rules is not None:
            return rules
        if profile.era == "modern" and type(params) is dict:
            meta = params.get("_meta")  # rules_for(meta), one call less: every 2026-07-28 tools/call asks
            if type(meta) is dict:
                mv = meta.get(META_PROTOCOL_VERSION)
                if isinstance(mv, str) and mv in RULES:
                    return RULES[mv]
            return self.rules
        v = profile.version
        return RULES[v] if v is not None else RULES[LATEST]

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification on the connection (no-op without a live peer)."""
        peer = self.peer
        if peer is None or peer.is_closing:
            return
        try:
            await peer.notify(method, params)
        except Exception as exc:
            log.debug("notification %s not sent: %r", method, exc)


#: The ``params._meta`` member marking a message a server replays to itself (a shared session's
#: replica repeating the client's ``initialize``, see :mod:`sturdyrpc.mcp_http.shared`): no
#: request of the client's, so telemetry leaves it out. Its value is :data:`REPLAY_TOKEN`, made
#: per process: a client cannot mark its own requests to hide them.
REPLAY_MARK = "sturdyrpc/replay"
REPLAY_TOKEN = secrets.token_hex(16)


def mark_replayed(params: Any) -> dict[str, Any]:
    """``params`` (a copy) marked as replayed by this server (:data:`REPLAY_MARK`)."""
    out = dict(params) if type(params) is dict else {}
    meta = out.get("_meta")
    out["_meta"] = {**(meta if type(meta) is dict else {}), REPLAY_MARK: REPLAY_TOKEN}
    return out


def is_replayed(params: Any) -> bool:
    """Whether ``params`` were marked by :func:`mark_replayed` in this process."""
    if type(params) is not dict:
        return False
    meta = params.get("_meta")
    return type(meta) is dict and meta.get(REPLAY_MARK) == REPLAY_TOKEN


#: The session whose messages are being handled (set for a peer's reader task and everything
#: it starts, and around each stateless request): :data:`sturdyrpc.request_context.current_session`.
_SESSION: contextvars.ContextVar[SessionState | None] = current_session


def request_session() -> SessionState | None:
    """The session of the request at hand, if any (as :func:`~sturdyrpc.request_context.request_principal`
    is its principal)."""
    return _SESSION.get()


def use_session(session: SessionState | None) -> contextvars.Token[SessionState | None]:
    """Make ``session`` current in this context; undo with ``reset_session(token)``."""
    return _SESSION.set(session)


def reset_session(token: contextvars.Token[SessionState | None]) -> None:
    """Undo :func:`use_session`."""
    _SESSION.reset(token)


class SessionPeer(Peer):
    """A peer serving one MCP session, which it makes known to everything it handles (its
    context is copied when it starts: the reader and writer tasks, and every frame a transport
    pushes to it). The session (:attr:`mcp_session`) is made with the peer and lives as long.
    """

    def __init__(self, transport: MessageTransport, dispatcher: Dispatcher, *, profile: MCPProfile, lifespan: LifespanRunner,
                 session_id: str | None = None, principal: Any = None, default_timeout: float | None = 60.0,
                 name: str = "mcp-server", on_enqueue: Callable[[bytes], None] | None = None) -> None:
        super().__init__(transport, dispatcher, profile=profile, default_timeout=default_timeout, name=name, on_enqueue=on_enqueue)
        #: The MCP session served on this peer.
        self.mcp_session = SessionState(profile, lifespan, self, session_id=session_id, principal=principal)

    def start_now(self) -> None:
        token = _SESSION.set(self.mcp_session)
        try:
            super().start_now()
        finally:
            _SESSION.reset(token)


class StatelessContext(Context):
    """The context of one 2026-07-28 request served by :meth:`MCPServer.handle_stateless`."""

    __slots__ = ("session", "emit", "done", "_last_progress")

    def __init__(self, call: Call, session: SessionState, emit: Callable[[bytes], Awaitable[None]]) -> None:
        super().__init__(call.request_id, call.method, call.params, call.is_notification)
        self.session = session
        #: ``await emit(data)``: a notification of this request, encoded, sent before its reply.
        self.emit = emit
        self.done = False
        self._last_progress: float | None = None

    async def notify(self, method: str, params: Any = None) -> None:
        """Pass a notification of this request, encoded, to :attr:`emit`."""
        if self.done:
            return
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.emit(codec.encode(msg))

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        token = self.session.profile.read_progress_token(self.params)
        if token is None or self.done:
            return
        if self._last_progress is not None and not progress > self._last_progress:
            raise ValueError(f"progress must increase (was {self._last_progress}, got {progress})")
        self._last_progress = progress
        method, params = self.session.profile.progress_notification(token, progress, total, message)
        await self.notify(method, params)

    async def request(self, method: str, params: Any = None, **kw: Any) -> Any:
        """Always fails: 2026-07-28 servers ask for input with ``input_required`` results instead."""
        raise RuntimeError("2026-07-28 servers do not send requests to the client")
