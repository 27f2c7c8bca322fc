"""Instructions per request of the core alone, by callgrind: a ``Runner`` fed ``echo`` frames in
process (no event loop turn, no transport), ``LOW`` and ``HIGH`` of them, the difference divided.

The smallest figure of the one path (read, accept, bind, decide, run, encode), without what the
transports add; ``instructions_stdio.py`` measures the real server under load.

    .venv/bin/python bench/instructions_feed.py
    PYTHONPATH=/other/checkout/src .venv/bin/python bench/instructions_feed.py   # another checkout's
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys

LOW, HIGH = 5000, 15000


def run(n: int) -> None:
    from sturdyrpc.dispatch import Dispatcher
    from sturdyrpc.runner import Runner

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def echo(value: object) -> object:
        return value

    frames = [b'{"jsonrpc":"2.0","method":"echo","params":{"value":"hello"},"id":%d}' % i for i in range(n)]
    out: list[bytes] = []

    async def main() -> None:
        feed = Runner(rpc, out.append).feed
        for f in frames:
            feed(f)
            if len(out) > 1000:
                out.clear()

    asyncio.run(main())


def total(n: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, "--run", str(n)]
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    m = re.search(r"refs:\s+([\d,]+)", err)
    if m is None:
        raise RuntimeError("no instruction count in valgrind's output")
    return int(m.group(1).replace(",", ""))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--run":
        run(int(sys.argv[2]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    per = (total(HIGH) - total(LOW)) / (HIGH - LOW)
    print(f"Runner.feed of an echo request, in process: {per:,.0f} instructions/request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
