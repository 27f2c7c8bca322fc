"""``requestState`` of 2026-07-28 multi round-trip requests: signed, expiring, bound to the caller.

When a handler needs input from the client, the ``input_required`` result carries a
``requestState`` token; the client repeats the request with it. A token is

    base64url(payload) "." key-id "." base64url(HMAC-SHA256(key, payload)[:16])

where the payload names the method, its target (tool name, resource URI, prompt name), a digest
of the arguments, what the next round must get back (the answers of earlier rounds, by input
key: a client repeating a request sends only the last round's ``inputResponses``), a digest of the principal's identity (:func:`~sturdyrpc.auth.identity_of` of
:func:`~sturdyrpc.request_context.request_principal`: another client of the same user, or a token
of another issuer with the same subject, cannot use it; a refreshed token of the same client can),
an expiry time (``ttl``, 10 minutes by default) and a nonce. A token that does not verify, has
expired, names an unknown key, or was made for another method, target, arguments or principal is
refused with -32602 "invalid requestState".

Keys are shared so that a retry can land on any worker or machine:

- from configuration: ``RequestStateSigner(keys={"k1": secret})`` or the environment variable
  ``STURDYRPC_REQUEST_STATE_KEYS`` (``kid:hexsecret[,kid:hexsecret]``, the first one signs;
  ``sturdyrpc ... --workers N`` sets it for its workers);
- through a :class:`~sturdyrpc.store.Store` (:meth:`RequestStateSigner.use_store`): the first
  worker creates the key ring (compare-and-set), every worker reads it and re-reads it every
  ``refresh`` seconds. :meth:`RequestStateSigner.rotate` adds a new key that starts signing only
  ``refresh`` seconds later, so every worker knows it before any token made with it arrives;
  the previous key keeps verifying (two live keys) until the next rotation.

Without either, a random per-process key is used (one process only).
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import codec
from ..auth.principal import identity_of
from ..errors import InvalidParams
from ..request_context import request_principal

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["RequestStateSigner", "KEYS_ENV", "RING_KEY"]

#: Environment variable with shared keys: ``kid:hexsecret[,kid:hexsecret]`` (the first one signs).
KEYS_ENV = "STURDYRPC_REQUEST_STATE_KEYS"
#: The store record holding the key ring.
RING_KEY = "request-state-keys"

_INVALID = "Invalid params: invalid requestState"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: bytes) -> bytes:
    import hashlib  # imported here: only 2026-07-28 input requests need them (start-up time)
    import hmac

    return hmac.new(key, payload, hashlib.sha256).digest()[:16]


def _digest(value: Any) -> str:
    import hashlib

    return hashlib.sha256(codec.encode(_canonical(value))).hexdigest()[:24]


def _canonical(value: Any) -> Any:
    """``value`` with object members in key order, so the same arguments give the same digest."""
    if type(value) is dict:
        return {k: _canonical(value[k]) for k in sorted(value)}
    if type(value) is list:
        return [_canonical(v) for v in value]
    return value


def keys_from_env(value: str | None = None) -> dict[str, bytes]:
    """Parse ``kid:hexsecret[,kid:hexsecret]`` (default: :data:`KEYS_ENV`); first one signs."""
    text = os.environ.get(KEYS_ENV, "") if value is None else value
    out: dict[str, bytes] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kid, _, secret = part.partition(":")
        if not kid or "." in kid or not secret:
            raise ValueError(f"{KEYS_ENV}: expected kid:hexsecret, got {part!r}")
        out[kid] = bytes.fromhex(secret)
    return out


def new_keys_env(kid: str | None = None) -> str:
    """A fresh :data:`KEYS_ENV` value with one random key (for a launcher to hand its workers)."""
    return f"{kid or os.urandom(4).hex()}:{os.urandom(32).hex()}"


class RequestStateSigner:
    """Makes and checks ``requestState`` tokens (see the module docstring).

    ``keys``: key id -> secret (the ``active`` one signs, by default the first); None reads
    :data:`KEYS_ENV`, and without it a random per-process key is made. ``ttl``: seconds a token
    stays valid. ``refresh``: seconds between re-reads of a store's key ring.
    """

    def __init__(self, keys: Mapping[str, bytes] | None = None, *, active: str | None = None, ttl: float = 600.0,
                 refresh: float = 30.0) -> None:
        if keys is None:
            keys = keys_from_env()
        if not keys:
            keys = {os.urandom(4).hex(): os.urandom(32)}
        self.keys: dict[str, bytes] = dict(keys)
        self.active = active if active is not None else next(iter(self.keys))
        if self.active not in self.keys:
            raise ValueError(f"active key {self.active!r} is not among the keys")
        self.ttl = ttl
        self.refresh = refresh
        self._pending: tuple[str, float] | None = None  # (kid, unix time it starts signing)
        self._store: Store | None = None
        self._loaded_at = 0.0

    # ------------------------------------------------------------------ tokens

    def _signing_kid(self) -> str:
        p = self._pending
        if p is not None and time.time() >= p[1]:
            self.active, self._pending = p[0], None
        return self.active

    def sign(self, method: str, name: str, params: Any = None, carry: Mapping[str, Any] | None = None) -> str:
        """A fresh token for a request to ``method`` on ``name`` with request ``params`` (their
        ``arguments`` are bound), for the current principal. ``carry``: what the next round gets
        back from :meth:`check` (the answers of the rounds so far, by input key), signed with it."""
        args = params.get("arguments") if type(params) is dict else None
        payload = codec.encode([method, name, _digest(args), _digest(identity_of(request_principal())),
                                int(time.time() + self.ttl), os.urandom(8).hex(), dict(carry or {})])
        given = params.get("inputResponses")
        if given is not None and (type(given) is not dict or any(type(v) is not dict for v in given.values())):
            raise InvalidParams("Invalid params: 'inputResponses' must map each key to a response object",
                                {"param": "inputResponses"})
        kid = self._signing_kid()
        return f"{_b64(payload)}.{kid}.{_b64(_mac(self.keys[kid], payload))}"

    def check(self, params: dict[str, Any], method: str, name: str) -> dict[str, Any]:
        """Raise ``InvalidParams`` unless ``params`` has no ``requestState`` or a valid one for
        ``method`` on ``name`` with these arguments, from this principal, not expired, and
        ``inputResponses`` (if any) is an object of objects. Returns what the token carries
        (``sign(carry=...)``; empty without a token)."""
        given = params.get("inputResponses")
        if given is not None and (type(given) is not dict or any(type(v) is not dict for v in given.values())):
            raise InvalidParams("Invalid params: 'inputResponses' must map each key to a response object",
                                {"param": "inputResponses"})
        state = params.get("requestState")
        if state is None:
            return {}
        import hmac

        try:
            body, kid, mac = state.split(".")
            payload = _unb64(body)
            key = self.keys.get(kid)
            if key is None or not hmac.compare_digest(_mac(key, payload), _unb64(mac)):
                raise ValueError
            m, n, args, who, expires, _nonce, *rest = codec.decode(payload)
        except Exception:
            raise InvalidParams(_INVALID, {"param": "requestState"}) from None
        if (m != method or n != name or type(expires) is not int or expires < time.time()
                or args != _digest(params.get("arguments")) or who != _digest(identity_of(request_principal()))):
            raise InvalidParams(_INVALID, {"param": "requestState"})
        carried = rest[0] if rest else {}  # a token of an older release carries nothing
        return carried if type(carried) is dict else {}

    # -------------------------------------------------------------- shared keys

    async def use_store(self, store: Store) -> None:
        """Share the key ring through ``store``: create it if no worker has yet, else adopt it."""
        self._store = store
        await self.reload()

    async def reload(self) -> None:
        """Re-read the key ring from the store (called every ``refresh`` seconds by its user)."""
        store = self._store
        if store is None:
            return
        raw = await store.get(RING_KEY)
        if raw is None:
            ring = self._ring()
            if not await store.compare_and_set(RING_KEY, None, codec.encode(ring)):
                raw = await store.get(RING_KEY)  # another worker was first: use its ring
        if raw is not None:
            self._adopt(codec.decode(raw))
        self._loaded_at = time.monotonic()

    def due(self) -> bool:
        """Whether the store's key ring should be re-read now."""
        return self._store is not None and time.monotonic() - self._loaded_at >= self.refresh

    async def rotate(self) -> str:
        """Add a new key (it signs ``refresh`` seconds from now; the current one keeps verifying
        until the next rotation). Returns the new key id. Atomic across workers."""
        store = self._store
        kid = os.urandom(4).hex()
        secret = os.urandom(32)
        start = time.time() + self.refresh
        for _ in range(20):
            raw = await store.get(RING_KEY) if store is not None else None
            ring = codec.decode(raw) if raw is not None else self._ring()
            cur = ring["active"]
            pending = ring.get("next")
            if pending is not None and time.time() >= ring.get("next_from", 0):
                cur = pending  # the previous rotation's key signs by now
            new = {"keys": {cur: ring["keys"][cur], kid: secret.hex()}, "active": cur, "next": kid, "next_from": start}
            if store is None or await store.compare_and_set(RING_KEY, raw, codec.encode(new)):
                self._adopt(new)
                return kid
        raise RuntimeError("request-state key ring kept changing under rotation")

    def _ring(self) -> dict[str, Any]:
        ring: dict[str, Any] = {"keys": {k: v.hex() for k, v in self.keys.items()}, "active": self.active}
        if self._pending is not None:
            ring["next"], ring["next_from"] = self._pending
        return ring

    def _adopt(self, ring: dict[str, Any]) -> None:
        self.keys = {k: bytes.fromhex(v) for k, v in ring["keys"].items()}
        self.active = ring["active"]
        nxt = ring.get("next")
        self._pending = (nxt, float(ring.get("next_from", 0))) if nxt is not None else None
