#!/usr/bin/env bash
# Headless Chromium for the browser tests of `sturdyrpc inspect` (tests/integration/test_inspect_browser.py),
# driven by the `playwright` package of the test extra, which is pointed at /usr/bin/chromium and never
# downloads a browser of its own. Idempotent and quiet when /usr/bin/chromium is there; otherwise
# installs the Debian package `chromium` with apt-get (CI runs as root on a fresh Debian machine).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_chromium.sh: no /usr/bin/chromium and no apt-get; install Chromium yourself" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
test -x /usr/bin/chromium
