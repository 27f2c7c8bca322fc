"""Bug (MCP 2026-07-28): results carry no ``resultType`` (a server upgraded from 2025-11-25 without it)."""

from mcp_reference import SERVER_INFO, MCPServer


class Buggy(MCPServer):
    def finish_modern(self, result):
        result.setdefault("_meta", {})["io.modelcontextprotocol/serverInfo"] = SERVER_INFO


if __name__ == "__main__":
    Buggy().serve()
