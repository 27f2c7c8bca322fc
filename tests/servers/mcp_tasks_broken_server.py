"""A stdio MCP server whose tasks break the rules (for the task checks of ``sturdyrpc check``):
tasks/result without the related-task ``_meta``, any task id accepted, a finished task cancelled
again, and a tool that requires tasks answered when called plainly."""

from __future__ import annotations

import json
import sys

TASK = {"taskId": "t1", "status": "working", "createdAt": "2025-11-25T00:00:00Z", "lastUpdatedAt": "2025-11-25T00:00:00Z", "ttl": 60000}
TOOLS = [
    {"name": "job", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
    {"name": "must", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
]
TEXT = {"content": [{"type": "text", "text": "done"}], "isError": False}


def answer(msg: dict) -> object:
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
                "serverInfo": {"name": "broken-tasks", "version": "1"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return {"task": TASK} if "task" in params else TEXT
    if method == "tasks/get":
        return {**TASK, "taskId": params.get("taskId"), "status": "completed"}
    if method == "tasks/result":
        return TEXT
    if method == "tasks/cancel":
        return {**TASK, "taskId": params.get("taskId"), "status": "cancelled"}
    return None


def main() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "id" not in msg:
            continue
        result = answer(msg)
        if result is None:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
