"""The OAuth 2.1 client of MCP authorization (2025-03-26 to 2025-11-25), for MCP over HTTP.

::

    from sturdyrpc.mcp_http.connect import connect_http
    from sturdyrpc.oauth import LoopbackRedirectHandler, OAuthClientProvider

    auth = OAuthClientProvider(LoopbackRedirectHandler())
    async with connect_http("https://mcp.example.com/mcp", auth=auth) as client:
        await client.list_tools()

Sans-I/O where it fits: :mod:`.challenge` (``WWW-Authenticate``), :mod:`.metadata` (which URLs
to try, what documents say), :mod:`.pkce`, :mod:`.flow` (scope selection, the requests and
their answers); :mod:`.provider` makes the HTTP calls; :mod:`.store` and :mod:`.redirect` are
the pluggable parts. docs/AUTH_CLIENT.md shows the flow on the wire.
"""

from .challenge import BearerChallenge, parse_www_authenticate
from .errors import OAuthError
from .flow import ClientInfo, Tokens
from .provider import HTTPAuth, OAuthClientProvider
from .redirect import CallbackRedirectHandler, FollowRedirectHandler, LoopbackRedirectHandler, RedirectHandler
from .store import FileTokenStore, MemoryTokenStore, TokenStore

__all__ = [
    "BearerChallenge",
    "CallbackRedirectHandler",
    "ClientInfo",
    "FileTokenStore",
    "FollowRedirectHandler",
    "HTTPAuth",
    "LoopbackRedirectHandler",
    "MemoryTokenStore",
    "OAuthClientProvider",
    "OAuthError",
    "RedirectHandler",
    "TokenStore",
    "Tokens",
    "parse_www_authenticate",
]
