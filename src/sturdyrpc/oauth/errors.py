"""The one exception of the OAuth client."""

from __future__ import annotations

__all__ = ["OAuthError"]


class OAuthError(Exception):
    """Authorization could not be obtained.

    The message says which step failed (discovery, registration, the authorization
    response, the token endpoint) and never contains a token, code or client secret.
    ``error`` is the OAuth error code when the authorization server sent one.
    """

    def __init__(self, message: str, *, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error
