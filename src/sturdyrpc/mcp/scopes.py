"""Which OAuth scopes an MCP request needs, and which tools, resources and prompts a principal
may see: the one home of per-tool/resource/prompt ``scopes=[...]``.

Enforcement happens where the token is: the Streamable HTTP server asks
:func:`required_scopes` for each request before it runs and answers 403
``insufficient_scope`` (see :mod:`sturdyrpc.mcp_http.server`). Lists leave out what the
principal of the request (:func:`~sturdyrpc.request_context.request_principal`) may not use.
Without authentication (no principal: stdio, HTTP without auth) scopes are not enforced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..auth.principal import missing_scopes
from ..request_context import request_principal
from .registry import find_resource

if TYPE_CHECKING:
    from .core import ServerCore

__all__ = ["required_scopes", "may_use", "NO_SCOPES"]

NO_SCOPES: frozenset[str] = frozenset()


def required_scopes(core: ServerCore, method: str, params: Any) -> frozenset[str]:
    """The scopes a ``method`` request with ``params`` needs: those of the tool it calls, the
    resource it reads or subscribes to, the prompt it gets, or the prompt/resource it completes
    arguments of. Unknown names need none (the request fails as it would anyway)."""
    if type(params) is not dict:
        return NO_SCOPES
    if method == "tools/call":
        tool = core.tools.get(params.get("name"))  # type: ignore[arg-type]
        return tool.scopes if tool is not None else NO_SCOPES
    if method in ("resources/read", "resources/subscribe"):
        return _resource_scopes(core, params.get("uri"))
    if method == "prompts/get":
        prompt = core.prompts.get(params.get("name"))  # type: ignore[arg-type]
        return prompt.scopes if prompt is not None else NO_SCOPES
    if method == "completion/complete":
        ref = params.get("ref")
        if type(ref) is not dict:
            return NO_SCOPES
        if ref.get("type") == "ref/prompt":
            prompt = core.prompts.get(ref.get("name"))  # type: ignore[arg-type]
            return prompt.scopes if prompt is not None else NO_SCOPES
        if ref.get("type") == "ref/resource":
            uri = ref.get("uri")
            template = core.templates.get(uri) if type(uri) is str else None
            return template.scopes if template is not None else _resource_scopes(core, uri)
    return NO_SCOPES


def _resource_scopes(core: ServerCore, uri: Any) -> frozenset[str]:
    if type(uri) is not str:
        return NO_SCOPES
    found = find_resource(core.resources, core.templates, uri)
    return found[0].scopes if found is not None else NO_SCOPES


def may_use(scopes: frozenset[str]) -> bool:
    """Whether the principal of the request being served holds all of ``scopes`` (always, without one)."""
    return not scopes or not missing_scopes(request_principal(), scopes)
