"""The registry's records: tools, resources (and templates) and prompts on plain typed functions.

Each record compiles its function once, at registration: a binder that checks arguments
before the function runs (the context parameter left out), the JSON Schemas from the type
hints, and how the function's return value becomes the protocol's result under each
version's rules. Running the function is :meth:`HandlerFunction.run`, through the executor.
"""

from __future__ import annotations

import base64
import copy
import inspect
import itertools
import types
import typing
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, Self

from .. import codec, pydantic_bridge
from ..dispatch import Context
from ..errors import InvalidParams
from ..execute import Outcome, call_now, execute
from ..params import Binder, Mismatch, compile_binder, value_checker
from .content import Message, PromptResult, ToolResult, older_block, text_content, to_content
from .context import MCPContext
from .docstrings import describe_function
from .param_headers import param_headers
from .schema import DIALECT, inline_refs, input_schema, output_schema, wraps_output
from .uri_template import UriTemplate
from .versions import VersionRules

__all__ = [
    "HandlerFunction",
    "Tool",
    "Resource",
    "Prompt",
    "find_resource",
    "is_context_hint",
    "check_icons",
    "OutputMismatch",
    "TEMPLATE_WRAPPED",
    "TEMPLATE_TEXT",
    "UriTemplate",
]


#: Template kinds of :attr:`Tool.template_kind`.
TEMPLATE_WRAPPED = "wrapped"
TEMPLATE_TEXT = "text"

#: Registration order of every record, process-wide (a cursor names a position in it).
_SEQ = itertools.count(1)

_ICON_THEMES = ("light", "dark")


def check_icons(icons: Any) -> list[dict[str, Any]] | None:
    """``icons`` as the protocol's ``Icon`` objects (``src``; optional ``mimeType``, ``sizes``,
    ``theme``), checked once at registration: a ``TypeError``/``ValueError`` says what is wrong."""
    if icons is None:
        return None
    if isinstance(icons, (str, bytes)) or not isinstance(icons, (list, tuple)):
        raise TypeError("icons must be a list of objects like {'src': 'https://example.com/icon.png'}")
    out: list[dict[str, Any]] = []
    for icon in icons:
        d = dict(icon) if isinstance(icon, dict) else pydantic_bridge.to_builtins(icon)
        if type(d) is not dict:
            raise TypeError("each icon must be an object with 'src'")
        d = {k: v for k, v in d.items() if v is not None}
        unknown = set(d) - {"src", "mimeType", "sizes", "theme"}
        if unknown:
            raise ValueError(f"unknown icon fields: {', '.join(sorted(unknown))} (allowed: src, mimeType, sizes, theme)")
        if type(d.get("src")) is not str or not d["src"]:
            raise ValueError("an icon needs 'src': an https URL or a data: URI")
        if "mimeType" in d and type(d["mimeType"]) is not str:
            raise ValueError("an icon's 'mimeType' must be a string")
        if "sizes" in d and (type(d["sizes"]) is not list or not all(type(x) is str for x in d["sizes"])):
            raise ValueError("an icon's 'sizes' must be a list of strings like '48x48' or 'any'")
        if "theme" in d and d["theme"] not in _ICON_THEMES:
            raise ValueError("an icon's 'theme' must be 'light' or 'dark'")
        out.append(d)
    return out


def _tags(tags: Iterable[str] | None) -> frozenset[str]:
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags or ()):
        raise TypeError(f"tags must be a collection of strings, e.g. {{'admin'}}, got {tags!r}")
    return frozenset(tags or ())


class OutputMismatch(Exception):
    """A tool returned a value that its declared output type does not admit (the author's bug:
    the client sees an ``isError`` result naming an incident id; the log says what)."""


def _output_check(ret: Any, name: str) -> Callable[[Any], Any]:
    """``check(value) -> JSON value`` for a tool declared to return ``ret``: the value as it
    goes out, after checking it against the declared type (the one the output schema says)."""
    if pydantic_bridge.is_pydantic(ret):
        adapter = pydantic_bridge.adapter(ret)

        def check_pydantic(value: Any) -> Any:
            try:
                return adapter.dump_python(adapter.validate_python(value), mode="json", by_alias=True)
            except ValueError as exc:
                raise OutputMismatch(f"tool {name!r} returned a value its output type does not admit: {pydantic_bridge.error_text(exc)}") from None

        return check_pydantic
    check = value_checker(ret)
    to_builtins = pydantic_bridge.to_builtins

    def check_value(value: Any) -> Any:
        data = to_builtins(value)
        if check is not None:
            try:
                check(data)
            except Mismatch as m:
                raise OutputMismatch(f"tool {name!r} returned {type(value).__name__}, and its output type says it {m}") from None
        return data

    return check_value


def is_context_hint(hint: Any) -> bool:
    """Whether a parameter annotated ``hint`` receives the context: ``MCPContext`` (or a subclass)
    or :class:`sturdyrpc.Context` (which ``MCPContext`` is), also as ``MCPContext | None``."""
    if isinstance(hint, type):
        return hint is Context or issubclass(hint, MCPContext)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(is_context_hint(a) for a in typing.get_args(hint) if a is not type(None))
    if origin is typing.Annotated:
        return is_context_hint(typing.get_args(hint)[0])
    return False


def _hints_of(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)  # Annotated constraints and descriptions kept
    except Exception:
        return {}


def _compile(fn: Callable[..., Any], hints: dict[str, Any], coerce_json_strings: bool = False) -> tuple[Binder, str | None]:
    """The binder of ``fn`` without its context parameter, and that parameter's name."""
    sig = inspect.signature(fn)
    ctx_name = next((p.name for p in sig.parameters.values() if is_context_hint(hints.get(p.name, p.annotation))), None)
    if ctx_name is None:
        return compile_binder(fn, coerce_json_strings=coerce_json_strings), None

    def shim() -> None:
        return None

    shim.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != ctx_name])  # type: ignore[attr-defined]
    shim.__annotations__ = {k: v for k, v in hints.items() if k != ctx_name}
    return compile_binder(shim, coerce_json_strings=coerce_json_strings, by_position=False), ctx_name


def _from_text(name: str, text: str, check: Callable[[Any], Any], what: str) -> Any:
    """``text`` as the value ``check`` admits: itself, or its JSON reading (see ``bind_text``)."""
    try:
        check(text)
        return text
    except Mismatch as m:
        first = m
    except ValueError:  # a pydantic check's complaint: the binder says it again, in full
        return text
    decoded: Any = _NOT_JSON
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        decoded = lowered == "true"
    else:
        try:
            decoded = codec.decode(text.encode())
        except Exception:
            pass
    if decoded is not _NOT_JSON:
        try:
            check(decoded)
            return decoded
        except ValueError:
            pass
    reason = first.reason or f"must be {first.expected}"
    raise InvalidParams(f"Invalid params: {what} {name!r} {reason}, got {text!r}", {"param": name})


_NOT_JSON = object()


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

    #: What the protocol calls it (a tool's or prompt's name, a resource's name).
    name: str
    #: Its tags (``tags=``), which visibility rules name (:mod:`.visibility`).
    tags: frozenset[str] = frozenset()

    def __init__(self, fn: Callable[..., Any], blocking: bool | None, coerce_json_strings: bool = False) -> None:
        self.fn = fn
        #: Registration order (see :mod:`.pages`): what a list cursor points after.
        self.seq = next(_SEQ)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.blocking = (not self.is_async) if blocking is None else (blocking and not self.is_async)
        self.hints = _hints_of(fn)
        self.binder, self.ctx_name = _compile(fn, self.hints, coerce_json_strings)
        #: ``bind(arguments) -> (args, kwargs)``: checks ``arguments`` against the signature
        #: (``InvalidParams`` naming the parameter) before the function runs.
        self.bind = self.binder.bind
        #: Set when an object holding exactly the parameters may be passed by position, each
        #: value checked as ``bind`` would check it (never with a context parameter: it may
        #: come first in the signature): ``((name, check), ...)``.
        self.by_position = _by_position(self.binder) if self.ctx_name is None else None
        #: The one parameter of a function taking one (:attr:`by_position` of length 1), as
        #: ``(name, type)``: ``type`` is set when the check is ``type(value) is type`` (``str``,
        #: ``int``, ``bool``), which the caller tests without calling the check.
        self.one_param: tuple[str, type | None] | None = None
        if self.by_position is not None and len(self.by_position) == 1:
            nm, chk = self.by_position[0]
            hint = self.hints.get(nm)
            # a default (a pydantic Field's) makes the check another one: no shortcut then
            plain = chk is not None and inspect.signature(fn).parameters[nm].default is inspect.Parameter.empty
            exact = next((t for t in (str, int, bool) if hint is t), None) if plain else None
            self.one_param = (nm, exact)
        #: Runs on the event loop without a task of its own (sync, ``blocking=False``, no context).
        self.inline = not self.is_async and not self.blocking and self.ctx_name is None

    async def run(self, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: MCPContext, pool: Executor) -> Outcome:
        """Run the function (its context parameter set to ``ctx``) and return its outcome."""
        if self.ctx_name is not None:
            kwargs[self.ctx_name] = ctx
        return await execute(self.fn, args, kwargs, is_async=self.is_async, blocking=self.blocking, pool=pool)

    def bind_text(self, values: dict[str, Any], what: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Bind ``values`` that arrive as text (URI variables, prompt arguments), each converted
        to its parameter's annotated type first: a text the type admits stays text, else it is
        read as JSON (``5``, ``2.5``, ``true``, ``[1, 2]``; ``True``/``False`` too). A value that
        fits neither way is ``InvalidParams`` naming the ``what`` (``"URI variable"``)."""
        checks = self.binder.by_name
        converted: dict[str, Any] = {}
        for k, v in values.items():
            check = checks.get(k)
            if check is not None and type(v) is str:
                v = _from_text(k, v, check, what)
            converted[k] = v
        return self.bind(converted)

    def aliased(self, name: str) -> Self:
        """The same record under another ``name`` (a mounted server's, see :mod:`.mounting`):
        the function, its binder and schemas shared, not compiled again."""
        alias = copy.copy(self)
        alias.name = name
        return alias

    def run_now(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
        """Run an :attr:`inline` function right here and return its outcome."""
        return call_now(self.fn, args, kwargs)


class Tool(HandlerFunction):
    """A registered tool."""

    #: Seconds the tool may run before its call ends as a tool error naming the limit (None: no limit).
    timeout: float | None = None
    _inline = False
    _task_support = "forbidden"
    #: Answered on the reader's turn by an entry of its own (:meth:`.ToolsCall.route`): an
    #: :attr:`inline` tool that never runs as a task. Kept by the setters of both, so the
    #: route reads one attribute per call.
    routed_inline = False
    #: ``task_support == "required"``, kept by its setter (every call asks).
    requires_task = False

    @property
    def inline(self) -> bool:
        """Runs on the event loop without a task of its own (sync, ``blocking=False``, no context)."""
        return self._inline

    @inline.setter
    def inline(self, value: bool) -> None:
        self._inline = value
        self.routed_inline = value and self._task_support == "forbidden"

    @property
    def task_support(self) -> str:
        """``execution.taskSupport``: ``"forbidden"`` (the default, not announced), ``"optional"``, ``"required"``."""
        return self._task_support

    @task_support.setter
    def task_support(self, value: str) -> None:
        self._task_support = value
        self.routed_inline = self._inline and value == "forbidden"
        self.requires_task = value == "required"

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
        *,
        icons: list[Any] | None = None,
        coerce_json_strings: bool = False,
        scopes: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
        inline: bool = False,
    ) -> None:
        super().__init__(fn, blocking, coerce_json_strings)
        #: OAuth scopes a principal needs to see and call this tool (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
        self.tags = _tags(tags)
        self.name = name
        self.description, arg_docs = describe_function(fn, description)
        self.title = title
        self.icons = check_icons(icons)
        self.annotations = annotations
        self.meta = meta
        self.explicit_schema = schema is not None
        self.input_schema = schema if schema is not None else {"$schema": DIALECT, **input_schema(fn, is_context_hint, self.hints, arg_docs)}
        if inline and schema is None:  # ``inline_refs=True``: the generated schemas without $ref (a given one as given)
            self.input_schema = inline_refs(self.input_schema)
        #: SEP-2243: the parameters mirrored into ``Mcp-Param-*`` headers (lower-case header
        #: name -> (parameter, JSON type)); an annotation that breaks the rules is refused here.
        self.header_params = param_headers(self.input_schema)
        ret = self.hints.get("return", inspect.Parameter.empty)
        declared = ret is not inspect.Parameter.empty and ret is not None and ret is not type(None) and ret is not Any and ret is not ToolResult
        if structured is None:
            structured = declared
        self.output_schema: dict[str, Any] | None = None
        self.wrap = False
        #: ``check(value) -> JSON value``: the return value checked against the declared
        #: output type (:class:`OutputMismatch`), set with :attr:`output_schema`.
        self.output_check: Callable[[Any], Any] | None = None
        if structured and declared:
            self.output_schema = inline_refs(output_schema(ret)) if inline else output_schema(ret)
            self.wrap = wraps_output(ret)
            self.output_check = _output_check(ret, name)
        #: Which cached reply template renders this tool's common results (see ``tools_call``):
        #: wrapped str/int values, or plain text without an output schema; None: none.
        self.template_kind: str | None = None
        #: The one type of value the template renders: str for text, the declared type for a
        #: wrapped ``str``/``int`` (any other value takes the general, checked path).
        self.template_type: type | None = None
        if type(self) is Tool:  # a subclass may render its results otherwise
            if self.wrap and (ret is str or ret is int):
                self.template_kind = TEMPLATE_WRAPPED
                self.template_type = ret
            elif self.output_schema is None:
                self.template_kind = TEMPLATE_TEXT
                self.template_type = str

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        if rules.icons and self.icons:
            d["icons"] = self.icons
        d["description"] = self.description or ""
        d["inputSchema"] = self.input_schema
        if rules.structured_output and self.output_schema is not None:
            d["outputSchema"] = self.output_schema
        if rules.audio and self.annotations:
            d["annotations"] = self.annotations
        if (rules.tasks or rules.stateless) and self.task_support != "forbidden":
            d["execution"] = {"taskSupport": self.task_support}
        if rules.structured_output and self.meta:
            d["_meta"] = self.meta
        return d

    def wrapped(self, value: Any, rules: VersionRules) -> dict[str, Any]:
        """The result of a value of the declared ``str``/``int`` type (:attr:`template_type`),
        spelled out: nothing to check (also what the reply template is cut from)."""
        d: dict[str, Any] = {"content": [{"type": "text", "text": value if type(value) is str else str(value)}]}
        if rules.structured_output:
            d["structuredContent"] = {"result": value}
        d["isError"] = False
        return d

    def set_task_support(self, value: str) -> None:
        """``"forbidden"``, ``"optional"`` or ``"required"`` (see :mod:`.tasks`). A tool that may run
        as a task takes the async path for its task calls (the one that can park it)."""
        if value not in ("forbidden", "optional", "required"):
            raise ValueError("task_support must be 'forbidden', 'optional' or 'required'")
        self.task_support = value

    def set_timeout(self, seconds: float | None) -> None:
        """Limit the tool's run time to ``seconds``. A tool with a limit never runs inline: only
        an async tool or one on the thread pool can be left behind when the limit passes."""
        if seconds is not None:
            if not seconds > 0:
                raise ValueError("timeout must be a positive number of seconds")
            if not self.is_async and not self.blocking:
                raise ValueError(f"tool {self.name!r}: timeout= needs an async tool or a blocking one (a sync tool with blocking=False cannot be stopped)")
            self.inline = False
        self.timeout = seconds

    def result(self, value: Any, rules: VersionRules) -> dict[str, Any]:
        """The ``CallToolResult`` of ``value`` under ``rules``; with an output type, ``value`` is
        checked against it first (:class:`OutputMismatch`)."""
        if type(value) is self.template_type and self.template_kind is TEMPLATE_WRAPPED:  # the common case
            return self.wrapped(value, rules)
        d: dict[str, Any]
        if isinstance(value, ToolResult):
            d = value.to_dict()
            if self.output_check is not None and not value.is_error:
                self._check_structured(value.structured)
        elif self.output_check is not None:
            data = self.output_check(value)
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

    def _check_structured(self, structured: Any) -> None:
        """A :class:`ToolResult`'s structured content against the output type (the spec: a tool
        with an output schema MUST return conforming structured content)."""
        assert self.output_check is not None
        if structured is None:
            raise OutputMismatch(f"tool {self.name!r} has an output schema and returned a ToolResult without structured content")
        if self.wrap:
            if type(structured) is not dict or set(structured) != {"result"}:
                raise OutputMismatch(f"tool {self.name!r}: structured content must be {{'result': value}} for its output type")
            structured = structured["result"]
        self.output_check(structured)


class Resource(HandlerFunction):
    """A registered resource (fixed URI) or resource template (URI with ``{variables}``)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        uri: str,
        name: str,
        description: str | None,
        mime_type: str | None,
        title: str | None,
        blocking: bool | None,
        *,
        icons: list[Any] | None = None,
        scopes: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        super().__init__(fn, blocking)
        #: OAuth scopes a principal needs to see and read this resource (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
        self.tags = _tags(tags)
        self.uri = uri
        self.name = name
        self.description = describe_function(fn, description)[0]
        self.mime_type = mime_type
        self.title = title
        self.icons = check_icons(icons)
        self.is_template = "{" in uri
        self.template = UriTemplate(uri) if self.is_template else None
        if self.template is not None:
            self._check_variables(self.template)

    def _check_variables(self, template: UriTemplate) -> None:
        """Each variable names a parameter; each required parameter is a path variable."""
        b = self.binder
        names = set(template.path_names) | set(template.query_names)
        unknown = sorted(n for n in names if n not in b.by_name) if not b.has_var_keyword else []
        if unknown:
            raise ValueError(f"resource template {self.uri!r}: the function {self.name!r} has no parameter "
                             f"{', '.join(repr(n) for n in unknown)} (each URI variable is passed by that name)")
        missing = sorted(n for n in b.required if n not in template.path_names)
        if missing:
            raise ValueError(f"resource template {self.uri!r}: the function's required parameter(s) "
                             f"{', '.join(repr(n) for n in missing)} are not path variables of the URI "
                             f"(give them defaults, or add them to the URI)")

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {("uriTemplate" if self.is_template else "uri"): self.uri, "name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        if rules.icons and self.icons:
            d["icons"] = self.icons
        d["description"] = self.description or ""
        if self.mime_type:
            d["mimeType"] = self.mime_type
        return d

    def moved(self, uri: str) -> Resource:
        """The same resource (or template) at another ``uri`` (a mounted server's)."""
        alias = copy.copy(self)
        alias.uri = uri
        alias.template = UriTemplate(uri) if self.is_template else None
        return alias

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of ``uri`` if this resource serves it, else None."""
        if self.template is None:
            return {} if uri == self.uri else None
        return self.template.match(uri)

    def contents(self, uri: str, value: Any) -> list[dict[str, Any]]:
        """The ``contents`` of a read that returned ``value``: one item, always schema-valid (a
        ``str`` is text, ``bytes`` a blob, anything else JSON text)."""
        if isinstance(value, str):
            return [{"uri": uri, "mimeType": self.mime_type or "text/plain", "text": value}]
        if isinstance(value, (bytes, bytearray)):
            return [{"uri": uri, "mimeType": self.mime_type or "application/octet-stream", "blob": base64.b64encode(bytes(value)).decode()}]
        return [{"uri": uri, "mimeType": self.mime_type or "application/json", "text": codec.encode(pydantic_bridge.to_builtins(value)).decode()}]


class Prompt(HandlerFunction):
    """A registered prompt; its arguments come from the function's parameters."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        description: str | None,
        title: str | None,
        arg_descriptions: dict[str, str] | None,
        *,
        icons: list[Any] | None = None,
        scopes: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        super().__init__(fn, None)
        #: OAuth scopes a principal needs to see and get this prompt (see :mod:`.scopes`).
        self.scopes: frozenset[str] = frozenset(scopes or ())
        self.tags = _tags(tags)
        self.name = name
        self.description, arg_docs = describe_function(fn, description)
        arg_descriptions = {**arg_docs, **(arg_descriptions or {})}
        self.title = title
        self.icons = check_icons(icons)
        hints = self.hints
        self.arguments: list[dict[str, Any]] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or is_context_hint(hints.get(p.name)):
                continue
            a: dict[str, Any] = {"name": p.name}
            if arg_descriptions and p.name in arg_descriptions:
                a["description"] = arg_descriptions[p.name]
            a["required"] = p.default is inspect.Parameter.empty or (pydantic_bridge.is_field(p.default) and pydantic_bridge.field_default(p.default) is pydantic_bridge.MISSING)
            self.arguments.append(a)

    def describe(self, rules: VersionRules) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if rules.structured_output and self.title:
            d["title"] = self.title
        if rules.icons and self.icons:
            d["icons"] = self.icons
        d["description"] = self.description or ""
        d["arguments"] = self.arguments
        return d

    @staticmethod
    def result(value: Any, description: str | None) -> dict[str, Any]:
        """The ``GetPromptResult`` of what the function returned: a :class:`.PromptResult`, a
        :class:`.Message`, a ``str``, a list of those (or of message dicts, content blocks), a
        result dict as is; anything else as one user message of JSON text."""
        if isinstance(value, PromptResult):
            return value.to_dict(description)
        if type(value) is dict and "messages" in value:
            return value
        if isinstance(value, (str, Message)):
            value = [value]
        if type(value) is list:
            messages = [m.to_dict() if isinstance(m, Message) else m if type(m) is dict and "role" in m else Message(m).to_dict() for m in value]
        else:
            messages = [Message(codec.encode(pydantic_bridge.to_builtins(value)).decode()).to_dict()]
        return PromptResult([]).to_dict(description) | {"messages": messages}


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
