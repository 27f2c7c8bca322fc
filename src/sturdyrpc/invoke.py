"""Invoking user code under the one error policy, sans I/O.

Whatever a handler, a middleware or a tool raises comes back as a failed :data:`Outcome`
instead of propagating: ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` included
(an asyncio task that lets ``SystemExit`` out stops the event loop, and with it the server).
Only cancellation (``asyncio.CancelledError``, a ``BaseException`` outside
:data:`~sturdyrpc.errors.HANDLER_ERRORS`) passes through: a cancelled request is never answered.

These two functions are the only places in sturdyrpc that catch what user code raises; every
transport reaches them through :mod:`sturdyrpc.execute` and the runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .errors import HANDLER_ERRORS

__all__ = ["Outcome", "call_now", "call_async"]

#: ``(True, value)`` when the code returned, ``(False, exception)`` when it raised.
Outcome = tuple[bool, Any]


def call_now(fn: Callable[..., Any], args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> Outcome:
    """``fn(*args, **kwargs)`` right here, as an :data:`Outcome`."""
    try:
        return True, fn(*args, **kwargs)
    except HANDLER_ERRORS as exc:
        return False, exc


async def call_async(fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> Outcome:
    """``await fn(*args, **kwargs)`` as an :data:`Outcome` (cancellation passes through)."""
    try:
        return True, await fn(*args, **kwargs)
    except HANDLER_ERRORS as exc:
        return False, exc
