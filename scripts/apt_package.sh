#!/usr/bin/env bash
# Usage: apt_package.sh PACKAGE COMMAND-OR-PATH
# Installs the Debian package PACKAGE unless COMMAND-OR-PATH is already there (a command on PATH or
# an executable path): idempotent and quiet. CI runs as root on a fresh Debian machine; elsewhere
# sudo is used, and without apt-get the script says what to install and fails.
set -euo pipefail
pkg="$1"
want="$2"
present() { command -v "$want" >/dev/null 2>&1 || [ -x "$want" ]; }
if present; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no $want and no apt-get: install the package '$pkg' (or its equivalent) yourself" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
present
