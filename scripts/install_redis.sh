#!/usr/bin/env bash
# redis-server for the tests of the Redis store (tests/*/test_store*.py, tests/*/test_workers*.py).
# Idempotent and quiet when a redis-server is already on PATH; otherwise installs the Debian
# package `redis-server` with apt-get (CI runs as root on a fresh Debian machine).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_redis.sh: no redis-server on PATH and no apt-get; install redis-server yourself" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null
# The package's service is not needed (the tests start their own server on a free port).
command -v redis-server >/dev/null
