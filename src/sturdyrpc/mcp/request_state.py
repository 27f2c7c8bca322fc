"""``requestState`` of 2026-07-28 multi round-trip requests: signed, so a client cannot forge one.

When a handler needs input from the client, the ``input_required`` result carries a
``requestState`` naming the method and its target (tool name, resource URI, prompt name) with
a random nonce, under an HMAC with a key that lives as long as the server object. The client
repeats the request with that state; a state that does not verify, or names another method or
target, is refused with -32602.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from ..errors import InvalidParams

__all__ = ["RequestStateSigner"]


def _mac(key: bytes, payload: str) -> str:
    import hashlib  # imported here: only 2026-07-28 input requests need them (start-up time)
    import hmac

    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()[:32]


class RequestStateSigner:
    """Makes and checks ``requestState`` values with a per-process random key."""

    __slots__ = ("_key",)

    def __init__(self) -> None:
        self._key = os.urandom(32)

    def sign(self, method: str, name: str) -> str:
        """A fresh state for a request to ``method`` on ``name``."""
        payload = f"{method}\n{name}\n{os.urandom(8).hex()}"
        return base64.urlsafe_b64encode(f"{payload}\n{_mac(self._key, payload)}".encode()).decode().rstrip("=")

    def check(self, params: dict[str, Any], method: str, name: str) -> None:
        """Raise ``InvalidParams`` unless ``params`` has no ``requestState`` or a valid one for
        ``method`` on ``name``."""
        state = params.get("requestState")
        if state is None:
            return
        try:
            raw = base64.urlsafe_b64decode(state + "=" * (-len(state) % 4)).decode()
            m, n, nonce, mac = raw.split("\n")
        except Exception:
            raise InvalidParams("Invalid params: invalid requestState", {"param": "requestState"}) from None
        import hmac

        good = _mac(self._key, f"{m}\n{n}\n{nonce}")
        if not hmac.compare_digest(good, mac) or m != method or n != name:
            raise InvalidParams("Invalid params: invalid requestState", {"param": "requestState"})
