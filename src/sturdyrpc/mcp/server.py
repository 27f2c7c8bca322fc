"""The MCP server: tools, resources (and templates), prompts and completions on plain typed functions.

One :class:`MCPServer` object serves any number of connections, over any transport:

- :meth:`MCPServer.create_peer` / :meth:`MCPServer.serve`: one stateful session (any protocol
  version, handshake or 2026-07-28) over a :class:`~sturdyrpc.peer.MessageTransport`, on a
  :class:`~sturdyrpc.peer.Peer` (stdio uses this, as does Streamable HTTP for handshake-era
  sessions);
- :meth:`MCPServer.handle_stateless`: one 2026-07-28 request in, its reply out, with the
  request's progress and log notifications passed to a callback (Streamable HTTP 2026-07-28).

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
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import inspect
import logging
import os
import re
import types
import typing
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import msgspec

from .. import codec
from ..codec import decode as _raw_decode
from ..dispatch import HANDLER_ERRORS, BatchJob, Call, Context, Dispatcher, MethodEntry
from ..errors import InvalidParams, InvalidRequest, MethodNotFound, RPCError
from ..limits import DEFAULT_LIMITS, Limits
from ..messages import InvalidMessage, Message
from ..params import Binder, compile_binder
from ..peer import MessageTransport, Peer, PeerContext
from ..profile import Profile
from .profile import MCPProfile, MissingRequiredClientCapability
from .schema import DIALECT, input_schema, output_schema, wraps_output
from .versions import (
    LATEST,
    META_CLIENT_CAPABILITIES,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    RULES,
    SUPPORTED_VERSIONS,
    VersionRules,
)

__all__ = [
    "MCPServer",
    "MCPContext",
    "ToolError",
    "ToolResult",
    "Session",
    "text_content",
    "image_content",
    "audio_content",
    "embedded_resource",
    "LOG_LEVELS",
]

log = logging.getLogger("sturdyrpc.mcp")

F = TypeVar("F", bound=Callable[..., Any])

#: Log levels of ``logging/setLevel`` and ``notifications/message``, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_LEVEL_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}


class ToolError(Exception):
    """Raise inside a tool to return ``isError: true`` with this message, shown as is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _InputRequired(Exception):
    """Raised inside a handler on 2026-07-28 when the client must supply input (MRTR)."""

    def __init__(self, requests: dict[str, Any]) -> None:
        super().__init__("input required")
        self.requests = requests


# ----------------------------------------------------------------------------- content helpers


def text_content(text: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": text}


def image_content(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """An image content block (``data``: raw bytes, or base64 text)."""
    return {"type": "image", "data": data if isinstance(data, str) else base64.b64encode(data).decode(), "mimeType": mime_type}


def audio_content(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """An audio content block (2025-03-26 and later)."""
    return {"type": "audio", "data": data if isinstance(data, str) else base64.b64encode(data).decode(), "mimeType": mime_type}


def embedded_resource(uri: str, text: str | None = None, *, blob: bytes | None = None, mime_type: str | None = None) -> dict[str, Any]:
    """An embedded resource content block."""
    res: dict[str, Any] = {"uri": uri}
    if mime_type is not None:
        res["mimeType"] = mime_type
    if blob is not None:
        res["blob"] = base64.b64encode(blob).decode()
    else:
        res["text"] = text or ""
    return {"type": "resource", "resource": res}


class ToolResult:
    """A tool result spelled out: content blocks, optional structured content, error flag."""

    __slots__ = ("content", "structured", "is_error")

    def __init__(self, content: list[dict[str, Any]] | None = None, *, structured: Any = None, is_error: bool = False) -> None:
        self.content = content or []
        self.structured = structured
        self.is_error = is_error

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"content": self.content}
        if self.structured is not None:
            d["structuredContent"] = self.structured
        d["isError"] = self.is_error
        return d


_CONTENT_TYPES = {"text", "image", "audio", "resource", "resource_link"}


def _is_content(v: Any) -> bool:
    return type(v) is dict and v.get("type") in _CONTENT_TYPES


def _to_content(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [text_content(value)]
    if _is_content(value):
        return [value]
    if type(value) is list and all(_is_content(x) for x in value):
        return value
    return [text_content(codec.encode(msgspec.to_builtins(value)).decode())]


# ----------------------------------------------------------------------------- registry records


def _is_ctx_hint(hint: Any) -> bool:
    """``MCPContext`` (or a subclass), also as ``MCPContext | None``."""
    if isinstance(hint, type):
        return issubclass(hint, MCPContext)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_ctx_hint(a) for a in typing.get_args(hint) if a is not type(None))
    return False


def _hints_of(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _compile(fn: Callable[..., Any], hints: dict[str, Any]) -> tuple[Binder, str | None]:
    """The binder of ``fn`` without its context parameter, and that parameter's name."""
    sig = inspect.signature(fn)
    ctx_name = next((p.name for p in sig.parameters.values() if _is_ctx_hint(hints.get(p.name, p.annotation))), None)
    if ctx_name is None:
        return compile_binder(fn), None

    def shim() -> None:
        return None

    shim.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != ctx_name])  # type: ignore[attr-defined]
    shim.__annotations__ = {k: v for k, v in hints.items() if k != ctx_name}
    return compile_binder(shim), ctx_name


class _Callable:
    """A user function with its binder: how to call it with checked arguments and a context."""

    def __init__(self, fn: Callable[..., Any], blocking: bool | None) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.blocking = (not self.is_async) if blocking is None else (blocking and not self.is_async)
        self.hints = _hints_of(fn)
        self.binder, self.ctx_name = _compile(fn, self.hints)

    async def call(self, arguments: dict[str, Any], ctx: MCPContext) -> Any:
        args, kwargs = self.binder.bind(arguments)
        return await self.run(args, kwargs, ctx)

    async def run(self, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: MCPContext) -> Any:
        if self.ctx_name is not None:
            kwargs[self.ctx_name] = ctx
        if self.is_async:
            return await self.fn(*args, **kwargs)
        if self.blocking:
            return await asyncio.to_thread(self.fn, *args, **kwargs)
        return self.fn(*args, **kwargs)


class Tool(_Callable):
    """A registered tool."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        description: str | None,
        title: str | None,
        annotations: dict[str, Any] | None,
        schema: dict[str, Any] | None,
        structured: bool | None,
        blocking: bool | None,
        meta: dict[str, Any] | None,
    ) -> None:
        super().__init__(fn, blocking)
        self.name = name
        #: Runs on the event loop without a task of its own (sync, ``blocking=False``, no context).
        self.inline = not self.is_async and not self.blocking and self.ctx_name is None
        self.description = description if description is not None else inspect.getdoc(fn)
        self.title = title
        self.annotations = annotations
        self.meta = meta
        self.explicit_schema = schema is not None
        self.input_schema = schema if schema is not None else {"$schema": DIALECT, **input_schema(fn, _is_ctx_hint, self.hints)}
        ret = self.hints.get("return", inspect.Parameter.empty)
        declared = ret is not inspect.Parameter.empty and ret is not None and ret is not type(None) and ret is not Any and ret is not ToolResult
        if structured is None:
            structured = declared
        self.output_schema: dict[str, Any] | None = None
        self.wrap = False
        if structured and declared:
            self.output_schema = output_schema(ret)
            self.wrap = wraps_output(ret)

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        d["description"] = self.description or ""
        d["inputSchema"] = self.input_schema
        if rules.structured_output and self.output_schema is not None:
            d["outputSchema"] = self.output_schema
        if rules.audio and self.annotations:
            d["annotations"] = self.annotations
        if rules.structured_output and self.meta:
            d["_meta"] = self.meta
        return d

    def result(self, value: Any, rules: VersionRules) -> dict[str, Any]:
        t = type(value)
        if self.wrap and (t is str or t is int):  # the common case, spelled out
            d: dict[str, Any] = {"content": [{"type": "text", "text": value if t is str else str(value)}]}
            if rules.structured_output:
                d["structuredContent"] = {"result": value}
            d["isError"] = False
            return d
        if isinstance(value, ToolResult):
            d = value.to_dict()
        elif self.output_schema is not None:
            data = msgspec.to_builtins(value)
            structured = {"result": data} if self.wrap else data
            text = data if isinstance(data, str) else codec.encode(data).decode()
            d = {"content": [text_content(text)], "structuredContent": structured, "isError": False}
        else:
            d = {"content": _to_content(value), "isError": False}
        if not rules.structured_output:
            d.pop("structuredContent", None)
        if not rules.structured_output and type(d.get("content")) is list:
            d["content"] = [_older_block(b, rules) for b in d["content"]]
        return d


def _older_block(block: Any, rules: VersionRules) -> Any:
    """A content block the negotiated version can carry: audio (2025-03-26+) and resource links
    (2025-06-18+) become a text block saying what was there, so the result stays schema-valid."""
    if type(block) is not dict:
        return block
    kind = block.get("type")
    if kind == "audio" and not rules.audio:
        return text_content(f"[audio content ({block.get('mimeType', 'unknown type')}) cannot be sent in protocol version {rules.version}]")
    if kind == "resource_link":
        return text_content(f"[resource link: {block.get('uri', '')}]")
    return block


class Resource(_Callable):
    """A registered resource (fixed URI) or resource template (URI with ``{variables}``)."""

    def __init__(
        self, fn: Callable[..., Any], uri: str, name: str, description: str | None, mime_type: str | None, title: str | None, blocking: bool | None
    ) -> None:
        super().__init__(fn, blocking)
        self.uri = uri
        self.name = name
        self.description = description if description is not None else inspect.getdoc(fn)
        self.mime_type = mime_type
        self.title = title
        self.is_template = "{" in uri
        self.pattern = _template_regex(uri) if self.is_template else None

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {("uriTemplate" if self.is_template else "uri"): self.uri, "name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        d["description"] = self.description or ""
        if self.mime_type:
            d["mimeType"] = self.mime_type
        return d

    def match(self, uri: str) -> dict[str, str] | None:
        if self.pattern is None:
            return {} if uri == self.uri else None
        m = self.pattern.fullmatch(uri)
        return m.groupdict() if m else None

    def contents(self, uri: str, value: Any) -> list[dict[str, Any]]:
        items = value if type(value) is list else [value]
        out: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, str):
                out.append({"uri": uri, "mimeType": self.mime_type or "text/plain", "text": item})
            elif isinstance(item, (bytes, bytearray)):
                out.append({"uri": uri, "mimeType": self.mime_type or "application/octet-stream", "blob": base64.b64encode(bytes(item)).decode()})
            elif type(item) is dict:
                c = {"uri": uri, **item}
                if "mimeType" not in c and self.mime_type:
                    c["mimeType"] = self.mime_type
                out.append(c)
            else:
                out.append({"uri": uri, "mimeType": "application/json", "text": codec.encode(msgspec.to_builtins(item)).decode()})
        return out


def _template_regex(template: str) -> re.Pattern[str]:
    out = []
    pos = 0
    for m in re.finditer(r"\{([+#]?)([A-Za-z0-9_]+)\}", template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(f"(?P<{m.group(2)}>{'.+' if m.group(1) else '[^/?#]+'})")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


class Prompt(_Callable):
    """A registered prompt; its arguments come from the function's parameters."""

    def __init__(self, fn: Callable[..., Any], name: str, description: str | None, title: str | None, arg_descriptions: dict[str, str] | None) -> None:
        super().__init__(fn, None)
        self.name = name
        self.description = description if description is not None else inspect.getdoc(fn)
        self.title = title
        hints = self.hints
        self.arguments: list[dict[str, Any]] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or _is_ctx_hint(hints.get(p.name)):
                continue
            a: dict[str, Any] = {"name": p.name}
            if arg_descriptions and p.name in arg_descriptions:
                a["description"] = arg_descriptions[p.name]
            a["required"] = p.default is inspect.Parameter.empty
            self.arguments.append(a)

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        d["description"] = self.description or ""
        d["arguments"] = self.arguments
        return d

    @staticmethod
    def result(value: Any, description: str | None) -> dict[str, Any]:
        if type(value) is dict and "messages" in value:
            return value
        if isinstance(value, str):
            messages = [{"role": "user", "content": text_content(value)}]
        elif type(value) is list:
            messages = [m if type(m) is dict and "role" in m else {"role": "user", "content": m if _is_content(m) else text_content(str(m))} for m in value]
        else:
            messages = [{"role": "user", "content": text_content(codec.encode(msgspec.to_builtins(value)).decode())}]
        out: dict[str, Any] = {"messages": messages}
        if description:
            out["description"] = description
        return out


# ----------------------------------------------------------------------------- sessions and contexts


class Session:
    """What the server knows about one connection (or, stateless, one request)."""

    def __init__(self, server: MCPServer, profile: MCPProfile, peer: Peer | None = None) -> None:
        self.server = server
        self.profile = profile
        self._peer = weakref.ref(peer) if peer is not None else None
        #: Minimum level of ``notifications/message`` set by ``logging/setLevel`` (None: send none).
        self.log_level: str | None = None
        #: URIs the client subscribed to (``resources/subscribe``).
        self.subscriptions: set[str] = set()

    @property
    def peer(self) -> Peer | None:
        return self._peer() if self._peer is not None else None

    @property
    def rules(self) -> VersionRules:
        v = self.profile.version
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


#: The session whose messages are being handled (set for a peer's reader task and everything
#: it starts, and around each stateless request).
_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar("sturdyrpc_mcp_session", default=None)


class _SessionPeer(Peer):
    """A peer that makes its MCP session known to everything its reader task runs."""

    mcp_session: Session

    async def start(self) -> None:
        token = _SESSION.set(self.mcp_session)
        try:
            await super().start()  # the reader and writer tasks copy the context here
        finally:
            _SESSION.reset(token)


class _MCPDispatcher(Dispatcher):
    """Routes ``tools/call`` per tool: tools that can run inline (sync, ``blocking=False``,
    no context) take the sync entry, which the runner runs without a task; the others take
    the async entry."""

    def __init__(self, server: MCPServer, limits: Limits, logger: logging.Logger) -> None:
        super().__init__(limits, logger=logger)
        self.server = server
        self.inline_call: MethodEntry | None = None
        self.async_call: MethodEntry | None = None

    def receive(
        self, data: bytes, on_response: Callable[[Message | InvalidMessage], None] | None = None, profile: Profile | None = None
    ) -> Any:
        if type(profile) is MCPProfile and profile.era is not None and len(data) <= self.limits.max_message_bytes:
            call = self._fast_tool_call(data, profile)
            if call is not None:
                return call
        todo = super().receive(data, on_response, profile)
        if type(todo) is Call:
            self._route(todo)
        elif isinstance(todo, BatchJob):
            for c in todo.calls:
                self._route(c)
        return todo

    def _fast_tool_call(self, data: bytes, profile: MCPProfile) -> Call | None:
        """The hot path: a well-formed ``tools/call`` of an inline tool on a negotiated session
        becomes a Call at once. Anything else (every error included) returns None and takes
        the general path, which answers it."""
        try:
            obj = codec.decode_bounded(data, self.limits.max_depth)
        except codec.DecodeFailure:
            return None
        if type(obj) is not dict or obj.get("method") != "tools/call" or obj.get("jsonrpc") != "2.0":
            return None
        id_ = obj.get("id")
        params = obj.get("params")
        if not (type(id_) is int or type(id_) is str) or type(params) is not dict or self.inline_call is None:
            return None
        name = params.get("name")
        tool = self.server.tools.get(name) if type(name) is str else None
        if tool is None or not tool.inline or profile.check_request("tools/call", params, id_, False) is not None:
            return None
        return Call(id_, "tools/call", self.inline_call, (), params, params)

    def _route(self, call: Call) -> None:
        if call.entry is self.inline_call and self.async_call is not None:
            p = call.params
            name = p.get("name") if type(p) is dict else None
            tool = self.server.tools.get(name) if isinstance(name, str) else None
            if tool is not None and not tool.inline:
                call.entry = self.async_call


class _StatelessContext(Context):
    """The context of one 2026-07-28 request served by :meth:`MCPServer.handle_stateless`."""

    __slots__ = ("session", "send_related", "done", "_last_progress")

    def __init__(self, call: Call, session: Session, send_related: Callable[[bytes], Awaitable[None]]) -> None:
        super().__init__(call.request_id, call.method, call.params, call.is_notification)
        self.session = session
        self.send_related = send_related
        self.done = False
        self._last_progress: float | None = None

    async def notify(self, method: str, params: Any = None) -> None:
        if self.done:
            return
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.send_related(codec.encode(msg))

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
        raise RuntimeError("2026-07-28 servers do not send requests to the client")


class MCPContext:
    """What a tool, resource or prompt function can do for the request it serves.

    Declare a parameter annotated ``MCPContext`` to receive it.
    """

    def __init__(self, session: Session, ctx: Context) -> None:
        self.session = session
        self._ctx = ctx
        self._done = False
        self._asked = 0

    @property
    def request_id(self) -> Any:
        return self._ctx.id

    @property
    def method(self) -> str:
        return self._ctx.method

    @property
    def params(self) -> dict[str, Any]:
        p = self._ctx.params
        return p if type(p) is dict else {}

    @property
    def meta(self) -> dict[str, Any]:
        return self._ctx.meta

    @property
    def version(self) -> str:
        """The protocol version this request is served under."""
        v = self.meta.get(META_PROTOCOL_VERSION)
        if self.session.profile.era == "modern" and isinstance(v, str) and v in RULES:
            return v
        return self.session.profile.version or LATEST

    @property
    def modern(self) -> bool:
        return RULES[self.version].stateless

    @property
    def client_capabilities(self) -> dict[str, Any]:
        if self.modern:
            caps = self.meta.get(META_CLIENT_CAPABILITIES)
            return caps if type(caps) is dict else {}
        return self.session.profile.client_capabilities

    @property
    def progress_token(self) -> str | int | None:
        return self.session.profile.read_progress_token(self._ctx.params)

    @property
    def cancelled(self) -> bool:
        return bool(getattr(self._ctx, "cancelled", False))

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the caller asked for progress (no-op otherwise).

        ``progress`` must increase with every call; nothing is sent after the reply.
        """
        if self._done:
            return
        await self._ctx.report_progress(progress, total, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` when the client asked for this level (or a lower one)."""
        if level not in _LEVEL_RANK:
            raise ValueError(f"unknown log level {level!r}")
        if self._done:
            return
        wanted = self.meta.get(META_LOG_LEVEL) if self.modern else self.session.log_level
        if not isinstance(wanted, str) or wanted not in _LEVEL_RANK or _LEVEL_RANK[level] < _LEVEL_RANK[wanted]:
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        notify = getattr(self._ctx, "notify", None)
        if notify is not None:
            await notify("notifications/message", params)

    async def debug(self, data: Any) -> None:
        await self.log("debug", data)

    async def info(self, data: Any) -> None:
        await self.log("info", data)

    async def warning(self, data: Any) -> None:
        await self.log("warning", data)

    async def error(self, data: Any) -> None:
        await self.log("error", data)

    async def _ask(self, method: str, params: dict[str, Any], capability: str, timeout: float | None) -> Any:
        self._asked += 1
        key = f"{method.split('/')[0]}-{self._asked}"
        if capability not in self.client_capabilities:
            if self.modern:
                raise MissingRequiredClientCapability({capability: {}}, f"This request needs the client's {capability} capability")
            raise ToolError(f"The client does not support {capability}")
        if self.modern:
            responses = self.params.get("inputResponses")
            if type(responses) is dict and key in responses:
                return responses[key]
            raise _InputRequired({key: {"method": method, "params": params}})
        return await self._ctx.request(method, params, timeout=timeout)  # type: ignore[attr-defined]

    async def sample(self, messages: list[dict[str, Any]], max_tokens: int, *, timeout: float | None = 120.0, **extra: Any) -> dict[str, Any]:
        """Ask the client's LLM (``sampling/createMessage``); returns the client's result."""
        params = {"messages": messages, "maxTokens": max_tokens, **extra}
        result: dict[str, Any] = await self._ask("sampling/createMessage", params, "sampling", timeout)
        return result

    async def elicit(self, message: str, requested_schema: dict[str, Any], *, timeout: float | None = 600.0) -> dict[str, Any]:
        """Ask the user for input (``elicitation/create``); returns ``{action, content?}``."""
        if not RULES[self.version].elicitation:
            raise ToolError("Elicitation is not available in this protocol version")
        result: dict[str, Any] = await self._ask(
            "elicitation/create", {"message": message, "requestedSchema": requested_schema}, "elicitation", timeout
        )
        return result

    async def list_roots(self, *, timeout: float | None = 60.0) -> dict[str, Any]:
        """The client's roots (``roots/list``)."""
        result: dict[str, Any] = await self._ask("roots/list", {}, "roots", timeout)
        return result


# ----------------------------------------------------------------------------- the stdio fast path


class _FastParams(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """``params`` of a plain ``tools/call`` as the fast path decodes it; any other member
    (``requestState``, ``inputResponses``, anything unknown) fails the decode."""

    name: str
    arguments: dict[str, Any] | None | msgspec.UnsetType = msgspec.UNSET
    meta: dict[str, Any] | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name="_meta")


class _FastCall(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A ``tools/call`` request of the usual shape (typed in C; anything else fails the decode
    and takes the dict path, which sorts it out)."""

    jsonrpc: Literal["2.0"]
    method: Literal["tools/call"]
    params: _FastParams
    id: int | str


_decode_fast_call = msgspec.json.Decoder(_FastCall).decode
_MISSING: Any = object()


# ----------------------------------------------------------------------------- subscriptions/listen (2026-07-28)

#: ``_meta`` key naming the ``subscriptions/listen`` stream a message belongs to.
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

#: Seconds between checks, on a quiet listen stream, that its connection is still open.
_LISTEN_POLL = 0.25


class _Listener:
    """One open ``subscriptions/listen`` stream: the filter the server agreed to, and a queue
    of ``(method, params)`` waiting to be sent (None: the server ends the stream)."""

    __slots__ = ("sub_id", "tools", "prompts", "resources", "uris", "queue", "ending")

    def __init__(self, sub_id: Any, agreed: dict[str, Any]) -> None:
        self.sub_id = sub_id
        self.tools = agreed.get("toolsListChanged") is True
        self.prompts = agreed.get("promptsListChanged") is True
        self.resources = agreed.get("resourcesListChanged") is True
        self.uris: frozenset[str] = frozenset(agreed.get("resourceSubscriptions") or ())
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue(maxsize=256)
        #: The server ends this stream (also seen without the queue's None, should it be full).
        self.ending = False

    def push(self, item: tuple[str, dict[str, Any]] | None) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:  # a stalled reader: drop (list changes coalesce anyway)
            log.debug("subscription %r: queue full, %r dropped", self.sub_id, item)

    def wants(self, method: str, params: dict[str, Any]) -> bool:
        if method == "notifications/resources/updated":
            return params.get("uri") in self.uris
        kind = method.split("/")[1]
        return (kind == "tools" and self.tools) or (kind == "prompts" and self.prompts) or (kind == "resources" and self.resources)


# ----------------------------------------------------------------------------- the server


class MCPServer:
    """An MCP server: register tools, resources, prompts and completions, then serve.

    Transport-agnostic: :meth:`serve` / :meth:`create_peer` run one stateful session over any
    message transport; :meth:`handle_stateless` answers one 2026-07-28 request.
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
    ) -> None:
        self.name = name
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
        self.on_roots_changed: Callable[[Session], Awaitable[None] | None] | None = None
        self._sessions: weakref.WeakKeyDictionary[Peer, Session] = weakref.WeakKeyDictionary()
        #: Open ``subscriptions/listen`` streams (2026-07-28), over every transport.
        self._listeners: set[_Listener] = set()
        self._state_key = os.urandom(32)
        self.dispatcher: Dispatcher = _MCPDispatcher(self, limits, log)
        self._register_protocol()

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
    ) -> Callable[[F], F]:
        """Register a tool. The description defaults to the docstring.

        ``input_schema`` replaces the generated schema (arguments then go to the function by
        name, unchecked beyond names). ``structured=False`` turns off ``outputSchema`` /
        ``structuredContent`` for a declared return type. Sync functions run in a thread
        unless ``blocking=False``.
        """

        def register(fn: F) -> F:
            t = Tool(fn, name or fn.__name__, description, title, annotations, input_schema, structured, blocking, meta)
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
    ) -> Callable[[F], F]:
        """Register a resource; a URI with ``{variables}`` registers a template whose variables
        are passed to the function by name."""

        def register(fn: F) -> F:
            r = Resource(fn, uri, name or fn.__name__, description, mime_type, title, blocking)
            (self.templates if r.is_template else self.resources)[uri] = r
            self._changed("resources")
            return fn

        return register

    def prompt(
        self, name: str | None = None, *, description: str | None = None, title: str | None = None, arguments: dict[str, str] | None = None
    ) -> Callable[[F], F]:
        """Register a prompt; ``arguments`` maps parameter names to descriptions."""

        def register(fn: F) -> F:
            p = Prompt(fn, name or fn.__name__, description, title, arguments)
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

    def completion(self) -> Callable[[F], F]:
        """Register the completion handler ``fn(ref, argument, context) -> list[str] | dict``."""

        def register(fn: F) -> F:
            self.completer = fn
            return fn

        return register

    # ------------------------------------------------------------------ notifications

    def sessions(self) -> list[Session]:
        """The live stateful sessions."""
        return [s for p, s in list(self._sessions.items()) if not p.is_closing]

    def _changed(self, kind: str) -> None:
        if not self._sessions and not self._listeners:
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
        self._publish(f"notifications/{kind}/list_changed", {})
        for s in self.sessions():
            if s.profile.era == "handshake" and s.profile.initialize_seen:
                await s.notify(f"notifications/{kind}/list_changed")

    async def resource_updated(self, uri: str) -> None:
        """Send ``notifications/resources/updated`` to the sessions subscribed to ``uri`` (and the
        ``subscriptions/listen`` streams naming it)."""
        self._publish("notifications/resources/updated", {"uri": uri})
        for s in self.sessions():
            if uri in s.subscriptions:
                await s.notify("notifications/resources/updated", {"uri": uri})

    def _publish(self, method: str, params: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            if listener.wants(method, params):
                listener.push((method, params))

    def close_subscriptions(self) -> int:
        """End every open ``subscriptions/listen`` stream gracefully (e.g. at shutdown): each
        gets its final ``resultType: "complete"`` result, then nothing more. Returns how many."""
        n = 0
        for listener in list(self._listeners):
            listener.ending = True
            listener.push(None)
            n += 1
        return n

    # ------------------------------------------------------------------ serving

    def create_peer(self, transport: MessageTransport, *, name: str = "mcp-server", default_timeout: float | None = 60.0) -> Peer:
        """A :class:`~sturdyrpc.peer.Peer` (not started) serving one MCP session on ``transport``.

        The session (version, capabilities, log level, subscriptions) lives as long as the peer.
        Start it with ``async with peer:`` and wait with ``await peer.wait_closed()``.
        """
        profile = MCPProfile(supported=self.supported_versions)
        peer = _SessionPeer(transport, self.dispatcher, profile=profile, default_timeout=default_timeout, name=name)
        session = Session(self, profile, peer)
        peer.mcp_session = session
        self._sessions[peer] = session
        return peer

    def fast_reply(self, frame: bytes, peer: Peer) -> bytes | None:
        """Answer ``frame`` at once if it is a well-formed ``tools/call`` of an inline tool on
        ``peer``'s negotiated session, else None (see :meth:`fast_path`)."""
        return self.fast_path(peer)(frame)

    def fast_path(self, peer: Peer) -> Callable[[bytes], bytes | None]:
        """``answer(frame) -> reply | None`` for ``peer`` (made by :meth:`create_peer`).

        For transports that can answer on the reader's turn (stdio): a well-formed
        ``tools/call`` of an inline tool on the negotiated session is answered at once,
        skipping the peer's queues but not the rules: the same checks run (ids, params, the
        2026-07-28 envelope, a duplicate of an id still running), anything unusual or wrong
        returns None and takes the normal path (which answers it), and the reply is the one
        the normal path would build.
        """
        session: Session | None = getattr(peer, "mcp_session", None)
        d = self.dispatcher
        if session is None or not isinstance(d, _MCPDispatcher) or d.inline_call is None:
            return lambda frame: None
        inline_entry: MethodEntry = d.inline_call
        profile = session.profile
        tools = self.tools
        max_bytes = d.limits.max_message_bytes
        max_depth = d.limits.max_depth
        short = 2 * max_depth  # valid JSON of n bytes nests at most n // 2 deep
        finish = self._finish
        encode = codec.encode
        get_tool = tools.get
        get_rules = RULES.get
        unset = msgspec.UNSET
        #: Per tool: its parameters as ((name, checker), ...) when an object holding exactly
        #: those names binds by position after each checker (what Binder.bind would do), else None.
        plain_binds: dict[Tool, tuple[tuple[str, Callable[[Any], Any] | None], ...] | None] = {}

        def plain_bind(tool: Tool) -> tuple[tuple[str, Callable[[Any], Any] | None], ...] | None:
            b = tool.binder
            if b.has_var_positional or b.has_var_keyword or b.positional_only or b.context_name is not None:
                return None
            spec = tuple(b.positional)
            names = [nm for nm, _ in spec]
            if set(names) != set(b.by_name) or sorted(b.required) != sorted(names):
                return None  # keyword-only or optional parameters: Binder.bind decides
            return spec

        # Read per frame without property calls: the peer's closing flag and its runner's task
        # set (what Peer.is_closing and Peer.incoming_in_flight report); a peer built otherwise
        # gets no fast path (the general path answers everything).
        runner_tasks = getattr(getattr(peer, "_runner", None), "_tasks", None)
        if type(runner_tasks) is not set or type(getattr(peer, "_closing", None)) is not bool or type(peer).is_closing is not Peer.is_closing:
            return lambda frame: None
        raw_encode = msgspec.json.encode
        own_finish = type(self)._finish is MCPServer._finish
        #: Per rules (and server identity): the reply of a wrapped str/int tool result cut around
        #: its holes (text, structured value, id), worked out by the general code and checked.
        templates: dict[Any, tuple[bytes, bytes | None, bytes] | None] = {}

        def make_template(rules: VersionRules, wrap_tool: Tool) -> tuple[bytes, bytes | None, bytes] | None:
            mark, id_mark = "\x00sturdyrpc-hole\x00", "\x00sturdyrpc-id\x00"
            try:
                out = encode({"jsonrpc": "2.0", "result": finish(rules, wrap_tool.result(mark, rules)), "id": id_mark})
                parts = out.split(raw_encode(mark))
                head, rest = parts[0], parts[1:]
                after, end = rest[-1].split(raw_encode(id_mark))
                if end != b"}" or len(rest) not in (1, 2):  # holes: text (and the structured value)
                    return None
                tpl = (head, rest[0] if len(rest) == 2 else None, after)
                for sample in ('a"\u2028b', -12345, 2**70):  # the template must say what the general code says
                    got = fill(tpl, sample, "i\\d")
                    want = encode({"jsonrpc": "2.0", "result": finish(rules, wrap_tool.result(sample, rules)), "id": "i\\d"})
                    if got != want:
                        return None
                return tpl
            except Exception:
                return None

        def fill(tpl: tuple[bytes, bytes | None, bytes], value: Any, id_: Any) -> bytes:
            v = raw_encode(value)
            text = v if type(value) is str else raw_encode(str(value))
            mid = tpl[1]
            if mid is None:
                return b"".join((tpl[0], text, tpl[2], raw_encode(id_), b"}"))
            return b"".join((tpl[0], text, mid, v, tpl[2], raw_encode(id_), b"}"))

        def params_of(p: _FastParams) -> dict[str, Any]:
            """The request's params as the dict path sees them, member for member."""
            params: dict[str, Any] = {"name": p.name}
            if p.arguments is not msgspec.UNSET:
                params["arguments"] = p.arguments
            if p.meta is not msgspec.UNSET:
                params["_meta"] = p.meta
            return params

        def call_of(id_: Any, p: _FastParams) -> Call:
            params = params_of(p)
            return Call(id_, "tools/call", inline_entry, (), params, params)

        def answer(frame: bytes) -> bytes | None:
            era = profile.era
            n = len(frame)
            if era is None or n > short or peer._closing:
                return answer_dict(frame)
            try:
                req = _decode_fast_call(frame)  # the usual shape, typed in C
            except Exception:
                return answer_dict(frame)  # anything else: the dict path sorts it out
            id_ = req.id
            p = req.params
            name = p.name
            tool = get_tool(name)
            if tool is None or not tool.inline:
                return None
            arguments = p.arguments
            if era == "handshake":
                # a handshake-era session takes tools/call once initialized
                version = profile.version
                rules = get_rules(version) if version is not None else None
                if rules is None:
                    return None
            else:
                params = params_of(p)
                if profile.check_request("tools/call", params, id_, False) is not None:
                    return None
                rules = self._rules_of(session, params)
            if arguments is None or arguments is unset:
                arguments = {}
            if runner_tasks and any(type(r) is type(id_) and r == id_ for r in peer.running_ids()):
                return None
            spec = plain_binds.get(tool, _MISSING)
            if spec is _MISSING:
                spec = plain_binds[tool] = plain_bind(tool)
            args: Any = None
            if spec is not None and len(arguments) == len(spec):
                try:
                    if len(spec) == 1:
                        nm, check = spec[0]
                        args = (arguments[nm] if check is None else check(arguments[nm]),)
                    else:
                        args = tuple([arguments[nm] if check is None else check(arguments[nm]) for nm, check in spec])
                except Exception:  # a name missing, a value of the wrong type: Binder.bind says which
                    args = None
            kwargs: Any = None
            if args is None:
                try:
                    args, kwargs = tool.binder.bind(arguments)
                except InvalidParams:
                    return None
            try:
                value = tool.fn(*args) if kwargs is None else tool.fn(*args, **kwargs)
            except RPCError as exc:
                return d.failure(call_of(id_, p), exc)
            except HANDLER_ERRORS as exc:
                result = self._tool_failed(rules, tool.name, exc)
            else:
                t = type(value)
                if (t is str or t is int) and tool.wrap and own_finish and type(tool) is Tool:
                    # the common case: the reply from a template (same bytes as below)
                    key: Any = (rules, self.name, self.version, self.title) if rules.result_type else rules
                    tpl = templates.get(key, _MISSING)
                    if tpl is _MISSING:
                        tpl = templates[key] = make_template(rules, tool)
                    if tpl is not None:
                        try:
                            v = raw_encode(value)
                            mid = tpl[1]
                            if mid is None:
                                return b"".join((tpl[0], v if t is str else raw_encode(str(value)), tpl[2], raw_encode(id_), b"}"))
                            return b"".join((tpl[0], v if t is str else raw_encode(str(value)), mid, v, tpl[2], raw_encode(id_), b"}"))
                        except Exception:
                            pass  # e.g. a lone surrogate: the general code below decides
                try:
                    result = finish(rules, tool.result(value, rules))
                except RPCError as exc:
                    return d.failure(call_of(id_, p), exc)
                except HANDLER_ERRORS as exc:
                    result = self._tool_failed(rules, tool.name, exc)
            try:
                return encode({"jsonrpc": "2.0", "result": result, "id": id_})
            except Exception:  # NaN, unencodable: the dispatcher's careful way
                return d.result(call_of(id_, p), result)

        def answer_dict(frame: bytes) -> bytes | None:
            era = profile.era
            n = len(frame)
            if era is None or n > max_bytes or peer.is_closing:
                return None
            try:
                obj = _raw_decode(frame) if n <= short else codec.decode_bounded(frame, max_depth)
            except Exception:
                return None
            if type(obj) is not dict or obj.get("method") != "tools/call" or obj.get("jsonrpc") != "2.0":
                return None
            id_ = obj.get("id")
            params = obj.get("params")
            if not (type(id_) is int or type(id_) is str) or type(params) is not dict:
                return None
            name = params.get("name")
            tool = tools.get(name) if type(name) is str else None
            if tool is None or not tool.inline or "requestState" in params or "inputResponses" in params:
                return None
            if era == "handshake":
                # a handshake-era session takes tools/call once initialized
                rules = RULES.get(profile.version) if profile.version is not None else None
                if rules is None:
                    return None
            else:
                if profile.check_request("tools/call", params, id_, False) is not None:
                    return None
                rules = self._rules_of(session, params)
            arguments = params.get("arguments")
            if arguments is None:
                arguments = {}
            elif type(arguments) is not dict:
                return None
            if peer.incoming_in_flight and any(type(r) is type(id_) and r == id_ for r in peer.running_ids()):
                return None
            try:
                args, kwargs = tool.binder.bind(arguments)
            except InvalidParams:
                return None
            try:
                value = tool.fn(*args, **kwargs)
                result = finish(rules, tool.result(value, rules))
            except RPCError as exc:
                return d.failure(Call(id_, "tools/call", inline_entry, (), params, params), exc)
            except HANDLER_ERRORS as exc:
                result = self._tool_failed(rules, tool.name, exc)
            try:
                return encode({"jsonrpc": "2.0", "result": result, "id": id_})
            except Exception:  # NaN, unencodable: the dispatcher's careful way
                return d.result(Call(id_, "tools/call", inline_entry, (), params, params), result)

        return answer

    async def serve(self, transport: MessageTransport, *, name: str = "mcp-server") -> None:
        """Serve one session on ``transport`` until the other side closes it."""
        peer = self.create_peer(transport, name=name)
        async with peer:
            await peer.wait_closed()

    async def handle_stateless(self, body: bytes, send_related: Callable[[bytes], Awaitable[None]]) -> bytes | None:
        """Serve one 2026-07-28 message (``body``: its JSON bytes); return the reply bytes.

        Progress and log notifications of the request are passed, encoded, to
        ``send_related`` before the reply is returned. Returns None for a notification.
        Errors in the message itself (bad JSON, missing ``_meta`` fields, unsupported
        version) come back as error replies; the caller picks the HTTP status. Cancel by
        cancelling the task that awaits this coroutine (nothing is returned then).
        """
        profile = MCPProfile(stateless=True, supported=self.supported_versions)
        todo = self.dispatcher.receive(body, None, profile)
        if todo is None or isinstance(todo, bytes):
            return todo
        if not isinstance(todo, Call):
            return self.dispatcher.error_reply(InvalidRequest("Invalid Request", {"reason": "batches are not supported"}), omit_id=True)
        call = todo
        session = Session(self, profile)
        ctx = _StatelessContext(call, session, send_related)
        token = _SESSION.set(session)
        try:
            value = call.invoke(ctx)
            if inspect.isawaitable(value):
                value = await value
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self.dispatcher.failure(call, exc)
        finally:
            ctx.done = True
            _SESSION.reset(token)
        return self.dispatcher.result(call, value)

    # ------------------------------------------------------------------ protocol handlers

    def _register_protocol(self) -> None:
        d = self.dispatcher

        def add(fn: Callable[..., Any], name: str) -> MethodEntry:
            # Handlers that never wait are sync and non-blocking: the runner runs them inline.
            return d.add_method(fn, name, blocking=False)

        add(self._initialize, "initialize")
        add(self._ping, "ping")
        add(self._discover, "server/discover")
        add(self._tools_list, "tools/list")
        inline = add(self._tools_call_inline, "tools/call")
        add(self._resources_list, "resources/list")
        add(self._templates_list, "resources/templates/list")
        add(self._resources_read, "resources/read")
        add(self._subscribe, "resources/subscribe")
        add(self._unsubscribe, "resources/unsubscribe")
        add(self._prompts_list, "prompts/list")
        add(self._prompts_get, "prompts/get")
        add(self._complete, "completion/complete")
        add(self._set_level, "logging/setLevel")
        add(self._listen, "subscriptions/listen")
        add(self._on_initialized, "notifications/initialized")
        add(self._on_cancelled, "notifications/cancelled")
        add(self._on_roots_changed, "notifications/roots/list_changed")
        if isinstance(d, _MCPDispatcher):
            d.inline_call = inline
            d.async_call = MethodEntry("tools/call", self._tools_call, None)

    def _current(self) -> Session:
        s = _SESSION.get()
        if s is None:
            raise InvalidRequest("Invalid Request", {"reason": "no MCP session for this request"})
        return s

    def _rules_of(self, session: Session, params: dict[str, Any]) -> VersionRules:
        if session.profile.era == "modern":
            meta = params.get("_meta")
            v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
            if isinstance(v, str) and v in RULES:
                return RULES[v]
        return session.rules

    def _session(self, ctx: Context) -> Session:
        s = _SESSION.get()
        if s is not None:
            return s
        if isinstance(ctx, _StatelessContext):
            return ctx.session
        if isinstance(ctx, PeerContext):
            s = self._sessions.get(ctx.peer)
            if s is not None:
                return s
            prof = ctx.peer.profile
            if isinstance(prof, MCPProfile):  # a peer built elsewhere around our dispatcher
                s = Session(self, prof, ctx.peer)
                self._sessions[ctx.peer] = s
                return s
        raise InvalidRequest("Invalid Request", {"reason": "no MCP session for this request"})

    def _request_rules(self, session: Session, ctx: Context) -> VersionRules:
        if session.profile.era == "modern":
            v = ctx.meta.get(META_PROTOCOL_VERSION)
            if isinstance(v, str) and v in RULES:
                return RULES[v]
        return session.rules

    def server_info(self, rules: VersionRules) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title and rules.structured_output:
            info["title"] = self.title
        return info

    def capabilities(self, rules: VersionRules) -> dict[str, Any]:
        """The server capabilities advertised under ``rules``."""
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
        return caps

    def _finish(self, rules: VersionRules, result: dict[str, Any], cacheable: bool = False) -> dict[str, Any]:
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

    @staticmethod
    def _no_cursor(params: dict[str, Any]) -> None:
        if "cursor" in params and params["cursor"] is not None:
            raise InvalidParams("Invalid params: unknown cursor", {"param": "cursor"})

    def _initialize(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = session.rules
        result: dict[str, Any] = {
            "protocolVersion": rules.version,
            "capabilities": self.capabilities(rules),
            "serverInfo": self.server_info(rules),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _ping(self, **params: Any) -> dict[str, Any]:
        return {}

    def _discover(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = self._rules_of(session, params)
        result: dict[str, Any] = {
            "supportedVersions": list(reversed(self.supported_versions)),
            "capabilities": self.capabilities(rules),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return self._finish(rules, result, True)

    def _tools_list(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = self._rules_of(session, params)
        self._no_cursor(params)
        return self._finish(rules, {"tools": [t.describe(rules) for t in self.tools.values()]}, True)

    def _prepare_tool(
        self, session: Session, params: dict[str, Any]
    ) -> tuple[VersionRules, Tool, tuple[Any, ...], dict[str, Any]] | dict[str, Any]:
        """Check a ``tools/call``: (rules, tool, args, kwargs), or the finished result of a
        validation failure (a tool error from 2025-11-25 on)."""
        rules = self._rules_of(session, params)
        name = params.get("name")
        if type(name) is not str:
            raise InvalidParams("Invalid params: 'name' must be a string", {"param": "name"})
        tool = self.tools.get(name)
        if tool is None:
            raise InvalidParams(f"Unknown tool: {name}", {"tool": name})
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if type(arguments) is not dict:
            raise InvalidParams("Invalid params: 'arguments' must be an object", {"param": "arguments"})
        self._check_state(params, "tools/call", name)
        try:
            args, kwargs = tool.binder.bind(arguments)  # checked before the tool runs
        except InvalidParams as exc:
            if rules.validation_as_tool_error:  # SEP-1303 (2025-11-25+): the model sees what to fix
                return self._finish(rules, {"content": [text_content(exc.message)], "isError": True})
            raise
        return rules, tool, args, kwargs

    def _tool_failed(self, rules: VersionRules, name: str, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, ToolError):
            return self._finish(rules, {"content": [text_content(exc.message)], "isError": True})
        incident = os.urandom(4).hex()
        log.error("incident %s: tool %r raised", incident, name, exc_info=exc)
        text = f"The tool failed with an internal error (incident {incident})."
        return self._finish(rules, {"content": [text_content(text)], "isError": True})

    def _tools_call_inline(self, **params: Any) -> dict[str, Any]:
        """``tools/call`` of a tool that runs inline (sync, non-blocking, no context)."""
        prepared = self._prepare_tool(self._current(), params)
        if isinstance(prepared, dict):
            return prepared
        rules, tool, args, kwargs = prepared
        try:
            value = tool.fn(*args, **kwargs)
            result = tool.result(value, rules)
        except RPCError:
            raise
        except HANDLER_ERRORS as exc:
            return self._tool_failed(rules, tool.name, exc)
        return self._finish(rules, result)

    async def _tools_call(self, ctx: Context, **params: Any) -> dict[str, Any]:
        """``tools/call`` of any tool, in a task of its own."""
        session = self._session(ctx)
        prepared = self._prepare_tool(session, params)
        if isinstance(prepared, dict):
            return prepared
        rules, tool, args, kwargs = prepared
        mctx = MCPContext(session, ctx)
        try:
            value = await tool.run(args, kwargs, mctx)
            result = tool.result(value, rules)
        except _InputRequired as need:
            return self._input_required(rules, need, "tools/call", tool.name)
        except RPCError:
            raise
        except HANDLER_ERRORS as exc:
            return self._tool_failed(rules, tool.name, exc)
        finally:
            mctx._done = True
        return self._finish(rules, result)

    # -- multi round-trip requests (2026-07-28)

    def _sign(self, method: str, name: str) -> str:
        import hashlib  # imported here: only 2026-07-28 input requests need them (start-up time)
        import hmac

        nonce = os.urandom(8).hex()
        payload = f"{method}\n{name}\n{nonce}"
        mac = hmac.new(self._state_key, payload.encode(), hashlib.sha256).hexdigest()[:32]
        return base64.urlsafe_b64encode(f"{payload}\n{mac}".encode()).decode().rstrip("=")

    def _check_state(self, params: dict[str, Any], method: str, name: str) -> None:
        state = params.get("requestState")
        if state is None:
            return
        try:
            raw = base64.urlsafe_b64decode(state + "=" * (-len(state) % 4)).decode()
            m, n, nonce, mac = raw.split("\n")
        except Exception:
            raise InvalidParams("Invalid params: invalid requestState", {"param": "requestState"}) from None
        import hashlib
        import hmac

        good = hmac.new(self._state_key, f"{m}\n{n}\n{nonce}".encode(), hashlib.sha256).hexdigest()[:32]
        if not hmac.compare_digest(good, mac) or m != method or n != name:
            raise InvalidParams("Invalid params: invalid requestState", {"param": "requestState"})

    def _input_required(self, rules: VersionRules, need: _InputRequired, method: str, name: str) -> dict[str, Any]:
        if not rules.stateless:  # cannot happen: only modern requests ask for input this way
            return {"content": [text_content("Input required")], "isError": True}
        return self._finish(
            rules, {"resultType": "input_required", "inputRequests": need.requests, "requestState": self._sign(method, name)}
        )

    # -- resources

    def _resources_list(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = self._rules_of(session, params)
        self._no_cursor(params)
        return self._finish(rules, {"resources": [r.describe(rules) for r in self.resources.values()]}, True)

    def _templates_list(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = self._rules_of(session, params)
        self._no_cursor(params)
        return self._finish(rules, {"resourceTemplates": [r.describe(rules) for r in self.templates.values()]}, True)

    def _find_resource(self, uri: str) -> tuple[Resource, dict[str, str]] | None:
        r = self.resources.get(uri)
        if r is not None:
            return r, {}
        for t in self.templates.values():
            m = t.match(uri)
            if m is not None:
                return t, m
        return None

    async def _resources_read(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self._session(ctx)
        rules = self._request_rules(session, ctx)
        uri = params.get("uri")
        if type(uri) is not str:
            raise InvalidParams("Invalid params: 'uri' must be a string", {"param": "uri"})
        found = self._find_resource(uri)
        if found is None:
            raise RPCError("Resource not found", {"uri": uri}, code=rules.resource_not_found)
        res, variables = found
        self._check_state(params, "resources/read", uri)
        mctx = MCPContext(session, ctx)
        try:
            value = await res.call(variables, mctx)
        except _InputRequired as need:
            return self._input_required(rules, need, "resources/read", uri)
        except (RPCError, ToolError) as exc:
            if isinstance(exc, ToolError):
                raise InvalidParams(exc.message) from None
            raise
        finally:
            mctx._done = True
        return self._finish(rules, {"contents": res.contents(uri, value)}, True)

    def _subscribe(self, **params: Any) -> dict[str, Any]:
        session, uri = self._subscription_target(params)
        session.subscriptions.add(uri)
        return {}

    def _unsubscribe(self, **params: Any) -> dict[str, Any]:
        session, uri = self._subscription_target(params)
        session.subscriptions.discard(uri)
        return {}

    def _subscription_target(self, params: dict[str, Any]) -> tuple[Session, str]:
        """The session and URI of a resources/(un)subscribe request, after the version's checks."""
        session = self._current()
        if self._rules_of(session, params).stateless:
            raise MethodNotFound("Method not found")  # 2026-07-28: subscriptions/listen instead
        uri = params.get("uri")
        if type(uri) is not str:
            raise InvalidParams("Invalid params: 'uri' must be a string", {"param": "uri"})
        return session, uri

    # -- prompts

    def _prompts_list(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        rules = self._rules_of(session, params)
        self._no_cursor(params)
        return self._finish(rules, {"prompts": [p.describe(rules) for p in self.prompts.values()]}, True)

    async def _prompts_get(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self._session(ctx)
        rules = self._request_rules(session, ctx)
        name = params.get("name")
        if type(name) is not str:
            raise InvalidParams("Invalid params: 'name' must be a string", {"param": "name"})
        prompt = self.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}", {"prompt": name})
        arguments = params.get("arguments") or {}
        if type(arguments) is not dict:
            raise InvalidParams("Invalid params: 'arguments' must be an object", {"param": "arguments"})
        self._check_state(params, "prompts/get", name)
        mctx = MCPContext(session, ctx)
        try:
            value = await prompt.call(arguments, mctx)
        except _InputRequired as need:
            return self._input_required(rules, need, "prompts/get", name)
        except ToolError as exc:
            raise InvalidParams(exc.message) from None
        finally:
            mctx._done = True
        return self._finish(rules, Prompt.result(value, prompt.description))

    # -- completion, logging, notifications

    async def _complete(self, ctx: Context, **params: Any) -> dict[str, Any]:
        session = self._session(ctx)
        rules = self._request_rules(session, ctx)
        ref = params.get("ref")
        argument = params.get("argument")
        if type(ref) is not dict or type(argument) is not dict:
            raise InvalidParams("Invalid params: 'ref' and 'argument' must be objects")
        if type(argument.get("name")) is not str or type(argument.get("value")) is not str:
            raise InvalidParams("Invalid params: 'argument' needs a string 'name' and 'value'", {"param": "argument"})
        kind = ref.get("type")
        if kind == "ref/prompt":
            if ref.get("name") not in self.prompts:  # the spec's "invalid prompt name": -32602
                raise InvalidParams(f"Unknown prompt: {ref.get('name')}", {"prompt": ref.get("name")})
        elif kind == "ref/resource":
            uri = ref.get("uri")
            if not isinstance(uri, str) or (uri not in self.templates and self._find_resource(uri) is None):
                raise InvalidParams(f"Unknown resource: {uri}", {"uri": uri})
        else:
            raise InvalidParams("Invalid params: 'ref.type' must be 'ref/prompt' or 'ref/resource'", {"param": "ref"})
        values: Any = []
        if self.completer is not None:
            values = self.completer(ref, argument, params.get("context"))
            if inspect.isawaitable(values):
                values = await values
        if type(values) is dict:
            completion = dict(values)
        else:
            vals = [str(v) for v in values]
            completion = {"values": vals[:100], "total": len(vals), "hasMore": len(vals) > 100}
        return self._finish(rules, {"completion": completion})

    def _set_level(self, **params: Any) -> dict[str, Any]:
        session = self._current()
        if not self._rules_of(session, params).set_level:
            raise MethodNotFound("Method not found")  # 2026-07-28: the per-request _meta log level replaces it
        level = params.get("level")
        if level not in _LEVEL_RANK:
            raise InvalidParams("Invalid params: unknown log level", {"param": "level"})
        session.log_level = level
        return {}

    # -- subscriptions/listen (2026-07-28)

    def _agree(self, wanted: dict[str, Any]) -> dict[str, Any]:
        """The part of a listen filter this server honours (unsupported types are left out)."""
        for key in ("toolsListChanged", "promptsListChanged", "resourcesListChanged"):
            if key in wanted and type(wanted[key]) is not bool:
                raise InvalidParams(f"Invalid params: 'notifications.{key}' must be a boolean", {"param": f"notifications.{key}"})
        uris = wanted.get("resourceSubscriptions")
        if uris is not None and (type(uris) is not list or not all(type(u) is str for u in uris)):
            raise InvalidParams("Invalid params: 'notifications.resourceSubscriptions' must be a list of strings", {"param": "notifications.resourceSubscriptions"})
        has_resources = bool(self.resources or self.templates)
        agreed: dict[str, Any] = {}
        if wanted.get("toolsListChanged") is True:
            agreed["toolsListChanged"] = True
        if wanted.get("promptsListChanged") is True and self.prompts:
            agreed["promptsListChanged"] = True
        if wanted.get("resourcesListChanged") is True and has_resources:
            agreed["resourcesListChanged"] = True
        if uris and has_resources:
            agreed["resourceSubscriptions"] = list(dict.fromkeys(uris))
        return agreed

    async def _listen(self, ctx: Context, **params: Any) -> dict[str, Any]:
        """``subscriptions/listen``: acknowledge, then forward the agreed notifications (each with
        the subscription id in ``_meta``) until the client cancels (no reply then) or the server
        ends the stream (:meth:`close_subscriptions`, or its connection closing): then the final
        ``resultType: "complete"`` result, and nothing after it."""
        session = self._session(ctx)
        rules = self._request_rules(session, ctx)
        if not rules.stateless:
            raise MethodNotFound("Method not found")  # handshake era: resources/subscribe, list_changed, GET stream
        wanted = params.get("notifications")
        if type(wanted) is not dict:
            raise InvalidParams("Invalid params: 'notifications' must be an object", {"param": "notifications"})
        agreed = self._agree(wanted)
        notify: Callable[[str, Any], Awaitable[None]] = getattr(ctx, "notify")  # noqa: B009  # PeerContext, _StatelessContext
        sub_id = ctx.id
        listener = _Listener(sub_id, agreed)
        peer = session.peer
        self._listeners.add(listener)  # before the acknowledgement: nothing after it is missed
        try:
            await notify("notifications/subscriptions/acknowledged", {"_meta": {META_SUBSCRIPTION_ID: sub_id}, "notifications": agreed})
            while not listener.ending:
                try:
                    item = await asyncio.wait_for(listener.queue.get(), _LISTEN_POLL)
                except TimeoutError:
                    if peer is not None and peer.is_closing:
                        break  # the connection is ending: end the stream gracefully
                    continue
                if item is None:
                    break
                method, p = item
                await notify(method, {**p, "_meta": {META_SUBSCRIPTION_ID: sub_id}})
        finally:
            self._listeners.discard(listener)
        return self._finish(rules, {"_meta": {META_SUBSCRIPTION_ID: sub_id}})

    def _on_initialized(self, **params: Any) -> None:
        return None

    def _on_cancelled(self, **params: Any) -> None:
        return None  # the peer acts on cancellations before dispatch; late or unknown ones end here

    async def _on_roots_changed(self, ctx: Context, **params: Any) -> None:
        cb = self.on_roots_changed
        if cb is not None:
            res = cb(self._session(ctx))
            if inspect.isawaitable(res):
                await res
