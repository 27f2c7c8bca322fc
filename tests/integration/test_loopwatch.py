"""The loop-stall warning (sturdyrpc.transports.loopwatch): a tool that blocks the event loop is
reported on stderr by real servers (stdio, HTTP, HTTP with two workers), once per stall, and a
well-behaved call is not."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import msgspec
import pytest
from support import SERVERS
from support.http import free_port, stop, wait_port
from support.process import ServerProcess, wait_until

from sturdyrpc.transports.loopwatch import LoopWatch

pytestmark = pytest.mark.timeout(120)

SCRIPT = str(SERVERS / "mcp_loop_blocking_server.py")
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
WARNING = re.compile(rb"the event loop was blocked for at least (\d+\.\d+) s \(threshold 0\.50 s\)")


def _call(name: str, arguments: dict[str, Any], id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _stdio_session(p: ServerProcess) -> None:
    p.request("initialize", INIT, id=1)
    assert p.recv(20)["result"]["serverInfo"]["name"] == "loop-blocker"
    p.send_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')


def test_stdio_a_tool_blocking_the_loop_is_reported_once_a_normal_call_is_not(spawn: Any) -> None:
    p: ServerProcess = spawn([sys.executable, SCRIPT])
    _stdio_session(p)
    p.send_line(msgspec.json.encode(_call("fine", {"text": "a"}, 2)))
    assert p.recv(20)["result"]["content"][0]["text"] == "a"
    time.sleep(1.0)  # ticks enough to have seen a stall, had there been one
    assert not WARNING.search(p.stderr), bytes(p.stderr)
    p.send_line(msgspec.json.encode(_call("block_loop", {"seconds": 1.0}, 3)))
    assert p.recv(20)["id"] == 3  # late: the tool's own timeout=0.2 could not cut it
    assert wait_until(lambda: WARNING.search(p.stderr) is not None, timeout=10), bytes(p.stderr)
    blocked = float(WARNING.search(p.stderr).group(1))  # type: ignore[union-attr]
    assert 0.7 <= blocked <= 5.0, blocked
    p.send_line(msgspec.json.encode(_call("fine", {"text": "b"}, 4)))
    assert p.recv(20)["result"]["content"][0]["text"] == "b"
    time.sleep(0.5)
    assert len(WARNING.findall(p.stderr)) == 1, bytes(p.stderr)  # one stall, one warning
    p.close_stdin()
    assert p.wait(20) == 0


def test_stdio_watch_off(spawn: Any) -> None:
    p: ServerProcess = spawn([sys.executable, SCRIPT, "off"])
    _stdio_session(p)
    p.send_line(msgspec.json.encode(_call("block_loop", {"seconds": 1.0}, 2)))
    assert p.recv(20)["id"] == 2
    time.sleep(1.0)
    assert b"blocked" not in p.stderr, bytes(p.stderr)


@contextmanager
def _http_server(*extra: str) -> Iterator[tuple[str, bytearray]]:
    """``sturdyrpc run SCRIPT:server --http`` with its stderr collected as it comes."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sturdyrpc", "run", f"{SCRIPT}:server", "--http", f"127.0.0.1:{port}", *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    err = bytearray()

    def read() -> None:
        assert proc.stderr is not None
        while chunk := os.read(proc.stderr.fileno(), 1 << 16):
            err.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", err
    finally:
        stop(proc)
        reader.join(5)


def _post(url: str, msg: Any) -> httpx.Response:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-11-25"}
    return httpx.post(url, content=msgspec.json.encode(msg), headers=headers, timeout=30)


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["one-process", "two-workers"])
def test_http_a_tool_blocking_the_loop_is_reported(workers: list[str]) -> None:
    with _http_server("--stateless", *workers) as (url, err):
        assert _post(url, _call("fine", {"text": "a"}, 1)).status_code == 200
        time.sleep(1.0)
        assert not WARNING.search(err), bytes(err)
        assert _post(url, _call("block_loop", {"seconds": 1.0}, 2)).status_code == 200
        assert wait_until(lambda: WARNING.search(err) is not None, timeout=10), bytes(err)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_loop_kept_busy_is_one_stall_and_warnings_are_spaced() -> None:
    logger = logging.getLogger("sturdyrpc.test-loopwatch")
    logger.propagate = False
    records = _Records()
    logger.addHandler(records)

    async def go() -> LoopWatch:
        loop = asyncio.get_running_loop()
        watch = LoopWatch(0.2, min_gap=3.0, logger=logger)
        watch.start()
        await asyncio.sleep(0.3)
        # Busy: 0.3 s callbacks back to back for 1.5 s; ticks run between them, every one late.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            loop.call_soon(time.sleep, 0.3)
            await asyncio.sleep(0)
        await asyncio.sleep(0.5)  # the loop runs on time again: the stall is over
        assert watch.stalls == 1 and len(records.messages) == 1
        time.sleep(0.5)  # a second stall within min_gap of the warning: counted, not logged
        await asyncio.sleep(0.5)
        assert watch.stalls == 2 and len(records.messages) == 1
        await asyncio.sleep(1.5)
        time.sleep(0.5)  # past min_gap: logged, with the one in between
        await asyncio.sleep(0.3)
        watch.stop()
        return watch

    try:
        watch = asyncio.run(go())
    finally:
        logger.removeHandler(records)
    assert watch.stalls == 3 and len(records.messages) == 2
    assert "1 more stall(s) since the last warning" in records.messages[1]


def test_a_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LoopWatch(0)
