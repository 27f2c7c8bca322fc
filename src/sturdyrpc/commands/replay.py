"""``sturdyrpc replay``: re-run a recorded session against a server and diff the replies."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples:
  sturdyrpc trace --log session.ndjson -- python my_server.py      # record (your client in front)
  sturdyrpc replay session.ndjson -- python my_server.py           # later: same behaviour?
  sturdyrpc replay session.ndjson --ignore result.serverInfo.version --ignore timestamp -- python my_server.py
exit code: 0 when every reply matches the recording, 1 on any difference, 2 for usage errors.
"""


def register(sub: Any) -> None:
    r = sub.add_parser(
        "replay",
        help="re-send a recorded session (trace --log) to a server and diff the replies",
        description="Send the client side of FILE (written by sturdyrpc trace --log) to the server command given after --, "
        "one request at a time, and compare each reply with the recorded one (ids are not compared).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("file", metavar="FILE", help="the NDJSON log written by sturdyrpc trace --log")
    r.add_argument("--ignore", action="append", default=[], metavar="FIELD",
                   help="leave FIELD out of the comparison: a dotted path in the reply (result.meta.time; * for any key) "
                   "or a bare name (that key at any depth); repeatable")
    r.add_argument("--framing", metavar="F", choices=["line", "content-length"], help="the framing (default: the one recorded)")
    r.add_argument("--timeout", metavar="S", type=float, default=10.0, help="seconds to wait for each reply (default: 10)")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..proxy.pump import check_command
    from ..proxy.replay import load_session, recorded_framing, recorded_redacted
    from ..proxy.replay_run import replay_session

    command = list(args.server_command or [])
    problem = check_command("replay", command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        with open(args.file, "rb") as f:
            lines = f.readlines()
        records = load_session(lines)
    except (OSError, ValueError) as exc:
        print(f"sturdyrpc replay: cannot read {args.file!r}: {exc}", file=sys.stderr)
        return 2
    framing = args.framing or recorded_framing(lines)

    def junk(line: bytes) -> None:
        sys.stderr.write(f"replay: non-JSON output of the server: {line[:200]!r}\n")

    result = replay_session(records, command, ignore=tuple(args.ignore), framing=framing, timeout=args.timeout, on_junk=junk,
                            redacted=recorded_redacted(lines))
    for d in result.differences:  # the report is the command's output (stdout), as call's and mcp's results are
        detail = d.diff if d.got is not None else "no reply (timeout, or the server ended)"
        sys.stdout.write(f"--- {d.method} (recorded id {d.id!r}) differs:\n{detail}\n")
    verdict = "same behaviour" if not result.differences else f"{len(result.differences)} difference(s)"
    print(f"replay: {result.compared} replies compared, {verdict}", file=sys.stderr)
    return 1 if result.differences else 0
