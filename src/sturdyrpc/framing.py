"""Splitting a byte stream into messages, sans I/O.

Two framings: newline-delimited JSON (stdio for MCP and most tools) and
``Content-Length`` headers (LSP). Feed bytes as they arrive, get whole frames
back. Both bound the size of one frame: an over-long frame is reported once as
:class:`FrameTooLarge`, its bytes are discarded without being buffered, and the
stream resynchronises at the next frame.
"""

from __future__ import annotations

from typing import cast

__all__ = [
    "FrameTooLarge",
    "BadHeader",
    "Frame",
    "LineFramer",
    "ContentLengthFramer",
    "encode_line",
    "encode_content_length",
]


class FrameTooLarge:
    """Event: a frame exceeded ``limit`` bytes and was discarded."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __repr__(self) -> str:
        return f"FrameTooLarge(limit={self.limit})"


class BadHeader:
    """Event: a Content-Length header block could not be read and was skipped."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"BadHeader({self.reason!r})"


Frame = bytes | FrameTooLarge | BadHeader

_WS = b" \t\r\n"


class LineFramer:
    """Newline-delimited frames: one message a line, blank lines ignored, CRLF tolerated."""

    __slots__ = ("max_frame", "_buf", "_discarding")

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()  # the start of a line whose end has not come yet
        self._discarding = False

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the end of their line."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return the frames they complete."""
        out: list[Frame] = []
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            self._discarding = False
            data = data[nl + 1 :]
        buf = self._buf
        max_frame = self.max_frame
        if buf:
            # The end of the line begun in an earlier read, then the lines of this one as below.
            nl = data.find(b"\n")
            if nl < 0:
                buf += data
                if len(buf) > max_frame:
                    out.append(FrameTooLarge(max_frame))
                    buf.clear()
                    self._discarding = True
                return out
            buf += data[:nl]
            line = bytes(buf)
            buf.clear()
            self._emit(line, out)
            data = data[nl + 1 :]
        # Whole lines need no copy into the buffer.
        lines = data.split(b"\n")
        last = lines.pop()  # the unfinished line (empty when data ends with a newline)
        if lines and len(data) <= max_frame and min(lines) >= b"[" and b"\r" not in data:
            # The everyday read: no line is empty, blank (each starts at "[" or above), too long
            # or holds a CR: every line is a frame as it is, and the list is the answer.
            if out:
                out += lines
            else:
                out = cast("list[Frame]", lines)
        else:
            for line in lines:
                # A JSON object or array without CR passes as it is; anything else: _emit.
                if line and (line[0] == 123 or line[0] == 91) and line[-1] != 13 and len(line) <= max_frame:
                    out.append(line)
                else:
                    self._emit(line, out)
        rest = len(last)
        if rest:
            if rest > max_frame:
                out.append(FrameTooLarge(max_frame))
                self._discarding = True
            else:
                buf += last
        return out

    def _emit(self, line: bytes, out: list[Frame]) -> None:
        if len(line) > self.max_frame:
            out.append(FrameTooLarge(self.max_frame))
            return
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or not line.strip(_WS):
            return
        out.append(line)


def encode_line(payload: bytes) -> bytes:
    """One frame for the line framing. ``payload`` is compact JSON, so it holds no newline."""
    return payload + b"\n"


class ContentLengthFramer:
    """LSP framing: ``Content-Length: N\\r\\n`` (other headers allowed), a blank line, N bytes."""

    __slots__ = ("max_frame", "max_header", "_buf", "_need", "_skip", "_junk")

    def __init__(self, max_frame: int, max_header: int = 8192) -> None:
        self.max_frame = max_frame
        self.max_header = max_header
        self._buf = bytearray()
        self._need = -1  # body length once the header is read
        self._skip = 0  # bytes of an over-long body still to discard
        self._junk = False  # inside bytes already reported as a bad header: report them once

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        out: list[Frame] = []
        buf = self._buf
        buf += data
        while True:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._skip -= n
                if self._skip:
                    return out
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > self.max_header:
                        if not self._junk:
                            out.append(BadHeader("header block too long"))
                            self._junk = True
                        self._resync(buf, len(buf) - 3)
                    return out
                header = bytes(buf[:end])
                length = self._parse_header(header)
                junk, self._junk = self._junk, False
                if isinstance(length, str):
                    if not junk:
                        out.append(BadHeader(length))
                    # A bad header block is skipped as a whole (a second Content-Length inside it
                    # must not be read as the next frame's); a body of unknown length may follow.
                    # Junk that ran into the next header: resynchronise at that header.
                    self._junk = not self._resync_after(buf, 1 if junk else end + 4, end + 4)
                    continue
                del buf[: end + 4]
                if length > self.max_frame:
                    out.append(FrameTooLarge(self.max_frame))
                    self._skip = length
                    continue
                self._need = length
            if len(buf) < self._need:
                return out
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = -1
            out.append(body)

    @staticmethod
    def _resync(buf: bytearray, min_drop: int) -> None:
        # Skip to the next header that starts like ours so one bad frame costs one frame.
        nxt = buf.find(b"Content-Length:", 1)
        drop = nxt if nxt > 0 else max(min_drop, 0)
        del buf[:drop]

    @staticmethod
    def _resync_after(buf: bytearray, search_from: int, min_drop: int) -> bool:
        # Drop up to the next header that starts like ours, or ``min_drop`` bytes when none has
        # arrived yet: False then (what arrives before it is the bad frame's body: not reported).
        nxt = buf.find(b"Content-Length:", search_from)
        del buf[: nxt if nxt >= 0 else min_drop]
        return nxt >= 0

    @staticmethod
    def _parse_header(header: bytes) -> int | str:
        length: int | None = None
        for line in header.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if not sep:
                return "malformed header line"
            if name.strip().lower() == b"content-length":
                v = value.strip()
                if length is not None:
                    # Which one the sender meant is unknown: taking either one desynchronises
                    # the stream (the last one used to win and swallow the next frame).
                    return "more than one Content-Length header"
                if not v.isdigit() or len(v) > 12:
                    return "invalid Content-Length"
                length = int(v)
        if length is None:
            return "missing Content-Length"
        return length


def encode_content_length(payload: bytes) -> bytes:
    """One frame for the Content-Length framing."""
    return b"Content-Length: %d\r\n\r\n" % len(payload) + payload
