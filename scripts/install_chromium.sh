#!/usr/bin/env bash
# Headless Chromium for the browser tests of `sturdyrpc inspect` (tests/integration/test_inspect_browser.py),
# driven by the `playwright` package of the test extra, which is pointed at /usr/bin/chromium and never
# downloads a browser of its own: Debian's package `chromium`.
set -euo pipefail
exec bash "$(dirname "$0")/apt_package.sh" chromium /usr/bin/chromium
