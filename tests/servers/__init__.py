"""The programs the tests start (servers, clients, wrappers) and the apps they serve in process.

Each script runs on its own (``python tests/servers/NAME.py``, or ``sturdyrpc run
tests/servers/NAME.py:ATTR``) and imports only its neighbours here, never a test helper; the
tests name them through ``support.SERVERS`` and import the in-process ones as ``servers.NAME``.
Folders: ``check_zoo/`` (one classic bug per server, for ``sturdyrpc check``),
``check_thirdparty/`` (servers built on third-party libraries), ``ts/`` and ``ts_http/`` (the
official TypeScript SDK clients, run by Node).
"""
