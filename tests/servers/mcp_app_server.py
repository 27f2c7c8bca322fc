"""An MCP server using the app-model features of issue 11 (part B), for the tests.

Rich schemas (``msgspec.Meta``, pydantic ``Field``, docstring ``Args:`` in Google and reST
style), pydantic parameters and returns, output checks, ``coerce_json_strings``, pages of
``page_size`` items, icons and titles. Run as a script it serves stdio.
"""

from __future__ import annotations

import enum
import sys
from typing import Annotated, Literal

import msgspec
from pydantic import BaseModel, Field

from sturdyrpc.mcp import MCPContext, MCPServer, ToolResult, run_mcp_stdio

ICON = {"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}
DARK_ICON = {"src": "data:image/svg+xml;base64,PHN2Zy8+", "mimeType": "image/svg+xml", "sizes": ["any"], "theme": "dark"}


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(msgspec.Struct):
    x: int
    y: int


class Item(BaseModel):
    name: str = Field(description="What the item is called", min_length=1)
    qty: int = Field(1, ge=1, description="How many")


class Receipt(BaseModel):
    total: int
    names: list[str]


def make_server(page_size: int | None = 2, coerce_json_strings: bool = True) -> MCPServer:
    server = MCPServer("app-features", "1.0", page_size=page_size, coerce_json_strings=coerce_json_strings)

    @server.tool(title="Search the catalogue", icons=[ICON, DARK_ICON], blocking=False)
    def search(
        query: Annotated[str, msgspec.Meta(description="What to look for", min_length=1)],
        limit: Annotated[int, msgspec.Meta(ge=1, le=50)] = 10,
        color: Color = Color.RED,
        mode: Literal["fast", "exact"] = "fast",
        near: Point | None = None,
    ) -> list[str]:
        """Search the catalogue.

        Args:
            limit: How many results to return.
            color (Color): Only items of this colour.
            mode: How to match:
                fast or exact.
            query: Not shown: the annotation's description wins.

        Returns:
            The names found.
        """
        return [f"{query}-{i}" for i in range(min(limit, 3))]

    @server.tool(blocking=False)
    def order(items: list[Item], note: str = Field("none", description="A note for the shop"), tags: list[str] | None = None) -> Receipt:
        """Order items.

        :param items: The items to order.
        :type items: list[Item]
        :param tags: Labels for the order.
        :returns: The receipt.
        """
        assert all(isinstance(i, Item) for i in items)  # built before the tool runs
        return Receipt(total=sum(i.qty for i in items), names=[i.name for i in items] + ([note] if note != "none" else []) + (tags or []))

    @server.tool()
    async def echo_item(item: Item, ctx: MCPContext | None = None) -> Item:
        """Return the item as it was built."""
        return item

    @server.tool(blocking=False)
    def count(n: int) -> int:
        """Returns what it is given, or a string for 13 (an output the declared type refuses)."""
        return "thirteen" if n == 13 else n  # type: ignore[return-value]

    @server.tool(blocking=False)
    def lying_receipt() -> Receipt:
        """Returns a dict that is no receipt."""
        return {"total": "lots"}  # type: ignore[return-value]

    @server.tool(blocking=False)
    def raw_structured(ok: bool = True) -> Point:
        """A ToolResult whose structured content is checked against the output type."""
        return ToolResult([{"type": "text", "text": "p"}], structured={"x": 1, "y": 2} if ok else {"x": "one"})  # type: ignore[return-value]

    @server.tool(blocking=False)
    def text(value: Annotated[str, "The text to echo"]) -> str:
        """Echo a string (never decoded from JSON, whatever it holds)."""
        return value

    for i in range(3):

        @server.resource(f"test://static/{i}", name=f"static-{i}", title=f"Static {i}", icons=[ICON], mime_type="text/plain")
        def static(i: int = i) -> str:
            return f"static {i}"

        @server.resource(f"test://tpl{i}/{{id}}", name=f"tpl-{i}", title=f"Template {i}", icons=[ICON])
        def tpl(id: str, i: int = i) -> str:
            return f"{i}:{id}"

        @server.prompt(f"prompt_{i}", title=f"Prompt {i}", icons=[ICON])
        def prompt(topic: str, tone: str = "plain") -> str:
            """A prompt.

            Args:
                topic: What to write about.
                tone: How it should sound.
            """
            return f"Write about {topic} ({tone})."

    return server


if __name__ == "__main__":
    run_mcp_stdio(make_server(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
