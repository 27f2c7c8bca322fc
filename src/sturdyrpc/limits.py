"""Resource limits, on by default. One immutable object, passed where it is needed."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Limits", "DEFAULT_LIMITS"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what a peer may make us hold.

    Every breach of a message limit is answered with a clear -32600 error (id null) and the
    connection keeps serving; the in-flight limits hold requests back (stream transports) or
    refuse them with HTTP 503 (``max_server_in_flight``); nothing is buffered without bound.
    """

    #: Largest single message (one line, one Content-Length body, one HTTP body) in bytes.
    max_message_bytes: int = 16 * 1024 * 1024
    #: Deepest nesting of arrays/objects accepted in one message.
    max_depth: int = 256
    #: Most elements in one batch.
    max_batch: int = 1000
    #: Most incoming requests running at once per connection, each batch element counting as
    #: one; beyond it the transport stops reading (backpressure) rather than buffering or dropping.
    max_in_flight: int = 256
    #: Threads for synchronous (blocking) handlers, shared per server.
    max_threads: int = 16
    #: Most requests running at once across a whole HTTP server, where there is no connection to
    #: hold back: a POST arriving when it is full is answered 503 with ``Retry-After``.
    max_server_in_flight: int = 1024
    #: Messages up to this many bytes are within both message limits without counting brackets
    #: (valid JSON of n bytes nests at most n // 2 deep): worked out from the others.
    short_message: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_depth", "max_batch", "max_in_flight", "max_threads", "max_server_in_flight"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer")
        object.__setattr__(self, "short_message", min(2 * self.max_depth, self.max_message_bytes))


DEFAULT_LIMITS = Limits()
