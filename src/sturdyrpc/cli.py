"""The ``sturdyrpc`` command line: ``demo``, ``check``, ``call``, ``mcp``, ``trace``, ``inspect``...

A server command follows ``--``: ``sturdyrpc call echo '["hi"]' -- sturdyrpc demo``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._version import __version__
from .commands import MODULES

__all__ = ["main", "build_parser"]

#: Optional dependencies, by top-level module, and the extra of ``pyproject.toml`` that installs each.
OPTIONAL_MODULES = {"uvicorn": "http", "httptools": "http", "httpx": "http", "h11": "http", "rich": "cli", "watchfiles": "dev-server", "jwt": "auth", "redis": "redis"}
#: What a subcommand always needs beyond the core, checked before it starts (a missing one
#: otherwise shows only at the end, when ``check`` prints its report).
REQUIRES = {"check": ("rich",), "inspect": ("uvicorn",)}


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(stream=sys.stderr, level=max(level, logging.DEBUG), format="sturdyrpc: %(levelname)s %(message)s")
    # The built-in middleware's lines (Timing() logs at INFO) are what its user asked for: shown
    # on stderr (never stdout, which is the protocol's on stdio) without configuring logging.
    logging.getLogger("sturdyrpc.timing").setLevel(max(min(level, logging.INFO), logging.DEBUG))


def _columns() -> int:
    """The terminal width as ``shutil.get_terminal_size`` finds it (without importing shutil)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.HelpFormatter):
    # argparse builds a formatter for every add_argument(), and the default one imports
    # shutil (with bz2, lzma...) for the width: milliseconds of start-up for nothing.
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` names the one subcommand to register (start-up: import no other)."""
    p = _Parser(prog="sturdyrpc", description="JSON-RPC 2.0 and MCP: servers, clients and a conformance checker.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    p.add_argument("--version", action="version", version=f"sturdyrpc {__version__}")
    # prog given, as argparse would work it out: else it builds a help formatter now (importing shutil).
    sub = p.add_subparsers(dest="command", required=True, prog="sturdyrpc")
    for name in MODULES if only is None else [only]:
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(f"commands.{name}"):
                continue  # not built yet
            raise
        mod.register(sub)
    return p


def _missing_extra(command: str, module: str) -> int:
    extra = OPTIONAL_MODULES[module]
    sys.stderr.write(
        f"sturdyrpc {command}: this needs the optional dependency {module!r}, which is not installed;"
        f" install it with: pip install 'sturdyrpc[{extra}]'\n"
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    own, command = _split_command(args_list)
    # Only the subcommand asked for is imported (`sturdyrpc demo` must start fast); --help and
    # errors without one list them all.
    first = next((a for a in own if not a.startswith("-")), None)
    parser = build_parser(first if first in MODULES else None)
    args = parser.parse_args(own)
    args.server_command = command
    _setup_logging(args.verbose)
    for module in REQUIRES.get(args.command, ()):
        if importlib.util.find_spec(module) is None:
            return _missing_extra(args.command, module)
    try:
        return int(args.func(args))
    except ModuleNotFoundError as exc:
        # An optional dependency (uvicorn for --http, httpx for --url...) is imported where it is
        # used: its absence is a usage problem with a one-line fix, not a traceback.
        module = (exc.name or "").partition(".")[0]
        if module not in OPTIONAL_MODULES:
            raise
        return _missing_extra(args.command, module)
