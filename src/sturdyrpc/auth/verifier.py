"""What every token verifier looks like, and an adapter for a plain function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from .errors import InvalidToken
from .principal import Principal

__all__ = ["TokenVerifier", "FunctionVerifier"]


@runtime_checkable
class TokenVerifier(Protocol):
    """``await verify(token)`` returns the :class:`Principal`, or raises
    :class:`~.errors.InvalidToken` (401) or :class:`~.errors.VerificationUnavailable` (503).
    Anything else it raises is treated as :class:`~.errors.InvalidToken` (and logged)."""

    async def verify(self, token: str) -> Principal: ...


class FunctionVerifier:
    """A :class:`TokenVerifier` from ``fn(token) -> Principal | None`` (sync or async; None
    refuses the token)."""

    def __init__(self, fn: Callable[[str], Principal | None | Awaitable[Principal | None]]) -> None:
        self.fn = fn

    async def verify(self, token: str) -> Principal:
        result = self.fn(token)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, Principal):
            raise InvalidToken("refused by the verifier function")
        return result
