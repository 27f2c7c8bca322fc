"""Every whole program in the documentation runs as the page says (docs/how-to/docs-examples.md).

A block fenced ```` ```python title="NAME.py" ```` in README.md or docs/ is a whole program: its
first line is ``# run: <shell command>``, then ``# prints: <line>`` lines. The block is written
to a temporary directory as NAME.py and the command run there (bash, stdin closed); it must exit
0 and print exactly those lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ROOT

FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
TITLE = re.compile(r'title="([^"]+)"')


@dataclass(frozen=True)
class Program:
    page: str
    line: int
    title: str
    code: str

    @property
    def command(self) -> str | None:
        first = self.code.split("\n", 1)[0]
        return first.removeprefix("# run: ") if first.startswith("# run: ") else None

    @property
    def prints(self) -> list[str]:
        return [line.removeprefix("# prints: ") for line in self.code.splitlines() if line.startswith("# prints: ")]


def programs_in(text: str, page: str) -> list[Program]:
    found = []
    for m in FENCE.finditer(text):
        title = TITLE.search(m.group(1))
        if title:
            found.append(Program(page, text.count("\n", 0, m.start()) + 1, title.group(1), m.group(2)))
    return found


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


PROGRAMS = [p for page in _pages() for p in programs_in(page.read_text(), str(page.relative_to(ROOT)))]


def test_the_pages_hold_programs_to_run() -> None:
    # The README's server and the tutorials' at least: a broken pattern must not pass by finding none.
    pages = {p.page for p in PROGRAMS}
    assert {"README.md", "docs/tutorials/first-server.md", "docs/tutorials/mcp-server.md", "docs/how-to/docs-examples.md"} <= pages


def test_the_convention_is_read_as_documented() -> None:
    text = 'x\n```python title="a.py"\n# run: python a.py\n# prints: 1\n# prints: 2\nprint(1)\n```\n```python\nnot a program\n```\n'
    (p,) = programs_in(text, "page.md")
    assert (p.line, p.title, p.command, p.prints) == (2, "a.py", "python a.py", ["1", "2"])
    (q,) = programs_in('```python title="b.py"\nprint(2)\n```\n', "page.md")
    assert q.command is None


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: f"{p.page}:{p.line}:{p.title}")
def test_program_runs_as_the_page_says(program: Program, tmp_path: Path) -> None:
    assert program.command is not None, f"{program.page}:{program.line}: a titled python block needs a first line '# run: <command>'"
    (tmp_path / program.title).write_text(program.code)
    # `python` and `sturdyrpc` are the test environment's (its bin directory first on PATH).
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    r = subprocess.run(["bash", "-c", program.command], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{program.page}:{program.line}: {program.command!r} exited {r.returncode}\n{r.stderr[-2000:]}"
    assert r.stdout.splitlines() == program.prints, f"{program.page}:{program.line}: {program.command!r} printed\n{r.stdout[-2000:]}"
