"""The official Python SDK client (PyPI ``mcp``) as a peer: whether it is installed, and the
session checks that several modules run with it (against our demo over stdio, through the
proxies, over Streamable HTTP, on two workers)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from support.mcp import read_lines, validate_recording
from support.thirdparty import missing_peer

try:
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters
except ImportError:  # pragma: no cover
    Client = None  # type: ignore[assignment,misc]
    StdioServerParameters = None  # type: ignore[assignment,misc]

#: What must never reach the client in an error (the demo's ``fail`` tool raises with them).
SECRETS = ("SECRET-TOKEN-42", "/etc/shadow", "RuntimeError", "Traceback")


def need_python_sdk() -> None:
    """Skip (fail in CI) when the official Python SDK is not installed."""
    if Client is None:
        missing_peer("the official Python SDK (pip package 'mcp') is not installed")


async def check_stdio_session(c: Any, mode: str, log: Path) -> None:
    """The session checks of the Python SDK client against ``sturdyrpc demo --mcp`` (``mode``:
    ``auto`` negotiates 2026-07-28, ``legacy`` the handshake era)."""
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


def check_cancel_on_wire(log: Path) -> None:
    """The SDK sent ``notifications/cancelled`` on the recorded wire, and no cancelled request was answered."""
    sent = read_lines(Path(str(log) + ".in"))
    cancels = [m for m in sent if isinstance(m, dict) and m.get("method") == "notifications/cancelled"]
    assert cancels, "the SDK did not send notifications/cancelled"
    cancelled_ids = {m["params"]["requestId"] for m in cancels}
    answered = {m.get("id") for m in read_lines(Path(str(log) + ".out")) if "result" in m or "error" in m}
    assert not (cancelled_ids & answered), "a cancelled request was answered"


def client_callbacks(logs: list[Any]) -> dict[str, Any]:
    """The SDK client's logging (into ``logs``), sampling ("Paris") and elicitation (accepted)
    callbacks, as ``Client`` keyword arguments: what the demo's feature tools ask the client."""
    import mcp.types as mt
    from mcp.client.session import ClientRequestContext

    async def on_log(params: Any) -> None:
        logs.append(params)

    async def sampling(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.CreateMessageResult(role="assistant", content=mt.TextContent(type="text", text="Paris"), model="test-model")

    async def elicit(ctx: ClientRequestContext, params: Any) -> Any:
        return mt.ElicitResult(action="accept", content={"username": "u", "email": "e@x"})

    return {"logging_callback": on_log, "sampling_callback": sampling, "elicitation_callback": elicit}


def check_features_session(cmd: list[str], log: Path) -> None:
    """Resources, prompts, completion, logging, sampling and elicitation through the SDK (handshake
    era) against the MCP demo that ``cmd`` starts, its wire recorded under ``log``."""
    need_python_sdk()
    import mcp.types as mt

    logs: list[Any] = []

    async def main() -> None:
        params = StdioServerParameters(command=cmd[0], args=cmd[1:])
        async with Client(params, mode="legacy", read_timeout_seconds=20, **client_callbacks(logs)) as c:
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


async def check_http_session(c: Any, mode: str) -> Any:
    """The session checks of the Python SDK client against the MCP demo over Streamable HTTP."""
    names = {t.name for t in (await c.list_tools()).tools}
    assert {"echo", "add", "fail", "slow"} <= names
    r = await c.call_tool("echo", {"text": "héllo"})
    assert not r.is_error and r.content[0].text == "héllo"
    r = await c.call_tool("add", {"a": 2, "b": 40})
    assert r.content[0].text == "42" and r.structured_content == {"result": 42}
    r = await c.call_tool("fail", {})
    assert r.is_error
    assert not any(s in json.dumps(r.model_dump(mode="json")) for s in SECRETS)
    seen: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append(p)

    r = await c.call_tool("slow", {"seconds": 0.15, "steps": 3}, progress_callback=on_progress)
    assert not r.is_error and seen == [1, 2, 3]
    t0 = time.monotonic()
    rs = await asyncio.gather(*(c.call_tool("slow", {"seconds": 0.4}) for _ in range(8)))
    assert all(not x.is_error for x in rs) and time.monotonic() - t0 < 8 * 0.4 * 0.6
    task = asyncio.ensure_future(c.call_tool("slow", {"seconds": 30}))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(BaseException):  # noqa: B017  (anyio/asyncio cancellation)
        await task
    r = await c.call_tool("echo", {"text": "still alive"})
    assert r.content[0].text == "still alive"
    r = await c.call_tool("add", {"a": "x", "b": 1})
    assert r.is_error
