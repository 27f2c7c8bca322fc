"""``sturdyrpc guard``: a hardening proxy for stdio servers you do not own."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples (use the whole line as the server command of your client):
  sturdyrpc guard --deadline 30 -- npx some-mcp-server
  sturdyrpc guard --deadline 10 --max-in-flight 4 --framing content-length -- my-language-server --stdio
what it does: the client's messages are read as a correct server reads them (JSON-RPC 2.0, and MCP's rules
of the negotiated version): what such a server refuses (invalid JSON or UTF-8, invalid shapes and ids, the
size, depth and batch limits, id null and array params under MCP, a request before initialize, a batch on
an MCP version without batches...) guard answers itself; only valid messages reach the server, batches as
single messages, every request under an id of guard's own (the reply carries the client's id exactly).
Non-JSON output of the server goes to stderr; replies to unknown ids, duplicate replies and replies to
notifications are dropped; an error or failed tool result that reveals a traceback, path or exception
name is replaced by a plain one with an incident id (the original on stderr); a request unanswered after
--deadline gets a -32001 error and is cancelled on the server; if the server dies, pending requests get
-32002 at once; a malformed reply is replaced by a -32003 error; at stdin EOF the server's stdin stays
open until every request is answered (or its deadline passes); at most --max-in-flight requests reach
the server at once (the rest wait). At exit guard prints what it contained, by the rule check names.
exit code: the server's (128+N when it was killed by signal N); 2 for usage errors.
"""


def register(sub: Any) -> None:
    g = sub.add_parser(
        "guard",
        help="proxy a stdio server, keeping its protocol bugs away from the client",
        description="Run the server command given after -- between your client (our stdin/stdout) and it, passing "
        "on only valid replies the client can expect, answering requests the server leaves too long or dies on.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--deadline", metavar="S", type=float, help="answer a request with an error (and cancel it on the server) after S seconds")
    g.add_argument("--max-in-flight", metavar="N", type=int, help="pass at most N requests to the server at once; the rest wait in order")
    g.add_argument("--framing", choices=["line", "content-length"], default="line", help="the framing of the traffic (default: line)")
    g.add_argument("--cancel", choices=["auto", "mcp", "lsp", "none"], default="auto",
                   help="the cancel notification for a request past its deadline: notifications/cancelled (mcp), $/cancelRequest (lsp), "
                   "none; auto: mcp when the traffic shows MCP, lsp with content-length framing, else none (default)")
    g.add_argument("--protocol", choices=["auto", "mcp", "jsonrpc"], default="auto",
                   help="the rules the client's messages are read by: MCP's (of the negotiated version) or plain JSON-RPC 2.0's; "
                   "auto: MCP when the first message is MCP's (default)")
    g.add_argument("--keep-tool-errors", action="store_true",
                   help="pass failed tools' results (isError) as they are, even when they reveal a traceback, path or exception name")
    g.add_argument("--report", metavar="FILE", help="write what guard contained (counts by rule, as check names them) to FILE as JSON at exit")
    g.add_argument("--grace", metavar="S", type=float, default=2.0, help="after the client left: seconds before SIGTERM, and again before SIGKILL (default: 2)")
    g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..proxy.guard import GuardCore
    from ..proxy.guard_proxy import GuardProxy
    from ..proxy.pump import check_command, run_proxy
    from ..proxy.view import LiveView

    command = list(args.server_command or [])
    problem = check_command("guard", command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if args.deadline is not None and args.deadline <= 0:
        print("sturdyrpc guard: --deadline must be positive", file=sys.stderr)
        return 2
    if args.max_in_flight is not None and args.max_in_flight < 1:
        print("sturdyrpc guard: --max-in-flight must be at least 1", file=sys.stderr)
        return 2
    terminal = sys.stderr.isatty()
    core = GuardCore(deadline=args.deadline, max_in_flight=args.max_in_flight, cancel=args.cancel,
                     content_length=args.framing == "content-length", protocol=args.protocol, keep_tool_errors=args.keep_tool_errors)
    view = LiveView(sys.stderr, colour=terminal, prefix="guard")
    proxy = GuardProxy(command, core=core, framing=args.framing, view=view, grace=args.grace, terminal=terminal, report=args.report)
    return run_proxy(proxy)
