"""The peer package keeps its public face: every name importable from ``sturdyrpc.peer``, and the
exceptions named there (telemetry records ``error.type`` by the class's qualified name)."""

from __future__ import annotations

import sturdyrpc.peer as peer
from sturdyrpc.peer import ConnectionClosed, InvalidReply, RequestTimeout

PUBLIC = [
    "Peer",
    "PeerContext",
    "PendingCall",
    "MessageTransport",
    "FrameSource",
    "NowaitSender",
    "RequestTimeout",
    "ConnectionClosed",
    "InvalidReply",
    "ProgressCallback",
    "SendHook",
    "NoticeHook",
]


def test_every_public_name_is_importable_from_the_package() -> None:
    missing = [name for name in PUBLIC if not hasattr(peer, name)]
    assert missing == []
    assert set(peer.__all__) <= set(PUBLIC)


def test_the_exceptions_keep_their_public_qualified_names() -> None:
    # docs/OTEL.md: a client failure's error.type is e.g. "sturdyrpc.peer.ConnectionClosed"
    names = [f"{t.__module__}.{t.__qualname__}" for t in (RequestTimeout, ConnectionClosed, InvalidReply)]
    assert names == ["sturdyrpc.peer.RequestTimeout", "sturdyrpc.peer.ConnectionClosed", "sturdyrpc.peer.InvalidReply"]


def test_the_exceptions_pickle_by_their_public_names() -> None:
    import pickle

    back = pickle.loads(pickle.dumps(ConnectionClosed("gone")))
    assert type(back) is ConnectionClosed and back.args == ("gone",)
