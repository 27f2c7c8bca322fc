"""``make bench``'s deterministic figures: instructions per request under callgrind
(:mod:`instructions`), each beside its bare baseline measured in the same run.

Wall-clock ratios move by 0.2 between runs on a shared machine; these counts repeat exactly.
Skipped (reported, not failed) where valgrind is not installed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import instructions  # noqa: E402


def main() -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        return {"title": "instructions per request (skipped: valgrind is not installed)", "metrics": []}
    figures: dict[str, float] = {}
    metrics: list[dict[str, Any]] = []
    for name, (_fn, base) in instructions.SCENARIOS.items():
        figures[name] = instructions.per_request(name)
        extra = f"{figures[name] / figures[base]:.2f}x {base}" if base is not None else "baseline"
        metrics.append({"name": name, "value": round(figures[name]), "unit": "instr/req", "extra": extra, "target": None, "ok": None})
    return {
        "title": "instructions per request (callgrind; in process, no sockets; bare loop / bare ASGI app as baselines)",
        "metrics": metrics,
        "per_request": figures,
    }
