"""``sturdyrpc run module:attr [--http HOST:PORT] [--workers N]``: serve your own server.

``module`` is an importable module name (the current directory comes first on the path) or a
path to a ``.py`` file; ``attr`` names an :class:`~sturdyrpc.mcp.MCPServer` or a plain
:class:`~sturdyrpc.dispatch.Dispatcher` in it (dotted for nested attributes), or a function
that returns one. With ``--http`` the function may also return the ASGI app itself (a
Streamable HTTP app, or a ``JSONRPCHTTPApp``); one taking ``**options`` is called with what the
command line asks for (``store``, ``stateless``, ``security`` for ``--auth-*``, ``--allow-host``
and ``--trusted-proxy``), and an app built without that ``security`` while those options are
given is refused (it would serve without them). Without ``:attr`` the first of ``mcp``,
``server``, ``app``, ``rpc`` that holds one is served.

Over stdio (the default) nothing but protocol is written to stdout: output of the module while
it is imported goes to stderr, as every later ``print`` of a handler does. With ``--http`` the
server is served on uvicorn (MCP: Streamable HTTP at ``/mcp``; a Dispatcher: plain JSON-RPC
over HTTP POST). ``--workers N`` starts N uvicorn worker processes on one port, each importing the target
and running its own lifespan (:func:`sturdyrpc.mcp_http.workers.serve_mcp_workers`). For an
MCPServer, N > 1 needs the sessions in a shared store (``--store redis://HOST:PORT/DB``) or no
sessions (``--stateless``), and is refused otherwise; a Dispatcher keeps nothing between requests.
``--auth-*``, ``--allow-host``, ``--trusted-proxy`` and ``--keepalive`` apply to whatever is
served, with any number of workers (docs/HTTP.md).

A target that cannot be imported or found is one line on stderr and exit 2; a lifespan whose
startup fails stops the server with its message and a non-zero exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..auth.options import AuthOptionsError, add_auth_arguments, auth_requested
from ..targets import TargetError
from ..targets import load_target as _load
from . import EXIT_USAGE

__all__ = ["register", "load_target", "TargetError", "add_http_arguments", "http_options"]

_DEFAULT_ATTRS = ("mcp", "server", "app", "rpc")


def register(sub: Any) -> None:
    r = sub.add_parser("run", help="serve your MCPServer or Dispatcher: sturdyrpc run module:attr [--http HOST:PORT]",
                       description="Serve an MCPServer (or a plain Dispatcher) from your code over stdio or HTTP.")
    add_target_arguments(r)
    r.add_argument("--workers", type=int, default=1, metavar="N", help="with --http: N worker processes on one port (default 1)")
    r.add_argument("--store", metavar="URL", default="memory",
                   help="with --http: where MCP sessions live: memory (default) or redis://HOST:PORT/DB (shared by workers)")
    r.add_argument("--stateless", action="store_true", help="with --http: MCP without sessions (any worker answers any POST)")
    add_http_arguments(r)
    add_auth_arguments(r)
    r.set_defaults(func=run)


def add_http_arguments(p: argparse.ArgumentParser) -> None:
    """``--allow-host``, ``--trusted-proxy``, ``--keepalive`` and ``--loop`` (``run`` and ``demo``)."""
    from ..transports.loops import LOOP_ENV, LOOPS

    g = p.add_argument_group("HTTP (with --http)")
    g.add_argument("--allow-host", metavar="HOST", action="append", default=[],
                   help="also answer requests whose Host names HOST (repeatable; localhost names and the bound "
                        "address always; with --allow-remote any IP address too)")
    g.add_argument("--trusted-proxy", metavar="ADDR[/BITS]", action="append", default=[],
                   help="a reverse proxy's address or network whose X-Forwarded-Host and X-Forwarded-Proto are "
                        "believed (repeatable); anyone else's X-Forwarded-* are ignored")
    g.add_argument("--keepalive", metavar="SECONDS", type=float, default=None,
                   help="MCP: seconds of silence after which an open SSE stream gets a keep-alive comment (default 15)")
    g.add_argument("--loop", choices=LOOPS, default=None,
                   help=f"the event loop of the server and its workers (default: ${LOOP_ENV}, else auto: uvloop when installed)")


def http_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of :func:`add_http_arguments` as ``serve_mcp_workers(http=...)`` takes them
    (only those given)."""
    out: dict[str, Any] = {}
    if getattr(args, "allow_host", None):
        out["allow_hosts"] = list(args.allow_host)
    if getattr(args, "trusted_proxy", None):
        out["trusted_proxies"] = list(args.trusted_proxy)
    if getattr(args, "keepalive", None) is not None:
        out["keepalive"] = args.keepalive
    if getattr(args, "loop", None) is not None:
        out["loop"] = args.loop
    return out


def add_target_arguments(p: argparse.ArgumentParser, *, http_required: bool = False) -> None:
    """The arguments ``run`` and ``dev`` share (``dev`` serves over HTTP only: ``http_required``)."""
    p.add_argument("target", metavar="module:attr", help="what to serve: module (or file.py) and attribute")
    p.add_argument("--http", metavar="HOST:PORT", required=http_required,
                   help="serve over HTTP (required: a stdio client cannot follow restarts)" if http_required
                   else "serve over HTTP instead of stdio")
    p.add_argument("--allow-remote", action="store_true", help="with --http: allow a non-loopback bind address")


def _fail(command: str, message: str) -> int:
    sys.stderr.write(f"sturdyrpc {command}: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def load_target(spec: str) -> Any:
    """Import ``module:attr`` and return the MCPServer or Dispatcher it names (raises :class:`TargetError`)."""
    from ..dispatch import Dispatcher
    from ..mcp.server import MCPServer

    return _load(spec, (MCPServer, Dispatcher), default_attrs=_DEFAULT_ATTRS)


def run(args: argparse.Namespace) -> int:
    command = args.command
    if args.workers < 1:
        return _fail(command, "--workers must be at least 1")
    if args.workers > 1 and not args.http:
        return _fail(command, "--workers needs --http (stdio has one client)")
    if auth_requested(args) and not args.http:
        return _fail(command, "the --auth-* options need --http (stdio has no tokens)")
    if http_options(args) and not args.http:
        return _fail(command, "--allow-host, --trusted-proxy, --keepalive and --loop need --http")
    if args.keepalive is not None and not args.keepalive > 0:
        return _fail(command, "--keepalive must be positive")
    if args.http:
        # Resolved (and its factory called, with the options) where it is served: in each worker.
        return _serve_http(command, args)
    try:
        target = load_target(args.target)
    except TargetError as exc:
        return _fail(command, str(exc))
    from ..mcp.server import MCPServer

    if isinstance(target, MCPServer):
        code = target.run("stdio")  # the server's own way to serve stdio: one path for both
    else:
        from ..transports.stdio import run_stdio

        code = run_stdio(target)
    # Threads of blocking handlers still running must not hold the exit back.
    sys.stderr.flush()
    os._exit(code)


def _serve_http(command: str, args: argparse.Namespace) -> int:
    from ..mcp_http.workers import AUTH_KEYS, WorkersRefused, serve_mcp_workers
    from ..transports.serve_http import RemoteBindRefused, parse_host_port

    try:
        host, port = parse_host_port(args.http)
    except ValueError as exc:
        return _fail(command, str(exc))
    try:
        # By name: the launcher resolves it (one worker) or every worker does, each calling a
        # factory with the options of this command line and running its own lifespan.
        serve_mcp_workers(args.target, host, port, workers=args.workers,
                          store=args.store, stateless=args.stateless, allow_remote=args.allow_remote,
                          auth={k: getattr(args, k) for k in AUTH_KEYS} if auth_requested(args) else None,
                          http=http_options(args))
    except RemoteBindRefused as exc:
        return _fail(command, f"{exc}; add --allow-remote to serve other hosts")
    except (WorkersRefused, TargetError, AuthOptionsError, ValueError) as exc:  # a missing extra: the CLI names it
        return _fail(command, str(exc))
    return 0
