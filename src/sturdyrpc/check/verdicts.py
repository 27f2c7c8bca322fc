"""The rules of the checker as pure predicates on decoded messages, shared by ``check`` and the
live proxies (``sturdyrpc trace`` / ``guard``).

``check`` provokes a server and judges what comes back; ``trace`` watches real traffic and
judges every message as it passes. Both ask the same questions, so the questions live here once:
the rule texts (:data:`SPECS`, which the check decorators use) and the predicates that answer
them. Nothing here does I/O or knows about a probe or a pipe.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from .config import KNOWN_VERSIONS, MODERN_VERSION
from .driver import trim
from .model import CheckSpec, Level

__all__ = [
    "SPECS",
    "spec_args",
    "show",
    "response_problems",
    "message_problems",
    "jsonrpc_code_problem",
    "mcp_error_code_problems",
    "progress_problem",
    "initialize_result_problems",
    "tool_result_problems",
    "DEFINED_CODES",
    "Envelope",
    "UNSET",
    "decode_envelope",
]

MUST, SHOULD = Level.MUST, Level.SHOULD
_S4 = "JSON-RPC 2.0 §4 (Request object)"
_S41 = "JSON-RPC 2.0 §4.1 (Notification)"
_S5 = "JSON-RPC 2.0 §5 (Response object)"
_S51 = "JSON-RPC 2.0 §5.1 (Error object)"


def _mcp(path: str, version: str | None = None) -> str:
    return f"MCP {version or 'all versions'}: {path}"


def _spec(id: str, area: str, level: Level, title: str, rule: str, hint: str) -> CheckSpec:
    return CheckSpec(id, area, level, title, rule, hint)


#: Rules judged both by a ``check`` and on live traffic, by id. A check registered under one of
#: these ids takes its texts from here (:func:`spec_args`); the ids without a check
#: (``ids.unknown-reply``, ``ids.duplicate-reply``, ``messages.invalid-message``,
#: ``errors.code-range``, ``mcp.lifecycle``) are judged only on live traffic, where they can
#: happen without being provoked.
SPECS: dict[str, CheckSpec] = {
    s.id: s
    for s in (
        _spec(
            "framing.stdout-only-jsonrpc", "framing", MUST, "stdout carries only JSON-RPC messages, one per line",
            "MCP basic/transports (stdio: the server MUST NOT write anything to stdout that is not a valid MCP message); NDJSON framing",
            "send logs, banners and print() output to stderr; write each message as one compact line",
        ),
        _spec(
            "messages.response-shape", "messages", MUST, "replies are well-formed response objects",
            f"{_S5}; {_S51}",
            'write {"jsonrpc":"2.0","id":...} plus exactly one of "result"/"error"; error has integer code and string message',
        ),
        _spec(
            "messages.notification-silent", "messages", MUST, "a notification gets no reply, not even an error",
            _S41,
            "never write anything for a message without \"id\", even when its method is unknown or it fails",
        ),
        _spec(
            "messages.invalid-message", "messages", MUST, "requests and notifications are well-formed",
            f"{_S4}; {_S41}",
            'write {"jsonrpc":"2.0","method":"...","params":{...} or [...]} (plus "id" for a request)',
        ),
        _spec(
            "ids.unknown-reply", "ids", MUST, "a reply answers a request that was sent",
            f"{_S5} (id: the same as the value of the id member in the Request object)",
            "answer each request once with its own id; never invent ids or answer a cancelled request twice",
        ),
        _spec(
            "ids.duplicate-reply", "ids", MUST, "each request gets exactly one reply",
            f"{_S5} (a response is sent for each request, once)",
            "settle each request exactly once (guard against a second write after a timeout or an error)",
        ),
        _spec(
            "errors.code-range", "errors", MUST, "error codes in the reserved range are the defined ones",
            f"{_S51} (-32768..-32000 reserved; -32000..-32099 server errors)",
            "use -32700/-32600/-32601/-32602/-32603, -32000..-32099 for server errors, and codes outside -32768..-32000 for your own",
        ),
        _spec(
            "mcp.error-codes", "mcp", MUST, "error codes respect the MCP code ranges",
            _mcp("basic/index.mdx#error-codes (-32020..-32099 reserved; only -32020/-32021/-32022 defined; -32002 retired)", MODERN_VERSION),
            "use the standard codes; -32602 for a missing resource; no invented codes in -32020..-32099; data.requiredCapabilities with -32021",
        ),
        _spec(
            "mcp.progress", "mcp", MUST, "progress increases strictly and stops at the reply",
            _mcp("basic/utilities/progress.mdx (progress MUST increase; notifications MUST stop after completion)"),
            "send notifications/progress only for the request's progressToken, with a growing value, and never after the response",
        ),
        _spec(
            "mcp.call-tools", "mcp", MUST, "allowed tools answer with well-formed results",
            _mcp("server/tools.mdx (Calling Tools); schema.ts CallToolResult"),
            "return {content: [{type, ...}], isError?} (and structuredContent matching outputSchema when declared)",
        ),
        _spec(
            "mcp.initialize", "mcp", MUST, "initialize returns protocolVersion, capabilities and serverInfo",
            _mcp("basic/lifecycle.mdx (Initialization)", "2024-11-05..2025-11-25"),
            "answer initialize with {protocolVersion, capabilities, serverInfo: {name, version}}",
        ),
        _spec(
            "mcp.lifecycle", "mcp", MUST, "messages respect the lifecycle of the negotiated version",
            _mcp("basic/lifecycle.mdx (initialize first; only ping/logging before initialized); 2026-07-28: no handshake"),
            "answer initialize before anything else; send no requests but ping before notifications/initialized",
        ),
    )
}

#: The error codes JSON-RPC 2.0 defines in its reserved range.
DEFINED_CODES = frozenset({-32700, -32600, -32601, -32602, -32603})


def spec_args(id: str) -> tuple[str, str, Level, str, str, str]:
    """The positional arguments of the ``check`` decorator for the shared rule ``id``."""
    s = SPECS[id]
    return (s.id, s.area, s.level, s.title, s.rule, s.hint)


def show(value: Any, limit: int = 200) -> str:
    """A short JSON rendering of a decoded value."""
    try:
        return trim(msgspec.json.encode(value), limit)
    except (TypeError, ValueError, OverflowError):
        return trim(repr(value), limit)


def response_problems(v: Any, *, id_may_be_omitted: bool = False) -> list[str]:
    """Everything wrong with ``v`` as a JSON-RPC 2.0 response object (JSON-RPC 2.0 §5, §5.1)."""
    if type(v) is not dict:
        return [f"a response must be a JSON object, got {show(v, 60)}"]
    problems = []
    if v.get("jsonrpc") != "2.0" or type(v.get("jsonrpc")) is not str:
        problems.append('member "jsonrpc" must be exactly "2.0"' + ("" if "jsonrpc" in v else " (it is missing)"))
    if "id" not in v:
        if not id_may_be_omitted:
            problems.append('member "id" is missing (it must be present, null when the request id could not be read)')
    elif type(v["id"]) not in (str, int, float) and v["id"] is not None:
        problems.append(f'member "id" must be a string, a number or null, got {show(v["id"], 40)}')
    has_result, has_error = "result" in v, "error" in v
    if has_result == has_error:
        problems.append('exactly one of "result" and "error" must be present' + (" (both are)" if has_result else " (neither is)"))
    if has_error:
        err = v["error"]
        if type(err) is not dict:
            problems.append('"error" must be an object')
        else:
            if type(err.get("code")) is not int:
                problems.append(f'error "code" must be an integer, got {show(err.get("code"), 40)}')
            if type(err.get("message")) is not str:
                problems.append(f'error "message" must be a string, got {show(err.get("message"), 40)}')
            extra = set(err) - {"code", "message", "data"}
            if extra:
                problems.append(f"error object has members the spec does not define: {sorted(extra)}")
    extra_top = set(v) - {"jsonrpc", "id", "result", "error"}
    if extra_top:
        problems.append(f"response has members the spec does not define: {sorted(extra_top)}")
    return problems


def message_problems(v: dict[str, Any], *, mcp: bool = False) -> list[str]:
    """Everything wrong with ``v`` (a dict holding ``"method"``) as a request or notification (§4)."""
    problems = []
    if v.get("jsonrpc") != "2.0" or type(v.get("jsonrpc")) is not str:
        problems.append('member "jsonrpc" must be exactly "2.0"' + ("" if "jsonrpc" in v else " (it is missing)"))
    if type(v.get("method")) is not str:
        problems.append(f'member "method" must be a string, got {show(v.get("method"), 40)}')
    if "params" in v and type(v["params"]) not in (dict, list):
        problems.append(f'member "params" must be an object or an array, got {show(v["params"], 40)}')
    elif mcp and "params" in v and type(v["params"]) is not dict:
        problems.append('MCP params must be an object')
    if "id" in v:
        i = v["id"]
        if mcp and type(i) not in (str, int):
            problems.append(f"an MCP request id must be a string or an integer, got {show(i, 40)}")
        elif type(i) not in (str, int, float) and i is not None:
            problems.append(f'member "id" must be a string, a number or null, got {show(i, 40)}')
    extra = set(v) - {"jsonrpc", "method", "params", "id"}
    if extra:
        problems.append(f"message has members the spec does not define: {sorted(extra)}")
    return problems


def jsonrpc_code_problem(code: int) -> str | None:
    """Why ``code`` may not be used (JSON-RPC 2.0 §5.1), or None."""
    if -32768 <= code <= -32000 and code not in DEFINED_CODES and not -32099 <= code <= -32000:
        return f"code {code} is in the range JSON-RPC reserves for pre-defined errors but is not one of them"
    return None


def mcp_error_code_problems(code: int, data: Any, version: str | None) -> list[tuple[Level, str]]:
    """What is wrong with an error ``code`` (and its ``data``) under MCP ``version``, most serious
    first; the code policy of 2026-07-28 applies only there."""
    if version != MODERN_VERSION:
        return []
    out: list[tuple[Level, str]] = []
    if code == -32002:
        out.append((MUST, f"-32002 is retired in {MODERN_VERSION} (use -32602 for a missing resource)"))
    if -32099 <= code <= -32020 and code not in (-32020, -32021, -32022):
        out.append((MUST, f"code {code} is in the range reserved for MCP but not defined by it"))
    if code == -32021 and type((data if type(data) is dict else {}).get("requiredCapabilities")) is not dict:
        out.append((MUST, "-32021 must carry data.requiredCapabilities"))
    if -32019 <= code <= -32000:
        out.append((SHOULD, f"code {code} is in the legacy range new implementations SHOULD NOT use"))
    return out


def progress_problem(values: list[Any]) -> str | None:
    """Why a request's successive progress values break the rule (they must increase), or None."""
    for a, b in zip(values, values[1:], strict=False):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a):
            return f"progress must increase every time, got {show(values)}"
    return None


def tool_result_problems(result: Any, *, modern: bool) -> list[str]:
    """What is wrong with the result of a ``tools/call`` (``modern``: 2026-07-28, where every
    result names its ``resultType``; one that is not ``complete`` carries no content yet, nor
    does a 2025-11-25 ``CreateTaskResult``)."""
    if type(result) is not dict:
        return [f"the result must be an object, got {show(result)}"]
    problems = []
    kind = result.get("resultType")
    if modern and kind not in ("complete", "input_required", "task"):
        problems.append(f"the result has no valid resultType ({show(kind)})")
    content = result.get("content")
    if kind in (None, "complete") and "task" not in result and (type(content) is not list or not all(type(c) is dict and type(c.get("type")) is str for c in content)):
        problems.append(f"content must be an array of objects with a type, got {show(content)}")
    if "isError" in result and type(result["isError"]) is not bool:
        problems.append("isError must be a boolean")
    return problems


def initialize_result_problems(result: dict[str, Any], offered: str | None) -> list[str]:
    """What is wrong with the result of ``initialize`` when ``offered`` was the client's version."""
    problems = []
    if type(result.get("protocolVersion")) is not str:
        problems.append("protocolVersion is missing or not a string")
    if type(result.get("capabilities")) is not dict:
        problems.append("capabilities is missing or not an object")
    info = result.get("serverInfo")
    if type(info) is not dict or type(info.get("name")) is not str or type(info.get("version")) is not str:
        problems.append(f"serverInfo must be an object with string name and version, got {show(info)}")
    if not problems and result["protocolVersion"] != offered and result["protocolVersion"] not in KNOWN_VERSIONS:
        problems.append(f"offered {offered}, the server answered an unknown version {result['protocolVersion']!r}")
    return problems


# -- the cheap judge of the everyday message ------------------------------------------------------


class Envelope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The members of a JSON-RPC message, read by a typed decoder (:func:`decode_envelope`) that
    refuses, in C, most of what :func:`message_problems` and :func:`response_problems` would find:
    ``jsonrpc`` other than ``"2.0"``, a ``method`` that is no string, an ``id`` that is no string
    or integer (null, a fraction, an object), ``params`` that are neither object nor array, any
    other member. A member that is absent is :data:`UNSET`. Values are decoded as strictly as
    :func:`sturdyrpc.codec.decode` decodes them (UTF-8, numbers), so what decodes here is JSON
    it reads the same.

    What is left to look at, two cases that pass the rules (the live proxies' fast path; anything
    else goes to the predicates above, which say what is wrong):

    - a request or notification: ``method`` set, ``result`` and ``error`` absent;
      :func:`message_problems` passes it, with ``mcp=True`` too unless ``params`` is an array;
    - a success response: ``result`` and ``id`` set, ``method``, ``params`` and ``error``
      absent; :func:`response_problems` passes it.

    (An error response is never plain here: its code has rules of its own.)
    """

    jsonrpc: Literal["2.0"]
    method: str | UnsetType = UNSET
    id: int | str | UnsetType = UNSET
    params: dict[str, Any] | list[Any] | UnsetType = UNSET
    result: Any = UNSET
    error: Any = UNSET


#: ``decode_envelope(frame)``: an :class:`Envelope`, or an exception (``msgspec.MsgspecError``
#: for anything but one JSON object of the envelope's members and types, ``RecursionError`` for
#: deep nesting, ``TypeError`` for what is not bytes).
decode_envelope = msgspec.json.Decoder(Envelope).decode
