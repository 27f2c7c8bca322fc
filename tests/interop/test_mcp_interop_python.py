"""The official Python SDK (PyPI ``mcp``) against our server, and our client against its server.

Every message our server writes in these tests is recorded and validated against the official
JSON Schema of the negotiated version.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.mcp import read_lines, recorded_cmd, validate_recording
from support.sdk import (
    Client,
    StdioServerParameters,
    check_cancel_on_wire,
    check_features_session,
    check_stdio_session,
    need_python_sdk,
)

pytestmark = pytest.mark.timeout(60)


def _params(log: Path) -> Any:
    cmd = recorded_cmd(log)
    return StdioServerParameters(command=cmd[0], args=cmd[1:])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_against_our_server(tmp_path: Path, mode: str) -> None:
    need_python_sdk()
    log = tmp_path / "wire"

    async def main() -> None:
        async with Client(_params(log), mode=mode, read_timeout_seconds=20) as c:
            await check_stdio_session(c, mode, log)

    asyncio.run(main())
    check_cancel_on_wire(log)
    n = validate_recording(log, "2026-07-28" if mode == "auto" else "2025-11-25")
    assert n >= 15


def test_python_sdk_features_against_demo(tmp_path: Path) -> None:
    """Resources, prompts, completion, logging, sampling and elicitation through the SDK (handshake era)."""
    log = tmp_path / "wire"
    check_features_session(recorded_cmd(log), log)


def test_python_sdk_modern_mrtr(tmp_path: Path) -> None:
    """2026-07-28: sampling and elicitation become input_required results, retried by the SDK."""
    need_python_sdk()
    import mcp.types as mt
    from mcp.client.session import ClientRequestContext

    log = tmp_path / "wire"

    async def sampling(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.CreateMessageResult(role="assistant", content=mt.TextContent(type="text", text="Paris"), model="test-model")

    async def elicit(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.ElicitResult(action="accept", content={"username": "u", "email": "e@x"})

    async def main() -> None:
        async with Client(_params(log), read_timeout_seconds=20, sampling_callback=sampling, elicitation_callback=elicit) as c:
            assert c.protocol_version == "2026-07-28"
            r = await c.call_tool("test_sampling", {"prompt": "Capital of France?"})
            assert r.content[0].text == "LLM response: Paris"
            r = await c.call_tool("test_elicitation", {"message": "who?"})
            assert "action=accept" in r.content[0].text

    asyncio.run(main())
    out = read_lines(Path(str(log) + ".out"))
    assert any(isinstance(m.get("result"), dict) and m["result"].get("resultType") == "input_required" for m in out)
    validate_recording(log, "2026-07-28")


SDK_SERVER = [sys.executable, str(SERVERS / "mcp_py_sdk_server.py")]


@pytest.mark.parametrize("protocol", [None, "2025-11-25", "2025-06-18"])
def test_our_client_against_python_sdk_server(protocol: str | None) -> None:
    need_python_sdk()
    from sturdyrpc.mcp.client import connect

    async def main() -> None:
        async with connect(SDK_SERVER, protocol, timeout=20) as c:
            assert c.version == (protocol or "2026-07-28")
            assert c.server_info.get("name") == "python-sdk-demo"
            if not c.modern:
                await c.ping()
            assert {t["name"] for t in await c.list_tools()} == {"echo", "add", "fail", "slow"}
            r = await c.call_tool("echo", {"text": "hi"})
            assert r["content"][0]["text"] == "hi" and not r.get("isError")
            r = await c.call_tool("add", {"a": 20, "b": 22})
            assert r["structuredContent"] == {"result": 42}
            r = await c.call_tool("fail", {})
            assert r["isError"] is True
            seen: list[float] = []
            r = await c.call_tool("slow", {"seconds": 0.1, "steps": 3}, on_progress=lambda p, t, m: seen.append(p))
            assert seen == [1, 2, 3]
            task = asyncio.ensure_future(c.call_tool("slow", {"seconds": 30, "steps": 1}))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            t0 = time.monotonic()
            rs = await asyncio.gather(*(c.call_tool("slow", {"seconds": 0.4, "steps": 0}) for _ in range(8)))
            assert all(not x.get("isError") for x in rs) and time.monotonic() - t0 < 2.0
            assert c.peer.stats["caller_cancels"] == 1

    asyncio.run(main())
