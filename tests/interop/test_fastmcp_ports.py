"""Six kinds of FastMCP server, ported (tests/servers/fastmcp_ports.py), each driven by the
official Python SDK client (PyPI ``mcp``) on stdio and on Streamable HTTP, in both eras
(``mode="legacy"``: the 2025-11-25 handshake; ``mode="auto"``: 2026-07-28): typed tools with
pydantic, resources and prompts, context (progress, logging, elicitation, cancellation),
lifespan and middleware, composition by mount, and JWT auth. Each HTTP server is one
``sturdyrpc run --http`` process shared by the module's tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.http import free_port, server_process
from support.sdk import Client, StdioServerParameters, need_python_sdk

pytestmark = pytest.mark.timeout(60)

PORTS = ["typed", "content", "context", "lifecycle", "composed", "secured"]
MODES = {"legacy": "2025-11-25", "auto": "2026-07-28"}
APP = str(SERVERS / "fastmcp_ports.py")


def run_cmd(name: str) -> list[str]:
    return [sys.executable, "-m", "sturdyrpc", "run", f"{APP}:{name}"]


class Http:
    """The module's HTTP servers (one process per port) and the identity provider of ``secured``."""

    def __init__(self, idp: Any, log: Path) -> None:
        self.idp = idp
        self.log = log
        self.urls: dict[str, str] = {}


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    need_python_sdk()
    from support.auth import IdP

    log = tmp_path_factory.mktemp("ports") / "http.log"
    with IdP().serve() as idp, contextlib.ExitStack() as stack:
        idp.add_key("k1")
        h = Http(idp, log)
        for name in PORTS:
            port = free_port()
            cmd = [*run_cmd(name), "--http", f"127.0.0.1:{port}"]
            if name == "secured":
                cmd += ["--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url]
            stack.enter_context(server_process(cmd, port, env={"PORTS_LOG": str(log)}))
            h.urls[name] = f"http://127.0.0.1:{port}/mcp"
        yield h


# ----------------------------------------------------------------------------- what each port must do


def text(r: Any) -> str:
    return str(r.content[0].text)


async def typed(c: Any, ctx: dict[str, Any]) -> None:
    tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"quote", "convert", "lookup"}
    assert tools["quote"].output_schema is not None and "total_cents" in json.dumps(tools["quote"].output_schema)
    assert tools["convert"].annotations is not None and tools["convert"].annotations.read_only_hint is True
    order = {"customer": "ann", "items": [{"sku": "ABC-1", "quantity": 2}], "shipping": "express"}
    r = await c.call_tool("quote", {"order": order})
    assert not r.is_error and r.structured_content == {"total_cents": 2248, "items": 1, "shipping": "express"}
    r = await c.call_tool("quote", {"order": {**order, "items": [{"sku": "bad", "quantity": 2}]}})
    assert r.is_error and "sku" in text(r)  # the model is told which field is wrong
    r = await c.call_tool("convert", {"celsius": 100})
    assert r.structured_content == {"result": 212.0}
    r = await c.call_tool("lookup", {"city": "Atlantis"})
    assert r.is_error and text(r) == "unknown city 'Atlantis'"


async def content(c: Any, ctx: dict[str, Any]) -> None:
    assert {str(r.uri) for r in (await c.list_resources()).resources} == {"data://config", "docs://readme"}
    templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
    assert templates == {"users://{user_id}/profile", "search://items{?q,limit}"}
    got = (await c.read_resource("data://config")).contents[0]
    assert got.mime_type == "application/json" and json.loads(got.text) == {"units": "metric", "version": 3}
    assert (await c.read_resource("docs://readme")).contents[0].mime_type == "text/markdown"
    assert json.loads((await c.read_resource("users://7/profile")).contents[0].text) == {"id": 7, "next": 8}
    assert json.loads((await c.read_resource("search://items?q=a&limit=3")).contents[0].text) == ["a-0", "a-1", "a-2"]
    assert {p.name for p in (await c.list_prompts()).prompts} == {"review"}  # the "internal" one disabled
    p = await c.get_prompt("review", {"code": "x = 1", "passes": "2"})
    assert [m.role for m in p.messages] == ["user", "assistant"] and "2 time(s)" in p.messages[0].content.text
    with pytest.raises(Exception, match="not found|Unknown|unknown"):
        await c.read_resource("data://internal")


async def context(c: Any, ctx: dict[str, Any]) -> None:
    seen: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append(p)

    r = await c.call_tool("process", {"steps": 3}, progress_callback=on_progress)
    assert text(r) == "processed 3" and seen == [1, 2, 3]
    for _ in range(100):
        if any("almost done" in str(m) for m in ctx["logs"]):
            break
        await asyncio.sleep(0.02)
    assert any("processing 3 steps" in str(m) for m in ctx["logs"]) and any("almost done" in str(m) for m in ctx["logs"]), ctx["logs"]
    r = await c.call_tool("book", {})
    assert text(r) == "booked Paris on Monday"
    assert ctx["asked"] == ["Which city?", "Which date?"]  # each question once, in both eras
    task = asyncio.ensure_future(c.call_tool("wait", {"seconds": 30}))
    await asyncio.sleep(0.5)
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    assert text(await c.call_tool("process", {"steps": 1})) == "processed 1"  # the session goes on


async def lifecycle(c: Any, ctx: dict[str, Any]) -> None:
    r = await c.call_tool("score", {"user": "bob"})
    assert r.structured_content == {"result": 5}
    r = await c.call_tool("score", {"user": "zed"})
    assert r.is_error and text(r) == "no user 'zed'"
    r = await c.call_tool("calls", {})
    assert not r.is_error and r.structured_content["result"] >= 1  # the middleware ran before the tool


async def composed(c: Any, ctx: dict[str, Any]) -> None:
    assert {t.name for t in (await c.list_tools()).tools} == {"about", "weather_forecast", "tools_shout"}
    r = await c.call_tool("weather_forecast", {"city": "Oslo"})
    assert r.structured_content == {"city": "Oslo", "sky": "clear"}
    assert text(await c.call_tool("tools_shout", {"text": "hi"})) == "HI"
    assert json.loads((await c.read_resource("data://weather/stations")).contents[0].text) == ["north", "south"]
    assert (await c.get_prompt("tools_greet", {"name": "Ada"})).messages[0].content.text == "Say hello to Ada."


async def secured(c: Any, ctx: dict[str, Any]) -> None:
    names = {t.name for t in (await c.list_tools()).tools}
    if ctx["token"]:  # notes:read only: what needs notes:write is neither listed nor callable
        assert names == {"read_notes", "public"}
        assert text(await c.call_tool("read_notes", {})) == "notes of alice"
        with pytest.raises(Exception):  # noqa: B017  (403 insufficient_scope, as the SDK reports it)
            await c.call_tool("write_note", {"text": "x"})
    else:  # stdio: no tokens, no scopes enforced
        assert names == {"read_notes", "write_note", "public"}
        assert text(await c.call_tool("read_notes", {})) == "notes of anonymous"
    assert text(await c.call_tool("public", {})) == "anyone"


CHECKS: dict[str, Callable[[Any, dict[str, Any]], Awaitable[None]]] = {
    "typed": typed, "content": content, "context": context, "lifecycle": lifecycle, "composed": composed, "secured": secured,
}


def callbacks(ctx: dict[str, Any]) -> dict[str, Any]:
    import mcp.types as mt

    async def on_log(params: Any) -> None:
        ctx["logs"].append(params.data)

    async def elicit(_: Any, params: Any) -> Any:
        ctx["asked"].append(params.message)
        return mt.ElicitResult(action="accept", content={"value": "Paris" if "city" in params.message else "Monday"})

    return {"logging_callback": on_log, "elicitation_callback": elicit}


async def drive(name: str, mode: str, server: Any, token: str | None = None) -> None:
    ctx: dict[str, Any] = {"logs": [], "asked": [], "token": token}
    # 2026-07-28: the log level goes with each request (``log_level``); before, logging/setLevel
    async with Client(server, mode=mode, read_timeout_seconds=20, log_level="debug" if mode == "auto" else None, **callbacks(ctx)) as c:
        assert c.protocol_version == MODES[mode]
        if mode == "legacy" and name == "context":
            with warnings.catch_warnings():  # deprecated in 2026-07-28 (SEP-2577), what this era does
                warnings.simplefilter("ignore")
                await c.set_logging_level("debug")
        await CHECKS[name](c, ctx)


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", PORTS)
def test_a_port_on_stdio(name: str, mode: str, tmp_path: Path) -> None:
    need_python_sdk()
    log = tmp_path / "ports.log"
    cmd = run_cmd(name)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env={**os.environ, "PORTS_LOG": str(log)})
    asyncio.run(drive(name, mode, params))
    lines = log.read_text().splitlines() if log.exists() else []
    if name == "context":
        assert lines.count("asked city") == 1  # the side effect before the second question ran once
    if name == "lifecycle":
        assert lines == ["startup", "shutdown"]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", PORTS)
def test_a_port_on_http(name: str, mode: str, http: Http) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    url = http.urls[name]
    token = http.idp.token(url, scope="notes:read") if name == "secured" else None

    async def main() -> None:
        if token is None:
            await drive(name, mode, url)
            return
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=20) as hc:
            await drive(name, mode, streamable_http_client(url, http_client=hc), token)

    asyncio.run(main())


def test_the_secured_port_refuses_a_request_without_a_token(http: Http) -> None:
    r = httpx.post(http.urls["secured"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                   headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and "resource_metadata" in r.headers["www-authenticate"]


def test_timing_lines_go_to_stderr_under_sturdyrpc_run_and_stdout_stays_protocol() -> None:
    """``Timing()`` with no logging configured by the user: its lines are on stderr."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
    calls = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "score", "arguments": {"user": "alice"}, "_meta": meta}}]
    out = subprocess.run(run_cmd("lifecycle"), input="".join(json.dumps(m) + "\n" for m in calls), capture_output=True,
                         text=True, timeout=30, check=True)
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == [1, 2]
    assert "tools/list id=1 ok in" in out.stderr and "tools/call id=2 ok in" in out.stderr
