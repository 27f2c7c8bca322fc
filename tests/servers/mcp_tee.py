"""Run an MCP stdio server and record the wire: ``python mcp_tee.py LOG -- CMD ARGS...``.

Bytes from our stdin go to the server's stdin (and to ``LOG.in``); the server's stdout goes to
our stdout (and to ``LOG.out``). The tests validate every line of ``LOG.out`` against the
official MCP JSON Schema. Exits with the server's exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main() -> int:
    log = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None

    def pump_in() -> None:
        with open(log + ".in", "ab", buffering=0) as rec:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                rec.write(data)
                try:
                    proc.stdin.write(data)  # type: ignore[union-attr]
                except (BrokenPipeError, ValueError):
                    break
        try:
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    threading.Thread(target=pump_in, daemon=True).start()
    with open(log + ".out", "ab", buffering=0) as rec:
        while True:
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            rec.write(data)
            os.write(1, data)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
