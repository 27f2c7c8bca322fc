"""``sturdyrpc demo --http HOST:PORT`` (plain JSON-RPC at ``/``), ``--mcp --http`` (MCP at ``/mcp``) and
``--conformance --http`` (the conformance fixture server, at ``/mcp``).

Both go through :func:`sturdyrpc.mcp_http.workers.serve_mcp_workers`, so that ``--auth-*``,
``--allow-host``, ``--trusted-proxy`` and ``--workers`` apply to either demo the same way.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from ..store import is_memory_url
from ..transports.serve_http import RemoteBindRefused, parse_host_port

__all__ = ["run_demo_http", "make_plain_demo_app", "make_mcp_demo_app"]

log = logging.getLogger("sturdyrpc")


def make_plain_demo_app(*, security: Any = None, **_options: Any) -> Any:
    """The plain JSON-RPC demo as an ASGI app (a factory, so uvicorn workers can each build one);
    ``security``: its :class:`~sturdyrpc.transports.asgi.HTTPSecurity` (the launcher's options)."""
    from ..transports.http import JSONRPCHTTPApp
    from .jsonrpc import make_demo

    return JSONRPCHTTPApp(make_demo(), security=security)


def make_mcp_demo_app(**options: Any) -> Any:
    """The MCP demo over Streamable HTTP at ``/mcp`` (options: see ``make_demo_app``)."""
    from .mcp_http import make_demo_app

    return make_demo_app(**options)


def run_demo_http(address: str, *, mcp: bool, conformance: bool = False, allow_remote: bool = False, workers: int = 1, store: str | None = "memory",
                  stateless: bool = False, auth_args: Any = None, http: Mapping[str, Any] | None = None) -> int:
    try:
        host, port = parse_host_port(address)
    except ValueError as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}\n")
        return 2
    if not mcp and (stateless or not is_memory_url(store)):
        sys.stderr.write("sturdyrpc demo: --store and --stateless need --mcp\n")
        return 2
    from ..auth.options import AuthOptionsError
    from ..mcp_http.workers import WorkersRefused, serve_mcp_workers

    if conformance:
        mcp = True
    if conformance and stateless:
        sys.stderr.write("sturdyrpc demo: --conformance serves with sessions (the suite tests both eras); drop --stateless\n")
        return 2
    if conformance:
        target = "sturdyrpc.demos.conformance_server:make_conformance_app"
    elif mcp:
        target = "sturdyrpc.demos.mcp_http:make_stateless_demo_app" if stateless else "sturdyrpc.demos.mcp_http:make_demo_app"
    else:
        target = "sturdyrpc.demos.jsonrpc:make_demo"  # a Dispatcher: served at /, its audience the server's root URL
        stateless = True  # plain JSON-RPC keeps nothing between requests: any worker answers any POST
    auth = _auth_options(auth_args) if auth_args is not None else None
    if auth is not None and mcp:
        # The demo's --auth-scopes guard its tools (tools/call), not initialize or tools/list.
        auth["server_wide"] = False
    try:
        serve_mcp_workers(target, host, port, workers=workers, store=store, stateless=stateless, allow_remote=allow_remote,
                          auth=auth, http=http)
    except (WorkersRefused, AuthOptionsError, ValueError) as exc:
        sys.stderr.write(f"sturdyrpc demo: {exc}{'; add --allow-remote to serve other hosts' if isinstance(exc, RemoteBindRefused) else ''}\n")
        return 2
    return 0


def _auth_options(auth_args: Any) -> dict[str, Any] | None:
    from ..mcp_http.workers import AUTH_KEYS

    options = {k: getattr(auth_args, k, None) for k in AUTH_KEYS}
    return options if any(options.values()) else None
