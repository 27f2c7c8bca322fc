"""A real redis-server for the tests, started on a free loopback port.

Found on PATH (``make test`` runs scripts/install_redis.sh, which installs the Debian package
when missing). Without one the tests skip, naming the reason; in CI (``CI`` set) they fail.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest

from support.http import free_port
from support.thirdparty import missing_peer


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        missing_peer("redis-server not found on PATH (run scripts/install_redis.sh or apt-get install redis-server)")
    return found


class RedisServer:
    """One redis-server process; ``stop()``/``start()`` keep the port (a restart mid-run)."""

    def __init__(self, *extra: str) -> None:
        self.extra = list(extra)
        self.binary = redis_binary()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sturdyrpc-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--protected-mode", "yes", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(64)[:1] in (b"+", b"-"):  # PONG, or NOAUTH when a password is set: up
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None


def unique_prefix() -> str:
    """Keys of one test apart from every other's (tests share one server)."""
    return f"t{uuid.uuid4().hex[:12]}:"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server for the tests of one module (a fresh, empty one per module)."""
    srv = RedisServer()
    srv.start()
    yield srv
    srv.stop()
