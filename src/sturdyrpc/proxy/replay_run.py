"""``sturdyrpc replay``: the pipes around :class:`~.replay.Replay`. Synchronous: one server, one
message at a time, a reader thread so a server that stops answering cannot block us."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from ..codec import DecodeFailure, decode
from .pump import frame_payload, make_framer
from .replay import Difference, Record, Replay

__all__ = ["ReplayResult", "replay_session"]

_EOF = object()


@dataclass
class ReplayResult:
    """What a replay found."""

    compared: int
    differences: list[Difference]
    exit_code: int | None


def replay_session(
    records: list[Record],
    cmd: list[str],
    *,
    ignore: tuple[str, ...] = (),
    framing: str = "line",
    timeout: float = 10.0,
    on_junk: Callable[[bytes], None] | None = None,
    redacted: bool = False,
) -> ReplayResult:
    """Replay ``records`` against a fresh ``cmd``; a reply missing after ``timeout`` s is a difference.
    ``redacted``: the log's secrets were redacted (see :class:`~.replay.Replay`)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    inbox: queue.Queue[object] = queue.Queue()
    threading.Thread(target=_read_replies, args=(proc.stdout, framing, inbox, on_junk), daemon=True, name="sturdyrpc-replay").start()
    run = Replay(records, ignore, redacted)
    ended = False

    def send(payloads: list[bytes]) -> None:
        nonlocal ended
        try:
            for p in payloads:
                proc.stdin.write(frame_payload(framing, p))  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            ended = True

    try:
        while not run.done:
            send(run.next_messages())
            if run.waiting_for is None:
                continue
            if ended:
                run.missing_reply()
                continue
            try:
                msg = inbox.get(timeout=timeout)
            except queue.Empty:
                run.missing_reply()
                continue
            if msg is _EOF:
                ended = True
                run.missing_reply()
                continue
            values = msg if type(msg) is list else [msg]
            for v in values:
                send(run.from_server(v))
    finally:
        code = _stop(proc)
    return ReplayResult(run.compared, run.differences, code)


def _read_replies(stdout: IO[bytes], framing: str, inbox: queue.Queue[object], on_junk: Callable[[bytes], None] | None) -> None:
    """The reader thread: every message the server writes, decoded, into ``inbox``; then ``_EOF``."""
    framer = make_framer(framing)
    while True:
        try:
            data = stdout.read1(65536) if hasattr(stdout, "read1") else stdout.read(65536)
        except OSError:
            data = b""
        if not data:
            inbox.put(_EOF)
            return
        for frame in framer.feed(data):
            if not isinstance(frame, bytes):
                continue
            try:
                inbox.put(decode(frame))
            except DecodeFailure:
                if on_junk is not None:
                    on_junk(frame)


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """End the server: close its stdin, wait, then terminate() (SIGTERM), then kill(); its exit code."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        code: int | None = proc.wait(3.0)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            code = proc.wait(3.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    return code
