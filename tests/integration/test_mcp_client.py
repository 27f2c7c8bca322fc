"""Our MCP client: negotiation and fallback (a fallback that never depends on one error code)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from support import SERVERS

from sturdyrpc.mcp.client import NegotiationFailed, connect

pytestmark = pytest.mark.timeout(60)

FAKE = [sys.executable, str(SERVERS / "mcp_fake_legacy_server.py")]
DEMO = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp"]


@pytest.mark.parametrize("mode", ["error", "notfound", "silent", "exit"])
def test_fallback_to_initialize(mode: str) -> None:
    async def main() -> None:
        async with connect([*FAKE, mode], discover_timeout=0.5, timeout=10) as c:
            assert c.version == "2025-06-18" and not c.modern
            r = await c.call_tool("echo", {"text": "hi"})
            assert r["content"][0]["text"] == "hi"

    asyncio.run(main())


def test_forced_versions_against_the_demo() -> None:
    async def main() -> None:
        for v in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"):
            async with connect(DEMO, v, timeout=10) as c:
                assert c.version == v
                r = await c.call_tool("add", {"a": 1, "b": 2})
                assert r["content"][0]["text"] == "3"
                assert ("resultType" in r) == (v == "2026-07-28")

    asyncio.run(main())


def test_forced_version_the_server_refuses() -> None:
    async def main() -> None:
        with pytest.raises(NegotiationFailed):
            async with connect([*FAKE, "error"], "2025-11-25", timeout=10):
                pass
        with pytest.raises(NegotiationFailed):
            async with connect([*FAKE, "error"], "2026-07-28", timeout=10):
                pass

    asyncio.run(main())


def test_client_callbacks_and_resources_on_the_demo() -> None:
    logs: list[dict[str, object]] = []

    async def main() -> None:
        for protocol in (None, "2025-11-25"):
            async with connect(
                DEMO,
                protocol,
                timeout=10,
                log_level="info",
                on_log=logs.append,
                elicitation=lambda p: {"action": "accept", "content": {"username": "u", "email": "e"}},
                roots=lambda: [{"uri": "file:///tmp", "name": "tmp"}],
            ) as c:
                r = await c.call_tool("test_elicitation", {"message": "who?"})
                assert "action=accept" in r["content"][0]["text"]
                res = await c.read_resource("test://static-text")
                assert res["contents"][0]["text"].startswith("This is the content")
                p = await c.get_prompt("test_simple_prompt")
                assert p["messages"][0]["content"]["text"] == "This is a simple prompt for testing."
                assert len(await c.list_resource_templates()) == 1
                comp = await c.complete({"type": "ref/prompt", "name": "test_prompt_with_arguments"}, {"name": "arg1", "value": "pa"})
                assert comp["completion"]["values"] == ["paris", "park", "party"]
                before = len(logs)
                await c.call_tool("test_tool_with_logging")
                await asyncio.sleep(0.1)
                assert len(logs) - before == 3

    asyncio.run(main())
