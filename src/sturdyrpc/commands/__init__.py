"""Subcommands of the ``sturdyrpc`` program, one module each.

Each module defines ``register(subparsers)``, which adds its parser and sets
``func`` to a function taking the parsed namespace and returning an exit code.
Modules import their heavy dependencies inside ``func`` so that ``sturdyrpc demo``
starts fast.
"""

#: Subcommand modules, in the order ``--help`` lists them.
MODULES = ["demo", "call", "check", "mcp", "trace", "guard", "replay", "run", "dev"]

# Exit codes shared by the client subcommands (call, mcp), as timeout(1) and shells use them.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_NOT_STARTED = 127
EXIT_INTERRUPTED = 130
