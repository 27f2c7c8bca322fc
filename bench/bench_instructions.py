"""Instructions per request under callgrind, for ``make bench``: the figure that repeats on a loaded machine.

Wall-clock ratios on a shared machine move by 0.2 between runs; the number of instructions a
request costs does not (``bench/instructions.py`` says how it is counted: two runs of each
scenario under ``valgrind --tool=callgrind``, their difference per request, start-up excluded).
Each figure is shown beside its bare baseline of the same run (the bare stdio loop, the bare
ASGI app), as a ratio.

``valgrind`` is looked up on PATH; missing, it is installed with ``apt-get install -y valgrind``
when this runs as root with apt-get available; otherwise the bench says so and measures nothing.

Run alone: ``.venv/bin/python bench/run_all.py instructions`` (or ``bench/instructions.py`` for
one scenario, or another checkout's figures with ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import instructions  # noqa: E402  (the counting itself, also a script of its own)


def find_valgrind() -> tuple[str | None, str]:
    found = shutil.which("valgrind")
    if found:
        return found, found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench_instructions: valgrind not found; installing it with apt-get install -y valgrind", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        r = subprocess.run(["apt-get", "install", "-y", "valgrind"], capture_output=True, text=True, env=env)
        found = shutil.which("valgrind")
        if found:
            return found, f"valgrind installed with apt-get ({found})"
        return None, f"valgrind is not installed and apt-get could not install it: {r.stderr.strip()[-300:]}"
    return None, "valgrind is not installed (Debian: apt-get install valgrind); not measured"


def main() -> dict[str, Any]:
    found, how = find_valgrind()
    if found is None:
        print(f"bench_instructions: {how}", file=sys.stderr)
        return {"title": f"instructions per request (callgrind): NOT MEASURED ({how})", "metrics": []}
    figures: dict[str, float] = {}
    metrics: list[dict[str, Any]] = []
    for name, (_, base) in instructions.SCENARIOS.items():
        if base is not None and base not in figures:
            figures[base] = instructions.per_request(base)
        if name not in figures:
            figures[name] = instructions.per_request(name)
    for name, (_, base) in instructions.SCENARIOS.items():
        extra = f"{figures[name] / figures[base]:.2f}x {base}" if base is not None else "the baseline"
        metrics.append({"name": name, "value": round(figures[name]), "unit": "instr/req",
                        "extra": extra, "target": None, "ok": None})
    return {"title": "instructions per request (callgrind; each beside its bare baseline of the same run)",
            "metrics": metrics, "per_request": figures}


if __name__ == "__main__":
    out = main()
    for m in out["metrics"]:
        print(f"{m['name']:24s} {m['value']:10,} {m['unit']}  {m['extra']}")
