"""Typed verification failures. Their ``reason`` is for the server's log only: responses carry
fixed texts (RFC 6750 error codes), never a reason."""

from __future__ import annotations

__all__ = ["InvalidToken", "VerificationUnavailable", "UnknownKey", "MISSING_PYJWT"]

#: What a user asking for JWT verification without the ``auth`` extra is told.
MISSING_PYJWT = "JWT verification needs PyJWT, which is not installed; install it with: pip install 'sturdyrpc[auth]'"


class InvalidToken(Exception):
    """The token is not acceptable (malformed, bad signature, expired, other issuer or
    audience, inactive...): 401 ``invalid_token``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownKey(InvalidToken):
    """The token names a signing key the key set does not hold (the caller may refresh the
    key set once and try again)."""

    def __init__(self, kid: str | None) -> None:
        super().__init__("unknown signing key")
        self.kid = kid


class VerificationUnavailable(Exception):
    """The token cannot be checked now (the JWKS or the introspection endpoint cannot be
    reached or answered nonsense). Never a reason to let the token through: 503."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
