"""The thin I/O layer: fetching a JWKS or posting to an introspection endpoint over HTTP.

Both verifiers take a fetch function, so anything that speaks HTTP can replace httpx (the
default, from the ``http`` extra). Answers are bounded in size and time; every failure is a
:class:`VerificationUnavailable` (never a reason to accept a token).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import codec
from .errors import VerificationUnavailable

__all__ = ["GetJSON", "PostForm", "httpx_get_json", "httpx_post_form", "MAX_DOCUMENT_BYTES"]

#: ``get(url) -> decoded JSON``.
GetJSON = Callable[[str], Awaitable[Any]]
#: ``post(url, form fields, headers) -> (status, decoded JSON or None)``.
PostForm = Callable[[str, Mapping[str, str], Mapping[str, str]], Awaitable[tuple[int, Any]]]

#: Larger answers are refused (a JWKS or an introspection response is a few KiB).
MAX_DOCUMENT_BYTES = 512 * 1024


def _decode(body: bytes) -> Any:
    if len(body) > MAX_DOCUMENT_BYTES:
        raise VerificationUnavailable("answer too large")
    try:
        return codec.decode(body)
    except Exception:
        raise VerificationUnavailable("answer is not JSON") from None


async def _read(response: Any) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            raise VerificationUnavailable("answer too large")
        chunks.append(chunk)
    return b"".join(chunks)


def httpx_get_json(timeout: float = 5.0) -> GetJSON:
    """A :data:`GetJSON` on httpx: no redirects followed, ``timeout`` seconds per request."""
    import httpx

    async def get(url: str) -> Any:
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                async with client.stream("GET", url, headers={"accept": "application/json"}) as r:
                    if r.status_code != 200:
                        raise VerificationUnavailable(f"HTTP {r.status_code}")
                    return _decode(await _read(r))
        except httpx.HTTPError as exc:
            raise VerificationUnavailable(f"fetch failed: {type(exc).__name__}") from None

    return get


def httpx_post_form(timeout: float = 5.0) -> PostForm:
    """A :data:`PostForm` on httpx: no redirects followed, ``timeout`` seconds per request."""
    import httpx

    async def post(url: str, form: Mapping[str, str], headers: Mapping[str, str]) -> tuple[int, Any]:
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                async with client.stream("POST", url, data=dict(form), headers=dict(headers)) as r:
                    body = await _read(r)
                    return r.status_code, (_decode(body) if r.status_code == 200 else None)
        except httpx.HTTPError as exc:
            raise VerificationUnavailable(f"request failed: {type(exc).__name__}") from None

    return post
