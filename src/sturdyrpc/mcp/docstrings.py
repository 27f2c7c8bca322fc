"""What a function's docstring says about its parameters: Google ``Args:`` and reST ``:param:``.

:func:`parse_docstring` splits a docstring into the description a client shows (the docstring
without its parameter section) and one description per parameter, which the schema builder
puts into the ``inputSchema`` (and prompts into their ``arguments``) where the type hints give
none. Other sections (``Returns:``, ``Raises:``, ``:returns:``) stay in the description.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

__all__ = ["parse_docstring", "describe_function"]

#: Google-style section headers that list parameters (Google's own, and the usual variants).
_GOOGLE_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*$")
#: ``name: text`` or ``name (type): text`` inside such a section (``*args``/``**kwargs`` too).
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
#: ``:param name: text``, ``:param type name: text`` and the synonyms reST tools accept.
_REST_PARAM = re.compile(r"^\s*:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*?\s)?\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")
#: ``:type name: ...``: about a parameter, and not shown in the description either.
_REST_TYPE = re.compile(r"^\s*:type\s+[A-Za-z_*][A-Za-z0-9_]*\s*:")
_REST_FIELD = re.compile(r"^\s*:[A-Za-z]")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def parse_docstring(doc: str | None) -> tuple[str | None, dict[str, str]]:
    """``(description, {parameter: description})`` of a docstring (already dedented, as
    :func:`inspect.getdoc` returns it); the description is None for no docstring."""
    if doc is None:
        return None, {}
    lines = doc.expandtabs().splitlines()
    kept: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _GOOGLE_HEADER.match(line)
        if header is not None:
            i = _google_section(lines, i + 1, _indent(line), params)
            continue
        field = _REST_PARAM.match(line)
        if field is not None or _REST_TYPE.match(line):
            parts = [field.group(2)] if field is not None else []
            base = _indent(line)
            i += 1
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > base and not _REST_FIELD.match(lines[i]):
                parts.append(lines[i])
                i += 1
            if field is not None:
                params[field.group(1)] = _join(parts)
            continue
        kept.append(line)
        i += 1
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return text, {k: v for k, v in params.items() if v}


def _google_section(lines: list[str], i: int, header_indent: int, params: dict[str, str]) -> int:
    """Read the entries of a Google ``Args:`` section starting at line ``i``; returns the first
    line after it (a non-blank line indented no deeper than the header ends it)."""
    entry_indent: int | None = None
    name: str | None = None
    parts: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent(line) <= header_indent:
            break
        if line.strip():
            ind = _indent(line)
            if entry_indent is None:
                entry_indent = ind
            m = _GOOGLE_ENTRY.match(line.strip()) if ind <= entry_indent else None
            if m is not None:
                if name is not None:
                    params[name] = _join(parts)
                name, parts = m.group(1), [m.group(2)]
            elif name is not None:
                parts.append(line)
        i += 1
    if name is not None:
        params[name] = _join(parts)
    return i


def describe_function(fn: Callable[..., Any], description: str | None) -> tuple[str | None, dict[str, str]]:
    """A registered function's description (``description`` if given, else its docstring
    without the parameter section) and the parameter descriptions its docstring holds."""
    text, params = parse_docstring(inspect.getdoc(fn))
    return (description if description is not None else text), params
