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


def make_mcp_demo_app(**options: Any) -> Any:
    """The MCP demo over Streamable HTTP at ``/mcp`` (options: see ``make_demo_app``)."""
    from .mcp_http import make_demo_app

    return make_demo_app(**options)


def run_demo_http(address: str, *, mcp: bool, allow_remote: bool = False, workers: int = 1, store: str | None = "memory",
                  stateless: bool = False, auth_args: Any = None) -> int:
    try:
        host, port = parse_host_port(address)
    except ValueError as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}\n")
        return 2
    if mcp:
        return _run_mcp(host, port, allow_remote=allow_remote, workers=workers, store=store, stateless=stateless, auth_args=auth_args)
    if workers != 1 or stateless or not is_memory_url(store) or (auth_args is not None and _auth_options(auth_args)):
        sys.stderr.write("sturdyrpc demo: --workers, --store, --stateless and --auth-* need --mcp\n")
        return 2
    app = make_plain_demo_app()
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


def _auth_options(auth_args: Any) -> dict[str, Any] | None:
    from ..mcp_http.workers import AUTH_KEYS

    options = {k: getattr(auth_args, k, None) for k in AUTH_KEYS}
    return options if any(options.values()) else None


def _run_mcp(host: str, port: int, *, allow_remote: bool, workers: int, store: str | None, stateless: bool, auth_args: Any) -> int:
    from ..auth.options import AuthOptionsError
    from ..mcp_http.workers import WorkersRefused, serve_mcp_workers

    target = "sturdyrpc.demos.mcp_http:make_stateless_demo_app" if stateless else "sturdyrpc.demos.mcp_http:make_demo_app"
    auth = _auth_options(auth_args) if auth_args is not None else None
    if auth is not None:
        # The demo's --auth-scopes guard its tools (tools/call), not initialize or tools/list.
        auth["server_wide"] = False
    try:
        serve_mcp_workers(target, host, port, workers=workers, store=store, stateless=stateless, allow_remote=allow_remote, auth=auth)
    except (WorkersRefused, AuthOptionsError, ValueError) as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}{'; add --allow-remote to serve other hosts' if isinstance(exc, RemoteBindRefused) else ''}\n")
        return 2
    return 0
