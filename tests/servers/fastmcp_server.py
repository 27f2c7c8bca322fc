"""A small FastMCP server (PyPI ``fastmcp``, the pinned version scripts/install_fastmcp.sh puts in its
own virtualenv): the tools the guard tests call, as a FastMCP user would write them.

Run with that virtualenv's Python: ``fastmcp_server.py stdio`` or ``fastmcp_server.py http PORT``
(Streamable HTTP on 127.0.0.1, path /mcp). ``fail`` raises with a secret in its message and
``sleep`` waits, for the checks that look for leaks and for in-flight requests.
"""

from __future__ import annotations

import asyncio
import sys

from fastmcp import FastMCP

mcp = FastMCP("fastmcp-guard-test")


@mcp.tool
def echo(text: str) -> str:
    """Return the text as it came."""
    return text


@mcp.tool
def add(a: int, b: int) -> int:
    """The sum of two integers."""
    return a + b


@mcp.tool
async def sleep(seconds: float = 0.1) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@mcp.tool
def fail() -> str:
    """Raise an exception whose text must not reach a client."""
    raise RuntimeError("SECRET-TOKEN-42 in /etc/shadow")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        mcp.run("stdio", show_banner=False)
    elif mode == "http":
        mcp.run("http", show_banner=False, host="127.0.0.1", port=int(sys.argv[2]), path="/mcp", log_level="warning")
    else:
        sys.exit(f"usage: {sys.argv[0]} stdio | http PORT")


if __name__ == "__main__":
    main()
