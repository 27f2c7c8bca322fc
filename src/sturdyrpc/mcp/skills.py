"""The skills extension (SEP-2640, ``io.modelcontextprotocol/skills``), the host's side.

A server lists skills (``skills/list``): each entry names its ``SKILL.md`` by URI, carries the
frontmatter the host shows before loading, and lists every file of the skill with its
``sha256:`` digest and byte size. The host's duties, each kept here:

- nothing is read ahead of need: :func:`list_skills` reads no file; :func:`load_skill` reads the
  ``SKILL.md`` only, and :func:`read_skill_file` one listed file when it is asked for;
- what is read is verified before it is used: its byte size, then its digest, against the entry
  (a size mismatch is a verification failure by itself); a failure raises
  :class:`SkillVerificationError` and nothing of the content is returned;
- the ``SKILL.md``'s frontmatter is parsed and compared field by field with the entry's: any
  difference (a field added, missing or changed) and the skill is not loaded.

Frontmatter is read strictly: ``key: value`` lines with plain, single- or double-quoted scalar
values. Anything else (nesting, lists, block scalars) cannot be compared with certainty, so it is a
verification failure too (the rule: never load what could not be verified).

The verification is sans-I/O (:func:`parse_entries`, :func:`verify_content`,
:func:`parse_frontmatter`, :func:`compare_frontmatter`); the three async functions take any
client with ``request`` and ``read_resource`` (:class:`~sturdyrpc.mcp.client.MCPClient`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "SKILLS_EXTENSION", "SkillFile", "SkillEntry", "LoadedSkill", "SkillVerificationError", "SkillsClient",
    "list_skills", "load_skill", "read_skill_file", "parse_entries", "verify_content", "parse_frontmatter",
    "compare_frontmatter",
]

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class SkillVerificationError(Exception):
    """What was read does not match the skill's entry (size, digest or frontmatter), or the entry
    itself is malformed: the content must not be used."""


class SkillsClient(Protocol):
    """What the skills functions need of a client."""

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    async def read_resource(self, uri: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SkillFile:
    """One file of a skill, as its entry lists it."""

    uri: str
    digest: str
    size: int


@dataclass(frozen=True)
class SkillEntry:
    """One skill of ``skills/list``: its ``SKILL.md`` URI, frontmatter and files."""

    uri: str
    frontmatter: dict[str, Any]
    files: tuple[SkillFile, ...]

    @property
    def name(self) -> str | None:
        n = self.frontmatter.get("name")
        return n if type(n) is str else None

    def file(self, uri: str) -> SkillFile:
        for f in self.files:
            if f.uri == uri:
                return f
        raise SkillVerificationError(f"{uri!r} is not a file of skill {self.uri!r}")


@dataclass(frozen=True)
class LoadedSkill:
    """A skill whose ``SKILL.md`` was read and verified: ``text`` is that file."""

    entry: SkillEntry
    text: str


def _file(raw: Any, where: str) -> SkillFile:
    if type(raw) is not dict:
        raise SkillVerificationError(f"{where}: a file entry must be an object")
    uri, digest, size = raw.get("uri"), raw.get("digest"), raw.get("size")
    if type(uri) is not str or type(digest) is not str or not _DIGEST.fullmatch(digest):
        raise SkillVerificationError(f"{where}: a file entry needs a uri and a sha256:<64 hex> digest")
    if type(size) is not int or size < 0:
        raise SkillVerificationError(f"{where}: file {uri!r} needs a non-negative integer size")
    return SkillFile(uri, digest, size)


def parse_entries(result: Any) -> list[SkillEntry]:
    """The entries of a ``skills/list`` result; a malformed entry raises."""
    skills = result.get("skills") if type(result) is dict else None
    if type(skills) is not list:
        raise SkillVerificationError("skills/list: the result has no skills array")
    out = []
    for i, raw in enumerate(skills):
        where = f"skills/list: skill {i}"
        if type(raw) is not dict or type(raw.get("uri")) is not str:
            raise SkillVerificationError(f"{where}: needs a uri")
        fm = raw.get("frontmatter")
        if type(fm) is not dict:
            raise SkillVerificationError(f"{where}: needs a frontmatter object")
        files = raw.get("resources") or []
        if type(files) is not list:
            raise SkillVerificationError(f"{where}: resources must be an array")
        out.append(SkillEntry(raw["uri"], fm, tuple(_file(f, where) for f in files)))
    return out


def verify_content(listed: SkillFile, content: bytes) -> None:
    """Raise unless ``content`` has the listed size and digest (size first: a mismatch is a
    failure whether or not the digest would be computed)."""
    if len(content) != listed.size:
        raise SkillVerificationError(f"{listed.uri}: {len(content)} bytes read, the entry lists {listed.size}")
    got = "sha256:" + hashlib.sha256(content).hexdigest()
    if got != listed.digest:
        raise SkillVerificationError(f"{listed.uri}: the content does not match the entry's digest")


def _scalar(value: str, where: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        if value[0] == "'":
            return inner.replace("''", "'")
        if "\\" in inner:
            raise SkillVerificationError(f"{where}: escapes in double-quoted values are not read")
        return inner
    if not value or value[0] in "[{|>&*!%@`'\"" or value.startswith("- ") or " #" in value:
        raise SkillVerificationError(f"{where}: only plain or quoted scalar values are read")
    return value


def parse_frontmatter(text: str) -> dict[str, str]:
    """The frontmatter of a ``SKILL.md`` (between its first two ``---`` lines), strictly."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillVerificationError("SKILL.md has no frontmatter")
    out: dict[str, str] = {}
    for n, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            return out
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"SKILL.md line {n}"
        key, sep, value = line.partition(":")
        if not sep or not _KEY.fullmatch(key):
            raise SkillVerificationError(f"{where}: expected 'key: value'")
        if key in out:
            raise SkillVerificationError(f"{where}: {key!r} given twice")
        out[key] = _scalar(value.strip(), where)
    raise SkillVerificationError("SKILL.md's frontmatter is not closed by '---'")


def compare_frontmatter(entry: SkillEntry, parsed: dict[str, str]) -> None:
    """Raise on any difference between the entry's frontmatter and the file's."""
    for key in sorted(set(entry.frontmatter) | set(parsed)):
        if key not in parsed or key not in entry.frontmatter or entry.frontmatter[key] != parsed[key]:
            raise SkillVerificationError(f"{entry.uri}: frontmatter field {key!r} differs from the skill's entry")


def _content_bytes(result: Any, uri: str) -> bytes:
    contents = result.get("contents") if type(result) is dict else None
    if type(contents) is not list or len(contents) != 1 or type(contents[0]) is not dict:
        raise SkillVerificationError(f"{uri}: expected exactly one content item")
    item = contents[0]
    if item.get("uri") not in (None, uri):
        raise SkillVerificationError(f"{uri}: the server answered with another resource")
    if type(item.get("text")) is str:
        return bytes(item["text"].encode("utf-8"))
    if type(item.get("blob")) is str:
        try:
            return base64.b64decode(item["blob"], validate=True)
        except binascii.Error:
            raise SkillVerificationError(f"{uri}: the blob is not base64") from None
    raise SkillVerificationError(f"{uri}: the content has neither text nor blob")


async def list_skills(client: SkillsClient) -> list[SkillEntry]:
    """``skills/list``: the entries, no file read."""
    return parse_entries(await client.request("skills/list", {}))


async def load_skill(client: SkillsClient, entry: SkillEntry) -> LoadedSkill:
    """Read the skill's ``SKILL.md``, verify it (size, digest, frontmatter) and return it."""
    content = _content_bytes(await client.read_resource(entry.uri), entry.uri)
    verify_content(entry.file(entry.uri), content)
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillVerificationError(f"{entry.uri}: SKILL.md is not UTF-8") from None
    compare_frontmatter(entry, parse_frontmatter(text))
    return LoadedSkill(entry, text)


async def read_skill_file(client: SkillsClient, skill: LoadedSkill, uri: str) -> bytes:
    """One listed file of a loaded skill, verified against its entry."""
    listed = skill.entry.file(uri)
    content = _content_bytes(await client.read_resource(uri), uri)
    verify_content(listed, content)
    return content
