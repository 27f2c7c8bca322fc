"""``sturdyrpc mcp tools|call`` and ``sturdyrpc demo --mcp`` from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import SERVERS

from sturdyrpc.commands.mcp import render_result, schema_summary

pytestmark = pytest.mark.timeout(60)

CLI = [sys.executable, "-m", "sturdyrpc"]
DEMO = [*CLI, "demo", "--mcp"]
SDK_SERVER = [sys.executable, str(SERVERS / "mcp_py_sdk_server.py")]


def mcp(*args: str, server: list[str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "mcp", *args, "--", *(server or DEMO)], capture_output=True, text=True, timeout=timeout)


def test_tools_lists_names_descriptions_and_schemas() -> None:
    r = mcp("tools")
    assert r.returncode == 0, r.stderr
    assert "add(a: integer, b: integer)" in r.stdout
    assert "slow(seconds: number, steps?: integer)" in r.stdout
    assert "Add two integers." in r.stdout


def test_call_prints_text_and_exit_codes() -> None:
    r = mcp("call", "add", '{"a": 2, "b": 3}')
    assert (r.returncode, r.stdout) == (0, "5\n")
    r = mcp("call", "echo", '{"text": "hi there"}', "--protocol", "2025-03-26")
    assert (r.returncode, r.stdout) == (0, "hi there\n")
    r = mcp("call", "fail")
    assert r.returncode == 1
    assert "SECRET" not in r.stdout + r.stderr.split("Traceback")[0]
    r = mcp("call", "nope")
    assert r.returncode == 1 and "-32602" in r.stderr
    r = mcp("call", "add", '{"a": "x", "b": 1}')
    assert r.returncode == 1  # isError (2025-11-25+: bad arguments are a tool error)


def test_call_progress_on_stderr() -> None:
    r = mcp("call", "slow", '{"seconds": 0.2, "steps": 2}')
    assert r.returncode == 0
    assert r.stdout == "slept 0.2 seconds\n"
    assert "progress: 1/2" in r.stderr and "progress: 2/2" in r.stderr


def test_call_timeout_is_124_and_quick() -> None:
    t0 = time.monotonic()
    r = mcp("call", "slow", '{"seconds": 30}', "--timeout", "0.5")
    assert r.returncode == 124
    assert time.monotonic() - t0 < 10


def test_usage_errors() -> None:
    assert mcp("call", "x", "[1]").returncode == 2
    assert mcp("call", "x", "{bad").returncode == 2
    assert mcp("call", "x", "--protocol", "1999-01-01").returncode == 2
    assert subprocess.run([*CLI, "mcp", "tools"], capture_output=True, timeout=20).returncode == 2
    assert mcp("tools", server=["/nonexistent/server"]).returncode == 127


def test_against_the_python_sdk_server() -> None:
    r = mcp("call", "add", '{"a": 1, "b": 1}', server=SDK_SERVER)
    assert (r.returncode, r.stdout) == (0, "2\n"), r.stderr
    r = mcp("tools", "--protocol", "2025-06-18", server=SDK_SERVER)
    assert r.returncode == 0 and "echo(text: string)" in r.stdout


def test_render_helpers() -> None:
    assert schema_summary({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}}, "required": ["a"]}) == "a: integer, b?: string|null"
    res = {"content": [{"type": "text", "text": "{\"x\": 1}"}], "structuredContent": {"x": 1}}
    assert render_result(res) == '{"x": 1}'
    res2 = {"content": [{"type": "text", "text": "summary"}], "structuredContent": {"x": 1}}
    assert render_result(res2).splitlines() == ["summary", json.dumps({"x": 1})]


def test_demo_mcp_starts_fast_and_exits_on_eof() -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    t0 = time.monotonic()
    p = subprocess.run(DEMO, input=json.dumps(init) + "\n", capture_output=True, text=True, timeout=20)
    assert p.returncode == 0
    reply = json.loads(p.stdout.splitlines()[0])
    assert reply["result"]["protocolVersion"] == "2025-11-25"
    assert time.monotonic() - t0 < 5


def _cli_without(modules: list[str], args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI as if ``modules`` were not installed (None in sys.modules: import fails and
    importlib.util.find_spec finds nothing, exactly as for a missing package)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (["demo", "--http", "127.0.0.1:0"], "uvicorn", "http"),
        (["demo", "--mcp", "--http", "127.0.0.1:0"], "uvicorn", "http"),
        (["check", "--url", "http://127.0.0.1:9/mcp"], "httpx", "http"),
        (["check", "--", sys.executable, "-c", "pass"], "rich", "cli"),
        # The store is opened before any worker starts: the same message, not a traceback.
        (["demo", "--mcp", "--http", "127.0.0.1:0", "--workers", "2", "--store", "redis://127.0.0.1:1/0"], "redis", "redis"),
        (["demo", "--mcp", "--http", "127.0.0.1:0", "--store", "redis://127.0.0.1:1/0"], "redis", "redis"),
        (["run", str(SERVERS / "mcp_session_values_server.py") + ":server", "--http", "127.0.0.1:0",
          "--workers", "2", "--store", "redis://127.0.0.1:1/0"], "redis", "redis"),
    ],
)
def test_command_without_its_optional_extra_names_the_extra_and_exits_2(args: list[str], module: str, extra: str, tmp_path: Path) -> None:
    r = _cli_without([module], args, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert f"pip install 'sturdyrpc[{extra}]'" in r.stderr and repr(module) in r.stderr
