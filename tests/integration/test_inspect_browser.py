"""``sturdyrpc inspect`` in a real browser: headless Chromium (Debian's package) driven by
Playwright. A tool called through the form generated from its schema, its reply rendered (text,
structured content, image, audio, embedded resource); an elicitation answered in the page; a
broken server of the check zoo with the violation marked on the offending message, its rule's
name and text shown; check run from the page; the timeline filtered and searched; the session
exported with the page's button and replayed with ``sturdyrpc replay``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.inspector import PY, Inspector, chromium, start_inspector

from sturdyrpc.check.verdicts import SPECS

pytestmark = pytest.mark.timeout(180)

DEMO = [PY, "-m", "sturdyrpc", "demo", "--mcp"]
BANNER = SERVERS / "check_zoo" / "banner_on_stdout.py"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as context:
        yield context


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    p = browser.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    p.close()
    assert errors == []  # no script error on any page


def until(ok: Any, timeout: float = 10.0) -> None:
    """Wait for ``ok()`` (the page's CSP forbids the string evaluation of ``wait_for_function``)."""
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "the page never got there"
        time.sleep(0.05)


def open_tool(page: Any, ins: Inspector, tool: str) -> None:
    page.goto(ins.url)
    page.locator(f"#items li[data-name='{tool}']").click()  # a locator: found again if the list is redrawn


def call(page: Any) -> Any:
    page.click("#submit-call")
    return page.wait_for_selector("#result .content")


def test_a_tool_called_through_its_form(page: Any) -> None:
    with start_inspector("--", *DEMO) as ins:
        open_tool(page, ins, "add")
        assert page.locator("#call-form label[for=field-a] .req").count() == 1  # required, from the schema
        page.fill("#field-a", "19")
        page.fill("#field-b", "23")
        call(page)
        assert page.inner_text("#result .content[data-type=text] pre") == "42"
        assert '"result": 42' in page.inner_text("#result .content[data-type=structured]")
        row = page.locator("#timeline li", has_text="tools/call add").first
        row.wait_for()
        assert "ms" in row.inner_text()
        page.fill("#search", "tools/call add")
        until(lambda: page.locator("#timeline li:not([hidden])").count() == 2)
        page.fill("#search", "")
        page.select_option("#filter-dir", "s2c")
        assert all(li.get_attribute("class").startswith("s2c") for li in page.locator("#timeline li:not([hidden])").all())


def test_progress_of_a_call_in_the_page_and_on_the_timeline(page: Any) -> None:
    with start_inspector("--", *DEMO) as ins:
        open_tool(page, ins, "slow")
        page.fill("#field-seconds", "2")
        page.fill("#field-steps", "4")
        page.click("#submit-call")
        page.wait_for_selector("#calls li progress")  # shown while the call is in flight
        page.wait_for_selector("#result .content[data-type=text]")
        assert page.locator("#calls li").count() == 0
        progress = page.locator("#timeline li", has_text="notifications/progress")
        until(lambda: progress.count() == 4)
        assert page.locator("#timeline li.violating").count() == 0


def test_a_request_unanswered_past_the_deadline_is_marked(page: Any) -> None:
    with start_inspector("--deadline", "0.5", "--", PY, str(SERVERS / "check_zoo" / "mcp_reference.py")) as ins:
        open_tool(page, ins, "sleep")
        page.fill("#field-seconds", "4")
        page.click("#submit-call")
        row = page.wait_for_selector("#timeline li.overdue")
        assert "tools/call sleep" in row.inner_text()
        assert "tools/call sleep" in page.inner_text("#summary")
        page.wait_for_selector("#result .content[data-type=text]", timeout=20_000)
        until(lambda: page.locator("#timeline li.overdue").count() == 0)  # answered at last


def test_each_kind_of_content_is_rendered(page: Any) -> None:
    with start_inspector("--", PY, "-m", "sturdyrpc", "demo", "--conformance") as ins:
        open_tool(page, ins, "test_multiple_content_types")
        call(page)
        page.wait_for_selector("#result .content[data-type=resource]")
        kinds = page.eval_on_selector_all("#result .content", "els => els.map(e => e.dataset.type)")
        assert {"text", "image", "resource"} <= set(kinds)
        assert page.eval_on_selector("#result img", "img => img.src.startsWith('data:image/')")
        open_tool(page, ins, "test_audio_content")
        call(page)
        assert page.eval_on_selector("#result audio", "a => a.src.startsWith('data:audio/')")


def test_an_elicitation_answered_in_the_page(page: Any) -> None:
    with start_inspector("--", *DEMO) as ins:
        open_tool(page, ins, "approve")
        page.fill("#field-action", "release 2.0")
        page.click("#submit-call")
        form = page.wait_for_selector("#elicitations form.elicitation")
        assert "Approve release 2.0?" in form.inner_text()
        page.check("#elicit1-ok")
        page.click("#elicitations button[type=submit]")
        page.wait_for_selector("#result .content[data-type=text]")
        assert page.inner_text("#result .content[data-type=text] pre") == "release 2.0: approved"
        page.wait_for_selector("#elicitations form", state="detached")


def test_a_server_request_answered_in_the_page_on_the_handshake_era(page: Any) -> None:
    with start_inspector("--protocol", "2025-11-25", "--", *DEMO) as ins:
        open_tool(page, ins, "approve")
        page.click("#submit-call")
        page.wait_for_selector("#elicitations form.elicitation")
        ask = page.locator("#timeline li.s2c", has_text="elicitation/create")
        ask.wait_for()
        assert "request" in ask.inner_text()
        page.click("#elicitations button:has-text('Decline')")
        page.wait_for_selector("#result .content[data-type=text]")
        assert page.inner_text("#result .content[data-type=text] pre") == "deploy: not approved"
        ask.locator(".row").click()
        assert "answered by" in ask.inner_text()  # the client's reply, paired with the server's request
        assert "MCP 2025-11-25" in page.inner_text("#status")


def test_a_broken_server_its_violation_on_the_message_and_check(page: Any) -> None:
    spec = SPECS["framing.stdout-only-jsonrpc"]
    with start_inspector("--", PY, str(BANNER)) as ins:
        page.goto(ins.url)
        page.wait_for_selector("#status.failed")
        assert "Method not found" in page.inner_text("#error")
        junk = page.wait_for_selector("#timeline li.violating")
        assert "zoo server 1.0 ready" in junk.inner_text()
        assert junk.query_selector(".vbadge").inner_text() == spec.id
        assert page.locator("#timeline li.violating").count() == 1  # on that message only
        junk.query_selector(".row").click()
        detail = junk.wait_for_selector(".violation")
        text = detail.inner_text()
        assert spec.id in text and spec.title in text and spec.rule in text and spec.hint in text
        assert page.inner_text("#violation-count") == "1 violations"
        page.check("#filter-violations")
        assert page.locator("#timeline li:not([hidden])").count() == 1
        page.click("#run-check")
        until(lambda: "running" not in page.inner_text("#check-verdict"), 120.0)
        assert "failed" in page.inner_text("#check-verdict")
        assert spec.id in page.inner_text("#check-report")


def test_the_exported_log_replays(page: Any, tmp_path: Path) -> None:
    with start_inspector("--", *DEMO) as ins:
        open_tool(page, ins, "echo")
        page.fill("#field-text", "exported")
        call(page)
        with page.expect_download() as download:
            page.click("#export")
        log = tmp_path / "session.ndjson"
        download.value.save_as(log)
    assert b"exported" in log.read_bytes()
    done = subprocess.run([PY, "-m", "sturdyrpc", "replay", str(log), "--", *DEMO], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "same behaviour" in done.stderr, done.stdout + done.stderr
