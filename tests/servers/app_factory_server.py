"""Factories that return an app, for ``sturdyrpc run module:factory --http`` (tests/integration/test_run_factories.py).

``make_app`` takes ``**options`` (``store``, ``stateless``, ``security``: what ``--store``,
``--stateless`` and ``--auth-*`` ask for) and returns the Streamable HTTP app; ``make_fixed_app``
takes none and returns one with its own settings; ``make_rpc_app`` returns a plain JSON-RPC app.
"""

from __future__ import annotations

from typing import Any

from sturdyrpc.dispatch import Dispatcher
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http.app import mcp_http_app
from sturdyrpc.transports.http import JSONRPCHTTPApp

server = MCPServer("factory-app", "1")


@server.tool()
async def echo(text: str) -> str:
    """Return ``text``."""
    return text


def make_app(**options: Any) -> Any:
    options.pop("tool_scopes", None)
    return mcp_http_app(server, json_response=True, **options)


def make_fixed_app() -> Any:
    return mcp_http_app(server, json_response=True)


def make_rpc_app() -> JSONRPCHTTPApp:
    rpc = Dispatcher()

    @rpc.method()
    def add(a: int, b: int) -> int:
        return a + b

    return JSONRPCHTTPApp(rpc)
