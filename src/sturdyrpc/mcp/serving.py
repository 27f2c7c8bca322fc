"""``server.run(transport=...)``: the ways to run a server, by name; and OpenTelemetry on by itself.

The code that serves sits above the facade (stdio: :mod:`.stdio`; HTTP: :mod:`sturdyrpc.mcp_http`,
a layer above this package), so each registers its runner here when it is imported, and
:func:`run` imports a transport's home by its module name the first time it is asked for: the
one place a layer above is reached from here, on purpose and by name, so the import layers
stay one way. :func:`telemetry` reaches :mod:`sturdyrpc.otel` the same way when a server starts
serving (its lifespan's first entry).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

__all__ = ["register", "run", "telemetry", "TRANSPORTS", "OTEL"]

#: ``runner(server, **options) -> exit code``, by transport name.
Runner = Callable[..., int]

#: Each transport's home: the module that registers its runner.
TRANSPORTS = {"stdio": "sturdyrpc.mcp.stdio", "http": "sturdyrpc.mcp_http.workers"}
_ALIASES = {"streamable-http": "http"}
#: OpenTelemetry's home (a layer above this package).
OTEL = "sturdyrpc.otel"
_RUNNERS: dict[str, Runner] = {}


def register(transport: str, runner: Runner) -> None:
    """Make ``runner`` the way :func:`run` serves ``transport`` (called by the transport's home)."""
    _RUNNERS[transport] = runner


def run(server: Any, transport: str, options: dict[str, Any]) -> int:
    """Serve ``server`` on ``transport`` (``"stdio"``, ``"http"``/``"streamable-http"``) until it
    stops; the exit code."""
    name = _ALIASES.get(transport, transport)
    home = TRANSPORTS.get(name)
    if home is None:
        raise ValueError(f"server.run(): transport must be 'stdio' or 'http' (alias 'streamable-http'), got {transport!r}")
    if name not in _RUNNERS:
        importlib.import_module(home)  # registers its runner (see the module docstring)
    return _RUNNERS[name](server, **options)


def telemetry(server: Any) -> None:
    """Trace ``server`` when an OpenTelemetry SDK tracer or meter provider is configured as it
    starts serving (what the official SDK and FastMCP do): :func:`sturdyrpc.otel.instrument_server`,
    which installs nothing, and imports nothing of OpenTelemetry, when none is configured (and
    returns the first middleware when called again). ``STURDYRPC_OTEL=off`` turns it off."""
    if os.environ.get("STURDYRPC_OTEL", "").lower() in ("0", "off", "false", "no"):
        return
    importlib.import_module(OTEL).instrument_server(server)
