"""The package as a user gets it: ``python -m build`` makes an sdist and a wheel (the wheel built
from the sdist, so a file missing from the sdist shows), ``twine check`` accepts both, and the
wheel installed with only the ``cli`` extra into a fresh venv runs ``sturdyrpc demo`` and checks
it with ``sturdyrpc check``. This catches missing package data and undeclared dependencies: the
fresh venv has nothing but the wheel's declared requirements (from the wheelhouse that
``scripts/install_wheelhouse.sh`` fills, so no network is needed here)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ROOT
from support.thirdparty import CACHE, missing_peer

from sturdyrpc import __version__

WHEELHOUSE = CACHE / "wheelhouse"


def _run(cmd: list[str], *, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess[str]:
    # No input: stdin is /dev/null, never the test runner's.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built without isolation (the build backend is in the test venv)."""
    out = tmp_path_factory.mktemp("dist")
    r = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def fresh_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv (no system site-packages, no pip of its own) with the wheel and the cli extra."""
    if not (WHEELHOUSE / "requirements.txt").exists():
        missing_peer(f"no wheelhouse in {WHEELHOUSE} (run scripts/install_wheelhouse.sh)")
    venv = tmp_path_factory.mktemp("venv") / "v"
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert r.returncode == 0, r.stderr
    python = venv / "bin" / "python"
    (wheel,) = dist.glob("*.whl")
    r = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
         "--find-links", str(WHEELHOUSE), f"{wheel}[cli]"],
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    yield venv


def test_sdist_and_wheel_pass_twine_check_and_carry_the_licence(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    assert sdist.name == f"sturdyrpc-{__version__}.tar.gz" and wheel.name == f"sturdyrpc-{__version__}-py3-none-any.whl"
    r = _run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASSED") == 2, r.stdout
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(f"sturdyrpc-{__version__}.dist-info/METADATA").decode()
    assert f"sturdyrpc-{__version__}.dist-info/licenses/LICENSE" in names
    assert "sturdyrpc/py.typed" in names
    assert "License-Expression: MIT" in metadata and f"Version: {__version__}" in metadata
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml", "src/sturdyrpc/py.typed"} <= members


def test_the_fresh_venv_has_only_the_cli_extra(fresh_venv: Path) -> None:
    python = str(fresh_venv / "bin" / "python")
    r = _run([python, "-c", "import importlib.util as u; print([m for m in ('httpx', 'uvicorn', 'pytest', 'rich', 'msgspec') if u.find_spec(m)])"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['rich', 'msgspec']"
    r = _run([str(fresh_venv / "bin" / "sturdyrpc"), "--version"])
    assert (r.returncode, r.stdout.strip()) == (0, f"sturdyrpc {__version__}")


@pytest.mark.parametrize(
    ("args", "request_", "expected"),
    [
        ([], {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["hi"]}, {"jsonrpc": "2.0", "result": "hi", "id": 1}),
        ([], {"jsonrpc": "2.0", "id": "x", "method": "nope"}, {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "x"}),
        (["--mcp"], {"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"jsonrpc": "2.0", "result": {}, "id": 2}),
    ],
)
def test_the_installed_demo_answers(fresh_venv: Path, args: list[str], request_: dict[str, object], expected: dict[str, object]) -> None:
    r = _run([str(fresh_venv / "bin" / "sturdyrpc"), "demo", *args], input=json.dumps(request_) + "\n")
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    got = json.loads(line)
    if "error" in expected:
        got["error"].pop("data", None)
    assert got == expected


@pytest.mark.parametrize("args", [[], ["--mcp"]])
def test_the_installed_check_passes_the_installed_demo(fresh_venv: Path, tmp_path: Path, args: list[str]) -> None:
    exe = str(fresh_venv / "bin" / "sturdyrpc")
    junit = tmp_path / "check.xml"
    r = _run([exe, "check", "--junit", str(junit), "--", exe, "demo", *args], timeout=90)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "optional dependency" not in r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed") and int(last.split()[0]) > 20, last
    assert junit.read_text().startswith("<?xml")
