"""``sturdyrpc demo``: the demo servers."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..auth.options import add_auth_arguments, auth_requested
from .run import add_http_arguments, http_options


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="run a demo server (stdio JSON-RPC by default)")
    d.add_argument("--mcp", action="store_true", help="the MCP demo server instead of plain JSON-RPC")
    d.add_argument("--conformance", action="store_true",
                   help="the MCP conformance fixture server: the MCP demo plus every fixture the conformance suite calls")
    d.add_argument("--http", metavar="HOST:PORT", help="serve over Streamable HTTP instead of stdio")
    d.add_argument("--framing", choices=["line", "content-length"], default="line", help="stdio framing (default: line)")
    d.add_argument("--allow-remote", action="store_true", help="with --http: allow a non-loopback bind address")
    d.add_argument("--workers", type=int, default=1, metavar="N", help="with --http: N worker processes on one port")
    d.add_argument("--store", metavar="URL", default="memory",
                   help="with --mcp --http: where sessions live: memory (default) or redis://HOST:PORT/DB (shared by workers)")
    d.add_argument("--stateless", action="store_true", help="with --mcp --http: no sessions (any worker answers any POST)")
    add_http_arguments(d)
    add_auth_arguments(d)
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if auth_requested(args) and not args.http:
        print("sturdyrpc demo: the --auth-* options need --http", file=sys.stderr)
        return 2
    if http_options(args) and not args.http:
        print("sturdyrpc demo: --allow-host, --trusted-proxy, --keepalive and --loop need --http", file=sys.stderr)
        return 2
    if args.http:
        from ..demos.http import run_demo_http

        return run_demo_http(args.http, mcp=args.mcp, conformance=args.conformance, allow_remote=args.allow_remote, workers=args.workers, store=args.store,
                             stateless=args.stateless, auth_args=args, http=http_options(args))
    if (args.mcp or args.conformance) and not args.http:
        from ..mcp.stdio import run_mcp_stdio

        if args.conformance:
            from ..demos.conformance_server import make_conformance_server

            code = run_mcp_stdio(make_conformance_server())
        else:
            from ..demos.mcp import make_mcp_demo

            code = run_mcp_stdio(make_mcp_demo())
        sys.stderr.flush()
        os._exit(code)
    if args.mcp or args.http:
        print("sturdyrpc demo: --mcp and --http are not available in this version yet", file=sys.stderr)
        return 2
    from ..demos.jsonrpc import make_demo
    from ..transports.stdio import run_stdio

    code = run_stdio(make_demo(), framing=args.framing)
    # Threads of sync handlers still running must not hold the exit back.
    sys.stderr.flush()
    os._exit(code)
