"""MCP over Streamable HTTP: an ASGI server for every protocol version, and a client.

- :func:`mcp_http_app`: the ASGI app serving an :class:`~sturdyrpc.mcp.MCPServer` at one
  endpoint (sessions, SSE, resumability for 2025-03-26..2025-11-25; stateless 2026-07-28);
- :class:`StreamableHTTPApp`: the same for any session runner;
- :class:`EventStore` / :class:`MemoryEventStore`: where SSE events are kept for resumption;
- :func:`close_current_stream`: from a handler, close its SSE response (SSE polling).
"""

from .app import mcp_http_app
from .events import EventStore, MemoryEventStore
from .server import StreamableHTTPApp
from .session import close_current_stream

__all__ = ["mcp_http_app", "StreamableHTTPApp", "EventStore", "MemoryEventStore", "close_current_stream"]
