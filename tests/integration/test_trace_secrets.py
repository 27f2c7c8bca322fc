"""``trace --log`` keeps secrets to its user: the log is created 0600 (an existing one made
private), and the values of secret-looking keys are redacted in the log, the live view, the
summary and the server's recorded command line (``--no-redact`` keeps them); ``replay`` takes
the redacted log. Real ``sturdyrpc trace``/``replay`` subprocesses over real pipes, in front of
``proxy_secrets_server.py``; the pure rules of ``sturdyrpc.proxy.redact`` below."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS

from sturdyrpc.proxy.redact import REDACTED, maybe_secret, redact, redact_argv, redact_text, secret_key

pytestmark = pytest.mark.timeout(90)

SRPC = [sys.executable, "-m", "sturdyrpc"]
#: The server with secrets on its command line, as an MCP config would give them.
SERVER = [sys.executable, str(SERVERS / "proxy_secrets_server.py"), "--token", "argv-secret-1", "--password=argv-secret-2",
          "API_KEY=argv-secret-3", "https://user:argv-secret-4@db.example/x"]
SECRETS = ("hunter2", "k-123", "Bearer abc", "note-secret", "argv-secret", "sk-live-from-stdout", "client-secret-9", "junk-secret")


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def traffic() -> bytes:
    return b"".join([
        line({"jsonrpc": "2.0", "id": 1, "method": "login",
              "params": {"user": "ann", "password": "hunter2", "nested": {"api_key": "k-123", "list": [{"Authorization": "Bearer abc"}]},
                         "maxTokens": 7, "_meta": {"progressToken": "p-1"}}}),
        line({"jsonrpc": "2.0", "method": "notify", "params": {"sessionToken": "note-secret"}}),
        line({"jsonrpc": "2.0", "id": 2, "method": "plain", "params": {"x": 1}}),
        line({"jsonrpc": "2.0", "id": 3, "method": "plain", "params": {"Client-Secret": "client-secret-9"}}),
        b"not json: password=junk-secret\n",
    ])


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the usual umask: a plain open() makes the file world-readable
    try:
        yield
    finally:
        os.umask(old)


def trace(log: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SRPC, "trace", *extra, "--log", str(log), "--", *SERVER], input=traffic(), capture_output=True,
                          timeout=60, check=True)


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_bytes().splitlines()]


def test_the_log_is_created_0600_and_an_existing_one_is_made_private(tmp_path: Path, umask_022: None) -> None:
    log = tmp_path / "new.ndjson"
    trace(log, "--quiet")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    for mode in (0o644, 0o666, 0o640):
        old = tmp_path / f"old-{mode:o}.ndjson"
        old.write_bytes(b"stale\n" * 1000)
        old.chmod(mode)
        trace(old, "--quiet")
        assert stat.S_IMODE(old.stat().st_mode) == 0o600
        assert b"stale" not in old.read_bytes() and records(old)[0]["sturdyrpc"] == "trace"
    # a device is written as it is: the log can go to a terminal or a pipe
    r = subprocess.run([*SRPC, "trace", "--quiet", "--log", "/dev/stderr", "--", *SERVER], input=traffic(), capture_output=True,
                       timeout=60)
    assert r.returncode == 0 and b'"sturdyrpc":"trace"' in r.stderr


@pytest.mark.parametrize("quiet", [False, True], ids=["live-view", "quiet"])
def test_secrets_are_redacted_in_the_log_the_view_and_the_argv(tmp_path: Path, quiet: bool) -> None:
    # --quiet judges plain frames in runs (the log's fast path); the live view one by one.
    log = tmp_path / "session.ndjson"
    r = trace(log, *(["--quiet"] if quiet else []))
    text = log.read_text()
    for secret in SECRETS:
        assert secret not in text, secret
        assert secret.encode() not in r.stderr, secret
    assert b"sk-live-from-stdout" in r.stdout and b"hunter2" in r.stdout  # the traffic itself passes unchanged
    head, *rest = records(log)
    assert head["redacted"] is True
    assert head["command"] == [*SERVER[:2], "--token", REDACTED, "--password=" + REDACTED, "API_KEY=" + REDACTED,
                               f"https://user:{REDACTED}@db.example/x"]
    msgs = [x["msg"] for x in rest if "msg" in x]
    login = msgs[0]["params"]
    assert login == {"user": "ann", "password": REDACTED, "nested": {"api_key": REDACTED, "list": [{"Authorization": REDACTED}]},
                     "maxTokens": 7, "_meta": {"progressToken": "p-1"}}
    assert msgs[1]["params"] == {"sessionToken": REDACTED}
    assert {"jsonrpc": "2.0", "id": 2, "method": "plain", "params": {"x": 1}} in msgs
    replies = [m for m in msgs if "result" in m]
    assert all(m["result"]["access_token"] == REDACTED and m["result"]["usage"] == {"total_tokens": 12} for m in replies)
    raws = [x["raw"] for x in rest if "raw" in x]
    assert "not json: password=" + REDACTED in raws and "debug: api_key=" + REDACTED + " connecting" in raws
    assert REDACTED.encode() in r.stderr  # the junk lines and their violations, shown with the value hidden


def test_no_redact_keeps_every_value(tmp_path: Path) -> None:
    log = tmp_path / "session.ndjson"
    r = trace(log, "--no-redact")
    text = log.read_text()
    for secret in SECRETS:
        assert secret in text, secret
    assert records(log)[0]["redacted"] is False and records(log)[0]["command"] == SERVER
    assert b"sk-live-from-stdout" in r.stderr and REDACTED not in text


def test_replay_accepts_a_redacted_log(tmp_path: Path) -> None:
    # The server answers a fresh access_token every time: recorded as [REDACTED], the replayed
    # answer is compared after the same redaction, so it is the same behaviour.
    log = tmp_path / "session.ndjson"
    trace(log, "--quiet")
    r = subprocess.run([*SRPC, "replay", str(log), "--", *SERVER], capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert b"3 replies compared, same behaviour" in r.stderr
    unredacted = tmp_path / "plain.ndjson"
    trace(unredacted, "--quiet", "--no-redact")
    r = subprocess.run([*SRPC, "replay", str(unredacted), "--", *SERVER], capture_output=True, timeout=60)
    assert r.returncode == 1 and b"access_token" in r.stdout  # a real value recorded: a new one differs


# ------------------------------------------------------------------ the rules


def test_which_keys_look_like_secrets() -> None:
    for name in ("token", "access_token", "refreshToken", "X-Auth-Token", "secret", "client_secret", "Password", "passwd",
                 "DB_PASSWORD", "authorization", "Proxy-Authorization", "api_key", "apiKey", "API-KEY", "api key", "x-api-key",
                 "private_key", "privateKey", "Authorisation"):
        assert secret_key(name), name
    for name in ("progressToken", "ProgressToken", "name", "key", "keys", "api", "author", "pass", "description", "cookie"):
        assert not secret_key(name), name


def test_redaction_of_messages() -> None:
    msg = {"a": [{"token": "t", "n": {"secret": {"deep": 1}}}], "maxTokens": 10, "password": "", "apiKey": None,
           "flag_token": True, "total_tokens": 5, "tokens": ["x", "y"], "_meta": {"progressToken": "p"}}
    assert redact(msg) == {"a": [{"token": REDACTED, "n": {"secret": REDACTED}}], "maxTokens": 10, "password": "",
                           "apiKey": None, "flag_token": True, "total_tokens": 5, "tokens": REDACTED,
                           "_meta": {"progressToken": "p"}}
    plain = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "a token of thanks"}]}}
    assert redact(plain) is plain  # nothing to hide: the very same object (the frame is logged as read)
    assert maybe_secret(b"{\"Pass_Word\": 1}") and maybe_secret(b"{\"X-API-KEY\": 1}")
    assert not maybe_secret(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":["hi"]}')


def test_redaction_of_argv_and_text() -> None:
    assert redact_argv(["srv", "--token", "a", "-api-key=b", "--verbose", "x", "TOKEN=c", "Authorization: Bearer d", "--",
                        "cfg={\"password\": \"e\"}"]) == [
        "srv", "--token", REDACTED, "-api-key=" + REDACTED, "--verbose", "x", "TOKEN=" + REDACTED, "Authorization: " + REDACTED,
        "--", 'cfg={"password": "' + REDACTED + '"}']
    assert redact_text("GET /x?access_token=abc&y=1") == f"GET /x?access_token={REDACTED}&y=1"
    assert redact_text("Authorization: Bearer eyJ.x.y, next") == f"Authorization: {REDACTED}, next"
    assert redact_text('{"api_key":"k","maxTokens":100,"progressToken":"p"}') == '{"api_key":"' + REDACTED + '","maxTokens":100,"progressToken":"p"}'
    assert redact_text("connect postgres://app:pw@db/x") == f"connect postgres://app:{REDACTED}@db/x"
    assert redact_text("\x1b[31mtrace: password=p\x1b[0m") == f"\x1b[31mtrace: password={REDACTED}\x1b[0m"
    assert redact_text("no secrets here") == "no secrets here"
