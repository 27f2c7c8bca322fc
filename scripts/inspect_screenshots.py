"""The screenshots of docs/INSPECT.md, taken in headless Chromium as the browser tests drive it.

    .venv/bin/python scripts/inspect_screenshots.py      # writes docs/img/inspect-*.png

Three pages: the demo after a tool call through its generated form; a broken server of the
check zoo with its violation opened on the offending message, after "Run check"; the demo's
``approve`` tool waiting on an elicitation answered in the page.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.inspector import PY, chromium, start_inspector  # noqa: E402

OUT = ROOT / "docs" / "img"
# The servers by short names, as a reader would type them (the page shows the command).
DEMO = ["--", "sturdyrpc", "demo", "--mcp"]
ZOO_BANNER = ["--", "python", "tests/servers/check_zoo/banner_on_stdout.py"]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    os.environ["PATH"] = os.path.dirname(PY) + os.pathsep + os.environ["PATH"]
    with chromium() as browser:
        page = browser.new_page()
        with start_inspector(*DEMO) as ins:
            page.goto(ins.url)
            page.locator("#items li[data-name=add]").click()
            page.fill("#field-a", "19")
            page.fill("#field-b", "23")
            page.click("#submit-call")
            page.wait_for_selector("#result .content")
            page.locator("#timeline li", has_text="tools/call add").last.locator(".row").click()
            page.screenshot(path=str(OUT / "inspect-demo.png"))
        with start_inspector(*ZOO_BANNER) as ins:
            page.goto(ins.url)
            page.wait_for_selector("#timeline li.violating .row").click()
            page.click("#run-check")
            deadline = time.monotonic() + 120
            while "running" in page.inner_text("#check-verdict") and time.monotonic() < deadline:
                time.sleep(0.2)
            page.screenshot(path=str(OUT / "inspect-violation.png"))
        with start_inspector(*DEMO) as ins:
            page.goto(ins.url)
            page.locator("#items li[data-name=approve]").click()
            page.fill("#field-action", "release 2.0")
            page.click("#submit-call")
            page.wait_for_selector("#elicitations form")
            page.screenshot(path=str(OUT / "inspect-elicitation.png"))
    print(f"screenshots written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
