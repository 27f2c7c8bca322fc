"""The MCP demo server over Streamable HTTP (``sturdyrpc demo --mcp --http HOST:PORT``, at ``/mcp``).

The stdio demo's server object, plus ``test_reconnection``: the conformance suite's SSE polling
fixture (SEP-1699), which only makes sense where there is an SSE stream to close.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any

from ..mcp import MCPServer
from ..mcp_http import StreamableHTTPApp, close_current_stream, mcp_http_app
from .mcp import make_mcp_demo

__all__ = ["make_demo_app", "make_stateless_demo_app"]


def make_demo_app(*, tool_scopes: Iterable[str] = (), server: MCPServer | None = None, **options: Any) -> StreamableHTTPApp:
    """The demo app; ``tool_scopes``: OAuth scopes every tool requires (with an auth ``security``);
    ``server``: the MCP server to serve (default: a new :func:`~sturdyrpc.demos.mcp.make_mcp_demo`)."""
    if server is None:
        server = make_mcp_demo()

    @server.tool()
    async def test_reconnection() -> str:
        """Closes its SSE stream mid-call; the result arrives after the client resumes (Last-Event-ID)."""
        close_current_stream()
        await asyncio.sleep(0.2)
        return "Reconnection test completed successfully"

    if tool_scopes:
        for tool in server.tools.values():
            tool.scopes = tool.scopes | frozenset(tool_scopes)
    options.setdefault("path", "/mcp")
    return mcp_http_app(server, **options)


def make_stateless_demo_app(*, tool_scopes: Iterable[str] = (), **options: Any) -> StreamableHTTPApp:
    """The demo without sessions, for several workers (``uvicorn --factory --workers N``).

    Adds a ``pid`` tool naming the worker process that answered, to show requests spread out.
    ``options``: as for :func:`make_demo_app` (``stateless`` is always on).
    """
    server = make_mcp_demo()

    @server.tool()
    async def pid() -> str:
        """The id of the worker process serving this request."""
        return str(os.getpid())

    if tool_scopes:
        for tool in server.tools.values():
            tool.scopes = tool.scopes | frozenset(tool_scopes)
    options.update(path="/mcp", stateless=True)
    options.setdefault("json_response", True)
    return mcp_http_app(server, **options)
