"""Running an ASGI app on the embedded server (uvicorn), with a safe default bind address.

Only loopback addresses are served unless ``allow_remote`` is set: a demo or development
server must not become reachable from the network by a typo.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from .asgi import LOCAL_HOSTS, ASGIApp

__all__ = ["parse_host_port", "is_loopback", "run_uvicorn", "RemoteBindRefused"]

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


def run_uvicorn(app: ASGIApp | str, host: str, port: int, *, allow_remote: bool = False, workers: int = 1,
                log_level: str = "warning", **uvicorn_options: Any) -> None:
    """Serve ``app`` (an app, or an ``"module:factory"`` string for several workers) until stopped."""
    if not allow_remote and not is_loopback(host):
        raise RemoteBindRefused(f"refusing to bind {host!r}: not a loopback address (pass allow_remote)")
    import uvicorn

    # proxy_headers off: a direct server must not believe X-Forwarded-For from any client.
    options: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "lifespan": "on", "access_log": False,
                               "proxy_headers": False}
    if workers > 1:
        if not isinstance(app, str):
            raise ValueError("several workers need the app as an import string ('module:factory')")
        options["workers"] = workers
        options["factory"] = True
    options.update(uvicorn_options)
    uvicorn.run(app, **options)
