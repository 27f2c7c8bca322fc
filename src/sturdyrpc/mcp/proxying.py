"""``create_proxy(target)``: an :class:`MCPServer` that fronts a running MCP server.

The target is a URL (Streamable HTTP), a stdio command line (a list of strings) or an
:class:`MCPServer` in this process. When the proxy's lifespan starts, an :class:`Upstream`
connects to it with sturdyrpc's own client, lists its tools, resources, templates and prompts,
and registers one forwarding record for each on the proxy (:meth:`MCPServer.add`): a request for
one takes the proxy's one call path (middleware, scopes, spans, both eras) like any other, and
its function forwards the call upstream. What is forwarded with it:

- a tool's input and output schemas, annotations, title, icons and ``_meta`` as sent; its result
  as sent (an ``isError`` result stays one; an upstream JSON-RPC error stays that error);
- progress (each call's own token) and cancellation (cancelling the proxied call cancels the
  upstream one); log messages, and the upstream's requests to its client (elicitation, sampling,
  roots), go to the one proxied request in flight when they arrive (the upstream's messages name
  no request of ours); with none, or several, in flight, logs go to the ``sturdyrpc.mcp`` logger
  and requests are refused. Such a request reaches a caller in the handshake era only: a
  2026-07-28 caller would re-run the proxied call on its answer;
- list-changed notifications (and, from a 2026-07-28 upstream, a ``subscriptions/listen``
  stream) refresh the proxy's lists, whose clients (and parents, when mounted) are told;
- completions, when the upstream offers them.

Not forwarded: resource subscriptions, tasks, and the upstream's ``instructions`` beyond being
copied once when the proxy has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import quote

from ..errors import InvalidParams
from .client import MCPClient, connect
from .connectors import connector
from .content import older_block, to_content
from .context import LOG_LEVELS, MCPContext
from .registry import Prompt, Resource, Tool
from .server import MCPServer
from .testing import connect_in_memory
from .versions import META_SERVER_INFO, VersionRules

__all__ = ["create_proxy", "Upstream"]

log = logging.getLogger("sturdyrpc.mcp")

#: Seconds a list request upstream may take (a proxied call itself has no limit of ours).
LIST_TIMEOUT = 30.0
_KINDS = ("tools", "resources", "prompts")


def create_proxy(target: str | Sequence[str] | MCPServer, *, name: str | None = None) -> MCPServer:
    """An :class:`MCPServer` serving what ``target`` serves: a URL (``"http://host:port/mcp"``),
    a stdio command line (``["python", "server.py"]``) or an :class:`MCPServer`. It connects when
    its lifespan starts (``sturdyrpc run``, ``server.run()``, the HTTP app, ``test_client()``, or
    the lifespan of a server it is mounted in) and disconnects when it ends. ``name`` defaults to
    the upstream's. See :mod:`.proxying` for what is forwarded."""
    if isinstance(target, str):
        if not target.startswith(("http://", "https://")):
            raise ValueError(f"create_proxy(): a URL must start with http:// or https://, got {target!r} "
                             f"(a command line is a list: ['python', 'server.py'])")
    elif not isinstance(target, MCPServer) and (not target or not all(isinstance(a, str) for a in target)):
        raise TypeError("create_proxy(): the target is a URL, a command line (a list of strings) or an MCPServer")
    upstream = Upstream(target, keep_name=name is not None or isinstance(target, MCPServer))
    server = MCPServer(name or (target.name if isinstance(target, MCPServer) else "proxy"), lifespan=upstream.running)
    server.completion(upstream.complete)
    return server


class Upstream:
    """The proxy's client session with its target, and the records it placed on the proxy (the
    proxy's lifespan value: ``ctx.lifespan.client`` is the :class:`MCPClient` while it runs).
    ``keep_name``: the proxy keeps its name (else it takes the upstream's on connecting)."""

    def __init__(self, target: str | Sequence[str] | MCPServer, *, keep_name: bool = False) -> None:
        self.target = target
        self.keep_name = keep_name
        self._client: MCPClient | None = None
        self._server: MCPServer | None = None
        #: The forwarding records placed on the proxy, by kind (replaced on a refresh).
        self._placed: dict[str, list[Tool | Resource | Prompt]] = {k: [] for k in _KINDS}
        #: The proxied requests waiting on the upstream now (see :meth:`caller`).
        self._callers: list[MCPContext] = []
        self._refreshing: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> MCPClient:
        if self._client is None:
            raise InvalidParams("the proxy is not connected to its upstream server (its lifespan is not running)")
        return self._client

    # ------------------------------------------------------------------ the connection

    @contextlib.asynccontextmanager
    async def running(self, server: MCPServer) -> AsyncIterator[Upstream]:
        """The proxy's lifespan: connect, place the records, follow changes; undo all at the end."""
        self._server = server
        options: dict[str, Any] = {
            "sampling": self._sampling, "elicitation": self._elicitation, "roots": self._roots,
            "on_log": self._on_log, "on_notification": self._on_notification, "log_level": "debug", "timeout": None,
        }
        async with self._connect(options) as client:
            self._client = client
            if not self.keep_name and client.server_info.get("name"):
                server.name = str(client.server_info["name"])
            if server.instructions is None and client.instructions:
                server.instructions = client.instructions
            listen = None
            try:
                for kind in _KINDS:
                    await self.refresh(kind)
                listen = await self._listen(client)
                yield self
            finally:
                if listen is not None:
                    with contextlib.suppress(Exception):
                        await listen.close()
                for task in list(self._refreshing):
                    task.cancel()
                self._client = None
                server.add(replacing=[r for kind in _KINDS for r in self._placed[kind]])
                self._placed = {k: [] for k in _KINDS}

    def _connect(self, options: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[MCPClient]:
        target = self.target
        if isinstance(target, MCPServer):
            return connect_in_memory(target.create_peer, target.lifespan, **options)
        if isinstance(target, str):
            cm: contextlib.AbstractAsyncContextManager[MCPClient] = connector("http")(target, **options)
            return cm
        return connect(list(target), **options)

    async def _listen(self, client: MCPClient) -> Any:
        """A 2026-07-28 upstream tells of list changes on a ``subscriptions/listen`` stream only."""
        caps = client.server_capabilities
        wanted = {f"{k}ListChanged": True for k in _KINDS if (caps.get(k) or {}).get("listChanged")}
        if not client.modern or not wanted:
            return None
        try:
            return await client.listen(wanted, self._on_notification, timeout=LIST_TIMEOUT)
        except Exception as exc:  # an upstream without listen streams: its lists are read once
            log.warning("proxy: the upstream refused subscriptions/listen (%s); its lists will not be refreshed", exc)
            return None

    # ------------------------------------------------------------------ the lists

    async def refresh(self, kind: str) -> None:
        """List ``kind`` upstream again and replace the proxy's records of that kind."""
        client, server = self.client, self._server
        assert server is not None
        if kind not in client.server_capabilities:
            return
        build: Callable[[dict[str, Any]], Tool | Resource | Prompt]
        if kind == "tools":
            listed, build = await client.list_tools(timeout=LIST_TIMEOUT), self._tool
        elif kind == "prompts":
            listed, build = await client.list_prompts(timeout=LIST_TIMEOUT), self._prompt
        else:
            listed = await client.list_resources(timeout=LIST_TIMEOUT) + await client.list_resource_templates(timeout=LIST_TIMEOUT)
            build = self._resource
        records: list[Tool | Resource | Prompt] = []
        for d in listed:
            try:
                records.append(build(d))
            except (TypeError, ValueError) as exc:  # e.g. a template operator this server does not match
                log.warning("proxy: the upstream's %s %r is left out: %s", kind, d.get("name") or d.get("uriTemplate"), exc)
        ours = {id(r) for r in self._placed[kind]}  # a key held by anything else is the proxy's own
        records = [r for r in records if (held := _registered(server, r)) is None or id(held) in ours]
        server.add(*records, replacing=self._placed[kind])
        self._placed[kind] = records

    def _on_notification(self, method: str, params: Any) -> None:
        kind = method.removeprefix("notifications/").removesuffix("/list_changed")
        if kind not in _KINDS or self._client is None:
            return
        task = asyncio.get_running_loop().create_task(self._refresh_quietly(kind))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _refresh_quietly(self, kind: str) -> None:
        try:
            await self.refresh(kind)
        except Exception as exc:
            log.warning("proxy: refreshing the upstream's %s failed: %s", kind, exc)

    def _tool(self, d: dict[str, Any]) -> Tool:
        name = str(d.get("name"))

        async def forward(_proxied_ctx: MCPContext, **arguments: Any) -> Any:
            async def progress(p: float, total: float | None, message: str | None) -> None:
                await _proxied_ctx.report_progress(p, total, message)

            with self.caller(_proxied_ctx):
                return await self.client.call_tool(name, arguments, on_progress=progress)

        return ForwardedTool(forward, d)

    def _resource(self, d: dict[str, Any]) -> Resource:
        upstream_uri = str(d.get("uriTemplate") or d.get("uri"))
        templated = "uriTemplate" in d

        async def forward(_proxied_ctx: MCPContext, **variables: str) -> Any:
            uri = expand(upstream_uri, variables) if templated else upstream_uri
            with self.caller(_proxied_ctx):
                result = await self.client.read_resource(uri)
            return result.get("contents") or []

        return ForwardedResource(forward, d, upstream_uri)

    def _prompt(self, d: dict[str, Any]) -> Prompt:
        name = str(d.get("name"))

        async def forward(_proxied_ctx: MCPContext, **arguments: str) -> Any:
            with self.caller(_proxied_ctx):
                return await self.client.get_prompt(name, arguments)

        return ForwardedPrompt(forward, d)

    async def complete(self, ref: dict[str, Any], argument: dict[str, Any], context: Any) -> dict[str, Any]:
        """``completion/complete`` forwarded (nothing to offer when the upstream has no completions)."""
        client = self.client
        if "completions" not in client.server_capabilities:
            return {"values": [], "total": 0, "hasMore": False}
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if context is not None:
            params["context"] = context
        result = await client.request("completion/complete", params, timeout=LIST_TIMEOUT)
        completion: dict[str, Any] = result.get("completion") or {"values": []}
        return completion

    # ------------------------------------------------------------------ what the upstream sends

    @contextlib.contextmanager
    def caller(self, ctx: MCPContext) -> Any:
        """While a proxied request waits on the upstream (see :meth:`_caller`)."""
        self._callers.append(ctx)
        try:
            yield
        finally:
            self._callers.remove(ctx)

    def _caller(self, asks: bool = False) -> MCPContext | None:
        """The one proxied request in flight (None with none or several: the upstream's messages
        name no request of ours); ``asks``: one that can be asked something (the handshake era)."""
        if len(self._callers) != 1:
            return None
        ctx = self._callers[0]
        return None if asks and ctx.modern else ctx

    async def _on_log(self, params: dict[str, Any]) -> None:
        level = params.get("level")
        ctx = self._caller()
        if ctx is not None and isinstance(level, str) and level in LOG_LEVELS:
            logger = params.get("logger")
            await ctx.log(level, params.get("data"), logger if isinstance(logger, str) else None)
        else:
            log.info("proxy: upstream log (%s): %s", level, params.get("data"))

    def _asked(self, what: str) -> MCPContext:
        ctx = self._caller(asks=True)
        if ctx is None:
            raise InvalidParams(f"the proxy cannot forward {what} now: it goes to the one request in flight "
                                f"in the handshake era, and there is none")
        return ctx

    async def _elicitation(self, params: dict[str, Any]) -> dict[str, Any]:
        ctx = self._asked("elicitation/create")
        return await ctx.elicit(str(params.get("message", "")), params.get("requestedSchema") or {"type": "object", "properties": {}})

    async def _sampling(self, params: dict[str, Any]) -> dict[str, Any]:
        ctx = self._asked("sampling/createMessage")
        extra = {k: v for k, v in params.items() if k not in ("messages", "maxTokens", "_meta")}
        return await ctx.sample(params.get("messages") or [], int(params.get("maxTokens") or 1), **extra)

    async def _roots(self) -> list[dict[str, Any]]:
        roots = (await self._asked("roots/list").list_roots()).get("roots")
        return roots if isinstance(roots, list) else []


def _registered(server: MCPServer, record: Tool | Resource | Prompt) -> Any:
    """What ``server`` holds now under ``record``'s key (the proxy's own records win over the upstream's)."""
    if isinstance(record, Tool):
        return server.tools.get(record.name)
    if isinstance(record, Prompt):
        return server.prompts.get(record.name)
    return (server.templates if record.is_template else server.resources).get(record.uri)


def _upstream_only(result: Any) -> dict[str, Any]:
    """A result from upstream without what the proxy's own reply adds again (``resultType``, the
    server info in ``_meta``: the proxy's, on 2026-07-28, and none before)."""
    if type(result) is not dict:
        return {}
    out = {k: v for k, v in result.items() if k != "resultType"}
    meta = out.get("_meta")
    if type(meta) is dict and META_SERVER_INFO in meta:
        meta = {k: v for k, v in meta.items() if k != META_SERVER_INFO}
        if meta:
            out["_meta"] = meta
        else:
            del out["_meta"]
    return out


def upstream_tags(d: dict[str, Any]) -> list[str]:
    """The tags a FastMCP upstream lists in ``_meta.fastmcp.tags`` (which the proxy's
    ``enable``/``disable`` rules can then name); none from other servers."""
    meta = d.get("_meta")
    fastmcp = meta.get("fastmcp") if type(meta) is dict else None
    tags = fastmcp.get("tags") if type(fastmcp) is dict else None
    return [t for t in tags if type(t) is str] if type(tags) is list else []


class ForwardedTool(Tool):
    """A tool of the upstream: described as it was listed, its result passed on as it came."""

    def __init__(self, fn: Callable[..., Any], d: dict[str, Any]) -> None:
        super().__init__(fn, str(d.get("name")), d.get("description") or "", d.get("title"), d.get("annotations"),
                         d.get("inputSchema") or {"type": "object"}, False, None, d.get("_meta"), icons=d.get("icons"),
                         tags=upstream_tags(d))
        schema = d.get("outputSchema")
        self.output_schema = schema if type(schema) is dict else None

    def result(self, value: Any, rules: VersionRules) -> dict[str, Any]:
        d = _upstream_only(value) if type(value) is dict else {"content": to_content(value), "isError": False}
        if not rules.structured_output:
            d.pop("structuredContent", None)
            content = d.get("content")
            if isinstance(content, list):
                d["content"] = [older_block(b, rules) for b in content]
        return d


class ForwardedResource(Resource):
    """A resource or template of the upstream; its contents come back as the upstream sent them
    (an item naming the URI read upstream names the URI read here, when mounted under another)."""

    def __init__(self, fn: Callable[..., Any], d: dict[str, Any], upstream_uri: str) -> None:
        super().__init__(fn, upstream_uri, str(d.get("name") or upstream_uri), d.get("description") or "", d.get("mimeType"),
                         d.get("title"), None, tags=upstream_tags(d))
        self.upstream_uri = upstream_uri

    def contents(self, uri: str, value: Any) -> list[dict[str, Any]]:
        read = expand(self.upstream_uri, self.match(uri) or {}) if self.is_template else self.upstream_uri
        items = value if type(value) is list else []
        return [{**c, "uri": uri} if type(c) is dict and c.get("uri") == read else c for c in items]


class ForwardedPrompt(Prompt):
    """A prompt of the upstream: its arguments as listed, its messages as sent."""

    def __init__(self, fn: Callable[..., Any], d: dict[str, Any]) -> None:
        super().__init__(fn, str(d.get("name")), d.get("description") or "", d.get("title"), None, tags=upstream_tags(d))
        args = d.get("arguments")
        self.arguments = [a for a in args if type(a) is dict] if type(args) is list else []

    @staticmethod
    def result(value: Any, description: str | None) -> dict[str, Any]:
        return _upstream_only(value)


def expand(template: str, variables: dict[str, str]) -> str:
    """``template`` (the RFC 6570 forms :class:`.uri_template.UriTemplate` matches) with ``variables``
    put back, percent-encoded as the form says; a query variable left out is left out."""
    out: list[str] = []
    pos = 0
    while (start := template.find("{", pos)) >= 0:
        end = template.index("}", start)
        out.append(template[pos:start])
        pos = end + 1
        expr = template[start + 1 : end]
        op = expr[0] if expr[:1] in ("+", "#", "?", "&") else ""
        names = [n.rstrip("*") for n in expr[len(op):].split(",")]
        if op in ("?", "&"):
            pairs = [f"{n}={quote(variables[n], safe='')}" for n in names if n in variables]
            if pairs:
                out.append(("?" if op == "?" else "&") + "&".join(pairs))
            continue
        value = variables.get(names[0], "")
        wide = op in ("+", "#") or expr.endswith("*")
        out.append(("#" if op == "#" else "") + quote(value, safe=":/?#[]@!$&'()*+,;=" if wide else ""))
    out.append(template[pos:])
    return "".join(out)
