"""``check`` through ``guard``: every broken server of the check zoo passes behind it (no MUST
failure), and what guard contained is reported by the rules' names.

The one exception is stated, not hidden: a plain JSON-RPC server that answers an unknown method
with another code (``unknown_method_32000.py``) cannot be repaired, because guard cannot know
which methods a plain JSON-RPC server has."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import SERVERS
from support.check import describe

from sturdyrpc.check import Config, Status, run_checks

ZOO = SERVERS / "check_zoo"
PY = sys.executable
GUARD = [PY, "-m", "sturdyrpc", "guard", "--"]
#: Bugs no proxy can repair (see the module docstring).
UNREPAIRABLE = {"unknown_method_32000.py": {"errors.method-not-found", "errors.method-not-found-params"}}
SERVERS_UNDER_TEST = sorted(p.name for p in ZOO.glob("*.py"))

pytestmark = pytest.mark.timeout(240)


def must_failures(report: object) -> set[str]:
    return {o.spec.id for o in report.outcomes if o.status is Status.FAIL}  # type: ignore[attr-defined]  # FAIL: a MUST broken


def _behind_guard(script: str) -> tuple[str, set[str], str]:
    mcp = script.startswith("mcp_")
    opts: dict[str, object] = (
        {"slow": "sleep", "leak_probe": "fail", "call_tools": {"*"}} if mcp else {"echo_method": "echo", "slow": "sleep", "leak_probe": "fail", "mcp": False}
    )
    report = run_checks(Config([*GUARD, PY, str(ZOO / script)], **opts))  # type: ignore[arg-type]
    return script, must_failures(report), describe(report)


def test_every_zoo_server_passes_check_behind_guard() -> None:
    # Four checks at once: each spends its time waiting on its server's pipes (the whole check of
    # every server, one by one, took two minutes).
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_behind_guard, SERVERS_UNDER_TEST))
    wrong = {script: (failed, report) for script, failed, report in results if failed != UNREPAIRABLE.get(script, set())}
    assert not wrong, "\n\n".join(f"{script}: {failed}\n{report}" for script, (failed, report) in wrong.items())
    assert len(results) == len(SERVERS_UNDER_TEST) >= 20


def test_the_same_servers_fail_without_guard() -> None:
    # The table above proves something only if the servers are broken: most are, alone.
    broken = 0
    for script in ("silent_on_batches.py", "big_id_float.py", "leaks_traceback.py", "dies_on_invalid_utf8.py"):
        report = run_checks(Config([PY, str(ZOO / script)], echo_method="echo", slow="sleep", leak_probe="fail", mcp=False),
                            areas=["batches", "ids", "errors", "framing"])
        broken += bool(must_failures(report))
    assert broken == 4


def test_guard_reports_what_it_contained(tmp_path: Path) -> None:
    report = tmp_path / "guard.json"
    frames = b"\n".join([
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}',
        b"not json",
        b"[]",
        b'{"jsonrpc":"2.0","id":2,"method":"fail"}',
    ]) + b"\n"
    out = subprocess.run([PY, "-m", "sturdyrpc", "guard", "--report", str(report), "--", PY, str(ZOO / "leaks_traceback.py")],
                         input=frames, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    replies = {json.dumps(r.get("id")): r for r in map(json.loads, out.stdout.splitlines())}
    assert replies["1"]["result"] == {"a": 1}
    assert "Traceback" not in out.stdout.decode() and "incident" in replies["2"]["error"]["data"]
    contained = json.loads(report.read_text())["contained"]
    assert contained["framing.parse-error"] == 1 and contained["messages.invalid-jsonrpc"] == 1
    assert contained["errors.no-leak-probe"] == 1
    assert "guard contained (by rule, as check names them)" in out.stderr.decode()


def test_guard_logs_the_traffic_as_trace_does_and_what_it_contained(tmp_path: Path) -> None:
    # guard --log: what each side wrote, as guard read it (trace --log's records: replay reads
    # them), then one record of what guard contained, the counts of the report.
    from sturdyrpc.proxy.replay import load_session

    log, report = tmp_path / "guard.ndjson", tmp_path / "guard.json"
    frames = b"\n".join([
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1,"token":"s3cr3t"}}',
        b"not json",
        b'{"jsonrpc":"2.0","id":2,"method":"fail"}',
    ]) + b"\n"
    out = subprocess.run([PY, "-m", "sturdyrpc", "guard", "--log", str(log), "--report", str(report), "--", PY, str(ZOO / "banner_on_stdout.py")],
                         input=frames, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    lines = log.read_bytes().splitlines()
    records = [json.loads(line) for line in lines]
    assert records[0]["sturdyrpc"] == "trace" and records[0]["redacted"] is True and records[0]["command"][-1].endswith("banner_on_stdout.py")
    assert {"dir": "c2s", "raw": "not json"}.items() <= records[2].items()
    assert any(r.get("dir") == "s2c" and "zoo server 1.0 ready" in r.get("raw", "") for r in records)  # the server's own output, unrepaired
    assert b"s3cr3t" not in log.read_bytes()
    session = load_session(lines)
    assert [(r.dir, r.msg.get("id")) for r in session if r.dir == "c2s"] == [("c2s", 1), ("c2s", 2)]
    assert {r.msg.get("id") for r in session if r.dir == "s2c"} == {1, 2}  # guard's ids, as the server saw them
    last = records[-1]
    assert last["event"] == "contained" and last["exit_code"] == 0
    assert last["contained"] == json.loads(report.read_text())["contained"] and last["contained"]["framing.parse-error"] == 1


def test_guard_log_over_http_that_cannot_be_written(tmp_path: Path) -> None:
    # --log with --url (tests/integration/test_guard_http_log.py): a log it cannot write is a usage error, before it listens.
    out = subprocess.run([PY, "-m", "sturdyrpc", "guard", "--log", str(tmp_path / "no" / "x.ndjson"), "--url", "http://127.0.0.1:1/mcp",
                          "--http", "127.0.0.1:0"], capture_output=True, timeout=30)
    assert out.returncode == 2 and b"cannot write the log" in out.stderr, out.stderr
