"""``sturdyrpc install``: each client's file in its own format, other servers and settings left
alone, a different server of the same name refused, and the written entry starting the server
(with the official Python SDK's stdio client, from another directory)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.sdk import Client, StdioServerParameters, need_python_sdk
from support.thirdparty import uv_dir

pytestmark = pytest.mark.timeout(60)

SERVER = SERVERS / "mcp_install_server.py"

#: client -> (a file as the client writes it, with another server and settings of its own;
#: the key servers are under; the shape of our entry beyond command/args/env)
FILES: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "claude-desktop": ({"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}},
                        "globalShortcut": "Alt+Space"}, "mcpServers", {}),
    "claude-code": ({"numStartups": 12, "projects": {"/home/u/p": {"mcpServers": {}, "allowedTools": []}},
                     "mcpServers": {"git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "env": {}}}},
                    "mcpServers", {"type": "stdio"}),
    "cursor": ({"mcpServers": {"remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}}}},
               "mcpServers", {}),
    "vscode": ({"inputs": [{"type": "promptString", "id": "api-key", "description": "API key", "password": True}],
                "servers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"}}}, "servers", {"type": "stdio"}),
    "gemini-cli": ({"theme": "GitHub", "general": {"vimMode": True},
                    "mcpServers": {"py": {"command": "python", "args": ["-m", "tools"], "cwd": "./srv", "timeout": 30000, "trust": False}}},
                   "mcpServers", {}),
    "mcp-json": ({"mcpServers": {"other": {"command": "node", "args": ["s.js"]}}}, "mcpServers", {}),
}


def install(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sturdyrpc", "install", *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd, env={**os.environ, **(env or {})})


def started(entry: dict[str, Any], where: Path, module: str | None = None) -> str:
    """What the entry's server answers, started as a client starts it (command, args, env);
    with ``module``, also whether it can import that."""
    need_python_sdk()

    async def main() -> str:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry.get("env"), cwd=str(where))
        async with Client(params, read_timeout_seconds=60) as c:
            r = await c.call_tool("forecast", {"city": "Oslo"})
            text = str(r.content[0].text)
            if module is not None:
                r = await c.call_tool("has", {"module": module})
                text += f" has {module}: {r.structured_content['result']}"
            return text

    return asyncio.run(main())


@pytest.mark.parametrize("client", list(FILES))
def test_install_writes_the_clients_format_and_keeps_the_rest(tmp_path: Path, client: str) -> None:
    before, key, shape = FILES[client]
    path = tmp_path / "conf" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(before, indent=4))
    r = install(client, f"{SERVER}:server", "--config", str(path), "--env", "UNITS=C", "--env", "EMPTY=")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    after = json.loads(path.read_text())
    ours = after[key].pop("weather")
    assert after == before  # every other server and setting as it was
    assert {k: ours[k] for k in shape} == shape
    assert ours["command"] == sys.executable
    assert ours["args"] == ["-m", "sturdyrpc", "run", f"{SERVER}:server"]
    assert ours["env"] == {"UNITS": "C", "EMPTY": ""}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert started(ours, elsewhere) == f"Oslo: sunny, 21 C ({sys.executable})"


@pytest.mark.parametrize("client", ["claude-desktop", "vscode"])
def test_a_different_server_of_that_name_is_refused_and_the_same_one_updated(tmp_path: Path, client: str) -> None:
    _, key, _ = FILES[client]
    path = tmp_path / "c.json"
    taken = {key: {"weather": {"command": "node", "args": ["weather.js"]}}}
    path.write_text(json.dumps(taken))
    r = install(client, f"{SERVER}:server", "--config", str(path))
    assert r.returncode == 1
    assert "another server named 'weather' (it starts node weather.js)" in r.stderr and "--name" in r.stderr
    assert json.loads(path.read_text()) == taken
    r = install(client, f"{SERVER}:server", "--config", str(path), "--name", "weather2", "--env", "A=1", "--env", "UNITS=F")
    assert r.returncode == 0, r.stderr
    r = install(client, f"{SERVER}:server", "--config", str(path), "--name", "weather2", "--env", "UNITS=K")
    assert r.returncode == 0, r.stderr
    servers = json.loads(path.read_text())[key]
    assert servers["weather"] == taken[key]["weather"]
    assert servers["weather2"]["env"] == {"A": "1", "UNITS": "K"}  # merged, the new value wins


BAD_FILES = [
    ('{"servers": {}, // mine\n}', "not plain JSON"),
    ("[1, 2]", "does not hold a JSON object"),
    ('{"mcpServers": []}', "'mcpServers' is not an object"),
]


@pytest.mark.parametrize(("text", "says"), BAD_FILES)
def test_a_file_it_cannot_read_is_left_alone(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    client = "vscode" if "servers" in text else "cursor"
    r = install(client, f"{SERVER}:server", "--config", str(path))
    assert r.returncode == 1 and says in r.stderr, r.stderr
    assert path.read_text() == text


def test_mcp_json_prints_the_entry(tmp_path: Path) -> None:
    r = install("mcp-json", f"{SERVER}:server", "--name", "wx")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"wx": {"command": sys.executable, "args": ["-m", "sturdyrpc", "run", f"{SERVER}:server"]}}


def test_default_files_on_linux_and_a_module_target(tmp_path: Path) -> None:
    """Without --config each client's own file under HOME (XDG_CONFIG_HOME for Claude Desktop,
    the current directory for VS Code); a module name from the current directory gets it as
    PYTHONPATH, so the client can start it from anywhere."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the default paths checked here are Linux's")
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    shutil.copy(SERVER, project / "weather_app.py")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    wanted = {
        "claude-desktop": tmp_path / "xdg" / "Claude" / "claude_desktop_config.json",
        "claude-code": home / ".claude.json",
        "cursor": home / ".cursor" / "mcp.json",
        "vscode": project / ".vscode" / "mcp.json",
        "gemini-cli": home / ".gemini" / "settings.json",
    }
    for client, path in wanted.items():
        r = install(client, "weather_app:server", cwd=project, env=env)
        assert r.returncode == 0, r.stderr
        assert str(path) in r.stderr
        entry = json.loads(path.read_text())[FILES[client][1]]["weather"]
        assert entry["args"] == ["-m", "sturdyrpc", "run", "weather_app:server"]
        assert entry["env"] == {"PYTHONPATH": str(project)}
    assert started({**entry, "env": {**entry["env"], "UNITS": "F"}}, tmp_path).startswith("Oslo: sunny, 21 F")


USAGE = [
    (["cursor", "nope_no_such_module:server"], "no module named 'nope_no_such_module'"),
    (["cursor", f"{SERVER}:missing"], "has no attribute 'missing'"),
    (["cursor", f"{SERVER}:server", "--env", "NOEQUALS"], "--env takes KEY=VALUE"),
]


@pytest.mark.parametrize(("args", "says"), USAGE)
def test_usage_errors_change_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    path = tmp_path / "c.json"
    r = install(*args, "--config", str(path))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert not path.exists()


def test_with_packages_needs_uv(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    path = tmp_path / "c.json"
    r = install("cursor", f"{SERVER}:server", "--with", "httpx", "--config", str(path), env={"PATH": str(bare)})
    assert r.returncode == 2 and "--with needs uv" in r.stderr
    assert not path.exists()


def test_with_packages_starts_the_server_with_them(tmp_path: Path) -> None:
    """The entry runs ``uv run --with PACKAGE`` over this interpreter: the server sees sturdyrpc
    (this interpreter's) and the package (uv's), which this interpreter does not have."""
    uv = uv_dir()
    assert importlib.util.find_spec("six") is None, "the test needs a package this interpreter lacks"
    path = tmp_path / "c.json"
    # the machine's certificate settings, for uv to reach the index (a client passes the
    # entry's env and little else)
    certs = [f"--env={k}={os.environ[k]}" for k in ("SSL_CERT_FILE", "SSL_CERT_DIR") if k in os.environ]
    r = install("cursor", f"{SERVER}:server", "--with", "six==1.17.0", "--config", str(path), *certs,
                env={"PATH": f"{uv}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert r.returncode == 0, r.stderr
    entry = json.loads(path.read_text())["mcpServers"]["weather"]
    assert entry["command"] == str(uv / "uv")
    assert entry["args"] == ["run", "--no-project", "--python", sys.executable, "--with", "six==1.17.0",
                             "python", "-m", "sturdyrpc", "run", f"{SERVER}:server"]
    answer = started(entry, tmp_path, module="six")
    assert answer.startswith("Oslo: sunny, 21 ? (") and answer.endswith(" has six: True")


def test_a_factory_is_named_after_its_module_and_not_called(tmp_path: Path) -> None:
    shutil.copy(SERVER, tmp_path / "weather_app.py")
    for target, name in ((f"{SERVER}:make_server", "mcp_install_server"), ("weather_app:make_server", "weather_app")):
        r = install("mcp-json", target, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        (got, entry), = json.loads(r.stdout).items()
        assert got == name and entry["args"][-1] == target
    assert started(entry, tmp_path).startswith("Oslo: sunny")  # sturdyrpc run calls the factory
