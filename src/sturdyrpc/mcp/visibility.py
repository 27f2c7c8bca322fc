"""Which registered tools, resources, templates and prompts a server shows: tags, enable, disable.

FastMCP's rules: ``server.disable(tags={"admin"})``, ``server.enable(names={"ping"})``,
``server.enable(tags={"public"}, only=True)`` (an allowlist). Each call adds a :class:`Rule`; the
last rule that matches a component decides, and a component no rule matches is shown. A rule
matches when every criterion it has does (``names``: a name or URI; ``tags``: any one of them;
``components``: ``"tool"``, ``"resource"``, ``"template"``, ``"prompt"``); a rule with none
matches nothing.

:class:`Tables` keeps every registered record and, beside it, the tables every path reads
(``core.tools``, ``core.resources``, ``core.templates``, ``core.prompts``) holding the shown ones
only. So a hidden component is absent on every path alike: lists, calls, reads, gets,
completions, tasks, scopes, mounts (a parent mounts what its child shows) and proxies (the
proxy's rules apply to its forwarded records); calling one is the error of an unknown one.
Nothing is read per request: the tables change when a record or a rule does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Rule", "Tables", "COMPONENTS", "component_of"]

#: The component kinds a rule can name, and the table each is kept in.
COMPONENTS = {"tool": "tools", "resource": "resources", "template": "templates", "prompt": "prompts"}
#: The list each table is (what a ``list_changed`` notification names).
_KIND = {"tools": "tools", "resources": "resources", "templates": "resources", "prompts": "prompts"}


class _Record(Protocol):
    name: str
    tags: frozenset[str]


def component_of(table: str) -> str:
    """The component kind (``"tool"``...) of the records kept in ``table`` (``"tools"``...)."""
    return next(c for c, t in COMPONENTS.items() if t == table)


def _names(what: str, values: Iterable[str] | None) -> frozenset[str] | None:
    if values is None:
        return None
    if isinstance(values, str):  # {"a"} meant, "a" written: refuse rather than match letters
        raise TypeError(f"{what} must be a collection of strings, e.g. {{{values!r}}}, not a string")
    return frozenset(values)


@dataclass(frozen=True)
class Rule:
    """Show (``enabled``) or hide the components matching every criterion given."""

    enabled: bool
    names: frozenset[str] | None = None
    tags: frozenset[str] | None = None
    components: frozenset[str] | None = None
    match_all: bool = False

    @classmethod
    def of(cls, enabled: bool, names: Iterable[str] | None, tags: Iterable[str] | None,
           components: Iterable[str] | None) -> Rule:
        """A rule from a caller's arguments, checked (a ``TypeError``/``ValueError`` says what is wrong)."""
        kinds = _names("components", components)
        unknown = sorted(kinds - set(COMPONENTS)) if kinds is not None else []
        if unknown:
            raise ValueError(f"unknown component kind(s) {', '.join(map(repr, unknown))} "
                             f"(one of {', '.join(map(repr, COMPONENTS))})")
        return cls(enabled, _names("names", names), _names("tags", tags), kinds)

    def matches(self, component: str, key: str, record: _Record) -> bool:
        """Whether this rule applies to ``record``, a ``component`` (``"tool"``...) registered
        under ``key`` (its name; a resource's or template's URI)."""
        if self.match_all:
            return True
        if self.names is None and self.tags is None and self.components is None:
            return False
        if self.components is not None and component not in self.components:
            return False
        if self.names is not None and record.name not in self.names and key not in self.names:
            return False
        return self.tags is None or bool(self.tags & record.tags)


class Tables:
    """Every registered record (:attr:`every`) and the shown ones (:attr:`shown`, the tables
    read by every path), by table name: ``tools``, ``resources``, ``templates``, ``prompts``."""

    def __init__(self, shown: dict[str, dict[str, Any]]) -> None:
        self.shown = shown
        self.every: dict[str, dict[str, Any]] = {t: {} for t in shown}
        self.rules: list[Rule] = []

    def shows(self, table: str, key: str, record: _Record) -> bool:
        """Whether the rules show ``record`` (kept in ``table`` under ``key``)."""
        shown = True
        if self.rules:
            component = component_of(table)
            for rule in self.rules:
                if rule.matches(component, key, record):
                    shown = rule.enabled
        return shown

    def put(self, table: str, key: str, record: Any) -> None:
        """Register ``record`` under ``key`` (shown if the rules say so)."""
        self.every[table][key] = record
        if self.shows(table, key, record):
            self.shown[table][key] = record
        else:
            self.shown[table].pop(key, None)

    def take(self, table: str, key: str, record: Any) -> bool:
        """Unregister ``record`` if it is still what ``key`` holds; whether it was."""
        if self.every[table].get(key) is not record:
            return False
        del self.every[table][key]
        if self.shown[table].get(key) is record:
            del self.shown[table][key]
        return True

    def add_rule(self, rule: Rule, only: bool = False) -> set[str]:
        """Add ``rule`` (after one hiding everything, for ``only``); the lists it changed."""
        if only:
            self.rules.append(Rule(False, match_all=True))
        self.rules.append(rule)
        return self.refresh()

    def refresh(self, tables: Iterable[str] | None = None) -> set[str]:
        """Make the shown tables (``tables``, default all) what the rules say, in registration
        order; the lists (``tools``, ``resources``, ``prompts``) whose content changed."""
        changed: set[str] = set()
        for table in tables if tables is not None else list(self.every):
            shown = self.shown[table]
            wanted = {k: r for k, r in self.every[table].items() if self.shows(table, k, r)}
            if wanted.keys() != shown.keys() or any(shown[k] is not r for k, r in wanted.items()):
                shown.clear()
                shown.update(wanted)
                changed.add(_KIND[table])
        return changed
