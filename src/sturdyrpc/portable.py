"""Whether pipes are read and written by threads (the portable path) instead of the event loop.

Windows' proactor loop cannot watch pipes (no ``add_reader``) and its pipes cannot be made
non-blocking for ``select``; there, and wherever ``STURDYRPC_PORTABLE_STDIO=1`` forces it (so
that the tests run the same path on Linux), the stdio transport, the proxies and the checker
read and write with blocking calls in threads. Imports nothing: the checker may use it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["PORTABLE_ENV", "portable"]

#: Set to ``1``: read and write every pipe with threads, as where the loop cannot watch pipes.
PORTABLE_ENV = "STURDYRPC_PORTABLE_STDIO"


def portable() -> bool:
    """Whether pipes are read and written by threads: on Windows, or when forced."""
    return sys.platform == "win32" or os.environ.get(PORTABLE_ENV) == "1"
