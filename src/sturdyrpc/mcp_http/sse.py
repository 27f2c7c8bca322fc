"""An incremental Server-Sent Events parser (the WHATWG event-stream format), bytes in, events out."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser"]


@dataclass
class SSEEvent:
    event: str
    data: str
    id: str | None


class SSEParser:
    """Feed chunks; get complete events. Tracks ``last_event_id`` and ``retry`` (ms) as the spec says.

    Lines may end in CRLF, LF or CR; comments (``:``) are skipped; an event with empty data is
    not dispatched (the priming event still updates ``last_event_id``). A line longer than
    ``max_line`` bytes raises ``ValueError`` rather than growing the buffer without bound.
    """

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self.max_line = max_line
        self.last_event_id: str | None = None
        self.retry: int | None = None
        self._buf = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk
        if self._pending_cr and buf.startswith(b"\n"):
            buf = buf[1:]
        self._pending_cr = False
        out: list[SSEEvent] = []
        start = 0
        n = len(buf)
        while start < n:
            i_n = buf.find(b"\n", start)
            i_r = buf.find(b"\r", start)
            if i_n == -1 and i_r == -1:
                break
            if i_r != -1 and (i_n == -1 or i_r < i_n):
                end, nxt = i_r, i_r + 1
                if nxt < n and buf[nxt : nxt + 1] == b"\n":
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            else:
                end, nxt = i_n, i_n + 1
            ev = self._line(buf[start:end].decode("utf-8", errors="replace"))
            if ev is not None:
                out.append(ev)
            start = nxt
        self._buf = buf[start:]
        if len(self._buf) > self.max_line:
            raise ValueError("SSE line too long")
        return out

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if self._id is not None:
            self.last_event_id = self._id
        data = "\n".join(self._data)
        event = self._event or "message"
        had_data = bool(self._data)
        self._data = []
        self._event = ""
        ev_id = self._id
        self._id = None
        if not had_data or data == "":
            return None
        return SSEEvent(event, data, ev_id if ev_id is not None else self.last_event_id)
