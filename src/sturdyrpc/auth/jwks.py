"""JWT verification against an issuer's JWKS: the key cache (I/O) around :func:`verify_jwt`.

The key set is fetched on first use and kept for ``ttl`` seconds. A token naming an unknown
``kid`` (the issuer rotated its keys) triggers one refresh, at most once per
``refresh_interval`` seconds (a flood of made-up ``kid`` values cannot turn into a flood of
fetches). Every fetch has a deadline (``timeout``, for the whole answer). Fetch failures never
let a token through: with no usable key set the request gets 503; a key set older than ``ttl``
keeps serving while a fresh one is fetched or the issuer cannot be reached, for at most
``max_stale`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from .errors import InvalidToken, UnknownKey, VerificationUnavailable
from .fetch import FETCH_TIMEOUT, GetJSON, httpx_get_json, within
from .jwt_verify import DEFAULT_ALGORITHMS, JWTRules, KeySet, require_pyjwt, verify_jwt
from .principal import Principal

__all__ = ["JWKSCache", "JWTVerifier"]

log = logging.getLogger("sturdyrpc.auth")


class JWKSCache:
    """The signing keys published at ``url``, fetched when needed.

    One fetch at a time, shared: every request that needs keys while a fetch is under way waits
    for that one (each for no longer than its own deadline, see
    :class:`~.resource_server.ResourceServer`), and a request giving up does not cancel it for
    the others. ``timeout``: seconds a fetch may take from start to the last byte (any ``fetch``
    function, yours included, is cut off then: :class:`VerificationUnavailable`). Keys older than
    ``ttl`` but within ``max_stale`` keep serving while a fresh set is fetched in the background,
    so a slow issuer slows down no request that already has a key.
    """

    def __init__(self, url: str, *, fetch: GetJSON | None = None, ttl: float = 300.0, refresh_interval: float = 10.0,
                 max_stale: float = 3600.0, clock: Callable[[], float] = time.monotonic,
                 timeout: float = FETCH_TIMEOUT) -> None:
        require_pyjwt()
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.url = url
        self.timeout = float(timeout)
        self.fetch = fetch if fetch is not None else httpx_get_json(self.timeout)
        self.ttl = ttl
        self.refresh_interval = refresh_interval
        self.max_stale = max_stale
        self.clock = clock
        self._keys: KeySet | None = None
        self._fetched_at = 0.0  # when the key set in hand was fetched
        self._tried_at: float | None = None  # the last attempt, successful or not
        self._pending: asyncio.Task[KeySet] | None = None  # the fetch under way

    async def keys(self) -> KeySet:
        """The key set: fetched first if there is none (or it is past ``ttl + max_stale``);
        past ``ttl`` only, the one in hand while a fresh one is fetched."""
        keys = self._keys
        if keys is not None:
            age = self.clock() - self._fetched_at
            if age < self.ttl:
                return keys
            if age < self.ttl + self.max_stale:
                if self._under_way() is None and not self._tried_recently(self.clock()):
                    self._start(self.clock())
                return keys
        return await self._refresh()

    async def refresh_for(self, kid: str | None) -> KeySet | None:
        """A fresh key set because a token named ``kid``, which the cached set lacks; None when
        a refresh happened too recently to try again (the token is then refused)."""
        pending = self._under_way()
        if pending is None:
            now = self.clock()
            if self._tried_recently(now):
                return None
            pending = self._start(now)
        return await asyncio.shield(pending)

    async def _refresh(self) -> KeySet:
        pending = self._under_way()
        if pending is None:
            now = self.clock()
            if self._tried_recently(now):
                # Fetched or tried moments ago: a down issuer is not asked again for every request.
                return self._usable(now, "JWKS fetched moments ago")
            pending = self._start(now)
        # Shielded: a request that stops waiting (its deadline, its client gone) leaves the
        # fetch running for the requests still waiting and for the next ones.
        return await asyncio.shield(pending)

    def _tried_recently(self, now: float) -> bool:
        return self._tried_at is not None and now - self._tried_at < self.refresh_interval

    def _under_way(self) -> asyncio.Task[KeySet] | None:
        task = self._pending
        # A task of another event loop (a cache reused across asyncio.run calls) is no one's to await.
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return None
        return task

    def _start(self, now: float) -> asyncio.Task[KeySet]:
        self._tried_at = now
        task = asyncio.get_running_loop().create_task(self._fetch(now), name=f"JWKS {self.url}")
        # Its outcome reaches every waiter; with none left (all gave up), it is not "never retrieved".
        task.add_done_callback(_retrieve)
        self._pending = task
        return task

    async def _fetch(self, now: float) -> KeySet:
        try:
            keys = KeySet.from_jwks(await within(self.timeout, self.fetch(self.url), "JWKS"))
        except VerificationUnavailable as exc:
            return self._failed(now, exc.reason)
        except ValueError:
            return self._failed(now, "not a JWKS document")
        finally:
            self._pending = None
        if not len(keys):
            return self._failed(now, "no usable signing key")
        self._keys, self._fetched_at = keys, now
        return keys

    def _failed(self, now: float, reason: str) -> KeySet:
        log.warning("JWKS %s could not be fetched: %s", self.url, reason)
        return self._usable(now, reason)

    def _usable(self, now: float, reason: str) -> KeySet:
        """The keys in hand unless there are none or they are older than ``ttl + max_stale``."""
        if self._keys is not None and now - self._fetched_at < self.ttl + self.max_stale:
            return self._keys
        raise VerificationUnavailable(f"JWKS unavailable: {reason}")


def _retrieve(task: asyncio.Task[KeySet]) -> None:
    if not task.cancelled():
        task.exception()


class JWTVerifier:
    """Verifies JWT access tokens issued by ``issuer`` for ``audience`` (RFC 8707: this MCP
    server's URL) with the keys published at ``jwks_url``.

    ``algorithms``: the allow-list (asymmetric only; ``none`` and HS* are refused when the
    verifier is built). ``leeway``: seconds of clock skew allowed on ``exp``/``nbf``/``iat``.
    ``require_at_jwt``: accept only tokens whose header says ``typ: at+jwt`` (RFC 9068); by
    default the generic ``JWT`` and no ``typ`` pass too, any other type is refused.
    ``timeout``: the deadline of one JWKS fetch (when the verifier makes its own
    :class:`JWKSCache`). ``clock``: seconds since the epoch (tests inject one). Needs the
    ``auth`` extra (PyJWT): without it, building one raises ModuleNotFoundError naming
    ``pip install 'sturdyrpc[auth]'``.
    """

    def __init__(self, issuer: str, jwks_url: str, audience: str | Iterable[str], *,
                 algorithms: Iterable[str] = DEFAULT_ALGORITHMS, leeway: float = 30.0, require_at_jwt: bool = False,
                 clock: Callable[[], float] = time.time, jwks: JWKSCache | None = None, fetch: GetJSON | None = None,
                 timeout: float = FETCH_TIMEOUT) -> None:
        require_pyjwt()
        self.rules = JWTRules.build(issuer, audience, algorithms, leeway, require_at_jwt=require_at_jwt)
        self.jwks = jwks if jwks is not None else JWKSCache(jwks_url, fetch=fetch, timeout=timeout)
        self.clock = clock

    async def verify(self, token: str) -> Principal:
        """The principal of ``token``; :class:`InvalidToken` or :class:`VerificationUnavailable`."""
        keys = await self.jwks.keys()
        try:
            return verify_jwt(token, keys, self.rules, self.clock())
        except UnknownKey as unknown:
            fresh = await self.jwks.refresh_for(unknown.kid)
            if fresh is None:
                raise
        try:
            return verify_jwt(token, fresh, self.rules, self.clock())
        except UnknownKey:
            raise InvalidToken("unknown signing key") from None
