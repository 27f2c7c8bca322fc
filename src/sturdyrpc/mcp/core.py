"""The server core: what every part of an MCP server shares, with no serving in it.

:class:`ServerCore` holds the registries (tools, resources, templates, prompts, the completer),
the server's info (name, version, title, instructions, supported versions, pages, caching
hints), the dispatcher (with its limits), the ``requestState`` signer, the tasks, the
``subscriptions/listen`` streams, the lifespan and the table of live sessions; and what the
protocol says about them: :meth:`~ServerCore.capabilities`, :meth:`~ServerCore.server_info`,
:meth:`~ServerCore.finish` (what a version adds to every result),
:meth:`~ServerCore.input_required`, :meth:`~ServerCore.session_for`.

The parts above it receive it as a constructor parameter (:class:`~.tools_call.ToolsCall`,
:class:`~.handlers.ProtocolHandlers`, :class:`~.stateless.StatelessServing`,
:func:`~.scopes.required_scopes`); :class:`~.server.MCPServer`, the facade users see, makes
one core and serves it. Nothing here imports the facade or the parts above.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..dispatch import Context
from ..errors import InvalidRequest
from ..limits import Limits
from ..peer import Peer, PeerContext
from .content import text_content
from .context import InputRequired
from .dispatcher import MCPDispatcher
from .lifespan import LifespanRunner
from .listen import ListenStreams
from .pages import Pages
from .profile import MCPProfile
from .registry import Prompt, Resource, Tool
from .request_state import RequestStateSigner
from .session_state import SessionState, StatelessContext, request_session
from .tasks import TASKS_EXTENSION, Tasks
from .versions import META_SERVER_INFO, VersionRules
from .visibility import Rule, Tables

__all__ = ["ServerCore"]

log = logging.getLogger("sturdyrpc.mcp")


class ServerCore:
    """The shared state and protocol answers of one MCP server (see the module docstring).

    ``lifespan``: the server's :class:`~.lifespan.LifespanRunner` (its value is ``ctx.lifespan``);
    the other parameters are :class:`~.server.MCPServer`'s.
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        lifespan: LifespanRunner,
        limits: Limits,
        instructions: str | None = None,
        title: str | None = None,
        supported_versions: tuple[str, ...],
        cache_ttl_ms: int = 0,
        cache_scope: str = "private",
        page_size: int | None = None,
        coerce_json_strings: bool = False,
        mask_errors: bool = True,
        inline_refs: bool = False,
    ) -> None:
        self.name = name
        #: A tool's unexpected exception reaches the client as a generic text naming an incident
        #: id (True), or as its message (False: never its class name or traceback).
        self.mask_errors = mask_errors
        self.version = version
        self.title = title
        self.instructions = instructions
        #: The versions served, oldest first (a new tuple takes effect for new sessions and requests).
        self.supported_versions = supported_versions
        #: List results come in pages of this many items with a ``nextCursor`` (None: one page).
        self.pages = Pages(page_size)
        #: Tool arguments declared as objects/arrays that arrive as JSON strings are decoded
        #: once before validation (for the tools registered while it is set).
        self.coerce_json_strings = coerce_json_strings
        #: Generated tool schemas have their ``$ref`` written out (:func:`.schema.inline_refs`),
        #: for the tools registered while it is set.
        self.inline_refs = inline_refs
        #: 2026-07-28 caching hints on list, read and discover results (``ttlMs``, ``cacheScope``).
        self.cache_ttl_ms = cache_ttl_ms
        self.cache_scope = cache_scope
        self.tools: dict[str, Tool] = {}
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, Resource] = {}
        self.prompts: dict[str, Prompt] = {}
        #: Every registered record beside the shown ones above, and the rules deciding which
        #: are shown (tags, ``enable``/``disable``: :mod:`.visibility`).
        self.tables = Tables({"tools": self.tools, "resources": self.resources, "templates": self.templates, "prompts": self.prompts})
        self.completer: Callable[..., Any] | None = None
        #: ``await reader(session, ctx, uri)``: a resource's contents, the one path of a read
        #: (the protocol handlers set it), for ``ctx.read_resource``.
        self.reader: Callable[[SessionState, Context, str], Awaitable[list[dict[str, Any]]]] | None = None
        #: ``hook(kind)`` of every server this one is mounted in, called when its ``kind``
        #: (tools, resources, prompts) changed (see :mod:`.mounting`).
        self.mounted_in: list[Callable[[str], None]] = []
        #: Called with the session when the client says its roots changed.
        self.on_roots_changed: Callable[[SessionState], Awaitable[None] | None] | None = None
        #: Every request of the server runs through it (on every transport).
        self.dispatcher = MCPDispatcher(limits, log)
        #: Startup and shutdown around serving; its ``value`` is ``ctx.lifespan``.
        self.lifespan = lifespan
        #: Open ``subscriptions/listen`` streams (2026-07-28), over every transport.
        self.listeners = ListenStreams()
        #: Signs and checks ``requestState`` (2026-07-28 multi round-trip requests).
        self.request_state = RequestStateSigner()
        #: Tasks: tool calls answered with a handle and run in the background (see :mod:`.tasks`).
        self.tasks = Tasks(self.tools, self.finish)
        #: The live stateful sessions, by the peer serving each.
        self.sessions_by_peer: weakref.WeakKeyDictionary[Peer, SessionState] = weakref.WeakKeyDictionary()

    def place(self, records: Iterable[Tool | Resource | Prompt], replacing: Iterable[Tool | Resource | Prompt]) -> set[str]:
        """Put ``records`` in their tables (a tool or prompt under its name, a resource or template
        under its URI), after taking out each of ``replacing`` still there; the kinds changed.
        A record the rules hide (:mod:`.visibility`) is registered, not shown."""
        kinds: set[str] = set()
        for old in replacing:
            table, kind, key = self._table_of(old)
            if self.tables.take(table, key, old):
                kinds.add(kind)
        for record in records:
            table, kind, key = self._table_of(record)
            self.tables.put(table, key, record)
            kinds.add(kind)
        return kinds

    def show(self, rule: Rule, only: bool = False) -> set[str]:
        """Add a visibility ``rule`` (:meth:`.visibility.Tables.add_rule`); the kinds whose lists changed."""
        return self.tables.add_rule(rule, only)

    @staticmethod
    def _table_of(record: Tool | Resource | Prompt) -> tuple[str, str, str]:
        if isinstance(record, Tool):
            return "tools", "tools", record.name
        if isinstance(record, Prompt):
            return "prompts", "prompts", record.name
        return ("templates" if record.is_template else "resources"), "resources", record.uri

    def session_for(self, ctx: Context | None = None) -> SessionState:
        """The session of the request at hand (``ctx``: its context, when the handler has one)."""
        s = request_session()
        if s is not None:
            return s
        if isinstance(ctx, StatelessContext):
            return ctx.session
        if isinstance(ctx, PeerContext):
            s = self.sessions_by_peer.get(ctx.peer)
            if s is not None:
                return s
            prof = ctx.peer.profile
            if isinstance(prof, MCPProfile):  # a peer built elsewhere around our dispatcher
                s = SessionState(prof, self.lifespan, ctx.peer)
                self.sessions_by_peer[ctx.peer] = s
                return s
        raise InvalidRequest("Invalid Request", {"reason": "no MCP session for this request"})

    # ------------------------------------------------------------------ what the protocol says

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
                    "requestState": self.request_state.sign(method, name, params, need.carry)}
        )
