"""Strict validation of what the server wrote, and the check registry.

Everything read is judged here, by the letter of JSON-RPC 2.0, without the project's own
message classes: a checker that shared the server's leniency would share its bugs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .config import same_id
from .model import Check, CheckFailed, CheckSpec, Level
from .probe import Probe
from .verdicts import response_problems, show

__all__ = [
    "REGISTRY",
    "check",
    "JSONRPC_SPEC",
    "show",
    "response_problems",
    "expect_error",
    "expect_result",
    "expect_id",
    "leaks",
    "values_equal",
    "NULL",
    "ANY",
    "ANY_ERROR",
]

JSONRPC_SPEC = "JSON-RPC 2.0"

#: Every check, in definition order (the report sorts by area).
REGISTRY: list[Check] = []

NULL: Any = object()  # "the id must be null"
ANY: Any = object()  # "any id"
ANY_ERROR: tuple[int, ...] = ()  # "any error code" (for checks about something else, e.g. the id)


def check(
    id: str,
    area: str,
    level: Level,
    title: str,
    rule: str,
    hint: str,
    *,
    group: str | None = None,
    handshake: bool = True,
    applies: Callable[[Any], str | None] | None = None,
    budget: float = 1.0,
    stdio_only: str = "",
) -> Callable[[Callable[[Probe], None]], Callable[[Probe], None]]:
    """Register ``fn`` as a check. ``group`` defaults to the area (a shared process per area)."""

    def deco(fn: Callable[[Probe], None]) -> Callable[[Probe], None]:
        spec = CheckSpec(id, area, level, title, rule, hint)
        REGISTRY.append(Check(spec, fn, group or area, handshake, applies, budget, stdio_only))
        return fn

    return deco


def _validate(reply: Any, *, id_may_be_omitted: bool = False) -> dict[str, Any]:
    problems = response_problems(reply, id_may_be_omitted=id_may_be_omitted)
    if problems:
        raise CheckFailed(f"malformed response {show(reply)}: " + "; ".join(problems))
    assert type(reply) is dict
    return reply


def expect_id(reply: dict[str, Any], id: Any, *, id_may_be_omitted: bool = False) -> None:
    """The reply's id must be exactly ``id`` (type and value); ``NULL``: null (or omitted where allowed)."""
    if id is ANY:
        return
    if id is NULL:
        if "id" not in reply and id_may_be_omitted:
            return
        if reply.get("id", 0) is not None:
            raise CheckFailed(f"the id must be null (the request's id could not be read), got {show(reply.get('id'), 60)}")
        return
    if "id" not in reply or not same_id(reply["id"], id):
        got = reply.get("id", "<missing>")
        kind = f" ({type(got).__name__} instead of {type(id).__name__})" if got == id or str(got) == str(id) else ""
        raise CheckFailed(f"the id must come back exactly as sent, {show(id, 60)}; got {show(got, 60)}{kind}")


def expect_error(
    reply: Any,
    codes: int | tuple[int, ...],
    id: Any = ANY,
    *,
    also_ids: tuple[Any, ...] = (),
    id_may_be_omitted: bool = False,
) -> dict[str, Any]:
    """``reply`` must be a well-formed error response with one of ``codes`` and the given id."""
    reply = _validate(reply, id_may_be_omitted=id_may_be_omitted)
    codes = (codes,) if isinstance(codes, int) else codes
    if "error" not in reply:
        raise CheckFailed(f"expected error {' or '.join(map(str, codes)) or 'response'}, got a result: {show(reply)}")
    code = reply["error"]["code"]
    if codes and code not in codes:
        raise CheckFailed(f"expected error code {' or '.join(map(str, codes))}, got {code} ({show(reply['error'].get('message'), 60)})")
    if not any("id" in reply and same_id(reply["id"], i) for i in also_ids):
        expect_id(reply, id, id_may_be_omitted=id_may_be_omitted)
    return dict(reply)


def expect_result(reply: Any, id: Any = ANY) -> Any:
    """``reply`` must be a well-formed success response with the given id; returns the result."""
    reply = _validate(reply)
    if "error" in reply:
        raise CheckFailed(f"expected a result, got error {reply['error']['code']}: {show(reply['error'].get('message'), 80)}")
    expect_id(reply, id)
    return reply["result"]


def values_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values, types included (``1`` is not ``1.0``, ``True`` is not ``1``)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


_LEAKS = [
    (re.compile(r"Traceback \(most recent call last\)"), "a Python traceback"),
    (re.compile(r'File "[^"]+", line \d+'), "a traceback frame"),
    (re.compile(r"\bat [\w.<>$]+ \(?[^()\s]+:\d+:\d+\)?"), "a JavaScript stack frame"),
    (re.compile(r"goroutine \d+ \["), "a Go stack dump"),
    (re.compile(r"(?:[A-Za-z]:\\|/)(?:[\w.@+-]+[/\\])+[\w.@+-]+\.(?:py|pyc|js|mjs|ts|go|rs|java|rb|php|cs)\b"), "a source file path"),
    (re.compile(r"(?:^|[\s'\"(=])/(?:home|root|usr|etc|var|opt|srv|tmp|Users|private|app|work)/[\w.@+/-]*"), "an absolute file path"),
    (re.compile(r"\b(?:site-packages|node_modules|dist-packages)\b"), "an install path"),
    (re.compile(r"\b[A-Z][A-Za-z0-9_]*(?:Error|Exception)\b"), "an exception class name"),
    (re.compile(r"<(?:class|function|module|built-in) '?[\w.]+"), "a Python object repr"),
    (re.compile(r"\bobject at 0x[0-9a-f]{6,}"), "a memory address"),
]


def _strings(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            out.extend(str(k) for k in v)
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
        elif v is not None:
            out.append(str(v))
    return out


def leaks(error_or_value: Any, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """What in an error object (or any value) reveals the server's insides, one line per finding."""
    text = "\n".join(_strings(error_or_value))
    for s in ignore:
        text = text.replace(s, "")
    found = []
    for pattern, what in _LEAKS:
        m = pattern.search(text)
        if m:
            found.append(f"{what}: {m.group(0).strip()[:80]!r}")
    return found
