"""A small FastMCP server (PyPI ``fastmcp``) for the proxy tests: run with the interpreter of the
venv scripts/install_fastmcp.sh makes; serves stdio. Tools ``echo``, ``add`` (an output schema),
``slow`` (progress and a log message), ``fail`` (a tool error, tagged ``danger``); the resource ``data://config``,
the template ``users://{user_id}/profile`` and the prompt ``review``."""

from __future__ import annotations

import asyncio

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError

mcp = FastMCP("fastmcp-upstream", instructions="A test server behind a proxy.")


@mcp.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@mcp.tool(annotations={"readOnlyHint": True})
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool
async def slow(steps: int, ctx: Context) -> str:
    """Report progress ``steps`` times, then answer."""
    await ctx.info(f"starting {steps} steps")
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(0.01)
    return f"done after {steps} steps"


@mcp.tool(tags={"danger"})  # listed in _meta.fastmcp.tags, which a proxy's rules can name
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(f"failed on purpose: {reason}")


@mcp.resource("data://config", mime_type="application/json")
def config() -> dict[str, str]:
    """The configuration."""
    return {"mode": "test"}


@mcp.resource("users://{user_id}/profile")
def profile(user_id: int) -> dict[str, object]:
    """A user's profile."""
    return {"id": user_id, "name": f"user {user_id}"}


@mcp.prompt
def review(code: str) -> str:
    """Ask for a review of the code."""
    return f"Please review: {code}"


if __name__ == "__main__":
    mcp.run(show_banner=False)
