#!/usr/bin/env bash
# Wheels of what `pip install 'sturdyrpc[cli]'` pulls in (the core dependencies and the cli extra,
# read from pyproject.toml), downloaded once into $STURDYRPC_CACHE/wheelhouse, so that
# tests/integration/test_wheel.py installs the built wheel into a fresh venv without the network.
# Idempotent: nothing is downloaded while the requirements are those of the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${STURDYRPC_CACHE:-$PWD/.cache}"
PY="${PYTHON_FOR_WHEELS:-.venv/bin/python}"
DEST="$CACHE/wheelhouse"
reqs="$("$PY" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["cli"]))
PY
)"
stamp="$DEST/.requirements"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ]; then
    exit 0
fi
mkdir -p "$DEST"
printf '%s\n' "$reqs" > "$DEST/requirements.txt"
"$PY" -m pip download -q --only-binary=:all: -d "$DEST" -r "$DEST/requirements.txt"
printf '%s' "$reqs" > "$stamp"
