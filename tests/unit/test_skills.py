"""The skills extension's host-side verification (SEP-2640): sizes, digests, frontmatter."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from sturdyrpc.mcp.skills import (
    SkillVerificationError,
    compare_frontmatter,
    list_skills,
    load_skill,
    parse_entries,
    parse_frontmatter,
    read_skill_file,
)

SKILL = "---\nname: pdf-processing\ndescription: 'Extract, fill, and assemble PDF documents'\n---\n\n# PDF\nSkill body.\n"
FORMS = "# Forms\n"


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def entry(skill: str = SKILL, forms: str = FORMS, **fm: Any) -> dict[str, Any]:
    return {"uri": "skill://pdf/SKILL.md",
            "frontmatter": fm or {"name": "pdf-processing", "description": "Extract, fill, and assemble PDF documents"},
            "resources": [{"uri": "skill://pdf/SKILL.md", "digest": digest(skill), "size": len(skill.encode())},
                          {"uri": "skill://pdf/FORMS.md", "digest": digest(forms), "size": len(forms.encode())}]}


class Server:
    """A client stand-in answering from a table; records what was read."""

    def __init__(self, listed: dict[str, Any], files: dict[str, str]) -> None:
        self.listed, self.files, self.reads = listed, files, []  # type: list[str]

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        assert method == "skills/list"
        return {"skills": [self.listed]}

    async def read_resource(self, uri: str) -> dict[str, Any]:
        self.reads.append(uri)
        return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": self.files[uri]}]}


def run(listed: dict[str, Any], skill_text: str) -> tuple[Server, Any]:
    srv = Server(listed, {"skill://pdf/SKILL.md": skill_text, "skill://pdf/FORMS.md": FORMS})

    async def main() -> Any:
        entries = await list_skills(srv)
        assert srv.reads == []  # listing reads nothing
        skill = await load_skill(srv, entries[0])
        return await read_skill_file(srv, skill, "skill://pdf/FORMS.md")
    try:
        return srv, asyncio.run(main())
    except SkillVerificationError as exc:
        return srv, exc


def test_a_verified_skill_loads_and_its_files_are_read_on_demand() -> None:
    srv, got = run(entry(), SKILL)
    assert got == FORMS.encode() and srv.reads == ["skill://pdf/SKILL.md", "skill://pdf/FORMS.md"]


@pytest.mark.parametrize("served, listed, why", [
    (SKILL.replace("Skill body.", "Evil body!!"), entry(), "digest"),
    (SKILL + "extra\n", entry(), "bytes read"),
    (SKILL.replace("assemble PDF", "exfiltrate"), entry(SKILL.replace("assemble PDF", "exfiltrate")), "description"),
    (SKILL, entry(name="pdf-processing", description="Extract, fill, and assemble PDF documents", license="MIT"), "license"),
])
def test_a_mismatch_refuses_the_skill_and_reads_nothing_more(served: str, listed: dict[str, Any], why: str) -> None:
    srv, got = run(listed, served)
    assert isinstance(got, SkillVerificationError) and why in str(got)
    assert srv.reads == ["skill://pdf/SKILL.md"]


@pytest.mark.parametrize("text", [
    "no frontmatter\n", "---\nname: x\n", "---\nname: [a, b]\n---\n", "---\nmeta:\n  owner: x\n---\n",
    "---\nname: x\nname: y\n---\n", "---\nnot a pair\n---\n", "---\nname: \"a\\nb\"\n---\n", "---\nname: x # comment\n---\n",
])
def test_frontmatter_that_cannot_be_read_for_certain_is_refused(text: str) -> None:
    with pytest.raises(SkillVerificationError):
        parse_frontmatter(text)


def test_frontmatter_scalars() -> None:
    assert parse_frontmatter("---\n# c\na: plain text\nb: 'it''s'\nc: \"q\"\n\n---\nbody") == {"a": "plain text", "b": "it's", "c": "q"}


@pytest.mark.parametrize("result", [
    {}, {"skills": {}}, {"skills": [{"frontmatter": {}}]}, {"skills": [{"uri": "s", "frontmatter": []}]},
    {"skills": [{"uri": "s", "frontmatter": {}, "resources": [{"uri": "s", "digest": "md5:00", "size": 1}]}]},
    {"skills": [{"uri": "s", "frontmatter": {}, "resources": [{"uri": "s", "digest": digest(""), "size": -1}]}]},
])
def test_malformed_entries_raise(result: Any) -> None:
    with pytest.raises(SkillVerificationError):
        parse_entries(result)


def test_a_file_not_listed_is_not_read() -> None:
    e = parse_entries({"skills": [entry()]})[0]
    with pytest.raises(SkillVerificationError):
        e.file("skill://pdf/OTHER.md")
    compare_frontmatter(e, {"name": "pdf-processing", "description": "Extract, fill, and assemble PDF documents"})
