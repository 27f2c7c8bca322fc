"""The MCP client's request timeouts and progress: a request that sends a progress token has its
timeout restarted by each progress notification (on by default, ``progress_resets_timeout``),
in both eras and on every transport (the rule is the client's, above the transport)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.mcp.client import connect
from sturdyrpc.peer import RequestTimeout

pytestmark = pytest.mark.timeout(60)

#: The slow tool runs 1.2 s and reports progress every 0.15 s; the timeout is 0.6 s.
SLOW = {"seconds": 1.2, "steps": 8}
TIMEOUT = 0.6


async def _call(client: Any, *, progress: bool) -> list[float]:
    seen: list[float] = []
    kw: dict[str, Any] = {"on_progress": lambda p, total, msg: seen.append(p)} if progress else {}
    result = await client.call_tool("slow", SLOW, timeout=TIMEOUT, **kw)
    assert result["content"][0]["text"] == "slept 1.2 seconds"
    return seen


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize(("resets", "progress", "completes"), [
    (True, True, True),     # the default: progress keeps the call alive
    (False, True, False),   # switched off: the timeout is the timeout
    (True, False, False),   # no progress token sent: nothing to restart the timer
])
def test_progress_restarts_the_timeout_in_memory(protocol: str, resets: bool, progress: bool, completes: bool) -> None:
    async def main() -> None:
        async with make_mcp_demo().test_client(protocol, progress_resets_timeout=resets) as client:
            if completes:
                assert await _call(client, progress=progress) == [1, 2, 3, 4, 5, 6, 7, 8]
            else:
                with pytest.raises(RequestTimeout):
                    await _call(client, progress=progress)
            assert client.progress_resets_timeout is resets

    asyncio.run(main())


def test_the_default_is_on() -> None:
    async def main() -> None:
        async with make_mcp_demo().test_client() as client:
            assert client.progress_resets_timeout is True

    asyncio.run(main())


@pytest.mark.parametrize("resets", [True, False])
def test_progress_restarts_the_timeout_over_stdio(resets: bool) -> None:
    async def main() -> None:
        async with connect([sys.executable, "-m", "sturdyrpc", "demo", "--mcp"], progress_resets_timeout=resets) as client:
            if resets:
                assert await _call(client, progress=True) == [1, 2, 3, 4, 5, 6, 7, 8]
            else:
                with pytest.raises(RequestTimeout):
                    await _call(client, progress=True)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_progress_restarts_the_timeout_over_http(protocol: str) -> None:
    from support.http import demo_http_cmd, free_port, server_process

    from sturdyrpc.mcp_http.connect import connect_http

    async def main(url: str) -> None:
        async with connect_http(url, protocol) as client:
            assert await _call(client, progress=True) == [1, 2, 3, 4, 5, 6, 7, 8]
        async with connect_http(url, protocol, progress_resets_timeout=False) as client:
            with pytest.raises(RequestTimeout):
                await _call(client, progress=True)

    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        asyncio.run(main(f"http://127.0.0.1:{port}/mcp"))
