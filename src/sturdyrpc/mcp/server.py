"""The MCP server: tools, resources (and templates), prompts and completions on plain typed functions.

One :class:`MCPServer` object serves any number of connections, over any transport:

- :meth:`MCPServer.create_peer` / :meth:`MCPServer.serve`: one stateful session (any protocol
  version, handshake or 2026-07-28) over a :class:`~sturdyrpc.peer.MessageTransport`, on a
  :class:`~sturdyrpc.peer.Peer` (stdio uses this, as does Streamable HTTP for handshake-era
  sessions);
- :meth:`MCPServer.serve_stateless` / :meth:`MCPServer.handle_stateless`: one 2026-07-28 request
  on its own, its progress and log notifications passed to a callback (Streamable HTTP 2026-07-28).

Tools::

    server = MCPServer("demo", "1.0")

    @server.tool()
    async def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

The input schema comes from the type hints (JSON Schema 2020-12); arguments are checked
before the function runs. A declared return type gives an ``outputSchema`` and
``structuredContent`` (non-object values are wrapped as ``{"result": value}``). An exception
inside a tool becomes a result with ``isError: true`` and a generic text naming an incident
id (the traceback goes to the log under that id; no exception text reaches the client);
raise :class:`ToolError` to show a message on purpose. A parameter annotated
:class:`MCPContext` receives the request context (progress, logging, sampling, elicitation,
roots).

The work is split by job: :mod:`.registry` (tool, resource and prompt records),
:mod:`.content` (content blocks, :class:`ToolResult`, :class:`ToolError`), :mod:`.context`
(:class:`MCPContext`), :mod:`.session_state` (per-connection state), :mod:`.request_state`
(signed 2026-07-28 ``requestState``), :mod:`.listen` (``subscriptions/listen``),
:mod:`.handlers` (the protocol methods) and :mod:`.tools_call` (the one ``tools/call`` path);
this module is the facade that ties them to one object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ..dispatch import Context, Dispatcher, Middleware
from ..envelope import read
from ..errors import InvalidRequest
from ..limits import DEFAULT_LIMITS, Limits
from ..peer import MessageTransport, Peer, PeerContext
from .content import (
    ToolError,
    ToolResult,
    audio_content,
    embedded_resource,
    image_content,
    text_content,
)
from .context import LOG_LEVELS, InputRequired, MCPContext
from .handlers import ProtocolHandlers
from .lifespan import Lifespan, LifespanRunner
from .listen import META_SUBSCRIPTION_ID, ListenStreams
from .pages import Pages
from .profile import MCPProfile
from .registry import Prompt, Resource, Tool
from .request_state import RequestStateSigner
from .scopes import required_scopes
from .session_state import SessionPeer, SessionState, StatelessContext, current_session
from .stateless import StatelessRequest, StatelessServing
from .tasks import TASKS_EXTENSION, Tasks
from .tools_call import MCPDispatcher, ToolsCall
from .versions import META_SERVER_INFO, SUPPORTED_VERSIONS, VersionRules

if TYPE_CHECKING:
    from .client import MCPClient

__all__ = [
    "MCPServer",
    "MCPContext",
    "SessionState",
    "ToolError",
    "ToolResult",
    "text_content",
    "image_content",
    "audio_content",
    "embedded_resource",
    "LOG_LEVELS",
    "META_SUBSCRIPTION_ID",
]

log = logging.getLogger("sturdyrpc.mcp")

F = TypeVar("F", bound=Callable[..., Any])


class MCPServer:
    """An MCP server: register tools, resources, prompts and completions, then serve.

    Transport-agnostic: :meth:`serve` / :meth:`create_peer` run one stateful session over any
    message transport; :meth:`serve_stateless` / :meth:`handle_stateless` answer one 2026-07-28
    request.
    """

    def __init__(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        title: str | None = None,
        supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS,
        limits: Limits = DEFAULT_LIMITS,
        cache_ttl_ms: int = 0,
        cache_scope: str = "private",
        page_size: int | None = None,
        coerce_json_strings: bool = False,
        lifespan: Lifespan | None = None,
    ) -> None:
        self.name = name
        #: List results come in pages of this many items with a ``nextCursor`` (None: one page).
        self.pages = Pages(page_size)
        #: Tool arguments declared as objects/arrays that arrive as JSON strings are decoded
        #: once before validation (set before registering the tools it should apply to).
        self.coerce_json_strings = coerce_json_strings
        #: 2026-07-28 caching hints on list, read and discover results (``ttlMs``, ``cacheScope``).
        self.cache_ttl_ms = cache_ttl_ms
        self.cache_scope = cache_scope
        self.version = version
        self.title = title
        self.instructions = instructions
        self.supported_versions = supported_versions
        self.tools: dict[str, Tool] = {}
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, Resource] = {}
        self.prompts: dict[str, Prompt] = {}
        self.completer: Callable[..., Any] | None = None
        #: Called with the session when the client says its roots changed.
        self.on_roots_changed: Callable[[SessionState], Awaitable[None] | None] | None = None
        self._sessions: weakref.WeakKeyDictionary[Peer, SessionState] = weakref.WeakKeyDictionary()
        #: Open ``subscriptions/listen`` streams (2026-07-28), over every transport.
        self.listeners = ListenStreams()
        #: Signs and checks ``requestState`` (2026-07-28 multi round-trip requests).
        self.request_state = RequestStateSigner()
        #: Set when several workers serve this server (Streamable HTTP with a shared store): session
        #: notifications (``resources/updated``, ``list_changed``) go to every worker through it,
        #: and each worker delivers them to its sessions and listen streams.
        self.fanout: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
        #: ``tools/call``: the one path from request to reply (see :mod:`.tools_call`).
        self.tools_call = ToolsCall(self)
        #: Tasks: tool calls answered with a handle and run in the background (see :mod:`.tasks`).
        self.tasks = Tasks(self)
        dispatcher = MCPDispatcher(limits, log)
        self.dispatcher: Dispatcher = dispatcher
        ProtocolHandlers(self).register(dispatcher)
        dispatcher.set_tool_failure(self.tools_call.failed_call)
        #: 2026-07-28 requests, each served on its own (see :mod:`.stateless`).
        self._stateless = StatelessServing(self)
        #: Startup and shutdown around serving (see :mod:`.lifespan`); its value is ``ctx.lifespan``.
        self.lifespan = LifespanRunner(self, lifespan)

    # ------------------------------------------------------------------ decorators

    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
        annotations: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
        structured: bool | None = None,
        blocking: bool | None = None,
        meta: dict[str, Any] | None = None,
        icons: list[Any] | None = None,
        timeout: float | None = None,
        scopes: Iterable[str] | None = None,
        task_support: str = "forbidden",
    ) -> Callable[[F], F]:
        """Register a tool. The description defaults to the docstring (without its ``Args:`` /
        ``:param:`` part, which describes the parameters in the input schema).

        ``timeout`` (seconds): a call still running then ends as a tool error (``isError``)
        naming the limit; the tool must be async or blocking (a sync tool on the pool is left
        to finish on its thread, its result dropped).

        ``input_schema`` replaces the generated schema (arguments then go to the function by
        name, unchecked beyond names). ``structured=False`` turns off ``outputSchema`` /
        ``structuredContent`` for a declared return type. Sync functions run on the bounded
        pool of daemon threads (``Limits.max_threads``) unless ``blocking=False``, which runs
        them inline (the fastest path, for functions that return at once). ``title`` (2025-06-18+)
        and ``icons`` (2025-11-25+, ``[{"src": URL, "mimeType"?, "sizes"?, "theme"?}]``) are sent
        to clients whose negotiated version has them. ``scopes``: OAuth scopes a caller's token must
        hold over authenticated HTTP (else the tool is not listed and calling it is 403
        ``insufficient_scope``; see ``docs/AUTH.md``).

        ``task_support`` (``execution.taskSupport``, see :mod:`.tasks`): ``"optional"`` lets a
        client call the tool as a task (2025-11-25 ``params.task``; on 2026-07-28 a client that
        declares the tasks extension gets a task), ``"required"`` makes a plain 2025-11-25 call
        an error (-32601); the default ``"forbidden"`` is not announced.
        """

        def register(fn: F) -> F:
            t = Tool(fn, name or fn.__name__, description, title, annotations, input_schema, structured, blocking, meta, icons=icons, coerce_json_strings=self.coerce_json_strings,
                     scopes=scopes)
            if timeout is not None:
                t.set_timeout(timeout)
            t.set_task_support(task_support)
            self.tools[t.name] = t
            self._changed("tools")
            return fn

        return register

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        title: str | None = None,
        blocking: bool | None = None,
        icons: list[Any] | None = None,
        scopes: Iterable[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a resource; a URI with ``{variables}`` registers a template whose variables
        are passed to the function by name. ``title``/``icons``/``scopes`` as for :meth:`tool`."""

        def register(fn: F) -> F:
            r = Resource(fn, uri, name or fn.__name__, description, mime_type, title, blocking, icons=icons, scopes=scopes)
            (self.templates if r.is_template else self.resources)[uri] = r
            self._changed("resources")
            return fn

        return register

    def prompt(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
        arguments: dict[str, str] | None = None,
        icons: list[Any] | None = None,
        scopes: Iterable[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a prompt; ``arguments`` maps parameter names to descriptions (the docstring's
        ``Args:`` section fills the others). ``title``/``icons``/``scopes`` as for :meth:`tool`."""

        def register(fn: F) -> F:
            p = Prompt(fn, name or fn.__name__, description, title, arguments, icons=icons, scopes=scopes)
            self.prompts[p.name] = p
            self._changed("prompts")
            return fn

        return register

    def remove_tool(self, name: str) -> bool:
        """Unregister the tool ``name`` (listeners are told the list changed); False if absent."""
        if self.tools.pop(name, None) is None:
            return False
        self._changed("tools")
        return True

    def middleware(self, fn: Middleware) -> Middleware:
        """Add ``async def fn(ctx, call_next)`` to the middleware chain (usable as a decorator).

        It runs around every request and notification this server handles, on every transport
        (stdio, HTTP sessions, 2026-07-28 HTTP, the test client), in the order added. ``ctx``
        has ``method``, ``params``, ``id``, ``session_id``, ``principal``, ``lifespan``,
        ``headers`` (HTTP) and ``state``. Return ``await call_next(ctx)`` to go on, or a result
        of your own, or raise an ``RPCError``; any other exception is answered as a handler's
        (-32603, or ``isError`` for ``tools/call``, naming an incident id).
        """
        return self.dispatcher.middleware(fn)

    @property
    def lifespan_state(self) -> Any:
        """What the lifespan yielded (None before startup, after shutdown, or without one)."""
        return self.lifespan.state

    def test_client(self, protocol: str | None = None, **options: Any) -> contextlib.AbstractAsyncContextManager[MCPClient]:
        """``async with server.test_client() as client``: an :class:`~sturdyrpc.mcp.client.MCPClient`
        connected in memory to this server, with the lifespan entered and exited around it.

        ``protocol`` forces a version (default: negotiated as a real client would); ``options``
        go to the client (``sampling=``, ``elicitation=``, ``roots=``, ``on_log=``, ``log_level=``,
        ``timeout=``). Requests take the same path as on stdio, middleware included.
        """
        from .testing import connect_in_memory

        return connect_in_memory(self, protocol, **options)

    def completion(self) -> Callable[[F], F]:
        """Register the completion handler ``fn(ref, argument, context) -> list[str] | dict``."""

        def register(fn: F) -> F:
            self.completer = fn
            return fn

        return register

    # ------------------------------------------------------------------ notifications

    def sessions(self) -> list[SessionState]:
        """The live stateful sessions."""
        return [s for p, s in list(self._sessions.items()) if not p.is_closing]

    def _changed(self, kind: str) -> None:
        if not self._sessions and not len(self.listeners) and self.fanout is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.create_task(self.notify_list_changed(kind))

    async def notify_list_changed(self, kind: str) -> None:
        """Send ``notifications/{kind}/list_changed`` (kind: tools, resources, prompts) to every
        handshake-era session that finished initializing, and to every ``subscriptions/listen``
        stream that asked for them."""
        if self.fanout is not None:
            await self.fanout(f"notifications/{kind}/list_changed", {})
            return
        self.listeners.publish(f"notifications/{kind}/list_changed", {})
        for s in self.sessions():
            if s.profile.era == "handshake" and s.profile.initialize_seen:
                await s.notify(f"notifications/{kind}/list_changed")

    async def resource_updated(self, uri: str) -> None:
        """Send ``notifications/resources/updated`` to the sessions subscribed to ``uri`` (and the
        ``subscriptions/listen`` streams naming it)."""
        if self.fanout is not None:
            await self.fanout("notifications/resources/updated", {"uri": uri})
            return
        self.listeners.publish("notifications/resources/updated", {"uri": uri})
        for s in self.sessions():
            if uri in s.subscriptions:
                await s.notify("notifications/resources/updated", {"uri": uri})

    def close_subscriptions(self) -> int:
        """End every open ``subscriptions/listen`` stream gracefully (e.g. at shutdown): each
        gets its final ``resultType: "complete"`` result, then nothing more. Returns how many."""
        return self.listeners.close_all()

    # ------------------------------------------------------------------ serving

    def create_peer(
        self,
        transport: MessageTransport,
        *,
        name: str = "mcp-server",
        default_timeout: float | None = 60.0,
        session_id: str | None = None,
        principal: Any = None,
    ) -> Peer:
        """A :class:`~sturdyrpc.peer.Peer` (not started) serving one MCP session on ``transport``.

        The session (version, capabilities, log level, subscriptions, ``ctx.state``) lives as
        long as the peer. Start it with ``async with peer:`` and wait with ``await peer.wait_closed()``.
        A transport that knows more passes it on: ``session_id`` (default: a random one),
        ``principal`` (its security step's, for the session). Each request's own principal and
        headers are the transport's to make current (:mod:`sturdyrpc.request_context`).
        """
        profile = MCPProfile(supported=self.supported_versions)
        peer = SessionPeer(transport, self.dispatcher, profile=profile, default_timeout=default_timeout, name=name)
        session = SessionState(self, profile, peer, session_id=session_id if session_id is not None else os.urandom(16).hex(),
                               principal=principal)
        peer.mcp_session = session
        self._sessions[peer] = session
        return peer

    def session_of(self, peer: Peer) -> SessionState | None:
        """The session served on ``peer`` (made by :meth:`create_peer`), or None."""
        return self._sessions.get(peer)

    async def serve(self, transport: MessageTransport, *, name: str = "mcp-server") -> None:
        """Serve one session on ``transport`` until the other side closes it."""
        peer = self.create_peer(transport, name=name)
        async with peer:
            await peer.wait_closed()

    def serve_stateless(self, got: Any, emit: Callable[[bytes], Awaitable[None]]) -> StatelessRequest:
        """Start serving one 2026-07-28 message read already (anything
        :func:`sturdyrpc.envelope.read` returns: the HTTP app reads each body once), in the
        caller's context (the HTTP request's principal and headers). The returned request is
        ``done`` at once when the reply is ready (an error, a notification, an inline tool);
        otherwise ``await request.wait()``. ``emit`` gets the request's notifications (progress,
        log) before its reply."""
        return self._stateless.serve(got, emit)

    async def handle_stateless(self, body: bytes, send_related: Callable[[bytes], Awaitable[None]]) -> bytes | None:
        """Serve one 2026-07-28 message (``body``: its JSON bytes); return the reply bytes.

        Progress and log notifications of the request are passed, encoded, to
        ``send_related`` before the reply is returned. Returns None for a notification.
        Errors in the message itself (bad JSON, missing ``_meta`` fields, unsupported
        version) come back as error replies; the caller picks the HTTP status. The handler
        runs through the one executor: whatever it raises (``SystemExit`` included) is a
        -32603 reply with an incident id, or a tool's ``isError`` result. Cancel by cancelling
        the task that awaits this coroutine (nothing is returned then).
        """
        request = self.serve_stateless(read(body, self.dispatcher.limits), send_related)
        return request.value if request.done else await request.wait()

    def required_scopes(self, method: str, params: Any) -> frozenset[str]:
        """The OAuth scopes a ``method`` request with ``params`` needs (the ``scopes=`` of the
        tool, resource or prompt it names; see :mod:`.scopes`)."""
        return required_scopes(self, method, params)

    # ------------------------------------------------------------------ what handlers share

    def session_for(self, ctx: Context) -> SessionState:
        """The session a handler's request belongs to."""
        s = current_session()
        if s is not None:
            return s
        if isinstance(ctx, StatelessContext):
            return ctx.session
        if isinstance(ctx, PeerContext):
            s = self._sessions.get(ctx.peer)
            if s is not None:
                return s
            prof = ctx.peer.profile
            if isinstance(prof, MCPProfile):  # a peer built elsewhere around our dispatcher
                s = SessionState(self, prof, ctx.peer)
                self._sessions[ctx.peer] = s
                return s
        raise InvalidRequest("Invalid Request", {"reason": "no MCP session for this request"})

    def server_info(self, rules: VersionRules) -> dict[str, Any]:
        """``serverInfo`` under ``rules``."""
        info: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title and rules.structured_output:
            info["title"] = self.title
        return info

    def capabilities(self, rules: VersionRules, bound: bool = False) -> dict[str, Any]:
        """The server capabilities advertised under ``rules``; ``bound``: the client has an
        auth context (a principal) that tasks are bound to (``tasks.list`` is declared only then)."""
        caps: dict[str, Any] = {}
        if self.completer is not None and rules.audio:
            caps["completions"] = {}
        caps["logging"] = {}
        # 2026-07-28: the same notifications, delivered on subscriptions/listen streams
        if self.prompts:
            caps["prompts"] = {"listChanged": True}
        if self.resources or self.templates:
            caps["resources"] = {"subscribe": True, "listChanged": True}
        caps["tools"] = {"listChanged": True}
        if self.tasks.enabled():
            if rules.tasks:
                caps["tasks"] = self.tasks.capability(bound)
            elif rules.stateless:
                caps["extensions"] = {TASKS_EXTENSION: {}}
        return caps

    def finish(self, rules: VersionRules, result: dict[str, Any], cacheable: bool = False) -> dict[str, Any]:
        """``result`` with what ``rules`` add to every result (2026-07-28: ``resultType``, the
        server info in ``_meta``, and caching hints on cacheable results)."""
        if rules.result_type:
            result.setdefault("resultType", "complete")
            if cacheable and result["resultType"] == "complete":
                result.setdefault("ttlMs", self.cache_ttl_ms)
                result.setdefault("cacheScope", self.cache_scope)
            meta = result.get("_meta")
            meta = dict(meta) if type(meta) is dict else {}
            meta[META_SERVER_INFO] = self.server_info(rules)
            result["_meta"] = meta
        return result

    def input_required(self, rules: VersionRules, need: InputRequired, method: str, name: str, params: Any = None) -> dict[str, Any]:
        """The ``input_required`` result (2026-07-28) of ``method`` on ``name``; its ``requestState``
        is bound to the ``arguments`` in the request's ``params``."""
        if not rules.stateless:  # cannot happen: only modern requests ask for input this way
            return {"content": [text_content("Input required")], "isError": True}
        return self.finish(
            rules, {"resultType": "input_required", "inputRequests": need.requests,
                    "requestState": self.request_state.sign(method, name, params)}
        )


def __getattr__(name: str) -> object:
    if name == "Session":
        import warnings

        warnings.warn("sturdyrpc.mcp.server.Session is now SessionState", DeprecationWarning, stacklevel=2)
        return SessionState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
