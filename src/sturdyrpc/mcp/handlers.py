"""The MCP protocol methods of a server: lifecycle, lists, resources, prompts, completion,
logging, ``subscriptions/listen`` and the client's notifications.

Each method is a handler on the server's dispatcher. Handlers that never wait are sync and
registered non-blocking, so the runner runs them inline; those that run user code (resources,
prompts, completion) are async and run it through :mod:`sturdyrpc.execute`. ``tools/call``
lives in :mod:`.tools_call`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..dispatch import Context, Dispatcher
from ..errors import InvalidParams, MethodNotFound, RPCError
from ..execute import execute, shared_pool
from .content import ToolError
from .context import LEVEL_RANK, InputRequired, MCPContext
from .core import ServerCore
from .listen import agree
from .registry import HandlerFunction, Prompt, find_resource
from .scopes import may_use, required_scopes
from .session_state import SessionState
from .tools_call import ToolsCall
from .versions import VersionRules

__all__ = ["ProtocolHandlers"]


async def _await(aw: Any) -> Any:
    return await aw


class ProtocolHandlers:
    """The protocol methods of the server whose core is ``core`` (registered on its dispatcher
    by :meth:`register`); ``tools_call`` is its ``tools/call`` path."""

    def __init__(self, core: ServerCore, tools_call: ToolsCall) -> None:
        self.core = core
        self.tools_call = tools_call

    def register(self, d: Dispatcher) -> None:
        """Register every method on ``d`` (``tools/call`` routed per tool by :mod:`.tools_call`)."""

        def add(fn: Callable[..., Any], name: str) -> None:
            # Handlers that never wait are sync and non-blocking: the runner runs them inline.
            d.add_method(fn, name, blocking=False)

        self.core.reader = self.read  # ctx.read_resource in tools (see .tools_call)
        add(self.initialize, "initialize")
        add(self.ping, "ping")
        add(self.discover, "server/discover")
        add(self.tools_list, "tools/list")
        tools_call = self.tools_call
        tools_call.use_dispatcher(d, d.make_entry(self.call_tool, "tools/call", raw=True))
        d.add_method(self.call_tool, "tools/call", raw=True, route=tools_call.route)
        add(self.resources_list, "resources/list")
        add(self.templates_list, "resources/templates/list")
        add(self.resources_read, "resources/read")
        add(self.subscribe, "resources/subscribe")
        add(self.unsubscribe, "resources/unsubscribe")
        add(self.prompts_list, "prompts/list")
        add(self.prompts_get, "prompts/get")
        add(self.complete, "completion/complete")
        add(self.set_level, "logging/setLevel")
        add(self.listen, "subscriptions/listen")
        d.add_method(self.tasks_get, "tasks/get")
        d.add_method(self.tasks_result, "tasks/result")
        d.add_method(self.tasks_list, "tasks/list")
        d.add_method(self.tasks_cancel, "tasks/cancel")
        d.add_method(self.tasks_update, "tasks/update")
        add(self.on_initialized, "notifications/initialized")
        add(self.on_cancelled, "notifications/cancelled")
        add(self.on_roots_changed, "notifications/roots/list_changed")

    # ------------------------------------------------------------------ helpers

    def _listed(self, rules: VersionRules, key: str, kind: str, records: Any, params: dict[str, Any]) -> dict[str, Any]:
        """A list result: one page of ``records`` (:mod:`.pages`), described under ``rules``."""
        # What the caller's token may not use is not listed (tools, resources, prompts with scopes=).
        page, next_cursor = self.core.pages.page(kind, [r for r in records if may_use(r.scopes)], params)
        result: dict[str, Any] = {key: [r.describe(rules) for r in page]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return self.core.finish(rules, result, True)

    async def _run(self, fn: HandlerFunction, arguments: dict[str, Any], mctx: MCPContext, what: str) -> Any:
        """Run a resource or prompt function on its text ``arguments`` (``what`` they are: URI
        variables, prompt arguments); its exceptions propagate (the caller's policy)."""
        args, kwargs = fn.bind_text(arguments, what)
        try:
            ok, value = await fn.run(args, kwargs, mctx, shared_pool(self.core.dispatcher.limits.max_threads))
        finally:
            mctx.done = True
        if not ok:
            raise value  # the dispatcher's policy: an RPCError as is, anything else -32603 + incident
        return value

    # ------------------------------------------------------------------ lifecycle, discovery

    def initialize(self, **params: Any) -> dict[str, Any]:
        core = self.core
        session = core.session_for()
        rules = session.rules
        result: dict[str, Any] = {
            "protocolVersion": rules.version,
            "capabilities": core.capabilities(rules, bound=session.request_principal() is not None),
            "serverInfo": core.server_info(rules),
        }
        if core.instructions:
            result["instructions"] = core.instructions
        return result

    def ping(self, **params: Any) -> dict[str, Any]:
        return {}

    def discover(self, **params: Any) -> dict[str, Any]:
        core = self.core
        rules = core.session_for().rules_of(params)
        result: dict[str, Any] = {
            "supportedVersions": list(reversed(core.supported_versions)),
            "capabilities": core.capabilities(rules),
        }
        if core.instructions:
            result["instructions"] = core.instructions
        return core.finish(rules, result, True)

    # ------------------------------------------------------------------ tools

    def tools_list(self, **params: Any) -> dict[str, Any]:
        rules = self.core.session_for().rules_of(params)
        return self._listed(rules, "tools", "tools", self.core.tools.values(), params)

    async def call_tool(self, params: Any, ctx: Context | None) -> Any:
        """``tools/call`` of any tool that does not run inline, in a task of its own (inline tools
        have entries of their own: :meth:`.ToolsCall.route`); a task call (:mod:`.tasks`) is
        answered with its handle at once while the same call runs in the background."""
        core = self.core
        if ctx is None:  # run without a context (the caller is not a runner): make a plain one
            ctx = Context(None, "tools/call", params, False)
        if params is None:
            params = {}
        session = core.session_for(ctx)
        name = params.get("name")
        tool = core.tools.get(name) if type(name) is str else None
        rules = session.rules_of(params)
        mode = core.tasks.mode(session, ctx, params, rules, tool)
        if mode is not None:
            return await core.tasks.create(session, ctx, params, rules, mode == "ext", self.tools_call.run)
        return await self.tools_call.run(session, ctx, params)

    # ------------------------------------------------------------------ tasks (see .tasks)

    async def tasks_get(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self.core.session_for(ctx)
        rules = session.rules_of(params)
        self.core.tasks.require_extension(rules, ctx.meta)
        return await self.core.tasks.get(session, rules, params)

    async def tasks_result(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self.core.session_for(ctx)
        return await self.core.tasks.result(session, session.rules_of(params), params, ctx)

    async def tasks_list(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self.core.session_for(ctx)
        return await self.core.tasks.list(session, session.rules_of(params), params)

    async def tasks_cancel(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self.core.session_for(ctx)
        rules = session.rules_of(params)
        self.core.tasks.require_extension(rules, ctx.meta)
        return await self.core.tasks.cancel(session, rules, params)

    async def tasks_update(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self.core.session_for(ctx)
        rules = session.rules_of(params)
        self.core.tasks.require_extension(rules, ctx.meta)
        return await self.core.tasks.update(session, rules, params)

    # ------------------------------------------------------------------ resources

    def resources_list(self, **params: Any) -> dict[str, Any]:
        rules = self.core.session_for().rules_of(params)
        return self._listed(rules, "resources", "resources", self.core.resources.values(), params)

    def templates_list(self, **params: Any) -> dict[str, Any]:
        rules = self.core.session_for().rules_of(params)
        return self._listed(rules, "resourceTemplates", "templates", self.core.templates.values(), params)

    async def resources_read(self, ctx: Context, **params: Any) -> dict[str, Any]:
        core = self.core
        session = core.session_for(ctx)
        rules = session.rules_for(ctx.meta)
        uri = params.get("uri")
        if type(uri) is not str:
            raise InvalidParams("Invalid params: 'uri' must be a string", {"param": "uri"})
        try:
            contents = await self.read(session, ctx, uri, params)
        except InputRequired as need:
            return core.input_required(rules, need, "resources/read", uri, params)
        return core.finish(rules, {"contents": contents}, True)

    async def read(self, session: SessionState, ctx: Context, uri: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The ``contents`` of ``uri``: the one path of a read, for ``resources/read`` (``params``:
        its params, ``requestState`` checked) and for ``ctx.read_resource`` (the caller's scopes
        checked: over HTTP a request's are checked before it runs)."""
        core = self.core
        found = find_resource(core.resources, core.templates, uri)
        if found is None:
            raise RPCError("Resource not found", {"uri": uri}, code=session.rules_for(ctx.meta).resource_not_found)
        res, variables = found
        if params is None and not may_use(res.scopes):
            raise InvalidParams(f"Invalid params: reading {uri!r} needs the scope(s) {' '.join(sorted(res.scopes))}", {"uri": uri})
        carried = core.request_state.check(params, "resources/read", uri) if params is not None else {}
        try:
            value = await self._run(res, variables, MCPContext(session, ctx, carried, self.read), "URI variable")
        except ToolError as exc:
            raise InvalidParams(exc.message) from None
        return res.contents(uri, value)

    def subscribe(self, **params: Any) -> dict[str, Any]:
        session, uri = self._subscription_target(params)
        session.subscriptions.add(uri)
        return {}

    def unsubscribe(self, **params: Any) -> dict[str, Any]:
        session, uri = self._subscription_target(params)
        session.subscriptions.discard(uri)
        return {}

    def _subscription_target(self, params: dict[str, Any]) -> tuple[SessionState, str]:
        """The session and URI of a resources/(un)subscribe request, after the version's checks."""
        session = self.core.session_for()
        if session.rules_of(params).stateless:
            raise MethodNotFound("Method not found")  # 2026-07-28: subscriptions/listen instead
        uri = params.get("uri")
        if type(uri) is not str:
            raise InvalidParams("Invalid params: 'uri' must be a string", {"param": "uri"})
        return session, uri

    # ------------------------------------------------------------------ prompts

    def prompts_list(self, **params: Any) -> dict[str, Any]:
        rules = self.core.session_for().rules_of(params)
        return self._listed(rules, "prompts", "prompts", self.core.prompts.values(), params)

    async def prompts_get(self, ctx: Context, **params: Any) -> dict[str, Any]:
        core = self.core
        session = core.session_for(ctx)
        rules = session.rules_for(ctx.meta)
        name = params.get("name")
        if type(name) is not str:
            raise InvalidParams("Invalid params: 'name' must be a string", {"param": "name"})
        prompt = core.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}", {"prompt": name})
        arguments = params.get("arguments") or {}
        if type(arguments) is not dict:
            raise InvalidParams("Invalid params: 'arguments' must be an object", {"param": "arguments"})
        carried = core.request_state.check(params, "prompts/get", name)
        try:
            value = await self._run(prompt, arguments, MCPContext(session, ctx, carried, self.read), "prompt argument")
        except InputRequired as need:
            return core.input_required(rules, need, "prompts/get", name, params)
        except ToolError as exc:
            raise InvalidParams(exc.message) from None
        return core.finish(rules, Prompt.result(value, prompt.description))

    # ------------------------------------------------------------------ completion, logging

    async def complete(self, ctx: Context, **params: Any) -> dict[str, Any]:
        core = self.core
        rules = core.session_for(ctx).rules_for(ctx.meta)
        ref = params.get("ref")
        argument = params.get("argument")
        if type(ref) is not dict or type(argument) is not dict:
            raise InvalidParams("Invalid params: 'ref' and 'argument' must be objects")
        if type(argument.get("name")) is not str or type(argument.get("value")) is not str:
            raise InvalidParams("Invalid params: 'argument' needs a string 'name' and 'value'", {"param": "argument"})
        kind = ref.get("type")
        if kind == "ref/prompt":
            if ref.get("name") not in core.prompts:  # the spec's "invalid prompt name": -32602
                raise InvalidParams(f"Unknown prompt: {ref.get('name')}", {"prompt": ref.get("name")})
        elif kind == "ref/resource":
            uri = ref.get("uri")
            if not isinstance(uri, str) or (uri not in core.templates and find_resource(core.resources, core.templates, uri) is None):
                raise InvalidParams(f"Unknown resource: {uri}", {"uri": uri})
        else:
            raise InvalidParams("Invalid params: 'ref.type' must be 'ref/prompt' or 'ref/resource'", {"param": "ref"})
        values: Any = []
        completer = core.completer
        if completer is not None:
            fn_args = (ref, argument, params.get("context"))
            ok, values = await execute(completer, fn_args, {}, is_async=inspect.iscoroutinefunction(completer), blocking=False, pool=None)
            if ok and inspect.isawaitable(values):  # a sync function returning an awaitable
                ok, values = await execute(_await, (values,), {}, is_async=True, blocking=False, pool=None)
            if not ok:
                raise values
        if type(values) is dict:
            completion = dict(values)
        else:
            vals = [str(v) for v in values]
            completion = {"values": vals[:100], "total": len(vals), "hasMore": len(vals) > 100}
        return core.finish(rules, {"completion": completion})

    def set_level(self, **params: Any) -> dict[str, Any]:
        session = self.core.session_for()
        if not session.rules_of(params).set_level:
            raise MethodNotFound("Method not found")  # 2026-07-28: the per-request _meta log level replaces it
        level = params.get("level")
        if level not in LEVEL_RANK:
            raise InvalidParams("Invalid params: unknown log level", {"param": "level"})
        session.log_level = level
        return {}

    # ------------------------------------------------------------------ subscriptions/listen (2026-07-28)

    async def listen(self, ctx: Context, **params: Any) -> dict[str, Any]:
        """``subscriptions/listen``: acknowledge, then forward the agreed notifications (each with
        the subscription id in ``_meta``) until the client cancels (no reply then) or the server
        ends the stream (:meth:`MCPServer.close_subscriptions`, or its connection closing): then
        the final ``resultType: "complete"`` result, and nothing after it."""
        core = self.core
        session = core.session_for(ctx)
        rules = session.rules_for(ctx.meta)
        if not rules.stateless:
            raise MethodNotFound("Method not found")  # handshake era: resources/subscribe, list_changed, GET stream
        wanted = params.get("notifications")
        if type(wanted) is not dict:
            raise InvalidParams("Invalid params: 'notifications' must be an object", {"param": "notifications"})
        # Updates of a resource the caller's token may not read are not agreed to (its scopes=).
        agreed = agree(wanted, has_prompts=bool(core.prompts), has_resources=bool(core.resources or core.templates),
                       may_read=lambda uri: may_use(required_scopes(core, "resources/read", {"uri": uri})))
        return core.finish(rules, await core.listeners.serve(ctx, agreed, session.peer))

    # ------------------------------------------------------------------ the client's notifications

    def on_initialized(self, **params: Any) -> None:
        return None

    def on_cancelled(self, **params: Any) -> None:
        return None  # the peer acts on cancellations before dispatch; late or unknown ones end here

    async def on_roots_changed(self, ctx: Context, **params: Any) -> None:
        cb = self.core.on_roots_changed
        if cb is not None:
            res = cb(self.core.session_for(ctx))
            if inspect.isawaitable(res):
                await res
