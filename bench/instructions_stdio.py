"""Instructions per request of the real stdio servers under the stdio benches' load, by callgrind.

``bench/instructions.py`` counts stdio requests read from a pipe filled beforehand: every read
brings ~1,000 messages. The stdio benches (``bench_stdio.py``, ``bench_mcp.py``) drive
``sturdyrpc demo`` (and ``demo --mcp``) as a client does, 64 requests in flight, a new one sent
for each reply: reads bring a few messages each, and whatever a server does per read, per turn
of its loop or per reply shows. This runs the same load (the benches' own ``load``) against the
server under ``valgrind --tool=callgrind``, twice (``LOW`` and ``HIGH`` requests), and divides
the difference: start-up excluded. Slow under valgrind, so the client waits for the server as
a slower server would make it wait: the figures are for that pace.

    .venv/bin/python bench/instructions_stdio.py                     # plain and MCP
    PYTHONPATH=/other/checkout/src .venv/bin/python bench/instructions_stdio.py   # another checkout's
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mcp  # noqa: E402
import bench_stdio  # noqa: E402

LOW, HIGH = 2000, 12000


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def per_request(kind: str) -> float:
    """Instructions per request of ``sturdyrpc demo`` (``kind`` "plain") or ``demo --mcp`` ("mcp")."""
    totals = {}
    with tempfile.TemporaryDirectory(prefix="sturdyrpc-instr-stdio-") as tmp:
        for n in (LOW, HIGH):
            out = os.path.join(tmp, f"{kind}.{n}")
            valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"]
            if kind == "plain":
                bench_stdio.load(valgrind + bench_stdio.demo_command(), n=n, warmup=10)
            else:
                bench_mcp.load(valgrind + bench_mcp.our_command(), n, warmup=10)
            totals[n] = _total(out)
    return (totals[HIGH] - totals[LOW]) / (HIGH - LOW)


def main() -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    for kind in sys.argv[1:] or ["plain", "mcp"]:
        print(f"stdio demo {kind:6s} {per_request(kind):10,.0f} instructions/request (64 in flight, over pipes)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
