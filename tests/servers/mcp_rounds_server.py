"""An MCP server whose tool asks N questions (``ctx.elicit`` N times), served with
``server.run()``: ``mcp_rounds_server.py LOG [stdio | http PORT]``.

Every run of the tool appends ``run`` to LOG and its side effect (inside ``ctx.once``) appends
``charge``: the tests count what ran how often over the 2026-07-28 rounds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sturdyrpc.mcp import MCPContext, MCPServer

LOG = Path(sys.argv[1])
server = MCPServer("rounds")

QUESTION = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def _note(what: str) -> None:
    with LOG.open("a") as f:
        f.write(what + "\n")


def _charge() -> str:
    _note("charge")
    return f"order-{sum(1 for line in LOG.read_text().splitlines() if line == 'charge')}"


@server.tool
async def survey(questions: int, ctx: MCPContext) -> str:
    """Ask ``questions`` questions, one elicitation each, after charging once."""
    _note("run")
    order = await ctx.once("charge", _charge)
    answers = []
    for i in range(questions):
        r = await ctx.elicit(f"question {i + 1}?", QUESTION)
        answers.append(r["content"]["answer"])
    return f"{order}: {','.join(answers)}"


if __name__ == "__main__":
    if sys.argv[2:3] == ["http"]:
        raise SystemExit(server.run("http", host="127.0.0.1", port=int(sys.argv[3])))
    raise SystemExit(server.run())
