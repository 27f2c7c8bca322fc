"""A correct MCP stdio server (standard library only, on top of reference.py): versions
2025-03-26, 2025-06-18 and 2025-11-25 (initialize handshake) and 2026-07-28 (``_meta`` on
every request, ``server/discover``). ``sturdyrpc check --mcp`` must pass it.

Tools: ``echo`` {text}, ``sleep`` {seconds} (progress every 0.1 s, stops on cancel) and
``fail`` (an isError result with a generic message and an incident id, details on stderr).
"""

from __future__ import annotations

import sys
import threading
import uuid
from typing import Any

from reference import Invalid, Server

VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN = "2026-07-28"
PV, CAPS = "io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = {"name": "zoo-mcp-reference", "version": "1.0"}

TOOLS = [
    {"name": "echo", "description": "Return the text.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "sleep", "description": "Wait, reporting progress.", "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object", "properties": {}}},
]


class MCPServer(Server):
    def __init__(self) -> None:
        super().__init__()
        self.version: str | None = None
        self.cancelled: dict[Any, threading.Event] = {}

    def check_request(self, msg: Any) -> None:
        super().check_request(msg)
        if "id" in msg and msg["id"] is None:
            raise Invalid(-32600, "Invalid Request: id must not be null")
        if type(msg.get("id")) is float:
            raise Invalid(-32600, "Invalid Request: id must be a string or an integer")

    def handle_batch(self, batch: list[Any]) -> None:
        if self.version != "2025-03-26":
            self.write(self.error(-32600, "Invalid Request: batches are not supported in this protocol version"))
            return
        super().handle_batch(batch)

    def handle(self, msg: Any) -> dict[str, Any] | None:
        if self.is_response(msg):
            return None
        try:
            self.check_request(msg)
        except Invalid as exc:
            return self.error(exc.code, exc.message, exc.id)
        method, params, notification = msg["method"], msg.get("params", {}), "id" not in msg
        if notification:
            if method == "notifications/cancelled" and isinstance(params, dict):
                ev = self.cancelled.get(repr(params.get("requestId")))
                if ev is not None:
                    ev.set()
            return None
        id = msg["id"]
        if not isinstance(params, dict):
            return self.error(-32602, "Invalid params: params must be an object", id)
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        if method == "server/discover" or PV in meta:
            return self.handle_modern(id, method, params, meta)
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.version = asked if asked in VERSIONS else VERSIONS[-1]
            return self.ok(id, {
                "protocolVersion": self.version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO,
            })
        if method == "ping":
            return self.ok(id, {})
        if self.version is None:
            # Neither initialized nor a 2026-07-28 request (which must carry _meta).
            return self.error(-32602, "Invalid params: initialize first, or send params._meta (2026-07-28)", id)
        if method == "tools/list":
            return self.ok(id, {"tools": TOOLS})
        if method == "tools/call":
            return self.call_tool(id, params)
        return self.error(-32601, "Method not found", id)

    def handle_modern(self, id: Any, method: str, params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
        if not isinstance(meta.get(PV), str) or not isinstance(meta.get(CAPS), dict):
            return self.error(-32602, f"Invalid params: _meta must carry {PV} and {CAPS}", id)
        if meta[PV] != MODERN:
            return {"jsonrpc": "2.0", "id": id, "error": {
                "code": -32022, "message": "Unsupported protocol version",
                "data": {"supported": [MODERN, *VERSIONS], "requested": meta[PV]}}}
        if method == "server/discover":
            reply = self.ok(id, {"supportedVersions": [MODERN, *VERSIONS], "capabilities": {"tools": {}}})
        elif method == "tools/list":
            reply = self.ok(id, {"tools": TOOLS})
        elif method == "tools/call":
            reply = self.call_tool(id, params)
        else:
            return self.error(-32601, "Method not found", id)
        if reply is not None and "result" in reply:
            self.finish_modern(reply["result"])
        return reply

    def finish_modern(self, result: dict[str, Any]) -> None:
        result["resultType"] = "complete"
        result.setdefault("_meta", {})["io.modelcontextprotocol/serverInfo"] = SERVER_INFO

    def ok(self, id: Any, result: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": id, "result": result}

    def call_tool(self, id: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "echo":
            return self.ok(id, {"content": [{"type": "text", "text": str(args.get("text", ""))}]})
        if name == "fail":
            incident = uuid.uuid4().hex[:8]
            print(f"tool fail raised (incident {incident})", file=sys.stderr)
            return self.ok(id, {"content": [{"type": "text", "text": f"The tool failed (incident {incident})."}], "isError": True})
        if name == "sleep":
            return self.sleep(id, params, float(args.get("seconds", 0)))
        return self.error(-32602, "Unknown tool", id)

    def sleep(self, id: Any, params: dict[str, Any], seconds: float) -> dict[str, Any] | None:
        token = (params.get("_meta") or {}).get("progressToken")
        ev = self.cancelled.setdefault(repr(id), threading.Event())
        try:
            steps = max(1, int(seconds / 0.1))
            for i in range(steps):
                if ev.wait(seconds / steps):
                    return self.on_cancelled(id)
                if token is not None:
                    self.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": i + 1, "total": steps}})
            return self.ok(id, {"content": [{"type": "text", "text": "done"}]})
        finally:
            self.cancelled.pop(repr(id), None)

    def on_cancelled(self, id: Any) -> dict[str, Any] | None:
        return None  # a cancelled request gets no reply


if __name__ == "__main__":
    MCPServer().serve()
