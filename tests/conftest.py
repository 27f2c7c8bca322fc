"""Shared, generic fixtures (a demo dispatcher, server subprocesses over real pipes) and the
hypothesis profiles. The helpers themselves are in ``support/``, the scripts tests start in
``servers/``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from support.loops import LOOP_NAMES
from support.process import DEMO_CMD, ServerProcess

from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.dispatch import Dispatcher

#: Fixtures of the helpers shared by several modules (a real redis-server per module), and
#: pytest's own pytester (a pytest run in a subprocess, for the sturdyrpc_check plugin).
pytest_plugins = ["support.redis", "pytester"]


def _hypothesis_profiles() -> None:
    """``ci`` (the default): the same examples on every run, so a red CI run is a real defect
    and re-running reproduces it; ``fuzz`` (``HYPOTHESIS_PROFILE=fuzz``, ``make fuzz``): many
    more random examples, to look for new ones. A test's own ``max_examples`` wins over both."""
    from hypothesis import HealthCheck, settings

    slow_ok = [HealthCheck.too_slow]
    settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=100, suppress_health_check=slow_ok)
    settings.register_profile("fuzz", derandomize=False, deadline=None, max_examples=5000, suppress_health_check=slow_ok)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


@pytest.fixture(params=LOOP_NAMES)
def loop_name(request: pytest.FixtureRequest) -> str:
    """The event loop of a test that depends on it: such a test runs on asyncio and on uvloop
    (``support.loops.run_on(loop_name, coro)``, or ``loop_env(loop_name)`` for a server process)."""
    return str(request.param)


@pytest.fixture
def demo() -> Dispatcher:
    """A fresh in-process demo dispatcher."""
    return make_demo()


@pytest.fixture
def spawn() -> Iterator[Any]:
    """``spawn(cmd=DEMO_CMD, **kw)`` starts a server; every one started is killed at teardown."""
    started: list[ServerProcess] = []

    def start(cmd: list[str] | None = None, **kw: Any) -> ServerProcess:
        p = ServerProcess(cmd or DEMO_CMD, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def demo_proc(spawn: Any) -> ServerProcess:
    """A running ``sturdyrpc demo`` (line framing)."""
    return spawn()  # type: ignore[no-any-return]
