"""bench_middleware's stdio server: the plain ``echo`` of bench_stdio with N pass-through middleware.

``python bench/mw_server.py N``
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sturdyrpc import Context, Dispatcher
from sturdyrpc.transports.stdio import run_stdio


def make(n: int) -> Dispatcher:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        return value

    for _ in range(n):

        async def passthrough(ctx: Context, call_next: Any) -> Any:
            return await call_next(ctx)

        rpc.middleware(passthrough)
    return rpc


if __name__ == "__main__":
    code = run_stdio(make(int(sys.argv[1])))
    sys.stderr.flush()
    os._exit(code)
