"""The floor for bench_proxy: the least a proxy in Python can do (no framing, no parsing).

Starts the command given as arguments with pipes and copies bytes both ways with one
``select`` loop: read whatever is there, write it out with a blocking write.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys


def main() -> int:
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    to_child, from_child = proc.stdin.fileno(), proc.stdout.fileno()
    route = {0: to_child, from_child: 1}
    open_fds = [0, from_child]
    while from_child in open_fds:
        for fd in select.select(open_fds, [], [])[0]:
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
                if fd == 0:
                    proc.stdin.close()
                continue
            view = memoryview(data)
            while view:
                view = view[os.write(route[fd], view):]
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
