"""``sturdyrpc inspect``: a local web inspector of an MCP server's traffic and what is wrong with it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples:
  sturdyrpc inspect -- python my_server.py          # a stdio server it starts
  sturdyrpc inspect --url http://127.0.0.1:8000/mcp # a Streamable HTTP server
The page's address (127.0.0.1 only, with a random token) is printed on stderr; Ctrl-C stops.
exit code: 0 once stopped; 2 for usage errors.
"""


def register(sub: Any) -> None:
    i = sub.add_parser(
        "inspect",
        help="a local web page showing an MCP server's traffic, with every rule a message breaks",
        description="Connect to the MCP server (started from the command after --, or at --url) as a client and serve a "
        "page on 127.0.0.1: its tools, resources and prompts with forms to call them, a live timeline of every message "
        "both ways judged by the rules of sturdyrpc check, a button that runs check, and the session as a trace --log file.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    i.add_argument("--url", metavar="URL", help="inspect the Streamable HTTP server at URL instead of starting one")
    i.add_argument("--port", metavar="N", type=int, default=0, help="the port of the page on 127.0.0.1 (default: a free one)")
    i.add_argument("--timeout", metavar="S", type=float, default=60.0, help="seconds to wait for each reply (default: 60)")
    i.add_argument("--protocol", metavar="VERSION", help="the MCP protocol version to require (default: negotiated, the newest both speak)")
    i.add_argument("--deadline", metavar="S", type=float, default=10.0,
                   help="mark a request unanswered on the timeline after S seconds without a reply (default: 10)")
    i.add_argument("--no-redact", dest="redact", action="store_false",
                   help="keep the values of secret-looking keys in the exported log (default: [REDACTED], as trace --log)")
    i.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    command = list(getattr(args, "server_command", []) or [])
    if bool(command) == bool(args.url):
        print("sturdyrpc inspect: give either the server command after -- or --url URL, e.g. sturdyrpc inspect -- sturdyrpc demo --mcp",
              file=sys.stderr)
        return 2
    if args.url:
        from urllib.parse import urlsplit

        parts = urlsplit(args.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            print(f"sturdyrpc inspect: --url needs an http:// or https:// URL, got {args.url!r}", file=sys.stderr)
            return 2
    if not 0 <= args.port < 65536 or args.timeout <= 0 or args.deadline <= 0:
        print("sturdyrpc inspect: --port must be 0..65535, --timeout and --deadline positive", file=sys.stderr)
        return 2
    from ..mcp.versions import SUPPORTED_VERSIONS

    if args.protocol is not None and args.protocol not in SUPPORTED_VERSIONS:
        print(f"sturdyrpc inspect: unknown --protocol {args.protocol!r} (known: {', '.join(SUPPORTED_VERSIONS)})", file=sys.stderr)
        return 2
    from ..inspect.serve import serve

    try:
        return asyncio.run(serve(command or None, args.url, port=args.port, timeout=args.timeout, deadline=args.deadline,
                                 protocol=args.protocol, redact=args.redact))
    except OSError as exc:
        print(f"sturdyrpc inspect: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
