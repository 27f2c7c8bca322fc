"""The MCP demo over Streamable HTTP with room for many sessions, for bench_session_memory.py:
``sturdyrpc run bench/session_memory_server.py:app --http ... [--store URL]``."""

from __future__ import annotations

from typing import Any

from sturdyrpc.demos.mcp_http import make_demo_app
from sturdyrpc.mcp_http.server import StreamableHTTPApp

#: Sessions the server keeps before the cap evicts idle ones (the default is 1000).
MAX_SESSIONS = 50_000


def app(**options: Any) -> StreamableHTTPApp:
    """The demo app (``options`` from the command line: ``store``, ``security``, ...), capped at :data:`MAX_SESSIONS`."""
    return make_demo_app(max_sessions=MAX_SESSIONS, **options)
