"""``subscriptions/listen`` (2026-07-28): notification streams that belong to one request.

A client opens a stream with the notifications it wants (list changes, updates of given
resource URIs); the server acknowledges what it agreed to, then forwards each matching
notification, tagged with the stream's subscription id, until the client cancels the request
(no reply then) or the server ends the stream (the final ``resultType: "complete"`` result).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..dispatch import Context
from ..errors import InvalidParams
from ..peer import Peer

__all__ = ["META_SUBSCRIPTION_ID", "Listener", "ListenStreams"]

log = logging.getLogger("sturdyrpc.mcp")

#: ``_meta`` key naming the ``subscriptions/listen`` stream a message belongs to.
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

#: Seconds between checks, on a quiet listen stream, that its connection is still open.
LISTEN_POLL = 0.25


class Listener:
    """One open ``subscriptions/listen`` stream: the filter the server agreed to, and a queue
    of ``(method, params)`` waiting to be sent (None: the server ends the stream)."""

    __slots__ = ("sub_id", "tools", "prompts", "resources", "uris", "queue", "ending")

    def __init__(self, sub_id: Any, agreed: dict[str, Any]) -> None:
        self.sub_id = sub_id
        self.tools = agreed.get("toolsListChanged") is True
        self.prompts = agreed.get("promptsListChanged") is True
        self.resources = agreed.get("resourcesListChanged") is True
        self.uris: frozenset[str] = frozenset(agreed.get("resourceSubscriptions") or ())
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue(maxsize=256)
        #: The server ends this stream (also seen without the queue's None, should it be full).
        self.ending = False

    def push(self, item: tuple[str, dict[str, Any]] | None) -> None:
        """Queue a notification (or None: the end) without waiting."""
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:  # a stalled reader: drop (list changes coalesce anyway)
            log.debug("subscription %r: queue full, %r dropped", self.sub_id, item)

    def wants(self, method: str, params: dict[str, Any]) -> bool:
        """Whether this stream agreed to carry ``method`` with ``params``."""
        if method == "notifications/resources/updated":
            return params.get("uri") in self.uris
        kind = method.split("/")[1]
        return (kind == "tools" and self.tools) or (kind == "prompts" and self.prompts) or (kind == "resources" and self.resources)


def agree(wanted: dict[str, Any], *, has_prompts: bool, has_resources: bool,
          may_read: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The part of a listen filter this server honours (unsupported types are left out, and
    resources the caller may not read: ``may_read(uri)`` False)."""
    for key in ("toolsListChanged", "promptsListChanged", "resourcesListChanged"):
        if key in wanted and type(wanted[key]) is not bool:
            raise InvalidParams(f"Invalid params: 'notifications.{key}' must be a boolean", {"param": f"notifications.{key}"})
    uris = wanted.get("resourceSubscriptions")
    if uris is not None and (type(uris) is not list or not all(type(u) is str for u in uris)):
        raise InvalidParams(
            "Invalid params: 'notifications.resourceSubscriptions' must be a list of strings", {"param": "notifications.resourceSubscriptions"}
        )
    agreed: dict[str, Any] = {}
    if wanted.get("toolsListChanged") is True:
        agreed["toolsListChanged"] = True
    if wanted.get("promptsListChanged") is True and has_prompts:
        agreed["promptsListChanged"] = True
    if wanted.get("resourcesListChanged") is True and has_resources:
        agreed["resourcesListChanged"] = True
    if uris and has_resources:
        allowed = [u for u in dict.fromkeys(uris) if may_read is None or may_read(u)]
        if allowed:
            agreed["resourceSubscriptions"] = allowed
    return agreed


class ListenStreams:
    """The open ``subscriptions/listen`` streams of one server, over every transport."""

    def __init__(self) -> None:
        self._listeners: set[Listener] = set()

    def __len__(self) -> int:
        return len(self._listeners)

    def publish(self, method: str, params: dict[str, Any]) -> None:
        """Queue ``method`` for every stream that agreed to carry it."""
        for listener in list(self._listeners):
            if listener.wants(method, params):
                listener.push((method, params))

    def close_all(self) -> int:
        """End every open stream gracefully; returns how many there were."""
        n = 0
        for listener in list(self._listeners):
            listener.ending = True
            listener.push(None)
            n += 1
        return n

    async def serve(self, ctx: Context, agreed: dict[str, Any], peer: Peer | None) -> dict[str, Any]:
        """Acknowledge ``agreed``, forward notifications until the stream ends; return the final
        result's ``_meta`` (the caller finishes the result)."""
        notify: Callable[[str, Any], Awaitable[None]] = getattr(ctx, "notify")  # noqa: B009  # PeerContext, StatelessContext
        sub_id = ctx.id
        listener = Listener(sub_id, agreed)
        self._listeners.add(listener)  # before the acknowledgement: nothing after it is missed
        try:
            await notify("notifications/subscriptions/acknowledged", {"_meta": {META_SUBSCRIPTION_ID: sub_id}, "notifications": agreed})
            while not listener.ending:
                try:
                    item = await asyncio.wait_for(listener.queue.get(), LISTEN_POLL)
                except TimeoutError:
                    if peer is not None and peer.is_closing:
                        break  # the connection is ending: end the stream gracefully
                    continue
                if item is None:
                    break
                method, p = item
                await notify(method, {**p, "_meta": {META_SUBSCRIPTION_ID: sub_id}})
        finally:
            self._listeners.discard(listener)
        return {"_meta": {META_SUBSCRIPTION_ID: sub_id}}
