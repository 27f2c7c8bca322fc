"""The checker's side of one conversation with the server: send bytes, collect replies.

A :class:`Probe` talks to a server process over its stdin/stdout (:class:`~.driver.ServerProcess`);
:class:`~.http_probe.HTTPProbe` is the same conversation over HTTP. Checks receive a probe and
never care which.

Every exchange ends with a *sentinel*: a request for a method no server has, whose
``-32601`` reply proves the server is still answering and marks the point after which
the replies to the checked input must have arrived (a server may answer out of order,
so a short grace period follows). Replies to earlier exchanges that arrive late are
recognised by id and set aside. A server that exits or stops answering after an input
fails the check at MUST level (:class:`~.model.ServerStopped`), whatever the check's own level.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from .config import CLIENT_INFO, HANDSHAKE_VERSIONS, MODERN_VERSION, SENTINEL_METHOD, Config, id_key, modern_meta, same_id
from .driver import Frame, ServerProcess, WriteTimeout, trim
from .model import CheckFailed, ServerStopped

__all__ = ["Probe", "single_reply", "Config", "same_id"]

_encode = msgspec.json.encode

class Probe:
    """One conversation with the server under check, plus the bookkeeping of the checks that run on it.

    ``endpoint`` is what carries the bytes: by default a new server process (``cfg.command``);
    :class:`~.http_probe.HTTPProbe` passes an object with the same reading interface.
    """

    def __init__(self, cfg: Config, *, handshake: bool = True, endpoint: ServerProcess | None = None) -> None:
        self.cfg = cfg
        self.proc = endpoint if endpoint is not None else ServerProcess(cfg.command, env=cfg.env, cwd=cfg.cwd)
        self.spoiled = False
        self._ids = itertools.count(1)
        self._done: set[tuple[str, Any]] = set()
        self._sentinels: set[str] = set()
        self.sent: list[bytes] = []
        self._sent_mark = 0
        self._frame_mark = 0
        self.aborted = threading.Event()
        self.initialize_result: dict[str, Any] | None = None
        # A first request, with a generous timeout, so that slow startup (imports, a busy
        # machine) is not blamed on the first check. Checks that must see an untouched
        # server (handshake=False) wait for it themselves.
        try:
            if handshake and cfg.is_mcp and not cfg.modern:
                self._handshake()
            elif handshake:
                self._ready()
        except BaseException:
            self.close()  # the caller never gets the probe, so it cannot close it
            raise
        self.mark()

    # -- windows (what the report shows for a check) ----------------------------------------

    def mark(self) -> None:
        """Start a new window: the report shows what was sent and received after this point."""
        self._sent_mark = len(self.sent)
        self._frame_mark = len(self.proc.frames)

    def window(self, limit: int = 5) -> tuple[list[str], list[str]]:
        def shown_sent(b: bytes) -> bool:
            return SENTINEL_METHOD.encode() not in b

        def shown_frame(f: Frame) -> bool:
            v = f.value
            return not (type(v) is dict and type(v.get("id")) is str and v["id"] in self._sentinels)

        sent = [trim(b) for b in self.sent[self._sent_mark :] if shown_sent(b)]
        frames = self.proc.frames[self._frame_mark :]
        received = [trim(f.raw) + ("" if f.is_message else "   <- not JSON-RPC") for f in frames if shown_frame(f)]
        if len(sent) > limit:
            sent = sent[:limit] + [f"... and {len(sent) - limit} more"]
        if len(received) > limit:
            received = received[:limit] + [f"... and {len(received) - limit} more"]
        return sent, received

    # -- sending -------------------------------------------------------------------------------

    def new_id(self, prefix: str = "c") -> str:
        return f"{prefix}-{next(self._ids)}"

    def send(self, data: bytes | Any, *, newline: bool = True, timeout: float | None = None) -> None:
        """Write raw bytes (as given) or a JSON value (encoded, plus a newline)."""
        if not isinstance(data, bytes):
            data = _encode(data) + (b"\n" if newline else b"")
        self.sent.append(data)
        try:
            self.proc.write(data, self.cfg.timeout if timeout is None else timeout)
        except WriteTimeout as exc:
            self.spoiled = True
            raise ServerStopped(f"could not write to the server: {exc}{self.exit_note()}") from None

    def request(self, method: str, params: Any = None, id: Any = None, *, meta: bool = True) -> dict[str, Any]:
        """A request object; in MCP 2026-07-28 mode ``params._meta`` carries the required keys."""
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if meta and self.cfg.modern:
            params = dict(params or {})
            params["_meta"] = {**modern_meta(self.cfg.version or MODERN_VERSION), **params.get("_meta", {})}
        if params is not None:
            msg["params"] = params
        msg["id"] = self.new_id() if id is None else id
        return msg

    def notification(self, method: str, params: Any = None, *, meta: bool = True) -> dict[str, Any]:
        msg = self.request(method, params, meta=meta)
        del msg["id"]
        return msg

    # -- receiving -----------------------------------------------------------------------------

    def exit_note(self) -> str:
        code = self.proc.wait(0.2) if not self.proc.alive() or self.proc.stdout_closed.is_set() else None
        if code is not None:
            return f" (the server exited with code {code})"
        if self.proc.stdout_closed.is_set():
            return " (the server closed its stdout)"
        return ""

    def _is_sentinel_reply(self, v: Any) -> bool:
        return type(v) is dict and type(v.get("id")) is str and v["id"] in self._sentinels

    def _stray(self, v: Any) -> bool:
        if type(v) is dict and "id" in v and "method" not in v:
            try:
                return id_key(v["id"]) in self._done
            except TypeError:
                return False
        return False

    def exchange(self, payload: bytes | Any, expect: int = 1, **kw: Any) -> list[Any]:
        """Send one item (raw bytes, or a JSON value: a list is a batch); see :meth:`exchange_many`."""
        return self.exchange_many([payload], expect, **kw)

    def exchange_many(
        self,
        items: Sequence[bytes | Any],
        expect: int = 1,
        *,
        timeout: float | None = None,
        settle: float | None = None,
        grace: float = 0.5,
        ids: list[Any] | None = None,
    ) -> list[Any]:
        """Send each of ``items``, then a sentinel; return the messages
        that are not the sentinel's reply.

        Waits until the sentinel is answered and ``expect`` messages have arrived (at most
        ``grace`` seconds after the sentinel's reply), then ``settle`` seconds more for
        anything extra. Raises :class:`CheckFailed` when the sentinel is never answered:
        the server stopped answering after this input.
        """
        timeout = self.cfg.timeout if timeout is None else timeout
        if settle is None:
            settle = 0.25 if expect == 0 else 0.05
        sid = f"sentinel-{next(self._ids)}"
        self._sentinels.add(sid)
        for item in items:
            self.send(item, timeout=timeout)
        self.send(self.request(SENTINEL_METHOD, id=sid), timeout=timeout)
        got: list[Any] = []
        seen_sentinel = False
        deadline = time.monotonic() + timeout
        stop_at: float | None = None
        while True:
            now = time.monotonic()
            if seen_sentinel and len(got) >= expect:
                stop_at = min(stop_at or now + settle, now + settle)
                break
            limit = deadline if stop_at is None else min(deadline, stop_at)
            if now >= limit:
                break
            frame = self.proc.next_message(limit - now)
            if frame is None:
                if self.proc.stdout_closed.is_set():
                    break
                continue
            v = frame.value
            if self._is_sentinel_reply(v):
                seen_sentinel = True
                stop_at = time.monotonic() + grace
                continue
            if self._stray(v):
                continue
            got.append(v)
        if seen_sentinel and stop_at is not None:
            # Settle: anything more that arrives shortly after (a second reply, a reply to a notification).
            end = time.monotonic() + settle
            while (left := end - time.monotonic()) > 0:
                frame = self.proc.next_message(left)
                if frame is None:
                    break
                if not self._is_sentinel_reply(frame.value) and not self._stray(frame.value):
                    got.append(frame.value)
        # Late replies to these requests must not be mistaken for replies to later ones.
        # Only ids the checker sent as structured requests count (never null, never raw bytes).
        for item in items:
            for r in item if type(item) is list else [item]:
                if type(r) is dict and "method" in r and type(r.get("id")) in (str, int):
                    self._done.add(id_key(r["id"]))
        for i in ids or []:
            if i is not None:
                self._done.add(id_key(i))
        if not seen_sentinel:
            self.spoiled = True
            what = "closed its stdout" if self.proc.stdout_closed.is_set() else f"did not answer within {timeout:.1f}s"
            raise ServerStopped(
                f"after this input the server stopped answering: a follow-up request (unknown method) {what}{self.exit_note()}"
                + (f"; {len(got)} other message(s) arrived" if got else "")
            )
        return got

    def call(self, method: str, params: Any = None, *, id: Any = None, timeout: float | None = None) -> dict[str, Any]:
        """One request, its one reply (validated strictly). Fails the check on silence or extra output."""
        msg = self.request(method, params, id)
        replies = self.exchange(msg, timeout=timeout)
        return single_reply(replies, msg["id"])

    def wait_for(self, pred: Any, timeout: float) -> tuple[Any | None, list[Any]]:
        """Read messages until ``pred(value)`` holds; returns it (or None) and everything read before."""
        seen: list[Any] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            frame = self.proc.next_message(left)
            if frame is None:
                if self.proc.stdout_closed.is_set():
                    break
                continue
            if pred(frame.value):
                return frame.value, seen
            seen.append(frame.value)
        return None, seen

    def drain(self, wait: float) -> list[Any]:
        """Everything that arrives within ``wait`` seconds."""
        out: list[Any] = []
        end = time.monotonic() + wait
        while (left := end - time.monotonic()) > 0:
            frame = self.proc.next_message(left)
            if frame is None:
                if self.proc.stdout_closed.is_set():
                    break
                continue
            out.append(frame.value)
        return out

    # -- MCP -----------------------------------------------------------------------------------

    def initialize(self, version: str, id: Any = "init-1", timeout: float | None = None) -> dict[str, Any] | None:
        """Send ``initialize``; return the reply (None on silence)."""
        msg = {
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
        self.send(msg)
        # Often the first message to a fresh process: allow for a slow start.
        wait = timeout or max(self.cfg.timeout, self.cfg.startup_timeout)
        reply, _ = self.wait_for(lambda v: type(v) is dict and same_id(v.get("id"), id) and "method" not in v, wait)
        return reply

    def _ready(self) -> None:
        msg = self.request(SENTINEL_METHOD, id="ready-1")
        wait = max(self.cfg.timeout, self.cfg.startup_timeout)
        self.send(msg, timeout=wait)
        reply, _ = self.wait_for(lambda v: type(v) is dict and v.get("id") == "ready-1", wait)
        if reply is None:
            self.spoiled = True
            # A server that never answers must not cost the full startup allowance per check.
            self.cfg.startup_timeout = self.cfg.timeout
            raise CheckFailed(f"setup: the server did not answer a first request within {wait:.0f}s{self.exit_note()}")
        self._sentinels.add("ready-1")

    def _handshake(self) -> None:
        version = self.cfg.version or HANDSHAKE_VERSIONS[-1]
        reply = self.initialize(version, timeout=max(self.cfg.timeout, self.cfg.startup_timeout))
        if reply is None or type(reply.get("result")) is not dict:
            self.spoiled = True
            self.cfg.startup_timeout = self.cfg.timeout
            raise CheckFailed(f"setup: MCP initialize got no usable reply: {trim(_encode(reply)) if reply else 'silence'}{self.exit_note()}")
        self.initialize_result = reply["result"]
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        self.proc.stop()


def single_reply(replies: list[Any], expected_id: Any) -> dict[str, Any]:
    """The one reply to a request; fails the check on none, several, or a batch."""
    if not replies:
        raise CheckFailed("no reply (the server answered a later request, so it skipped this one)")
    if len(replies) > 1:
        raise CheckFailed(f"{len(replies)} messages came back for one request")
    reply = replies[0]
    if type(reply) is not dict:
        raise CheckFailed("a single request was answered with an array")
    return reply
