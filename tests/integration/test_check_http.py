"""``sturdyrpc check --url``: the checker over HTTP, proven on both HTTP demos and on broken servers.

The demos run as real ``sturdyrpc demo --http`` subprocesses on 127.0.0.1 (the checker starts
nothing for ``--url``); the broken servers (tests/servers/check_http_zoo.py) run on uvicorn in a thread,
each flagged for exactly its bug.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import check_http_zoo as zoo
from support import ROOT
from support.http import demo_http_cmd, free_port, server_process

from sturdyrpc.check import Config, Report, Status, run_checks

PY = sys.executable

pytestmark = pytest.mark.timeout(120)

#: The checks that only mean something on a pipe: skipped over HTTP, with a reason.
STDIO_ONLY = {
    "framing.chunked", "framing.pipelined", "framing.stdout-only-jsonrpc", "robustness.huge-line",
    "robustness.pipelined-2000", "robustness.blank-lines", "robustness.many-invalid",
    "lifecycle.eof-inflight", "lifecycle.eof-exit", "lifecycle.sigterm",
}


def not_passed(report: Report) -> dict[str, str]:
    return {o.spec.id: o.status.value for o in report.outcomes if o.status not in (Status.PASS, Status.SKIP)}


def describe(report: Report) -> str:
    return "\n".join(
        f"{o.spec.id} {o.status.value}: {o.detail}\n   sent={o.sent[:3]}\n   recv={o.received[:4]}"
        for o in report.outcomes if o.status not in (Status.PASS, Status.SKIP)
    )


def ran(report: Report, area: str) -> set[str]:
    return {o.spec.id for o in report.outcomes if o.spec.area == area and o.status is not Status.SKIP}


def check_cli(url: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([PY, "-m", "sturdyrpc", "check", "--url", url, "--json", str(out), *args],
                          capture_output=True, text=True, timeout=100, env=env, cwd=ROOT)
    return proc, json.loads(out.read_text()) if out.exists() else {}


@pytest.fixture(scope="module")
def mcp_demo() -> Iterator[str]:
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def plain_demo() -> Iterator[str]:
    port = free_port()
    with server_process(demo_http_cmd(port), port):
        yield f"http://127.0.0.1:{port}/"


def _assert_clean(proc: subprocess.CompletedProcess[str], data: dict[str, Any]) -> dict[str, str]:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert data["summary"]["failed"] == 0 and data["summary"]["warnings"] == 0, proc.stdout[-4000:]
    status = {c["id"]: c["status"] for c in data["checks"]}
    for cid in STDIO_ONLY:
        assert status[cid] == "skip", cid
        (c,) = [c for c in data["checks"] if c["id"] == cid]
        assert c["detail"].startswith("stdio only"), c
    return status


def test_mcp_demo_modern(mcp_demo: str, tmp_path: Path) -> None:
    proc, data = check_cli(mcp_demo, tmp_path, "--slow", "slow", "--leak-probe", "fail")
    status = _assert_clean(proc, data)
    assert data["mcp"] and data["protocol"] == "2026-07-28"
    http_passed = {k for k, v in status.items() if k.startswith("http.") and v == "pass"}
    assert {"http.notification-accepted", "http.request-reply", "http.accept", "http.parse-error", "http.protocol-version",
            "http.origin", "http.body-too-large", "http.no-leak", "http.header-missing", "http.unknown-method",
            "http.get-delete"} <= http_passed
    # The message-level checks ran over HTTP too, the 2026-07-28 ones included.
    for cid in ("mcp.header-mismatch", "mcp.meta-required", "mcp.unsupported-version", "mcp.result-type", "mcp.progress",
                "ids.beyond-2-64", "messages.notification-silent", "errors.method-not-found", "framing.parse-error"):
        assert status[cid] == "pass", cid


def test_mcp_demo_handshake_era(mcp_demo: str, tmp_path: Path) -> None:
    proc, data = check_cli(mcp_demo, tmp_path, "--protocol", "2025-11-25", "--slow", "slow", "--leak-probe", "fail")
    status = _assert_clean(proc, data)
    assert data["protocol"] == "2025-11-25"
    for cid in ("http.session-id", "http.session-required", "http.session-unknown", "http.session-delete", "http.get-stream",
                "http.response-accepted", "http.protocol-version", "http.origin", "mcp.initialize", "mcp.cancel",
                "mcp.before-initialize", "mcp.duplicate-id"):
        assert status[cid] == "pass", cid
    assert status["http.header-missing"] == "skip"


def test_plain_demo(plain_demo: str, tmp_path: Path) -> None:
    proc, data = check_cli(plain_demo, tmp_path, "--no-mcp", "--echo-method", "echo", "--leak-probe", "fail")
    status = _assert_clean(proc, data)
    assert not data["mcp"]
    assert {k for k, v in status.items() if k.startswith("http.") and v == "pass"} == {
        "http.notification-accepted", "http.request-reply", "http.accept", "http.parse-error", "http.origin",
        "http.body-too-large", "http.no-leak",
    }
    for cid in ("batches.mixed", "batches.notifications-only", "batches.empty", "messages.echo-roundtrip", "ids.null"):
        assert status[cid] == "pass", cid
    assert data["command"] == [plain_demo]


def test_plain_demo_http_checks_not_run_over_stdio() -> None:
    report = run_checks(Config([PY, "-m", "sturdyrpc", "demo"], mcp=False), areas=["http"])
    assert report.outcomes and all(o.status is Status.SKIP and "--url" in o.detail for o in report.outcomes)


# -- broken servers: each flagged for exactly its bug ---------------------------------------------------

BROKEN = [
    # (factory, config options, areas, {check id: expected status})
    ("answers_notifications", {"mcp": False, "echo_method": "echo"}, ["http", "messages", "batches"], {
        "http.notification-accepted": "fail", "messages.notification-silent": "fail",
        "messages.notification-no-params": "fail", "messages.echo-notification": "fail",
        "batches.notifications-only": "fail", "messages.response-not-answered": "warn",
    }),
    ("no_origin_check", {}, ["http", "ids"], {"http.origin": "fail"}),
    ("unknown_session_400", {"protocol": "2025-11-25"}, ["http", "errors"], {"http.session-unknown": "fail", "http.session-delete": "fail"}),
    ("leaky_errors", {"mcp": False}, ["http", "ids"], {"http.no-leak": "fail"}),
]


@pytest.mark.parametrize(("factory", "opts", "areas", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_http_server_flagged_for_exactly_its_bug(factory: str, opts: dict[str, Any], areas: list[str], expected: dict[str, str]) -> None:
    app = getattr(zoo, factory)()
    path = "" if opts.get("mcp") is False else "/mcp"
    with zoo.serve(app, free_port()) as base:
        report = run_checks(Config([], url=base + (path or "/"), timeout=3.0, **opts), areas=areas)
    assert not_passed(report) == expected, describe(report)
    passed = {o.spec.id for o in report.outcomes if o.status is Status.PASS}
    assert len(passed & ran(report, "http")) >= 3, "the other HTTP checks must run and pass"
    (o,) = [o for o in report.outcomes if o.spec.id == next(iter(expected))]
    assert o.spec.rule and o.spec.hint and o.received


def test_cli_url_usage_errors() -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "sturdyrpc", "check", *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)

    bad = run("--url", "ftp://127.0.0.1/x")
    assert bad.returncode == 2 and "http://" in bad.stderr
    both = run("--url", "http://127.0.0.1:9/mcp", "--", PY, "-m", "sturdyrpc", "demo")
    assert both.returncode == 2 and "not both" in both.stderr


def test_nothing_listening_fails_fast_without_hanging() -> None:
    report = run_checks(Config([], url=f"http://127.0.0.1:{free_port()}/mcp", timeout=1.0, mcp=False), areas=["http", "ids"])
    assert report.failed >= 5
    assert report.duration < 60
