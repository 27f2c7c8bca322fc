"""``sturdyrpc guard``: a hardening proxy for servers you do not own, on stdio (``-- CMD``) or in
front of a Streamable HTTP server (``--url URL --http HOST:PORT``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..auth.options import AuthOptionsError, add_auth_arguments, auth_requested, split_scopes
from . import EXIT_USAGE
from .run import add_http_arguments, http_options

EPILOG = """\
examples (use the whole line as the server command of your client):
  sturdyrpc guard --deadline 30 -- npx some-mcp-server
  sturdyrpc guard --deadline 10 --max-in-flight 4 --framing content-length -- my-language-server --stdio
in front of a Streamable HTTP server (clients use http://127.0.0.1:9000/mcp instead of its URL):
  sturdyrpc guard --url http://127.0.0.1:8000/mcp --http 127.0.0.1:9000
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
        "on only valid replies the client can expect, answering requests the server leaves too long or dies on; "
        "or, with --url and --http, serve the same MCP endpoint in front of a Streamable HTTP server.",
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
    g.add_argument("--log", metavar="FILE",
                   help="write the traffic as guard read it from each side to FILE as NDJSON (trace --log's format, secrets "
                   "redacted; replayable with sturdyrpc replay), and at exit a record of what it contained; with --url: "
                   "the POST bodies, the upstream's replies and SSE events and guard's own answers, each record with its "
                   "session (replay --session ID picks one), the header naming the upstream URL, no HTTP header recorded")
    g.add_argument("--grace", metavar="S", type=float, default=2.0, help="after the client left: seconds before SIGTERM, and again before SIGKILL (default: 2)")
    h = g.add_argument_group("Streamable HTTP (instead of -- CMD)")
    h.add_argument("--url", metavar="URL", help="the upstream MCP endpoint, http://HOST:PORT/PATH; guard serves PATH on --http")
    h.add_argument("--http", metavar="HOST:PORT", help="with --url: where guard listens")
    h.add_argument("--allow-remote", action="store_true", help="with --http: allow a non-loopback listen address")
    h.add_argument("--max-sessions", metavar="N", type=int, default=1000, help="sessions guard keeps (default 1000; the least recently used idle one ends for a new one)")
    h.add_argument("--session-idle", metavar="S", type=float, default=600.0,
                   help="end a session after S seconds without a request (default 600, as sturdyrpc run); its next request gets 404")
    h.add_argument("--forward-authorization", action="store_true",
                   help="hand the client's Authorization header on to the upstream (by default it never gets one)")
    h.add_argument("--auth-tool-scope", metavar="TOOL=SCOPE[,SCOPE]", action="append", default=[],
                   help="with --auth-*: the scopes a tools/call of TOOL needs (* for every tool; repeatable): 403 otherwise")
    add_http_arguments(g)
    add_auth_arguments(g)
    g.set_defaults(func=run)


def _usage(message: str) -> int:
    print(f"sturdyrpc guard: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    if args.url and args.server_command:
        return _usage("give either --url (a Streamable HTTP server) or -- CMD (a stdio server), not both")
    if not args.url and not args.http and not args.server_command:
        return _usage("give the server to guard: -- CMD (a stdio server) or --url URL --http HOST:PORT (a Streamable HTTP one)")
    if args.deadline is not None and args.deadline <= 0:
        return _usage("--deadline must be positive")
    if args.session_idle <= 0:
        return _usage("--session-idle must be positive")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        return _usage("--max-in-flight must be at least 1")
    if args.url or args.http:
        return _run_http(args)
    if auth_requested(args) or http_options(args) or args.forward_authorization or args.auth_tool_scope:
        return _usage("the --auth-*, --allow-host, --trusted-proxy, --keepalive, --loop and --forward-authorization options need --url")
    return _run_stdio(args)


def _run_stdio(args: argparse.Namespace) -> int:
    from ..proxy.guard import GuardCore
    from ..proxy.guard_proxy import GuardProxy
    from ..proxy.pump import check_command, run_proxy
    from ..proxy.tracelog import LOG_BUFFER, TraceLog
    from ..proxy.view import LiveView
    from .trace import open_private

    command = list(args.server_command or [])
    problem = check_command("guard", command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        log_file = open_private(args.log, LOG_BUFFER) if args.log else None
    except OSError as exc:
        print(f"sturdyrpc guard: cannot write the log {args.log!r}: {exc.strerror}", file=sys.stderr)
        return 2
    log = TraceLog(log_file, command, args.framing) if log_file is not None else None
    terminal = sys.stderr.isatty()
    core = GuardCore(deadline=args.deadline, max_in_flight=args.max_in_flight, cancel=args.cancel,
                     content_length=args.framing == "content-length", protocol=args.protocol, keep_tool_errors=args.keep_tool_errors)
    view = LiveView(sys.stderr, colour=terminal, prefix="guard")
    proxy = GuardProxy(command, core=core, framing=args.framing, view=view, grace=args.grace, terminal=terminal, report=args.report, log=log)
    return run_proxy(proxy)


def _tool_scopes(entries: list[str]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for entry in entries:
        tool, sep, scopes = entry.partition("=")
        if not sep or not tool.strip() or not split_scopes(scopes):
            raise ValueError(f"--auth-tool-scope {entry!r}: expected TOOL=SCOPE[,SCOPE]")
        out[tool.strip()] = out.get(tool.strip(), frozenset()) | frozenset(split_scopes(scopes))
    return out


def _run_http(args: argparse.Namespace) -> int:
    from urllib.parse import urlsplit

    from ..mcp_http.workers import AUTH_KEYS, auth_security
    from ..proxy.guard import GuardCore
    from ..proxy.guard_http import GuardHTTPApp, serve_guard_http
    from ..proxy.tracelog import LOG_BUFFER, TraceLog
    from ..transports.serve_http import RemoteBindRefused, parse_host_port
    from .trace import open_private

    if not args.url or not args.http:
        return _usage("--url (the upstream) and --http (where guard listens) go together")
    url = urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.netloc:
        return _usage(f"--url {args.url!r}: expected http://HOST:PORT/PATH")
    if args.auth_tool_scope and not auth_requested(args):
        return _usage("--auth-tool-scope needs the --auth-* options")
    try:
        log_file = open_private(args.log, LOG_BUFFER) if args.log else None
    except OSError as exc:
        return _usage(f"cannot write the log {args.log!r}: {exc.strerror}")
    log = TraceLog(log_file, [], "line", upstream=args.url) if log_file is not None else None
    try:
        host, port = parse_host_port(args.http)
        tool_scopes = _tool_scopes(args.auth_tool_scope)
        auth = {k: getattr(args, k) for k in AUTH_KEYS} if auth_requested(args) else None
        security, _ = auth_security(auth, f"http://{host}:{port}{url.path or '/'}", http_options(args),
                                    bind_host=host, allow_remote=args.allow_remote)
        app = GuardHTTPApp(args.url, security=security, forward_authorization=args.forward_authorization,
                           tool_scopes=tool_scopes, max_sessions=args.max_sessions, report=args.report, idle_timeout=args.session_idle,
                           keepalive=args.keepalive if args.keepalive is not None else 15.0, log=log,
                           core_factory=lambda: GuardCore(deadline=args.deadline, max_in_flight=args.max_in_flight,
                                                          cancel=args.cancel, protocol="mcp",
                                                          keep_tool_errors=args.keep_tool_errors))
        serve_guard_http(app, host, port, allow_remote=args.allow_remote, loop=args.loop)
    except RemoteBindRefused as exc:
        return _usage(f"{exc}; add --allow-remote to serve other hosts")
    except (AuthOptionsError, ValueError) as exc:
        return _usage(str(exc))
    finally:
        if log is not None and not log.file.closed:
            log.close()  # serving ended without the shutdown that closes it (a usage error, a failed bind)
    return 0
