"""A correct JSON-RPC 2.0 stdio server (standard library only): ``sturdyrpc check`` must pass it.

The zoo servers next to it subclass :class:`Server` and override one method each, to
carry exactly one classic bug. Methods: ``echo`` (returns its first param, or the params),
``sleep`` ({"seconds": S}: waits, then returns S) and ``fail`` (raises).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_LINE = 16 * 1024 * 1024
MAX_BATCH = 1000


class Invalid(Exception):
    """An error to answer: code, message, id to use."""

    def __init__(self, code: int, message: str, id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Server:
    """Newline-delimited JSON-RPC 2.0 over stdin/stdout, one thread per request (bounded pool)."""

    def __init__(self) -> None:
        self.out = sys.stdout.buffer
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=32)
        self.methods = {"echo": self.m_echo, "sleep": self.m_sleep, "fail": self.m_fail}

    # -- methods ---------------------------------------------------------------------------

    def m_echo(self, params: Any) -> Any:
        if isinstance(params, list) and params:
            return params[0]
        return params

    def m_sleep(self, params: Any) -> Any:
        seconds = params.get("seconds", 0) if isinstance(params, dict) else params[0]
        time.sleep(min(float(seconds), 10.0))
        return seconds

    def m_fail(self, params: Any) -> Any:
        raise RuntimeError("SECRET-TOKEN-42 in /etc/shadow")

    # -- wire ------------------------------------------------------------------------------

    def write(self, obj: Any) -> None:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
        with self.lock:
            self.out.write(data)
            self.out.flush()

    def error(self, code: int, message: str, id: Any = None, data: Any = None) -> dict[str, Any]:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        return {"jsonrpc": "2.0", "error": err, "id": id}

    def decode(self, line: bytes) -> Any:
        try:
            text = line.decode("utf-8")
            return json.loads(text, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            raise Invalid(-32700, "Parse error") from None

    def parse_error_reply(self, exc: Invalid) -> dict[str, Any]:
        return self.error(exc.code, exc.message, None)

    def valid_id(self, id: Any) -> bool:
        return id is None or (type(id) in (str, int, float))

    def read_id(self, msg: dict[str, Any]) -> Any:
        return msg["id"]

    def is_notification(self, msg: dict[str, Any]) -> bool:
        return "id" not in msg

    def check_request(self, msg: Any) -> None:
        """Raise Invalid for anything that is not a request or notification."""
        if not isinstance(msg, dict):
            raise Invalid(-32600, "Invalid Request")
        id = msg.get("id") if self.valid_id(msg.get("id")) else None
        if msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("jsonrpc"), str):
            raise Invalid(-32600, "Invalid Request", id)
        if not isinstance(msg.get("method"), str):
            raise Invalid(-32600, "Invalid Request", id)
        if "params" in msg and not isinstance(msg["params"], (list, dict)):
            raise Invalid(-32600, "Invalid Request", id)
        if "id" in msg and not self.valid_id(msg["id"]):
            raise Invalid(-32600, "Invalid Request", None)

    def is_response(self, msg: Any) -> bool:
        return isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg)

    def unknown_method(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self.error(-32601, "Method not found", self.read_id(msg))

    def internal_error(self, msg: dict[str, Any], exc: BaseException) -> dict[str, Any]:
        print("handler failed:\n" + traceback.format_exc(), file=sys.stderr)
        return self.error(-32603, "Internal error", self.read_id(msg))

    def handle(self, msg: Any) -> dict[str, Any] | None:
        """One message -> its reply, or None (notifications, responses)."""
        if self.is_response(msg):
            return None
        try:
            self.check_request(msg)
        except Invalid as exc:
            return self.error(exc.code, exc.message, exc.id)
        notification = self.is_notification(msg)
        fn = self.methods.get(msg["method"])
        if fn is None:
            return None if notification else self.unknown_method(msg)
        try:
            result = fn(msg.get("params"))
        except Exception as exc:
            return None if notification else self.internal_error(msg, exc)
        return None if notification else {"jsonrpc": "2.0", "result": result, "id": self.read_id(msg)}

    def handle_batch(self, batch: list[Any]) -> None:
        if not batch:
            self.write(self.error(-32600, "Invalid Request"))
            return
        if len(batch) > MAX_BATCH:
            self.write(self.error(-32600, "Batch too large"))
            return
        with ThreadPoolExecutor(max_workers=8) as pool:
            replies = [r for r in pool.map(self.handle, batch) if r is not None]
        self.write_batch(replies)

    def write_batch(self, replies: list[dict[str, Any]]) -> None:
        if replies:
            self.write(replies)

    def run_one(self, msg: Any) -> None:
        reply = self.handle(msg)
        if reply is not None:
            self.write(reply)

    def dispatch_line(self, line: bytes) -> None:
        if not line.strip():
            return
        if len(line) > MAX_LINE:
            self.write(self.error(-32600, "Request too large"))
            return
        try:
            msg = self.decode(line)
        except Invalid as exc:
            self.write(self.parse_error_reply(exc))
            return
        if isinstance(msg, list):
            self.pool.submit(self.handle_batch, msg)
        else:
            self.pool.submit(self.run_one, msg)

    def on_eof(self) -> None:
        self.pool.shutdown(wait=True)
        sys.exit(0)

    def serve(self) -> None:
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                break
            self.dispatch_line(line)
        self.on_eof()


if __name__ == "__main__":
    Server().serve()
