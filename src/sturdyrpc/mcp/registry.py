"""The registry's records: tools, resources (and templates) and prompts on plain typed functions.

Each record compiles its function once, at registration: a binder that checks arguments
before the function runs (the context parameter left out), the JSON Schemas from the type
hints, and how the function's return value becomes the protocol's result under each
version's rules. Running the function is :meth:`HandlerFunction.run`, through the executor.
"""

from __future__ import annotations

import base64
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any

import msgspec

from .. import codec
from ..execute import Outcome, call_now, execute
from ..params import Binder, compile_binder
from .content import ToolResult, is_content, older_block, text_content, to_content
from .context import MCPContext
from .schema import DIALECT, input_schema, output_schema, wraps_output
from .versions import VersionRules

__all__ = ["HandlerFunction", "Tool", "Resource", "Prompt", "find_resource", "is_context_hint", "TEMPLATE_WRAPPED", "TEMPLATE_TEXT"]

#: Template kinds of :attr:`Tool.template_kind`.
TEMPLATE_WRAPPED = "wrapped"
TEMPLATE_TEXT = "text"


def is_context_hint(hint: Any) -> bool:
    """Whether a parameter annotated ``hint`` receives the context: ``MCPContext`` (or a subclass), also as ``MCPContext | None``."""
    if isinstance(hint, type):
        return issubclass(hint, MCPContext)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(is_context_hint(a) for a in typing.get_args(hint) if a is not type(None))
    return False


def _hints_of(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _compile(fn: Callable[..., Any], hints: dict[str, Any]) -> tuple[Binder, str | None]:
    """The binder of ``fn`` without its context parameter, and that parameter's name."""
    sig = inspect.signature(fn)
    ctx_name = next((p.name for p in sig.parameters.values() if is_context_hint(hints.get(p.name, p.annotation))), None)
    if ctx_name is None:
        return compile_binder(fn), None

    def shim() -> None:
        return None

    shim.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != ctx_name])  # type: ignore[attr-defined]
    shim.__annotations__ = {k: v for k, v in hints.items() if k != ctx_name}
    return compile_binder(shim), ctx_name


def _by_position(b: Binder) -> tuple[tuple[str, Callable[[Any], Any] | None], ...] | None:
    """The parameters as ``((name, check), ...)`` when an object holding exactly those names may
    be passed by position (all required, positional-or-keyword, no ``*args``/``**kwargs``)."""
    if b.has_var_positional or b.has_var_keyword or b.positional_only or b.context_name is not None:
        return None
    spec = tuple(b.positional)
    names = [nm for nm, _ in spec]
    if not spec or set(names) != set(b.by_name) or sorted(b.required) != sorted(names):
        return None
    return spec


class HandlerFunction:
    """A user function with its binder: how to call it with checked arguments and a context.

    Every call goes through :mod:`sturdyrpc.execute` (async on the loop, blocking sync on the
    process's bounded daemon pool, the rest inline), so the error policy and ``max_threads``
    are the same as for every other handler.
    """

    def __init__(self, fn: Callable[..., Any], blocking: bool | None) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.blocking = (not self.is_async) if blocking is None else (blocking and not self.is_async)
        self.hints = _hints_of(fn)
        self.binder, self.ctx_name = _compile(fn, self.hints)
        #: ``bind(arguments) -> (args, kwargs)``: checks ``arguments`` against the signature
        #: (``InvalidParams`` naming the parameter) before the function runs.
        self.bind = self.binder.bind
        #: Set when an object holding exactly the parameters may be passed by position, each
        #: value checked as ``bind`` would check it (never with a context parameter: it may
        #: come first in the signature): ``((name, check), ...)``.
        self.by_position = _by_position(self.binder) if self.ctx_name is None else None
        #: Runs on the event loop without a task of its own (sync, ``blocking=False``, no context).
        self.inline = not self.is_async and not self.blocking and self.ctx_name is None

    async def run(self, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: MCPContext, pool: Executor) -> Outcome:
        """Run the function (its context parameter set to ``ctx``) and return its outcome."""
        if self.ctx_name is not None:
            kwargs[self.ctx_name] = ctx
        return await execute(self.fn, args, kwargs, is_async=self.is_async, blocking=self.blocking, pool=pool)

    def run_now(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
        """Run an :attr:`inline` function right here and return its outcome."""
        return call_now(self.fn, args, kwargs)


class Tool(HandlerFunction):
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
        scopes: Iterable[str] | None = None,
    ) -> None:
        super().__init__(fn, blocking)
        #: OAuth scopes a principal needs to see and call this tool (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
        self.name = name
        self.description = description if description is not None else inspect.getdoc(fn)
        self.title = title
        self.annotations = annotations
        self.meta = meta
        self.explicit_schema = schema is not None
        self.input_schema = schema if schema is not None else {"$schema": DIALECT, **input_schema(fn, is_context_hint, self.hints)}
        ret = self.hints.get("return", inspect.Parameter.empty)
        declared = ret is not inspect.Parameter.empty and ret is not None and ret is not type(None) and ret is not Any and ret is not ToolResult
        if structured is None:
            structured = declared
        self.output_schema: dict[str, Any] | None = None
        self.wrap = False
        if structured and declared:
            self.output_schema = output_schema(ret)
            self.wrap = wraps_output(ret)
        #: Which cached reply template renders this tool's common results (see ``tools_call``):
        #: wrapped str/int values, or plain text without an output schema; None: none.
        self.template_kind: str | None = None
        if type(self) is Tool:  # a subclass may render its results otherwise
            if self.wrap:
                self.template_kind = TEMPLATE_WRAPPED
            elif self.output_schema is None:
                self.template_kind = TEMPLATE_TEXT

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
            d = {"content": to_content(value), "isError": False}
        if not rules.structured_output:
            d.pop("structuredContent", None)
        if not rules.structured_output and type(d.get("content")) is list:
            d["content"] = [older_block(b, rules) for b in d["content"]]
        return d


class Resource(HandlerFunction):
    """A registered resource (fixed URI) or resource template (URI with ``{variables}``)."""

    def __init__(
        self, fn: Callable[..., Any], uri: str, name: str, description: str | None, mime_type: str | None, title: str | None, blocking: bool | None,
        scopes: Iterable[str] | None = None,
    ) -> None:
        super().__init__(fn, blocking)
        #: OAuth scopes a principal needs to see and read this resource (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
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


class Prompt(HandlerFunction):
    """A registered prompt; its arguments come from the function's parameters."""

    def __init__(self, fn: Callable[..., Any], name: str, description: str | None, title: str | None, arg_descriptions: dict[str, str] | None,
                 scopes: Iterable[str] | None = None) -> None:
        super().__init__(fn, None)
        #: OAuth scopes a principal needs to see and get this prompt (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
        self.name = name
        self.description = description if description is not None else inspect.getdoc(fn)
        self.title = title
        hints = self.hints
        self.arguments: list[dict[str, Any]] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or is_context_hint(hints.get(p.name)):
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
            messages = [m if type(m) is dict and "role" in m else {"role": "user", "content": m if is_content(m) else text_content(str(m))} for m in value]
        else:
            messages = [{"role": "user", "content": text_content(codec.encode(msgspec.to_builtins(value)).decode())}]
        out: dict[str, Any] = {"messages": messages}
        if description:
            out["description"] = description
        return out


def find_resource(resources: dict[str, Resource], templates: dict[str, Resource], uri: str) -> tuple[Resource, dict[str, str]] | None:
    """The resource serving ``uri`` and its template variables, or None."""
    r = resources.get(uri)
    if r is not None:
        return r, {}
    for t in templates.values():
        m = t.match(uri)
        if m is not None:
            return t, m
    return None
