"""Clients of transports that live above this package, by name (a proxy of a URL needs HTTP's).

The Streamable HTTP client is :mod:`sturdyrpc.mcp_http.connect`, a layer above this package: it
registers its ``connect_http`` here when it is imported, and :func:`connector` imports it by its
module name the first time it is asked for, as :mod:`.serving` does for the HTTP server, so the
import layers stay one way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["register", "connector", "HOMES"]

#: ``connect(target, **options)`` -> an async context manager yielding an ``MCPClient``.
Connector = Callable[..., Any]

#: Each transport's client home: the module that registers its connector.
HOMES = {"http": "sturdyrpc.mcp_http.connect"}
_CONNECTORS: dict[str, Connector] = {}


def register(transport: str, connect: Connector) -> None:
    """Make ``connect`` the way to open a client session over ``transport`` (called by its home)."""
    _CONNECTORS[transport] = connect


def connector(transport: str) -> Connector:
    """The registered connector of ``transport`` (its home imported first when needed)."""
    if transport not in _CONNECTORS:
        importlib.import_module(HOMES[transport])  # registers its connector (see the module docstring)
    return _CONNECTORS[transport]
