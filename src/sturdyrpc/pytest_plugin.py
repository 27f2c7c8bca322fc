"""``sturdyrpc check`` in your own test suite: the ``sturdyrpc_check`` fixture.

Installed with sturdyrpc, pytest loads this plugin by itself (the ``pytest11`` entry point; with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, add ``-p sturdyrpc.pytest_plugin``)::

    import sys

    def test_my_server_speaks_json_rpc(sturdyrpc_check):
        sturdyrpc_check([sys.executable, "my_server.py"], echo_method="echo")

    def test_my_http_server(sturdyrpc_check, my_running_server_url):
        sturdyrpc_check(url=my_running_server_url, strict=True)

The test fails with the report (what was sent, what came back, the rule, the fix) when a
MUST-level check fails (``strict=True``: a SHOULD-level warning too); otherwise the fixture
returns the :class:`~sturdyrpc.check.Report`. ``junit="path.xml"`` also writes the JUnit report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .check import Report

__all__ = ["sturdyrpc_check", "CheckRunner"]

#: ``sturdyrpc_check(command=None, *, url=None, strict=False, areas=None, only=None, junit=None, **options) -> Report``
CheckRunner = Callable[..., "Report"]


def _run_check(
    command: Sequence[str] | None = None,
    *,
    url: str | None = None,
    strict: bool = False,
    areas: Iterable[str] | None = None,
    only: Iterable[str] | None = None,
    junit: str | None = None,
    call_tools: Iterable[str] | None = None,
    **options: Any,
) -> Report:
    """Check the server ``command`` starts (stdio) or the one running at ``url``; fail the
    calling test with the report when it does not pass. ``options`` are those of
    :class:`~sturdyrpc.check.Config`: ``timeout``, ``echo_method``, ``leak_probe``, ``slow``,
    ``mcp``, ``protocol``; ``call_tools`` names the tools the checks may call (``["*"]``: all)."""
    # Imported here: the plugin is loaded into every pytest run of an environment with sturdyrpc.
    from .check import Config, run_checks
    from .check.report import text_report, write_junit

    if (command is None) == (url is None):
        raise TypeError("sturdyrpc_check needs a server command or url=, not both")
    cfg = Config(list(command or ()), url=url, call_tools=set(call_tools) if call_tools is not None else None, **options)
    report = run_checks(cfg, areas=areas, only=only)
    if junit is not None:
        write_junit(report, junit)
    if report.exit_code(strict=strict) != 0:
        pytest.fail(text_report(report), pytrace=False)
    return report


@pytest.fixture
def sturdyrpc_check() -> CheckRunner:
    """Run ``sturdyrpc check`` against a server command or URL; the test fails with the report."""
    return _run_check
