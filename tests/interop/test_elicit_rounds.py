"""2026-07-28 elicitation in rounds: a tool asking N questions finishes in N rounds with the
official Python SDK client (which gives up after 10) and with ours, on stdio and HTTP (both
served by ``server.run``); the side effect in ``ctx.once`` runs once, the tool body once per
round. The handshake era asks the client directly: one run."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.http import free_port, server_process
from support.sdk import Client, StdioServerParameters, need_python_sdk

pytestmark = pytest.mark.timeout(90)

SCRIPT = str(SERVERS / "mcp_rounds_server.py")


@contextmanager
def target(transport: str, log: Path) -> Iterator[Any]:
    """What a client connects to: stdio parameters / a command line, or an HTTP URL."""
    if transport == "stdio":
        yield [sys.executable, SCRIPT, str(log)]
        return
    port = free_port()
    with server_process([sys.executable, SCRIPT, str(log), "http", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


def ran(log: Path) -> tuple[int, int]:
    lines = log.read_text().splitlines()
    return lines.count("run"), lines.count("charge")


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("questions", [2, 10])
def test_official_client_finishes_n_questions_in_n_rounds(tmp_path: Path, transport: str, questions: int) -> None:
    need_python_sdk()
    import mcp.types as mt

    log = tmp_path / "log"
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> Any:
        asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"answer": f"a{len(asked)}"})

    async def main(where: Any) -> None:
        server = StdioServerParameters(command=where[0], args=where[1:]) if transport == "stdio" else where
        async with Client(server, read_timeout_seconds=30, elicitation_callback=elicit) as c:
            assert c.protocol_version == "2026-07-28"
            r = await c.call_tool("survey", {"questions": questions})
            assert not r.is_error, r
            assert r.content[0].text == "order-1: " + ",".join(f"a{i + 1}" for i in range(questions))

    with target(transport, log) as where:
        asyncio.run(main(where))
    assert asked == [f"question {i + 1}?" for i in range(questions)]  # each asked once
    assert ran(log) == (questions + 1, 1)  # the body once per round, the side effect once


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("protocol", [None, "2025-11-25"])
def test_our_client_finishes_in_n_rounds(tmp_path: Path, transport: str, protocol: str | None) -> None:
    from sturdyrpc.mcp.client import connect
    from sturdyrpc.mcp_http.connect import connect_http

    log = tmp_path / "log"
    asked: list[str] = []

    def elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        return {"action": "accept", "content": {"answer": str(len(asked))}}

    async def main(where: Any) -> None:
        opener = connect(where, protocol, elicitation=elicit, timeout=30) if transport == "stdio" else \
            connect_http(where, protocol, elicitation=elicit, timeout=30)
        async with opener as c:
            assert c.version == (protocol or "2026-07-28")
            r = await c.call_tool("survey", {"questions": 8})
            assert r["content"][0]["text"] == "order-1: 1,2,3,4,5,6,7,8"

    with target(transport, log) as where:
        asyncio.run(main(where))
    assert len(asked) == 8
    assert ran(log) == ((9, 1) if protocol is None else (1, 1))
