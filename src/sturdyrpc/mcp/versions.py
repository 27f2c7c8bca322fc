"""The MCP protocol versions this package speaks, and what differs between them.

Each version is described by a :class:`VersionRules` record of plain flags, so code
asks "does the negotiated version have X?" instead of comparing date strings.
"""

from __future__ import annotations

__all__ = [
    "VersionRules",
    "RULES",
    "SUPPORTED_VERSIONS",
    "HANDSHAKE_VERSIONS",
    "MODERN_VERSIONS",
    "LATEST",
    "LATEST_HANDSHAKE",
    "rules_for",
    "negotiate_handshake",
    "META_PROTOCOL_VERSION",
    "META_CLIENT_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_SERVER_INFO",
    "META_LOG_LEVEL",
]

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"


class VersionRules:
    """The rules of one MCP protocol version (see ``reference/mcp-rules.md``); read-only by convention."""

    __slots__ = (
        "version", "batches", "omit_unreadable_id", "stateless", "ping", "server_requests", "elicitation", "result_type",
        "resource_not_found", "progress_message", "structured_output", "audio", "validation_as_tool_error", "set_level", "icons", "tasks",
    )

    version: str
    #: Arrays are served as batches (2025-03-26 only); elsewhere ONE -32600 and nothing runs.
    batches: bool
    #: An error answering an unreadable id leaves ``id`` out (schema ``id?``) instead of null.
    omit_unreadable_id: bool
    #: No handshake: version and client capabilities in every request's ``_meta`` (2026-07-28).
    stateless: bool
    #: ``ping`` exists (removed in 2026-07-28).
    ping: bool
    #: The server may send requests to the client (sampling, roots, elicitation) over the connection.
    server_requests: bool
    #: ``elicitation/create`` exists.
    elicitation: bool
    #: Results carry ``resultType`` (2026-07-28).
    result_type: bool
    #: Error code for a resource that does not exist (-32002 until 2025-11-25, -32602 after).
    resource_not_found: int
    #: ``notifications/progress`` may carry ``message``.
    progress_message: bool
    #: Tools may declare ``outputSchema`` and return ``structuredContent``; ``title`` fields exist.
    structured_output: bool
    #: Audio content and tool annotations exist; the ``completions`` capability exists.
    audio: bool
    #: Tool input-validation failures are tool results with ``isError`` (SEP-1303) rather than -32602.
    validation_as_tool_error: bool
    #: ``logging/setLevel`` exists (2026-07-28 uses the per-request ``_meta`` log level instead).
    set_level: bool
    #: ``icons`` fields exist.
    icons: bool
    #: Tasks as a core feature (2025-11-25 only: ``params.task``, ``tasks/get|result|list|cancel``);
    #: 2026-07-28 has them as the ``io.modelcontextprotocol/tasks`` extension instead.
    tasks: bool

    def __init__(self, **flags: object) -> None:
        for name in self.__slots__:
            setattr(self, name, flags[name])

    def __repr__(self) -> str:
        return f"VersionRules({self.version!r})"


def _rules(version: str) -> VersionRules:
    order = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    i = order.index(version)
    return VersionRules(
        version=version,
        batches=version == "2025-03-26",
        omit_unreadable_id=i >= 3,
        stateless=i >= 4,
        ping=i <= 3,
        server_requests=i <= 3,
        elicitation=i >= 2,
        result_type=i >= 4,
        resource_not_found=-32602 if i >= 4 else -32002,
        progress_message=i >= 1,
        structured_output=i >= 2,
        audio=i >= 1,
        validation_as_tool_error=i >= 3,
        set_level=i <= 3,
        icons=i >= 3,
        tasks=i == 3,
    )


#: Every supported version, oldest first.
SUPPORTED_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
#: Versions negotiated with ``initialize``.
HANDSHAKE_VERSIONS: tuple[str, ...] = SUPPORTED_VERSIONS[:4]
#: Stateless versions (per-request ``_meta``, ``server/discover``).
MODERN_VERSIONS: tuple[str, ...] = SUPPORTED_VERSIONS[4:]
LATEST = SUPPORTED_VERSIONS[-1]
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]

RULES: dict[str, VersionRules] = {v: _rules(v) for v in SUPPORTED_VERSIONS}


def rules_for(version: str) -> VersionRules:
    """The rules of ``version`` (KeyError for a version this package does not speak)."""
    return RULES[version]


def negotiate_handshake(requested: object, offered: tuple[str, ...] = HANDSHAKE_VERSIONS) -> str:
    """The version an ``initialize`` reply names: the client's if supported, else our latest handshake one."""
    if isinstance(requested, str) and requested in offered:
        return requested
    return offered[-1]
