"""An MCP server on Streamable HTTP that does NOT check SEP-2243 ``Mcp-Param-*`` headers (its
app is built with ``param_headers=None``), for the HTTP guard's tests: its tools annotate
parameters with ``x-mcp-header``, and ``seen`` says how many calls of each tool reached it, so a
test can tell what guard kept from it. Tools come in pages of two (``route`` on the second page).

``python tests/servers/guard_param_upstream.py PORT`` serves it at ``http://127.0.0.1:PORT/mcp``;
with ``--check`` it checks the headers as our server does (400, -32020).
"""

from __future__ import annotations

import sys
from collections import Counter

from sturdyrpc.mcp import MCPServer

mcp = MCPServer("guard-param-upstream", page_size=2)
_calls: Counter[str] = Counter()


@mcp.tool()
def seen(tool: str) -> int:
    """How many calls of ``tool`` reached this server."""
    return _calls[tool]


@mcp.tool()
def echo(text: str) -> str:
    """Return the text as it came (no headers)."""
    _calls["echo"] += 1
    return text


@mcp.tool(name="route", input_schema={
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "query": {"type": "string"},
    },
    "required": ["region", "query"],
})
def route(region: str, query: str, priority: int | None = None, verbose: bool | None = None) -> str:
    _calls["route"] += 1
    return f"region={region} priority={priority} verbose={verbose} query={query}"


@mcp.tool(name="broken", input_schema={"type": "object", "properties": {"where": {"type": "string"}}})
def broken(where: str | None = None) -> str:
    _calls["broken"] += 1
    return f"where={where}"


# A third-party server may list annotations that break SEP-2243's rules (ours refuses them at
# registration): "broken" is listed with a header name that is no HTTP token.
mcp.tools["broken"].input_schema["properties"]["where"]["x-mcp-header"] = "Has Space"


def main() -> None:
    from sturdyrpc.mcp_http.app import mcp_http_app
    from sturdyrpc.transports.serve_http import run_uvicorn

    # Without --check the headers pass unchecked: guard's to check.
    app = mcp_http_app(mcp) if "--check" in sys.argv[2:] else mcp_http_app(mcp, param_headers=None)
    run_uvicorn(app, "127.0.0.1", int(sys.argv[1]))


if __name__ == "__main__":
    main()
