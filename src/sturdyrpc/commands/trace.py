"""``sturdyrpc trace``: a transparent proxy that logs and judges the traffic of a stdio server."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import IO, Any

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
    t.add_argument("--log", metavar="FILE", help="write every message both ways to FILE as NDJSON (replayable with sturdyrpc replay);"
                   " created readable by you only (0600), an existing file made so")
    t.add_argument("--no-redact", dest="redact", action="store_false",
                   help="keep the values of secret-looking keys (token, secret, password, authorization, api key...) in the log,"
                        " the live view and the server's recorded command line (default: written as [REDACTED])")
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
        log = open_private(args.log, LOG_BUFFER) if args.log else None
    except OSError as exc:
        print(f"sturdyrpc trace: cannot write the log {args.log!r}: {exc.strerror}", file=sys.stderr)
        return 2
    from ..proxy.redact import redact_text

    view = LiveView(sys.stderr, colour=terminal, traffic=not args.quiet, redact=redact_text if args.redact else None)
    return run_proxy(TraceProxy(command, framing=args.framing, log=log, view=view, grace=args.grace, mcp=args.mcp, terminal=terminal,
                                redact=args.redact))


def open_private(path: str, buffering: int) -> IO[bytes]:
    """``path`` opened for writing (truncated), readable and writable by its owner only: a new
    file is created 0600 (never wider, whatever the umask), an existing regular file loses its
    group and other permissions first (OSError when it cannot: it is not ours). A device or a
    pipe (``/dev/stderr``, ``>(...)``) is written as it is."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)
            os.ftruncate(fd, 0)  # only once it is private: a file that cannot be made so is left as it was
        # A large buffer: the records of many reads leave in one write (flushed at least every second).
        return os.fdopen(fd, "wb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise
