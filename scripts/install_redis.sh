#!/usr/bin/env bash
# redis-server for the tests of the Redis store (tests/*/test_store*.py, tests/*/test_workers*.py):
# Debian's package `redis-server` (its service is not needed: the tests start their own server on a
# free port).
set -euo pipefail
exec bash "$(dirname "$0")/apt_package.sh" redis-server redis-server
