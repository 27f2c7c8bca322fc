"""The server process under a proxy: started with pipes, watched, and stopped without orphans."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

__all__ = ["Child", "exit_status"]


def _die_with_parent() -> None:
    # Linux: the server gets SIGTERM if the proxy itself is killed (SIGKILL leaves no chance to
    # clean up), so even then no orphan is left behind.
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def exit_status(returncode: int) -> int:
    """A shell's exit status for ``returncode`` (a signal ``-N`` becomes ``128 + N``)."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """``cmd`` started with its stdin and stdout on pipes (stderr shared with the proxy).

    ``on_exit(returncode)`` is called on the loop when it exits.
    """

    def __init__(self, cmd: list[str], on_exit: Callable[[int], None]) -> None:
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin_fd = self.proc.stdin.fileno()
        self.stdout_fd = self.proc.stdout.fileno()
        self.returncode: int | None = None
        self._on_exit = on_exit
        self._exited = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._wait, args=(loop,), daemon=True, name="sturdyrpc-child").start()

    def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        code = self.proc.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(self._set_exited, code)

    def _set_exited(self, code: int) -> None:
        self.returncode = code
        self._exited.set()
        self._on_exit(code)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until it exits (at most ``timeout`` seconds); True if it has."""
        if timeout is None:
            await self._exited.wait()
            return True
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def terminate(self) -> None:
        """SIGTERM on POSIX, ``TerminateProcess`` on Windows (subprocess's portable pair)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                self.proc.terminate()

    def kill(self) -> None:
        """SIGKILL on POSIX; on Windows the same as :meth:`terminate`."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                self.proc.kill()

    async def stop(self, grace: float) -> None:
        """The client is gone: the server has had EOF on stdin; after ``grace`` seconds it gets
        SIGTERM, after ``grace`` more SIGKILL."""
        if await self.wait(grace):
            return
        self.terminate()
        if await self.wait(grace):
            return
        self.kill()
        await self.wait(5.0)

    def close_stdin(self) -> None:
        """EOF for the server."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def close_fds(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
