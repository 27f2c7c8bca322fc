"""Where the OAuth client may be sent: a server's 401 or metadata naming plain http, the cloud
metadata address, a private or link-local address, or an endless document gets nothing fetched
from it (or, for size, is cut at the cap); the loopback redirect listener holds its port from
the moment it is bound. Real servers on 127.0.0.1 (tests/support/oauth.py, the dripping
endpoint of tests/support/auth.py)."""

from __future__ import annotations

import asyncio
import errno
import io
import socket
import time
from typing import Any

import httpx
import pytest
from support.auth import DripServer
from support.http import free_port
from support.oauth import serve_protected

from sturdyrpc.mcp.client import NegotiationFailed
from sturdyrpc.mcp_http.connect import connect_http
from sturdyrpc.oauth import FollowRedirectHandler, LoopbackRedirectHandler, OAuthClientProvider, OAuthError
from sturdyrpc.oauth.metadata import is_secure_url
from sturdyrpc.oauth.provider import MAX_RESPONSE_BYTES
from sturdyrpc.oauth.targets import check_target

pytestmark = pytest.mark.timeout(60)

REDIRECT = "http://127.0.0.1:3000/callback"


def provider(**kw: Any) -> OAuthClientProvider:
    return OAuthClientProvider(FollowRedirectHandler(REDIRECT), **kw)


def connect_message(url: str, **kw: Any) -> tuple[str, float]:
    """What connecting to ``url`` with a fresh provider ends with, and how long it took."""

    async def go() -> str:
        auth = provider(**kw)
        try:
            async with connect_http(url, auth=auth) as client:
                await client.list_tools()
        except NegotiationFailed as exc:
            return str(exc)
        finally:
            await auth.aclose()
        return ""

    t0 = time.monotonic()
    message = asyncio.run(go())
    return message, time.monotonic() - t0


#: What a 401 may name, and the words of the refusal (checked before anything is sent).
ATTACKS = {
    "http://metadata.example/.well-known/oauth-protected-resource": "is not https",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/": "is not https",
    "https://169.254.169.254/latest/meta-data/": "link-local",
    "https://10.0.0.7/.well-known/oauth-protected-resource": "private",
    "https://172.16.5.4/prm": "private",
    "https://192.168.1.1/prm": "private",
    "https://[fd00::1]/prm": "private",
    "https://[fe80::1]/prm": "link-local",
    "https://[::ffff:169.254.169.254]/prm": "link-local",
    "https://[::ffff:10.0.0.1]/prm": "private",
    "https://100.64.0.1/prm": "non-public",
    "https://0.0.0.0/prm": "unspecified",
}


@pytest.mark.parametrize("target", list(ATTACKS))
def test_a_401_naming_plain_http_or_a_non_public_address_is_refused_before_any_request(target: str) -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        rs.metadata_url_override = target
        message, took = connect_message(f"http://127.0.0.1:{port}/mcp")
        assert message.startswith("Authorization failed"), message
        assert target in message and ATTACKS[target] in message, message
        assert "no protected resource metadata" not in message  # refused, not tried and failed
        assert took < 10
        assert auth_server.events == []


def test_metadata_naming_non_public_authorization_servers_or_endpoints_is_refused() -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        rs.prm_extra = {"authorization_servers": ["https://10.1.2.3/as"]}
        message, _ = connect_message(f"http://127.0.0.1:{port}/mcp")
        assert "authorization server metadata 'https://10.1.2.3/.well-known/oauth-authorization-server/as'" in message
        assert "private" in message
    with serve_protected(port) as (auth_server, rs):
        auth_server.metadata_extra = {"registration_endpoint": "https://[fe80::1]/register"}
        message, _ = connect_message(f"http://127.0.0.1:{port}/mcp")
        assert "the registration endpoint 'https://[fe80::1]/register'" in message and "link-local" in message, message
        assert auth_server.count("register") == 0
    with serve_protected(port) as (auth_server, rs):
        auth_server.metadata_extra = {"token_endpoint": "https://192.168.7.7/token"}
        message, _ = connect_message(f"http://127.0.0.1:{port}/mcp")
        assert "the token endpoint 'https://192.168.7.7/token'" in message and "private" in message, message
        assert auth_server.count("token") == 0


@pytest.mark.parametrize("chunked", [True, False], ids=["no-content-length", "content-length"])
def test_an_oversized_metadata_document_is_cut_at_the_cap(chunked: bool) -> None:
    # 64 MiB of metadata: read whole before, now the client stops after MAX_RESPONSE_BYTES
    # (a declared Content-Length over the cap is refused before the body is read at all).
    flood = DripServer(body=b" " * 65536, interval=0, chunk=65536, repeat=1024, chunked=chunked)
    port = free_port()
    with flood.serve(), serve_protected(port) as (auth_server, rs):
        rs.metadata_url_override = flood.url + "/.well-known/oauth-protected-resource"
        message, took = connect_message(f"http://127.0.0.1:{port}/mcp")
        assert f"answered with more than {MAX_RESPONSE_BYTES} bytes" in message, message
        assert took < 20
        # What the flood could write before the client hung up: the cap plus the sockets' buffers.
        assert flood.sent < 16 * 1024 * 1024
        assert auth_server.events == []
    small = provider(max_response_bytes=1024)
    assert small.max_response_bytes == 1024


def test_a_remote_server_cannot_send_the_client_to_loopback_unless_allowed() -> None:
    async def challenge(auth: OAuthClientProvider) -> bool:
        try:
            return await auth.handle_challenge("https://mcp.example/mcp", 401,
                                               ['Bearer resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource"'],
                                               sent=None, attempt=0)
        finally:
            await auth.aclose()

    with pytest.raises(OAuthError, match="is on loopback, but the MCP server is not"):
        asyncio.run(challenge(provider()))
    # allowed: the URL is fetched (nothing listens on port 9: no metadata there)
    with pytest.raises(OAuthError, match="no protected resource metadata at http://127.0.0.1:9/"):
        asyncio.run(challenge(provider(allow_private_networks=True, timeout=5)))


def test_check_target_rules() -> None:
    async def resolving(*addresses: str) -> Any:
        async def resolve(host: str, port: int) -> list[str]:
            return list(addresses)
        return resolve

    async def ok(url: str, server: str = "https://mcp.example/mcp", *, allow: bool = False, addrs: tuple[str, ...] = ()) -> bool:
        try:
            await check_target(url, what="t", server_url=server, allow_private=allow, resolve=await resolving(*addrs))
        except OAuthError:
            return False
        return True

    async def go() -> None:
        local = "http://127.0.0.1:8000/mcp"
        for url in ("http://127.0.0.1:1/x", "http://127.9.9.9/x", "http://[::1]:80/x", "http://localhost:5/x",
                    "http://LOCALHOST./x", "http://[::ffff:127.0.0.1]/x", "https://127.0.0.1/x"):
            assert await ok(url, local), url
            assert not await ok(url), url  # the same URL named for a remote server
            assert await ok(url, allow=True), url
        for url in ("ftp://as.example/x", "https:///x", "http://as.example/x", "http://10.0.0.1/x", "javascript:alert(1)"):
            assert not await ok(url, local, allow=True, addrs=("93.184.216.34",)), url
        # every address a name resolves to is checked, IPv4 and IPv6
        assert await ok("https://as.example/x", addrs=("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"))
        for bad in (("93.184.216.34", "10.0.0.5"), ("2606:2800:220:1::", "fe80::1%eth0"), ("::ffff:192.168.0.1",),
                    ("224.0.0.1",), ("240.0.0.1",), ("127.0.0.1",), ()):
            assert not await ok("https://as.example/x", addrs=bad), bad
            assert await ok("https://as.example/x", allow=True, addrs=bad) == bool(bad), bad
        assert await ok("https://as.example/x", local, addrs=("127.0.0.1",))  # a name for loopback, for a local server
        assert not await ok("https://[fc00::1]/x", local)
        assert await ok("https://[fc00::1]/x", local, allow=True)

    asyncio.run(go())
    assert is_secure_url("http://127.0.0.2:1/cb") and is_secure_url("http://[::1]/cb") and is_secure_url("https://as.example")
    assert not is_secure_url("http://127.0.0.1.example/cb") and not is_secure_url("https://") and not is_secure_url("http://[::1")


def test_the_real_resolver_checks_a_name_of_this_machine() -> None:
    # The machine's own host name resolves (through /etc/hosts) to a private or loopback address
    # on most machines and containers: refused for a remote MCP server either way.
    name = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip(f"{name!r} does not resolve here")
    import ipaddress

    if all(ipaddress.ip_address(a.split("%")[0]).is_global for a in addresses):
        pytest.skip(f"{name!r} resolves to public addresses only here")
    with pytest.raises(OAuthError, match="resolves to"):
        asyncio.run(check_target(f"https://{name}/x", what="t", server_url="https://mcp.example/mcp"))


def test_the_loopback_listener_holds_its_port_from_the_moment_it_is_bound() -> None:
    handler = LoopbackRedirectHandler(open_browser=False, out=io.StringIO())
    port = handler.port

    def squat() -> socket.socket:
        """Another local process taking the port, as a bound-but-not-listening socket allows."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            s.close()
            raise
        return s

    try:
        with pytest.raises(OSError) as exc:
            squat().close()
        assert exc.value.errno == errno.EADDRINUSE
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # already listening

        async def authorize() -> Any:
            task = asyncio.ensure_future(handler.authorize("https://as.example/authorize?state=s1"))
            r = await asyncio.to_thread(httpx.get, f"{handler.redirect_uri}?code=c1&state=s1", timeout=10)
            assert r.status_code == 200
            return await task

        assert asyncio.run(authorize()) == {"code": "c1", "state": "s1"}
        with pytest.raises(OSError):  # between two authorizations (a step-up) the port stays held
            squat().close()
        assert asyncio.run(authorize()) == {"code": "c1", "state": "s1"}
    finally:
        handler.close()
    squat().close()  # released by close()


def test_the_follow_redirect_handler_reads_no_body() -> None:
    flood = DripServer(body=b"<html>" + b" " * 65530, interval=0, chunk=65536, repeat=1024, chunked=True)
    with flood.serve():
        with pytest.raises(OAuthError, match="answered HTTP 200 instead of redirecting"):
            asyncio.run(FollowRedirectHandler(REDIRECT).authorize(flood.url + "/authorize"))
    assert flood.sent < 16 * 1024 * 1024
