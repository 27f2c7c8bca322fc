"""``sturdyrpc demo --http HOST:PORT`` (plain JSON-RPC at ``/``) and ``--mcp --http`` (MCP at ``/mcp``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..store import is_memory_url
from ..transports.serve_http import RemoteBindRefused, parse_host_port, run_uvicorn

__all__ = ["run_demo_http", "make_plain_demo_app", "make_mcp_demo_app"]

log = logging.getLogger("sturdyrpc")


def make_plain_demo_app() -> Any:
    """The plain JSON-RPC demo as an ASGI app (a factory, so uvicorn workers can each build one)."""
    from ..transports.http import JSONRPCHTTPApp
    from .jsonrpc import make_demo

    return JSONRPCHTTPApp(make_demo())


def make_mcp_demo_app() -> Any:
    """The MCP demo over Streamable HTTP at ``/mcp``."""
    from .mcp_http import make_demo_app

    return make_demo_app()


def run_demo_http(address: str, *, mcp: bool, allow_remote: bool = False, workers: int = 1, store: str | None = "memory",
                  stateless: bool = False) -> int:
    try:
        host, port = parse_host_port(address)
    except ValueError as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}\n")
        return 2
    if mcp and (workers != 1 or stateless or not is_memory_url(store)):
        return _run_mcp_workers(host, port, allow_remote=allow_remote, workers=workers, store=store, stateless=stateless)
    if not mcp and (workers != 1 or stateless or not is_memory_url(store)):
        sys.stderr.write("sturdyrpc demo: --workers, --store and --stateless need --mcp\n")
        return 2
    app = make_mcp_demo_app() if mcp else make_plain_demo_app()
    if allow_remote:
        # Reached from elsewhere, the Host header carries the server's public name: the
        # localhost-only Host check would refuse every request.
        app.security.allowed_hosts = None
        app.security.__post_init__()
    try:
        run_uvicorn(app, host, port, allow_remote=allow_remote)
    except RemoteBindRefused as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}; add --allow-remote to serve other hosts\n")
        return 2
    return 0


def _run_mcp_workers(host: str, port: int, *, allow_remote: bool, workers: int, store: str | None, stateless: bool) -> int:
    from ..mcp_http.workers import WorkersRefused, serve_mcp_workers

    target = "sturdyrpc.demos.mcp_http:make_stateless_demo_app" if stateless else "sturdyrpc.demos.mcp_http:make_demo_app"
    try:
        serve_mcp_workers(target, host, port, workers=workers, store=store, stateless=stateless, allow_remote=allow_remote)
    except (WorkersRefused, ValueError) as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}{'; add --allow-remote to serve other hosts' if isinstance(exc, RemoteBindRefused) else ''}\n")
        return 2
    except ImportError as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}\n")
        return 2
    return 0
