"""RFC 6570 URI templates of resource templates: which URIs a template serves, and its variables.

Compiled once, when the template is registered; an operator this module cannot match is refused
then (a template that could never match is never listed).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote

__all__ = ["UriTemplate"]


#: RFC 6570 expressions: an operator, then variables (each maybe with a ``*`` or ``:N`` modifier).
_EXPRESSION = re.compile(r"\{([+#./;?&=,!@|]?)([^}]*)\}")
_VARNAME = re.compile(r"[A-Za-z0-9_]+")
_SUPPORTED = "{name}, {+name}, {#name}, {name*}, {?a,b} and {&a,b}"


class UriTemplate:
    """A resource template's URI template, compiled once: ``match(uri)`` gives its variables.

    Supported (RFC 6570): ``{name}`` (one segment: no ``/``, ``?``, ``#``), ``{+name}`` and
    ``{name*}`` (may hold ``/``), ``{#name}`` (a fragment), and one ``{?a,b}`` or ``{&a,b}`` at
    the end (query parameters, each optional, in any order). Other operators and modifiers
    raise ``ValueError`` when the template is registered: a template that could never match is
    never listed.
    """

    def __init__(self, template: str) -> None:
        self.template = template
        #: Path (and fragment) variables, in order; then query variables.
        self.path_names: list[str] = []
        self.query_names: list[str] = []
        has_query = "{?" in template or "{&" in template
        # with query parameters, a value stops where they start
        narrow, wide = ("[^/?#&]+", "[^?#&]+") if has_query else ("[^/?#]+", ".+")
        out: list[str] = []
        pos = 0
        query_op: str | None = None
        for m in _EXPRESSION.finditer(template):
            op, names, expr = m.group(1), m.group(2).split(","), m.group(0)
            if query_op is not None:
                raise ValueError(f"resource template {template!r}: {{{query_op}...}} must come last")
            out.append(re.escape(template[pos : m.start()]))
            pos = m.end()
            if op in ("?", "&"):
                query_op = op
                self.query_names.extend(self._name(n, expr) for n in names)
                continue
            if op not in ("", "+", "#") or len(names) != 1:
                raise ValueError(f"resource template {template!r}: {expr} is not supported (supported: {_SUPPORTED})")
            explode = names[0].endswith("*")
            name = self._name(names[0][:-1] if explode else names[0], expr)
            self.path_names.append(name)
            if op == "#":
                out.append("\\#")
            out.append(f"(?P<{name}>{wide if op or explode else narrow})")
        rest = template[pos:]
        if query_op is not None and rest:
            raise ValueError(f"resource template {template!r}: {{{query_op}...}} must come last")
        if "{" in rest or "}" in rest:
            raise ValueError(f"resource template {template!r}: an unclosed or stray brace")
        out.append(re.escape(rest))
        if query_op is not None:
            out.append("(?P<_query>[?&][^#]*)?" if query_op == "&" else "(?P<_query>\\?[^#]*)?")
        self.pattern = re.compile("".join(out))
        every = self.path_names + self.query_names
        if len(set(every)) != len(every):
            raise ValueError(f"resource template {template!r}: a variable appears twice")

    def _name(self, raw: str, expr: str) -> str:
        if not _VARNAME.fullmatch(raw):
            raise ValueError(f"resource template {self.template!r}: {expr} is not supported (supported: {_SUPPORTED})")
        return raw

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of ``uri`` (percent-decoded), or None when it does not match. A query
        parameter that ``uri`` leaves out is absent (the function's default applies)."""
        m = self.pattern.fullmatch(uri)
        if m is None:
            return None
        found = {n: unquote(m.group(n)) for n in self.path_names}
        query = m.group("_query") if self.query_names else None
        if query:
            wanted = set(self.query_names)
            for k, v in parse_qsl(query[1:], keep_blank_values=True):
                if k in wanted:
                    found[k] = v
        return found
