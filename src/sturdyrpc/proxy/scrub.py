"""What guard puts in place of what a server must not say, and the names of what it contained,
sans I/O: pure functions of the messages.

- :func:`plain_error`: an error object that reveals the server's insides (a traceback, a file
  path, an exception class name: :func:`sturdyrpc.check.rules.leaks`, the rule ``check``
  applies) becomes the same code with a plain message and an incident id.
- :func:`plain_tool_result`: the same for the content of a failed tool's result.
- :func:`rule_of`: the ``check`` rule a server breaks when it does not refuse what guard refused.
"""

from __future__ import annotations

import secrets
from typing import Any

from ..check.rules import leaks

__all__ = ["Scrubbed", "plain_error", "plain_tool_result", "rule_of"]

#: The plain message put in place of one that reveals the server's insides.
_PLAIN = {-32700: "Parse error", -32600: "Invalid Request", -32601: "Method not found", -32602: "Invalid params",
          -32603: "Internal error"}


class Scrubbed:
    """A replacement: ``value`` to send, ``incident`` it is logged under, ``found`` what leaked."""

    __slots__ = ("value", "incident", "found")

    def __init__(self, value: Any, incident: str, found: list[str]) -> None:
        self.value = value
        self.incident = incident
        self.found = found


def plain_error(err: Any) -> Scrubbed | None:
    """The plain error for ``err`` (an error object of the server's), or None when it is fine."""
    found = leaks(err)
    if not found:
        return None
    incident = secrets.token_hex(4)
    code: int = err["code"] if type(err) is dict and type(err.get("code")) is int else -32603
    return Scrubbed({"code": code, "message": _PLAIN.get(code, "Server error"), "data": {"incident": incident}}, incident, found)


def plain_tool_result(result: dict[str, Any]) -> Scrubbed | None:
    """The plain result for a failed tool's ``result`` (``isError``), or None when it is fine."""
    found = leaks(result.get("content"))
    if not found:
        return None
    incident = secrets.token_hex(4)
    text = f"The tool failed with an internal error (incident {incident})"
    return Scrubbed({**result, "content": [{"type": "text", "text": text}]}, incident, found)


#: What a refusal answers, by the ``check`` rule a server breaks when it does not refuse it:
#: (code, a word of the error's reason or limit) -> rule; the first that matches.
_RULES_BY_ERROR: tuple[tuple[int, str, str], ...] = (
    (-32700, "", "framing.parse-error"),
    (-32600, "max_message_bytes", "robustness.huge-line"),
    (-32600, "max_depth", "robustness.deep-nesting"),
    (-32600, "max_batch", "robustness.huge-batch"),
    (-32600, "batches are not supported", "mcp.batch"),
    (-32600, "request id", "ids.invalid-type"),
    (-32600, "not initialized", "mcp.before-initialize"),
    (-32600, "duplicate id", "mcp.duplicate-id"),
    (-32602, "params must be an object", "mcp.params-array"),
    (-32602, "_meta", "mcp.meta-required"),
    (-32601, "", "messages.invalid-method"),
    (-32600, "", "messages.invalid-jsonrpc"),
)


def rule_of(err: dict[str, Any]) -> str:
    """The ``check`` rule behind a refusal guard answered with ``err`` (its error object)."""
    code = err.get("code")
    data = err.get("data")
    words = " ".join(str(v) for v in data.values()) if type(data) is dict else ""
    for c, word, rule in _RULES_BY_ERROR:
        if c == code and word in words:
            return rule
    if type(data) is dict and "supported" in data:
        return "mcp.unsupported-version"
    return f"error {code}"
