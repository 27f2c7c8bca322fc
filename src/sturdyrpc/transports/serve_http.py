"""Running an ASGI app on the embedded server (uvicorn), with a safe default bind address.

Only loopback addresses are served unless ``allow_remote`` is set: a demo or development
server must not become reachable from the network by a typo. What the ``Host`` check of a server
started this way allows is :func:`serving_security`'s rule (never "anything").

Each request's line + headers are bounded (``max_header_bytes``, 64 KiB by default: beyond it
``431``) and must arrive within ``header_timeout`` seconds (10 by default: after it ``408``), see
:mod:`sturdyrpc.transports.http_protocol` (which holds the defaults; it needs uvicorn and
httptools, so it is imported only when serving). Both the plain JSON-RPC and the MCP apps run here.

A :class:`~sturdyrpc.transports.loopwatch.LoopWatch` runs on the server's loop while its
lifespan does (``stall_warning=``: seconds the loop may be blocked before a warning is logged;
None: off), in every worker.

The event loop is :func:`~sturdyrpc.transports.loops.event_loop`'s choice (``loop=``, else
``STURDYRPC_LOOP``, else uvloop when installed), in every worker too.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable
from typing import Any

from .asgi import LOCAL_HOSTS, ASGIApp, BearerAuth, HTTPSecurity, Receive, Scope, Send
from .loops import event_loop
from .loopwatch import DEFAULT_STALL_WARNING, LoopWatch

__all__ = ["parse_host_port", "is_loopback", "run_uvicorn", "uvicorn_config", "RemoteBindRefused", "serving_security"]

log = logging.getLogger("sturdyrpc")


class RemoteBindRefused(ValueError):
    """A non-loopback address was asked for without ``allow_remote``."""


def parse_host_port(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``"127.0.0.1:8000"``, ``":8000"``, ``"8000"``, ``"[::1]:8000"`` -> (host, port)."""
    value = value.strip()
    if value.isdigit():
        return default_host, int(value)
    if value.startswith("["):
        end = value.index("]")
        host, rest = value[1:end], value[end + 1 :]
        port = rest.lstrip(":")
    else:
        host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in {value!r}; expected HOST:PORT")
    return host or default_host, int(port)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serving_security(*, bind_host: str, allow_remote: bool = False, allow_hosts: Iterable[str] = (),
                     trusted_proxies: Iterable[str] = (), auth: BearerAuth | None = None) -> HTTPSecurity:
    """The :class:`~.asgi.HTTPSecurity` of a server started from the command line (``sturdyrpc
    run``/``demo``), the one rule for what its ``Host`` check allows:

    - localhost names, the address or name it binds (not a wildcard such as ``0.0.0.0``), and
      every ``allow_hosts`` name (``--allow-host``);
    - with ``allow_remote`` (``--allow-remote``, a non-loopback bind allowed), any IP-address
      literal as well: a client that reaches the server by its address cannot be a DNS-rebinding
      page, whose requests carry the attacker's name. Names still need ``--allow-host``;
    - behind ``trusted_proxies`` (``--trusted-proxy``), the ``X-Forwarded-Host`` those proxies send
      is what is checked (see :class:`~sturdyrpc.transports.http_layer.HostOriginCheck`).
    """
    hosts = set(LOCAL_HOSTS)
    name = bind_host.strip().strip("[]").lower()
    try:
        wildcard = ipaddress.ip_address(name).is_unspecified
        name = f"[{name}]" if ":" in name else name
    except ValueError:
        wildcard = not name
    if not wildcard:
        hosts.add(name)
    hosts.update(h.strip().lower() for h in allow_hosts if h.strip())
    return HTTPSecurity(allowed_hosts=hosts, allow_ip_hosts=allow_remote, trusted_proxies=tuple(trusted_proxies), auth=auth)


def _uvicorn_options(host: str, port: int, allow_remote: bool, log_level: str, max_header_bytes: int | None,
                     header_timeout: float | None, loop: str | None, uvicorn_options: dict[str, Any]) -> dict[str, Any]:
    if not allow_remote and not is_loopback(host):
        raise RemoteBindRefused(f"refusing to bind {host!r}: not a loopback address (pass allow_remote)")
    # proxy_headers off: a direct server must not believe X-Forwarded-For from any client.
    # The loop by name, resolved here: uvicorn hands the same name to every worker it spawns.
    options: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "lifespan": "on", "access_log": False,
                               "proxy_headers": False, "loop": event_loop(loop)}
    bounded = False
    if uvicorn_options.get("http", "auto") in ("auto", "httptools"):
        try:
            from .http_protocol import bounded_protocol
        except ImportError:  # no httptools: uvicorn serves with h11
            log.warning("httptools is not installed: no header timeout (pip install 'sturdyrpc[http]')")
        else:
            options["http"] = bounded_protocol(max_header_bytes, header_timeout)
            bounded = True
    if not bounded:
        # h11's own bound on an unfinished head (it has no timer); 64 KiB as http_protocol's default.
        options["h11_max_incomplete_event_size"] = max_header_bytes if max_header_bytes is not None else 64 * 1024
    options.update({k: v for k, v in uvicorn_options.items() if k != "http" or v not in ("auto", "httptools")})
    return options


class _Watched:
    """``app`` with a :class:`LoopWatch` running while uvicorn's lifespan call lasts (the life
    of the server, on its loop)."""

    def __init__(self, app: ASGIApp, stall_warning: float) -> None:
        self.app = app
        self.watch = LoopWatch(stall_warning)  # a bad threshold fails here, before serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        self.watch.start()
        try:
            await self.app(scope, receive, send)
        finally:
            self.watch.stop()


# A worker process imports its app by name: these say which, and the threshold, to _watched_app.
_WATCHED_APP, _WATCHED_FACTORY, _WATCHED_STALL = "STURDYRPC_WATCHED_APP", "STURDYRPC_WATCHED_FACTORY", "STURDYRPC_STALL_WARNING"


def _watched_app() -> ASGIApp:
    """uvicorn's factory in a worker process: the app named by the launcher, watched."""
    from uvicorn.importer import import_from_string

    found = import_from_string(os.environ[_WATCHED_APP])
    app = found() if os.environ.get(_WATCHED_FACTORY) == "1" else found
    return _Watched(app, float(os.environ[_WATCHED_STALL]))


def uvicorn_config(app: ASGIApp, host: str, port: int, *, allow_remote: bool = False, log_level: str = "warning",
                   max_header_bytes: int | None = None, header_timeout: float | None = None,
                   stall_warning: float | None = DEFAULT_STALL_WARNING, loop: str | None = None, **uvicorn_options: Any) -> Any:
    """The ``uvicorn.Config`` :func:`run_uvicorn` serves with, for running ``uvicorn.Server(config)``
    yourself (in a thread, in tests, beside other tasks)."""
    import uvicorn

    options = _uvicorn_options(host, port, allow_remote, log_level, max_header_bytes, header_timeout, loop, uvicorn_options)
    return uvicorn.Config(_Watched(app, stall_warning) if stall_warning is not None else app, **options)


def run_uvicorn(app: ASGIApp | str, host: str, port: int, *, allow_remote: bool = False, workers: int = 1,
                log_level: str = "warning", max_header_bytes: int | None = None,
                header_timeout: float | None = None, stall_warning: float | None = DEFAULT_STALL_WARNING,
                loop: str | None = None, **uvicorn_options: Any) -> None:
    """Serve ``app`` (an app, or an ``"module:factory"`` string for several workers) until stopped.

    ``max_header_bytes`` bounds each request's line + headers (431 beyond it; None: 64 KiB) and
    ``header_timeout`` the seconds a client has to send them (408 after it; None: 10 s).
    ``stall_warning``: seconds the event loop may be blocked before a warning is logged
    (:mod:`.loopwatch`; None: off). ``loop``: ``"auto"``, ``"asyncio"`` or ``"uvloop"`` (None:
    ``STURDYRPC_LOOP``, else auto; see :mod:`.loops`).
    """
    options = _uvicorn_options(host, port, allow_remote, log_level, max_header_bytes, header_timeout, loop, uvicorn_options)
    import uvicorn

    if workers > 1:
        if not isinstance(app, str):
            raise ValueError("several workers need the app as an import string ('module:factory')")
        if max_header_bytes is not None or header_timeout is not None:
            # Workers are separate processes that import the protocol class by name.
            raise ValueError("several workers serve with the default max_header_bytes and header_timeout")
        options["workers"] = workers
        options["factory"] = True
    if stall_warning is not None:
        if isinstance(app, str):
            LoopWatch(stall_warning)  # a bad threshold fails here, not in every worker
            os.environ[_WATCHED_APP] = app
            os.environ[_WATCHED_FACTORY] = "1" if options.get("factory") else ""
            os.environ[_WATCHED_STALL] = repr(float(stall_warning))
            app = f"{__name__}:_watched_app"
            options["factory"] = True
        else:
            app = _Watched(app, stall_warning)
    uvicorn.run(app, **options)
