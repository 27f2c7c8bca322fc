"""requestState tokens (2026-07-28): shared keys, key ids, rotation, expiry, binding to the
principal, the target and the arguments. Shared through a real redis-server too."""

from __future__ import annotations

import asyncio

import pytest
from support.redis import unique_prefix

from sturdyrpc.errors import InvalidParams
from sturdyrpc.mcp.request_state import KEYS_ENV, RequestStateSigner, keys_from_env, new_keys_env
from sturdyrpc.request_context import current_principal
from sturdyrpc.store import MemoryStore, open_store

KEYS = {"k1": b"\x01" * 32}


def params(state: str, **args: object) -> dict[str, object]:
    return {"name": "t", "arguments": dict(args), "requestState": state}


def refused(signer: RequestStateSigner, p: dict[str, object], method: str = "tools/call", name: str = "t") -> bool:
    try:
        signer.check(p, method, name)
    except InvalidParams as exc:
        assert exc.code == -32602 and "invalid requestState" in exc.message
        return True
    return False


def test_token_verifies_on_another_signer_with_the_same_keys() -> None:
    a, b = RequestStateSigner(KEYS), RequestStateSigner(KEYS)
    tok = a.sign("tools/call", "t", {"arguments": {"x": 1, "y": [1, 2]}})
    assert ".k1." in tok  # the key id travels in the token
    assert not refused(b, params(tok, y=[1, 2], x=1))  # member order does not matter


def test_per_process_keys_do_not_verify_elsewhere() -> None:
    a, b = RequestStateSigner({}), RequestStateSigner({})
    assert refused(b, params(a.sign("tools/call", "t", {"arguments": {}})))


def test_bound_to_target_arguments_principal_and_method() -> None:
    s = RequestStateSigner(KEYS)
    tok = s.sign("tools/call", "t", {"arguments": {"x": 1}})
    assert refused(s, params(tok, x=2))  # other arguments
    assert refused(s, params(tok, x=1), name="other")  # other tool
    assert refused(s, params(tok, x=1), method="prompts/get")
    t = current_principal.set("mallory")
    try:
        assert refused(s, params(tok, x=1))  # another principal
        tok2 = s.sign("tools/call", "t", {"arguments": {"x": 1}})
        assert not refused(s, params(tok2, x=1))
    finally:
        current_principal.reset(t)
    assert refused(s, params(tok2, x=1))  # ... and mallory's token is not the anonymous caller's


def test_tampered_and_unknown_key_refused() -> None:
    s = RequestStateSigner(KEYS)
    tok = s.sign("tools/call", "t", {"arguments": {}})
    body, kid, mac = tok.split(".")
    assert refused(s, params(f"{body}.k2.{mac}"))
    assert refused(s, params(f"{body[:-2]}AA.{kid}.{mac}"))
    assert refused(s, params("forged"))
    assert refused(RequestStateSigner({"k1": b"\x02" * 32}), params(tok))  # same kid, other secret


def test_expiry_default_ten_minutes_and_enforced() -> None:
    assert RequestStateSigner(KEYS).ttl == 600.0
    s = RequestStateSigner(KEYS, ttl=-1)  # already expired when made
    assert refused(s, params(s.sign("tools/call", "t", {"arguments": {}})))


def test_keys_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    value = new_keys_env("w") + "," + new_keys_env("old")
    monkeypatch.setenv(KEYS_ENV, value)
    a, b = RequestStateSigner(), RequestStateSigner()
    assert a.active == "w" and set(a.keys) == {"w", "old"}
    assert not refused(b, params(a.sign("tools/call", "t", {"arguments": {}})))
    with pytest.raises(ValueError):
        keys_from_env("nokey")



@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_keys_shared_through_store_and_rotation(kind: str, request: pytest.FixtureRequest) -> None:
    async def go() -> None:
        if kind == "memory":
            s1 = s2 = MemoryStore()
        else:
            srv = request.getfixturevalue("redis_server")
            prefix = unique_prefix()
            s1, s2 = open_store(srv.url, prefix=prefix), open_store(srv.url, prefix=prefix)
        a, b = RequestStateSigner({}, refresh=0.2), RequestStateSigner({}, refresh=0.2)
        try:
            await a.use_store(s1)
            await b.use_store(s2)
            assert a.keys == b.keys and a.active == b.active  # the first worker's ring won
            old = a.sign("tools/call", "t", {"arguments": {}})
            new_kid = await a.rotate()
            # the new key does not sign before every worker had time to load it
            assert a.sign("tools/call", "t", {"arguments": {}}).split(".")[1] != new_kid
            await asyncio.sleep(0.25)
            await b.reload()
            tok = a.sign("tools/call", "t", {"arguments": {}})
            assert tok.split(".")[1] == new_kid
            assert not refused(b, params(tok))
            assert not refused(b, params(old))  # two live keys: the previous one still verifies
            await a.rotate()
            await asyncio.sleep(0.25)
            await b.reload()
            b.sign("tools/call", "t", {"arguments": {}})  # b moves to the newest key too
            assert refused(b, params(old))  # two rotations later the first key is gone
        finally:
            await s1.aclose()
            if s2 is not s1:
                await s2.aclose()

    asyncio.run(go())


def test_token_size_does_not_grow_with_arguments() -> None:
    # Arguments are bound by digest, so a large call does not make a large token.
    tok = RequestStateSigner(KEYS).sign("tools/call", "t", {"arguments": {"x": "y" * 100000}})
    assert len(tok) < 300


def test_earlier_rounds_answers_travel_in_the_token() -> None:
    # Round 2 answers step1 and is asked step2; round 3 carries only step2, yet the tool, run
    # again, needs both: the token of round 2 carries step1, and check() gives it back (the
    # context answers from it: tests/unit/test_mcp_rounds.py).
    signer = RequestStateSigner(KEYS)
    step1 = {"action": "accept", "content": {"name": "Ada"}}
    step2 = {"action": "accept", "content": {"color": "blue"}}
    token = signer.sign("tools/call", "t", {"name": "t", "arguments": {}}, carry={"step1": step1})
    round3: dict[str, object] = {"name": "t", "arguments": {}, "inputResponses": {"step2": step2}, "requestState": token}
    assert signer.check(round3, "tools/call", "t") == {"step1": step1}
    assert round3["inputResponses"] == {"step2": step2}  # the request itself is left as it came
    # a changed token carries nothing: refused
    assert refused(signer, {**round3, "requestState": token[:-2] + ("AA" if token[-2:] != "AA" else "BB")})


@pytest.mark.parametrize(("responses", "ok"), [
    ({"k": {"action": "accept"}}, True), ({}, True), (None, True),
    ({"k": 12345}, False), ({"k": "text"}, False), ({"k": None}, False), ([{"k": {}}], False), ("x", False),
])
def test_input_responses_must_map_keys_to_objects(responses: object, ok: bool) -> None:
    p = {"name": "t", "arguments": {}, "inputResponses": responses}
    try:
        RequestStateSigner(KEYS).check(p, "tools/call", "t")
    except InvalidParams as exc:
        assert not ok and exc.code == -32602 and exc.data == {"param": "inputResponses"}
        return
    assert ok
