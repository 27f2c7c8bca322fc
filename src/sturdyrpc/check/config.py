"""What a run is configured with and learns about the server, and the protocol constants every
part of the checker shares. Imports nothing from the checker (everything else imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .._version import __version__

__all__ = [
    "Config",
    "SENTINEL_METHOD",
    "CLIENT_INFO",
    "HANDSHAKE_VERSIONS",
    "MODERN_VERSION",
    "KNOWN_VERSIONS",
    "STARTUP_TIMEOUT",
    "id_key",
    "same_id",
    "modern_meta",
    "is_local_url",
]

SENTINEL_METHOD = "sturdyrpc.check/no-such-method"
CLIENT_INFO = {"name": "sturdyrpc-check", "version": __version__}
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
KNOWN_VERSIONS = (*HANDSHAKE_VERSIONS, MODERN_VERSION)
#: How long a freshly started server may take to answer its first request.
STARTUP_TIMEOUT = 30.0

def is_local_url(url: str) -> bool:
    """True for http(s) URLs on 127.0.0.1, ::1 or localhost."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def id_key(value: Any) -> tuple[str, Any]:
    """A hashable key that tells ``"7"``, ``7``, ``7.0`` and ``True`` apart."""
    return (type(value).__name__, value if not isinstance(value, (dict, list)) else repr(value))


def same_id(a: Any, b: Any) -> bool:
    """Exactly the same JSON value and type (``1 == 1.0 == True`` in Python, but not on the wire)."""
    return type(a) is type(b) and a == b


@dataclass
class Config:
    """Options of a run, and what detection learnt about the server."""

    command: list[str]
    timeout: float = 5.0
    echo_method: str | None = None
    call_tools: set[str] | None = None  # None: none; {"*"}: all
    leak_probe: str | None = None
    slow: str | None = None
    mcp: bool | None = None  # None: detect
    protocol: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None  # check a running HTTP server instead of starting ``command``
    # Filled in by detection:
    is_mcp: bool = False
    version: str | None = None  # the MCP version the checks speak
    handshake_versions: list[str] = field(default_factory=list)  # what initialize answered
    discover_versions: list[str] = field(default_factory=list)  # what server/discover listed
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    startup_seconds: float = 0.0  # how long detection waited for the first reply
    startup_timeout: float = STARTUP_TIMEOUT  # lowered once the server has failed to answer a first request

    @property
    def modern(self) -> bool:
        """True when the checks speak MCP 2026-07-28 (no handshake, ``_meta`` on every request)."""
        return self.is_mcp and self.version == MODERN_VERSION

    def tool_allowed(self, name: str) -> bool:
        if name == self.slow:
            return True
        return self.call_tools is not None and ("*" in self.call_tools or name in self.call_tools)


def modern_meta(version: str = MODERN_VERSION) -> dict[str, Any]:
    """The ``_meta`` every 2026-07-28 request carries."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }
