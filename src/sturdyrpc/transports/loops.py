"""Which event loop the HTTP servers run on: uvloop where it is installed, asyncio otherwise.

One choice for every HTTP entry point (``sturdyrpc run --http``, ``sturdyrpc demo --http``, each
worker of ``--workers N``: :func:`~.serve_http.run_uvicorn` passes it to uvicorn): ``--loop``
on the command line, else the ``STURDYRPC_LOOP`` environment variable, else ``auto``.
``auto`` takes uvloop when it can be imported (the ``[http]`` extra brings it on Linux and
macOS; it does not exist on Windows), asyncio otherwise; ``uvloop`` without uvloop installed is
an error rather than a quiet fallback, so a benchmark or a test asking for it gets it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

__all__ = ["LOOPS", "LOOP_ENV", "event_loop", "loop_factory"]

#: The choices of ``--loop``.
LOOPS = ("auto", "asyncio", "uvloop")
#: The environment variable read when no choice is passed.
LOOP_ENV = "STURDYRPC_LOOP"


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def event_loop(choice: str | None = None) -> str:
    """``"asyncio"`` or ``"uvloop"``: what ``choice`` (one of :data:`LOOPS`; None: the
    ``STURDYRPC_LOOP`` environment variable, else ``auto``) comes to on this machine. Raises
    ValueError for an unknown choice, or for ``uvloop`` when it is not installed."""
    name = (choice if choice is not None else os.environ.get(LOOP_ENV) or "auto").strip().lower()
    if name not in LOOPS:
        raise ValueError(f"unknown event loop {name!r}: expected one of {', '.join(LOOPS)}")
    if name == "auto":
        return "uvloop" if _has_uvloop() else "asyncio"
    if name == "uvloop" and not _has_uvloop():
        raise ValueError("the uvloop event loop is not installed: pip install uvloop (Linux, macOS), or --loop asyncio")
    return name


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A new-loop function for :class:`asyncio.Runner` (``loop_factory=``) on the loop
    :func:`event_loop` chooses."""
    if event_loop(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop
