"""The conformance suite and the official SDK clients against ``--workers 2 --store redis://``:
one port, two uvicorn worker processes, sessions in a real redis-server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.conformance import assert_server_scenarios_pass, scenarios, suite
from support.http import free_port, server_process
from support.redis import RedisServer
from support.sdk import Client, check_http_session, need_python_sdk
from support.thirdparty import node, ts_sdk
from support.workers import demo_worker_cmd

TS_CLIENT = SERVERS / "ts_http" / "client.mjs"


@pytest.fixture(scope="module")
def two_workers() -> Iterator[str]:
    srv = RedisServer()
    srv.start()
    port = free_port()
    try:
        with server_process(demo_worker_cmd(port, srv.url, "--workers", "2"), port):
            yield f"http://127.0.0.1:{port}/mcp"
    finally:
        srv.stop()


def test_conformance_server_scenarios_on_two_workers(two_workers: str, tmp_path: Path) -> None:
    assert_server_scenarios_pass(two_workers, tmp_path, scenarios(suite(), "server"))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_on_two_workers(two_workers: str, mode: str) -> None:
    need_python_sdk()

    async def main() -> None:
        async with Client(two_workers, mode=mode, read_timeout_seconds=20) as c:
            await check_http_session(c, mode)

    asyncio.run(main())


@pytest.mark.parametrize("major", ["1", "2"])
def test_typescript_sdk_client_on_two_workers(two_workers: str, major: str) -> None:
    modules = ts_sdk(major) / "node_modules"
    env = dict(os.environ, NODE_PATH=str(modules))
    r = subprocess.run([node(), str(TS_CLIENT), two_workers, str(modules)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["echo"] == "hi" and report["progress"] == [1, 2] and report["reconnection"].startswith("Reconnection")
    assert report["add"] == "42" and report["concurrent"] == ["2", "3", "4", "5", "6"]
    sys.stderr.write(f"TS SDK {major}.x on two workers: ok\n")
