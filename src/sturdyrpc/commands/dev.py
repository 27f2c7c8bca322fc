"""``sturdyrpc dev module:attr --http HOST:PORT``: ``sturdyrpc run`` that restarts on file changes.

The server runs as a child process (``sturdyrpc run``); when a ``.py`` file under the watched
directory (the target file's, or the current one) changes, the child is stopped (SIGTERM: its
lifespan shuts down) and started again. Needs ``watchfiles``
(``pip install 'sturdyrpc[dev-server]'``). HTTP only: a stdio client cannot survive its server
being restarted under it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import EXIT_USAGE
from .run import TargetError, add_target_arguments

__all__ = ["register"]


def register(sub: Any) -> None:
    d = sub.add_parser("dev", help="serve module:attr over HTTP and restart it when a .py file changes (watchfiles)",
                       description="Development server: sturdyrpc run --http, restarted on every change of a .py file.")
    add_target_arguments(d, http_required=True)
    d.add_argument("--watch", metavar="DIR", action="append", help="directory to watch (repeatable; default: the target's)")
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import watchfiles  # the optional dependency: a missing one ends the command with the pip line

    from ..mcp_http.workers import resolve_target

    try:
        resolve_target(args.target)  # fail now, with one line, rather than in every restart (what `run --http` serves)
    except TargetError as exc:
        sys.stderr.write(f"sturdyrpc dev: {exc}\n")
        return EXIT_USAGE
    module = args.target.partition(":")[0]
    default = os.path.dirname(os.path.abspath(module)) if module.endswith(".py") else os.getcwd()
    paths = args.watch or [default]
    argv = [sys.executable, "-m", "sturdyrpc", "run", args.target, "--http", args.http]
    if args.allow_remote:
        argv.append("--allow-remote")
    sys.stderr.write(f"sturdyrpc dev: serving {args.target} on {args.http}, restarting on changes in {', '.join(paths)}\n")
    sys.stderr.flush()
    watchfiles.run_process(*paths, target=" ".join(_quote(a) for a in argv), target_type="command",
                           watch_filter=watchfiles.PythonFilter(), callback=_restarted)
    return 0


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _restarted(changes: set[tuple[Any, str]]) -> None:
    names = sorted({os.path.basename(path) for _, path in changes})
    sys.stderr.write(f"sturdyrpc dev: {', '.join(names)} changed: restarting\n")
    sys.stderr.flush()
