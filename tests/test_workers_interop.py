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
from _http_support import free_port, server_process
from _redis_support import RedisServer
from _workers_support import demo_worker_cmd


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
    from test_conformance import _scenarios, _suite, assert_server_scenarios_pass

    assert_server_scenarios_pass(two_workers, tmp_path, _scenarios(_suite(), "server"))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_on_two_workers(two_workers: str, mode: str) -> None:
    import test_http_interop as interop

    interop._need_sdk()

    async def main() -> None:
        async with interop.Client(two_workers, mode=mode, read_timeout_seconds=20) as c:
            await interop._checks(c, mode)

    asyncio.run(main())


@pytest.mark.parametrize("major", ["1", "2"])
def test_typescript_sdk_client_on_two_workers(two_workers: str, major: str) -> None:
    import test_http_interop as interop

    modules = interop._ts_sdk(major)
    env = dict(os.environ, NODE_PATH=str(modules))
    r = subprocess.run([interop._node(), str(interop.TS_CLIENT), two_workers, str(modules)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["echo"] == "hi" and report["progress"] == [1, 2] and report["reconnection"].startswith("Reconnection")
    assert report["add"] == "42" and report["concurrent"] == ["2", "3", "4", "5", "6"]
    sys.stderr.write(f"TS SDK {major}.x on two workers: ok\n")
