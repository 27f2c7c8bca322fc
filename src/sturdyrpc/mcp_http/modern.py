"""2026-07-28 Streamable HTTP request metadata: the headers that mirror the body, checked against it.

``MCP-Protocol-Version`` must equal ``params._meta["io.modelcontextprotocol/protocolVersion"]``,
``Mcp-Method`` the body's ``method``, and ``Mcp-Name`` the ``params.name`` (``tools/call``,
``prompts/get``) or ``params.uri`` (``resources/read``). Values outside plain visible ASCII
come as ``=?base64?...?=`` and are decoded before comparing. Failures are HTTP 400 with
-32020 (HeaderMismatch), -32022 (UnsupportedProtocolVersion) or -32602 (missing ``_meta``).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ..mcp.versions import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION

__all__ = ["HeaderProblem", "check_modern_headers", "decode_header_value", "encode_header_value", "NAME_SOURCE"]

#: Methods whose target is mirrored in ``Mcp-Name``, and the params field it comes from.
NAME_SOURCE: dict[str, str] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

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
        text = raw.decode("ascii")
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


def check_modern_headers(method: str, params: Any, is_request: bool, version: str, supported: list[str],
                         headers: dict[bytes, bytes]) -> None:
    """Raise :class:`HeaderProblem` unless the headers of a modern POST agree with its body (the
    message's ``method`` and ``params``; ``is_request``: it has an id).

    ``version`` is the ``MCP-Protocol-Version`` header; ``headers`` maps lower-case names to values.
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
    if method in NAME_SOURCE:
        field = NAME_SOURCE[method]
        body_name = params.get(field) if type(params) is dict else None
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
    meta = params.get("_meta") if type(params) is dict else None
    if type(meta) is not dict or META_PROTOCOL_VERSION not in meta or META_CLIENT_CAPABILITIES not in meta:
        raise HeaderProblem(400, -32602, "Invalid params: _meta must carry the protocol version and client capabilities")
    if meta[META_PROTOCOL_VERSION] != version:
        raise HeaderProblem(400, -32020, "Header mismatch: MCP-Protocol-Version header does not match _meta")
