"""A parent MCP server with two servers mounted in it (``weather`` under a namespace, ``util``
without), FastMCP style; served with ``server.run()``. ``LOG`` (argv[1]) gets each lifespan's
start and stop, in order."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sturdyrpc import Context
from sturdyrpc.mcp import MCPServer

LOG = Path(sys.argv[1]) if len(sys.argv) > 1 else None


def lifespan_of(name: str) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[dict[str, str]]:
        if LOG is not None:
            with LOG.open("a") as f:
                f.write(f"start {name}\n")
        yield {"who": name}
        if LOG is not None:
            with LOG.open("a") as f:
                f.write(f"stop {name}\n")

    return lifespan


weather = MCPServer("weather", lifespan=lifespan_of("weather"))


@weather.tool
def forecast(city: str, days: int = 1) -> dict[str, Any]:
    """The forecast for ``city``."""
    return {"city": city, "days": days, "sky": "clear"}


@weather.resource("data://config")
def config() -> dict[str, str]:
    return {"units": "C"}


@weather.resource("users://{user_id}/profile")
def profile(user_id: int) -> dict[str, int]:
    return {"id": user_id}


@weather.prompt
def greet(city: str) -> str:
    return f"Say hello to {city}."


util = MCPServer("util")


@util.tool
async def whoami(ctx: Context) -> str:
    return f"served by {ctx.lifespan['who']}"  # type: ignore[index]  # the serving server's lifespan


app = MCPServer("app", lifespan=lifespan_of("app"))


@app.tool
def ping() -> str:
    return "pong"


app.mount(weather, "weather")
app.mount(util)

if __name__ == "__main__":
    raise SystemExit(app.run())
