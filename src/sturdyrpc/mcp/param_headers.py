"""SEP-2243 (2026-07-28, Streamable HTTP): tool parameters mirrored into ``Mcp-Param-<Name>``
request headers, so that gateways can route on them without reading the body.

A tool designates a top-level parameter by an ``x-mcp-header: "<Name>"`` annotation on its
property in ``inputSchema``. The rules, shared by the server (which checks that the headers
agree with the arguments) and the client (which sends them and leaves out tools whose
annotations break the rules):

- the name is a non-empty HTTP token (RFC 9110: no spaces, colons, non-ASCII or control characters);
- names are unique within a tool, compared case-insensitively;
- only ``string``, ``integer`` and ``boolean`` properties may carry one.

A value is sent as text: a string as itself, an integer in decimal, a boolean as ``true`` /
``false``; a null or absent argument has no header. (The transport encodes text that is not
plain visible ASCII as ``=?base64?...?=``.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["ParamHeaderError", "param_headers", "usable_tools", "header_text", "header_values", "HEADER_TYPES"]

#: The property types a ``Mcp-Param-*`` header can mirror.
HEADER_TYPES = frozenset({"string", "integer", "boolean"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class ParamHeaderError(ValueError):
    """A tool's ``x-mcp-header`` annotations break SEP-2243's rules."""


def param_headers(input_schema: Any) -> dict[str, tuple[str, str]]:
    """The ``Mcp-Param-*`` headers of a tool with ``input_schema``: lower-case header name ->
    (parameter, JSON type). Raises :class:`ParamHeaderError` for an annotation that breaks the rules."""
    props = input_schema.get("properties") if type(input_schema) is dict else None
    found: dict[str, tuple[str, str]] = {}
    for param, spec in (props.items() if type(props) is dict else ()):
        if type(spec) is not dict or "x-mcp-header" not in spec:
            continue
        name = spec["x-mcp-header"]
        if type(name) is not str or not _TOKEN.fullmatch(name):
            raise ParamHeaderError(f"x-mcp-header of {param!r} must be a non-empty header name, got {name!r}")
        kind = spec.get("type")
        if kind not in HEADER_TYPES:
            raise ParamHeaderError(f"x-mcp-header of {param!r}: only string, integer and boolean parameters may be mirrored, not {kind!r}")
        key = f"mcp-param-{name.lower()}"
        if key in found:
            raise ParamHeaderError(f"x-mcp-header {name!r} names two parameters ({found[key][0]!r}, {param!r})")
        found[key] = (param, kind)
    return found


def usable_tools(tools: list[Any]) -> tuple[list[Any], dict[str, dict[str, tuple[str, str]]], list[str]]:
    """A client's view of a ``tools/list``: the tools it may call (one whose ``x-mcp-header``
    annotations break the rules MUST be left out), each kept tool's headers by name, and why
    each left-out one was (one line each)."""
    kept: list[Any] = []
    headers: dict[str, dict[str, tuple[str, str]]] = {}
    left_out: list[str] = []
    for tool in tools:
        name = tool.get("name") if type(tool) is dict else None
        try:
            found = param_headers(tool.get("inputSchema")) if type(tool) is dict else {}
        except ParamHeaderError as exc:
            left_out.append(f"tool {name!r} left out: {exc}")
            continue
        if type(name) is str:
            headers[name] = found
        kept.append(tool)
    return kept, headers, left_out


def header_text(value: Any) -> str | None:
    """The text of argument ``value`` in its header (None: no header, for a null value)."""
    if value is None:
        return None
    if type(value) is bool:
        return "true" if value else "false"
    return value if type(value) is str else str(value)


def header_values(headers: Mapping[str, tuple[str, str]], arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers (name -> text, not yet encoded) of a call with ``arguments``."""
    args = arguments if type(arguments) is dict else {}
    out: dict[str, str] = {}
    for header, (param, _kind) in headers.items():
        text = header_text(args.get(param))
        if text is not None:
            out[header] = text
    return out
