"""``sturdyrpc install CLIENT module:attr``: add your server to an MCP client's configuration.

``CLIENT`` is one of ``claude-desktop``, ``claude-code``, ``cursor``, ``vscode``, ``gemini-cli``
or ``mcp-json``. The entry starts ``sturdyrpc run module:attr`` (stdio) with this interpreter
(``sys.executable``: the one sturdyrpc and the server's imports are installed in), the target
made absolute (a ``.py`` path; a module under the current directory gets it as ``PYTHONPATH``),
so the client may start it from any directory. ``--with PACKAGE`` starts it with
``uv run --with PACKAGE`` over the same interpreter instead (needs ``uv``).

Each client's own file and format (``--config PATH`` for another file):

==============  =====================================================  ==========================
client          default file                                           entries under
==============  =====================================================  ==========================
claude-desktop  ``claude_desktop_config.json`` in Claude's config dir  ``mcpServers``
claude-code     ``~/.claude.json`` (user scope; ``.mcp.json``: project) ``mcpServers`` (``type: stdio``)
cursor          ``~/.cursor/mcp.json``                                 ``mcpServers``
vscode          ``.vscode/mcp.json`` of the current directory          ``servers`` (``type: stdio``)
gemini-cli      ``~/.gemini/settings.json``                            ``mcpServers``
mcp-json        printed on stdout (``--config``: merged into a file)   ``{name: entry}`` / ``mcpServers``
==============  =====================================================  ==========================

Everything else in the file is kept as it was, and so is every other server's entry. An entry
of the same name that starts something else is refused (exit 1: choose another ``--name``);
one that starts the same server is updated (its ``env`` merged, the new values winning). The file
is replaced in one step (written beside it, then renamed). A file that is not a JSON object
(JSON with comments included) is refused rather than rewritten.

The pure parts (:func:`server_entry`, :func:`merged`) take and return plain data; reading the
target, the file and the environment is :func:`run`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from . import EXIT_ERROR, EXIT_USAGE

__all__ = ["register", "CLIENTS", "server_entry", "merged", "default_config"]

#: client -> (the key its file holds servers under, whether an entry says ``"type": "stdio"``,
#: the name people know it by).
CLIENTS: dict[str, tuple[str, bool, str]] = {
    "claude-desktop": ("mcpServers", False, "Claude Desktop"),
    "claude-code": ("mcpServers", True, "Claude Code"),
    "cursor": ("mcpServers", False, "Cursor"),
    "vscode": ("servers", True, "VS Code"),
    "gemini-cli": ("mcpServers", False, "Gemini CLI"),
    "mcp-json": ("mcpServers", False, "an mcp.json"),
}


class InstallRefused(Exception):
    """The configuration is not changed; the message says why (one line)."""


def register(sub: Any) -> None:
    p = sub.add_parser("install", help="add your MCP server to a client's config: sturdyrpc install claude-desktop module:attr",
                       description="Write the entry that starts your MCP server (sturdyrpc run module:attr, on stdio, with "
                                   "this interpreter) into an MCP client's configuration; mcp-json prints it.")
    p.add_argument("client", choices=list(CLIENTS), help="the client whose configuration to change")
    p.add_argument("target", metavar="module:attr", help="the server: module (or file.py) and attribute, as for sturdyrpc run")
    p.add_argument("--name", help="the server's name in the client (default: the MCPServer's name)")
    p.add_argument("--env", metavar="KEY=VALUE", action="append", default=[], help="an environment variable for the server (repeatable)")
    p.add_argument("--with", dest="with_packages", metavar="PACKAGE", action="append", default=[],
                   help="a package the server needs beyond this interpreter's: started with uv run --with (repeatable)")
    p.add_argument("--config", metavar="PATH", help="the configuration file to change (default: the client's own)")
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------------- pure parts


def server_entry(client: str, command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The configuration entry of ``client`` that runs ``command`` with ``env``."""
    entry: dict[str, Any] = {"type": "stdio"} if CLIENTS[client][1] else {}
    entry["command"] = command[0]
    entry["args"] = command[1:]
    if env:
        entry["env"] = dict(env)
    return entry


def merged(client: str, config: Any, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a client's file, parsed) with ``entry`` as server ``name``; raises
    :class:`InstallRefused` for a file of another shape or a different server of that name."""
    if not isinstance(config, dict):
        raise InstallRefused("the file does not hold a JSON object")
    key = CLIENTS[client][0]
    servers = config.get(key, {})
    if not isinstance(servers, dict):
        raise InstallRefused(f"its {key!r} is not an object")
    old = servers.get(name)
    if old is not None:
        if not isinstance(old, dict) or old.get("command") != entry["command"] or old.get("args") != entry["args"]:
            what = " ".join([str(old.get("command", "?")), *map(str, old.get("args") or [])]) if isinstance(old, dict) else "?"
            raise InstallRefused(f"it has another server named {name!r} (it starts {what}); choose another --name, or remove that entry")
        env = {**(old.get("env") or {}), **(entry.get("env") or {})}
        entry = {**old, **entry, **({"env": env} if env else {})}
    return {**config, key: {**servers, name: entry}}


def default_config(client: str, home: Path, environ: dict[str, str], platform: str, cwd: Path) -> Path:
    """Where ``client`` keeps its configuration on ``platform`` (``sys.platform``)."""
    if client == "claude-desktop":
        if platform == "darwin":
            base = home / "Library" / "Application Support"
        elif platform == "win32":
            base = Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
        else:
            base = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        return base / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        return home / ".claude.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "vscode":
        return cwd / ".vscode" / "mcp.json"
    return home / ".gemini" / "settings.json"


# ---------------------------------------------------------------------------------- I/O


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    sys.stderr.write(f"sturdyrpc install: {message}\n")
    sys.stderr.flush()
    return code


def run(args: argparse.Namespace) -> int:
    env: dict[str, str] = {}
    for item in args.env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            return _fail(f"--env takes KEY=VALUE, got {item!r}", EXIT_USAGE)
        env[key] = value
    try:
        target, name, pythonpath = _resolve(args.target)
        if pythonpath is not None and "PYTHONPATH" not in env:
            env["PYTHONPATH"] = pythonpath
        command = _command(target, args.with_packages)
    except InstallRefused as exc:
        return _fail(str(exc), EXIT_USAGE)
    name = args.name or name
    entry = server_entry(args.client, command, env)
    if args.client == "mcp-json" and args.config is None:
        sys.stdout.write(json.dumps({name: entry}, indent=2) + "\n")
        return 0
    path = Path(args.config) if args.config else default_config(args.client, Path.home(), dict(os.environ), sys.platform, Path.cwd())
    try:
        _write(path, merged(args.client, _read(path), name, entry))
    except InstallRefused as exc:
        return _fail(f"{path} not changed: {exc}")
    except OSError as exc:
        return _fail(f"{path} not changed: {exc.strerror or exc}")
    sys.stderr.write(f"sturdyrpc install: {name!r} is in {path} ({CLIENTS[args.client][2]}); restart the client to load it\n")
    return 0


def _resolve(spec: str) -> tuple[str, str, str | None]:
    """The target as the entry names it (a ``.py`` path made absolute), the server's name, and
    the directory to put on ``PYTHONPATH`` (a module found under the current directory)."""
    from ..mcp.server import MCPServer
    from ..targets import TargetError, load_target

    try:
        found = load_target(spec, (MCPServer,), default_attrs=("mcp", "server", "app"), call_factories=False)
    except TargetError as exc:
        raise InstallRefused(str(exc)) from None
    module, _, attr = spec.partition(":")
    is_file = module.endswith(".py") or os.sep in module or "/" in module
    # a factory is not called here (it may start things): the module's name stands in
    name = found.name if isinstance(found, MCPServer) else (Path(module).stem if is_file else module.rpartition(".")[2])
    if is_file:
        path = os.path.abspath(module)
        return (f"{path}:{attr}" if attr else path), name, None
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    cwd = os.getcwd()
    local = isinstance(file, str) and os.path.abspath(file).startswith(cwd + os.sep)
    return spec, name, cwd if local else None


def _command(target: str, packages: list[str]) -> list[str]:
    """The command line that serves ``target`` on stdio."""
    serve = ["-m", "sturdyrpc", "run", target]
    if not packages:
        return [sys.executable, *serve]
    uv = shutil.which("uv")
    if uv is None:
        raise InstallRefused("--with needs uv on the PATH (https://docs.astral.sh/uv/), which starts the server with those packages")
    withs = [part for p in packages for part in ("--with", p)]
    return [uv, "run", "--no-project", "--python", sys.executable, *withs, "python", *serve]


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstallRefused(f"it is not plain JSON ({exc.msg}, line {exc.lineno}); add the entry by hand") from None


def _write(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)  # the client's file keeps its permissions
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
