"""``sturdyrpc demo --http HOST:PORT`` (plain JSON-RPC at ``/``) and ``--mcp --http`` (MCP at ``/mcp``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

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


def _mcp_auth(auth_args: Any, host: str, port: int) -> dict[str, Any]:
    """The demo app's options for the ``--auth-*`` options (none without them): a resource server
    verifying JWTs, whose ``--auth-scopes`` every demo tool requires (so ``tools/call`` needs them)."""
    from ..auth.options import auth_from_args, split_scopes
    from ..transports.asgi import HTTPSecurity

    name = f"[{host}]" if ":" in host else host
    auth = auth_from_args(auth_args, f"http://{name}:{port}/mcp", server_wide_scopes=False)
    if auth is None:
        return {}
    return {"security": HTTPSecurity(auth=auth), "tool_scopes": split_scopes(auth_args.auth_scopes)}


def run_demo_http(address: str, *, mcp: bool, allow_remote: bool = False, auth_args: Any = None) -> int:
    try:
        host, port = parse_host_port(address)
    except ValueError as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}\n")
        return 2
    if mcp:
        from ..auth.options import AuthOptionsError

        try:
            options = _mcp_auth(auth_args, host, port) if auth_args is not None else {}
        except AuthOptionsError as exc:
            sys.stderr.write(f"sturdyrpc demo: {exc}\n")
            return 2
        app = make_mcp_demo_app(**options)
    else:
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
