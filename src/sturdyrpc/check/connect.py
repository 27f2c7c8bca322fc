"""Opening a probe: a new server process, or for ``cfg.url`` a new HTTP conversation.

The one module that knows both kinds, so that neither imports the other's. The HTTP probe (and
with it httpx, of the ``http`` extra) is imported only when a URL is checked: checking a stdio
server needs nothing beyond the ``cli`` extra.
"""

from __future__ import annotations

from .config import Config
from .probe import Probe

__all__ = ["new_probe"]


def new_probe(cfg: Config, *, handshake: bool = True) -> Probe:
    """A fresh probe on the server ``cfg`` names (``handshake``: initialize first, for MCP)."""
    if cfg.url:
        from .http_probe import HTTPProbe

        return HTTPProbe(cfg, handshake=handshake)
    return Probe(cfg, handshake=handshake)
