"""Secrets kept out of what ``trace`` records and shows (sans-I/O).

A key looks like a secret when its name, compared case-insensitively and without ``-``, ``_``,
``.`` and spaces, holds one of :data:`WORDS` (``token``, ``secret``, ``password``/``passwd``,
``authorization``, ``apikey`` as in ``api_key``/``api-key``/``API Key``, ``privatekey``). MCP's ``progressToken`` is not one (a correlation id, needed to
read a trace). The value of such a key is replaced by :data:`REDACTED` wherever it is: in a
message at any depth (inside objects and arrays), in the server's argv (``--token X``,
``--token=X``, ``TOKEN=X``, ``Authorization: Bearer X``, the password of a URL), and in a line
of text (``token=X``, ``"api_key": "X"``, ``password: X``). Strings, objects and arrays are
replaced; numbers, booleans and null are kept (``maxTokens``, ``total_tokens``: counts; a
boolean hides nothing).

A message is decoded only when its bytes hold one of the words at all (:func:`maybe_secret`),
so traffic without them is logged as it was read. A key spelled with ``\\u`` escapes for its
ASCII letters (which no JSON encoder writes) is not recognised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["REDACTED", "WORDS", "secret_key", "maybe_secret", "redact", "redact_argv", "redact_text"]

#: What a secret's value becomes.
REDACTED = "[REDACTED]"
#: The parts of a name that make it a secret's (after lower-casing and dropping separators).
WORDS = ("token", "secret", "passw", "authorization", "authorisation", "apikey", "privatekey")
#: Names holding a word that are no secret.
_NOT_SECRET = frozenset({"progresstoken"})
_SEPARATORS = str.maketrans("", "", "-_. ")

#: What the lower-cased bytes of a message hold if any of its keys looks like a secret's
#: (``key``: ``api_key``, ``private-key``; ``pass``: ``pass_word``). Plain substring searches:
#: a regular expression would cost ten times as much on traffic without any.
_NEEDLES = (b"token", b"secret", b"pass", b"authori", b"key")
_TEXT_NEEDLES = tuple(n.decode("ascii") for n in _NEEDLES)
#: Values a text keeps even after a secret's key: numbers (counts such as maxTokens), literals.
_PLAIN_VALUE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|none", re.I)

_KEY = r"[A-Za-z0-9_.\-]*(?:token|secret|pass|authori|key)[A-Za-z0-9_.\-]*"
#: ``key = value``, ``key: value``, ``"key": "value"`` in text; the value quoted, a scheme and
#: its credentials (``Bearer X``), or a bare word.
_TEXT = re.compile(
    r"""(?i)(?P<key>(?P<q>["']?)""" + _KEY + r"""(?P=q))(?P<sep>\s*[:=]\s*)"""
    # \x1b ends a value: a coloured line's closing escape code is no part of it.
    r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|(?:bearer|basic|token|digest)\s+[^\s,;"'}\]\x1b]+|[^\s,;&"'}\]\x1b]+)"""
)
#: ``NAME=value`` (an environment assignment) and ``Name: value`` (a header) as one argument.
_ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>=|:\s*)(?P<value>.+)", re.S)
#: The password of ``scheme://user:password@host``.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<password>[^/\s@]+)(?=@)")


@functools.lru_cache(maxsize=4096)
def secret_key(name: str) -> bool:
    """Whether ``name`` looks like the key of a secret (see the module docstring)."""
    folded = name.lower().translate(_SEPARATORS)
    return folded not in _NOT_SECRET and any(word in folded for word in WORDS)


def maybe_secret(data: bytes) -> bool:
    """False when ``data`` (a message's bytes) holds no secret-looking key (one whose letters
    are all written as ``\\u`` escapes aside: no encoder writes ASCII letters so)."""
    low = data.lower()
    return any(needle in low for needle in _NEEDLES)


def _hidden(value: Any) -> bool:
    return (type(value) is str or type(value) is dict or type(value) is list) and bool(value)


def redact(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced by :data:`REDACTED`, at any
    depth; the very same object when there is nothing to replace (so a caller can tell)."""
    if type(value) is dict:
        out: dict[Any, Any] | None = None
        for k, v in value.items():
            new = REDACTED if type(k) is str and secret_key(k) and _hidden(v) else redact(v)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        return value if out is None else out
    if type(value) is list:
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = redact(v)
            if new is not v:
                if items is None:
                    items = list(value)
                items[i] = new
        return value if items is None else items
    return value


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with its secrets replaced: the argument after ``--token``/``-api-key``
    (any secret-looking option without ``=``), the value of ``--token=X``, ``TOKEN=X`` and
    ``Authorization: X``, a URL's password, and ``key=value`` pairs inside an argument."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            out.append(REDACTED)
            continue
        if arg.startswith("-") and len(arg) > 1 and arg != "--":
            name, eq, _ = arg.lstrip("-").partition("=")
            if secret_key(name):
                if eq:
                    out.append(arg[: arg.index("=") + 1] + REDACTED)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        m = _ASSIGNMENT.fullmatch(arg)
        if m is not None and secret_key(m.group("name")):
            out.append(m.group("name") + m.group("sep") + REDACTED)
            continue
        out.append(redact_text(arg))
    return out


def _text_value(m: re.Match[str]) -> str:
    key = m.group("key")
    value = m.group("value")
    if not secret_key(key.strip("\"'")) or _PLAIN_VALUE.fullmatch(value):
        return m.group(0)
    quote = value[0] if value[:1] in ('"', "'") else ""
    return f"{key}{m.group('sep')}{quote}{REDACTED}{quote}"


def redact_text(text: str) -> str:
    """``text`` with the values of ``key=value``, ``key: value`` and ``"key": "value"`` pairs
    of secret-looking keys, and the passwords of URLs, replaced."""
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    low = text.lower()
    if not any(needle in low for needle in _TEXT_NEEDLES):
        return text
    return _TEXT.sub(_text_value, text)
