"""The NDJSON log of ``trace --log`` and ``guard --log`` (stdio, and ``guard --url``): one writer
of the format, which ``sturdyrpc replay`` reads (:func:`~.replay.load_session`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from ..codec import DecodeFailure, decode, encode
from ..framing import BadHeader, Frame, FrameTooLarge
from .monitor import Direction, Event
from .redact import REDACTED, maybe_secret, redact, redact_argv, redact_text

__all__ = ["TraceLog", "LOG_BUFFER", "UNREADABLE"]

#: The buffer of the log file (bytes): records of many reads leave in one system call.
LOG_BUFFER = 1 << 20
_UNDECODED: Any = object()
#: The ``value`` of :meth:`TraceLog.http_message` for bytes that are no JSON (written as ``"raw"``).
UNREADABLE: Any = object()


class TraceLog:
    """The NDJSON log: a header record, then one record per message, both ways.

    Records: ``{"dir": "c2s"|"s2c", "t": monotonic, "wall": unix time, "msg": <the message>}``;
    bytes that are not JSON: ``"raw": "<text>"`` instead of ``"msg"``; a frame the framer could not
    read: ``"event": "bad-header"|"too-large"`` with ``"detail"``. Other records (guard's report
of what it contained, :meth:`note`) have an ``"event"`` and no ``"dir"``: replay leaves them out.

    ``redact`` (the default): the values of secret-looking keys (:mod:`.redact`) in the messages,
    the raw text and the server's argv are written as ``"[REDACTED]"``, and the header says
    ``"redacted": true``; messages without such a key are written as they were read.

    The HTTP guard's log (``upstream``: its URL, in the header instead of ``"command"``, with
    ``"transport": "http"``; its user info and secret-looking query values redacted) is written
    with :meth:`http_message`: the same records, each with the ``"session"`` it belongs to
    (guard's ``Mcp-Session-Id``; null for a 2026-07-28 request, which has none). Directions:
    ``c2s`` a POST body of the client (a batch as it came), ``s2c`` a message of the upstream (a
    JSON reply, an SSE event's data) with ``"client_id"``, the id the client knows it by, when
    guard maps it (a reply: the id of the client's request; a request of the server: guard's id
    for it), and ``g2c`` what guard answered the client itself (replay leaves those out). No
    HTTP header is written.
    """

    def __init__(self, file: IO[bytes], command: list[str], framing: str, *, redact: bool = True,
                 upstream: str | None = None) -> None:
        self.file = file
        self.redact = redact
        self._wall0 = time.time() - time.monotonic()  # wall = monotonic + offset: one clock read
        self._breaks = framing != "line"  # frames may hold line breaks (a line frame holds no LF)
        if upstream is not None:
            file.write(encode({"sturdyrpc": "trace", "format": 1, "transport": "http",
                               "upstream": _clean_url(upstream) if redact else upstream, "redacted": redact,
                               "wall": time.time()}) + b"\n")
            return
        argv = redact_argv(command) if redact else command
        file.write(encode({"sturdyrpc": "trace", "format": 1, "command": argv, "framing": framing, "redacted": redact,
                           "wall": time.time()}) + b"\n")

    def head(self, dir: Direction, now: float) -> bytes:
        """The start of the records of the frames of one read (they share a direction and a time)."""
        return b'{"dir":"%s","t":%.6f,"wall":%.6f,' % (dir.encode(), now, now + self._wall0)

    def message(self, out: list[bytes], head: bytes, frame: bytes, ev: Event) -> None:
        """Add the record of one frame to ``out`` (written by :meth:`write`); ``head`` from :meth:`head`."""
        if ev.kind == "junk":
            text = frame.decode("utf-8", "backslashreplace")
            out += (head, b'"raw":', encode(redact_text(text) if self.redact else text), b"}\n")
        elif self.redact and (clean := self._without_secrets(frame, ev.value)) is not None:
            out += (head, b'"msg":', clean, b"}\n")
        elif b"\n" in frame or b"\r" in frame:
            out += (head, b'"msg":', encode(ev.value), b"}\n")  # NDJSON: one line each
        else:
            out += (head, b'"msg":', frame, b"}\n")

    def plain(self, out: list[bytes], head: bytes, frames: list[bytes]) -> None:
        """Add the records of ``frames``, messages :meth:`Monitor.feed_plain` judged, to ``out``:
        one join for all of them."""
        if self.redact and maybe_secret(b"\n".join(frames)):
            # Some frame may hold a secret: one by one.
            for frame in frames:
                clean = self._without_secrets(frame)
                if clean is None:
                    clean = encode(decode(frame)) if b"\n" in frame or b"\r" in frame else frame
                out += (head, b'"msg":', clean, b"}\n")
            return
        body = (b'}\n' + head + b'"msg":').join(frames)
        if b"\r" in body or (self._breaks and body.count(b"\n") != len(frames) - 1):
            # A line break inside a frame (Content-Length framing): one line each, re-encoded.
            for frame in frames:
                out += (head, b'"msg":', encode(decode(frame)) if b"\n" in frame or b"\r" in frame else frame, b"}\n")
            return
        out += (head, b'"msg":', body, b"}\n")

    @staticmethod
    def _without_secrets(frame: bytes, value: Any = _UNDECODED) -> bytes | None:
        """What to write for ``frame`` (decoded: ``value``) when it holds a secret; None when it
        holds none and is written as it was read."""
        if not maybe_secret(frame):
            return None
        if value is _UNDECODED:
            try:
                value = decode(frame)
            except DecodeFailure:
                return encode(REDACTED)  # a message the monitor read but this cannot: none of it
        clean = redact(value)
        return None if clean is value else encode(clean)

    def write(self, out: list[bytes]) -> None:
        """Write the records collected in ``out`` (one call for many messages, into the file's buffer)."""
        self.file.write(b"".join(out))

    def frames(self, dir: Direction, frames: Sequence[Frame], now: float) -> None:
        """Write the records of ``frames`` of one read, no one's decode at hand (a proxy that
        judges them on its own, guard): each frame is decoded here to tell a message from junk."""
        records: list[bytes] = []
        head = self.head(dir, now)
        for frame in frames:
            if type(frame) is bytes:
                try:
                    ev = Event(dir, "message", decode(frame))
                except DecodeFailure:
                    ev = Event(dir, "junk", frame)
                self.message(records, head, frame, ev)
                continue
            self.write(records)
            records = []
            if isinstance(frame, FrameTooLarge):
                self.event(dir, "too-large", f"a frame over {frame.limit} bytes", now)
            elif isinstance(frame, BadHeader):
                self.event(dir, "bad-header", frame.reason, now)
        self.write(records)

    def http_message(self, dir: str, session: str | None, payload: bytes, now: float, *, value: Any = _UNDECODED,
                     client_id: Any = None) -> None:
        """The record of one message of the HTTP guard (``dir``: ``c2s``, ``s2c`` or ``g2c``) in
        ``session``; ``value``: ``payload`` decoded, when the caller has it (``_UNDECODED``, or
        :data:`UNREADABLE` for bytes that are no JSON); ``client_id``: see the class docstring
        (None: not mapped). Into the file's buffer: written out when it fills or is flushed."""
        if value is _UNDECODED:
            try:
                value = decode(payload)
            except DecodeFailure:
                value = UNREADABLE
        side: Direction = "c2s" if dir == "c2s" else "s2c"  # what the record says is ``dir``: the event's own is not written
        ev = Event(side, "junk", payload) if value is UNREADABLE else Event(side, "message", value)
        head = b'{"dir":"%s","session":%s,%s"t":%.6f,"wall":%.6f,' % (
            dir.encode(), encode(session), b"" if client_id is None else b'"client_id":' + encode(client_id) + b",",
            now, now + self._wall0)
        out: list[bytes] = []
        self.message(out, head, payload, ev)
        self.write(out)

    def note(self, what: str, now: float, **fields: Any) -> None:
        """A record of ``what`` happened (``"event": what``, ``fields`` beside it), in no direction."""
        self.file.write(encode({"event": what, "t": round(now, 6), "wall": round(now + self._wall0, 6), **fields}) + b"\n")

    def event(self, dir: Direction, what: str, detail: str, now: float) -> None:
        self.file.write(encode({"dir": dir, "t": round(now, 6), "wall": round(now + self._wall0, 6), "event": what, "detail": detail}) + b"\n")

    def close(self) -> None:
        self.file.close()


def _clean_url(url: str) -> str:
    """``url`` without its user info (``user:password@``: a credential) and with the values of
    secret-looking query parameters (``?token=X``) redacted."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    return redact_text(urlunsplit(parts._replace(netloc=netloc)))
