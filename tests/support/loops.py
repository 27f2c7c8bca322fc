"""Both event loops for the tests that depend on the loop (the store, the HTTP apps, the
workers): each such test runs once on asyncio and once on uvloop (``loop_name``, ``run_on``).

uvloop is a dependency of the ``[http]`` extra on Linux and macOS, so it is never skipped: a
machine without it fails the uvloop half (``sturdyrpc.transports.loops`` says what to install).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from sturdyrpc.transports.loops import LOOP_ENV, loop_factory

T = TypeVar("T")

#: The loops a loop-sensitive test runs on (pytest ids: ``[asyncio]``, ``[uvloop]``).
LOOP_NAMES = ["asyncio", "uvloop"]


def run_on(loop_name: str, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on the named loop."""
    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        return runner.run(coro)


def loop_env(loop_name: str) -> dict[str, str]:
    """The environment that makes a server process (and each of its workers) run on the named loop."""
    return {LOOP_ENV: loop_name}


def uses_uvloop(pid: int) -> bool:
    """Whether process ``pid`` has uvloop's extension module loaded (Linux: its memory map)."""
    with open(f"/proc/{pid}/maps") as f:
        return "uvloop/loop." in f.read()
