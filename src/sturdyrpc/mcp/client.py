"""An MCP client for servers started as subprocesses (stdio).

::

    async with connect(["sturdyrpc", "demo", "--mcp"]) as client:
        print(client.version)                        # "2026-07-28", or what initialize gave
        tools = await client.list_tools()
        result = await client.call_tool("add", {"a": 1, "b": 2})

Negotiation (``protocol=None``): the client probes ``server/discover`` at 2026-07-28. A
result naming a version we speak selects the stateless era; -32022 naming a modern version
we speak is retried at that version; ANY other error, or no answer within
``discover_timeout``, means a handshake-era server, and the client falls back to
``initialize`` (the fallback never depends on one error code). ``protocol="2025-06-18"``
(any handshake version) skips the probe and requires exactly that version;
``protocol="2026-07-28"`` requires the stateless era.

The server's requests (``sampling/createMessage``, ``elicitation/create``, ``roots/list``)
are answered by the callbacks given to :func:`connect`; on 2026-07-28 the same callbacks
answer the ``inputRequests`` of an ``input_required`` result, and the request is retried.
A request given ``on_progress`` sends a progress token; each progress restarts its timeout
(``progress_resets_timeout``, on by default; 10x the timeout at most): long tools are not cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, overload

from ..client import StdioConnection, connect_stdio
from ..dispatch import Context, Dispatcher
from ..errors import InvalidParams, RPCError
from ..peer import ConnectionClosed, MessageTransport, Peer, ProgressCallback, RequestTimeout
from .param_headers import usable_tools
from .profile import UNSUPPORTED_PROTOCOL_VERSION, MCPProfile
from .tasks import TASKS_EXTENSION
from .versions import (
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
    RULES,
    SUPPORTED_VERSIONS,
)

__all__ = ["MCPClient", "Subscription", "TaskHandle", "connect", "NegotiationFailed", "PaginationError"]

log = logging.getLogger("sturdyrpc.mcp")

Callback = Callable[[dict[str, Any]], Awaitable[dict[str, Any]] | dict[str, Any]]
RootsCallback = Callable[[], Awaitable[list[dict[str, Any]]] | list[dict[str, Any]]]

#: Most ``input_required`` rounds of one request before giving up.
MAX_INPUT_ROUNDS = 8


class PaginationError(RPCError):
    """A server's list pages do not end: a ``nextCursor`` seen before, or too many pages
    (an ``RPCError`` -32603, so callers that handle a failed list request handle this too)."""


class NegotiationFailed(Exception):
    """No protocol version both sides speak (or the forced one was refused)."""


class _ProbeLost(Exception):
    """The server closed the connection on the ``server/discover`` probe."""


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class MCPClient:
    """An MCP session on a :class:`~sturdyrpc.peer.Peer`; build it with :func:`connect`."""

    #: The connection (set by :func:`connect`, or given).
    peer: Peer
    #: The subprocess connection when started by :func:`connect`.
    connection: StdioConnection | None = None

    def __init__(
        self,
        peer: Peer | None,
        profile: MCPProfile,
        *,
        client_info: dict[str, Any],
        sampling: Callback | None = None,
        elicitation: Callback | None = None,
        roots: RootsCallback | None = None,
        on_log: Callable[[dict[str, Any]], Any] | None = None,
        on_notification: Callable[[str, Any], Any] | None = None,
        log_level: str | None = None,
        progress_resets_timeout: bool = True,
    ) -> None:
        if peer is not None:
            self.peer = peer
        self.profile = profile
        self.client_info = client_info
        self.sampling = sampling
        self.elicitation = elicitation
        self.roots = roots
        self.on_log = on_log
        self.on_notification = on_notification
        #: Per-request log level on 2026-07-28 (``logging/setLevel`` in the handshake era).
        self.log_level = log_level
        self.progress_resets_timeout = progress_resets_timeout  #: progress restarts a request's timeout
        self.version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        self.supported_versions: list[str] = []
        #: SEP-2243: the ``Mcp-Param-*`` headers of each listed tool (lower-case header name ->
        #: (parameter, JSON type)), which a 2026-07-28 HTTP transport sends with its calls.
        self.tool_headers: dict[str, dict[str, tuple[str, str]]] = {}
        #: Open ``subscriptions/listen`` streams by subscription id.
        self._listens: dict[str, Subscription] = {}
        self._listen_seq = 0

    # ------------------------------------------------------------------ negotiation

    @property
    def modern(self) -> bool:
        return self.version is not None and RULES[self.version].stateless

    def capabilities(self) -> dict[str, Any]:
        """The client capabilities we declare (from the callbacks given)."""
        caps: dict[str, Any] = {}
        if self.sampling is not None:
            caps["sampling"] = {}
        if self.elicitation is not None:
            caps["elicitation"] = {}
        if self.roots is not None:
            caps["roots"] = {"listChanged": True}
        return caps

    def _envelope(self, version: str) -> dict[str, Any]:
        meta: dict[str, Any] = {
            META_PROTOCOL_VERSION: version,
            META_CLIENT_CAPABILITIES: self.capabilities(),
            META_CLIENT_INFO: self.client_info,
        }
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        return meta

    async def negotiate(self, protocol: str | None = None, *, discover_timeout: float | None = 10.0) -> str:
        """Select the protocol version (see the module docstring). Returns it. ``discover_timeout``
        None: the probe is not timed (over HTTP with OAuth, where a user may be signing in)."""
        if protocol is not None and protocol not in SUPPORTED_VERSIONS:
            raise NegotiationFailed(f"unknown protocol version {protocol!r} (known: {', '.join(SUPPORTED_VERSIONS)})")
        if protocol is None or protocol in MODERN_VERSIONS:
            version = protocol or MODERN_VERSIONS[-1]
            for _attempt in range(2):
                try:
                    result = await self.peer.request("server/discover", {"_meta": self._envelope(version)}, timeout=discover_timeout)
                except RequestTimeout:
                    if protocol is not None:
                        raise NegotiationFailed("server/discover was not answered") from None
                    break
                except ConnectionClosed:
                    if protocol is not None:
                        raise
                    raise _ProbeLost() from None  # a legacy server that quits on an unknown request
                except RPCError as exc:
                    if exc.code == UNSUPPORTED_PROTOCOL_VERSION and isinstance(exc.data, dict):
                        supported = exc.data.get("supported") or []
                        mutual = [v for v in MODERN_VERSIONS if v in supported]
                        if mutual:
                            # retry with the newest version both know (once: the same one again
                            # when the server lists it, a refusal it may have made in passing)
                            version = mutual[-1]
                            continue
                        if protocol is not None or not any(v in HANDSHAKE_VERSIONS for v in supported):
                            raise NegotiationFailed(f"no common protocol version (server supports {supported})") from None
                    if protocol is not None:
                        raise NegotiationFailed(f"server/discover failed: {exc.message}") from None
                    if isinstance(exc.data, dict) and exc.data.get("reason") == "authorization":
                        # the transport could not authorize (mcp_http's auth=): no sign of the era,
                        # and initialize would only ask the user to sign in again
                        raise NegotiationFailed(exc.message) from None
                    break  # any other error: a handshake-era server
                if type(result) is dict:
                    supported = result.get("supportedVersions") or []
                    mutual = [v for v in MODERN_VERSIONS if v in supported]
                    if mutual:
                        self._adopt_discover(mutual[-1], result)
                        return mutual[-1]
                if protocol is not None:
                    raise NegotiationFailed("the server does not offer the requested version")
                break
        return await self._initialize(protocol)

    def _adopt_discover(self, version: str, result: dict[str, Any]) -> None:
        self.version = version
        self.profile.set_version(version)
        self.supported_versions = list(result.get("supportedVersions") or [])
        self.server_capabilities = result.get("capabilities") or {}
        meta = result.get("_meta")
        info = meta.get("io.modelcontextprotocol/serverInfo") if type(meta) is dict else None
        self.server_info = info if type(info) is dict else {}
        self.instructions = result.get("instructions")

    async def _initialize(self, protocol: str | None) -> str:
        offer = protocol or LATEST_HANDSHAKE
        result = await self.peer.request(
            "initialize",
            {"protocolVersion": offer, "capabilities": self.capabilities(), "clientInfo": self.client_info},
        )
        if type(result) is not dict:
            raise NegotiationFailed("malformed initialize result")
        version = result.get("protocolVersion")
        if not isinstance(version, str) or version not in HANDSHAKE_VERSIONS or (protocol is not None and version != protocol):
            raise NegotiationFailed(f"the server chose protocol version {version!r}, which this client cannot use")
        self.version = version
        self.profile.set_version(version)
        self.server_capabilities = result.get("capabilities") or {}
        self.server_info = result.get("serverInfo") or {}
        self.instructions = result.get("instructions")
        await self.peer.notify("notifications/initialized")
        if self.log_level is not None and "logging" in self.server_capabilities:
            await self.peer.request("logging/setLevel", {"level": self.log_level})
        return version

    # ------------------------------------------------------------------ requests

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None, on_progress: ProgressCallback | None = None
    ) -> Any:
        """Send one MCP request (the 2026-07-28 ``_meta`` envelope added when needed).

        ``input_required`` results are answered with the callbacks and retried. Raises the
        server's :class:`~sturdyrpc.errors.RPCError`, ``RequestTimeout``, ``ConnectionClosed``.
        """
        if self.version is None:
            raise RuntimeError("not negotiated: use connect() or negotiate() first")
        base = dict(params or {})
        extra: dict[str, Any] = {}
        for _round in range(MAX_INPUT_ROUNDS + 1):
            p = {**base, **extra}
            if self.modern:
                meta = self._envelope(self.version)
                meta.update(p.get("_meta") or {})  # what the caller set wins (e.g. extra capabilities)
                p["_meta"] = meta
            kw: dict[str, Any] = {"on_progress": on_progress, "reset_timeout_on_progress": self.progress_resets_timeout}
            if timeout is not None:
                kw["timeout"] = timeout
            result = await self.peer.request(method, p, **kw)
            if not (self.modern and type(result) is dict and result.get("resultType") == "input_required"):
                return result
            extra = {"inputResponses": await self._answer_inputs(result.get("inputRequests") or {})}
            if "requestState" in result:
                extra["requestState"] = result["requestState"]
        raise RPCError(f"the server asked for input more than {MAX_INPUT_ROUNDS} times")

    async def _answer_inputs(self, requests: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, req in requests.items():
            if type(req) is not dict:
                continue
            out[key] = await self._serve_request(str(req.get("method")), req.get("params") or {})
        return out

    async def _serve_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "sampling/createMessage" and self.sampling is not None:
            return await _maybe(self.sampling(params))  # type: ignore[no-any-return]
        if method == "elicitation/create" and self.elicitation is not None:
            return await _maybe(self.elicitation(params))  # type: ignore[no-any-return]
        if method == "roots/list" and self.roots is not None:
            return {"roots": await _maybe(self.roots())}
        raise InvalidParams(f"this client does not handle {method}")

    async def _paged(self, method: str, key: str, timeout: float | None) -> list[dict[str, Any]]:
        """Every item of a paginated list: the pages, following ``nextCursor`` until there is none
        (a cursor seen before, or more than 10,000 pages, ends the walk with :class:`PaginationError`)."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(10_000):
            params = {"cursor": cursor} if cursor is not None else {}
            result = await self.request(method, params, timeout=timeout)
            items.extend(result.get(key) or [])
            cursor = result.get("nextCursor")
            if not cursor:
                return items
            if type(cursor) is not str or cursor in seen:
                raise PaginationError(f"{method}: the server sent a cursor that does not move on ({cursor!r})")
            seen.add(cursor)
        raise PaginationError(f"{method}: more than 10,000 pages")

    async def ping(self, timeout: float | None = None) -> None:
        """``ping`` (handshake era only; 2026-07-28 has none)."""
        await self.request("ping", timeout=timeout)

    async def list_tools(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool (all pages). On 2026-07-28 a tool whose ``x-mcp-header`` annotations break
        SEP-2243's rules is left out (the specification says a client MUST exclude it), and the
        others' ``Mcp-Param-*`` headers are kept in :attr:`tool_headers`."""
        tools = await self._paged("tools/list", "tools", timeout)
        if not self.modern:
            return tools
        kept, headers, left_out = usable_tools(tools)
        self.tool_headers.update(headers)
        for line in left_out:
            log.warning("%s", line)
        return kept

    @overload
    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None,
        on_progress: ProgressCallback | None = None, as_task: Literal[False] = False, ttl_ms: int | None = None,
    ) -> dict[str, Any]: ...

    @overload
    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None,
        on_progress: ProgressCallback | None = None, as_task: Literal[True], ttl_ms: int | None = None,
    ) -> TaskHandle: ...

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None,
        on_progress: ProgressCallback | None = None, as_task: bool = False, ttl_ms: int | None = None,
    ) -> dict[str, Any] | TaskHandle:
        """``tools/call``; the result dict (``content``, ``structuredContent``, ``isError``).

        Cancel the awaiting task to cancel the call (``notifications/cancelled`` is sent).
        ``as_task=True``: the call runs as an MCP task; a :class:`TaskHandle` comes back at once
        (``status()``, ``result()``, ``cancel()``), see :meth:`call_tool_as_task`.
        """
        if as_task:
            return await self.call_tool_as_task(name, arguments, ttl_ms=ttl_ms, timeout=timeout, on_progress=on_progress)
        result: dict[str, Any] = await self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout=timeout, on_progress=on_progress)
        return result

    def with_tasks_extension(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` of a 2026-07-28 request declaring the tasks extension for it (SEP-2663: a
        server refuses ``tasks/*`` from a client that does not, with -32021); unchanged before."""
        if not self.modern:
            return params
        caps = dict(self.capabilities())
        caps["extensions"] = {**caps.get("extensions", {}), TASKS_EXTENSION: {}}
        return {**params, "_meta": {META_CLIENT_CAPABILITIES: caps}}

    async def call_tool_as_task(
        self, name: str, arguments: dict[str, Any] | None = None, *, ttl_ms: int | None = None, timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TaskHandle:
        """``tools/call`` as a task: a :class:`TaskHandle` as soon as the server has created it
        (2025-11-25: ``params.task``; 2026-07-28: the tasks extension declared for this request,
        and the server may still answer at once: the handle is then already complete)."""
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if self.modern:
            params = self.with_tasks_extension(params)
        else:
            params["task"] = {} if ttl_ms is None else {"ttl": ttl_ms}
        result = await self.request("tools/call", params, timeout=timeout, on_progress=on_progress)
        return TaskHandle(self, result, modern=self.modern)

    async def list_resources(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._paged("resources/list", "resources", timeout)

    async def list_resource_templates(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._paged("resources/templates/list", "resourceTemplates", timeout)

    async def read_resource(self, uri: str, timeout: float | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("resources/read", {"uri": uri}, timeout=timeout)
        return result

    async def list_prompts(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._paged("prompts/list", "prompts", timeout)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None, timeout: float | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("prompts/get", {"name": name, "arguments": arguments or {}}, timeout=timeout)
        return result

    async def complete(self, ref: dict[str, Any], argument: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("completion/complete", {"ref": ref, "argument": argument}, timeout=timeout)
        return result

    async def set_log_level(self, level: str) -> None:
        """Ask for ``notifications/message`` at ``level`` and above."""
        self.log_level = level
        if not self.modern:
            await self.request("logging/setLevel", {"level": level})

    async def listen(
        self, notifications: dict[str, Any], on_notification: Callable[[str, dict[str, Any]], Any], *, timeout: float | None = 30.0
    ) -> Subscription:
        """Open a ``subscriptions/listen`` stream (2026-07-28) and wait for its acknowledgement.

        ``notifications`` is the filter (``toolsListChanged``, ``promptsListChanged``,
        ``resourcesListChanged``: bool; ``resourceSubscriptions``: list of URIs).
        ``on_notification(method, params)`` (sync or async) gets each notification of this
        stream. The returned :class:`Subscription` says what the server agreed to
        (``acknowledged``); ``await sub.close()`` cancels it (stdio: ``notifications/cancelled``;
        HTTP: the stream is closed), ``await sub.wait()`` waits for the server to end it.
        Raises the server's error (e.g. -32601 from an older server) or ``TimeoutError``.
        """
        if not self.modern or self.version is None:
            raise RuntimeError("subscriptions/listen needs protocol version 2026-07-28")
        self._listen_seq += 1
        sub = Subscription(f"sturdyrpc-listen-{self._listen_seq}", on_notification)
        self._listens[sub.id] = sub
        params = {"notifications": notifications, "_meta": self._envelope(self.version)}
        sub._task = asyncio.ensure_future(self._run_listen(sub, params))
        sub._task.add_done_callback(lambda t: t.cancelled() or t.exception())  # errors are seen by wait()
        try:
            await asyncio.wait_for(asyncio.shield(sub._acked), timeout)
        except BaseException:
            await sub.close()
            raise
        return sub

    async def _run_listen(self, sub: Subscription, params: dict[str, Any]) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self.peer.request("subscriptions/listen", params, id=sub.id, timeout=None)
            sub.result = result
            return result
        except Exception as exc:
            if not sub._acked.done():
                sub._acked.set_exception(exc)
            raise
        finally:
            self._listens.pop(sub.id, None)
            if not sub._acked.done():
                sub._acked.cancel()

    # ------------------------------------------------------------------ the server's calls

    def dispatcher(self) -> Dispatcher:
        """The dispatcher answering the server's requests and notifications."""
        d = Dispatcher()
        client = self

        async def sampling(ctx: Context, **params: Any) -> dict[str, Any]:
            return await client._serve_request("sampling/createMessage", params)

        async def elicitation(ctx: Context, **params: Any) -> dict[str, Any]:
            return await client._serve_request("elicitation/create", params)

        async def roots(ctx: Context, **params: Any) -> dict[str, Any]:
            return await client._serve_request("roots/list", params)

        async def ping(ctx: Context, **params: Any) -> dict[str, Any]:
            return {}

        async def message(ctx: Context, **params: Any) -> None:
            if client.on_log is not None:
                await _maybe(client.on_log(params))

        d.add_method(sampling, "sampling/createMessage")
        d.add_method(elicitation, "elicitation/create")
        d.add_method(roots, "roots/list")
        d.add_method(ping, "ping")
        d.add_method(message, "notifications/message")

        async def acknowledged(ctx: Context, **params: Any) -> None:
            sub = client._listen_of(params)
            notes = params.get("notifications")
            if sub is not None and not sub._acked.done():
                sub.acknowledged = notes if type(notes) is dict else {}
                sub._acked.set_result(None)

        d.add_method(acknowledged, "notifications/subscriptions/acknowledged")
        for name in (
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/updated",
        ):
            d.add_method(self._notification_handler(name), name)
        return d

    def _notification_handler(self, name: str) -> Callable[..., Awaitable[None]]:
        async def handler(ctx: Context, **params: Any) -> None:
            meta = params.get("_meta")
            if type(meta) is dict and "io.modelcontextprotocol/subscriptionId" in meta:
                sub = self._listen_of(params)  # a listen stream's: to its callback (none once closed)
                if sub is not None and sub._acked.done():
                    await _maybe(sub.callback(name, params))
                return
            if self.on_notification is not None:
                await _maybe(self.on_notification(name, params))

        return handler


    def _listen_of(self, params: dict[str, Any]) -> Subscription | None:
        meta = params.get("_meta")
        sid = meta.get("io.modelcontextprotocol/subscriptionId") if type(meta) is dict else None
        return self._listens.get(sid) if type(sid) is str else None


class TaskHandle:
    """A tool call running as a task on the server (see :meth:`MCPClient.call_tool`).

    ``task``: the last ``Task`` the server described (``taskId``, ``status``, ...); ``status()``
    asks again (``tasks/get``); ``result()`` polls every ``pollInterval`` until the task is
    terminal (calling ``on_status(task)`` whenever the status changes), then returns the tool's
    result or raises the server's error; ``cancel()`` sends ``tasks/cancel``.
    """

    TERMINAL = frozenset({"completed", "failed", "cancelled"})

    def __init__(self, client: MCPClient, created: dict[str, Any], *, modern: bool) -> None:
        self.client = client
        self.modern = modern
        self._final: dict[str, Any] | None = None
        if modern and created.get("resultType") != "task":
            # the server answered at once: a finished task of sorts
            self.task: dict[str, Any] = {"taskId": "", "status": "completed"}
            self._final = created
        elif modern:
            self.task = {k: v for k, v in created.items() if k not in ("resultType", "_meta")}
        else:
            task = created.get("task")
            if type(task) is not dict or type(task.get("taskId")) is not str:
                raise RPCError("the server did not create a task (no 'task' in its result)", {"result": created})
            self.task = task

    @property
    def task_id(self) -> str:
        return str(self.task.get("taskId") or "")

    @property
    def poll_interval(self) -> float:
        """Seconds between polls: the server's ``pollInterval`` (0.05 .. 30 s; 1 s when absent)."""
        ms = self.task.get("pollIntervalMs" if self.modern else "pollInterval")
        if not isinstance(ms, (int, float)):
            return 1.0
        return min(30.0, max(0.05, ms / 1000))

    async def status(self, timeout: float | None = None) -> dict[str, Any]:
        """``tasks/get``: the task now (its ``status``, ``statusMessage``...)."""
        if self._final is not None:
            return self.task
        got: dict[str, Any] = await self.client.request("tasks/get", self.client.with_tasks_extension({"taskId": self.task_id}), timeout=timeout)
        self.task = {k: v for k, v in got.items() if k not in ("resultType", "_meta")}
        return self.task

    async def wait(self, on_status: Callable[[dict[str, Any]], Any] | None = None,
                   answer_inputs: bool = False) -> dict[str, Any]:
        """Poll until the task is terminal; the task then. ``answer_inputs``: a task that is
        ``input_required`` gets the server's requests answered through the client's sampling,
        elicitation and roots handlers (2025-11-25: ``tasks/result``, on whose stream the server
        sends them, which then returns once the task is terminal; 2026-07-28: the
        ``inputRequests`` of ``tasks/get``, answered with ``tasks/update``)."""
        last = None
        while True:
            if self.task.get("status") != last:
                last = self.task.get("status")
                if on_status is not None:
                    await _maybe(on_status(self.task))
            if last in self.TERMINAL:
                return self.task
            if answer_inputs and last == "input_required":
                if not self.modern:
                    return self.task  # result(): tasks/result delivers the requests and waits
                requests = self.task.get("inputRequests")
                if type(requests) is dict and requests:
                    responses = await self.client._answer_inputs(requests)
                    await self.client.request("tasks/update", self.client.with_tasks_extension({"taskId": self.task_id, "inputResponses": responses}))
            await asyncio.sleep(self.poll_interval)
            await self.status()

    async def result(self, on_status: Callable[[dict[str, Any]], Any] | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The tool's result once the task is terminal (raises the server's ``RPCError`` for a
        failed or cancelled task that has no result)."""
        if self._final is not None:
            return self._final
        await self.wait(on_status, answer_inputs=True)
        if self.modern:
            if "result" in self.task:
                return dict(self.task["result"])
            err = self.task.get("error") or {}
            if self.task.get("status") == "cancelled":
                raise RPCError(self.task.get("statusMessage") or "the task was cancelled", {"taskId": self.task_id})
            raise RPCError(err.get("message") or "the task failed", err.get("data"), code=err.get("code", -32603))
        try:
            result: dict[str, Any] = await self.client.request("tasks/result", {"taskId": self.task_id}, timeout=timeout)
        finally:
            if self.task.get("status") not in self.TERMINAL:  # it was input_required: tell its end
                with contextlib.suppress(RPCError, OSError):
                    await self.status()
                if on_status is not None and self.task.get("status") in self.TERMINAL:
                    await _maybe(on_status(self.task))
        return result

    async def cancel(self, timeout: float | None = None) -> dict[str, Any]:
        """``tasks/cancel``; the task as the server describes it afterwards."""
        if self._final is not None:
            return self.task
        got: dict[str, Any] = await self.client.request("tasks/cancel", self.client.with_tasks_extension({"taskId": self.task_id}), timeout=timeout)
        if not self.modern:
            self.task = {k: v for k, v in got.items() if k != "_meta"}
        return self.task


class Subscription:
    """An open ``subscriptions/listen`` stream (see :meth:`MCPClient.listen`)."""

    def __init__(self, sub_id: str, callback: Callable[[str, dict[str, Any]], Any]) -> None:
        #: The subscription id: the listen request's JSON-RPC id.
        self.id = sub_id
        self.callback = callback
        #: The filter the server agreed to honour (from ``notifications/subscriptions/acknowledged``).
        self.acknowledged: dict[str, Any] = {}
        #: The final result when the server ended the stream gracefully.
        self.result: dict[str, Any] | None = None
        self._acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Future[dict[str, Any] | None] | None = None

    async def close(self) -> None:
        """Cancel the stream; no notification reaches the callback afterwards."""
        self.callback = _ignore
        t = self._task
        if t is not None and not t.done():
            t.cancel()
        if t is not None:
            await asyncio.wait((t,))
            if not t.cancelled():
                t.exception()  # seen: an error after the close is of no interest

    async def wait(self) -> dict[str, Any] | None:
        """Wait until the server ends the stream; its final result."""
        assert self._task is not None
        return await self._task


def _ignore(method: str, params: dict[str, Any]) -> None:
    return None


@contextlib.asynccontextmanager
async def connect(
    argv: Sequence[str],
    protocol: str | None = None,
    *,
    sampling: Callback | None = None,
    elicitation: Callback | None = None,
    roots: RootsCallback | None = None,
    on_log: Callable[[dict[str, Any]], Any] | None = None,
    on_notification: Callable[[str, Any], Any] | None = None,
    log_level: str | None = None,
    client_info: dict[str, Any] | None = None,
    timeout: float | None = 60.0,
    discover_timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    wrap_transport: Callable[[MessageTransport], MessageTransport] | None = None,
    progress_resets_timeout: bool = True,
) -> AsyncIterator[MCPClient]:
    """Start ``argv`` (an MCP stdio server), negotiate, and yield an :class:`MCPClient`.

    ``protocol`` forces a version. ``timeout``: the default per-request timeout (None: none),
    restarted by progress (``progress_resets_timeout``). ``wrap_transport``: see
    :func:`~sturdyrpc.client.connect_stdio`. The server is stopped politely at the end.
    """
    from .. import __version__

    profile = MCPProfile(role="client")
    client = MCPClient(None, profile, client_info=client_info or {"name": "sturdyrpc", "version": __version__},
                       sampling=sampling, elicitation=elicitation, roots=roots, on_log=on_log, on_notification=on_notification,
                       log_level=log_level, progress_resets_timeout=progress_resets_timeout)
    restart = False
    async with connect_stdio(argv, profile=profile, dispatcher=client.dispatcher(), default_timeout=timeout, env=env, cwd=cwd,
                            wrap_transport=wrap_transport) as conn:
        client.peer = conn.peer
        client.connection = conn
        try:
            await client.negotiate(protocol, discover_timeout=discover_timeout)
        except _ProbeLost:
            restart = True
        if not restart:
            yield client
            return
    # The server quit on the probe (some handshake-era servers do): start it again and
    # use the initialize handshake straight away.
    log.info("the server closed the connection on server/discover: restarting it for initialize")
    profile = MCPProfile(role="client")
    client.profile = profile
    async with connect_stdio(argv, profile=profile, dispatcher=client.dispatcher(), default_timeout=timeout, env=env, cwd=cwd,
                            wrap_transport=wrap_transport) as conn:
        client.peer = conn.peer
        client.connection = conn
        await client._initialize(None)
        yield client
