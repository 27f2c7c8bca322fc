"""Helpers for the HTTP tests, all on 127.0.0.1: free ports, HTTP server subprocesses, ASGI apps
served by uvicorn (in a thread or in the running loop), and an MCP session opened over HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@contextmanager
def server_process(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` (which must listen on ``port``), yield it, then stop it (SIGTERM, then SIGKILL)."""
    full_env = dict(os.environ)
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                            start_new_session=True)
    try:
        try:
            wait_port(port, proc)
        except Exception:
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace")[-4000:])
            raise
        yield proc
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def demo_http_cmd(port: int, *, mcp: bool = False, conformance: bool = False) -> list[str]:
    """``sturdyrpc demo --http`` on ``port``: plain JSON-RPC, the MCP demo (``mcp``) or the
    conformance fixture server (``conformance``)."""
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--http", f"127.0.0.1:{port}"]
    if conformance:
        cmd.insert(4, "--conformance")
    elif mcp:
        cmd.insert(4, "--mcp")
    return cmd


#: The Accept header a Streamable HTTP client sends on a POST.
ACCEPT = "application/json, text/event-stream"


async def open_session(c: httpx.AsyncClient, version: str = "2025-11-25") -> dict[str, str]:
    """Initialize an MCP session over Streamable HTTP on ``c``; the headers of its later requests."""
    r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        headers={"accept": ACCEPT})
    assert r.status_code == 200, r.text
    h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": version}
    r = await c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    assert r.status_code == 202
    return h


@contextmanager
def serve_in_thread(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn (our serving settings: ``uvicorn_config``, lifespan on)
    on 127.0.0.1 in a daemon thread; yields ``http://127.0.0.1:PORT`` once it accepts."""
    import threading

    import uvicorn

    from sturdyrpc.transports.serve_http import uvicorn_config

    port = port or free_port()
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True, name=f"uvicorn-{port}")
    thread.start()
    deadline = time.monotonic() + 20
    try:
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@asynccontextmanager
async def serve_in_loop(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Serve the ASGI ``app`` with uvicorn on 127.0.0.1 in the running event loop (lifespan off:
    the caller ends the app with ``await app.aclose()`` before leaving, so that open streams end);
    yields ``http://127.0.0.1:PORT``."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
