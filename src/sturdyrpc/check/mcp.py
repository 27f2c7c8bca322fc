"""MCP checks (by protocol version) and the detection of MCP servers."""

from __future__ import annotations

from typing import Any

from .model import Report
from .session import HANDSHAKE_VERSIONS, MODERN_VERSION, Config, Session, modern_meta, same_id

__all__ = ["detect"]


def detect(cfg: Config, report: Report) -> None:
    """Find out whether the server speaks MCP, and which versions: ``server/discover`` first
    (2026-07-28), then ``initialize``. Fills in ``cfg``; never fails."""
    offer = cfg.protocol if cfg.protocol in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    session = Session(cfg, handshake=False)
    try:
        wait = max(cfg.timeout, 10.0)
        session.send({"jsonrpc": "2.0", "id": "detect-discover", "method": "server/discover", "params": {"_meta": modern_meta()}})
        reply, _ = session.wait_for(lambda v: type(v) is dict and same_id(v.get("id"), "detect-discover"), wait)
        result = reply.get("result") if reply else None
        if type(result) is dict and type(result.get("supportedVersions")) is list:
            cfg.discover_versions = [v for v in result["supportedVersions"] if type(v) is str]
            if type(result.get("capabilities")) is dict:
                cfg.capabilities = result["capabilities"]
        if not session.proc.alive() or session.proc.stdout_closed.is_set():
            session.close()
            session = Session(cfg, handshake=False)
        init = session.initialize(offer, id="detect-init", timeout=wait)
        result = init.get("result") if init else None
        if type(result) is dict and type(result.get("protocolVersion")) is str:
            cfg.handshake_versions = [result["protocolVersion"]]
            if type(result.get("serverInfo")) is dict:
                cfg.server_info = result["serverInfo"]
            if type(result.get("capabilities")) is dict:
                cfg.capabilities = result["capabilities"]
    finally:
        session.close()
    found = bool(cfg.discover_versions or cfg.handshake_versions)
    cfg.is_mcp = found or cfg.mcp is True
    if not cfg.is_mcp:
        return
    if cfg.protocol:
        cfg.version = cfg.protocol
    elif MODERN_VERSION in cfg.discover_versions:
        cfg.version = MODERN_VERSION
    elif cfg.handshake_versions:
        cfg.version = cfg.handshake_versions[0]
    else:
        cfg.version = HANDSHAKE_VERSIONS[-1]
    how = []
    if cfg.discover_versions:
        how.append(f"server/discover lists {', '.join(cfg.discover_versions)}")
    if cfg.handshake_versions:
        how.append(f"initialize({offer}) -> {cfg.handshake_versions[0]}")
    report.notes.append(("MCP detected: " + "; ".join(how)) if how else "MCP forced with --mcp (detection found nothing)")
    report.notes.append(f"checks speak MCP {cfg.version}")


def _unused(_: Any) -> None:
    pass
