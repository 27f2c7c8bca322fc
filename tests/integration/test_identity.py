"""One identity rule (issue 22): a principal is its issuer, subject and client (for an
introspection answer: the identity claims it gives), for Streamable HTTP sessions (local and
shared), tasks, ``requestState`` and ``ctx.principal``.

A second client of the same user, or a token of another issuer with the same subject, reaches
nothing of the first client's: its tasks are "not found" exactly like an unknown id, its session
is 404 exactly like an unknown session, its ``requestState`` is refused. A refreshed token of the
same client (new expiry, other scopes) reaches all of it, and ``ctx.principal`` is always the
principal of the token of the request at hand.

Real JWTs from two identity providers (keys made here, JWKS over HTTP on 127.0.0.1); the
Streamable HTTP app in process, on one worker or on two workers sharing a real redis-server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import jwt as pyjwt
import pytest
from support.auth import IdP
from support.http import ACCEPT
from support.mcp import modern_meta
from support.redis import RedisServer, redis_server, unique_prefix  # noqa: F401  # redis_server: a fixture

from sturdyrpc.auth import InvalidToken, JWTVerifier, Principal, ResourceServer, principal_from_introspection
from sturdyrpc.auth.principal import UnidentifiedPrincipal, identity_of
from sturdyrpc.mcp import MCPContext, MCPServer
from sturdyrpc.mcp.tasks import TASKS_EXTENSION
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.store import open_store
from sturdyrpc.transports.asgi import HTTPSecurity

pytestmark = pytest.mark.timeout(120)

BASE = "http://127.0.0.1:8000"
AUD = f"{BASE}/mcp"
V = "2025-11-25"
ISS = "https://issuer.example"


# ---------------------------------------------------------------------------- the rule itself


def test_identity_of_a_jwt_principal_is_issuer_subject_and_client() -> None:
    first = Principal("alice", frozenset({"mcp"}), "client-1", ISS, {"exp": 1}, 1.0)
    refreshed = Principal("alice", frozenset({"mcp", "files:read"}), "client-1", ISS, {"exp": 2}, 2.0)
    others = [
        Principal("alice", frozenset({"mcp"}), "client-2", ISS),  # another client of the same user
        Principal("alice", frozenset({"mcp"}), "client-1", "https://other.example"),  # another issuer
        Principal("alice", frozenset({"mcp"}), None, ISS),  # no client named
        Principal("bob", frozenset({"mcp"}), "client-1", ISS),
    ]
    assert identity_of(first) == identity_of(refreshed) and isinstance(identity_of(first), str)
    assert len({identity_of(p) for p in [first, *others]}) == 1 + len(others)
    # Principal equality is that rule, no second definition
    for a in [first, refreshed, *others]:
        for b in [first, refreshed, *others]:
            assert (a == b) is (identity_of(a) == identity_of(b)), (a, b)
            if a == b:
                assert hash(a) == hash(b)
    assert identity_of(None) is None  # no authentication: nothing to bind to


def test_identity_of_an_introspection_principal_is_what_the_answer_names() -> None:
    def p(**doc: Any) -> Principal:
        return principal_from_introspection({"active": True, **doc}, audiences=None, issuer=None, now=time.time())

    by_sub = p(sub="alice", client_id="c", iss=ISS, scope="a")
    assert identity_of(by_sub) == identity_of(p(sub="alice", client_id="c", iss=ISS, scope="a b", exp=time.time() + 60))
    # The subject of each of these is "alice", but they are not the same principal.
    kinds = [by_sub, p(username="alice", client_id="c", iss=ISS), p(client_id="alice", iss=ISS),
             p(sub="alice", username="alice", client_id="c", iss=ISS), p(sub="alice", client_id="c"),
             p(sub="alice", client_id="c", iss="https://other.example")]
    assert {k.subject for k in kinds} == {"alice"}
    assert len({identity_of(k) for k in kinds}) == len(kinds)


@dataclasses.dataclass(frozen=True)
class Account:
    tenant: str
    user: int


class Opaque:
    """A principal with identity equality only: nothing well defined to bind to."""


def test_identity_of_other_principals_is_their_value_or_refused() -> None:
    assert identity_of("alice") == identity_of("alice") != identity_of("bob")
    assert identity_of("1") != identity_of(1)  # typed: a string is no number
    assert identity_of(Account("t", 1)) == identity_of(Account("t", 1)) != identity_of(Account("t", 2))
    assert identity_of(("a", 1)) != identity_of(("a", "1"))
    assert identity_of({"sub": "alice", "tenant": "t"}) == identity_of({"tenant": "t", "sub": "alice"})
    for unidentifiable in (Opaque(), Account("t", Opaque()), float("nan"), {"sub": Opaque()}, {1: "a"}):  # type: ignore[arg-type]
        with pytest.raises(UnidentifiedPrincipal):
            identity_of(unidentifiable)


# ---------------------------------------------------------------------------- over HTTP: the setup


class TwoIssuers:
    """A verifier trusting two issuers: each token is verified by its own issuer's JWTVerifier."""

    def __init__(self, *idps: IdP) -> None:
        self.by_issuer = {idp.issuer: JWTVerifier(idp.issuer, idp.jwks_url, AUD) for idp in idps}

    async def verify(self, token: str) -> Principal:
        try:
            iss = pyjwt.decode(token, options={"verify_signature": False}).get("iss")
        except pyjwt.PyJWTError:
            raise InvalidToken("unreadable") from None
        verifier = self.by_issuer.get(iss)
        if verifier is None:
            raise InvalidToken("unknown issuer")
        return await verifier.verify(token)


class Meeting:
    """Lets a tool wait until ``n`` calls are running at once."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.all_here: asyncio.Event | None = None

    async def meet(self) -> None:
        if self.all_here is None:
            self.all_here = asyncio.Event()
        self.arrived += 1
        if self.arrived >= self.n:
            self.all_here.set()
        await asyncio.wait_for(self.all_here.wait(), 10)


def make_server(meeting: Meeting) -> MCPServer:
    server = MCPServer("identity", "1.0")

    @server.tool(task_support="optional")
    async def report(topic: str, seconds: float = 0.0) -> str:
        """A confidential report (as a task)."""
        await asyncio.sleep(seconds)
        return f"confidential report on {topic}"

    @server.tool()
    async def whoami(ctx: MCPContext) -> str:
        """The client and scopes of ctx.principal."""
        p = ctx.principal
        return f"{p.client_id}|{' '.join(sorted(p.scopes))}"

    @server.tool()
    async def together(ctx: MCPContext) -> str:
        """Waits until two calls run at once, then names the scopes of ctx.principal."""
        await meeting.meet()
        return " ".join(sorted(ctx.principal.scopes))

    @server.tool(task_support="optional")
    async def later(seconds: float, ctx: MCPContext) -> str:
        """Names the scopes of ctx.principal after a while (as a task)."""
        await asyncio.sleep(seconds)
        return " ".join(sorted(ctx.principal.scopes))

    @server.tool()
    async def confirm(what: str, ctx: MCPContext) -> str:
        """Asks the user to confirm (2026-07-28: input_required with a requestState)."""
        answer = await ctx.elicit(f"Confirm {what}?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
        return f"confirmed {what}: {answer.get('action')}"

    return server


@pytest.fixture
def idps() -> Iterator[tuple[IdP, IdP]]:
    one, two = IdP(), IdP()
    one.add_key("k1")
    two.add_key("k1")
    with one.serve(), two.serve():
        yield one, two


def tokens(idps: tuple[IdP, IdP]) -> dict[str, str]:
    one, two = idps
    return {
        "first": one.token(AUD, sub="alice", client_id="client-1", scope="mcp"),
        # the same client later: a new expiry, more scopes
        "refreshed": one.token(AUD, sub="alice", client_id="client-1", scope="mcp files:read", exp=int(time.time()) + 900),
        "other_client": one.token(AUD, sub="alice", client_id="client-2", scope="mcp"),
        "other_issuer": two.token(AUD, sub="alice", client_id="client-1", scope="mcp"),
    }


@asynccontextmanager
async def workers(kind: str, idps: tuple[IdP, IdP], request: pytest.FixtureRequest,
                  meeting: Meeting | None = None) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two HTTP clients: of one worker ("one") or of two workers sharing a redis-server ("shared")."""
    meeting = meeting or Meeting(2)

    def app(store: Any = None) -> Any:
        auth = ResourceServer(TwoIssuers(*idps), resource=AUD, authorization_servers=[i.issuer for i in idps])
        return mcp_http_app(make_server(meeting), security=HTTPSecurity(auth=auth), json_response=True, store=store)

    if kind == "one":
        apps = [app()] * 2
    else:
        redis: RedisServer = request.getfixturevalue("redis_server")
        prefix = unique_prefix()
        apps = [app(open_store(redis.url, prefix=prefix)) for _ in range(2)]
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url=BASE, timeout=20))
                   for a in apps]
        try:
            yield clients
        finally:
            for a in dict.fromkeys(apps):
                await a.aclose()


class Session:
    """One MCP session over Streamable HTTP, through whichever worker each request names."""

    def __init__(self, clients: list[httpx.AsyncClient], token: str) -> None:
        self.clients, self.token = clients, token
        self.sid: str | None = None
        self.next_id = 0

    def headers(self) -> dict[str, str]:
        h = {"accept": ACCEPT, "mcp-protocol-version": V, "authorization": f"Bearer {self.token}"}
        if self.sid is not None:
            h["mcp-session-id"] = self.sid
        return h

    async def initialize(self, on: int = 0) -> None:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        r = await self.clients[on].post("/mcp", json=body, headers=self.headers())
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        r = await self.clients[on].post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers())
        assert r.status_code == 202

    async def post(self, method: str, params: dict[str, Any], on: int = 0) -> httpx.Response:
        self.next_id += 1
        return await self.clients[on].post("/mcp", json={"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params},
                                           headers=self.headers())

    async def call(self, method: str, params: dict[str, Any], on: int = 0) -> dict[str, Any]:
        r = await self.post(method, params, on)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    async def result(self, method: str, params: dict[str, Any], on: int = 0) -> dict[str, Any]:
        reply = await self.call(method, params, on)
        assert "result" in reply, reply
        out: dict[str, Any] = reply["result"]
        return out


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


ATTACKERS = ["other_client", "other_issuer"]
KINDS = ["one", "shared"]


# ---------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("attacker", ATTACKERS)
@pytest.mark.parametrize("kind", KINDS)
def test_another_client_or_issuer_sees_nothing_of_the_tasks(kind: str, attacker: str, idps: tuple[IdP, IdP],
                                                           request: pytest.FixtureRequest) -> None:
    tok = tokens(idps)

    async def main() -> None:
        async with workers(kind, idps, request) as ws:
            owner = Session(ws, tok["first"])
            await owner.initialize(on=0)
            done = (await owner.result("tools/call", {"name": "report", "arguments": {"topic": "q3"}, "task": {}}))["task"]["taskId"]
            assert text(await owner.result("tasks/result", {"taskId": done})) == "confidential report on q3"
            running = (await owner.result("tools/call", {"name": "report", "arguments": {"topic": "q4", "seconds": 1.0},
                                                         "task": {}}))["task"]["taskId"]
            for on in (0, 1):
                mallory = Session(ws, tok[attacker])
                await mallory.initialize(on=on)
                unknown = await mallory.call("tasks/get", {"taskId": "no-such-task"}, on=on)
                assert unknown["error"]["code"] == -32602
                for tid in (done, running):
                    not_found = {**unknown["error"], "data": {"taskId": tid}}
                    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                        reply = await mallory.call(method, {"taskId": tid}, on=on)
                        assert reply.get("error") == not_found, (method, reply)
                assert (await mallory.result("tasks/list", {}, on=on))["tasks"] == []
                # without a session (2026-07-28) just the same
                for method in ("tasks/get", "tasks/update", "tasks/cancel"):
                    body = {"jsonrpc": "2.0", "id": 9, "method": method,
                            "params": {"taskId": running, "inputResponses": {},
                                       "_meta": modern_meta(caps={"extensions": {TASKS_EXTENSION: {}}})}}
                    h = {"accept": ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": method, "mcp-name": running,
                         "authorization": f"Bearer {tok[attacker]}"}
                    r = await ws[on].post("/mcp", json=body, headers=h)
                    assert r.json()["error"] == {**unknown["error"], "data": {"taskId": running}}, (method, r.text)
            # the owner's tasks are untouched, and a refreshed token of the same client reaches them
            owner.token = tok["refreshed"]
            for on in (0, 1):
                assert [t["taskId"] for t in (await owner.result("tasks/list", {}, on=on))["tasks"]] == [done, running]
            assert text(await owner.result("tasks/result", {"taskId": running}, on=1)) == "confidential report on q4"
            assert (await owner.result("tasks/get", {"taskId": running}))["status"] == "completed"

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_sees_the_principal_of_the_request_that_created_it(kind: str, idps: tuple[IdP, IdP],
                                                                 request: pytest.FixtureRequest) -> None:
    tok = tokens(idps)

    async def main() -> None:
        async with workers(kind, idps, request) as ws:
            s = Session(ws, tok["first"])
            await s.initialize()
            tid = (await s.result("tools/call", {"name": "later", "arguments": {"seconds": 0.5}, "task": {}}))["task"]["taskId"]
            s.token = tok["refreshed"]  # the session goes on with more scopes while the task runs
            assert text(await s.result("tools/call", {"name": "whoami", "arguments": {}})) == "client-1|files:read mcp"
            assert text(await s.result("tasks/result", {"taskId": tid}, on=1)) == "mcp"

    asyncio.run(main())


# ---------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("attacker", ATTACKERS)
@pytest.mark.parametrize("kind", KINDS)
def test_another_client_or_issuer_cannot_use_the_session(kind: str, attacker: str, idps: tuple[IdP, IdP],
                                                        request: pytest.FixtureRequest) -> None:
    tok = tokens(idps)

    async def main() -> None:
        async with workers(kind, idps, request) as ws:
            owner = Session(ws, tok["first"])
            await owner.initialize(on=0)
            assert text(await owner.result("tools/call", {"name": "whoami", "arguments": {}}, on=1)) == "client-1|mcp"
            for on in (0, 1):  # the worker that made the session, and one holding a replica
                mallory = Session(ws, tok[attacker])
                mallory.sid = "no-such-session"
                unknown = await mallory.post("tools/call", {"name": "whoami", "arguments": {}}, on=on)
                assert unknown.status_code == 404
                mallory.sid = owner.sid
                for method, params in (("tools/call", {"name": "whoami", "arguments": {}}), ("tools/list", {})):
                    r = await mallory.post(method, params, on=on)
                    assert (r.status_code, r.content) == (404, unknown.content), (on, method, r.text)
                r = await ws[on].get("/mcp", headers=mallory.headers())
                assert r.status_code == 404
                r = await ws[on].delete("/mcp", headers=mallory.headers())
                assert r.status_code == 404
            # the session still works for its owner, and with a refreshed token of the same client
            owner.token = tok["refreshed"]
            for on in (0, 1):
                assert text(await owner.result("tools/call", {"name": "whoami", "arguments": {}}, on=on)) == "client-1|files:read mcp"

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_ctx_principal_is_the_token_of_the_request_at_hand(kind: str, idps: tuple[IdP, IdP], request: pytest.FixtureRequest) -> None:
    tok = tokens(idps)

    async def main() -> None:
        async with workers(kind, idps, request) as ws:
            s = Session(ws, tok["first"])
            await s.initialize(on=0)
            for token, scopes in (("first", "mcp"), ("refreshed", "files:read mcp"), ("first", "mcp")):
                s.token = tok[token]
                for on in (0, 1):
                    assert text(await s.result("tools/call", {"name": "whoami", "arguments": {}}, on=on)) == f"client-1|{scopes}"

    asyncio.run(main())


def test_two_requests_in_flight_with_two_tokens_each_see_their_own(idps: tuple[IdP, IdP], request: pytest.FixtureRequest) -> None:
    # Not "the session's latest token": each request's own, even while another runs.
    tok = tokens(idps)

    async def main() -> None:
        async with workers("one", idps, request) as ws:
            s = Session(ws, tok["first"])
            await s.initialize()
            other = Session(ws, tok["refreshed"])
            other.sid, other.next_id = s.sid, 100
            a, b = await asyncio.gather(s.result("tools/call", {"name": "together", "arguments": {}}),
                                        other.result("tools/call", {"name": "together", "arguments": {}}))
            assert (text(a), text(b)) == ("mcp", "files:read mcp")

    asyncio.run(main())


# ---------------------------------------------------------------------------- requestState


@pytest.mark.parametrize("attacker", ATTACKERS)
@pytest.mark.parametrize("kind", KINDS)
def test_another_client_or_issuer_cannot_replay_the_request_state(kind: str, attacker: str, idps: tuple[IdP, IdP],
                                                                 request: pytest.FixtureRequest) -> None:
    tok = tokens(idps)
    params = {"name": "confirm", "arguments": {"what": "the transfer"},
              "_meta": modern_meta(caps={"elicitation": {}})}

    async def call(c: httpx.AsyncClient, token: str, extra: dict[str, Any]) -> dict[str, Any]:
        h = {"accept": ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "confirm",
             "authorization": f"Bearer {token}"}
        r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, **extra}}, headers=h)
        out: dict[str, Any] = r.json()
        assert r.status_code == (200 if "result" in out else 400), r.text
        return out

    async def main() -> None:
        async with workers(kind, idps, request) as ws:
            first = (await call(ws[0], tok["first"], {}))["result"]
            assert first["resultType"] == "input_required"
            (key, _), = first["inputRequests"].items()
            retry = {"inputResponses": {key: {"action": "accept", "content": {"ok": True}}}, "requestState": first["requestState"]}
            for on in (0, 1):
                refused = await call(ws[on], tok[attacker], retry)
                assert refused["error"]["code"] == -32602 and "invalid requestState" in refused["error"]["message"], refused
            done = (await call(ws[1], tok["refreshed"], retry))["result"]  # the same client, its token refreshed
            assert done["resultType"] == "complete" and text(done) == "confirmed the transfer: accept"

    asyncio.run(main())


def test_a_verifier_whose_principals_have_no_identity_gets_no_session() -> None:
    # Objects compared by identity alone are never "the same principal" (not across requests, not
    # across workers): a session bound to one could never be used again, or by repr, by anyone.
    from sturdyrpc.transports.asgi import BearerAuth

    app = mcp_http_app(make_server(Meeting(2)), json_response=True, security=HTTPSecurity(auth=BearerAuth(lambda token: Opaque())))
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as c:
            r = await c.post("/mcp", json=body, headers={"accept": ACCEPT, "authorization": "Bearer x"})
            assert r.status_code == 500 and "mcp-session-id" not in r.headers
            assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32603, "message": "Internal error"}}
            assert not app.sessions
        await app.aclose()

    asyncio.run(main())
