"""``MCPServer.from_openapi(spec)``: one tool per operation of an OpenAPI 3.0/3.1 document.

Each operation (``paths`` x method) becomes a tool named by its ``operationId`` (else
``{method}_{path}``, e.g. ``get_users_id``), described by its ``summary``/``description``. Its
input schema holds the path, query and header parameters (required as declared; path parameters
always) and the JSON request body: an object body's properties side by side with the
parameters (a name both use, or a body that is not an object, is one ``body`` argument). A
declared JSON response of the first 2xx status is the output schema (a non-object one wrapped as
``{"result": ...}``). Local ``$ref`` s (``#/components/...``) are inlined.

A call sends the request with ``httpx.AsyncClient``: the one given, or one made for ``base_url``
(default: the document's first ``servers`` URL, its variables at their defaults) while the
server's lifespan runs. A response of status 400 or more is a tool error naming the method, path
and status, without the body unless ``show_error_bodies=True`` (bodies can hold internals); one
that cannot be sent is a tool error naming the failure's kind. Not mapped: cookie parameters,
non-JSON bodies (form, multipart), callbacks, security schemes (give a client with the
credentials), and resources.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import quote

from .. import codec
from .content import ToolError, text_content
from .registry import Prompt, Resource, Tool
from .versions import VersionRules

if TYPE_CHECKING:
    import httpx

__all__ = ["from_openapi", "operation_tools", "OperationTool"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
#: How deep ``$ref`` s are inlined (a schema that refers to itself stops there, as ``{}``).
_MAX_REF_DEPTH = 32
#: The most of an error body shown with ``show_error_bodies=True``.
_ERROR_BODY_LIMIT = 2000


class _Registering(Protocol):
    def add(self, *records: Tool | Resource | Prompt, replacing: Iterable[Tool | Resource | Prompt] = ()) -> None: ...


S = TypeVar("S", bound=_Registering)


def from_openapi(cls: Callable[..., S], spec: Mapping[str, Any], client: httpx.AsyncClient | None = None, *, name: str = "openapi",
                 base_url: str | None = None, show_error_bodies: bool = False) -> S:
    """A server (``cls(name, lifespan=...)``) with one tool per operation of ``spec`` (see the
    module docstring); ``client``: the ``httpx.AsyncClient`` to call the API with (its base URL,
    headers and auth are used as they are), else one is made for ``base_url`` or the document's
    first server while the lifespan runs."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("paths"), Mapping):
        raise ValueError("from_openapi(): spec must be an OpenAPI 3.0/3.1 document (a mapping with 'paths')")
    version = str(spec.get("openapi", ""))
    if not version.startswith("3."):
        raise ValueError(f"from_openapi(): OpenAPI 3.0 or 3.1 documents only (this one says openapi: {version!r})")
    api = _Api(client, base_url if base_url is not None else _first_server(spec), show_error_bodies)
    if client is None and not api.base_url:
        raise ValueError("from_openapi(): no base URL: give base_url=, a client, or a 'servers' entry with an absolute URL")
    server = cls(name, lifespan=api.running)
    server.add(*operation_tools(spec, api.send))
    return server


def _first_server(spec: Mapping[str, Any]) -> str:
    servers = spec.get("servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], Mapping):
        return ""
    url = str(servers[0].get("url", ""))
    for var, d in (servers[0].get("variables") or {}).items():
        url = url.replace("{" + str(var) + "}", str(d.get("default", "")) if isinstance(d, Mapping) else "")
    return url if re.match(r"https?://", url) else ""


class _Api:
    """The HTTP side: the client while the lifespan runs, and how one call is sent."""

    def __init__(self, client: httpx.AsyncClient | None, base_url: str, show_error_bodies: bool) -> None:
        self.given = client
        self.client = client
        self.base_url = base_url
        self.show_error_bodies = show_error_bodies

    @contextlib.asynccontextmanager
    async def running(self, server: Any) -> AsyncIterator[None]:
        if self.given is not None:
            yield None
            return
        import httpx

        async with httpx.AsyncClient(base_url=self.base_url) as client:
            self.client = client
            try:
                yield None
            finally:
                self.client = None

    async def send(self, method: str, path: str, query: dict[str, Any], headers: dict[str, str], body: Any) -> Any:
        """Send one request; the decoded JSON (or text) of a 2xx reply, else a :class:`ToolError`."""
        import httpx

        if self.client is None:
            raise ToolError("the API client is not open (the server's lifespan is not running)")
        # a client with a base URL of its own joins the path to it; one without gets ours
        url = path if str(self.client.base_url) else self.base_url.rstrip("/") + path
        try:
            kw: dict[str, Any] = {"params": query, "headers": headers}
            if body is not _NO_BODY:
                kw["json"] = body
            reply = await self.client.request(method.upper(), url, **kw)
        except httpx.HTTPError as exc:
            raise ToolError(f"{method.upper()} {path}: the request failed ({type(exc).__name__})") from None
        if reply.status_code >= 400:
            text = f"{method.upper()} {path}: HTTP {reply.status_code} {reply.reason_phrase}"
            if self.show_error_bodies and reply.content:
                text += ": " + reply.text[:_ERROR_BODY_LIMIT]
            raise ToolError(text)
        if not reply.content:
            return None
        if "json" in reply.headers.get("content-type", ""):
            try:
                return codec.decode(reply.content)
            except Exception:
                raise ToolError(f"{method.upper()} {path}: the reply is not valid JSON") from None
        return reply.text


_NO_BODY = object()

#: ``await send(method, path, query, headers, body)``: the reply's value (see :meth:`_Api.send`).
Send = Callable[[str, str, dict[str, Any], dict[str, str], Any], Any]


def operation_tools(spec: Mapping[str, Any], send: Send) -> list[OperationTool]:
    """One :class:`OperationTool` per operation of ``spec``, each calling ``send``."""
    tools: list[OperationTool] = []
    seen: set[str] = set()
    for path, item in spec["paths"].items():
        item = _inline(spec, item)
        if not isinstance(item, Mapping):
            continue
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, Mapping):
                tool = _operation(spec, str(path), method, item, op, send)
                if tool.name in seen:
                    raise ValueError(f"from_openapi(): two operations are named {tool.name!r} (give them distinct operationIds)")
                seen.add(tool.name)
                tools.append(tool)
    return tools


def _operation(spec: Mapping[str, Any], path: str, method: str, item: Mapping[str, Any], op: Mapping[str, Any], send: Send) -> OperationTool:
    """The tool of one operation: its input schema, where each argument goes, its output schema."""
    params: dict[tuple[str, str], Mapping[str, Any]] = {}
    for p in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:  # the operation's win
        p = _inline(spec, p)
        if isinstance(p, Mapping) and p.get("in") in ("path", "query", "header"):
            params[(str(p["in"]), str(p["name"]))] = p
    properties: dict[str, Any] = {}
    required: list[str] = []
    places: dict[str, tuple[str, str]] = {}  # argument -> (where, the name there)
    for (where, pname), p in params.items():
        schema = dict(p.get("schema") or {})
        if p.get("description"):
            schema.setdefault("description", p["description"])
        arg = pname if pname not in places else f"{where}_{pname}"
        properties[arg] = schema
        places[arg] = (where, pname)
        if where == "path" or p.get("required"):
            required.append(arg)
    body = _json_schema(_inline(spec, op.get("requestBody")))
    if body is not None:
        body_required = bool((_inline(spec, op.get("requestBody")) or {}).get("required"))
        props = body.get("properties")
        if body.get("type", "object") == "object" and isinstance(props, Mapping) and props and not set(props) & set(properties):
            properties.update(props)
            places.update({k: ("body", k) for k in props})
            required.extend(str(k) for k in body.get("required") or [] if body_required)
        else:
            properties["body"] = body
            places["body"] = ("body", "")
            if body_required:
                required.append("body")
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    name = str(op.get("operationId") or re.sub(r"[^A-Za-z0-9]+", "_", f"{method}_{path}").strip("_"))
    call = _caller(method, path, places, send)
    return OperationTool(call, name, str(op.get("summary") or op.get("description") or f"{method.upper()} {path}"),
                         input_schema, _output_schema(spec, op), tags=[str(t) for t in op.get("tags") or []])


def _caller(method: str, path: str, places: dict[str, tuple[str, str]], send: Send) -> Callable[..., Any]:
    async def call(**arguments: Any) -> Any:
        url, query, headers, fields = path, {}, {}, {}
        body: Any = _NO_BODY
        for arg, value in arguments.items():
            where, pname = places.get(arg, ("", ""))
            if where == "path":
                url = url.replace("{" + pname + "}", quote(str(value), safe=""))
            elif where == "query":
                query[pname] = value
            elif where == "header":
                headers[pname] = value if isinstance(value, str) else codec.encode(value).decode()
            elif where == "body" and pname:
                fields[pname] = value
            elif where == "body":
                body = value
            else:
                raise ToolError(f"unknown argument {arg!r}")
        missing = re.findall(r"\{([^}]+)\}", url)
        if missing:
            raise ToolError(f"missing path parameter(s): {', '.join(missing)}")
        if fields:
            body = fields
        return await send(method, url, query, headers, body)

    return call


def _json_schema(holder: Any) -> dict[str, Any] | None:
    """The JSON schema of a request body or response (``content``: ``application/json`` or ``+json``)."""
    if not isinstance(holder, Mapping):
        return None
    for media, d in (holder.get("content") or {}).items():
        if (media == "application/json" or str(media).endswith("+json")) and isinstance(d, Mapping) and isinstance(d.get("schema"), Mapping):
            return dict(d["schema"])
    return None


def _output_schema(spec: Mapping[str, Any], op: Mapping[str, Any]) -> dict[str, Any] | None:
    responses = op.get("responses") or {}
    for status in sorted(str(s) for s in responses):
        if status.startswith("2"):
            return _json_schema(_inline(spec, responses.get(status) if status in responses else responses.get(int(status))))
    return None


def _inline(spec: Mapping[str, Any], value: Any, depth: int = 0) -> Any:
    """``value`` with every local ``$ref`` replaced by what it points to (to ``_MAX_REF_DEPTH``)."""
    if isinstance(value, Mapping):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            if depth >= _MAX_REF_DEPTH:
                return {}
            target: Any = spec
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
            return _inline(spec, target, depth + 1)
        return {k: _inline(spec, v, depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_inline(spec, v, depth) for v in value]
    return value


class OperationTool(Tool):
    """An API operation as a tool: arguments unchecked here beyond the API's own checks (the
    schema is the document's), the reply's value as structured content when an output schema
    is declared."""

    def __init__(self, fn: Callable[..., Any], name: str, description: str, schema: dict[str, Any], output: dict[str, Any] | None,
                 tags: list[str] | None = None) -> None:
        super().__init__(fn, name, description, None, None, schema, False, None, None, tags=tags)
        self.wrap = output is not None and output.get("type") != "object"
        self.output_schema = ({"type": "object", "properties": {"result": output}, "required": ["result"]} if self.wrap else output)

    def result(self, value: Any, rules: VersionRules) -> dict[str, Any]:
        text = value if isinstance(value, str) else codec.encode(value).decode()
        d: dict[str, Any] = {"content": [text_content(text)] if value is not None else [], "isError": False}
        if self.output_schema is not None and rules.structured_output and value is not None:
            d["structuredContent"] = {"result": value} if self.wrap else value
        return d
