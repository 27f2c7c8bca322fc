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
from ..mcp.serving import register as register_transport
from ..store import is_memory_url, open_store
from ..targets import TargetError, load_target
from ..transports.asgi import HTTPSecurity
from ..transports.http import JSONRPCHTTPApp
from ..transports.loops import event_loop
from ..transports.serve_http import run_uvicorn, serving_security
from .app import mcp_http_app
from .server import StreamableHTTPApp

__all__ = ["serve_mcp_workers", "worker_app", "build_app", "resolve_target", "WorkersRefused", "DEFAULT_ATTRS",
           "HTTP_KEYS"]

_TARGET, _STORE, _STATELESS, _REMOTE = ("STURDYRPC_WORKER_TARGET", "STURDYRPC_WORKER_STORE", "STURDYRPC_WORKER_STATELESS",
                                        "STURDYRPC_WORKER_ALLOW_REMOTE")
_AUTH, _URL, _HTTP = "STURDYRPC_WORKER_AUTH", "STURDYRPC_WORKER_URL", "STURDYRPC_WORKER_HTTP"
#: The keys of ``http=``: ``allow_hosts`` and ``trusted_proxies`` (lists of strings, the
#: ``--allow-host`` and ``--trusted-proxy`` options), ``keepalive`` (seconds, ``--keepalive``)
#: and ``loop`` (``--loop``: auto, asyncio or uvloop; the launcher's, given to every worker).
HTTP_KEYS = ("allow_hosts", "trusted_proxies", "keepalive", "loop")


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
_APPS: tuple[type, ...] = (StreamableHTTPApp, JSONRPCHTTPApp)
_KINDS: tuple[type, ...] = (MCPServer, Dispatcher, *_APPS)


def resolve_target(spec: str, *, store: str | None = None, stateless: bool = False, **extra: Any) -> Any:
    """The :class:`MCPServer`, :class:`Dispatcher` or HTTP app (Streamable HTTP or plain
    JSON-RPC) that ``spec`` names (raises :class:`~sturdyrpc.targets.TargetError`). A factory
    taking ``**options`` is called with ``store``, ``stateless`` and ``extra``; a factory without
    arguments is called as it is."""
    options: dict[str, Any] = {"store": None if is_memory_url(store) else store}
    if stateless:
        options["stateless"] = True
    options.update(extra)
    return load_target(spec, _KINDS, default_attrs=DEFAULT_ATTRS, factory_options=options)


def auth_security(auth: Mapping[str, Any] | None, default_resource: str, http: Mapping[str, Any] | None = None, *,
                  bind_host: str = "127.0.0.1", allow_remote: bool = False) -> tuple[HTTPSecurity, list[str]]:
    """The HTTP security of the command-line options, and the scopes for the tools when not
    server-wide: ``auth`` holds the ``--auth-*`` options (:data:`AUTH_KEYS`, and ``server_wide``:
    whether ``auth_scopes`` is required on every request, default True; ``default_resource``,
    the served endpoint's URL, is the default audience); ``http`` the Host policy
    (:data:`HTTP_KEYS`), applied by :func:`~sturdyrpc.transports.serve_http.serving_security`.
    Raises :class:`~sturdyrpc.auth.options.AuthOptionsError` for options that do not fit and
    ValueError for a trusted proxy that is no address or network."""
    http = http or {}
    rs = None
    tool_scopes: list[str] = []
    if auth and any(auth.get(k) for k in AUTH_KEYS):
        from ..auth.options import auth_from_args, split_scopes

        server_wide = bool(auth.get("server_wide", True))
        rs = auth_from_args(argparse.Namespace(**{k: auth.get(k) for k in AUTH_KEYS}), default_resource,
                            server_wide_scopes=server_wide)
        tool_scopes = [] if server_wide else split_scopes(auth.get("auth_scopes"))
    security = serving_security(bind_host=bind_host, allow_remote=allow_remote, allow_hosts=http.get("allow_hosts") or (),
                                trusted_proxies=http.get("trusted_proxies") or (), auth=rs)
    return security, tool_scopes


def _asks_security(auth: Mapping[str, Any] | None, http: Mapping[str, Any]) -> list[str]:
    """The options that an app built elsewhere would silently drop."""
    asked = [f"--{k.replace('_', '-')}" for k in AUTH_KEYS if auth and auth.get(k)]
    if http.get("allow_hosts"):
        asked.append("--allow-host")
    if http.get("trusted_proxies"):
        asked.append("--trusted-proxy")
    return asked


def build_app(target: Any, *, store: str | None = None, stateless: bool = False, allow_remote: bool = False,
              auth: Mapping[str, Any] | None = None, base_url: str = "http://127.0.0.1", bind_host: str = "127.0.0.1",
              http: Mapping[str, Any] | None = None) -> Any:
    """The ASGI app for ``target``: an :class:`MCPServer` (Streamable HTTP at ``/mcp``), a
    :class:`Dispatcher` (plain JSON-RPC over HTTP POST at ``/``), an HTTP app of ours, a
    ``"module:attr"`` naming one, or a factory of one (see :func:`resolve_target`).

    Every app gets the security of the options (:func:`auth_security`: ``auth``, the Host
    policy of ``http`` and ``allow_remote``; the default audience is ``base_url`` plus the
    endpoint's path), and ``http["keepalive"]`` for Streamable HTTP. A factory taking
    ``**options`` gets ``security`` (for ``/mcp``), ``tool_scopes`` and ``keepalive_interval``;
    an app it returns must carry that ``security`` when ``--auth-*``, ``--allow-host`` or
    ``--trusted-proxy`` were given (TargetError otherwise: they would silently not apply)."""
    http = dict(http or {})

    def security_for(path: str) -> tuple[HTTPSecurity, list[str]]:
        return auth_security(auth, base_url.rstrip("/") + path, http, bind_host=bind_host, allow_remote=allow_remote)

    security, tool_scopes = security_for("/mcp")
    keepalive = http.get("keepalive")
    if isinstance(target, str):
        extra: dict[str, Any] = {"security": security}
        if tool_scopes:
            extra["tool_scopes"] = tool_scopes
        if keepalive is not None:
            extra["keepalive_interval"] = keepalive
        obj = resolve_target(target, store=store, stateless=stateless, **extra)
    else:
        obj = target
    if isinstance(obj, MCPServer):
        options: dict[str, Any] = {"store": None if is_memory_url(store) else store, "security": security}
        if stateless:
            options["stateless"] = True
        if keepalive is not None:
            options["keepalive_interval"] = keepalive
        return mcp_http_app(obj, **options)
    if isinstance(obj, Dispatcher):
        return JSONRPCHTTPApp(obj, security=security_for("/")[0])
    if not isinstance(obj, (StreamableHTTPApp, JSONRPCHTTPApp)):
        raise TypeError(f"{target!r} is no MCPServer, Dispatcher, HTTP app or factory of one")
    asked = _asks_security(auth, http)
    if asked and obj.security is not security:
        # Built with its own HTTPSecurity: serving it would drop the options (an --auth-* server without a token check).
        raise TargetError(f"{target} returned an app built without the security of {', '.join(asked)}: "
                          "give the factory **options and pass them on (security=...)")
    return obj


def worker_app() -> Any:
    """uvicorn's factory in each worker process: the app the launcher described in the environment."""
    auth = json.loads(os.environ[_AUTH]) if os.environ.get(_AUTH) else None
    http = json.loads(os.environ[_HTTP]) if os.environ.get(_HTTP) else {}
    bind_host = http.pop("bind_host", "127.0.0.1")
    return build_app(os.environ[_TARGET], store=os.environ.get(_STORE) or None, stateless=os.environ.get(_STATELESS) == "1",
                     allow_remote=os.environ.get(_REMOTE) == "1", auth=auth, base_url=os.environ.get(_URL, "http://127.0.0.1"),
                     bind_host=bind_host, http=http)


def serve_mcp_workers(target: Any, host: str, port: int, *, workers: int = 1, store: str | None = None,
                      stateless: bool = False, allow_remote: bool = False, log_level: str = "warning",
                      auth: Mapping[str, Any] | None = None, http: Mapping[str, Any] | None = None) -> None:
    """Serve ``target`` (``"module:attr"``: an MCPServer, a Dispatcher, or a factory of one or
    of an HTTP app of ours) on ``host:port`` with ``workers`` processes and sessions in ``store``
    (``"memory"``/None or ``"redis://host:port/db"``). ``auth``: the ``--auth-*`` options
    (:data:`AUTH_KEYS`), ``http``: ``--allow-host``, ``--trusted-proxy`` and ``--keepalive``
    (:data:`HTTP_KEYS`); every worker applies them (:func:`build_app`) and runs on the event
    loop of ``http["loop"]`` (:mod:`sturdyrpc.transports.loops`). Raises
    :class:`WorkersRefused` for several workers without a shared store unless ``stateless`` or
    the target is a Dispatcher, ``ValueError`` for an unknown store URL or a bad option,
    ``ImportError`` without the ``redis`` package, and
    :class:`~sturdyrpc.transports.serve_http.RemoteBindRefused` for a non-loopback ``host``
    without ``allow_remote``. Returns when the server stops (SIGINT/SIGTERM)."""
    base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    http = {k: v for k, v in dict(http or {}).items() if v}
    loop = http.pop("loop", None)  # uvicorn's, not the app's
    event_loop(loop)  # an unknown loop, or uvloop not installed, fails here once
    # What does not fit fails here, once, not in every worker.
    auth_security(auth, base_url + "/mcp", http, bind_host=host, allow_remote=allow_remote)
    if workers > 1:
        if not isinstance(target, str):
            raise TypeError("several workers import the target by name: pass it as 'module:attr'")
        found = load_target(target, _KINDS, default_attrs=DEFAULT_ATTRS, call_factories=False)
        # Plain JSON-RPC keeps nothing between requests: any number of workers may serve it.
        check_workers(workers, store, stateless or isinstance(found, (Dispatcher, JSONRPCHTTPApp)))
        if (auth or http) and not isinstance(found, _KINDS):
            # Only the app a factory returns tells whether it took the options' security: refused
            # here rather than by every worker, which uvicorn would start again and again.
            build_app(target, store=store, stateless=stateless, auth=auth, base_url=base_url, bind_host=host, http=http)
    check_workers(workers, store, True)
    if not is_memory_url(store):
        open_store(store)  # a bad URL or a missing redis package
    if workers == 1:
        run_uvicorn(build_app(target, store=store, stateless=stateless, allow_remote=allow_remote, auth=auth,
                              base_url=base_url, bind_host=host, http=http), host, port, allow_remote=allow_remote,
                    log_level=log_level, loop=loop)
        return
    os.environ[_TARGET] = target
    os.environ[_STORE] = store or "memory"
    os.environ[_STATELESS] = "1" if stateless else ""
    os.environ[_REMOTE] = "1" if allow_remote else ""
    os.environ[_AUTH] = json.dumps(dict(auth)) if auth else ""
    os.environ[_URL] = base_url
    os.environ[_HTTP] = json.dumps({**http, "bind_host": host})
    # One key ring for all workers of this launch (a shared store replaces it with its own).
    os.environ.setdefault(KEYS_ENV, new_keys_env())
    run_uvicorn(f"{__name__}:worker_app", host, port, allow_remote=allow_remote, workers=workers, log_level=log_level, loop=loop)


def _run(server: Any, *, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> int:
    """``server.run("http", host=, port=, ...)``: one process on ``host:port`` (``/mcp``);
    ``options`` as :func:`serve_mcp_workers` takes them (``stateless``, ``store``, ``auth``...)."""
    serve_mcp_workers(server, host, port, **options)
    return 0


register_transport("http", _run)
