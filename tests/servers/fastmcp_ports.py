"""Six FastMCP-style servers ported to sturdyrpc as a FastMCP user would port them (the FastMCP
line each port replaced is in the comments), served by ``sturdyrpc run fastmcp_ports.py:<name>``
for tests/interop/test_fastmcp_ports.py:

- ``typed``: tools on pydantic models, ``Field`` constraints, ``Literal``, output schemas;
- ``content``: resources (text, JSON, a typed template, ``{?q}``), prompts with typed arguments
  and message helpers, tags and ``disable``;
- ``context``: progress, logging, two elicitations (one side effect, run once), cancellation;
- ``lifecycle``: a lifespan, a middleware of one's own and ``Timing()``;
- ``composed``: two servers mounted under namespaces;
- ``secured``: tools with OAuth scopes (JWT bearer tokens over HTTP: ``--auth-*`` options).

``PORTS_LOG`` (a file): the ``context`` server's side effect and the lifespan write lines there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from sturdyrpc import Context  # FastMCP: from fastmcp import FastMCP, Context
from sturdyrpc.mcp import AssistantMessage, MCPServer, Message, ToolError
from sturdyrpc.middleware import Timing


def note(line: str) -> None:
    path = os.environ.get("PORTS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


# ----------------------------------------------------------------------------- 1. typed tools

typed = MCPServer("typed", "1.0")  # FastMCP("typed")


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    quantity: int = Field(ge=1, le=100)


class Order(BaseModel):
    customer: str
    items: list[Item]
    shipping: Literal["standard", "express"] = "standard"


class Quote(BaseModel):
    total_cents: int
    items: int
    shipping: str


@typed.tool  # @mcp.tool
def quote(order: Order) -> Quote:
    """Price an order."""
    per_item = 250 if order.shipping == "express" else 100
    return Quote(total_cents=sum(i.quantity * 999 for i in order.items) + per_item * len(order.items),
                 items=len(order.items), shipping=order.shipping)


@typed.tool(name="convert", annotations={"readOnlyHint": True})  # @mcp.tool(name="convert", annotations=...)
def celsius_to_fahrenheit(celsius: Annotated[float, Field(ge=-273.15, description="degrees Celsius")]) -> float:
    return celsius * 9 / 5 + 32


@typed.tool
def lookup(city: str) -> str:
    if city == "Atlantis":
        raise ToolError(f"unknown city {city!r}")  # the message the model sees
    return f"{city}: 12 C"


# ----------------------------------------------------------------------------- 2. resources and prompts

content = MCPServer("content", "1.0")


@content.resource("data://config")
def config() -> dict[str, Any]:  # one JSON text content, application/json
    return {"units": "metric", "version": 3}


@content.resource("docs://readme", mime_type="text/markdown")
def readme() -> str:
    return "# Hello"


@content.resource("users://{user_id}/profile")
def profile(user_id: int) -> dict[str, Any]:  # user_id arrives as an int
    return {"id": user_id, "next": user_id + 1}


@content.resource("search://items{?q,limit}")
def search(q: str = "", limit: int = 2) -> list[str]:
    return [f"{q}-{i}" for i in range(limit)]


@content.resource("data://internal", tags={"internal"})
def internal() -> str:
    return "hidden"


@content.prompt  # @mcp.prompt
def review(code: str, passes: int = 1) -> list[Message]:
    """Review some code."""
    return [Message(f"Review this {passes} time(s):\n{code}"), AssistantMessage("I will look at it.")]


@content.prompt(tags={"internal"})
def debug_prompt() -> str:
    return "internal"


content.disable(tags={"internal"})  # FastMCP: mcp.disable(tags={"internal"})


# ----------------------------------------------------------------------------- 3. context

context = MCPServer("context", "1.0")
ANSWER = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


@context.tool
async def process(steps: int, ctx: Context) -> str:
    """Report progress and log on the way."""
    await ctx.info(f"processing {steps} steps")
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    await ctx.warning("almost done")
    return f"processed {steps}"


@context.tool
async def book(ctx: Context) -> str:
    """Ask two questions; the booking note is written once, however many times the tool re-runs."""
    city = await ctx.elicit("Which city?", ANSWER)
    await ctx.once("note", lambda: note("asked city"))
    date = await ctx.elicit("Which date?", ANSWER)
    if city["action"] != "accept" or date["action"] != "accept":
        return "cancelled"
    return f"booked {city['content']['value']} on {date['content']['value']}"


@context.tool
async def wait(seconds: float, ctx: Context) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note("wait cancelled")
        raise
    return "waited"


# ----------------------------------------------------------------------------- 4. lifespan and middleware


@contextlib.asynccontextmanager
async def lifespan(server: MCPServer) -> AsyncIterator[dict[str, Any]]:
    note("startup")
    yield {"db": {"alice": 3, "bob": 5}}
    note("shutdown")


lifecycle = MCPServer("lifecycle", "1.0", lifespan=lifespan)
lifecycle.middleware(Timing())  # mcp.add_middleware(TimingMiddleware())


@lifecycle.middleware
async def count_calls(ctx: Any, call_next: Any) -> Any:
    if ctx.method == "tools/call":
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
    return await call_next(ctx)


@lifecycle.tool
def score(user: str, ctx: Context) -> int:
    db = ctx.lifespan["db"]  # FastMCP: ctx.request_context.lifespan_context
    if user not in db:
        raise ToolError(f"no user {user!r}")
    return int(db[user])


@lifecycle.tool
def calls(ctx: Context) -> int:
    return int(ctx.state.get("calls", 0))


# ----------------------------------------------------------------------------- 5. composition

weather = MCPServer("weather")


@weather.tool
def forecast(city: str) -> dict[str, str]:
    return {"city": city, "sky": "clear"}


@weather.resource("data://stations")
def stations() -> list[str]:
    return ["north", "south"]


tools = MCPServer("tools")


@tools.tool
def shout(text: str) -> str:
    return text.upper()


@tools.prompt
def greet(name: str) -> str:
    return f"Say hello to {name}."


composed = MCPServer("composed", "1.0")
composed.mount(weather, "weather")  # main.mount(weather, namespace="weather")
composed.mount(tools, "tools")


@composed.tool
def about() -> str:
    return "a composed server"


# ----------------------------------------------------------------------------- 6. JWT auth

secured = MCPServer("secured", "1.0")  # FastMCP("secured", auth=JWTVerifier(...)): here the --auth-* options


@secured.tool(scopes=["notes:read"])  # @mcp.tool(auth=require_scopes("notes:read"))
def read_notes(ctx: Context) -> str:
    who = ctx.principal.subject if ctx.principal is not None else "anonymous"
    return f"notes of {who}"


@secured.tool(scopes=["notes:write"])
def write_note(text: str) -> str:
    return f"saved {text}"


@secured.tool
def public() -> str:
    return "anyone"


if __name__ == "__main__":
    import sys

    {"typed": typed, "content": content, "context": context, "lifecycle": lifecycle, "composed": composed,
     "secured": secured}[sys.argv[1] if len(sys.argv) > 1 else "typed"].run()
