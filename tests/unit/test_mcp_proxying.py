"""``proxying.expand``: a template's variables put back, so a proxied template read (under any
namespace) asks the upstream for the URI it serves."""

from __future__ import annotations

import pytest

from sturdyrpc.mcp.proxying import expand
from sturdyrpc.mcp.registry import UriTemplate

ROUND_TRIPS = [
    ("users://{user_id}/profile", "users://42/profile"),
    ("files://{+path}", "files://a/b/c.txt"),
    ("files://{path*}", "files://a/b/c.txt"),
    ("docs://{name}{#section}", "docs://intro#usage"),
    ("search://items{?q,limit}", "search://items?q=red&limit=5"),
    ("search://items{?q,limit}", "search://items?q=red"),
    ("search://items{?q,limit}", "search://items"),
    ("search://items?kind=a{&q}", "search://items?kind=a&q=x"),
    ("users://{name}/profile", "users://a%20b%2Fc/profile"),
]


@pytest.mark.parametrize(("template", "uri"), ROUND_TRIPS)
def test_expand_puts_back_what_match_took(template: str, uri: str) -> None:
    found = UriTemplate(template).match(uri)
    assert found is not None
    assert expand(template, found) == uri


@pytest.mark.parametrize(("template", "variables", "uri"), [
    ("users://{id}/profile", {"id": "a/b"}, "users://a%2Fb/profile"),
    ("files://{+path}", {"path": "a/b c"}, "files://a/b%20c"),
    ("q://x{?a,b}", {"b": "1&2"}, "q://x?b=1%262"),
])
def test_expand_encodes_as_the_form_says(template: str, variables: dict[str, str], uri: str) -> None:
    assert expand(template, variables) == uri
