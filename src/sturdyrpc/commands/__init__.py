"""Subcommands of the ``sturdyrpc`` program, one module each.

Each module defines ``register(subparsers)``, which adds its parser and sets
``func`` to a function taking the parsed namespace and returning an exit code.
Modules import their heavy dependencies inside ``func`` so that ``sturdyrpc demo``
starts fast.
"""

#: Subcommand modules, in the order ``--help`` lists them.
MODULES = ["demo", "call", "check", "mcp"]
