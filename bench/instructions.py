"""Instructions per request, counted by callgrind: a figure that repeats on a loaded machine.

Each scenario runs in a fresh process with no sockets (stdio servers read a pipe filled
beforehand and write a regular file; HTTP apps are called in process with a fake receive/send),
once with ``--n LOW`` and once with ``--n HIGH`` requests under ``valgrind --tool=callgrind``;
the difference of the two totals divided by ``HIGH - LOW`` is what one request costs, start-up
and set-up excluded. ``PYTHONHASHSEED`` is fixed so the interpreter's own work repeats.

    .venv/bin/python bench/instructions.py                 # every scenario, a table
    .venv/bin/python bench/instructions.py stdio-mcp       # some of them
    .venv/bin/python bench/instructions.py --json FILE     # also write the figures as JSON
    .venv/bin/python bench/instructions.py --run SCENARIO --n N   # one run, no valgrind

Every scenario uses the public API only, so the same file measures two checkouts side by side
(``PYTHONPATH=/other/checkout/src .venv/bin/python bench/instructions.py``).

``stdio-typed-floor`` is no path of ours: the checks JSON-RPC 2.0 asks of every request made by
a decode typed by the message's shape (msgspec, in C), beside the bare loop that checks nothing.
It shows what a server that checks the spec can cost at least (below the bare loop), so the
distance of each path of ours from it is work of ours, not of the spec.

Each figure is shown beside its bare baseline measured in the same run: the bare loop for
stdio (read, decode, look up, encode, write, nothing checked) and the bare ASGI app for HTTP.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

LOW, HIGH = 200, 1200
OLD, NEW = "2025-11-25", "2026-07-28"
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032  # Linux fcntl commands

PLAIN = b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":["hello"]}'
CALL = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'
CALL_NEW = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'
            b'"_meta":{"io.modelcontextprotocol/protocolVersion":"' + NEW.encode() + b'",'
            b'"io.modelcontextprotocol/clientCapabilities":{}}}}')
INIT = msgspec.json.encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": OLD, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
BASE_HEADERS = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream")]


# ------------------------------------------------------------------ stdio scenarios


def _pipe_with(lines: list[bytes]) -> int:
    """A pipe holding ``lines`` and then EOF; returns its read end."""
    data = b"".join(line + b"\n" for line in lines)
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, max(len(data) + 4096, 65536))
    except OSError:
        pass
    if len(data) > fcntl.fcntl(w, F_GETPIPE_SZ):
        raise SystemExit(f"the pipe cannot hold {len(data)} bytes: lower --n")
    os.write(w, data)
    os.close(w)
    return r


def _out_file() -> int:
    fd, path = tempfile.mkstemp(prefix="sturdyrpc-instr-")
    os.unlink(path)
    return fd


def _check_out(fd: int, expect: int) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    out = b""
    while chunk := os.read(fd, 1 << 20):
        out += chunk
    got = sum(1 for line in out.splitlines() if line.startswith(b'{"jsonrpc":"2.0","result":'))
    if got != expect:
        raise SystemExit(f"expected {expect} results, got {got}: {out[:300]!r}")


def stdio_bare(n: int) -> None:
    r = _pipe_with([PLAIN % i for i in range(n)])
    w = _out_file()
    decode = msgspec.json.Decoder().decode
    encode = msgspec.json.encode
    methods = {"echo": lambda params: params[0]}
    rest = b""
    while data := os.read(r, 65536):
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        out = []
        for line in lines:
            msg = decode(line)
            out.append(encode({"jsonrpc": "2.0", "result": methods[msg["method"]](msg.get("params")), "id": msg["id"]}))
        out.append(b"")
        os.write(w, b"\n".join(out))
    _check_out(w, n)


class _FloorRequest(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A request as JSON-RPC 2.0 defines it, checked by msgspec in C while it decodes."""

    jsonrpc: Literal["2.0"]
    method: str
    id: int | str | None | msgspec.UnsetType = msgspec.UNSET
    params: list[Any] | dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


class _FloorResult(msgspec.Struct, gc=False):
    jsonrpc: str
    result: Any
    id: Any


def stdio_typed_floor(n: int) -> None:
    """The checks the spec asks of every request, done by a decode typed by the message's shape
    (``jsonrpc``, ``method`` a string, the id's and params' types, no other member), the echo's
    params checked, the reply encoded from a struct: what any server that checks the spec must
    at least do, and how cheaply it can. (Errors are not reached: each would be answered.)"""
    r = _pipe_with([PLAIN % i for i in range(n)])
    w = _out_file()
    decode = msgspec.json.Decoder(_FloorRequest).decode
    encode = msgspec.json.Encoder().encode

    def echo(params: Any) -> Any:
        if type(params) is not list or len(params) != 1 or type(params[0]) is not str:
            raise ValueError("invalid params")
        return params[0]

    methods = {"echo": echo}
    rest = b""
    while data := os.read(r, 65536):
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        out = []
        for line in lines:
            req = decode(line)
            fn = methods.get(req.method)
            if fn is None:
                raise ValueError("method not found")
            if req.id is not msgspec.UNSET:
                out.append(encode(_FloorResult("2.0", fn(req.params), req.id)))
        out.append(b"")
        os.write(w, b"\n".join(out))
    _check_out(w, n)


def _plain_dispatcher(kind: str) -> Any:
    from sturdyrpc import Dispatcher

    d = Dispatcher()
    if kind == "async":
        @d.method(name="echo")
        async def echo_async(text: str) -> str:
            return text
    else:
        @d.method(name="echo", blocking=False)
        def echo(text: str) -> str:
            return text
    return d


def _stdio_plain(kind: str, n: int) -> None:
    from sturdyrpc import serve_stdio

    r = _pipe_with([PLAIN % i for i in range(n)])
    w = _out_file()
    asyncio.run(serve_stdio(_plain_dispatcher(kind), stdin_fd=r, stdout_fd=w, protect_stdout=False))
    _check_out(w, n)


def stdio_plain(n: int) -> None:
    _stdio_plain("inline", n)


def stdio_plain_async(n: int) -> None:
    _stdio_plain("async", n)


def _mcp_server() -> Any:
    from sturdyrpc.demos.mcp import make_mcp_demo

    server = make_mcp_demo()

    @server.tool(name="echo_async")
    async def echo_async(text: str) -> str:
        """The demo's echo, declared async: it runs as a task."""
        return text

    return server


def _stdio_mcp(n: int, body: bytes) -> None:
    from sturdyrpc.mcp.stdio import serve_mcp_stdio

    r = _pipe_with([INIT, INITIALIZED] + [body % (i + 1) for i in range(n)])
    w = _out_file()
    asyncio.run(serve_mcp_stdio(_mcp_server(), stdin_fd=r, stdout_fd=w, protect_stdout=False))
    _check_out(w, n + 1)


def stdio_mcp(n: int) -> None:
    _stdio_mcp(n, CALL)


ASYNC_CALL = CALL.replace(b'"echo"', b'"echo_async"')


def stdio_mcp_async(n: int) -> None:
    _stdio_mcp(n, ASYNC_CALL)


# ------------------------------------------------------------------- HTTP scenarios


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": headers, "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    out: list[dict[str, Any]] = []
    msg = {"type": "http.request", "body": body, "more_body": False}
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if out and not out[-1].get("more_body", False) and out[-1]["type"] == "http.response.body":
            await gone.wait()
            return {"type": "http.disconnect"}
        return msg

    async def send(m: dict[str, Any]) -> None:
        out.append(m)

    await app(scope, receive, send)
    start = out[0]
    return start["status"], start.get("headers", []), b"".join(m.get("body", b"") for m in out[1:])


def _http(n: int, make: Callable[[], Awaitable[tuple[Any, dict[str, Any], bytes]]]) -> None:
    async def main() -> None:
        app, scope, body = await make()
        for i in range(n):
            status, _, out = await _call(app, scope, body % (i + 1))
            if status != 200 or b'"result"' not in out:
                raise SystemExit(f"unexpected reply {status}: {out[:300]!r}")
    asyncio.run(main())


def http_bare(n: int) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from http_servers import bare_app

    async def make() -> tuple[Any, dict[str, Any], bytes]:
        return bare_app, _scope("/", BASE_HEADERS), CALL
    _http(n, make)


def http_plain(n: int) -> None:
    from sturdyrpc.transports.http import JSONRPCHTTPApp

    async def make() -> tuple[Any, dict[str, Any], bytes]:
        return JSONRPCHTTPApp(_plain_dispatcher("inline")), _scope("/", BASE_HEADERS), PLAIN
    _http(n, make)


async def _session(json_response: bool) -> tuple[Any, dict[str, Any], bytes]:
    from sturdyrpc.mcp_http import mcp_http_app

    app = mcp_http_app(_mcp_server(), path="/mcp", json_response=json_response)
    status, headers, _ = await _call(app, _scope("/mcp", BASE_HEADERS), INIT)
    sid = dict(headers)[b"mcp-session-id"]
    h = BASE_HEADERS + [(b"mcp-session-id", sid), (b"mcp-protocol-version", OLD.encode())]
    await _call(app, _scope("/mcp", h), INITIALIZED)
    return app, _scope("/mcp", h), CALL


def http_session_sse(n: int) -> None:
    _http(n, lambda: _session(False))


def http_session_json(n: int) -> None:
    _http(n, lambda: _session(True))


def http_session_sse_async(n: int) -> None:
    async def make() -> tuple[Any, dict[str, Any], bytes]:
        app, scope, _ = await _session(False)
        return app, scope, ASYNC_CALL
    _http(n, make)


def http_2026(n: int) -> None:
    from sturdyrpc.mcp_http import mcp_http_app

    async def make() -> tuple[Any, dict[str, Any], bytes]:
        app = mcp_http_app(_mcp_server(), path="/mcp")
        h = BASE_HEADERS + [(b"mcp-protocol-version", NEW.encode()), (b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
        return app, _scope("/mcp", h), CALL_NEW
    _http(n, make)


def guard(n: int) -> None:
    """The guard's decisions for echo requests and their replies, in reads of 64 frames each way
    (as a loaded pipe delivers them): the client's frames read and admitted, forwarded under
    guard's ids, the replies judged and mapped back."""
    from sturdyrpc.proxy.guard import GuardCore

    core = GuardCore(deadline=30, max_in_flight=1000, protocol="jsonrpc")
    requests = [b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":{"value":"hello"}}' % i for i in range(n)]
    replies = [b'{"jsonrpc":"2.0","id":%d,"result":{"value":"hello"}}' % (i + 1) for i in range(n)]
    answered = 0
    for at in range(0, n, 64):
        core.from_client_frames(requests[at:at + 64], 0.0)
        answered += len(core.from_server_frames(replies[at:at + 64], 0.0).to_client)
    assert answered == n, answered


SCENARIOS: dict[str, tuple[Callable[[int], None], str | None]] = {
    "stdio-bare": (stdio_bare, None),
    "stdio-typed-floor": (stdio_typed_floor, "stdio-bare"),
    "stdio-plain": (stdio_plain, "stdio-bare"),
    "stdio-plain-async": (stdio_plain_async, "stdio-bare"),
    "stdio-mcp": (stdio_mcp, "stdio-bare"),
    "stdio-mcp-async": (stdio_mcp_async, "stdio-bare"),
    "http-bare": (http_bare, None),
    "http-plain": (http_plain, "http-bare"),
    "http-session-sse": (http_session_sse, "http-bare"),
    "http-session-json": (http_session_json, "http-bare"),
    "http-session-sse-async": (http_session_sse_async, "http-bare"),
    "http-2026": (http_2026, "http-bare"),
    "guard": (guard, "stdio-bare"),
}


# -------------------------------------------------------------------- the driver


def count(name: str, n: int) -> int:
    """Total instructions of one run of ``name`` with ``n`` requests, under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
               "--compress-strings=no", sys.executable, os.path.abspath(__file__), "--run", name, "--n", str(n)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{name} --n {n} failed:\n{proc.stderr[-3000:]}")
        m = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
        if m is None:
            with open(out) as f:
                m = re.search(r"^summary:\s*(\d+)", f.read(), re.M)
        assert m is not None, proc.stderr[-2000:]
        return int(m.group(1))


def per_request(name: str) -> float:
    return (count(name, HIGH) - count(name, LOW)) / (HIGH - LOW)


def main(argv: list[str]) -> int:
    if "--run" in argv:
        name = argv[argv.index("--run") + 1]
        n = int(argv[argv.index("--n") + 1]) if "--n" in argv else LOW
        SCENARIOS[name][0](n)
        return 0
    json_out = None
    if "--json" in argv:
        i = argv.index("--json")
        json_out = argv[i + 1]
        del argv[i:i + 2]
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    names = argv or list(SCENARIOS)
    unknown = [x for x in names if x not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    wanted = list(dict.fromkeys(b for x in names for b in (SCENARIOS[x][1], x) if b is not None))
    figures: dict[str, float] = {}
    for name in wanted:
        figures[name] = per_request(name)
        base = SCENARIOS[name][1]
        ratio = f"  {figures[name] / figures[base]:5.2f}x {base}" if base is not None else ""
        print(f"{name:20s} {figures[name]:10,.0f} instructions/request{ratio}", flush=True)
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"python": sys.version.split()[0], "low": LOW, "high": HIGH, "per_request": figures}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
