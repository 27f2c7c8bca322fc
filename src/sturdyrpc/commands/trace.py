"""``sturdyrpc trace``: a transparent proxy that logs and judges the traffic of a stdio server."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples (use the whole line as the server command of your client):
  sturdyrpc trace --log session.ndjson -- python my_server.py
  sturdyrpc trace --framing content-length -- my-language-server --stdio
exit code: the server's (128+N when it was killed by signal N); 2 for usage errors.
"""


def register(sub: Any) -> None:
    t = sub.add_parser(
        "trace",
        help="proxy a stdio server unchanged, logging and checking every message",
        description="Run the server command given after --, pass the bytes between your client (our stdin/stdout) and "
        "it unchanged, log every message to --log as NDJSON, show a live view and the protocol violations on stderr, "
        "and a summary at the end.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("--log", metavar="FILE", help="write every message both ways to FILE as NDJSON (replayable with sturdyrpc replay)")
    t.add_argument("--framing", choices=["line", "content-length"], default="line", help="the framing of the traffic (default: line)")
    t.add_argument("--quiet", action="store_true", help="no live view (violations and the summary are still shown)")
    t.add_argument("--mcp", action="store_true", default=None, help="judge as MCP from the start (default: when the traffic shows it)")
    t.add_argument("--grace", metavar="S", type=float, default=2.0, help="after the client left: seconds before SIGTERM, and again before SIGKILL (default: 2)")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..proxy.pump import check_command, run_proxy
    from ..proxy.trace import LOG_BUFFER, TraceProxy
    from ..proxy.view import LiveView

    command = list(args.server_command or [])
    problem = check_command("trace", command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    terminal = sys.stderr.isatty()
    try:
        # A large buffer: the records of many reads leave in one write (flushed at least every second).
        log = open(args.log, "wb", buffering=LOG_BUFFER) if args.log else None  # noqa: SIM115 - closed by the proxy
    except OSError as exc:
        print(f"sturdyrpc trace: cannot write the log {args.log!r}: {exc.strerror}", file=sys.stderr)
        return 2
    view = LiveView(sys.stderr, colour=terminal, traffic=not args.quiet)
    return run_proxy(TraceProxy(command, framing=args.framing, log=log, view=view, grace=args.grace, mcp=args.mcp, terminal=terminal))
