"""JSON Schema (draft 2020-12) from Python type hints, for tool inputs and outputs.

Plain types map directly (``int`` -> ``integer``, ``list[str]`` -> array of strings,
``Literal`` -> ``enum``, ``X | None`` -> ``anyOf``); structured types (msgspec Structs,
dataclasses, TypedDicts, enums) go through :func:`msgspec.json.schema_components`, their
definitions collected under ``$defs``.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import msgspec

__all__ = ["DIALECT", "schema_for", "input_schema", "output_schema", "wraps_output"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def build(self, hint: Any) -> dict[str, Any]:
        if hint is inspect.Parameter.empty or hint is Any or hint is object:
            return {}
        if hint is None or hint is type(None):
            return {"type": "null"}
        if hint is bool:
            return {"type": "boolean"}
        if hint is int:
            return {"type": "integer"}
        if hint is float:
            return {"type": "number"}
        if hint is str:
            return {"type": "string"}
        if hint is bytes:
            return {"type": "string", "contentEncoding": "base64"}
        if hint is list or hint is tuple:
            return {"type": "array"}
        if hint is dict:
            return {"type": "object"}
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            return self.build(args[0])
        if origin is Union or origin is types.UnionType:
            subs = [self.build(a) for a in args]
            if any(s == {} for s in subs):
                return {}
            return {"anyOf": subs}
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (list, collections.abc.Sequence, set, frozenset):
            out: dict[str, Any] = {"type": "array"}
            if args:
                item = self.build(args[0])
                if item:
                    out["items"] = item
            return out
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                item = self.build(args[0])
                return {"type": "array", "items": item} if item else {"type": "array"}
            return {"type": "array", "prefixItems": [self.build(a) for a in args], "minItems": len(args), "maxItems": len(args)}
        if origin in (dict, collections.abc.Mapping):
            out = {"type": "object"}
            if len(args) == 2:
                value = self.build(args[1])
                if value:
                    out["additionalProperties"] = value
            return out
        return self._structured(hint)

    def _structured(self, hint: Any) -> dict[str, Any]:
        try:
            (schema,), components = msgspec.json.schema_components((hint,), ref_template="#/$defs/{name}")
        except Exception:
            return {}
        self.defs.update(components)
        return dict(schema)


def schema_for(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint (with ``$defs`` at the top when needed)."""
    b = _Builder()
    out = b.build(hint)
    if b.defs:
        out = {**out, "$defs": b.defs}
    return out


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def input_schema(
    fn: Callable[..., Any], skip: Callable[[Any], bool] = lambda h: False, hints: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``inputSchema`` of a tool: an object with one property per parameter.

    Parameters whose hint satisfies ``skip`` (the request context) are left out; parameters
    without a default are ``required``; unknown properties are not allowed. ``hints``: the
    function's resolved type hints, when the caller has them already.
    """
    if hints is None:
        hints = _hints(fn)
    b = _Builder()
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        hint = hints.get(p.name, p.annotation)
        if skip(hint):
            continue
        s = b.build(hint)
        if p.default is not inspect.Parameter.empty:
            try:
                msgspec.json.encode(p.default)
                s = {**s, "default": p.default}
            except Exception:
                pass
        props[p.name] = s
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    if b.defs:
        out["$defs"] = b.defs
    return out


def wraps_output(hint: Any) -> bool:
    """Whether a return value of this type is wrapped as ``{"result": value}`` (its schema is not an object)."""
    s = schema_for(hint)
    if s.get("type") == "object":
        return False
    ref = s.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = s.get("$defs", {}).get(ref.rsplit("/", 1)[1], {})
        return bool(target.get("type") != "object")
    return True


def output_schema(hint: Any) -> dict[str, Any]:
    """The ``outputSchema`` of a tool returning ``hint``: always an object at the root."""
    s = schema_for(hint)
    if not wraps_output(hint):
        return s if s.get("type") == "object" else {"type": "object", **s}
    defs = s.pop("$defs", None)
    out: dict[str, Any] = {"type": "object", "properties": {"result": s}, "required": ["result"]}
    if defs:
        out["$defs"] = defs
    return out
