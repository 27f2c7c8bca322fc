"""The ``sturdyrpc`` command line: ``demo``, ``check``, ``call``, ``mcp``.

A server command follows ``--``: ``sturdyrpc call echo '["hi"]' -- sturdyrpc demo``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from .commands import MODULES

__all__ = ["main", "build_parser"]


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(stream=sys.stderr, level=max(level, logging.DEBUG), format="sturdyrpc: %(levelname)s %(message)s")


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sturdyrpc", description="JSON-RPC 2.0 and MCP: servers, clients and a conformance checker.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    sub = p.add_subparsers(dest="command", required=True)
    for name in MODULES:
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(f"commands.{name}"):
                continue  # not built yet
            raise
        mod.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    own, command = _split_command(args_list)
    parser = build_parser()
    args = parser.parse_args(own)
    args.server_command = command
    _setup_logging(args.verbose)
    return int(args.func(args))
