"""The ``sturdyrpc_check`` fixture as someone else's test suite uses it: a pytest run in a
subprocess (pytester), the plugin loaded through its ``pytest11`` entry point, checking a good
server, broken ones from ``servers/check_zoo/`` and a running HTTP server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import SERVERS
from support.http import free_port, server_process

ZOO = SERVERS / "check_zoo"


def _suite(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(test_server=f"import sys\n\nPY = {sys.executable!r}\nZOO = {str(ZOO)!r}\n\n{body}")
    # -p no:cacheprovider: nothing written beside the suite; the plugin comes from the entry point.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=180)


@pytest.mark.parametrize(
    ("server", "kwargs", "failing_check", "found"),
    [
        ("accepts_nan.py", "", "framing.nonfinite-literal", "NaN was accepted as JSON"),
        ("leaks_traceback.py", ', leak_probe="fail", areas=["errors"]', "errors.no-leak-probe", "a Python traceback"),
    ],
)
def test_a_broken_server_fails_the_test_with_the_report(pytester: pytest.Pytester, server: str, kwargs: str, failing_check: str, found: str) -> None:
    result = _suite(pytester, f"def test_it(sturdyrpc_check):\n    sturdyrpc_check([PY, ZOO + '/{server}']{kwargs})\n")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"FAIL {failing_check} (MUST)" in out, out
    assert found in out and "  fix:   " in out and "  received: " in out
    assert "pytest_plugin.py" not in out  # pytrace=False: the report, not the plugin's traceback


def test_a_good_server_passes_and_the_report_is_returned(pytester: pytest.Pytester, tmp_path: Path) -> None:
    junit = tmp_path / "check.xml"
    result = _suite(pytester, f"""
def test_plain(sturdyrpc_check):
    report = sturdyrpc_check([PY, ZOO + "/reference.py"], junit={str(junit)!r})
    assert report.failed == 0 and report.passed > 20 and not report.mcp

def test_mcp(sturdyrpc_check):
    report = sturdyrpc_check([PY, "-m", "sturdyrpc", "demo", "--mcp"], call_tools=["echo"], only=["mcp.*"])
    assert report.mcp and report.failed == 0
    assert {{o.spec.area for o in report.outcomes}} == {{"mcp"}}
""")
    result.assert_outcomes(passed=2)
    assert junit.read_text().startswith("<?xml") and 'name="sturdyrpc.check.framing"' in junit.read_text()


def test_strict_fails_on_a_warning_that_otherwise_passes(pytester: pytest.Pytester) -> None:
    result = _suite(pytester, """
def test_lenient(sturdyrpc_check):
    report = sturdyrpc_check([PY, ZOO + "/answers_responses.py"], areas=["messages"])
    assert report.warnings == 1 and report.failed == 0

def test_strict(sturdyrpc_check):
    sturdyrpc_check([PY, ZOO + "/answers_responses.py"], areas=["messages"], strict=True)
""")
    result.assert_outcomes(passed=1, failed=1)
    assert "WARN messages.response-not-answered (SHOULD)" in result.stdout.str()


def test_a_url_is_checked_over_http(pytester: pytest.Pytester) -> None:
    port = free_port()
    with server_process([sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}"], port):
        result = _suite(pytester, f"""
def test_http(sturdyrpc_check):
    report = sturdyrpc_check(url="http://127.0.0.1:{port}/mcp", areas=["http"])
    assert report.failed == 0 and report.passed >= 10

def test_needs_one_target(sturdyrpc_check):
    import pytest
    with pytest.raises(TypeError):
        sturdyrpc_check()
""")
    result.assert_outcomes(passed=2)
