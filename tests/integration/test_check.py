"""``sturdyrpc check`` proven on a zoo of broken servers, a correct reference and our demo (servers
built on third-party libraries: tests/interop/test_check_thirdparty.py).

Each zoo server (tests/servers/check_zoo/) carries one classic bug; the checker must flag exactly the
checks for that bug and pass the rest of the areas it runs. To keep the module fast, each zoo
server runs only the areas where its bug lives (plus one unrelated area, to show that the rest
passes); the reference server runs everything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import ROOT, SERVERS
from support.check import describe, not_passed

from sturdyrpc.check import Config, Status, all_checks, run_checks

ZOO = SERVERS / "check_zoo"
PY = sys.executable
DEMO = [PY, "-m", "sturdyrpc", "demo"]

pytestmark = pytest.mark.timeout(240)


def zoo_config(script: str, **kw: object) -> Config:
    opts: dict[str, object] = {"echo_method": "echo", "slow": "sleep", "leak_probe": "fail", "mcp": False}
    opts.update(kw)
    return Config([PY, str(ZOO / script)], **opts)  # type: ignore[arg-type]


# (script, areas to run, {check id: expected status}) -- exactly these, everything else in the areas passes.
ZOO_CASES = [
    ("answers_notifications.py", ["messages", "batches"], {
        "messages.notification-silent": "fail", "messages.notification-no-params": "fail",
        "messages.echo-notification": "fail", "batches.notifications-only": "fail",
        "batches.mixed": "fail", "batches.echo": "fail",
    }),
    ("string_id_as_int.py", ["ids", "errors"], {"ids.numeric-string": "fail"}),
    ("big_id_float.py", ["ids", "messages"], {"ids.beyond-2-53": "fail", "ids.beyond-2-64": "fail"}),
    ("silent_on_batches.py", ["batches", "ids"], {
        "batches.empty": "fail", "batches.invalid-one": "fail", "batches.invalid-three": "fail",
        "batches.mixed": "fail", "batches.single": "warn", "batches.echo": "fail",
    }),
    ("dies_on_invalid_utf8.py", ["framing", "robustness"], {"framing.invalid-utf8": "fail", "robustness.many-invalid": "fail"}),
    ("leaks_traceback.py", ["errors", "ids"], {"errors.no-leak-parse": "fail", "errors.no-leak-probe": "fail"}),
    ("banner_on_stdout.py", ["framing", "ids"], {"framing.stdout-only-jsonrpc": "fail"}),
    ("eof_drops_inflight.py", ["lifecycle", "ids"], {"lifecycle.eof-inflight": "fail"}),
    ("unknown_method_32000.py", ["errors", "ids", "batches"], {"errors.method-not-found": "fail", "errors.method-not-found-params": "fail"}),
    ("empty_batch_array.py", ["batches", "messages"], {"batches.empty": "fail"}),
    ("id_null_as_notification.py", ["ids", "messages"], {"ids.null": "fail"}),
    ("falsy_id.py", ["ids", "errors"], {"ids.zero": "fail", "ids.empty-string": "fail"}),
    ("one_error_per_batch.py", ["batches", "errors"], {"batches.invalid-one": "fail", "batches.invalid-three": "fail", "batches.mixed": "fail"}),
    ("crashes_on_deep_nesting.py", ["robustness", "errors"], {"robustness.deep-nesting": "fail"}),
    ("accepts_nan.py", ["framing", "messages"], {"framing.nonfinite-literal": "fail"}),
    ("answers_responses.py", ["messages", "ids"], {"messages.response-not-answered": "warn"}),
    # A SHOULD-level check whose input crashes the server is a MUST failure.
    ("exits_on_response.py", ["messages", "ids"], {"messages.response-not-answered": "fail"}),
    ("one_at_a_time.py", ["concurrency", "ids"], {"concurrency.out-of-order": "warn", "concurrency.batch-parallel": "warn"}),
]


@pytest.mark.parametrize(("script", "areas", "expected"), ZOO_CASES, ids=[c[0].removesuffix(".py") for c in ZOO_CASES])
def test_zoo_server_flagged_for_exactly_its_bug(script: str, areas: list[str], expected: dict[str, str]) -> None:
    report = run_checks(zoo_config(script), areas=areas)
    assert not_passed(report) == expected, describe(report)
    ran = {o.spec.id for o in report.outcomes if o.status is not Status.SKIP}
    assert set(expected) <= ran
    assert len(ran) > len(expected), "the other checks of these areas must run (and pass)"


MCP_OPTS = {"slow": "sleep", "leak_probe": "fail", "call_tools": {"*"}}


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25", "2025-03-26"])
def test_mcp_reference_server_passes_everything(version: str) -> None:
    report = run_checks(Config([PY, str(ZOO / "mcp_reference.py")], protocol=version, **MCP_OPTS))  # type: ignore[arg-type]
    assert report.mcp and report.protocol == version
    assert not_passed(report) == {}, describe(report)
    ran = {o.spec.id for o in report.outcomes if o.status is Status.PASS}
    assert {"mcp.cancel", "mcp.progress", "mcp.batch", "mcp.id-null", "mcp.call-tools", "mcp.tool-fail-no-leak"} <= ran
    if version == "2026-07-28":
        assert {"mcp.discover", "mcp.meta-required", "mcp.unsupported-version", "mcp.result-type", "mcp.error-codes"} <= ran
    else:
        assert {"mcp.initialize", "mcp.version-negotiation", "mcp.before-initialize", "mcp.ping"} <= ran
    if version == "2025-03-26":
        assert "batches.mixed" in ran  # 2025-03-26 has JSON-RPC batches
    else:
        assert "batches.mixed" not in ran


def test_mcp_answering_a_cancelled_request_is_flagged() -> None:
    report = run_checks(Config([PY, str(ZOO / "mcp_answers_cancelled.py")], protocol="2025-11-25", **MCP_OPTS), areas=["mcp"])  # type: ignore[arg-type]
    assert not_passed(report) == {"mcp.cancel": "warn"}, describe(report)
    (o,) = [o for o in report.outcomes if o.spec.id == "mcp.cancel"]
    assert "Request cancelled" in o.detail


def test_mcp_result_without_result_type_is_flagged() -> None:
    report = run_checks(Config([PY, str(ZOO / "mcp_no_result_type.py")], **MCP_OPTS), areas=["mcp"])  # type: ignore[arg-type]
    assert report.protocol == "2026-07-28"
    assert not_passed(report) == {"mcp.result-type": "fail", "mcp.call-tools": "fail"}, describe(report)


def test_every_zoo_server_is_covered() -> None:
    scripts = {p.name for p in ZOO.glob("*.py")} - {"reference.py"}
    covered = {c[0] for c in ZOO_CASES} | {"mcp_reference.py", "mcp_answers_cancelled.py", "mcp_no_result_type.py"}
    assert scripts <= covered, scripts - covered


def test_reference_server_passes_everything() -> None:
    report = run_checks(zoo_config("reference.py", mcp=None))
    assert not_passed(report) == {}, describe(report)
    skipped = {o.spec.id for o in report.outcomes if o.status is Status.SKIP}
    assert all(s.startswith(("mcp.", "http.")) for s in skipped), skipped  # http.*: only with --url
    assert not report.mcp
    assert report.passed >= 50


def test_failure_details_are_complete() -> None:
    """A failing check names the rule, the hint, what was sent and what came back, and keeps stderr."""
    report = run_checks(zoo_config("dies_on_invalid_utf8.py"), only=["framing.invalid-utf8"])
    (o,) = report.outcomes
    assert o.status is Status.FAIL
    assert o.spec.rule and o.spec.hint and o.sent
    assert "\\xff" in o.sent[0]
    assert "UnicodeDecodeError" in o.stderr_tail
    assert "stopped answering" in o.detail and "exited with code" in o.detail


def test_check_ids_are_unique_and_described() -> None:
    checks = all_checks()
    ids = [c.spec.id for c in checks]
    assert len(ids) == len(set(ids))
    for c in checks:
        assert re.fullmatch(r"[a-z]+\.[a-z0-9-]+", c.spec.id), c.spec.id
        assert c.spec.id.split(".")[0] == c.spec.area
        assert c.spec.title and c.spec.rule and c.spec.hint


def test_docs_list_every_check() -> None:
    doc = (ROOT / "docs" / "CHECK.md").read_text()
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", doc, re.M))
    assert listed == {c.spec.id for c in all_checks()}


# -- the command line --------------------------------------------------------------------------


def sturdyrpc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([PY, "-m", "sturdyrpc", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_cli_demo_passes_with_reports(tmp_path: Path) -> None:
    jpath, xpath = tmp_path / "r.json", tmp_path / "r.xml"
    proc = sturdyrpc("check", "--json", str(jpath), "--junit", str(xpath), "--", *DEMO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = proc.stdout.rstrip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, 0 failed", last), last
    assert "\x1b[" not in proc.stdout  # no colour when stdout is not a terminal
    assert proc.stderr == ""  # no progress line when stderr is not a terminal

    data = json.loads(jpath.read_text())
    assert data["summary"]["failed"] == 0 and data["summary"]["passed"] >= 40
    assert data["command"] == DEMO
    for c in data["checks"]:
        assert {"id", "area", "level", "status", "rule", "hint", "sent", "received"} <= set(c)
    assert f"{data['summary']['passed']} passed, 0 failed" == last

    root = ET.parse(xpath).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("errors") == "0"
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(data["checks"])
    assert {s.get("name") for s in root.findall("testsuite")} >= {"sturdyrpc.check.framing", "sturdyrpc.check.ids"}


def test_cli_exit_codes_and_reports_of_failures(tmp_path: Path) -> None:
    xpath, jpath = tmp_path / "f.xml", tmp_path / "f.json"
    bad = sturdyrpc("check", "--no-mcp", "--area", "ids", "--junit", str(xpath), "--json", str(jpath), "--", PY, str(ZOO / "string_id_as_int.py"))
    assert bad.returncode == 1
    assert re.fullmatch(r"\d+ passed, 1 failed", bad.stdout.rstrip().splitlines()[-1])
    assert "ids.numeric-string" in bad.stdout and "fix:" in bad.stdout and "received:" in bad.stdout
    failures = ET.parse(xpath).getroot().findall(".//failure")
    assert [f.get("type") for f in failures] == ["MUST"]
    assert json.loads(jpath.read_text())["summary"]["failed"] == 1

    # A SHOULD-level warning: exit 0, unless --strict.
    args = ["check", "--no-mcp", "--only", "messages.response-not-answered", "--", PY, str(ZOO / "answers_responses.py")]
    warn = sturdyrpc(*args)
    assert warn.returncode == 0, warn.stdout
    assert warn.stdout.rstrip().splitlines()[-1] == "0 passed, 0 failed, 1 warnings"
    assert sturdyrpc(*args[:1], "--strict", *args[1:]).returncode == 1


def test_cli_server_exiting_after_a_should_checks_input_fails_the_run_naming_the_crash() -> None:
    """The response check is SHOULD-level; a server that dies on its input must not pass with exit 0."""
    args = ["check", "--no-mcp", "--only", "messages.response-not-answered", "--", PY, str(ZOO / "exits_on_response.py")]
    out = sturdyrpc(*args)
    assert out.returncode == 1, out.stdout
    assert out.stdout.rstrip().splitlines()[-1] == "0 passed, 1 failed"
    assert "messages.response-not-answered" in out.stdout and "exited with code 3" in out.stdout


def test_crash_noticed_only_after_the_check_finished_is_still_blamed_on_its_input(tmp_path: Path) -> None:
    """A server that still answers the follow-up request and exits right after: the check that sent
    the input fails (MUST), although its own exchange completed, and the process is not silently
    replaced."""
    script = tmp_path / "exits_late.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(ZOO)!r})\n"
        "from reference import Server\n"
        "class Late(Server):\n"
        "    doomed = False\n"
        "    def handle(self, msg):\n"
        "        if self.is_response(msg):\n"
        "            self.doomed = True\n"
        "        return super().handle(msg)\n"
        "    def write(self, obj):\n"
        "        super().write(obj)\n"
        "        if self.doomed:\n"
        "            os._exit(4)\n"
        "Late().serve()\n"
    )
    report = run_checks(Config([PY, str(script)], mcp=False),
                        only=["messages.response-not-answered", "messages.notification-silent"])
    (o,) = [o for o in report.outcomes if o.spec.id == "messages.response-not-answered"]
    assert o.status is Status.FAIL and o.level is not None and o.level.value == "MUST", describe(report)
    assert "crashed" in o.detail and "code 4" in o.detail
    assert report.exit_code() == 1


def test_cli_progress_and_colour_only_on_a_terminal() -> None:
    """With stdout and stderr on terminals: a live progress line on stderr, colour in the table."""
    import pty
    import select

    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    cmd = [PY, "-m", "sturdyrpc", "check", "--no-mcp", "--area", "ids", "--", PY, str(ZOO / "reference.py")]
    proc = subprocess.Popen(cmd, stdout=out_slave, stderr=err_slave, stdin=subprocess.DEVNULL, cwd=ROOT)
    os.close(out_slave)
    os.close(err_slave)
    got = {out_master: b"", err_master: b""}
    open_fds = set(got)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 60)
        assert ready, "no output within 60 s"
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed its end of the terminal
                chunk = b""
            if chunk:
                got[fd] += chunk
            else:
                open_fds.discard(fd)
    assert proc.wait(30) == 0
    assert b"sturdyrpc check: [" in got[err_master] and b"ids." in got[err_master]
    assert b"\x1b[" in got[out_master]
    assert got[out_master].replace(b"\r\n", b"\n").rstrip().endswith(b"passed, 0 failed")


def test_cli_usage_errors() -> None:
    no_cmd = sturdyrpc("check")
    assert no_cmd.returncode == 2 and "--" in no_cmd.stderr
    url = sturdyrpc("check", "--url", "ftp://127.0.0.1:9/mcp")  # --url itself: tests/integration/test_check_http.py
    assert url.returncode == 2 and "http://" in url.stderr
    typo = sturdyrpc("check", "--area", "idz", "--", *DEMO)
    assert typo.returncode == 2 and "idz" in typo.stderr
    missing = sturdyrpc("check", "--", "/nonexistent/server-binary")
    assert missing.returncode == 2 and "cannot start" in missing.stderr


def test_a_server_that_never_answers_cannot_hang_the_checker() -> None:
    """`cat > /dev/null` reads everything and answers nothing: every check must end on its timeout."""
    report = run_checks(Config(["sh", "-c", "cat > /dev/null"], timeout=0.5, mcp=False, startup_timeout=2.0), areas=["ids"])
    assert report.failed == len(report.outcomes) - report.count(Status.SKIP) >= 8
    assert report.duration < 30
