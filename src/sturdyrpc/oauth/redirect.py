"""Getting the user through the authorization endpoint and back: redirect handlers.

A :class:`RedirectHandler` knows its ``redirect_uri`` and, given an authorization URL,
returns the query parameters of the redirect that came back (``code`` and ``state``, or
``error``). Three are provided:

- :class:`CallbackRedirectHandler`: for library users; your coroutine gets the URL (show it,
  open a web view...) and returns the redirect URL it was sent to.
- :class:`LoopbackRedirectHandler`: for command-line programs (RFC 8252 §7.3): a one-shot HTTP
  listener on 127.0.0.1, the browser opened on the authorization URL (or the URL printed to
  stderr), the code read from the request the browser makes to the listener.
- :class:`FollowRedirectHandler`: for authorization servers that redirect at once with no user
  interaction (test servers, the conformance suite): GET the URL and read ``Location``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import webbrowser
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TextIO, runtime_checkable
from urllib.parse import parse_qsl, urlsplit

import httpx

from .errors import OAuthError

__all__ = [
    "RedirectHandler",
    "CallbackRedirectHandler",
    "LoopbackRedirectHandler",
    "FollowRedirectHandler",
    "redirect_params",
]


@runtime_checkable
class RedirectHandler(Protocol):
    """Takes the user through authorization; see the module docstring."""

    @property
    def redirect_uri(self) -> str:
        """The redirect URI registered with the authorization server and sent in the request."""
        ...

    async def authorize(self, authorization_url: str) -> Mapping[str, str]:
        """The query parameters of the redirect back to :attr:`redirect_uri`."""
        ...


def redirect_params(url: str) -> dict[str, str]:
    """The query parameters of a redirect URL (the first of each name)."""
    out: dict[str, str] = {}
    for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        out.setdefault(k, v)
    return out


class CallbackRedirectHandler:
    """``callback(authorization_url)`` returns the URL the user agent was redirected to."""

    def __init__(self, redirect_uri: str, callback: Callable[[str], Awaitable[str]]) -> None:
        self._redirect_uri = redirect_uri
        self._callback = callback

    @property
    def redirect_uri(self) -> str:
        return self._redirect_uri

    async def authorize(self, authorization_url: str) -> Mapping[str, str]:
        return redirect_params(await self._callback(authorization_url))


class FollowRedirectHandler:
    """GET the authorization URL and read the ``Location`` of the redirect it answers with.

    Only for authorization servers that approve without a user (tests, the conformance suite):
    a real one answers with a login page, which is reported as an :class:`OAuthError`.
    """

    def __init__(self, redirect_uri: str = "http://127.0.0.1:3000/callback", *, client: httpx.AsyncClient | None = None) -> None:
        self._redirect_uri = redirect_uri
        self._client = client

    @property
    def redirect_uri(self) -> str:
        return self._redirect_uri

    async def authorize(self, authorization_url: str) -> Mapping[str, str]:
        client = self._client or httpx.AsyncClient(timeout=30.0)
        try:
            # Only the head is read: the redirect is in it, and a body (a login page) is not wanted.
            async with client.stream("GET", authorization_url, follow_redirects=False) as r:
                status, location = r.status_code, r.headers.get("location")
        finally:
            if self._client is None:
                await client.aclose()
        if status not in (301, 302, 303, 307, 308) or not location:
            raise OAuthError(f"the authorization endpoint answered HTTP {status} instead of redirecting")
        return redirect_params(location)


_PAGE = (
    "<!doctype html><meta charset=utf-8><title>sturdyrpc</title>"
    "<p>{message}</p><p>You can close this window and return to the terminal.</p>"
)


class LoopbackRedirectHandler:
    """A loopback redirect listener (RFC 8252 §7.3) on ``http://127.0.0.1:PORT/callback``.

    The port is bound and listening from the moment the handler is made (``port=0``: any free
    port) until :meth:`close`, so :attr:`redirect_uri` is known before dynamic registration and
    no other local process can take the port meanwhile (a bound socket that does not listen yet
    can be joined by another one with ``SO_REUSEADDR``, which would then receive the code).
    Connections that arrive between two authorizations wait in the backlog. ``open_browser``: open the
    system browser on the authorization URL; the URL is always printed to ``out`` (stderr)
    too, so a headless machine can copy it. Waits ``timeout`` seconds for the browser.
    Requests to other paths get 404, and callbacks whose ``state`` is not the authorization
    request's get 400 and are ignored (a stray or forged request cannot end the wait); the first
    callback with the right ``state`` ends it.
    """

    def __init__(
        self, port: int = 0, *, path: str = "/callback", open_browser: bool = True, timeout: float = 300.0,
        out: TextIO | None = None,
    ) -> None:
        self._sock: socket.socket | None = self._bind(port)
        self.port = int(self._sock.getsockname()[1])
        self.path = path
        self.open_browser = open_browser
        self.timeout = timeout
        self._out = out

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    @staticmethod
    def _bind(port: int) -> socket.socket:
        # Bound and listening in one call: the port is never held without a listener.
        return socket.create_server(("127.0.0.1", port), backlog=8)

    def close(self) -> None:
        """Release the port."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def authorize(self, authorization_url: str) -> Mapping[str, str]:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[dict[str, str]] = loop.create_future()
        expected_state = redirect_params(authorization_url).get("state")

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                parts = line.split(" ")
                target = parts[1] if len(parts) == 3 and parts[0] == "GET" else ""
                if urlsplit(target).path != self.path:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    return
                params = redirect_params(target)
                if expected_state is not None and params.get("state") != expected_state:
                    status, message = "400 Bad Request", "This is not the response to the pending authorization request."
                else:
                    status = "200 OK"
                    message = "Authorization failed." if "error" in params else "Authorization complete."
                    if not result.done():
                        result.set_result(params)
                body = _PAGE.format(message=message).encode()
                writer.write(
                    f"HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\nconnection: close\r\n".encode()
                    + f"content-length: {len(body)}\r\n\r\n".encode() + body
                )
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                pass
            finally:
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                writer.close()

        # The same port every time: it is the registered redirect URI (a step-up authorizes
        # again). The server gets a duplicate to close when it is done: the listening socket
        # itself stays open (and keeps the port) until close().
        if self._sock is None:
            self._sock = self._bind(self.port)
        server = await asyncio.start_server(serve, sock=self._sock.dup())
        try:
            out = self._out or sys.stderr
            out.write(f"Open this URL to authorize:\n  {authorization_url}\n")
            out.flush()
            if self.open_browser:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(webbrowser.open, authorization_url)
            try:
                return await asyncio.wait_for(result, self.timeout)
            except TimeoutError:
                raise OAuthError(f"no authorization response within {self.timeout:g} s") from None
        finally:
            server.close()
            await server.wait_closed()
