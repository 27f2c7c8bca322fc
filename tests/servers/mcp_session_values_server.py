"""A tiny MCP server for the workers tests: per-session values (``ctx.state``), served by
``serve_mcp_workers("mcp_session_values_server:server", ...)`` (tests/servers/ on PYTHONPATH)."""

from __future__ import annotations

import os
import sys

from sturdyrpc.mcp import MCPContext, MCPServer

server = MCPServer("session-values", "1")


@server.tool()
async def remember(text: str, ctx: MCPContext) -> str:
    """Append ``text`` to this session's notes."""
    notes = list(ctx.state.get("notes", []))
    notes.append(text)
    ctx.state["notes"] = notes
    return str(os.getpid())


@server.tool()
async def recall(ctx: MCPContext) -> str:
    """This session's notes, joined."""
    return ",".join(ctx.state.get("notes", []))


if __name__ == "__main__":
    from sturdyrpc.mcp_http.workers import serve_mcp_workers

    port, store, workers = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    serve_mcp_workers("mcp_session_values_server:server", "127.0.0.1", port, workers=workers, store=store)
