"""``sturdyrpc check``: find JSON-RPC 2.0 and MCP protocol bugs in any stdio server (or, with
``Config(url=...)``, a running HTTP server: see :mod:`.http`).

The checker is a low-level driver: it writes raw bytes to the server's stdin, reads its
stdout line by line, and validates everything strictly itself. It does not use the
project's :class:`~sturdyrpc.peer.Peer`, whose tolerance would hide the bugs it looks for.

>>> from sturdyrpc.check import Config, run_checks
>>> report = run_checks(Config(["sturdyrpc", "demo"]))   # doctest: +SKIP
>>> report.summary()                                       # doctest: +SKIP
'48 passed, 0 failed'
"""

from .config import Config
from .engine import all_checks, run_checks
from .model import AREAS, Check, CheckSpec, Level, Outcome, Report, Status

__all__ = ["run_checks", "all_checks", "Config", "Report", "Outcome", "Status", "Level", "Check", "CheckSpec", "AREAS"]
