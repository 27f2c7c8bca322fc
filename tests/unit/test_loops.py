"""Which event loop the HTTP servers run on (sturdyrpc.transports.loops): the flag, the
environment variable, auto, and uvloop asked for where it cannot be imported."""

from __future__ import annotations

import asyncio
import sys

import pytest

from sturdyrpc.transports.loops import LOOP_ENV, event_loop, loop_factory
from sturdyrpc.transports.serve_http import uvicorn_config

# (choice passed, STURDYRPC_LOOP, uvloop importable, the loop chosen or the error's words)
CASES = [
    (None, None, True, "uvloop"),
    (None, None, False, "asyncio"),
    ("auto", "asyncio", True, "uvloop"),  # the flag wins over the environment
    (None, "asyncio", True, "asyncio"),
    (None, " UVLOOP ", True, "uvloop"),
    (None, "", True, "uvloop"),  # empty: as unset
    ("asyncio", None, True, "asyncio"),
    ("asyncio", None, False, "asyncio"),
    ("uvloop", None, True, "uvloop"),
    ("uvloop", None, False, "not installed"),
    (None, "uvloop", False, "not installed"),
    ("trio", None, True, "unknown event loop 'trio'"),
    (None, "tokio", True, "unknown event loop 'tokio'"),
]


@pytest.mark.parametrize(("choice", "env", "importable", "expected"), CASES)
def test_the_loop_chosen(choice: str | None, env: str | None, importable: bool, expected: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv(LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(LOOP_ENV, env)
    if not importable:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import of a missing module does
    if expected in ("asyncio", "uvloop"):
        assert event_loop(choice) == expected
        loop = loop_factory(choice)()
        try:
            assert (type(loop).__module__.startswith("uvloop")) == (expected == "uvloop")
        finally:
            loop.close()
        # uvicorn gets the name resolved here (and hands it to every worker it spawns)
        assert uvicorn_config(lambda *a: None, "127.0.0.1", 0, loop=choice).loop == expected
    else:
        with pytest.raises(ValueError, match=expected):
            event_loop(choice)


def test_an_asyncio_loop_is_asyncio_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOOP_ENV, raising=False)
    loop = loop_factory("asyncio")()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()
