"""A flag tasks can wait for, cheap enough to make by the thousand.

:class:`Flag` has the interface of :class:`asyncio.Event` (``is_set``, ``set``, ``clear``,
``wait``). An ``asyncio.Event`` allocates the deque of its waiters when it is made (760 bytes,
a deque's first block), and an idle MCP session over HTTP holds several of them: a ``Flag``
makes its list of waiters when a task first waits, so a flag nobody waits for costs its object
alone.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Literal

#: What :meth:`Flag.when_set` keeps until the flag is set: the loop to call back on, the callback
#: and the context it runs in.
_Callback = tuple[asyncio.AbstractEventLoop, Callable[[], object], contextvars.Context]

__all__ = ["Flag"]


class Flag:
    """Set or clear; :meth:`wait` returns once it is set (at once if it is)."""

    __slots__ = ("_value", "_waiters")

    def __init__(self, value: bool = False) -> None:
        self._value = value
        # the futures of waiting tasks, and the callbacks of when_set, in order
        self._waiters: list[asyncio.Future[None] | _Callback] | None = None

    def __repr__(self) -> str:
        return f"Flag({'set' if self._value else 'clear'})"

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._value

    def set(self) -> None:
        """Set the flag and wake every task waiting for it (they return even if it is cleared
        again before they run, as with ``asyncio.Event``)."""
        if self._value:
            return
        self._value = True
        waiters, self._waiters = self._waiters, None
        if waiters:
            for w in waiters:
                if isinstance(w, tuple):
                    loop, callback, context = w
                    # A closed loop runs nothing more (its tasks were cancelled when it closed:
                    # a task waiting here would never have run on).
                    if not loop.is_closed():
                        loop.call_soon(callback, context=context)
                elif not w.done():
                    w.set_result(None)

    def clear(self) -> None:
        """Clear the flag: later :meth:`wait` calls wait again."""
        self._value = False

    def when_set(self, callback: Callable[[], object], *, context: contextvars.Context | None = None) -> None:
        """Call ``callback()`` from the loop once the flag is set (soon, if it is set now), in
        ``context`` (default: a copy of the current one): what a task that waits only to act on
        the flag does, for the memory of one tuple instead of a task."""
        loop = asyncio.get_running_loop()
        if context is None:
            context = contextvars.copy_context()
        if self._value:
            loop.call_soon(callback, context=context)
            return
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = []
        waiters.append((loop, callback, context))

    async def wait(self) -> Literal[True]:
        """Return True once the flag is set."""
        if self._value:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = []
        waiters.append(fut)
        try:
            await fut
            return True
        finally:
            # Cancelled: not left behind (set() has let go of the list of those it woke).
            if waiters is self._waiters:
                try:
                    waiters.remove(fut)
                except ValueError:
                    pass
