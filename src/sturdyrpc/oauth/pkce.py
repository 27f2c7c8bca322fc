"""PKCE (RFC 7636) with the S256 method, and the ``state`` value: pure functions."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass

__all__ = ["PKCE", "s256_challenge", "new_state"]

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def s256_challenge(verifier: str) -> str:
    """BASE64URL-ENCODE(SHA256(ASCII(code_verifier))), without padding (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class PKCE:
    """A code verifier and its S256 challenge."""

    verifier: str
    challenge: str
    method: str = "S256"

    @classmethod
    def generate(cls) -> PKCE:
        """43 to 128 unreserved characters (RFC 7636 §4.1): 64 random bytes, base64url."""
        verifier = secrets.token_urlsafe(64)[:128]
        return cls.from_verifier(verifier)

    @classmethod
    def from_verifier(cls, verifier: str) -> PKCE:
        """The pair for a given verifier (checked against RFC 7636 §4.1)."""
        if not 43 <= len(verifier) <= 128 or not set(verifier) <= _UNRESERVED:
            raise ValueError("a code_verifier is 43-128 unreserved characters")
        return cls(verifier, s256_challenge(verifier))


def new_state() -> str:
    """An unguessable ``state`` for one authorization request."""
    return secrets.token_urlsafe(32)
