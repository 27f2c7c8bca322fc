"""An MCP server over Streamable HTTP that wants a bearer token on every request.

    EXAMPLE_TOKEN=s3cret python examples/http_auth_server.py 127.0.0.1 8000
    sturdyrpc mcp tools --url http://127.0.0.1:8000/mcp      # 401: no token

Tokens are checked by a plain hook here; for OAuth 2.1 (JWTs against the issuer's keys, scopes
per tool) pass a sturdyrpc.auth.ResourceServer instead (docs/AUTH.md). Needs the http extra.
"""

import hmac
import os
import sys

from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.request_context import request_principal
from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity
from sturdyrpc.transports.serve_http import run_uvicorn

TOKEN = os.environ.get("EXAMPLE_TOKEN", "")
server = MCPServer("private", "1.0")


def verify(token: str) -> str | None:
    """The principal a token stands for, or None: the request gets 401 and reaches no tool."""
    return "alice" if TOKEN and hmac.compare_digest(token, TOKEN) else None


@server.tool()
async def whoami() -> str:
    return f"you are {request_principal()}"


app = mcp_http_app(server, security=HTTPSecurity(auth=BearerAuth(verify)))

if __name__ == "__main__":
    host, port = sys.argv[1], int(sys.argv[2])
    run_uvicorn(app, host, port)  # binds only 127.0.0.1 unless allow_remote=True
