"""What tools, resources and prompts return: content blocks, :class:`ToolResult`, :class:`ToolError`,
and the prompt messages (:class:`Message`, :func:`UserMessage`, :func:`AssistantMessage`,
:class:`PromptResult`).

Plain helpers with no server state, so user code can build results without importing the
server, and every version rule about content (audio from 2025-03-26, resource links from
2025-06-18) lives next to the blocks it applies to.
"""

from __future__ import annotations

import base64
from typing import Any

from .. import codec, pydantic_bridge
from .versions import VersionRules

__all__ = [
    "ToolError",
    "ToolResult",
    "text_content",
    "image_content",
    "audio_content",
    "embedded_resource",
    "is_content",
    "to_content",
    "older_block",
    "Message",
    "UserMessage",
    "AssistantMessage",
    "PromptResult",
]


class ToolError(Exception):
    """Raise inside a tool to return ``isError: true`` with this message, shown as is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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
        """The ``CallToolResult`` object (before version adjustments)."""
        d: dict[str, Any] = {"content": self.content}
        if self.structured is not None:
            d["structuredContent"] = self.structured
        d["isError"] = self.is_error
        return d


_CONTENT_TYPES = {"text", "image", "audio", "resource", "resource_link"}


def is_content(v: Any) -> bool:
    """Whether ``v`` is a content block (a dict with a known ``type``)."""
    return type(v) is dict and v.get("type") in _CONTENT_TYPES


def to_content(value: Any) -> list[dict[str, Any]]:
    """Content blocks for a value a tool returned without an output schema."""
    if value is None:
        return []
    if isinstance(value, str):
        return [text_content(value)]
    if is_content(value):
        return [value]
    if type(value) is list and all(is_content(x) for x in value):
        return value
    return [text_content(codec.encode(pydantic_bridge.to_builtins(value)).decode())]


def older_block(block: Any, rules: VersionRules) -> Any:
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


def _block(content: Any) -> dict[str, Any]:
    """One content block of a prompt message: a block as is (a dict, or a model such as the
    official SDK's ``TextContent``), a ``str`` as text, anything else as JSON text."""
    if isinstance(content, str):
        return text_content(content)
    data = content if type(content) is dict else pydantic_bridge.to_builtins(content)
    if is_content(data):
        return dict(data)
    return text_content(codec.encode(data).decode())


class Message:
    """One message of a prompt: ``Message("Review this")`` (role ``user``),
    ``Message("Looks fine.", role="assistant")``, ``Message({"k": 1})`` (JSON text), or a
    content block (``image_content(...)``). FastMCP's ``Message``."""

    __slots__ = ("role", "content")

    def __init__(self, content: Any, role: str = "user") -> None:
        if role not in ("user", "assistant"):
            raise ValueError(f"a prompt message's role is 'user' or 'assistant', got {role!r}")
        self.role = role
        self.content = _block(content)

    def to_dict(self) -> dict[str, Any]:
        """The ``PromptMessage`` object."""
        return {"role": self.role, "content": self.content}


def UserMessage(content: Any) -> Message:  # FastMCP's name (a function here)
    """A prompt message with role ``user`` (:class:`Message`)."""
    return Message(content, "user")


def AssistantMessage(content: Any) -> Message:
    """A prompt message with role ``assistant`` (:class:`Message`)."""
    return Message(content, "assistant")


class PromptResult:
    """A prompt's whole result: ``PromptResult("text")`` or ``PromptResult([Message(...), ...],
    description=..., meta=...)`` (FastMCP's ``PromptResult``)."""

    __slots__ = ("messages", "description", "meta")

    def __init__(self, messages: str | list[Message], description: str | None = None, meta: dict[str, Any] | None = None) -> None:
        if isinstance(messages, str):
            messages = [Message(messages)]
        if not isinstance(messages, list) or not all(isinstance(m, Message) for m in messages):
            raise TypeError("PromptResult(messages): a string or a list of Message (wrap each value: Message(value))")
        self.messages = messages
        self.description = description
        self.meta = meta

    def to_dict(self, description: str | None = None) -> dict[str, Any]:
        """The ``GetPromptResult`` object (``description``: the prompt's, unless this result has its own)."""
        out: dict[str, Any] = {"messages": [m.to_dict() for m in self.messages]}
        if self.description or description:
            out["description"] = self.description or description
        if self.meta:
            out["_meta"] = self.meta
        return out
