"""``sturdyrpc run module:attr [--http HOST:PORT] [--workers N]``: serve your own server.

``module`` is an importable module name (the current directory comes first on the path) or a
path to a ``.py`` file; ``attr`` names an :class:`~sturdyrpc.mcp.MCPServer` or a plain
:class:`~sturdyrpc.dispatch.Dispatcher` in it (dotted for nested attributes), or a function
without arguments that returns one. Without ``:attr`` the first of ``mcp``, ``server``,
``app``, ``rpc`` that holds one is served.

Over stdio (the default) nothing but protocol is written to stdout: output of the module while
it is imported goes to stderr, as every later ``print`` of a handler does. With ``--http`` the
server is served on uvicorn (MCP: Streamable HTTP at ``/mcp``; a Dispatcher: plain JSON-RPC
over HTTP POST). ``--workers N`` starts N uvicorn worker processes, each importing the target
and running its own lifespan; MCP sessions cannot span processes, so with N > 1 handshake-era
HTTP is served stateless (2026-07-28 requests are stateless anyway).

A target that cannot be imported or found is one line on stderr and exit 2; a lifespan whose
startup fails stops the server with its message and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
from typing import Any

from . import EXIT_USAGE

__all__ = ["register", "load_target", "TargetError", "worker_app"]

_DEFAULT_ATTRS = ("mcp", "server", "app", "rpc")
#: Set for uvicorn worker processes (``--workers N``): the target each imports.
_TARGET_ENV = "STURDYRPC_RUN_TARGET"


class TargetError(Exception):
    """The target cannot be served; the message is the one line to show."""


def register(sub: Any) -> None:
    r = sub.add_parser("run", help="serve your MCPServer or Dispatcher: sturdyrpc run module:attr [--http HOST:PORT]",
                       description="Serve an MCPServer (or a plain Dispatcher) from your code over stdio or HTTP.")
    add_target_arguments(r)
    r.add_argument("--workers", type=int, default=1, metavar="N", help="with --http: N worker processes (default 1)")
    r.set_defaults(func=run)


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments ``run`` and ``dev`` share."""
    p.add_argument("target", metavar="module:attr", help="what to serve: module (or file.py) and attribute")
    p.add_argument("--http", metavar="HOST:PORT", help="serve over HTTP instead of stdio")
    p.add_argument("--allow-remote", action="store_true", help="with --http: allow a non-loopback bind address")


def _fail(command: str, message: str) -> int:
    sys.stderr.write(f"sturdyrpc {command}: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def load_target(spec: str) -> Any:
    """Import ``module:attr`` and return the MCPServer or Dispatcher it names (raises :class:`TargetError`)."""
    from ..dispatch import Dispatcher
    from ..mcp.server import MCPServer

    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise TargetError(f"{spec!r} names no module; expected module:attr")
    # What the module prints while it is imported must not reach stdout (the protocol's, on stdio).
    with contextlib.redirect_stdout(sys.stderr):
        try:
            module = _import(module_name)
        except TargetError:
            raise
        except BaseException as exc:  # the user's module raised (SystemExit included): one line, not a traceback
            raise TargetError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    names = attr.split(".") if attr else None
    if names is None:
        found = next((a for a in _DEFAULT_ATTRS if isinstance(getattr(module, a, None), (MCPServer, Dispatcher))), None)
        if found is None:
            raise TargetError(f"module {module_name!r} has no MCPServer or Dispatcher named {', '.join(_DEFAULT_ATTRS)}; say which: {module_name}:NAME")
        names = [found]
    obj: Any = module
    for i, name in enumerate(names):
        if not name.isidentifier() or not hasattr(obj, name):
            raise TargetError(f"module {module_name!r} has no attribute {'.'.join(names[: i + 1])!r}")
        obj = getattr(obj, name)
    if not isinstance(obj, (MCPServer, Dispatcher)) and callable(obj):
        with contextlib.redirect_stdout(sys.stderr):
            try:
                obj = obj()
            except BaseException as exc:
                raise TargetError(f"{spec} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, (MCPServer, Dispatcher)):
        raise TargetError(f"{spec} is a {type(obj).__name__}, not an MCPServer or a Dispatcher")
    return obj


def _import(module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = os.path.abspath(module_name)
        if not os.path.isfile(path):
            raise TargetError(f"no such file: {module_name}")
        # The file's own directory first, so that it can import its neighbours.
        sys.path.insert(0, os.path.dirname(path))
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise TargetError(f"no module named {module_name!r} (run from its directory, or give the path of the .py file)") from exc
        raise


def http_app(target: Any, *, stateless: bool = False, allow_remote: bool = False) -> Any:
    """The ASGI app serving ``target`` (an MCPServer at ``/mcp``, a Dispatcher as plain JSON-RPC)."""
    from ..mcp.server import MCPServer

    if isinstance(target, MCPServer):
        from ..mcp_http.app import mcp_http_app

        app: Any = mcp_http_app(target, stateless=stateless)
    else:
        from ..transports.http import JSONRPCHTTPApp

        app = JSONRPCHTTPApp(target)
    if allow_remote:
        # Reached from elsewhere, the Host header carries the server's public name.
        app.security.allowed_hosts = None
        app.security.__post_init__()
    return app


def worker_app() -> Any:
    """The app of one uvicorn worker process (``--workers N``): the target from the environment."""
    spec = os.environ[_TARGET_ENV]
    remote = os.environ.get(_TARGET_ENV + "_REMOTE") == "1"
    return http_app(load_target(spec), stateless=True, allow_remote=remote)


def run(args: argparse.Namespace) -> int:
    command = args.command
    if args.workers < 1:
        return _fail(command, "--workers must be at least 1")
    if args.workers > 1 and not args.http:
        return _fail(command, "--workers needs --http (stdio has one client)")
    try:
        target = load_target(args.target)
    except TargetError as exc:
        return _fail(command, str(exc))
    if args.http:
        return _serve_http(command, args, target)
    from ..mcp.server import MCPServer

    if isinstance(target, MCPServer):
        from ..mcp.stdio import run_mcp_stdio

        code = run_mcp_stdio(target)
    else:
        from ..transports.stdio import run_stdio

        code = run_stdio(target)
    # Threads of blocking handlers still running must not hold the exit back.
    sys.stderr.flush()
    os._exit(code)


def _serve_http(command: str, args: argparse.Namespace, target: Any) -> int:
    from ..transports.serve_http import RemoteBindRefused, parse_host_port, run_uvicorn

    try:
        host, port = parse_host_port(args.http)
    except ValueError as exc:
        return _fail(command, str(exc))
    try:
        if args.workers > 1:
            os.environ[_TARGET_ENV] = args.target
            os.environ[_TARGET_ENV + "_REMOTE"] = "1" if args.allow_remote else "0"
            run_uvicorn(f"{__name__}:worker_app", host, port, allow_remote=args.allow_remote, workers=args.workers)
        else:
            run_uvicorn(http_app(target, allow_remote=args.allow_remote), host, port, allow_remote=args.allow_remote)
    except RemoteBindRefused as exc:
        return _fail(command, f"{exc}; add --allow-remote to serve other hosts")
    return 0
