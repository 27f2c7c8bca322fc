"""Finding what to serve from a ``module:attr`` name: the one home of that job.

``sturdyrpc run``/``dev`` and every worker process of :mod:`sturdyrpc.mcp_http.workers` import
the user's target by name. The rules (a module name or a ``.py`` path, a dotted attribute, a
factory called once, the module's prints kept off stdout) live here so that a worker resolves a
target exactly as the command that launched it did. This module imports no other sturdyrpc
module: the caller says which kinds of object it accepts.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any

__all__ = ["TargetError", "load_target"]


class TargetError(Exception):
    """The target cannot be served; the message is the one line to show."""


def load_target(spec: str, kinds: tuple[type, ...], *, default_attrs: tuple[str, ...] = (),
                factory_options: dict[str, Any] | None = None, call_factories: bool = True) -> Any:
    """Import ``module:attr`` and return the object it names, an instance of one of ``kinds``.

    ``module`` is an importable name (the current directory first on the path) or a ``.py`` path;
    ``attr`` may be dotted. Without ``:attr`` the first of ``default_attrs`` holding one of
    ``kinds`` is taken. A callable that is none of ``kinds`` is a factory, called once: with
    ``**factory_options`` when it takes ``**kwargs``, else with no argument. What the module
    prints while imported goes to stderr (stdout may be the protocol's). With
    ``call_factories=False`` a factory is returned uncalled (to check a name early). Raises
    :class:`TargetError` with one line to show.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise TargetError(f"{spec!r} names no module; expected module:attr")
    what = " or ".join(k.__name__ for k in kinds)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            module = _import(module_name)
        except TargetError:
            raise
        except BaseException as exc:  # the user's module raised (SystemExit included): one line, not a traceback
            raise TargetError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    names = attr.split(".") if attr else None
    if names is None:
        found = next((a for a in default_attrs if isinstance(getattr(module, a, None), kinds)), None)
        if found is None:
            raise TargetError(f"module {module_name!r} has no {what} named {', '.join(default_attrs)}; say which: {module_name}:NAME")
        names = [found]
    obj: Any = module
    for i, name in enumerate(names):
        if not name.isidentifier() or not hasattr(obj, name):
            raise TargetError(f"module {module_name!r} has no attribute {'.'.join(names[: i + 1])!r}")
        obj = getattr(obj, name)
    if not isinstance(obj, kinds) and callable(obj):
        if not call_factories:
            return obj
        with contextlib.redirect_stdout(sys.stderr):
            try:
                obj = _call_factory(obj, factory_options or {})
            except BaseException as exc:
                raise TargetError(f"{spec} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, kinds):
        raise TargetError(f"{spec} is a {type(obj).__name__}, not an {what}")
    return obj


def _call_factory(factory: Any, options: dict[str, Any]) -> Any:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return factory()
    if options and any(p.kind is p.VAR_KEYWORD for p in params):
        return factory(**options)
    return factory()


def _import(module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = os.path.abspath(module_name)
        if not os.path.isfile(path):
            raise TargetError(f"no such file: {module_name}")
        # The file's own directory first, so that it can import its neighbours.
        sys.path.insert(0, os.path.dirname(path))
        name = os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise TargetError(f"no module named {module_name!r} (run from its directory, or give the path of the .py file)") from exc
        raise
