"""2026-07-28 Streamable HTTP: the request metadata headers checked against the body, and the POST.

``MCP-Protocol-Version`` must equal ``params._meta["io.modelcontextprotocol/protocolVersion"]``,
``Mcp-Method`` the body's ``method``, and ``Mcp-Name`` the ``params.name`` (``tools/call``,
``prompts/get``) or ``params.uri`` (``resources/read``). Values outside plain visible ASCII
come as ``=?base64?...?=`` and are decoded before comparing. Failures are HTTP 400 with
-32020 (HeaderMismatch), -32022 (UnsupportedProtocolVersion) or -32602 (missing ``_meta``).

:class:`ModernPost` serves one such POST (no sessions): the message read once by the app is
handed to the server's stateless handler; closing the response stream cancels the request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import codec
from ..admission import Admission
from ..envelope import UNSET, Envelope
from ..mcp.versions import HANDSHAKE_VERSIONS, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION
from ..request_context import current_principal
from ..transports.asgi import HTTPRefusal, Receive, Send, refuse_busy, respond
from ..transports.http_layer import wait_disconnect
from .events import SSE_HEADERS, sse_event
from .responses import HEADER_DELAY

if TYPE_CHECKING:
    from ..mcp.stateless import StatelessRequest

__all__ = ["HeaderProblem", "check_modern_headers", "header_version", "ParamHeaders", "decode_header_value", "encode_header_value", "NAME_SOURCE",
           "ModernPost", "ModernHandler", "send_problem", "is_modern_request"]

log = logging.getLogger("sturdyrpc.http")

#: Starts serving one 2026-07-28 message read already: ``(read, emit)`` -> the request, ``done``
#: at once when its reply is ready, else awaited with ``wait()`` (cancelled with ``cancel()``).
#: ``emit(bytes)`` sends a notification related to the request before the reply
#: (:meth:`sturdyrpc.mcp.MCPServer.serve_stateless` has this shape).
ModernHandler = Callable[[Any, Callable[[bytes], Awaitable[None]]], "StatelessRequest"]

#: Methods whose target is mirrored in ``Mcp-Name``, and the params field it comes from.
NAME_SOURCE: dict[str, str] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                               # SEP-2663: the tasks extension routes its requests by task id
                               "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}

#: A tool's ``Mcp-Param-*`` headers (SEP-2243), given its name: lower-case header name ->
#: (parameter, JSON type) (:meth:`sturdyrpc.mcp.MCPServer.param_headers` has this shape).
ParamHeaders = Callable[[str], Mapping[str, tuple[str, str]]]

_PREFIX = "=?base64?"
#: Control characters a header value must not hold (a tab is allowed); one C-level search per value.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_SUFFIX = "?="


class HeaderProblem(Exception):
    """A request the transport refuses: HTTP status, JSON-RPC code, message and optional data."""

    def __init__(self, status: int, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.data = data

    def error(self, id_: Any) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        out: dict[str, Any] = {"jsonrpc": "2.0", "error": err}
        if id_ is not None:
            out["id"] = id_
        return out


def _plain_ok(value: str) -> bool:
    return bool(value) and value == value.strip(" \t") and all(0x20 <= ord(c) <= 0x7E for c in value) and not (
        value.startswith(_PREFIX) and value.endswith(_SUFFIX)
    )


def encode_header_value(value: str) -> str:
    """A header-safe form of ``value`` (plain when it can be, else the base64 sentinel form)."""
    if _plain_ok(value):
        return value
    return _PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SUFFIX


#: Header values decoded so far (clients send the same few methods and names): bounded.
_DECODED: dict[bytes, str] = {}


def decode_header_value(raw: bytes) -> str:
    """Decode a header value; ValueError when it is malformed."""
    hit = _DECODED.get(raw)
    if hit is not None:
        return hit
    text = _decode_header_value(raw)
    if len(_DECODED) < 1024:
        _DECODED[bytes(raw)] = text
    return text


def _decode_header_value(raw: bytes) -> str:
    try:
        # RFC 9110 5.5: whitespace around a field value is not part of it
        text = raw.decode("ascii").strip(" \t")
    except UnicodeDecodeError:
        raise ValueError("non-ASCII header value") from None
    if _CONTROL.search(text) is not None:
        raise ValueError("control character in header value")
    if text.startswith(_PREFIX) and text.endswith(_SUFFIX) and len(text) >= len(_PREFIX) + len(_SUFFIX):
        try:
            return base64.b64decode(text[len(_PREFIX) : -len(_SUFFIX)], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError("bad base64 header value") from None
    return text


def header_version(raw: bytes, handshake_versions: tuple[str, ...], modern_versions: tuple[str, ...]) -> tuple[str, bool]:
    """The version an ``MCP-Protocol-Version`` header value names, and whether it is a
    2026-07-28-era one. One not served: :class:`HeaderProblem` (400, -32022) for a date later than
    every handshake version when 2026-07-28-era versions are served (such a client is told the
    supported ones), else :class:`HTTPRefusal` 400."""
    v = raw.decode("latin-1").strip()
    if v in handshake_versions or v in modern_versions:
        return v, v in modern_versions
    if modern_versions and v > handshake_versions[-1]:
        supported = list(handshake_versions) + list(modern_versions)
        raise HeaderProblem(400, -32022, "Unsupported protocol version", {"supported": supported, "requested": v})
    raise HTTPRefusal(400, -32600, "Bad Request: unsupported MCP-Protocol-Version")


def check_modern_headers(method: str, params: Any, is_request: bool, version: str, supported: list[str],
                         headers: dict[bytes, bytes], param_headers: ParamHeaders | None = None) -> None:
    """Raise :class:`HeaderProblem` unless the headers of a modern POST agree with its body (the
    message's ``method`` and ``params``; ``is_request``: it has an id).

    ``version`` is the ``MCP-Protocol-Version`` header; ``headers`` maps lower-case names to values;
    ``param_headers``: the ``Mcp-Param-*`` headers of a tool, checked against a ``tools/call``'s
    arguments (SEP-2243).
    """
    if version not in supported:
        raise HeaderProblem(400, -32022, "Unsupported protocol version", {"supported": supported, "requested": version})
    if not is_request:
        return  # notifications: this revision defines no header rules for them
    raw_method = headers.get(b"mcp-method")
    if raw_method is None:
        raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Method header is required")
    try:
        hdr_method = _DECODED.get(raw_method) or decode_header_value(raw_method)  # the cache, without a call
    except ValueError:
        raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Method header is malformed") from None
    if hdr_method != method:
        raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Method header does not match the body")
    is_dict = type(params) is dict
    field = NAME_SOURCE.get(method)
    if field is not None:
        body_name = params.get(field) if is_dict else None
        raw_name = headers.get(b"mcp-name")
        if raw_name is None:
            if body_name is not None:
                raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Name header is required")
        else:
            try:
                hdr_name = _DECODED.get(raw_name) or decode_header_value(raw_name)
            except ValueError:
                raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Name header is malformed") from None
            if hdr_name != body_name:
                raise HeaderProblem(400, -32020, "Header mismatch: Mcp-Name header does not match the body")
        if param_headers is not None and method == "tools/call" and type(body_name) is str:
            _check_param_headers(param_headers(body_name), params.get("arguments"), headers)
    meta = params.get("_meta") if is_dict else None
    if type(meta) is not dict or META_PROTOCOL_VERSION not in meta or META_CLIENT_CAPABILITIES not in meta:
        raise HeaderProblem(400, -32602, "Invalid params: _meta must carry the protocol version and client capabilities")
    if meta[META_PROTOCOL_VERSION] != version:
        raise HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header does not match _meta")


def _check_param_headers(wanted: Mapping[str, tuple[str, str]], arguments: Any, headers: dict[bytes, bytes]) -> None:
    """SEP-2243: each ``Mcp-Param-<Name>`` header of the tool is present exactly when its argument
    is (and not null), and its decoded value is that argument's."""
    if not wanted:
        return
    args = arguments if type(arguments) is dict else {}
    for header, (param, kind) in wanted.items():
        raw = headers.get(header.encode("latin-1"))
        value = args.get(param)
        if raw is None:
            if value is not None:
                raise HeaderProblem(400, -32020, f"Header mismatch: {header} header is required")
            continue
        try:
            text = decode_header_value(raw)
        except ValueError:
            raise HeaderProblem(400, -32020, f"Header mismatch: {header} header is malformed") from None
        if not _same_value(text, value, kind):
            raise HeaderProblem(400, -32020, f"Header mismatch: {header} header does not match the body")


def _same_value(text: str, value: Any, kind: str) -> bool:
    """Whether header text ``text`` is the argument ``value`` (of the parameter's JSON ``kind``)."""
    if value is None:
        return False
    if type(value) is bool:
        return text == ("true" if value else "false")
    if type(value) in (int, float) and kind in ("integer", "number"):
        try:
            return bool(float(text) == value)
        except ValueError:
            return False
    return type(value) is str and text == value


async def send_problem(send: Send, p: HeaderProblem, id_: Any) -> None:
    await respond(send, p.status, codec.encode(p.error(id_)))


def is_modern_request(got: Any) -> bool:
    """Whether ``got`` is a request whose ``_meta`` names a 2026-07-28-era protocol version."""
    if type(got) is not Envelope or got.method is UNSET or got.id is UNSET or got.method == "initialize":
        return False  # notifications: this revision defines no header rules for them; initialize is legacy
    params = got.params
    meta = params.get("_meta") if type(params) is dict else None
    v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
    return type(v) is str and v not in HANDSHAKE_VERSIONS


class ModernPost:
    """Serves 2026-07-28 POSTs with ``handler`` (each request a slot of ``admission``).

    ``versions``: the 2026-07-28-era versions served; ``check_scopes(principal, requests)``
    refuses a request whose principal lacks its scopes (None: no per-request scopes);
    ``keepalive``: seconds of silence before a comment line on a slow request's stream.
    """

    def __init__(self, handler: ModernHandler, admission: Admission, *, versions: list[str],
                 check_scopes: Callable[[Any, list[Envelope]], None] | None, keepalive: float,
                 param_headers: ParamHeaders | None = None) -> None:
        self.handler = handler
        self.param_headers = param_headers
        self.admission = admission
        self.versions = versions
        self.check_scopes = check_scopes
        self.keepalive = keepalive

    async def serve(self, hx: dict[bytes, bytes], receive: Receive, send: Send, got: Any, version: str, sse_ok: bool) -> None:
        """Serve a POST whose body ``got`` was read already (``hx``: its headers, indexed)."""
        if type(got) is not Envelope:
            if type(got) is list:
                raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a single JSON-RPC message")
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a request or a notification")
        method: Any = got.method
        id_ = got.id
        if method is UNSET or (id_ is not UNSET and type(id_) is not str and type(id_) is not int):
            raise HTTPRefusal(400, -32600, "Invalid Request: the body must be a request or a notification")
        kind = "notification" if id_ is UNSET else "request"
        if id_ is UNSET:
            id_ = None
        try:
            check_modern_headers(method, got.params, kind == "request", version, self.versions, hx, self.param_headers)
        except HeaderProblem as p:
            await send_problem(send, p, id_)
            return
        if kind == "notification":
            request = self.handler(got, _drop)
            if not request.done:
                await request.wait()
            await respond(send, 202)
            return
        principal = current_principal.get()
        if self.check_scopes is not None and principal is not None:
            self.check_scopes(principal, [got])
        if not sse_ok and method == "subscriptions/listen":
            # the listen channel IS this response's SSE stream; a JSON-only client cannot have one
            raise HTTPRefusal(406, -32600, "Not Acceptable: subscriptions/listen needs Accept: text/event-stream")
        if not self.admission.try_acquire():
            await refuse_busy(send, with_null_id=False)
            return
        try:
            out = _Response(send, sse_ok)
            try:
                request = self.handler(got, out.emit)
            except Exception:  # a bug of the server's below: the client still gets an answer, without it
                log.exception("2026-07-28 request failed in the server")
                await _reply(send, _internal_error(got.id))
                return
            if request.done:
                # answered at once (an inline tool, an error): no task, no timer, no watcher
                await _reply(send, request.value)
            else:
                await self._wait(request, out, receive, got)
        finally:
            self.admission.release()

    async def _wait(self, request: StatelessRequest, out: _Response, receive: Receive, got: Envelope) -> None:
        """The reply of a request not answered at once, the client's leaving watched for meanwhile."""
        send, sse_ok = out.send, out.sse_ok
        waiting = asyncio.ensure_future(request.wait())
        done, _ = await asyncio.wait((waiting,), timeout=HEADER_DELAY)
        if not done:
            # A slow request: watch for the client leaving, and keep a quiet stream alive.
            gone = asyncio.ensure_future(wait_disconnect(receive))
            try:
                while not waiting.done():
                    await asyncio.wait((waiting, gone), timeout=self.keepalive, return_when=asyncio.FIRST_COMPLETED)
                    if gone.done():
                        request.cancel()  # 2026-07-28: closing the response stream IS the cancellation
                        waiting.cancel()
                        return
                    if not waiting.done() and sse_ok:
                        if not out.started:
                            await out.start()
                        await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
            finally:
                gone.cancel()
        try:
            reply = waiting.result()
        except Exception:
            log.exception("2026-07-28 request failed in the server")
            reply = _internal_error(got.id)
        if out.started:
            if reply is not None:
                await send({"type": "http.response.body", "body": sse_event(reply), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await _reply(send, reply)


class _Response:
    """The response of one 2026-07-28 request: its notifications (``emit``) go out on an SSE
    stream started with the first one, before the reply; a JSON-only client gets the reply alone."""

    __slots__ = ("send", "sse_ok", "started")

    def __init__(self, send: Send, sse_ok: bool) -> None:
        self.send = send
        self.sse_ok = sse_ok
        self.started = False

    async def start(self) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def emit(self, data: bytes) -> None:
        if not self.sse_ok:
            return  # a JSON-only client gets the reply alone
        if not self.started:
            await self.start()
        await self.send({"type": "http.response.body", "body": sse_event(data), "more_body": True})


def _reply(send: Send, reply: bytes | None) -> Awaitable[None]:
    """The whole response carrying ``reply`` (202 for a notification's None), to await."""
    if reply is None:
        return respond(send, 202)
    return respond(send, _status_for(reply), reply)


def _internal_error(id_: Any) -> bytes:
    return codec.encode({"jsonrpc": "2.0", "id": None if id_ is UNSET else id_, "error": {"code": -32603, "message": "Internal error"}})


async def _drop(data: bytes) -> None:
    return None


def _status_for(reply: bytes) -> int:
    """HTTP status of a 2026-07-28 JSON reply: 404 for an unknown method, 400 for a request the client got wrong."""
    if b'"error"' not in reply:
        return 200
    try:
        obj = codec.decode(reply)
    except Exception:
        return 200
    err = obj.get("error") if type(obj) is dict else None
    code = err.get("code") if type(err) is dict else None
    return _MODERN_STATUS.get(code, 200) if type(code) is int else 200


#: 2026-07-28: HTTP status of a JSON error reply (the same table as the official SDKs).
_MODERN_STATUS = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400, -32601: 404}
