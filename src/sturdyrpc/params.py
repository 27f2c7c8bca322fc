"""Binding JSON-RPC params to a handler's signature, compiled once at registration.

``compile_binder(fn)`` inspects the signature and type hints a single time and
returns a :class:`Binder` whose :meth:`Binder.bind` checks arity, names and
types before the handler runs. Every failure is an :class:`InvalidParams`
whose message names the parameter.
"""

from __future__ import annotations

import collections.abc
import inspect
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import msgspec

from . import codec, pydantic_bridge
from .errors import InvalidParams

__all__ = ["Binder", "compile_binder", "json_type_name", "value_checker", "Mismatch", "is_container"]

Checker = Callable[[Any], Any]


class Mismatch(ValueError):
    """A value that does not fit its type: ``expected`` says what was expected ("an integer");
    ``reason``, when set, is the whole complaint ("must be a string of length >= 1") and no
    "got ..." follows it."""

    def __init__(self, expected: str, reason: str | None = None) -> None:
        super().__init__(reason or f"must be {expected}")
        self.expected = expected
        self.reason = reason


_Mismatch = Mismatch


_JSON_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def json_type_name(value: Any) -> str:
    """How JSON would call ``value``'s type, with an article ("an integer")."""
    return _JSON_NAMES.get(type(value), "a value")


def _simple(t: type, expected: str) -> Checker:
    def check(v: Any) -> Any:
        if type(v) is t:
            return v
        raise _Mismatch(expected)

    return check


def _check_float(v: Any) -> Any:
    t = type(v)
    if t is float or t is int:
        return v
    raise _Mismatch("a number")


def _check_none(v: Any) -> Any:
    if v is None:
        return v
    raise _Mismatch("null")


def _checker_for(hint: Any) -> Checker | None:
    """A checker for ``hint``, or None when anything goes."""
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return None
    if hint is None or hint is type(None):
        return _check_none
    if hint is bool:
        return _simple(bool, "a boolean")
    if hint is int:
        return _simple(int, "an integer")  # bool is not an integer here
    if hint is float:
        return _check_float
    if hint is str:
        return _simple(str, "a string")
    if hint is list or hint is tuple:
        return _simple(list, "an array")
    if hint is dict:
        return _simple(dict, "an object")
    if pydantic_bridge.is_pydantic(hint):
        return _pydantic_checker(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        if any(isinstance(m, msgspec.Meta) for m in hint.__metadata__):
            return _meta_checker(hint, _checker_for(args[0]))
        return _checker_for(args[0])
    if origin is Union or origin is types.UnionType:
        return _union_checker(args)
    if origin is Literal:
        return _literal_checker(args)
    if origin is list or origin is tuple or origin is collections.abc.Sequence:
        return _list_checker(hint, origin, args)
    if origin is dict or origin is collections.abc.Mapping:
        return _dict_checker(args)
    # Structs, dataclasses, TypedDicts, enums...: let msgspec validate and convert.
    return _convert_checker(hint)


def _union_checker(args: tuple[Any, ...]) -> Checker | None:
    """``X | Y | ...``: the first member's checker that accepts the value (None if one is Any)."""
    subs = [_checker_for(a) for a in args]
    if any(s is None for s in subs):
        return None
    names = " or ".join(_expected_name(a) for a in args)
    if len(args) == 2 and type(None) in args:  # Optional[X]: X's own complaint says more
        only: Checker = subs[1] if args[0] is type(None) else subs[0]  # type: ignore[assignment]

        def check_optional(v: Any) -> Any:
            if v is None:
                return v
            try:
                return only(v)
            except _Mismatch as m:
                raise _Mismatch(names, m.reason) from None

        return check_optional

    def check_union(v: Any) -> Any:
        for s in subs:
            try:
                return s(v)  # type: ignore[misc]
            except _Mismatch:
                continue
        raise _Mismatch(names)

    return check_union


def _literal_checker(allowed: tuple[Any, ...]) -> Checker:
    """``Literal[...]``: equal to one of ``allowed``, of the same type (``1`` is not ``True``)."""
    text = " or ".join(repr(a) for a in allowed)

    def check_literal(v: Any) -> Any:
        for a in allowed:
            if v == a and type(v) is type(a):
                return v
        raise _Mismatch(f"one of {text}")

    return check_literal


def _list_checker(hint: Any, origin: Any, args: tuple[Any, ...]) -> Checker:
    """``list[X]``, ``tuple[X, ...]``, ``Sequence[X]``: a JSON array, each item checked."""
    item: Checker | None = None
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker_for(args[0])
    elif args:
        item = _checker_for(args[0])
    expected = _expected_name(hint)

    def check_list(v: Any) -> Any:
        if type(v) is not list:
            raise _Mismatch(expected)
        if item is None:
            return v
        out = []  # the items as their checks return them (built Structs, models...)
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Mismatch as m:
                raise _Mismatch(expected, f"item [{i}] {m.reason or f'must be {m.expected}, got {json_type_name(x)}'}") from None
        return out

    return check_list


def _dict_checker(args: tuple[Any, ...]) -> Checker:
    """``dict[str, X]``, ``Mapping[str, X]``: a JSON object, each member's value checked."""
    value_check = _checker_for(args[1]) if len(args) == 2 else None
    expected = "an object"

    def check_dict(v: Any) -> Any:
        if type(v) is not dict:
            raise _Mismatch(expected)
        if value_check is None:
            return v
        out = {}
        for k, x in v.items():
            try:
                out[k] = value_check(x)
            except _Mismatch as m:
                raise _Mismatch(expected, f"member {k!r} {m.reason or f'must be {m.expected}, got {json_type_name(x)}'}") from None
        return out

    return check_dict


def _convert_checker(hint: Any) -> Checker | None:
    """Anything msgspec knows (Structs, dataclasses, TypedDicts, enums...), validated and
    converted by it; None for a type it does not know (anything goes)."""
    try:
        msgspec.inspect.type_info(hint)
    except Exception:
        return None
    expected = _expected_name(hint)
    is_enum = isinstance(msgspec.inspect.type_info(hint), msgspec.inspect.EnumType)

    def check_convert(v: Any) -> Any:
        try:
            return msgspec.convert(v, hint, strict=True)
        except msgspec.ValidationError as exc:  # said in JSON's words: no class names
            if is_enum:
                raise _Mismatch(expected) from None  # "must be one of 'a' or 'b', got a string"
            raise _Mismatch(expected, _msgspec_reason(exc)) from None

    return check_convert


#: msgspec's names of JSON types in its error messages, as this module says them.
_MSGSPEC_NAMES = {
    "`str`": "a string",
    "`int`": "an integer",
    "`float`": "a number",
    "`bool`": "a boolean",
    "`array`": "an array",
    "`object`": "an object",
    "`null`": "null",
}


def _msgspec_reason(exc: msgspec.ValidationError) -> str:
    """msgspec's "Expected `str` of length >= 1 - at `$.x`" as "must be a string of length >= 1 (at $.x)"."""
    text = str(exc)
    where = ""
    if " - at `" in text:
        text, _, path = text.partition(" - at `")
        where = f" (at {path.rstrip('`')})"
    if text.startswith("Expected "):
        text = text[len("Expected ") :]
        for name, said in _MSGSPEC_NAMES.items():
            text = text.replace(name, said)
        return f"must be {text.replace('`', '')}{where}"
    for said, says in (("Object missing required field ", "is missing the required field "), ("Object contains unknown field ", "has an unknown field ")):
        if text.startswith(said):
            return f"{says}{text[len(said) :].replace('`', chr(39))}{where}"
    return f"is not valid: {text.replace('`', '')}{where}"


def _meta_checker(hint: Any, base: Checker | None) -> Checker:
    """``Annotated[T, msgspec.Meta(...)]``: the type checked as ``T`` is, then the constraints by msgspec."""
    convert = msgspec.convert

    def check_meta(v: Any) -> Any:
        if base is not None:
            base(v)
        try:
            return convert(v, hint, strict=True)
        except msgspec.ValidationError as exc:
            raise Mismatch(_expected_name(hint), _msgspec_reason(exc)) from None

    return check_meta


def _pydantic_checker(hint: Any) -> Checker:
    """A hint pydantic validates (see :mod:`.pydantic_bridge`): its ``TypeAdapter`` builds the value."""
    validate = pydantic_bridge.adapter(hint).validate_python
    text = pydantic_bridge.error_text

    def check_pydantic(v: Any) -> Any:
        try:
            return validate(v)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise Mismatch("a valid value", f"is invalid: {text(exc)}") from None

    return check_pydantic


def value_checker(hint: Any) -> Checker | None:
    """The check :class:`Binder` runs on a value declared ``hint`` (None: anything goes).

    The checker returns the value to use (built for structured and pydantic types) and raises
    :class:`Mismatch` saying what was wrong. For callers checking values other than params
    (e.g. a tool's return value against its declared type).
    """
    return _checker_for(hint)


def is_container(hint: Any) -> bool:
    """Whether ``hint`` declares a JSON object or array (and no string): what a JSON string
    standing for it may be decoded into (``coerce_json_strings``)."""
    if hint in (list, tuple, dict, set, frozenset):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return is_container(typing.get_args(hint)[0])
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if any(a is str or a is Any or a is object or (typing.get_origin(a) is Literal) for a in args):
            return False
        return any(is_container(a) for a in args)
    if origin in (list, tuple, dict, set, frozenset, collections.abc.Sequence, collections.abc.Mapping):
        return True
    if pydantic_bridge.is_pydantic(hint):
        return isinstance(hint, type)  # a model or a pydantic dataclass: an object
    try:
        info = msgspec.inspect.type_info(hint)
    except Exception:
        return False
    return isinstance(info, _CONTAINER_INFO)


_CONTAINER_INFO = (
    msgspec.inspect.StructType,
    msgspec.inspect.DataclassType,
    msgspec.inspect.TypedDictType,
    msgspec.inspect.NamedTupleType,
    msgspec.inspect.ListType,
    msgspec.inspect.TupleType,
    msgspec.inspect.VarTupleType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
    msgspec.inspect.DictType,
)


def _json_strings_decoded(check: Checker | None) -> Checker:
    """``check`` after decoding a JSON string that holds an object or an array (once, strictly)."""
    decode = codec.decode

    def check_decoded(v: Any) -> Any:
        if type(v) is str:
            try:
                d = decode(v.encode())
            except Exception:
                d = None  # not JSON: the check says what was expected
            if type(d) is dict or type(d) is list:
                if check is None:
                    return d
                try:
                    return check(d)
                except Mismatch as m:
                    reason = m.reason or f"must be {m.expected}, got {json_type_name(d)}"
                    raise Mismatch(m.expected, f"{reason} (decoded from a JSON string)") from None
        return v if check is None else check(v)

    return check_decoded


def _expected_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        return _expected_name(typing.get_args(hint)[0])
    if hint in _JSON_NAMES:
        return _JSON_NAMES[hint]
    if hint is type(None) or hint is None:
        return "null"
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return "an array"
    if origin is dict:
        return "an object"
    try:
        info = msgspec.inspect.type_info(hint)
    except Exception:
        return "a valid value"
    if isinstance(info, (msgspec.inspect.StructType, msgspec.inspect.DataclassType, msgspec.inspect.TypedDictType, msgspec.inspect.DictType)):
        return "an object"  # said in JSON's words: no class names to a client
    if isinstance(info, (msgspec.inspect.NamedTupleType, msgspec.inspect.ListType, msgspec.inspect.SetType, msgspec.inspect.FrozenSetType)):
        return "an array"
    if isinstance(info, msgspec.inspect.EnumType):
        return "one of " + " or ".join(repr(m.value) for m in info.cls)
    return "a valid value"


#: The kwargs of a call whose arguments all go by position: shared, never added to.
_NO_KWARGS: dict[str, Any] = {}


class Binder:
    """Turns ``params`` into ``(args, kwargs)`` for one handler."""

    __slots__ = (
        "positional",
        "n_positional",
        "by_name",
        "required",
        "positional_only",
        "var_positional",
        "var_positional_name",
        "has_var_positional",
        "var_keyword",
        "has_var_keyword",
        "no_checks",
        "context_name",
        "simple_names",
        "one_name",
        "dict_args",
        "list_min",
        "list_max",
        "fills",
        "_req_prefix",
        "_list_checks",
        "_list_lo",
    )

    def __init__(self) -> None:
        self.positional: list[tuple[str, Checker | None]] = []
        self.n_positional = 0
        self.by_name: dict[str, Checker | None] = {}
        self.required: list[str] = []
        self.positional_only: set[str] = set()
        self.var_positional: Checker | None = None
        self.var_positional_name = "args"
        self.has_var_positional = False
        self.var_keyword: Checker | None = None
        self.has_var_keyword = False
        self.no_checks = True
        self.context_name: str | None = None
        # Shortcuts worked out by finish() (until then: none), read by the dispatcher's hot path.
        #: Not None: an object holding exactly these names binds as it is (no checks to run).
        self.simple_names: frozenset[str] | None = None
        #: Not None: the handler's only parameter; {one_name: v} binds as the argument v.
        self.one_name: str | None = None
        #: Not None: such an object can be passed by position: fn(*dict_args(params)).
        self.dict_args: Callable[[dict[str, Any]], tuple[Any, ...]] | None = None
        #: An array of list_min..list_max elements binds as it is (no checks to run).
        self.list_min = 1
        self.list_max = 0
        #: Parameters whose default comes from a pydantic ``Field(...)``: ``(name, factory)``,
        #: filled in when absent (Python would pass the ``FieldInfo`` itself).
        self.fills: list[tuple[str, Callable[[], Any]]] = []
        self._req_prefix = -1
        #: An array of _list_lo..len(_list_checks) elements binds by running these checks in order
        #: (None: nothing to check there); a failing check leaves it to _bind_list to say why.
        self._list_checks: tuple[Checker | None, ...] | None = None
        self._list_lo = 1

    def finish(self, by_position: bool = True) -> Binder:
        """Work out the shortcuts :meth:`bind` takes; call once the fields are filled in.
        ``by_position``: whether the function may be given named params by position (not when
        it has a context parameter, which may come first)."""
        self.n_positional = len(self.positional)
        # Named params that need no checks and can only be known names: bind is a subset test.
        simple = self.no_checks and not self.has_var_keyword and not self.positional_only
        self.simple_names = frozenset(self.by_name) if simple else None
        order = tuple(name for name, _ in self.positional)
        # no keyword-only parameters, no context parameter
        by_position = by_position and simple and set(order) == set(self.by_name) and self.context_name is None
        self.one_name = order[0] if by_position and len(order) == 1 else None
        self.dict_args = operator.itemgetter(*order) if by_position and len(order) >= 2 else None
        # Required positionals are a prefix of the positionals (Python's own rule): then
        # "which one is missing" follows from the count given.
        k = 0
        while k < self.n_positional and self.positional[k][0] in self.required:
            k += 1
        n_req_pos = sum(1 for name, _ in self.positional if name in self.required)
        self._req_prefix = k if k == n_req_pos else -1
        plain_prefix = self._req_prefix >= 0 and len(self.required) == k
        if self.no_checks and plain_prefix:
            self.list_min = k
            self.list_max = self.n_positional if not self.has_var_positional else 1 << 62
        else:
            self.list_min, self.list_max = 1, 0
        if not self.no_checks and plain_prefix and not self.has_var_positional and not self.fills:
            self._list_checks = tuple(check for _, check in self.positional)
            self._list_lo = k
        return self

    def bind(self, params: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Check ``params`` (list, dict or None) and return the call arguments.

        ``kwargs`` is a new dict (callers may add to it), except the shared empty one of named
        params given by position: copy that one to add to it.
        """
        t = type(params)
        if t is dict:
            # Every known name given, none to check: by position (a cheaper call than by name).
            one = self.one_name
            if one is not None:
                if len(params) == 1 and one in params:
                    return (params[one],), _NO_KWARGS
            elif self.dict_args is not None and len(params) == self.n_positional and self.simple_names.issuperset(params):  # type: ignore[union-attr]
                return self.dict_args(params), _NO_KWARGS
            names = self.simple_names
            if names is not None and names.issuperset(params):
                if len(params) != len(names):
                    for name in self.required:
                        if name not in params:
                            raise _missing(name)
                return (), params.copy()
            return (), self._bind_dict(params)
        if t is list:
            n = len(params)
            if self.list_min <= n <= self.list_max:
                return tuple(params), {}
            checks = self._list_checks
            if checks is not None and self._list_lo <= n <= len(checks):
                try:
                    if n == 1:  # the usual case, without building a comprehension
                        c = checks[0]
                        return (params[0] if c is None else c(params[0]),), {}
                    return tuple([v if c is None else c(v) for c, v in zip(checks, params, strict=False)]), {}
                except _Mismatch:
                    pass  # _bind_list says which parameter and why
            return self._bind_list(params), self._filled({}, n)
        if params is None:
            if self.required:
                raise _missing(self.required[0])
            return (), self._filled({}, 0)
        return (), self._bind_dict(params)

    def _filled(self, kwargs: dict[str, Any], n_given: int) -> dict[str, Any]:
        """``kwargs`` with the ``Field(...)`` defaults of the parameters not given (by name, or
        among the first ``n_given`` positionals)."""
        if self.fills:
            given = {name for name, _ in self.positional[:n_given]}
            for name, factory in self.fills:
                if name not in kwargs and name not in given:
                    kwargs[name] = factory()
        return kwargs

    def _bind_list(self, params: list[Any]) -> tuple[Any, ...]:
        n = len(params)
        if n > self.n_positional and not self.has_var_positional:
            raise InvalidParams(
                f"Invalid params: too many positional parameters (at most {self.n_positional}, got {n})",
                {"expected_at_most": self.n_positional, "got": n},
            )
        k = self._req_prefix
        if k >= 0:
            if n < k:
                raise _missing(self.positional[n][0])
            if len(self.required) > k:  # required keyword-only params cannot come from an array
                raise _missing(self.required[k])
        elif self.required:
            given = {name for name, _ in self.positional[:n]}
            for name in self.required:
                if name not in given:
                    raise _missing(name)
        if self.no_checks:
            return tuple(params)
        out = list(params)
        for i, (name, check) in enumerate(self.positional[:n]):
            if check is not None:
                out[i] = _run(check, params[i], name)
        if n > self.n_positional and self.var_positional is not None:
            for i in range(self.n_positional, n):
                out[i] = _run(self.var_positional, params[i], f"{self.var_positional_name}[{i - self.n_positional}]")
        return tuple(out)

    def _bind_dict(self, params: dict[str, Any]) -> dict[str, Any]:
        by_name = self.by_name
        out: dict[str, Any] = {}
        for key, value in params.items():
            if key in by_name:
                check = by_name[key]
            elif self.has_var_keyword and key not in self.positional_only and key != self.context_name:
                check = self.var_keyword
            else:
                if key in self.positional_only:
                    raise InvalidParams(
                        f"Invalid params: parameter '{key}' can only be given by position", {"param": key}
                    )
                raise InvalidParams(f"Invalid params: unexpected parameter '{key}'", {"param": key})
            out[key] = value if check is None else _run(check, value, key)
        for name in self.required:
            if name not in out:
                raise _missing(name)
        return self._filled(out, 0) if self.fills else out


def _missing(name: str) -> InvalidParams:
    return InvalidParams(f"Invalid params: missing required parameter '{name}'", {"param": name})


def _run(check: Checker, value: Any, name: str) -> Any:
    try:
        return check(value)
    except _Mismatch as m:
        if m.reason is not None:
            raise InvalidParams(
                f"Invalid params: parameter '{name}' {m.reason}", {"param": name, "expected": m.expected, "got": json_type_name(value)}
            ) from None
        raise InvalidParams(
            f"Invalid params: parameter '{name}' must be {m.expected}, got {json_type_name(value)}",
            {"param": name, "expected": m.expected, "got": json_type_name(value)},
        ) from None


def compile_binder(fn: Callable[..., Any], context_type: type | None = None, *, coerce_json_strings: bool = False,
                   by_position: bool = True) -> Binder:
    """Inspect ``fn`` once and build its binder.

    ``by_position=False`` when ``fn`` stands for a function with more parameters than it shows
    (one whose context parameter was taken out): named params are then never passed by position.

    A parameter annotated with ``context_type`` is not bound from params: the
    runner passes the request context there by keyword. Constraints in
    ``Annotated[T, msgspec.Meta(...)]`` are checked; pydantic types, and parameters whose
    default is a pydantic ``Field(...)``, are validated (and built) by pydantic.
    ``coerce_json_strings``: a JSON string given for a parameter declared as an object or an
    array is decoded once before the check.
    """
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    b = Binder()
    for p in sig.parameters.values():
        hint = hints.get(p.name, p.annotation)
        if context_type is not None and isinstance(hint, type) and issubclass(hint, context_type):
            b.context_name = p.name
            continue
        required = p.default is inspect.Parameter.empty
        if pydantic_bridge.is_field(p.default):
            hint = pydantic_bridge.with_field(Any if hint is inspect.Parameter.empty else hint, p.default)
            factory = pydantic_bridge.field_default(p.default)
            if factory is pydantic_bridge.MISSING:
                required = True
            else:
                b.fills.append((p.name, factory))
        check = _checker_for(hint)
        if coerce_json_strings and is_container(hint):
            check = _json_strings_decoded(check)
        if check is not None:
            b.no_checks = False
        if p.kind is p.POSITIONAL_ONLY:
            b.positional.append((p.name, check))
            b.positional_only.add(p.name)
            if required:
                b.required.append(p.name)
        elif p.kind is p.POSITIONAL_OR_KEYWORD:
            b.positional.append((p.name, check))
            b.by_name[p.name] = check
            if required:
                b.required.append(p.name)
        elif p.kind is p.KEYWORD_ONLY:
            b.by_name[p.name] = check
            if required:
                b.required.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            b.has_var_positional = True
            b.var_positional = check
            b.var_positional_name = p.name
        elif p.kind is p.VAR_KEYWORD:
            b.has_var_keyword = True
            b.var_keyword = check
    # Keyword-only params cannot be filled from an array.
    return b.finish(by_position)
