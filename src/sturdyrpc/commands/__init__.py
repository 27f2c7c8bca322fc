"""Subcommands of the ``sturdyrpc`` program, one module each.

Each module defines ``register(subparsers)``, which adds its parser and sets
``func`` to a function taking the parsed namespace and returning an exit code.
Modules import their heavy dependencies inside ``func`` so that ``sturdyrpc demo``
starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

#: Subcommand modules, in the order ``--help`` lists them.
MODULES = ["demo", "call", "check", "mcp", "trace", "guard", "replay", "inspect", "run", "dev", "install"]

# Exit codes shared by the client subcommands (call, mcp), as timeout(1) and shells use them.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_NOT_STARTED = 127
EXIT_INTERRUPTED = 130


def cancel_on_signal(state: dict[str, bool], timeout: float | None = None) -> asyncio.TimerHandle | None:
    """Cancel the running task on SIGINT/SIGTERM (``state["interrupted"]`` set) or once
    ``timeout`` seconds have passed (``state["timed_out"]`` set): the client subcommands' way to
    stop. Returns the timeout's timer (None without one)."""
    import asyncio  # here: the package is imported by every subcommand, most need no loop
    import signal

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def stop(why: str) -> None:
        state[why] = True
        if task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop, "interrupted")
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    return None if timeout is None else loop.call_later(timeout, stop, "timed_out")
