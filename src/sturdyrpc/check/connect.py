"""Opening a probe: a new server process, or for ``cfg.url`` a new HTTP conversation.

The one module that knows both kinds, so that neither imports the other's.
"""

from __future__ import annotations

from .config import Config
from .http_probe import HTTPProbe
from .probe import Probe

__all__ = ["new_probe"]


def new_probe(cfg: Config, *, handshake: bool = True) -> Probe:
    """A fresh probe on the server ``cfg`` names (``handshake``: initialize first, for MCP)."""
    if cfg.url:
        return HTTPProbe(cfg, handshake=handshake)
    return Probe(cfg, handshake=handshake)
