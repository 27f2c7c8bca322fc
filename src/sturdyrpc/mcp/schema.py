"""JSON Schema (draft 2020-12) from Python type hints, for tool inputs and outputs.

Plain types map directly (``int`` -> ``integer``, ``list[str]`` -> array of strings,
``Literal`` -> ``enum``, ``X | None`` -> ``anyOf``); structured types (msgspec Structs,
dataclasses, TypedDicts, enums) go through :func:`msgspec.json.schema_components`, their
definitions collected under ``$defs``. ``Annotated[T, msgspec.Meta(...)]`` adds the Meta's
description, title, examples and constraints to ``T``'s schema. pydantic types (models,
pydantic dataclasses, ``Field(...)`` constraints, see :mod:`sturdyrpc.pydantic_bridge`) are
described by pydantic. Parameter descriptions come from the annotations first, then from the
docstring (:mod:`.docstrings`).
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import msgspec

from .. import pydantic_bridge

__all__ = ["DIALECT", "schema_for", "input_schema", "output_schema", "wraps_output", "inline_refs"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


#: ``msgspec.Meta`` constraints that read the same on every type, and their JSON Schema names.
_META_KEYS = (
    ("gt", "exclusiveMinimum"),
    ("ge", "minimum"),
    ("lt", "exclusiveMaximum"),
    ("le", "maximum"),
    ("multiple_of", "multipleOf"),
    ("pattern", "pattern"),
)
#: ``min_length``/``max_length`` by the JSON type they constrain.
_LENGTH_KEYS = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"), "object": ("minProperties", "maxProperties")}


def _with_meta(schema: dict[str, Any], meta: msgspec.Meta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if meta.title is not None:
        out["title"] = meta.title
    if meta.description is not None:
        out["description"] = meta.description
    if meta.examples is not None:
        out["examples"] = list(meta.examples)
    out.update(schema)
    for attr, key in _META_KEYS:
        value = getattr(meta, attr)
        if value is not None:
            out[key] = value
    lengths = _LENGTH_KEYS.get(schema.get("type", ""))
    if lengths is not None:
        if meta.min_length is not None:
            out[lengths[0]] = meta.min_length
        if meta.max_length is not None:
            out[lengths[1]] = meta.max_length
    if meta.extra_json_schema:
        out.update(meta.extra_json_schema)
    return out


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    """``value`` with every ``$ref`` in ``renames`` replaced."""
    if type(value) is dict:
        return {k: (renames.get(v, v) if k == "$ref" and type(v) is str else _renamed(v, renames)) for k, v in value.items()}
    if type(value) is list:
        return [_renamed(v, renames) for v in value]
    return value


class _Builder:
    def __init__(self, mode: str = "validation") -> None:
        self.defs: dict[str, Any] = {}
        #: pydantic's schema mode: "validation" (inputs) or "serialization" (outputs).
        self.mode = mode

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
        if pydantic_bridge.is_pydantic(hint):
            return self._pydantic(hint)
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            annotated = self.build(args[0])
            for m in hint.__metadata__:
                if isinstance(m, msgspec.Meta):
                    annotated = _with_meta(annotated, m)
                elif type(m) is str and "description" not in annotated:  # FastMCP's Annotated[int, "what it is"]
                    annotated = {"description": m, **annotated}
            return annotated
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

    def _pydantic(self, hint: Any) -> dict[str, Any]:
        try:
            schema = pydantic_bridge.json_schema(hint, self.mode)
        except Exception:
            return {}
        return self._merge(schema, schema.pop("$defs", {}))

    def _structured(self, hint: Any) -> dict[str, Any]:
        try:
            (schema,), components = msgspec.json.schema_components((hint,), ref_template="#/$defs/{name}")
        except Exception:
            return {}
        return self._merge(dict(schema), dict(components))

    def _merge(self, schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
        """Add ``defs`` (made for ``schema`` alone) to the shared ``$defs``; a name already taken
        by another definition (two types of one name, e.g. from two modules) is renamed, and the
        references to it in ``schema`` and ``defs`` follow."""
        renames: dict[str, str] = {}
        for name, d in defs.items():
            if name in self.defs and self.defs[name] != d:
                n = 2
                while f"{name}{n}" in self.defs or f"{name}{n}" in defs:
                    n += 1
                renames[f"#/$defs/{name}"] = f"#/$defs/{name}{n}"
        if renames:
            schema = _renamed(schema, renames)
            defs = {renames.get(f"#/$defs/{k}", f"#/$defs/{k}").rsplit("/", 1)[1]: _renamed(v, renames) for k, v in defs.items()}
        self.defs.update(defs)
        return schema


def schema_for(hint: Any, mode: str = "validation") -> dict[str, Any]:
    """The JSON Schema of one type hint (with ``$defs`` at the top when needed); ``mode``:
    "validation" for what the server reads, "serialization" for what it writes."""
    b = _Builder(mode)
    out = b.build(hint)
    if b.defs:
        out = {**out, "$defs": b.defs}
    return out


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _default_of(p: inspect.Parameter) -> Any:
    """The JSON value of ``p``'s default (a ``Field(...)``'s own default), or ``_NO_DEFAULT``."""
    default = p.default
    if pydantic_bridge.is_field(default):
        default = pydantic_bridge.field_value(default)
    if default is inspect.Parameter.empty or default is pydantic_bridge.MISSING:
        return _NO_DEFAULT
    try:
        value = pydantic_bridge.to_builtins(default)
        msgspec.json.encode(value)
    except Exception:
        return _NO_DEFAULT
    return value


_NO_DEFAULT: Any = object()


def input_schema(
    fn: Callable[..., Any],
    skip: Callable[[Any], bool] = lambda h: False,
    hints: dict[str, Any] | None = None,
    descriptions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``inputSchema`` of a tool: an object with one property per parameter.

    Parameters whose hint satisfies ``skip`` (the request context) are left out; parameters
    without a default (or with a ``Field(...)`` without one) are ``required``; unknown
    properties are not allowed. ``hints``: the function's resolved type hints (with
    ``Annotated`` extras), when the caller has them already. ``descriptions``: per parameter,
    used where the annotation gives none (e.g. from the docstring).
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
        is_field = pydantic_bridge.is_field(p.default)
        if is_field:
            hint = pydantic_bridge.with_field(Any if hint is inspect.Parameter.empty else hint, p.default)
        s = b.build(hint)
        if descriptions and p.name in descriptions and "description" not in s:
            s = {"description": descriptions[p.name], **s}
        default = _default_of(p)
        if default is not _NO_DEFAULT:
            s = {**s, "default": default}
        props[p.name] = s
        if p.default is inspect.Parameter.empty or (is_field and pydantic_bridge.field_default(p.default) is pydantic_bridge.MISSING):
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
    s = schema_for(hint, "serialization")
    if s.get("type") == "object":
        return False
    ref = s.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = s.get("$defs", {}).get(ref.rsplit("/", 1)[1], {})
        return bool(target.get("type") != "object")
    return True


def output_schema(hint: Any) -> dict[str, Any]:
    """The ``outputSchema`` of a tool returning ``hint``: always an object at the root."""
    s = schema_for(hint, "serialization")
    if not wraps_output(hint):
        return s if s.get("type") == "object" else {"type": "object", **s}
    defs = s.pop("$defs", None)
    out: dict[str, Any] = {"type": "object", "properties": {"result": s}, "required": ["result"]}
    if defs:
        out["$defs"] = defs
    return out


def _refs_in(value: Any, found: set[str]) -> set[str]:
    """The ``$defs`` names ``value`` refers to (``#/$defs/Name``), added to ``found``."""
    if type(value) is dict:
        ref = value.get("$ref")
        if type(ref) is str and ref.startswith("#/$defs/"):
            found.add(ref[len("#/$defs/"):])
        for v in value.values():
            _refs_in(v, found)
    elif type(value) is list:
        for v in value:
            _refs_in(v, found)
    return found


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``{"$ref": "#/$defs/Name"}`` replaced by that definition (its other
    keys kept beside it), for clients that cannot follow ``$ref``. A recursive definition (one
    that reaches itself) cannot be written out, so its references stay, and ``$defs`` keeps
    exactly what is still referred to. A new schema; ``schema`` is not changed."""
    defs = schema.get("$defs")
    if type(defs) is not dict or not defs:
        return schema
    direct = {name: _refs_in(d, set()) for name, d in defs.items()}
    recursive: set[str] = set()
    for name in defs:  # reaches itself through its references?
        seen, todo = set(), list(direct[name])
        while todo:
            n = todo.pop()
            if n == name:
                recursive.add(name)
                break
            if n not in seen and n in direct:
                seen.add(n)
                todo.extend(direct[n])

    def out(value: Any) -> Any:
        if type(value) is dict:
            ref = value.get("$ref")
            name = ref[len("#/$defs/"):] if type(ref) is str and ref.startswith("#/$defs/") else None
            if name is not None and name in defs and name not in recursive:
                rest = {k: out(v) for k, v in value.items() if k != "$ref"}
                return {**out(defs[name]), **rest}
            return {k: out(v) for k, v in value.items()}
        if type(value) is list:
            return [out(v) for v in value]
        return value

    result = {k: out(v) for k, v in schema.items() if k != "$defs"}
    kept = {n: out(defs[n]) for n in recursive}
    still = _refs_in(result, set()) | {r for d in kept.values() for r in _refs_in(d, set())}
    kept = {n: d for n, d in kept.items() if n in still}
    if kept:
        result["$defs"] = kept
    return result
