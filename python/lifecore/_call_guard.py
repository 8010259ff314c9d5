"""The Python half of the call guard over every function of ``lifecore._core``.

nanobind answers arguments that match none of a function's signatures with a plain
``TypeError`` and converts a bool wherever an int or a float is expected. lifecore promises a
lifecore error instead, naming the argument and what it expects. ``install()`` (run once at
import) puts a guard on every bound function; the guard, in C++, only calls into this module
when a call is being refused anyway (or a bool reached a function with a number parameter),
so no call pays for it on success:

- ``check_bools`` refuses a bool given for a parameter that takes only numbers
  (``LifecoreTypeError``);
- ``explain`` turns nanobind's overload failure into ``LifecoreTypeError`` (a wrong type) or
  ``LifecoreOverflowError`` (an int of the right type outside what the parameter can hold), and
  names the call in the translator's nameless wrong-type error (a value converted inside a
  binding, e.g. a dict's value).
"""

from __future__ import annotations

import ast
import collections.abc
import operator
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

from . import _core

# The binding's private entry points of the guard (generated stubs leave private names out).
_guard_function: Any = getattr(_core, "_guard_function")
_guard_type: Any = getattr(_core, "_guard_type")
from .errors import DriverError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError

_INDEX = {"typing.SupportsIndex", "SupportsIndex"}  # an int, or anything with __index__ (a NumPy integer)
_NUMBER_ONLY = {"int", "float", "int | None", "float | None", "int | float", "float | int"} | _INDEX | {
    f"{name} | None" for name in _INDEX}
_PLACEHOLDER = re.compile(r"\\\d+")  # nanobind writes a default value as \0, \1, ...
_FLOOR = "an argument has the wrong type"  # init_errors.cpp: a std::bad_cast inside a binding
_DEFAULT_NEW = re.compile(r"def __new__\(\w+: object, /\)")


@dataclass(frozen=True)
class _Parameter:
    name: str
    annotation: Optional[ast.expr]
    keyword_only: bool
    required: bool = False  # no default


@dataclass(frozen=True)
class _Overload:
    text: str  # as a message shows it (see _readable)
    positional: tuple[_Parameter, ...]  # in order, self / cls included
    keyword_only: tuple[_Parameter, ...]
    star_args: bool
    star_kwargs: bool
    default_new: bool = False  # the one-argument __new__ nanobind adds beside nb::new_ (for unpickling)

    def parameter(self, position: Optional[int], name: Optional[str]) -> Optional[_Parameter]:
        if position is not None:
            return self.positional[position] if position < len(self.positional) else None
        for p in self.positional + self.keyword_only:
            if p.name == name:
                return p
        return None


_overloads: dict[int, tuple[_Overload, ...]] = {}


def _parse(text: str) -> Optional[_Overload]:
    try:
        tree = ast.parse(_PLACEHOLDER.sub("None", text) + ": pass")
    except SyntaxError:
        return None
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        return None
    a = node.args
    ordered = a.posonlyargs + a.args
    first_default = len(ordered) - len(a.defaults)
    positional = tuple(_Parameter(p.arg, p.annotation, False, i < first_default) for i, p in enumerate(ordered))
    keyword_only = tuple(_Parameter(p.arg, p.annotation, True, d is None) for p, d in zip(a.kwonlyargs, a.kw_defaults))
    shown = _readable(_PLACEHOLDER.sub("...", text))  # the default values are not in the text
    return _Overload(shown, positional, keyword_only, a.vararg is not None, a.kwarg is not None,
                     bool(_DEFAULT_NEW.match(text)))


# An argument the binding reads and checks itself has no type in nanobind's signature
# ("object | None" would say None is taken): shown by its name alone.
_UNTYPED = re.compile(r"(\w+): object(?: \| None)?( = )?")
_NEW = re.compile(r"^def __new__\(\w+(?:, )?(.*)\) -> (?:[\w.]+\.)?(\w+)$")


def _readable(text: str) -> str:
    """nanobind's signature text as a message shows it: a constructor as its class's call
    (``Device(backend: str = ..., ...)``, not ``def __new__(cls: object, ...)``), an untyped
    argument by its name."""
    text = _UNTYPED.sub(lambda m: m[1] + ("=" if m[2] else ""), text)
    made = _NEW.match(text)
    return f"{made[2]}({made[1]})" if made else text


def _overloads_of(func: Any) -> tuple[_Overload, ...]:
    key = id(func)
    if key not in _overloads:
        parsed = (_parse(entry[0]) for entry in getattr(func, "__nb_signature__", ()))
        _overloads[key] = tuple(o for o in parsed if o is not None)
    return _overloads[key]


# A float parameter takes any real number (an int, a NumPy number): said so, not as "float".
_READER_TEXT = {"float": "a number", "float | None": "a number or None", "int | float": "a number",
                "float | int": "a number"}


def _types(annotation: Optional[ast.expr]) -> str:
    """The annotation's types, ``typing.SupportsIndex`` read as int (an int, or a NumPy one)."""
    if annotation is None:
        return "object"
    return re.sub(r"\b(typing\.)?SupportsIndex\b", "int", ast.unparse(annotation))


def _text(annotation: Optional[ast.expr]) -> str:
    """The annotation as a message says it: a float is any real number."""
    types = _types(annotation)
    return _READER_TEXT.get(types, types)


def _core_modules() -> list[Any]:
    """``lifecore._core`` and its submodules (one per lifecycle and the driver floor), nested
    ones included."""
    found: list[Any] = []
    pending = [_core]
    while pending:
        module = pending.pop(0)
        found.append(module)
        pending += [m for m in vars(module).values() if isinstance(m, type(_core))
                    and m.__name__.startswith(module.__name__ + ".") and m not in found]
    return found


def _bound_class(name: str) -> Optional[type]:
    leaf = name.rsplit(".", 1)[-1]
    for module in _core_modules():
        found = getattr(module, leaf, None)
        if isinstance(found, type):
            return found
    return None


def _matches(value: Any, annotation: Optional[ast.expr]) -> Optional[bool]:
    """True / False when the annotation clearly accepts / refuses the value, None if unsure."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return value is None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, right = _matches(value, annotation.left), _matches(value, annotation.right)
        if left or right:
            return True
        return None if left is None or right is None else False
    if isinstance(annotation, ast.Subscript):
        outer = ast.unparse(annotation.value)
        inner = annotation.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer.endswith(("Sequence", "list")):
            if isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Sequence):
                return False
            verdicts = [_matches(v, items[0]) for v in value]
            return False if False in verdicts else (True if all(verdicts) else None)
        if outer.endswith("tuple"):
            if not isinstance(value, (tuple, list)):
                return False
            if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis:
                verdicts = [_matches(v, items[0]) for v in value]
            elif len(items) != len(value):
                return False
            else:
                verdicts = [_matches(v, t) for v, t in zip(value, items)]
            return False if False in verdicts else (True if all(verdicts) else None)
        if outer.endswith(("Mapping", "dict")):
            if not isinstance(value, collections.abc.Mapping):
                return False
            verdicts = [_matches(k, items[0]) for k in value] + [_matches(v, items[-1]) for v in value.values()]
            return False if False in verdicts else (True if all(verdicts) else None)
        if outer.endswith("Callable"):
            return callable(value)
        return None
    name = ast.unparse(annotation)
    if name in ("object", "typing.Any", "Any"):
        return True
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name in _INDEX:
        return _integer(value) is not None
    if name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "bool":
        return isinstance(value, bool)
    if name == "str":
        return isinstance(value, str)
    if name == "bytes":
        return isinstance(value, (bytes, bytearray, memoryview))
    cls = _bound_class(name)
    if cls is not None:
        return isinstance(value, cls)
    return None


# A property accessor's nanobind function has no name of its own: its class and attribute,
# noted as the accessors are guarded (by id; the functions live as long as their classes).
_ACCESSOR_LABELS: dict[int, str] = {}


def _label(func: Any) -> str:
    if id(func) in _ACCESSOR_LABELS:
        return _ACCESSOR_LABELS[id(func)]
    qualname = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", "?"))
    for special in (".__init__", ".__new__"):
        if qualname.endswith(special):
            return qualname[: -len(special)] + "()"
    return qualname + "()"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _arguments(args: tuple[Any, ...], kwargs: Optional[dict[Any, Any]]) -> list[tuple[Optional[int], Optional[str], Any]]:
    out: list[tuple[Optional[int], Optional[str], Any]] = [(i, None, v) for i, v in enumerate(args)]
    out += [(None, k, v) for k, v in (kwargs or {}).items()]
    return out


def _number_only(parameter: Optional[_Parameter]) -> bool:
    return parameter is not None and _types(parameter.annotation) in _NUMBER_ONLY


def takes_numbers(func: Any) -> bool:
    """Whether a bool could reach a number-only parameter of ``func`` (so the guard checks)."""
    return any(_number_only(p) for o in _overloads_of(func) for p in o.positional + o.keyword_only)


def check_bools(func: Any, args: tuple[Any, ...], kwargs: Optional[dict[Any, Any]]) -> None:
    """Raises LifecoreTypeError when a bool is given for a parameter that every overload types
    as a number (True is not a count)."""
    overloads = _overloads_of(func)
    if not overloads:
        return
    for position, name, value in _arguments(args, kwargs):
        if isinstance(value, bool):
            given = f"bool ({value})"
        elif _is_torch_bool(value):
            given = f"a torch bool tensor (shape {tuple(value.shape)})"
        else:
            continue
        parameters = [o.parameter(position, name) for o in overloads]
        if all(_number_only(p) for p in parameters):
            shown = parameters[0].name if parameters[0] else name
            raise LifecoreTypeError(f"{_label(func)}: argument '{shown}' must be "
                                    f"{_text(parameters[0].annotation) if parameters[0] else 'a number'}, "
                                    f"got {given}")


def _is_torch_bool(value: Any) -> bool:
    """Whether ``value`` is a torch tensor of dtype bool (its ``__index__`` reads True as 1)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.dtype is torch.bool


def _integer(value: Any) -> Optional[int]:
    """``value`` as an int when it is an integer (a Python int or what converts through
    ``__index__``, a NumPy integer), never for a bool; else None."""
    if isinstance(value, bool) or isinstance(value, _numpy_bools()) or _is_torch_bool(value):
        return None
    try:
        return operator.index(value)
    except Exception:  # an __index__ of its own may raise anything: not an integer then
        return None


def _index_failure(func: Any, args: tuple[Any, ...], kwargs: Optional[dict[Any, Any]]) -> Optional[BaseException]:
    """What an argument's own ``__index__`` raised, other than TypeError (which says it is no
    integer), where a parameter of some overload takes an int: the caller's error, passed on
    as the runtime's own integer arguments pass it."""
    overloads = _overloads_of(func)
    for position, name, value in _arguments(args, kwargs):
        if isinstance(value, (int, float, str, bytes)) or not hasattr(type(value), "__index__"):
            continue
        parameters = [o.parameter(position, name) for o in overloads]
        if not any(p is not None and _takes_int(p.annotation) for p in parameters):
            continue
        try:
            operator.index(value)
        except TypeError:
            continue
        except Exception as error:  # noqa: BLE001 - the caller's own error, passed on
            return error
    return None


def _unencodable_text(func: Any, args: tuple[Any, ...], kwargs: Optional[dict[Any, Any]],
                      converted_inside: bool = False) -> Optional[BaseException]:
    """A str argument UTF-8 cannot encode (a lone surrogate), where a parameter of some
    overload takes a str (any parameter, when the failed conversion was the binding's own, as
    a dtype's name is): nanobind refuses it as if it were no str at all."""
    overloads = _overloads_of(func)
    for position, name, value in _arguments(args, kwargs):
        if not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            parameters = [o.parameter(position, name) for o in overloads]
            taking = [p for p in parameters if p is not None and
                      (converted_inside or "str" in _types(p.annotation).split(" | "))]
            if taking or not overloads:
                argument = f"argument '{taking[0].name}'" if taking else "a text argument"
                refused = InvalidArgumentError(f"{_label(func)}: {argument} must be text UTF-8 can encode "
                                               f"({type(error).__name__}: {error})")
                refused.__suppress_context__ = True
                return refused
    return None


def _numpy_bools() -> tuple[type, ...]:
    """NumPy's bool type, when NumPy is imported (a bool there is not a count either)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


def _takes_int(annotation: Any) -> bool:
    """Whether the annotation is ``int`` (or ``SupportsIndex``), or a union with one as a member."""
    return bool(({"int"} | _INDEX) & {member.strip() for member in _types(annotation).split("|")})


def _out_of_range(value: Any) -> bool:
    # Every integer parameter holds 0 .. 2**31 - 1; past the type checks, an integer outside
    # that (negative for an unsigned parameter, or too large) is what nanobind refused.
    number = _integer(value)
    return number is not None and not (0 <= number < 2**31)


def _explain_overload(func: Any, overload: _Overload, args: tuple[Any, ...],
                      kwargs: Optional[dict[Any, Any]]) -> Optional[BaseException]:
    label = _label(func)
    if len(args) > len(overload.positional) and not overload.star_args:
        return LifecoreTypeError(f"{label}: takes at most {len(overload.positional)} positional arguments "
                                 f"(self included), got {len(args)}; expected {overload.text}")
    for position, name, value in _arguments(args, kwargs):
        parameter = overload.parameter(position, name)
        if parameter is None:
            if name is not None and not overload.star_kwargs:
                return LifecoreTypeError(f"{label}: unexpected keyword argument '{name}'; expected {overload.text}")
            continue
        if position is not None and parameter.keyword_only:
            return LifecoreTypeError(f"{label}: argument '{parameter.name}' is keyword-only; expected {overload.text}")
        if position == 0 and parameter.name == "self" and parameter.annotation is None:
            owner = _bound_class(_label(func).rsplit(".", 1)[0]) if "." in _label(func) else None
            if owner is not None and not isinstance(value, owner):
                return LifecoreTypeError(f"{label}: 'self' must be a {owner.__name__}, got {_type_name(value)}")
            continue
        verdict = _matches(value, parameter.annotation)
        if verdict is False and _takes_int(parameter.annotation) and not isinstance(value, int) \
                and _integer(value) is not None:
            continue  # an integer of another type (NumPy's) where an int is taken: its range was refused
        if verdict is False:
            return LifecoreTypeError(f"{label}: argument '{parameter.name}' must be {_text(parameter.annotation)}, "
                                     f"got {_type_name(value)}")
    given = {p.name for p in overload.positional[: len(args)]} | set(kwargs or {})
    missing = [p.name for p in overload.positional + overload.keyword_only
               if p.required and p.name not in given and p.name not in ("self", "cls")]
    if missing:
        names = ", ".join(f"'{m}'" for m in missing)
        return LifecoreTypeError(f"{label}: missing required argument{'s' if len(missing) > 1 else ''} {names}; "
                                 f"expected {overload.text}")
    for position, name, value in _arguments(args, kwargs):
        parameter = overload.parameter(position, name)
        if parameter is not None and _out_of_range(value) and _takes_int(parameter.annotation):
            number = _integer(value)
            # Below a signed 64-bit integer's range nanobind refuses any integer parameter; above
            # it, negatives are what an unsigned one refuses.
            what = ("a value below what it can hold" if number is not None and number < -2**63
                    else "a negative value, where it takes none" if number is not None and number < 0
                    else "a value past what it can hold")
            return LifecoreOverflowError(f"{label}: argument '{parameter.name}' is out of the range it can hold "
                                         f"(got {value}: {what})")
    return None


_NAMED = re.compile(r"^[\w.]+(\(\))?( at [^:]*)?: ")  # "Stream.alloc: ", "observe at p: ", ...


def name_operation(func: Any, error: BaseException) -> None:
    """Puts the lifecore call ``func`` in front of the message of the error it raised, where the
    core's message does not say which of the caller's calls failed:

    - a DriverError names the driver call ("mockMemAlloc failed: ...", or "read: an earlier
      asynchronous operation failed"): the message starts with ``func``'s name, which
      ``operation`` also holds. An error a call made inside ``func`` already named (an
      allocation in a captured step) keeps the innermost name;
    - a capture session's refusals are the seed's sentences ("previous capture step has not
      been consumed"), and a constructor's refusals are often a registry's ("unknown backend
      'x'"), which name no call: ``func``'s name goes in front of those that start with none.

    A DriverError that a callback raised (not the core's: no ``call``) is left as it is."""
    if len(error.args) != 1 or not isinstance(error.args[0], str):
        return
    label = _label(func)[:-2]  # without the "()"
    if any(part.startswith("_") and not part.endswith("__") for part in label.split(".")):
        return  # a private surface (the raw driver's tests read its text)
    text = error.args[0]
    if isinstance(error, DriverError):
        if error.operation or not error.call:
            return  # named inside already, or not the core's (a callback's own)
        error.operation = label
        bare = label.rsplit(".", 1)[-1] + ": "  # the core's own name for the call ("read: ...")
        if text.startswith(bare):
            text = f"{label}: {text[len(bare):]}"
        elif not text.startswith((label + ":", label + "()")):
            text = f"{label}: {text}"
    elif (isinstance(func, type) or getattr(func, "__module__", "") == _core.capture.__name__) and \
            not _NAMED.match(text):
        text = f"{label}: {text}"
    else:
        return
    error.args = (text,)


def explain(func: Any, args: tuple[Any, ...], kwargs: Optional[dict[Any, Any]], error: BaseException) -> Optional[BaseException]:
    """The lifecore error for nanobind's "incompatible function arguments" ``error`` raised by
    ``func`` (or its "no constructor defined" raised by calling a class that lifecore creates
    itself), or None when ``error`` is something else (it then passes through unchanged)."""
    if isinstance(func, type):
        if not str(error).endswith("no constructor defined!"):
            return None
        refused = LifecoreTypeError(f"{func.__name__} cannot be constructed directly: lifecore creates it "
                                    f"(see its documentation)")
        refused.__suppress_context__ = True
        return refused
    name = getattr(func, "__name__", "")
    if type(error) is LifecoreTypeError and str(error).startswith(_FLOOR):
        # The translator's floor for a value converted inside the binding: name the call.
        unencodable = _unencodable_text(func, args, kwargs, converted_inside=True)
        if unencodable is not None:
            return unencodable
        expected = "; ".join(o.text for o in _overloads_of(func) if not o.default_new)
        named = LifecoreTypeError(f"{_label(func)}: {error} (expected {expected or 'its signature'})")
        named.__suppress_context__ = True
        return named
    if type(error) is not TypeError or not str(error).startswith(f"{name}(): incompatible function arguments"):
        return None
    # nanobind clears what an argument's own __index__ raised: that error, not a wrong type.
    index_failure = _index_failure(func, args, kwargs)
    if index_failure is not None:
        return index_failure
    unencodable = _unencodable_text(func, args, kwargs)
    if unencodable is not None:
        return unencodable
    # nanobind adds a one-argument __new__ overload beside nb::new_ (for unpickling): not one
    # the caller meant.
    overloads = tuple(o for o in _overloads_of(func) if not o.default_new) or _overloads_of(func)
    answers = [a for a in (_explain_overload(func, o, args, kwargs) for o in overloads) if a is not None]
    # The most specific answer: a wrong argument type or range before a wrong arity or keyword.
    answers.sort(key=lambda a: 0 if "must be" in str(a) or "out of the range" in str(a) else 1)
    found = answers[0] if answers else None
    if found is None:
        expected = "; ".join(o.text for o in overloads) or "its signature"
        given = args[1:] if name == "__new__" else args  # not the class itself
        got = ", ".join([_type_name(a) for a in given] + [f"{k}={_type_name(v)}" for k, v in (kwargs or {}).items()])
        found = LifecoreTypeError(f"{_label(func)}: the arguments ({got}) match none of: {expected}")
    found.__suppress_context__ = True
    return found


def _bound_functions(namespace: Any) -> list[Any]:
    found = []
    for attribute, value in vars(namespace).items():
        candidates = [value]
        if isinstance(value, property):
            candidates = [value.fget, value.fset, value.fdel]
            for accessor in candidates:
                if accessor is not None:
                    _ACCESSOR_LABELS[id(accessor)] = f"{getattr(namespace, '__name__', '?')}.{attribute}"
        elif isinstance(value, (staticmethod, classmethod)):
            candidates = [value.__func__]
        found += [c for c in candidates if type(c).__name__ in ("nb_func", "nb_method")]
    return found


# Names of the bound classes whose construction keeps nanobind's plain TypeError (limited-API
# builds only). Names, not the classes: nothing here may keep a bound type alive at shutdown.
UNGUARDED_CLASSES: set[str] = set()


def install() -> int:
    """Guards every bound function of ``lifecore._core`` and its submodules (module functions,
    methods, constructors, property accessors, static methods) and the construction of every
    bound class. Returns how many functions."""
    # The top keeps the submodules' names too (the same objects): each is guarded once.
    count = 0
    seen: set[int] = set()
    for module in _core_modules():
        namespaces: list[Any] = [module]
        namespaces += [v for v in vars(module).values() if isinstance(v, type)]
        for namespace in namespaces:
            if id(namespace) in seen:
                continue
            seen.add(id(namespace))
            if isinstance(namespace, type) and type(namespace).__name__.startswith("nb_type"):
                if not _guard_type(namespace):
                    UNGUARDED_CLASSES.add(namespace.__name__)
            for func in _bound_functions(namespace):
                if id(func) in seen:
                    continue
                seen.add(id(func))
                _guard_function(func, takes_numbers(func))
                count += 1
    return count

