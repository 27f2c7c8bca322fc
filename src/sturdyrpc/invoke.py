"""Invoking user code under the one error policy, sans I/O.

Whatever a handler, a middleware or a tool raises comes back as a failed :data:`Outcome`
instead of propagating: ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` included
(an asyncio task that lets ``SystemExit`` out stops the event loop, and with it the server).
Only cancellation (``asyncio.CancelledError``, a ``BaseException`` outside
:data:`~sturdyrpc.errors.HANDLER_ERRORS`) passes through: a cancelled request is never answered.

These functions are the only places in sturdyrpc that catch what user code raises; every
transport reaches them through :mod:`sturdyrpc.execute` and the runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .errors import HANDLER_ERRORS

__all__ = ["Outcome", "call_now", "call_async", "answer_now"]

T = TypeVar("T")
R = TypeVar("R")

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


def answer_now(fn: Callable[..., Any], args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any], call: T,
               answer: Callable[[T, Any], R], fail: Callable[[T, BaseException], R]) -> R:
    """``answer(call, fn(*args, **kwargs))``, or ``fail(call, exc)`` when it raised: a call run
    and answered right here (the dispatcher's ``INLINE`` plan), without an :data:`Outcome` in
    between (one frame and one tuple less than :func:`call_now` on the commonest call)."""
    try:
        value = fn(*args, **kwargs)
    except HANDLER_ERRORS as exc:
        return fail(call, exc)
    return answer(call, value)
