"""A plain stdio server whose ``stdin`` method returns what its fd 0 is: ``[device, inode, is a
pipe]`` (for tests/integration/test_portable_stdio.py: no child server inherits its parent's stdin)."""

from __future__ import annotations

import os
import stat

from sturdyrpc import Dispatcher, run_stdio

rpc = Dispatcher()


@rpc.method(blocking=False)
def stdin() -> list[object]:
    st = os.fstat(0)
    return [st.st_dev, st.st_ino, stat.S_ISFIFO(st.st_mode)]


if __name__ == "__main__":
    raise SystemExit(run_stdio(rpc))
