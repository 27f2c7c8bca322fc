"""``sturdyrpc inspect`` over HTTP (no browser): every request needs the token, a page of any other
origin is refused, and the JSON API calls the server, shows the violations on the offending
messages, and exports a log ``sturdyrpc replay`` replays with the same behaviour."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.http import demo_http_cmd, free_port, server_process
from support.inspector import PY, Inspector, start_inspector

pytestmark = pytest.mark.timeout(120)

DEMO = [PY, "-m", "sturdyrpc", "demo", "--mcp"]
ZOO = SERVERS / "check_zoo"


def wait_state(ins: Inspector, ready: Any = lambda s: s["status"] != "connecting", timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state: dict[str, Any] = httpx.get(f"{ins.base}/api/state", headers={"X-Inspect-Token": ins.token}).json()
        if ready(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


@pytest.fixture(scope="module")
def demo() -> Iterator[Inspector]:
    with start_inspector("--", *DEMO) as ins:
        wait_state(ins, lambda s: bool(s["catalog"]["tools"]))
        yield ins


def own_origin(ins: Inspector) -> str:
    return ins.base


#: (what is sent besides the path, the status expected): the token, the Origin and the Host.
REQUESTS = [
    pytest.param({}, 403, id="no-token"),
    pytest.param({"token": "wrong"}, 403, id="wrong-token-query"),
    pytest.param({"headers": {"X-Inspect-Token": "wrong"}}, 403, id="wrong-token-header"),
    pytest.param({"token": ""}, 200, id="token-query"),
    pytest.param({"headers": {"X-Inspect-Token": ""}}, 200, id="token-header"),
    pytest.param({"token": "", "headers": {"Origin": ""}}, 200, id="own-origin"),
    pytest.param({"token": "", "headers": {"Origin": "http://evil.example"}}, 403, id="other-origin"),
    pytest.param({"token": "", "headers": {"Origin": "http://localhost:PORT"}}, 403, id="localhost-by-name"),
    pytest.param({"token": "", "headers": {"Origin": "http://127.0.0.1:1"}}, 403, id="another-local-port"),
    pytest.param({"token": "", "headers": {"Origin": "null"}}, 403, id="opaque-origin"),
    pytest.param({"token": "", "headers": {"Host": "evil.example"}}, 403, id="rebinding-host"),
]


@pytest.mark.parametrize(("how", "status"), REQUESTS)
@pytest.mark.parametrize("path", ["/", "/static/app.js", "/api/state", "/api/export"])
def test_every_request_needs_the_token_and_its_own_origin(demo: Inspector, path: str, how: dict[str, Any], status: int) -> None:
    port = demo.base.rsplit(":", 1)[1]
    headers = {k: (v or (demo.token if k == "X-Inspect-Token" else own_origin(demo))).replace("PORT", port)
               for k, v in how.get("headers", {}).items()}
    params = {"token": how["token"] or demo.token} if "token" in how else {}
    r = httpx.get(demo.base + path, params=params, headers=headers)
    assert r.status_code == status, r.text
    if status == 403:
        assert demo.token not in r.text and r.json()["error"]["code"] == -32600


def test_a_refused_post_calls_nothing(demo: Inspector) -> None:
    body = {"kind": "tool", "name": "echo", "arguments": {"text": "from-evil-page"}}
    for headers in ({"Origin": "http://evil.example", "X-Inspect-Token": demo.token}, {"Origin": demo.base}):
        assert httpx.post(f"{demo.base}/api/call", json=body, headers=headers).status_code == 403
    log = httpx.get(f"{demo.base}/api/export", params={"token": demo.token}).text
    assert "from-evil-page" not in log


def test_the_page_has_no_outside_resources(demo: Inspector) -> None:
    page = httpx.get(demo.base + "/", params={"token": demo.token})
    assert page.status_code == 200 and demo.token in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace(demo.token, "")  # no CDN, no absolute URL


def test_a_call_its_reply_and_the_export_replayed(demo: Inspector, tmp_path: Any) -> None:
    h = {"X-Inspect-Token": demo.token, "Origin": demo.base}
    r = httpx.post(f"{demo.base}/api/call", headers=h, json={"kind": "tool", "name": "add", "arguments": {"a": 20, "b": 22}}, timeout=30)
    assert r.json()["result"]["structuredContent"] == {"result": 42}
    bad = httpx.post(f"{demo.base}/api/call", headers=h, json={"kind": "tool", "name": "no-such-tool", "arguments": {}}, timeout=30)
    assert "error" in bad.json() or bad.json()["result"].get("isError")
    timeline = httpx.get(f"{demo.base}/api/timeline", headers=h).json()
    calls = [e for e in timeline["entries"] if e.get("label") == "tools/call add"]
    assert [e["kind"] for e in calls] == ["request", "response"] and calls[0]["pair"] == calls[1]["seq"]
    log = tmp_path / "session.ndjson"
    log.write_bytes(httpx.get(f"{demo.base}/api/export", params={"token": demo.token}).content)
    done = subprocess.run([PY, "-m", "sturdyrpc", "replay", str(log), "--", *DEMO], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same behaviour" in done.stderr


def test_a_broken_server_shows_the_rule_on_the_offending_message() -> None:
    with start_inspector("--", PY, str(ZOO / "banner_on_stdout.py")) as ins:
        state = wait_state(ins)
        assert state["status"] == "failed" and "Method not found" in state["error"]  # not MCP: negotiation fails, visibly
        entries = httpx.get(f"{ins.base}/api/timeline", headers={"X-Inspect-Token": ins.token}).json()["entries"]
    flagged = [(e["kind"], e["raw"], [v["rule"] for v in e["violations"]]) for e in entries if e["violations"]]
    assert flagged == [("junk", "zoo server 1.0 ready, listening on stdio", ["framing.stdout-only-jsonrpc"])]


def test_a_streamable_http_server_by_url() -> None:
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port), start_inspector("--url", f"http://127.0.0.1:{port}/mcp") as ins:
        state = wait_state(ins, lambda s: bool(s["catalog"]["tools"]))
        assert state["status"] == "connected" and state["server_info"]["name"] == "sturdyrpc-demo"
        h = {"X-Inspect-Token": ins.token}
        r = httpx.post(f"{ins.base}/api/call", headers=h, json={"kind": "tool", "name": "echo", "arguments": {"text": "over http"}}, timeout=30)
        assert r.json()["result"]["content"] == [{"type": "text", "text": "over http"}]
        entries = httpx.get(f"{ins.base}/api/timeline", headers=h).json()["entries"]
    call = [e for e in entries if e.get("label") == "tools/call echo"]
    assert [(e["dir"], e["kind"]) for e in call] == [("c2s", "request"), ("s2c", "response")]
    assert not [v for e in entries for v in e["violations"]]


#: (method, path, JSON body or raw bytes, the status expected) of requests the API refuses or cannot honour.
BAD_REQUESTS = [
    pytest.param("POST", "/api/call", b"not json", 400, id="body-not-json"),
    pytest.param("POST", "/api/call", [1, 2], 400, id="body-not-an-object"),
    pytest.param("POST", "/api/call", {"kind": "tool", "name": 7}, 400, id="name-not-a-string"),
    pytest.param("POST", "/api/call", {"kind": "tool", "name": "echo", "arguments": [1]}, 400, id="arguments-not-an-object"),
    pytest.param("POST", "/api/elicitation", {"n": 12345, "response": {"action": "accept"}}, 409, id="no-such-elicitation"),
    pytest.param("POST", "/api/nothing", {}, 404, id="unknown-post"),
    pytest.param("GET", "/api/nothing", None, 404, id="unknown-get"),
    pytest.param("GET", "/static/../app.py", None, 404, id="outside-static"),
    pytest.param("PUT", "/api/state", None, 405, id="method"),
    pytest.param("GET", "/api/timeline?since=x", None, 400, id="since-not-a-number"),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), BAD_REQUESTS)
def test_bad_requests_are_refused_plainly(demo: Inspector, method: str, path: str, body: Any, status: int) -> None:
    h = {"X-Inspect-Token": demo.token}
    content = body if isinstance(body, bytes) else None
    r = httpx.request(method, demo.base + path, headers=h, content=content, json=None if content is not None or body is None else body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"


def test_usage_errors() -> None:
    for args in ([], ["--url", "ftp://x"], ["--url", "http://127.0.0.1:1/mcp", "--", "x"], ["--protocol", "1999-01-01", "--", "x"],
                 ["--deadline", "0", "--", "x"]):
        done = subprocess.run([PY, "-m", "sturdyrpc", "inspect", *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and "sturdyrpc inspect:" in done.stderr, (args, done.stderr)
