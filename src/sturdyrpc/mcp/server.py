"""The MCP server: tools, resources (and templates), prompts and completions on plain typed functions.

One :class:`MCPServer` object serves any number of connections, over any transport:

- :meth:`MCPServer.create_peer` / :meth:`MCPServer.serve`: one stateful session (any version)
  over a :class:`~sturdyrpc.peer.MessageTransport` on a :class:`~sturdyrpc.peer.Peer` (stdio;
  Streamable HTTP for handshake-era sessions);
- :meth:`MCPServer.serve_stateless` / :meth:`MCPServer.handle_stateless`: one 2026-07-28 request
  on its own, its progress and log notifications passed to a callback (Streamable HTTP 2026-07-28).

Tools: ``@server.tool`` over ``async def add(a: int, b: int) -> int``: the input schema from the
type hints, arguments checked before the function runs, an ``outputSchema`` from a declared
return type; an exception is an ``isError`` result naming an incident id (its message only with
``MCPServer(mask_errors=False)``); :class:`ToolError` tells the model what went wrong on purpose;
a parameter annotated :class:`MCPContext` (or ``sturdyrpc.Context``) receives the context.

The work is split by job (docs/MCP.md has the table): :mod:`.core` (what every part shares),
:mod:`.registry` (the records), :mod:`.handlers`, :mod:`.tools_call`, :mod:`.stateless`... This
module is the facade: the decorators and serving entry points, over one core; nothing below imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from ..dispatch import Dispatcher, Middleware
from ..envelope import read
from ..limits import DEFAULT_LIMITS, Limits
from ..peer import MessageTransport, Peer
from ..store import Store
from . import serving
from .content import (
    ToolError,
    ToolResult,
    audio_content,
    embedded_resource,
    image_content,
    text_content,
)
from .context import LOG_LEVELS, MCPContext
from .core import ServerCore
from .decorating import PromptOptions, ToolOptions, check_function, sort_out
from .handlers import ProtocolHandlers
from .lifespan import Lifespan, LifespanRunner
from .listen import META_SUBSCRIPTION_ID, ListenStreams
from .mounting import Mount
from .openapi import from_openapi
from .pages import Pages
from .profile import MCPProfile
from .registry import Prompt, Resource, Tool
from .request_state import RequestStateSigner
from .scopes import required_scopes
from .session_state import SessionPeer, SessionState
from .stateless import StatelessRequest, StatelessServing
from .tasks import Tasks
from .tools_call import ToolsCall
from .versions import SUPPORTED_VERSIONS
from .visibility import Rule

if TYPE_CHECKING:
    import httpx

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
    "Fanout",
]

log = logging.getLogger("sturdyrpc.mcp")

F = TypeVar("F", bound=Callable[..., Any])

#: ``await fanout(method, params)``: a session notification (``resources/updated``,
#: ``list_changed``) for every worker of a server, each delivering it to its own sessions and
#: listen streams (see :meth:`MCPServer.share`).
Fanout = Callable[[str, dict[str, Any]], Awaitable[None]]


class MCPServer:
    """An MCP server: register tools, resources, prompts and completions, then serve.

    Transport-agnostic: :meth:`serve` / :meth:`create_peer` run one stateful session over any
    message transport; :meth:`serve_stateless` / :meth:`handle_stateless` answer one 2026-07-28
    request. ``include_tags``/``exclude_tags``: show only / never the components with those tags
    (:meth:`enable`); ``inline_refs=True``: generated tool schemas without ``$ref`` (but recursive types).
    """

    def __init__(
        self, name: str, version: str = "0.1.0", *, instructions: str | None = None, title: str | None = None,
        supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS, limits: Limits = DEFAULT_LIMITS, cache_ttl_ms: int = 0,
        cache_scope: str = "private", page_size: int | None = None, coerce_json_strings: bool = False,
        lifespan: Lifespan | None = None, mask_errors: bool = True, include_tags: Iterable[str] | None = None,
        exclude_tags: Iterable[str] | None = None, inline_refs: bool = False,
    ) -> None:
        # What every part shares is the core's (see :mod:`.core`); this object registers on it
        # and serves it.
        self._core = core = ServerCore(
            name, version, lifespan=LifespanRunner(self, lifespan, serving.telemetry), limits=limits, instructions=instructions, title=title,
            supported_versions=supported_versions, cache_ttl_ms=cache_ttl_ms, cache_scope=cache_scope, page_size=page_size,
            coerce_json_strings=coerce_json_strings, mask_errors=mask_errors, inline_refs=inline_refs,
        )
        #: ``tools/call``: the one path from request to reply (see :mod:`.tools_call`).
        self.tools_call = ToolsCall(core)
        ProtocolHandlers(core, self.tools_call).register(core.dispatcher)
        core.dispatcher.set_tool_failure(self.tools_call.failed_call)
        #: 2026-07-28 requests, each served on its own (see :mod:`.stateless`).
        self._stateless = StatelessServing(core)
        self._fanout: Fanout | None = None
        if include_tags is not None:  # FastMCP 2's arguments: only these tags, then never those
            core.show(Rule.of(True, None, include_tags, None), only=True)
        if exclude_tags is not None:
            core.show(Rule.of(False, None, exclude_tags, None))

    # ------------------------------------------------------------------ what the core keeps

    @property
    def name(self) -> str:
        """The server's name (``serverInfo.name``)."""
        return self._core.name

    @name.setter
    def name(self, value: str) -> None:
        self._core.name = value

    @property
    def version(self) -> str:
        """The server's version (``serverInfo.version``)."""
        return self._core.version

    @version.setter
    def version(self, value: str) -> None:
        self._core.version = value

    @property
    def title(self) -> str | None:
        """The server's title (``serverInfo.title``, 2025-06-18+)."""
        return self._core.title

    @title.setter
    def title(self, value: str | None) -> None:
        self._core.title = value

    @property
    def instructions(self) -> str | None:
        """The ``instructions`` of ``initialize`` and ``server/discover`` results."""
        return self._core.instructions

    @instructions.setter
    def instructions(self, value: str | None) -> None:
        self._core.instructions = value

    @property
    def supported_versions(self) -> tuple[str, ...]:
        """The protocol versions served, oldest first (a new tuple applies to new sessions and requests)."""
        return self._core.supported_versions

    @supported_versions.setter
    def supported_versions(self, value: tuple[str, ...]) -> None:
        self._core.supported_versions = value

    @property
    def pages(self) -> Pages:
        """List results come in pages of ``page_size`` items with a ``nextCursor`` (:class:`.Pages`)."""
        return self._core.pages

    @pages.setter
    def pages(self, value: Pages) -> None:
        self._core.pages = value

    @property
    def coerce_json_strings(self) -> bool:
        """Tool arguments declared as objects/arrays that arrive as JSON strings are decoded once
        before validation (set before registering the tools it should apply to)."""
        return self._core.coerce_json_strings

    @coerce_json_strings.setter
    def coerce_json_strings(self, value: bool) -> None:
        self._core.coerce_json_strings = value

    @property
    def mask_errors(self) -> bool:
        """A tool's unexpected exception is sent as a generic text with an incident id (True, the
        default) or as its message alone (False). :class:`ToolError` is always shown as is."""
        return self._core.mask_errors

    @mask_errors.setter
    def mask_errors(self, value: bool) -> None:
        self._core.mask_errors = value

    @property
    def cache_ttl_ms(self) -> int:
        """2026-07-28 caching hint ``ttlMs`` on list, read and discover results."""
        return self._core.cache_ttl_ms

    @cache_ttl_ms.setter
    def cache_ttl_ms(self, value: int) -> None:
        self._core.cache_ttl_ms = value

    @property
    def cache_scope(self) -> str:
        """2026-07-28 caching hint ``cacheScope`` on list, read and discover results."""
        return self._core.cache_scope

    @cache_scope.setter
    def cache_scope(self, value: str) -> None:
        self._core.cache_scope = value

    @property
    def on_roots_changed(self) -> Callable[[SessionState], Awaitable[None] | None] | None:
        """Called with the session when the client says its roots changed."""
        return self._core.on_roots_changed

    @on_roots_changed.setter
    def on_roots_changed(self, fn: Callable[[SessionState], Awaitable[None] | None] | None) -> None:
        self._core.on_roots_changed = fn

    @property
    def tools(self) -> dict[str, Tool]:
        """The registered tools by name (those shown: :meth:`disable` hides some)."""
        return self._core.tools

    @property
    def resources(self) -> dict[str, Resource]:
        """The registered resources by URI (templates: :attr:`templates`)."""
        return self._core.resources

    @property
    def templates(self) -> dict[str, Resource]:
        """The registered resource templates by URI template."""
        return self._core.templates

    @property
    def prompts(self) -> dict[str, Prompt]:
        """The registered prompts by name."""
        return self._core.prompts

    @property
    def completer(self) -> Callable[..., Any] | None:
        """The completion handler (:meth:`completion`), or None."""
        return self._core.completer

    @property
    def dispatcher(self) -> Dispatcher:
        """The dispatcher every request of this server runs through, on every transport."""
        return self._core.dispatcher

    @property
    def tasks(self) -> Tasks:
        """Tasks: tool calls answered with a handle and run in the background (see :mod:`.tasks`)."""
        return self._core.tasks

    @property
    def lifespan(self) -> LifespanRunner:
        """Startup and shutdown around serving (see :mod:`.lifespan`); its value is ``ctx.lifespan``."""
        return self._core.lifespan

    @property
    def lifespan_state(self) -> Any:
        """What the lifespan yielded (None before startup, after shutdown, or without one)."""
        return self._core.lifespan.value

    @property
    def listeners(self) -> ListenStreams:
        """Open ``subscriptions/listen`` streams (2026-07-28), over every transport."""
        return self._core.listeners

    @property
    def request_state(self) -> RequestStateSigner:
        """Signs and checks ``requestState`` (2026-07-28 multi round-trip requests)."""
        return self._core.request_state

    def share(self, store: Store, *, worker: str, fanout: Fanout | None = None) -> None:
        """Serve as one of several workers sharing ``store`` (as :func:`~sturdyrpc.mcp_http.mcp_http_app`
        does): tasks are kept there, so any worker polls, fetches and cancels them (``worker``:
        this worker's name in task records, its heartbeat ``alive:<worker>``). ``fanout(method,
        params)`` takes session notifications to every worker, each delivering them to its own
        sessions and listen streams (None: this worker's only)."""
        self._core.tasks.use_store(store, worker)
        self._fanout = fanout

    # ------------------------------------------------------------------ decorators

    @overload
    def tool(self, fn: F, /, **options: Unpack[ToolOptions]) -> F: ...
    @overload
    def tool(self, fn: str | None = None, /, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...

    def tool(
        self, fn: Any = None, /, *, name: str | None = None, description: str | None = None, title: str | None = None,
        annotations: dict[str, Any] | None = None, input_schema: dict[str, Any] | None = None, structured: bool | None = None,
        blocking: bool | None = None, meta: dict[str, Any] | None = None, icons: list[Any] | None = None,
        timeout: float | None = None, scopes: Iterable[str] | None = None, task_support: str = "forbidden",
        tags: Iterable[str] | None = None,
    ) -> Any:
        """Register a tool: ``@server.tool``, ``@server.tool("name", ...)`` or
        ``server.tool(fn, name=...)``. The name defaults to the function's; the description to
        its docstring (without its ``Args:`` / ``:param:`` part, which describes the parameters
        in the input schema). A parameter annotated :class:`MCPContext` (or
        :class:`sturdyrpc.Context`) receives the request's context and is not in the schema.

        The options are described on :class:`~.decorating.ToolOptions`.
        """

        now, name = sort_out("tool", fn, name)

        def register(fn: F) -> F:
            check_function(fn, "@server.tool")
            t = Tool(fn, name or fn.__name__, description, title, annotations, input_schema, structured, blocking, meta, icons=icons,
                     coerce_json_strings=self._core.coerce_json_strings, scopes=scopes, tags=tags, inline=self._core.inline_refs)
            if timeout is not None:
                t.set_timeout(timeout)
            t.set_task_support(task_support)
            self.add(t)
            return fn

        return register if now is None else register(now)

    def resource(
        self, uri: str, /, *, name: str | None = None, description: str | None = None, mime_type: str | None = None,
        title: str | None = None, blocking: bool | None = None, icons: list[Any] | None = None,
        scopes: Iterable[str] | None = None, tags: Iterable[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a resource: ``@server.resource("data://config")``; ``title``/``icons``/``scopes``/``tags``
        as for :meth:`tool`. A URI with variables is a template (:class:`.uri_template.UriTemplate`:
        ``{name}``, ``{+name}``, ``{name*}``, ``{#name}``, ``{?a,b}``, ``{&a,b}``; other operators
        are refused here). Each variable is a parameter of the function, its text converted to the
        parameter's annotated type (``int``, ``float``, ``bool``, ``Literal``...: a value that does
        not convert is an error naming the variable); query parameters left out take defaults.
        A ``str`` return is one text content (``mime_type`` or ``text/plain``), ``bytes`` one blob,
        anything else (``dict``, ``list``, a model) one JSON text content (``application/json``).
        """
        if not isinstance(uri, str):
            raise TypeError("@server.resource needs the resource's URI: @server.resource('data://config') "
                            "or @server.resource('users://{user_id}/profile') over the function")

        def register(fn: F) -> F:
            check_function(fn, f"@server.resource({uri!r})")
            self.add(Resource(fn, uri, name or fn.__name__, description, mime_type, title, blocking, icons=icons, scopes=scopes, tags=tags))
            return fn

        return register

    @overload
    def prompt(self, fn: F, /, **options: Unpack[PromptOptions]) -> F: ...
    @overload
    def prompt(self, fn: str | None = None, /, **options: Unpack[PromptOptions]) -> Callable[[F], F]: ...

    def prompt(
        self, fn: Any = None, /, *, name: str | None = None, description: str | None = None, title: str | None = None,
        arguments: dict[str, str] | None = None, icons: list[Any] | None = None, scopes: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
    ) -> Any:
        """Register a prompt: ``@server.prompt``, ``@server.prompt("name", ...)`` or
        ``server.prompt(fn, name=...)``; ``arguments`` maps parameter names to descriptions (the
        docstring's ``Args:`` section fills the others). ``title``/``icons``/``scopes``/``tags`` as for
        :meth:`tool`. Arguments arrive as strings and are converted to the parameters' annotated
        types (a value that does not convert is an error naming the argument)."""
        now, name = sort_out("prompt", fn, name)

        def register(fn: F) -> F:
            check_function(fn, "@server.prompt")
            self.add(Prompt(fn, name or fn.__name__, description, title, arguments, icons=icons, scopes=scopes, tags=tags))
            return fn

        return register if now is None else register(now)

    @classmethod
    def from_openapi(cls, spec: Mapping[str, Any], client: httpx.AsyncClient | None = None, *, name: str = "openapi",
                     base_url: str | None = None, show_error_bodies: bool = False) -> MCPServer:
        """A server with one tool per operation of an OpenAPI 3.0/3.1 document ``spec``, calling the
        API with ``client`` or one made for ``base_url`` (see :mod:`.openapi`)."""
        return from_openapi(cls, spec, client, name=name, base_url=base_url, show_error_bodies=show_error_bodies)

    def add(self, *records: Tool | Resource | Prompt, replacing: Iterable[Tool | Resource | Prompt] = ()) -> None:
        """Register records made already (a proxy's, an OpenAPI import's), after removing each of
        ``replacing`` still registered (:meth:`.ServerCore.place`); listeners hear once per kind."""
        for kind in sorted(self._core.place(records, replacing)):
            self._changed(kind)

    def remove_tool(self, name: str) -> bool:
        """Unregister the tool ``name`` (listeners are told the list changed); False if absent."""
        return self._remove(self._core.tables.every["tools"].get(name))  # hidden ones too

    def remove_prompt(self, name: str) -> bool:
        """Unregister the prompt ``name`` (listeners are told the list changed); False if absent."""
        return self._remove(self._core.tables.every["prompts"].get(name))

    def _remove(self, record: Tool | Prompt | None) -> bool:
        self.add(replacing=[record] if record is not None else [])
        return record is not None

    def enable(self, *, names: Iterable[str] | None = None, tags: Iterable[str] | None = None,
               components: Iterable[str] | None = None, only: bool = False) -> MCPServer:
        """Show the tools, resources, templates and prompts matching every criterion given
        (``names``: names or URIs; ``tags``: any of them; ``components``: ``"tool"``,
        ``"resource"``, ``"template"``, ``"prompt"``); ``only=True`` hides all others. The last
        matching call decides, for components registered later too; open sessions are told the
        lists changed (:mod:`.visibility`). Returns the server."""
        return self._show(Rule.of(True, names, tags, components), only)

    def disable(self, *, names: Iterable[str] | None = None, tags: Iterable[str] | None = None,
                components: Iterable[str] | None = None) -> MCPServer:
        """Hide the components matching every criterion given (as :meth:`enable`): a hidden one
        is neither listed nor callable, on every path (calling it is the unknown name's error)."""
        return self._show(Rule.of(False, names, tags, components))

    def _show(self, rule: Rule, only: bool = False) -> MCPServer:
        for kind in sorted(self._core.show(rule, only)):
            self._changed(kind)
        return self

    def mount(self, other: MCPServer, namespace: str | None = None) -> None:
        """Serve ``other``'s tools, resources and prompts here, under ``namespace``, live
        (:mod:`.mounting`); ``other``'s lifespan runs inside this one's."""
        self._core.lifespan.nest(other.lifespan)
        Mount(self._core, other._core, namespace).attach(self._changed)

    def middleware(self, fn: Middleware) -> Middleware:
        """Add ``async def fn(ctx, call_next)`` to the middleware chain (usable as a decorator).

        It runs around every request and notification, on every transport, in the order
        added. ``ctx`` has ``method``, ``params``, ``id``, ``session_id``, ``principal``,
        ``lifespan``, ``headers`` (HTTP) and ``state``. Return ``await call_next(ctx)``, a
        result of your own, or raise an ``RPCError``; any other exception is answered as a
        handler's (-32603, or ``isError`` for ``tools/call``, naming an incident id).
        """
        return self._core.dispatcher.middleware(fn)

    def test_client(self, protocol: str | None = None, **options: Any) -> contextlib.AbstractAsyncContextManager[MCPClient]:
        """``async with server.test_client() as client``: an :class:`~sturdyrpc.mcp.client.MCPClient`
        connected in memory to this server (the same path as stdio), the lifespan entered around
        it. ``protocol`` forces a version; ``options`` go to the client (``sampling=``,
        ``elicitation=``, ``roots=``, ``on_log=``, ``log_level=``, ``timeout=``)."""
        from .testing import connect_in_memory

        return connect_in_memory(self.create_peer, self._core.lifespan, protocol, **options)

    @overload
    def completion(self, fn: F, /) -> F: ...
    @overload
    def completion(self, fn: None = None, /) -> Callable[[F], F]: ...

    def completion(self, fn: Any = None, /) -> Any:
        """Register ``fn(ref, argument, context) -> list[str] | dict``, bare or called."""

        def register(fn: F) -> F:
            check_function(fn, "@server.completion")
            self._core.completer = fn
            return fn

        return register if fn is None else register(fn)

    # ------------------------------------------------------------------ notifications

    def sessions(self) -> list[SessionState]:
        """The live stateful sessions."""
        return [s for p, s in list(self._core.sessions_by_peer.items()) if not p.is_closing]

    def _changed(self, kind: str) -> None:
        for hook in self._core.mounted_in:  # the servers this one is mounted in follow at once
            hook(kind)
        if not self._core.sessions_by_peer and not len(self._core.listeners) and self._fanout is None:
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
        if self._fanout is not None:
            await self._fanout(f"notifications/{kind}/list_changed", {})
            return
        self._core.listeners.publish(f"notifications/{kind}/list_changed", {})
        for s in self.sessions():
            if s.profile.era == "handshake" and s.profile.initialize_seen:
                await s.notify(f"notifications/{kind}/list_changed")

    async def resource_updated(self, uri: str) -> None:
        """Send ``notifications/resources/updated`` to the sessions subscribed to ``uri`` (and the
        ``subscriptions/listen`` streams naming it)."""
        if self._fanout is not None:
            await self._fanout("notifications/resources/updated", {"uri": uri})
            return
        self._core.listeners.publish("notifications/resources/updated", {"uri": uri})
        for s in self.sessions():
            if uri in s.subscriptions:
                await s.notify("notifications/resources/updated", {"uri": uri})

    def close_subscriptions(self) -> int:
        """End every open ``subscriptions/listen`` stream gracefully (e.g. at shutdown): each
        gets its final ``resultType: "complete"`` result, then nothing more. Returns how many."""
        return self._core.listeners.close_all()

    # ------------------------------------------------------------------ serving

    def create_peer(
        self,
        transport: MessageTransport,
        *,
        name: str = "mcp-server",
        default_timeout: float | None = 60.0,
        session_id: str | None = None,
        principal: Any = None,
        on_enqueue: Callable[[bytes], None] | None = None,
    ) -> Peer:
        """A :class:`~sturdyrpc.peer.Peer` (not started) serving one MCP session on ``transport``.

        The session (version, capabilities, log level, subscriptions, ``ctx.state``) lives as
        long as the peer: ``async with peer:``, then ``await peer.wait_closed()``. A transport
        that knows more passes ``session_id`` (default: random), ``principal`` (its security
        step's), ``on_enqueue(data)`` (called with each message queued for sending, where the
        handler that queued it runs); each request's own principal and headers are the
        transport's to make current (:mod:`sturdyrpc.request_context`).
        """
        core = self._core
        peer = SessionPeer(transport, core.dispatcher, profile=MCPProfile(supported=core.supported_versions), lifespan=core.lifespan,
                           session_id=session_id if session_id is not None else os.urandom(16).hex(), principal=principal,
                           default_timeout=default_timeout, name=name, on_enqueue=on_enqueue)
        core.sessions_by_peer[peer] = peer.mcp_session
        return peer

    def session_of(self, peer: Peer) -> SessionState | None:
        """The session served on ``peer`` (made by :meth:`create_peer`), or None."""
        return self._core.sessions_by_peer.get(peer)

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

        Progress and log notifications go, encoded, to ``send_related`` before the reply is
        returned (None for a notification). Errors in the message itself (bad JSON, missing
        ``_meta`` fields, unsupported version) are error replies; the caller picks the HTTP
        status. What the handler raises is answered as on every path. Cancel by cancelling the
        task that awaits this coroutine (nothing is returned then).
        """
        request = self.serve_stateless(read(body, self._core.dispatcher.limits), send_related)
        return request.value if request.done else await request.wait()

    def run(self, transport: str = "stdio", **options: Any) -> int:
        """Serve until stopped: ``server.run()`` on stdio (as :func:`~sturdyrpc.mcp.run_mcp_stdio`),
        ``server.run("http", host="127.0.0.1", port=8000)`` on Streamable HTTP at ``/mcp`` (one
        process; other ``options`` as :func:`sturdyrpc.mcp_http.workers.serve_mcp_workers`:
        ``stateless``, ``store``, ``allow_remote``...). Returns the exit code."""
        return serving.run(self, transport, options)
    def param_headers(self, tool: str) -> dict[str, tuple[str, str]]:
        """The ``Mcp-Param-*`` headers (SEP-2243) a 2026-07-28 ``tools/call`` of ``tool`` must carry
        for its arguments: lower-case header name -> (parameter, JSON type); empty for an unknown tool."""
        found = self._core.tools.get(tool)
        return found.header_params if found is not None else {}

    def required_scopes(self, method: str, params: Any) -> frozenset[str]:
        """The OAuth scopes a ``method`` request with ``params`` needs (the ``scopes=`` of the
        tool, resource or prompt it names; see :mod:`.scopes`)."""
        return required_scopes(self._core, method, params)


def __getattr__(name: str) -> object:
    if name == "Session":
        import warnings

        warnings.warn("sturdyrpc.mcp.server.Session is now SessionState", DeprecationWarning, stacklevel=2)
        return SessionState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
