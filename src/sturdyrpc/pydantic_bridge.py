"""pydantic support (the ``[pydantic]`` extra), without importing pydantic unless it is used.

A type hint is *pydantic* when it mentions a pydantic model or dataclass, a pydantic or
``annotated-types`` constraint in ``Annotated[...]``, or a pydantic ``Field(...)``. Those hints
are validated and described by a pydantic ``TypeAdapter``; every other hint stays with msgspec.
pydantic cannot have made such a hint unless it is imported already, so asking
:func:`is_pydantic` never imports it: the core works (and starts as fast) without pydantic.

Used by :mod:`sturdyrpc.params` (validation: the one home of argument checks) and by the MCP
schema builder (JSON Schema); both ask here, so the rule of what counts as pydantic is written once.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["is_pydantic", "is_field", "field_default", "field_value", "with_field", "adapter", "json_schema", "error_text", "enc_hook", "to_builtins", "MISSING"]

#: :func:`field_default`'s answer for a ``Field(...)`` without a default (a required parameter).
MISSING: Any = object()

#: Modules whose classes or ``Annotated`` metadata make a hint pydantic.
_PREFIXES = ("pydantic", "annotated_types")


def _loaded() -> bool:
    return sys.modules.get("pydantic") is not None


def _module_of(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "__module__", "") or ""


def _is_pydantic_class(t: Any) -> bool:
    # Models and pydantic dataclasses carry a core schema; the attribute is pydantic's own mark.
    return isinstance(t, type) and hasattr(t, "__pydantic_core_schema__")


def is_field(obj: Any) -> bool:
    """Whether ``obj`` is a pydantic ``FieldInfo`` (what ``Field(...)`` returns)."""
    if not _loaded():
        return False
    from pydantic.fields import FieldInfo

    return isinstance(obj, FieldInfo)


def is_pydantic(hint: Any, _depth: int = 0) -> bool:
    """Whether ``hint`` needs pydantic to be validated or described (see the module docstring)."""
    if not _loaded() or _depth > 20:
        return False
    if _is_pydantic_class(hint):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        if any(_module_of(m).startswith(_PREFIXES) for m in hint.__metadata__):
            return True
        return is_pydantic(typing.get_args(hint)[0], _depth + 1)
    if origin is not None:
        return any(is_pydantic(a, _depth + 1) for a in typing.get_args(hint) if a is not Ellipsis)
    return isinstance(hint, type) and _module_of(hint).startswith("pydantic")


def field_default(field: Any) -> Any:
    """A factory for the default of a ``Field(...)`` given as a parameter default, or :data:`MISSING`."""
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        factory: Callable[[], Any] = field.default_factory
        return factory
    if field.default is PydanticUndefined:
        return MISSING
    value = field.default
    return lambda: value


def field_value(field: Any) -> Any:
    """The plain default of a ``Field(...)`` (not a factory's), or :data:`MISSING`."""
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None or field.default is PydanticUndefined:
        return MISSING
    return field.default


def with_field(hint: Any, field: Any) -> Any:
    """``hint`` with the constraints and description of a ``Field(...)`` parameter default."""
    return typing.Annotated[hint, field] if field is not None else hint


def adapter(hint: Any) -> Any:
    """A pydantic ``TypeAdapter`` for ``hint`` (imports pydantic)."""
    from pydantic import TypeAdapter

    return TypeAdapter(hint)


def json_schema(hint: Any, mode: str = "validation") -> dict[str, Any]:
    """The JSON Schema of ``hint`` by pydantic, its definitions under ``$defs`` (refs ``#/$defs/Name``)."""
    schema: dict[str, Any] = adapter(hint).json_schema(ref_template="#/$defs/{model}", mode=mode)
    return schema


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if type(part) is int:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


#: pydantic's messages that name a Python class or type, said in JSON's words instead.
_JSON_WORDS = {
    "model_type": "Input should be an object",
    "model_attributes_type": "Input should be an object",
    "dataclass_type": "Input should be an object",
    "dataclass_exact_type": "Input should be an object",
    "dict_type": "Input should be an object",
    "list_type": "Input should be an array",
    "tuple_type": "Input should be an array",
    "set_type": "Input should be an array",
    "frozen_set_type": "Input should be an array",
    "is_instance_of": "Input is not a valid value",
    "is_subclass_of": "Input is not a valid value",
}


def error_text(exc: Exception, limit: int = 5) -> str:
    """What a pydantic ``ValidationError`` says, for a client: where and what, never the input
    value, a class name or a documentation URL."""
    errors_of = getattr(exc, "errors", None)
    if errors_of is None:
        return "is not valid"
    errors = errors_of(include_url=False, include_context=False, include_input=False)
    parts = []
    for e in errors[:limit]:
        where = _loc(tuple(e.get("loc", ())))
        msg = _JSON_WORDS.get(str(e.get("type")), str(e.get("msg", "is not valid")))
        parts.append(f"{where}: {msg}" if where else msg)
    more = len(errors) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def enc_hook(obj: Any) -> Any:
    """msgspec ``enc_hook``: pydantic models (and pydantic dataclasses) as JSON-ready builtins."""
    if _is_pydantic_class(type(obj)):
        dump = getattr(obj, "model_dump", None)
        if dump is not None:
            return dump(mode="json", by_alias=True)
        return adapter(type(obj)).dump_python(obj, mode="json", by_alias=True)
    raise NotImplementedError(f"cannot encode a {type(obj).__name__}")


def to_builtins(value: Any) -> Any:
    """``msgspec.to_builtins`` that also takes pydantic models."""
    import msgspec

    return msgspec.to_builtins(value, enc_hook=enc_hook)
