"""The official Python SDK (PyPI ``mcp``) against our server, and our client against its server.

Every message our server writes in these tests is recorded and validated against the official
JSON Schema of the negotiated version.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _mcp_support import read_lines, recorded_cmd, validate_recording

pytestmark = pytest.mark.timeout(60)

try:
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters
except ImportError:  # pragma: no cover
    Client = None  # type: ignore[assignment,misc]

SECRETS = ("SECRET-TOKEN-42", "/etc/shadow", "RuntimeError", "Traceback")


def _need_sdk() -> None:
    if Client is None:
        from _mcp_support import missing_peer

        missing_peer("the official Python SDK (pip package 'mcp') is not installed")


def _params(log: Path) -> Any:
    cmd = recorded_cmd(log)
    return StdioServerParameters(command=cmd[0], args=cmd[1:])


async def _session_checks(c: Any, mode: str, log: Path) -> None:
    # discovery / handshake
    assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert c.server_info is not None and c.server_info.name == "sturdyrpc-demo"
    if mode == "legacy":
        await c.send_ping()
    names = {t.name for t in (await c.list_tools()).tools}
    assert {"echo", "add", "fail", "slow"} <= names

    r = await c.call_tool("echo", {"text": "héllo"})
    assert not r.is_error and r.content[0].text == "héllo"
    r = await c.call_tool("add", {"a": 2, "b": 40})
    assert not r.is_error and r.content[0].text == "42" and r.structured_content == {"result": 42}

    r = await c.call_tool("fail", {})
    assert r.is_error
    text = json.dumps(r.model_dump(mode="json"))
    for s in SECRETS:
        assert s not in text

    # progress
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    r = await c.call_tool("slow", {"seconds": 0.15, "steps": 3}, progress_callback=on_progress)
    assert not r.is_error
    assert [p for p, _, _ in seen] == [1, 2, 3] and all(t == 3 for _, t, _ in seen)

    # 8 calls in flight at once: they overlap
    t0 = time.monotonic()
    results = await asyncio.gather(*(c.call_tool("slow", {"seconds": 0.4}) for _ in range(8)))
    assert all(not x.is_error for x in results)
    assert time.monotonic() - t0 < 8 * 0.4 * 0.6

    # cancellation: the SDK sends notifications/cancelled, we never answer that request
    task = asyncio.ensure_future(c.call_tool("slow", {"seconds": 30}))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(BaseException):  # noqa: B017  (anyio/asyncio cancellation)
        await task
    r = await c.call_tool("echo", {"text": "still alive"})
    assert r.content[0].text == "still alive"

    # a bad argument: a tool error with the reason on these versions (SEP-1303)
    r = await c.call_tool("add", {"a": "x", "b": 1})
    assert r.is_error and "'a'" in r.content[0].text


def _check_cancel_on_wire(log: Path) -> None:
    sent = read_lines(Path(str(log) + ".in"))
    cancels = [m for m in sent if isinstance(m, dict) and m.get("method") == "notifications/cancelled"]
    assert cancels, "the SDK did not send notifications/cancelled"
    cancelled_ids = {m["params"]["requestId"] for m in cancels}
    answered = {m.get("id") for m in read_lines(Path(str(log) + ".out")) if "result" in m or "error" in m}
    assert not (cancelled_ids & answered), "a cancelled request was answered"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_against_our_server(tmp_path: Path, mode: str) -> None:
    _need_sdk()
    log = tmp_path / "wire"

    async def main() -> None:
        async with Client(_params(log), mode=mode, read_timeout_seconds=20) as c:
            await _session_checks(c, mode, log)

    asyncio.run(main())
    _check_cancel_on_wire(log)
    n = validate_recording(log, "2026-07-28" if mode == "auto" else "2025-11-25")
    assert n >= 15


def test_python_sdk_features_against_demo(tmp_path: Path) -> None:
    """Resources, prompts, completion, logging, sampling and elicitation through the SDK (handshake era)."""
    _need_sdk()
    import mcp.types as mt
    from mcp.client.session import ClientRequestContext

    log = tmp_path / "wire"
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async def sampling(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.CreateMessageResult(role="assistant", content=mt.TextContent(type="text", text="Paris"), model="test-model")

    async def elicit(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.ElicitResult(action="accept", content={"username": "u", "email": "e@x"})

    async def main() -> None:
        async with Client(
            _params(log), mode="legacy", read_timeout_seconds=20, logging_callback=on_log, sampling_callback=sampling, elicitation_callback=elicit
        ) as c:
            res = await c.list_resources()
            assert "test://static-text" in {str(r.uri) for r in res.resources}
            rr = await c.read_resource("test://template/123/data")
            assert '"id":"123"' in rr.contents[0].text
            p = await c.get_prompt("test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"})
            assert p.messages[0].content.text == "Prompt with arguments: arg1='hello', arg2='world'"
            comp = await c.complete(mt.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"), {"name": "arg1", "value": "par"})
            assert "paris" in comp.completion.values
            await c.set_logging_level("debug")
            await c.call_tool("test_tool_with_logging", {})
            r = await c.call_tool("test_sampling", {"prompt": "Capital of France?"})
            assert r.content[0].text == "LLM response: Paris"
            r = await c.call_tool("test_elicitation", {"message": "who?"})
            assert "action=accept" in r.content[0].text
            await c.subscribe_resource("test://watched-resource")
            await c.unsubscribe_resource("test://watched-resource")

    asyncio.run(main())
    assert len(logs) >= 3
    validate_recording(log, "2025-11-25")


def test_python_sdk_modern_mrtr(tmp_path: Path) -> None:
    """2026-07-28: sampling and elicitation become input_required results, retried by the SDK."""
    _need_sdk()
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


SDK_SERVER = [sys.executable, str(Path(__file__).resolve().parent / "mcp_py_sdk_server.py")]


@pytest.mark.parametrize("protocol", [None, "2025-11-25", "2025-06-18"])
def test_our_client_against_python_sdk_server(protocol: str | None) -> None:
    _need_sdk()
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
