"""Serving an MCP server over Streamable HTTP with N worker processes on one port.

:func:`serve_mcp_workers` is the one launcher (``sturdyrpc demo --mcp --http ... --workers N
--store URL``, and ``sturdyrpc run``): uvicorn starts N processes sharing the listening socket,
and each builds its app with :func:`worker_app` from what the launcher put in the environment
(processes are spawned: they import the target by name). With more than one worker the sessions
must live in a shared store (``--store redis://...``) unless the server is ``stateless``; the
``requestState`` keys are shared by the environment (one random key ring per launch) or the store.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from ..auth.options import AUTH_KEYS as AUTH_KEYS  # the --auth-* options a worker is handed
from ..dispatch import Dispatcher
from ..mcp.request_state import KEYS_ENV, new_keys_env
from ..mcp.server import MCPServer
from ..store import is_memory_url, open_store
from ..targets import TargetError, load_target
from ..transports.asgi import HTTPSecurity
from ..transports.http import JSONRPCHTTPApp
from ..transports.serve_http import run_uvicorn
from .app import mcp_http_app
from .server import StreamableHTTPApp

__all__ = ["serve_mcp_workers", "worker_app", "build_app", "resolve_target", "WorkersRefused", "DEFAULT_ATTRS"]

_TARGET, _STORE, _STATELESS, _REMOTE = ("STURDYRPC_WORKER_TARGET", "STURDYRPC_WORKER_STORE", "STURDYRPC_WORKER_STATELESS",
                                        "STURDYRPC_WORKER_ALLOW_REMOTE")
_AUTH, _URL = "STURDYRPC_WORKER_AUTH", "STURDYRPC_WORKER_URL"


class WorkersRefused(ValueError):
    """The asked combination would break sessions (several workers, no shared store, not stateless)."""


def check_workers(workers: int, store: str | None, stateless: bool) -> None:
    """Raise :class:`WorkersRefused` unless ``workers`` processes can share the sessions."""
    if workers < 1:
        raise WorkersRefused("--workers must be at least 1")
    if workers > 1 and is_memory_url(store) and not stateless:
        raise WorkersRefused(
            f"--workers {workers} with the memory store would break sessions (each worker would know only its own); "
            "pass --store redis://HOST:PORT/DB to share them, or --stateless")


#: What ``module:attr`` may name when no attribute is given (``sturdyrpc run`` uses the same).
DEFAULT_ATTRS = ("mcp", "server", "app", "rpc")
_KINDS: tuple[type, ...] = (MCPServer, StreamableHTTPApp, Dispatcher, JSONRPCHTTPApp)


def resolve_target(spec: str, *, store: str | None = None, stateless: bool = False, **extra: Any) -> Any:
    """The :class:`MCPServer`, :class:`Dispatcher` or app (Streamable HTTP, plain JSON-RPC) that ``spec`` names
    (raises :class:`~sturdyrpc.targets.TargetError`). A factory taking ``**options`` is called
    with ``store`` and ``stateless``; a factory without arguments is called as it is."""
    options: dict[str, Any] = {"store": None if is_memory_url(store) else store}
    if stateless:
        options["stateless"] = True
    options.update(extra)
    return load_target(spec, _KINDS, default_attrs=DEFAULT_ATTRS, factory_options=options)


def auth_security(auth: Mapping[str, Any] | None, default_resource: str) -> tuple[HTTPSecurity | None, list[str]]:
    """The HTTP security of the ``--auth-*`` options (``auth``: :data:`AUTH_KEYS`, and
    ``server_wide``: whether ``auth_scopes`` is required on every request, default True) and the
    scopes for the tools when not server-wide. (None, []) without options. Raises
    :class:`~sturdyrpc.auth.options.AuthOptionsError` for options that do not fit."""
    if not auth or not any(auth.get(k) for k in AUTH_KEYS):
        return None, []
    from ..auth.options import auth_from_args, split_scopes

    server_wide = bool(auth.get("server_wide", True))
    rs = auth_from_args(argparse.Namespace(**{k: auth.get(k) for k in AUTH_KEYS}), default_resource, server_wide_scopes=server_wide)
    return HTTPSecurity(auth=rs), ([] if server_wide else split_scopes(auth.get("auth_scopes")))


def build_app(target: Any, *, store: str | None = None, stateless: bool = False, allow_remote: bool = False,
              auth: Mapping[str, Any] | None = None, public_url: str = "") -> Any:
    """The ASGI app for ``target``: an :class:`MCPServer` (Streamable HTTP at ``/mcp``), a
    :class:`Dispatcher` (plain JSON-RPC over HTTP POST), a Streamable HTTP app, a
    ``"module:attr"`` naming one, or a factory of one (see :func:`resolve_target`).
    ``auth``: see :func:`auth_security` (``public_url``, the server's MCP URL, is the default
    audience); a factory taking ``**options`` gets ``security`` and ``tool_scopes``."""
    security, tool_scopes = auth_security(auth, public_url)
    if isinstance(target, str):
        extra: dict[str, Any] = {"security": security} if security is not None else {}
        if tool_scopes:
            extra["tool_scopes"] = tool_scopes
        obj = resolve_target(target, store=store, stateless=stateless, **extra)
    else:
        obj = target
    if isinstance(obj, MCPServer):
        options: dict[str, Any] = {"store": None if is_memory_url(store) else store}
        if stateless:
            options["stateless"] = True
        if security is not None:
            options["security"] = security
        obj = mcp_http_app(obj, **options)
    elif isinstance(obj, Dispatcher):
        obj = JSONRPCHTTPApp(obj)
    elif security is not None and isinstance(obj, (StreamableHTTPApp, JSONRPCHTTPApp)) and obj.security.auth is None:
        # An app built without the token check the options ask for: serving it would fail open.
        raise TargetError(f"{target} built its app without the --auth-* options' token check: let the factory "
                          "take **options and pass security= on to the app")
    if not isinstance(obj, (StreamableHTTPApp, JSONRPCHTTPApp)):
        raise TypeError(f"{target!r} is no MCPServer, Dispatcher, Streamable HTTP app or factory of one")
    if allow_remote:
        # Reached from elsewhere, the Host header carries the server's public name.
        obj.security.allowed_hosts = None
        obj.security.__post_init__()
    return obj


def worker_app() -> Any:
    """uvicorn's factory in each worker process: the app the launcher described in the environment."""
    auth = json.loads(os.environ[_AUTH]) if os.environ.get(_AUTH) else None
    return build_app(os.environ[_TARGET], store=os.environ.get(_STORE) or None, stateless=os.environ.get(_STATELESS) == "1",
                     allow_remote=os.environ.get(_REMOTE) == "1", auth=auth, public_url=os.environ.get(_URL, ""))


def serve_mcp_workers(target: Any, host: str, port: int, *, workers: int = 1, store: str | None = None,
                      stateless: bool = False, allow_remote: bool = False, log_level: str = "warning",
                      auth: Mapping[str, Any] | None = None) -> None:
    """Serve ``target`` (``"module:attr"``: an MCPServer, or a factory of one or of its app) on
    ``host:port`` with ``workers`` processes and sessions in ``store`` (``"memory"``/None or
    ``"redis://host:port/db"``). Raises :class:`WorkersRefused` for several workers without a
    shared store unless ``stateless``, ``ValueError`` for an unknown store URL, ``ImportError``
    without the ``redis`` package, and
    :class:`~sturdyrpc.transports.serve_http.RemoteBindRefused` for a non-loopback ``host``
    without ``allow_remote``. Returns when the server stops (SIGINT/SIGTERM)."""
    public_url = f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"
    # What does not fit fails here, once, not in every worker.
    auth_security(auth, public_url)
    if workers > 1:
        if not isinstance(target, str):
            raise TypeError("several workers import the target by name: pass it as 'module:attr'")
        found = load_target(target, _KINDS, default_attrs=DEFAULT_ATTRS, call_factories=False)
        # Plain JSON-RPC keeps nothing between requests: any number of workers may serve it.
        check_workers(workers, store, stateless or isinstance(found, Dispatcher))
        if auth and not isinstance(found, _KINDS):
            # Only the app a factory returns tells whether it took the token check: refused here
            # rather than by every worker, which uvicorn would start again and again.
            build_app(target, store=store, stateless=stateless, auth=auth, public_url=public_url)
    check_workers(workers, store, True)
    if not is_memory_url(store):
        open_store(store)  # a bad URL or a missing redis package
    if workers == 1:
        run_uvicorn(build_app(target, store=store, stateless=stateless, allow_remote=allow_remote, auth=auth,
                              public_url=public_url), host, port, allow_remote=allow_remote, log_level=log_level)
        return
    os.environ[_TARGET] = target
    os.environ[_STORE] = store or "memory"
    os.environ[_STATELESS] = "1" if stateless else ""
    os.environ[_REMOTE] = "1" if allow_remote else ""
    os.environ[_AUTH] = json.dumps(dict(auth)) if auth else ""
    os.environ[_URL] = public_url
    # One key ring for all workers of this launch (a shared store replaces it with its own).
    os.environ.setdefault(KEYS_ENV, new_keys_env())
    run_uvicorn(f"{__name__}:worker_app", host, port, allow_remote=allow_remote, workers=workers, log_level=log_level)
