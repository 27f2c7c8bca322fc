"""A server mounted in another, through the official Python SDK client on stdio, in both eras:
FastMCP's names (``weather_forecast``, ``data://weather/config``, the template likewise), the
calls routed to the child's functions, and the child's lifespan inside the parent's."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from support import SERVERS
from support.mcp import read_lines, recorded_cmd, validate_recording
from support.sdk import Client, StdioServerParameters, need_python_sdk

pytestmark = pytest.mark.timeout(60)

SCRIPT = str(SERVERS / "mcp_mount_server.py")


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_official_client_sees_and_calls_the_mounted_servers(tmp_path: Path, mode: str, version: str) -> None:
    need_python_sdk()
    log, wire = tmp_path / "lifespans", tmp_path / "wire"
    cmd = recorded_cmd(wire, [sys.executable, SCRIPT, str(log)])

    async def main() -> None:
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:]), mode=mode, read_timeout_seconds=20) as c:
            assert c.protocol_version == version
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"ping", "weather_forecast", "whoami"}
            assert tools["weather_forecast"].description == "The forecast for ``city``."
            assert set(tools["weather_forecast"].input_schema["properties"]) == {"city", "days"}
            r = await c.call_tool("weather_forecast", {"city": "Oslo", "days": 2})
            assert r.structured_content == {"city": "Oslo", "days": 2, "sky": "clear"}
            r = await c.call_tool("whoami", {})
            assert r.content[0].text == "served by app"
            resources = [str(x.uri) for x in (await c.list_resources()).resources]
            assert resources == ["data://weather/config"]
            templates = [x.uri_template for x in (await c.list_resource_templates()).resource_templates]
            assert templates == ["users://weather/{user_id}/profile"]
            r2 = await c.read_resource("users://weather/7/profile")
            assert json.loads(r2.contents[0].text) == {"id": 7}
            r2 = await c.read_resource("data://weather/config")
            assert json.loads(r2.contents[0].text) == {"units": "C"}
            prompts = [p.name for p in (await c.list_prompts()).prompts]
            assert prompts == ["weather_greet"]
            p = await c.get_prompt("weather_greet", {"city": "Oslo"})
            assert p.messages[0].content.text == "Say hello to Oslo."

    asyncio.run(main())
    assert log.read_text().splitlines() == ["start app", "start weather", "stop weather", "stop app"]
    validate_recording(wire, version)
    assert read_lines(Path(str(wire) + ".out"))
