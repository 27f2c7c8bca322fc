"""A server subprocess driven over real pipes (stdio), and polling until something holds."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

import msgspec
import pytest

#: ``sturdyrpc demo``: the plain JSON-RPC demo server on stdio.
DEMO_CMD = [sys.executable, "-m", "sturdyrpc", "demo"]


class ServerProcess:
    """A server subprocess over pipes; stdout and stderr are read by threads (nothing can block)."""

    def __init__(self, cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        full_env = dict(os.environ)
        full_env["PYTHONUNBUFFERED"] = "1"
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd, bufsize=0
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw_stdout = bytearray()  # every byte the server wrote on stdout
        self.stderr = bytearray()
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while True:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            self.raw_stdout += chunk
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for line in complete:
                self.lines.put(line)
        if buf:
            self.lines.put(buf)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            chunk = os.read(self.proc.stderr.fileno(), 1 << 16)
            if not chunk:
                break
            self.stderr += chunk

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send_line(self, data: bytes | str) -> None:
        self.send((data.encode() if isinstance(data, str) else data) + b"\n")

    def request(self, method: str, params: Any = None, id: Any = 1) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
        if params is not None:
            msg["params"] = params
        self.send_line(msgspec.json.encode(msg))

    def recv_line(self, timeout: float = 5.0) -> bytes | None:
        """The next stdout line; None at EOF. Fails the test on timeout."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no reply within {timeout}s; stderr: {bytes(self.stderr[-2000:])!r}")

    def recv(self, timeout: float = 5.0) -> Any:
        line = self.recv_line(timeout)
        assert line is not None, f"server closed stdout; stderr: {bytes(self.stderr[-2000:])!r}"
        return msgspec.json.decode(line)

    def no_more(self, wait: float = 0.3) -> None:
        """Assert that nothing arrives within ``wait`` seconds."""
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            return
        pytest.fail(f"unexpected output: {line!r}")

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def wait(self, timeout: float = 5.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for t in self._threads:
            t.join(2)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


def wait_until(pred: Any, timeout: float = 5.0, step: float = 0.01) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
