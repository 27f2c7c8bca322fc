"""Bug (MCP): answers a cancelled request with an error (code 0 "Request cancelled"), which the
client no longer expects (python-sdk#2480: Claude Code sees an unknown id and reconnects)."""

from mcp_reference import MCPServer


class Buggy(MCPServer):
    def on_cancelled(self, id):
        return {"jsonrpc": "2.0", "id": id, "error": {"code": 0, "message": "Request cancelled"}}


if __name__ == "__main__":
    Buggy().serve()
