"""``server.mount(other, namespace)``: one server's tools, resources and prompts served by another.

A :class:`Mount` keeps the parent's registries holding the child's records under the parent's
names, FastMCP's way: tools and prompts as ``{namespace}_{name}``, resources and templates as
``scheme://{namespace}/rest`` (``data://config`` -> ``data://weather/config``); without a
namespace, under their own names. The records are aliases (:meth:`.HandlerFunction.aliased`,
:meth:`.Resource.moved`): the child's functions, binders and schemas, not compiled again. They
are kept in step with the child: the child's registering and removing call :meth:`Mount.sync`
for the kind that changed (the parent then tells its clients the list changed).

A request for a mounted record takes the parent's one path like any other (its middleware,
scopes, tasks, spans, sessions): only the records come from the child. A name the parent
registers itself wins over a mounted one; of two mounts naming the same thing, the first does.
What the child hides (tags, ``disable``) is not mounted; the parent's own rules apply to the
mounted records under their parent names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .core import ServerCore
from .registry import HandlerFunction, Prompt, Tool

_R = TypeVar("_R", bound=HandlerFunction)

__all__ = ["Mount", "prefixed_name", "prefixed_uri"]


def prefixed_name(name: str, namespace: str | None) -> str:
    """A mounted tool's or prompt's name: ``{namespace}_{name}``."""
    return name if namespace is None else f"{namespace}_{name}"


def prefixed_uri(uri: str, namespace: str | None) -> str:
    """A mounted resource's (or template's) URI: ``scheme://{namespace}/rest``."""
    if namespace is None:
        return uri
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme:
        raise ValueError(f"cannot mount the resource {uri!r} under a namespace: its URI has no scheme://")
    return f"{scheme}://{namespace}/{rest}"


def check_namespace(namespace: str | None) -> None:
    """Refuse a namespace that would make names or URIs ambiguous."""
    if namespace is None:
        return
    if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "{}/?#: "):
        raise ValueError(f"namespace must be a non-empty string without '{{}}/?#:' or spaces, got {namespace!r}")


class Mount:
    """The child server ``child`` (its core) mounted in ``parent`` under ``namespace``."""

    def __init__(self, parent: ServerCore, child: ServerCore, namespace: str | None) -> None:
        check_namespace(namespace)
        self.parent = parent
        self.child = child
        self.namespace = namespace
        #: The aliases this mount put in each parent table, by key (to tell them from the
        #: parent's own records and other mounts').
        self._placed: dict[str, dict[str, HandlerFunction]] = {"tools": {}, "resources": {}, "templates": {}, "prompts": {}}

    def sync(self, kind: str) -> None:
        """Bring the parent's ``kind`` (``tools``, ``resources`` or ``prompts``) in step with the child."""
        ns = self.namespace
        if kind == "tools":
            tools: dict[str, Tool] = {prefixed_name(n, ns): t.aliased(prefixed_name(n, ns)) for n, t in self.child.tools.items()}
            self._place("tools", tools)
        elif kind == "prompts":
            prompts: dict[str, Prompt] = {prefixed_name(n, ns): p.aliased(prefixed_name(n, ns)) for n, p in self.child.prompts.items()}
            self._place("prompts", prompts)
        elif kind == "resources":
            resources = {prefixed_uri(u, ns): r.moved(prefixed_uri(u, ns)) for u, r in self.child.resources.items()}
            self._place("resources", resources)
            templates = {prefixed_uri(u, ns): r.moved(prefixed_uri(u, ns)) for u, r in self.child.templates.items()}
            self._place("templates", templates)

    def attach(self, parent_changed: Callable[[str], None]) -> None:
        """Place the child's components now and follow its changes from now on; the parent's
        listeners hear of each change (``parent_changed(kind)``), and of this mount at once."""
        self.sync_all()

        def changed(kind: str) -> None:
            self.sync(kind)
            parent_changed(kind)

        self.child.mounted_in.append(changed)
        for kind in ("tools", "resources", "prompts"):
            parent_changed(kind)

    def sync_all(self) -> None:
        for kind in ("tools", "resources", "prompts"):
            self.sync(kind)

    def _place(self, table: str, wanted: dict[str, _R]) -> None:
        """The child's records of ``table`` in the parent's registered records, shown there as
        the parent's rules say (:mod:`.visibility`: the child's hidden ones never arrive)."""
        into = self.parent.tables.every[table]
        placed = self._placed[table]
        for key, alias in list(placed.items()):
            if into.get(key) is alias:  # still ours (not replaced by the parent's own or another mount's)
                del into[key]
            del placed[key]
        for key, record in wanted.items():
            if key not in into:
                into[key] = record
                placed[key] = record
        self.parent.tables.refresh([table])
