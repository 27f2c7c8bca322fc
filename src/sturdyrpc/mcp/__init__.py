"""MCP (Model Context Protocol) on sturdyrpc: the rules as a profile, a server and a client.

- :class:`MCPProfile`: MCP's rules per connection and negotiated version;
- :class:`MCPServer`: tools, resources, prompts and completions on typed functions, served
  over any message transport (stdio: :func:`run_mcp_stdio`) or statelessly (2026-07-28);
- :func:`connect`: a client for an MCP server started as a subprocess;
- :func:`create_proxy`: a server fronting a running one (a URL, a command line, an ``MCPServer``).
"""

from .content import AssistantMessage, Message, PromptResult, UserMessage
from .profile import MCPProfile, MissingRequiredClientCapability, UnsupportedProtocolVersion
from .server import (
    MCPContext,
    MCPServer,
    SessionState,
    ToolError,
    ToolResult,
    audio_content,
    embedded_resource,
    image_content,
    text_content,
)
from .stdio import run_mcp_stdio, serve_mcp_stdio
from .versions import HANDSHAKE_VERSIONS, LATEST, MODERN_VERSIONS, SUPPORTED_VERSIONS


def __getattr__(name: str) -> object:
    # The client is imported on first use, so servers do not pay for it at start-up.
    if name in ("connect", "MCPClient", "NegotiationFailed", "PaginationError"):
        from . import client

        return getattr(client, name)
    if name == "create_proxy":  # with the client it connects with, on first use
        from .proxying import create_proxy

        return create_proxy
    if name == "Session":  # the old name of SessionState (one `Session` per package: HTTP's)
        import warnings

        warnings.warn("sturdyrpc.mcp.Session is now sturdyrpc.mcp.SessionState", DeprecationWarning, stacklevel=2)
        return SessionState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "MCPProfile",
    "UnsupportedProtocolVersion",
    "MissingRequiredClientCapability",
    "MCPServer",
    "MCPContext",
    "SessionState",
    "ToolError",
    "ToolResult",
    "text_content",
    "image_content",
    "audio_content",
    "embedded_resource",
    "Message",
    "UserMessage",
    "AssistantMessage",
    "PromptResult",
    "serve_mcp_stdio",
    "run_mcp_stdio",
    "SUPPORTED_VERSIONS",
    "HANDSHAKE_VERSIONS",
    "MODERN_VERSIONS",
    "LATEST",
    "connect",
    "MCPClient",
    "NegotiationFailed",
    "PaginationError",
    "create_proxy",
]
