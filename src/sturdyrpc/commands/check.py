"""``sturdyrpc check``: find JSON-RPC 2.0 and MCP protocol bugs in a stdio or HTTP server."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

EPILOG = """\
examples:
  sturdyrpc check -- sturdyrpc demo
  sturdyrpc check --echo-method echo --leak-probe fail -- python my_server.py
  sturdyrpc check --mcp --protocol 2025-11-25 --call-tools echo,add -- npx my-mcp-server
  sturdyrpc check --url http://127.0.0.1:8000/mcp
exit code: 0 when no MUST-level check failed (--strict: and no SHOULD-level warning); 1 otherwise; 2 for usage errors.
"""


def register(sub: Any) -> None:
    c = sub.add_parser(
        "check",
        help="check a server for JSON-RPC 2.0 / MCP protocol bugs",
        description="Start the server command given after -- and drive it over stdio through the JSON-RPC 2.0 "
        "(and MCP) edge cases. Nothing is called but an unknown method unless you allow it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("--mcp", action="store_true", default=None, help="check as an MCP server (default: detect)")
    c.add_argument("--no-mcp", dest="mcp", action="store_false", help="plain JSON-RPC: skip MCP detection")
    c.add_argument("--protocol", metavar="VERSION", help="the MCP protocol version to speak (default: the newest the server supports)")
    c.add_argument("--echo-method", metavar="NAME", help="a method that returns its params (or its first param), for positive checks")
    c.add_argument(
        "--call-tools", metavar="NAMES", nargs="?", const="*",
        help="MCP: allow calling tools (all, or a comma-separated list); tools may have side effects, so none are called by default",
    )
    c.add_argument("--leak-probe", metavar="METHOD", help="a method (or MCP tool) that fails, to check that its error leaks nothing")
    c.add_argument("--slow", metavar="NAME", help='a method (or MCP tool) taking {"seconds": S} that waits S seconds: enables concurrency/cancellation checks')
    c.add_argument("--timeout", metavar="S", type=float, default=5.0, help="seconds to wait for each reply (default: 5)")
    c.add_argument("--area", action="append", metavar="AREA", help="only checks of this area (repeatable)")
    c.add_argument("--only", action="append", metavar="ID", help="only this check id, or a prefix ending in * (repeatable)")
    c.add_argument("--json", metavar="FILE", help="write a JSON report")
    c.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    c.add_argument("--strict", action="store_true", help="also fail (exit 1) on SHOULD-level warnings")
    c.add_argument("--url", metavar="URL", help="check a running HTTP server at URL (JSON-RPC over HTTP or MCP Streamable HTTP); nothing is started, "
        "and only this URL is contacted (no redirects, no proxies)")
    c.add_argument("--list", action="store_true", help="list the checks and exit")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..check import AREAS, Config, all_checks, run_checks
    from ..check.report import ProgressLine, print_report, write_json, write_junit

    if args.list:
        for chk in all_checks():
            s = chk.spec
            print(f"{s.id:40} {s.area:12} {s.level.value:8} {s.title}")
        return 0
    command = list(getattr(args, "server_command", []) or [])
    if args.url:
        from urllib.parse import urlsplit

        parts = urlsplit(args.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            print(f"sturdyrpc check: --url needs an http:// or https:// URL, got {args.url!r}", file=sys.stderr)
            return 2
        if command:
            print("sturdyrpc check: give either --url or a command after --, not both", file=sys.stderr)
            return 2
    if not command and not args.url:
        print("sturdyrpc check: give the server command after --, e.g. sturdyrpc check -- sturdyrpc demo", file=sys.stderr)
        return 2
    known = {c.spec.id for c in all_checks()}
    bad_areas = sorted(set(args.area or ()) - set(AREAS))
    bad_only = [o for o in args.only or () if not any(k == o or (o.endswith("*") and k.startswith(o[:-1])) for k in known)]
    if bad_areas or bad_only:
        print(f"sturdyrpc check: unknown area or check: {', '.join(bad_areas + bad_only)} (see --list; areas: {', '.join(AREAS)})", file=sys.stderr)
        return 2
    if command and shutil.which(command[0]) is None:
        print(f"sturdyrpc check: cannot start the server: {command[0]!r} is not an executable file or a command on PATH", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("sturdyrpc check: --timeout must be positive", file=sys.stderr)
        return 2
    tools = None
    if args.call_tools is not None:
        tools = {t.strip() for t in args.call_tools.split(",") if t.strip()} or {"*"}
    cfg = Config(
        command,
        timeout=args.timeout,
        echo_method=args.echo_method,
        call_tools=tools,
        leak_probe=args.leak_probe,
        slow=args.slow,
        mcp=args.mcp,
        protocol=args.protocol,
        url=args.url,
    )
    progress = ProgressLine()
    try:
        report = run_checks(cfg, areas=args.area, only=args.only, progress=progress)
    except FileNotFoundError as exc:
        progress.clear()
        print(f"sturdyrpc check: cannot start the server: {exc}", file=sys.stderr)
        return 2
    progress.clear()
    print_report(report)
    if args.json:
        write_json(report, args.json)
    if args.junit:
        write_junit(report, args.junit)
    return report.exit_code(strict=args.strict)
