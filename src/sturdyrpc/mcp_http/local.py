"""The session table of one process (the default): sessions, their streams and events in memory."""

from __future__ import annotations

import secrets
from typing import Any

from ..auth.principal import identity_of
from .events import EventStore, sse_event, sse_priming
from .responses import SSEResponse
from .session import HTTPSession
from .sessions import Attachment, Serving, SessionTable, not_found, session_id_of, unknown_event_id

__all__ = ["LocalSessions"]


class LocalSessions(SessionTable):
    """:class:`~.sessions.SessionTable` of this process: a session lives as long as its client
    uses it (or until the caps end it); its streams' events are kept in the app's event store."""

    def __init__(self, serving: Serving) -> None:
        super().__init__(serving)
        self.events: EventStore | None = serving.events

    async def create(self, principal: Any, init_params: Any) -> HTTPSession:
        sid = secrets.token_urlsafe(32)  # 256 random bits, visible ASCII (A-Z a-z 0-9 - _)
        return self._add(sid, principal)

    def find(self, session_id: bytes | None, principal: Any) -> HTTPSession:  # in memory: nothing to await
        session = self.sessions.get(session_id.decode("latin-1") if session_id is not None else session_id_of(None))
        # (the same principal object is the same principal: no identity to work out)
        if (
            session is None
            or session.ended
            or (session.principal is not principal and identity_of(session.principal) != identity_of(principal))
        ):
            raise not_found()
        # The same principal, with this request's token (a refresh or step-up may change its
        # scopes); each request's handlers see their own request's (request_context).
        session.principal = principal
        return session

    async def delete(self, session: HTTPSession) -> None:
        await session.end()

    async def open_get(self, session: HTTPSession, *, prime: bool, retry_ms: int | None) -> Attachment:
        st = session.standalone
        if st is None or st.finished:
            self.check_streams(session)
        st = session.open_standalone()
        conn = SSEResponse()
        # A new GET replaces the one still open (its response ends cleanly): a client that
        # reconnects before the server noticed the old connection is gone must not be refused.
        st.attach(conn)
        head = b""
        if prime and self.events is not None and session.id is not None:
            head = sse_priming(await self.events.store(session.id, st.id, None), retry_ms)
        for data in session.take_held():
            await st.emit(data)

        return Attachment(conn, head, lambda: st.detach(conn))

    async def resume(self, session: HTTPSession, last_event_id: str, *, prime: bool, retry_ms: int | None) -> Attachment:
        if self.events is None or session.id is None:
            return await self.open_get(session, prime=prime, retry_ms=retry_ms)  # nothing kept: a plain GET
        found = await self.events.replay_after(session.id, last_event_id)
        if found is None:
            raise unknown_event_id()
        stream_id, events = found
        st = session.streams.get(stream_id)
        conn = SSEResponse()
        if st is not None and not st.finished:
            st.attach(conn)  # events from now on go to this connection; older ones are replayed first
        else:
            conn.end()
        replay = b"".join(sse_event(data, eid) for eid, data in events)
        return Attachment(conn, replay, None if st is None else lambda: st.detach(conn))
