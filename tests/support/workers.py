"""A cluster of MCP demo workers sharing one real redis-server, and a client that sends every
HTTP request on a new TCP connection to the next worker in turn (so no two requests of a
session meet the same worker unless the test says so)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx

from support.http import ACCEPT, free_port, stop, wait_port
from support.redis import RedisServer

INIT_PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}, "sampling": {}},
               "clientInfo": {"name": "workers-test", "version": "1"}}


class Worker:
    def __init__(self, port: int, proc: subprocess.Popen[bytes], log: Any) -> None:
        self.port = port
        self.proc = proc
        self.log = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def output(self) -> str:
        self.log.seek(0)
        return str(self.log.read().decode(errors="replace"))


def demo_worker_cmd(port: int, store: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}", "--store", store, *extra]


@contextmanager
def cluster(redis: RedisServer, n: int, *, env: dict[str, str] | None = None) -> Iterator[list[Worker]]:
    """``n`` single-process demo servers on their own ports, all with ``--store`` on ``redis``:
    the same as ``--workers n`` behind one port, but a test can pick who serves what."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    workers: list[Worker] = []
    with ExitStack() as stack:
        for _ in range(n):
            port = free_port()
            log = stack.enter_context(tempfile.TemporaryFile())
            proc = subprocess.Popen(demo_worker_cmd(port, redis.url), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
            workers.append(Worker(port, proc, log))
        try:
            for w in workers:
                wait_port(w.port, w.proc)
            yield workers
        finally:
            for w in workers:
                stop(w.proc)


def sse_events(body: str) -> list[dict[str, Any]]:
    """Parse an SSE body into events ({"id":..., "data": parsed JSON or None})."""
    out: list[dict[str, Any]] = []
    for block in body.split("\n\n"):
        ev: dict[str, Any] = {}
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("id:"):
                ev["id"] = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data and "".join(data).strip():
            ev["data"] = json.loads("\n".join(data))
        elif "id" in ev:
            ev["data"] = None
        if ev:
            out.append(ev)
    return out


class Client:
    """One MCP session over several workers; every request on a new connection."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.turn = 0
        self.sid: str | None = None
        self.next_id = 0

    def worker(self, index: int | None) -> Worker:
        if index is None:
            index = self.turn
            self.turn += 1
        return self.workers[index % len(self.workers)]

    def headers(self, **extra: str) -> dict[str, str]:
        h = {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": "2025-11-25", "connection": "close"}
        if self.sid is not None:
            h["mcp-session-id"] = self.sid
        h.update(extra)
        return h

    def post(self, msg: Any, *, on: int | None = None, timeout: float = 20.0) -> httpx.Response:
        with httpx.Client(timeout=timeout) as c:  # a fresh client: a new TCP connection
            return c.post(self.worker(on).url, content=json.dumps(msg), headers=self.headers())

    def request(self, method: str, params: Any = None, *, on: int | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        r = self.post(msg, on=on)
        assert r.status_code == 200, (r.status_code, r.text)
        replies = [e["data"] for e in sse_events(r.text) if e.get("data") and e["data"].get("id") == self.next_id]
        assert replies, r.text
        return replies[-1]

    def notify(self, method: str, params: Any = None, *, on: int | None = None) -> httpx.Response:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        return self.post(msg, on=on)

    def initialize(self, *, on: int | None = None) -> dict[str, Any]:
        self.next_id += 1
        r = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": "initialize", "params": INIT_PARAMS}, on=on)
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        reply = [e["data"] for e in sse_events(r.text) if e.get("data")][-1]
        assert self.notify("notifications/initialized").status_code == 202
        return dict(reply)
