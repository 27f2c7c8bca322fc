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
  sturdyrpc replay http.ndjson --session=SESSION_ID -- python my_server.py   # one session of guard --url --log
a log of guard --url --log holds every session guard served: --session=ID replays one (with "=": an id
may start with "-"; a log of one session needs no --session; "stateless" names the 2026-07-28 requests),
its JSON-RPC messages to a stdio server of the same app (HTTP headers are neither recorded nor replayed;
guard's own answers are left out).
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
    r.add_argument("file", metavar="FILE", help="the NDJSON log written by sturdyrpc trace --log or guard --log")
    r.add_argument("--session", metavar="ID",
                   help="of a guard --url --log log: the session to replay (its Mcp-Session-Id, written --session=ID; \"stateless\": "
                   "the 2026-07-28 requests); needed when the log holds more than one")
    r.add_argument("--ignore", action="append", default=[], metavar="FIELD",
                   help="leave FIELD out of the comparison: a dotted path in the reply (result.meta.time; * for any key) "
                   "or a bare name (that key at any depth); repeatable")
    r.add_argument("--framing", metavar="F", choices=["line", "content-length"], help="the framing (default: the one recorded)")
    r.add_argument("--timeout", metavar="S", type=float, default=10.0, help="seconds to wait for each reply (default: 10)")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..proxy.pump import check_command
    from ..proxy.replay import load_session, recorded_framing, recorded_redacted, recorded_sessions
    from ..proxy.replay_run import replay_session

    command = list(args.server_command or [])
    problem = check_command("replay", command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        with open(args.file, "rb") as f:
            lines = f.readlines()
        sessions = recorded_sessions(lines)
        if sessions is None and args.session is not None:
            print(f"sturdyrpc replay: {args.file!r} is a stdio log (one conversation): --session is for logs of guard --url --log",
                  file=sys.stderr)
            return 2
        chosen = _chosen_session(args.file, sessions, args.session)
        if chosen is _REFUSED:
            return 2
        records = load_session(lines, chosen)
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


_REFUSED: Any = object()


def _chosen_session(file: str, sessions: list[str | None] | None, wanted: str | None) -> Any:
    """The session of an HTTP guard's log to replay (``ALL_SESSIONS`` for a stdio log), or
    ``_REFUSED`` once the reason is printed: several sessions and no ``--session``, or an unknown one."""
    from ..proxy.replay import ALL_SESSIONS, STATELESS

    if sessions is None:
        return ALL_SESSIONS
    names = [STATELESS if s is None else s for s in sessions]
    if wanted is None:
        if len(sessions) <= 1:
            return sessions[0] if sessions else ALL_SESSIONS
        print(f"sturdyrpc replay: {file!r} holds {len(sessions)} sessions (guard --url --log): pick one with --session=ID; "
              f"its sessions: {', '.join(names)}", file=sys.stderr)
        return _REFUSED
    if wanted not in names:
        print(f"sturdyrpc replay: {file!r} holds no session {wanted!r}; its sessions: {', '.join(names) or 'none'}", file=sys.stderr)
        return _REFUSED
    return None if wanted == STATELESS else wanted
