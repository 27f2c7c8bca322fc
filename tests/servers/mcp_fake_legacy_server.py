"""A minimal handshake-era MCP server for the client's fallback tests.

``python mcp_fake_legacy_server.py MODE`` where MODE says what it does with a request that comes
before ``initialize``: ``error`` (answers -32600), ``notfound`` (-32601), ``silent`` (never
answers), ``exit`` (quits, as some SDKs' servers do). After ``initialize`` (2025-06-18 at most)
it answers ``tools/list`` and ``tools/call`` of ``echo``.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    mode = sys.argv[1]
    initialized = False
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        mid, method = msg["id"], msg.get("method")

        def reply(result: object = None, error: object = None, mid: object = mid) -> None:
            out = {"jsonrpc": "2.0", "id": mid}
            out.update({"error": error} if error is not None else {"result": result})
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()

        if method == "initialize":
            initialized = True
            reply({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "fake-legacy", "version": "1"}})
        elif not initialized:
            if mode == "exit":
                return
            if mode == "error":
                reply(error={"code": -32600, "message": "Server not initialized"})
            elif mode == "notfound":
                reply(error={"code": -32601, "message": "Method not found"})
        elif method == "tools/list":
            reply({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
        elif method == "tools/call":
            reply({"content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}]})
        else:
            reply(error={"code": -32601, "message": "Method not found"})


if __name__ == "__main__":
    main()
