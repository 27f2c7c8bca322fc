"""How long the page of ``sturdyrpc inspect`` takes to load with a thousand messages on its timeline.

The inspector runs on ``sturdyrpc demo --mcp``; 500 ``echo`` calls through its API put 1,000
messages (and the handshake's) on the timeline. Then headless Chromium (Debian's, driven by
Playwright, as in the browser tests) opens the page afresh ``LOADS`` times; each load is timed
from the navigation's start (the page's ``performance.now()``) to the moment every message is a
row of the timeline. The issue's target: under a second.

    .venv/bin/python bench/run_all.py inspect
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.inspector import PY, chromium, start_inspector  # noqa: E402

CALLS = 500
LOADS = 5
#: Resolves with performance.now() once the timeline has ``n`` rows.
_ROWS_AT = """n => new Promise(ok => {
  const f = () => document.querySelectorAll('#timeline > li').length >= n ? ok(performance.now()) : requestAnimationFrame(f);
  f();
})"""


def main() -> dict[str, Any]:
    with start_inspector("--", PY, "-m", "sturdyrpc", "demo", "--mcp") as ins, httpx.Client(timeout=30) as http:
        h = {"X-Inspect-Token": ins.token}
        deadline = time.monotonic() + 30
        while not http.get(f"{ins.base}/api/state", headers=h).json()["catalog"]["tools"]:
            assert time.monotonic() < deadline, "the inspector never listed the demo's tools"
            time.sleep(0.1)
        for i in range(CALLS):
            http.post(f"{ins.base}/api/call", headers=h, json={"kind": "tool", "name": "echo", "arguments": {"text": f"message {i}"}})
        total = len(http.get(f"{ins.base}/api/timeline", headers=h).json()["entries"])
        times = []
        with chromium() as browser:
            for _ in range(LOADS):
                page = browser.new_page()
                page.goto(ins.url, wait_until="commit")
                times.append(page.evaluate(_ROWS_AT, total))
                page.close()
    median = statistics.median(times)
    return {
        "title": f"inspect: the page loaded with {total} messages on its timeline (ms, navigation start to every row shown)",
        "metrics": [
            {"name": "page load, median", "value": round(median, 1), "unit": "ms", "extra": f"{LOADS} loads, max {max(times):.1f} ms",
             "target": "< 1000 ms", "ok": max(times) < 1000},
        ],
        "messages": total,
        "loads_ms": [round(t, 1) for t in times],
    }


if __name__ == "__main__":
    print(main())
