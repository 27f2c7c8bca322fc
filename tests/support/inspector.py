"""``sturdyrpc inspect`` as a subprocess, and headless Chromium (Debian's) driven by Playwright.

:func:`start_inspector` runs the command on a server and reads the page's address from its
stderr; :func:`chromium` launches ``/usr/bin/chromium`` (scripts/install_chromium.sh installs
it; the ``playwright`` package of the test extra drives it, no browser of its own downloaded).
Without them the browser tests skip, naming the reason; in CI they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from support.thirdparty import missing_peer

CHROMIUM = "/usr/bin/chromium"
#: The flags this machine needs (no sandbox as root, no GPU, nothing fetched in the background).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
PY = sys.executable


@dataclass
class Inspector:
    """A running ``sturdyrpc inspect``: its base URL, token and process."""

    base: str
    token: str
    proc: subprocess.Popen[str]

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.token}"


@contextmanager
def start_inspector(*args: str, startup: float = 30.0) -> Iterator[Inspector]:
    """``sturdyrpc inspect ARGS`` (e.g. ``"--", PY, "server.py"``) until the block ends (SIGINT,
    as Ctrl-C stops it)."""
    proc = subprocess.Popen([PY, "-m", "sturdyrpc", "inspect", *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + startup
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
            if m:
                yield Inspector(m.group(1), m.group(2), proc)
                break
            if not line and proc.poll() is not None:
                raise AssertionError(f"sturdyrpc inspect exited with {proc.returncode}")
        else:
            raise AssertionError(f"sturdyrpc inspect printed no address within {startup} s (last line: {line!r})")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``BrowserContext``) on a fresh profile (``--user-data-dir``)."""
    if not os.path.exists(CHROMIUM):
        missing_peer(f"{CHROMIUM} not found (run scripts/install_chromium.sh or apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_peer("the playwright package is not installed (pip install -e '.[test]')")
    profile = tempfile.mkdtemp(prefix="sturdyrpc-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
                                                            viewport={"width": 1400, "height": 900}, accept_downloads=True)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
