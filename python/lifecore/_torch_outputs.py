"""Which element of a module's output a torch hook observes, and the output rebuilt with a
replacement there (``output_index`` of :mod:`lifecore.torch`).

An int is a position, as the container's own ``output[i]`` reads it: of a tuple or list, and of
a ModelOutput-like mapping (one with ``to_tuple()``, whose int index is positional among the
fields set). A str is a key of a mapping, or a field of a namedtuple. A plain dict has no
position: its keys are its only names, so an int never silently picks one of its values.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable, Optional, Union

import torch

from .capture.backends.arguments import as_index
from .errors import LifecoreTypeError

Index = Union[int, str]

_NOWHERE = object()


def _slot(output: Any, index: Index) -> Any:
    """Where ``index`` is in ``output``: a position of a tuple/list, a key of a mapping, or
    ``_NOWHERE``."""
    if isinstance(output, (tuple, list)):
        if isinstance(index, str):
            fields = getattr(output, "_fields", None)
            return fields.index(index) if isinstance(fields, tuple) and index in fields else _NOWHERE
        return index if -len(output) <= index < len(output) else _NOWHERE
    if isinstance(output, Mapping):
        if isinstance(index, str):
            return index if index in output else _NOWHERE
        if callable(getattr(output, "to_tuple", None)):
            keys = list(output.keys())
            return keys[index] if -len(keys) <= index < len(keys) else _NOWHERE
    return _NOWHERE


def selected_tensor(output: Any, index: Index = 0) -> Optional[torch.Tensor]:
    """The tensor a hook observes: the output itself, or its element at ``index``; None when
    there is no tensor there."""
    if isinstance(output, torch.Tensor):
        return output
    slot = _slot(output, index)
    if slot is _NOWHERE:
        return None
    element = output[slot]
    return element if isinstance(element, torch.Tensor) else None


def selection_problem(output: Any, index: Index, path: str) -> str:
    """Why ``output`` of module ``path`` has no tensor at ``index`` (for the error a hook raises)."""
    kind = type(output).__name__
    if isinstance(output, Mapping):
        keys = ", ".join(repr(k) for k in list(output.keys())[:12]) or "none"
        if isinstance(index, int) and not callable(getattr(output, "to_tuple", None)):
            return f"output of {path} is a {kind}, selected by key (output_index=<key>), not by position {index} " \
                   f"(its keys: {keys})"
    slot = _slot(output, index)
    if slot is not _NOWHERE:
        return f"output of {path} at output_index {index!r} is a {type(output[slot]).__name__}, not a tensor"
    if isinstance(output, Mapping):
        where = f"key {index!r}" if isinstance(index, str) else f"position {index} ({len(output)} fields set)"
        return f"output of {path} has no {where} (its keys: {keys})"
    if isinstance(output, (tuple, list)):
        if isinstance(index, str):
            fields = getattr(output, "_fields", None)
            named = f"its fields: {', '.join(map(repr, fields))}" if isinstance(fields, tuple) else \
                "it is selected by position"
            return f"output of {path} has no field {index!r} ({kind} of {len(output)}; {named})"
        return f"output of {path} has no tensor at output_index {index} ({kind} of {len(output)})"
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        # A plain dataclass is neither a mapping nor a sequence: its fields are not selected.
        return (f"output of {path} is a dataclass ({kind}), whose fields output_index does not select (it selects "
                f"positions of tuples and lists, keys of mappings, fields of namedtuples and ModelOutputs); return a "
                f"tuple or a namedtuple from the module, or capture the submodule that makes the tensor")
    return f"output of {path} has no tensor at output_index {index!r} (a {kind})"


def _same_element(made: Any, given: Any) -> bool:
    """Whether a container's constructor kept ``given`` where it was: the object itself, or a
    tensor of its shape, dtype and values (a constructor that clones or makes its items
    contiguous); one that reordered its items would put the replacement elsewhere."""
    if made is given:
        return True
    if not (isinstance(made, torch.Tensor) and isinstance(given, torch.Tensor)):
        return False
    if made.shape != given.shape or made.dtype != given.dtype or made.device != given.device:
        return False
    return bool(torch.equal(made, given) or (made.is_floating_point() and
                                             torch.allclose(made, given, rtol=0, atol=0, equal_nan=True)))


def rebuilder(output: Any, index: Index) -> Callable[[torch.Tensor], Any]:
    """How ``output`` is rebuilt with a replacement at ``index``, checked before anything is
    applied: LifecoreTypeError when a replacement cannot go back into a container of its type
    (a read-only mapping, one that refuses a key, a tuple subclass whose constructor does not
    take its items), so an intervention is never recorded APPLIED on an output it could not
    change (the hook calls this as the first operation applies: that operation fails). The rebuilt output
    is of the same type: a namedtuple or a torch struct sequence (``torch.max``'s) stays one, a
    list subclass that list (downstream code reads their fields); a mapping is a shallow copy of
    itself with the one key set (a ModelOutput keeps its other fields and its attributes). The
    output itself is left as it was."""
    if isinstance(output, torch.Tensor):
        return lambda replacement: replacement
    slot = _slot(output, index)
    kind = type(output)
    if isinstance(output, Mapping):
        if not isinstance(output, MutableMapping):
            raise LifecoreTypeError(f"an intervention's replacement cannot go back into a {kind.__name__} (a "
                                    f"mapping that cannot be set): return a dict, or intervene on the submodule "
                                    f"that makes the tensor")

        def into_mapping(replacement: torch.Tensor) -> Any:
            rebuilt = copy.copy(output)
            rebuilt[slot] = replacement
            return rebuilt
        try:
            into_mapping(output[slot])  # a copy set once with its own value: it must take a key
        except Exception as error:
            raise LifecoreTypeError(f"an intervention's replacement cannot go back into a {kind.__name__}: "
                                    f"setting key {slot!r} of a copy raised {type(error).__name__}: {error}") from error
        return into_mapping
    items = list(output)
    if kind is tuple or kind is list:
        make: Callable[[list[Any]], Any] = kind
    elif isinstance(output, tuple) and hasattr(output, "_fields") and callable(getattr(output, "_make", None)):
        make = getattr(output, "_make")  # a namedtuple's
    else:
        make = kind  # a list subclass, a struct sequence (torch.return_types), another tuple subclass
        try:
            trial = make(items)  # built once from the items as they are: its constructor must take them
        except Exception as error:
            raise LifecoreTypeError(f"an intervention's replacement cannot go back into a {kind.__name__}: "
                                    f"{kind.__name__}(items) raised {type(error).__name__}: {error}") from error
        if type(trial) is not kind or len(trial) != len(items) or not _same_element(trial[slot], items[slot]):
            raise LifecoreTypeError(f"an intervention's replacement cannot go back into a {kind.__name__}: "
                                    f"{kind.__name__}(items) does not give back a {kind.__name__} holding the "
                                    f"same element at {index!r}")

    def into_sequence(replacement: torch.Tensor) -> Any:
        rebuilt = list(items)
        rebuilt[slot] = replacement
        return make(rebuilt)
    return into_sequence


def with_replacement(output: Any, index: Index, replacement: torch.Tensor) -> Any:
    """``output`` with ``replacement`` at ``index``, of the same type (see :func:`rebuilder`)."""
    return rebuilder(output, index)(replacement)


def check_output_index(output_index: Any, call: str) -> Union[Index, dict[str, Index]]:
    """``output_index`` with its integers as ints (a NumPy or torch integer is one), or
    LifecoreTypeError when it is not an int, a str, or a mapping path -> int or str (it is read
    only at the forward, where a wrong one failed with an error naming neither call nor argument)."""
    def index(value: Any) -> Optional[Index]:
        return value if isinstance(value, str) else as_index(value)

    if (single := index(output_index)) is not None:
        return single
    if isinstance(output_index, Mapping):
        each = {k: index(v) for k, v in output_index.items()}
        if all(isinstance(k, str) for k in each) and all(v is not None for v in each.values()):
            return {k: v for k, v in each.items() if v is not None}
    raise LifecoreTypeError(f"{call}: argument 'output_index' must be an int (a position), a str (a key), or a "
                            f"mapping of module paths to them, got {output_index!r}")


def index_for(output_index: Union[Index, Mapping[str, Index]], path: str) -> Index:
    """The position or key selected at module ``path`` (a mapping names it per path; paths it
    does not name use position 0)."""
    if isinstance(output_index, Mapping):
        return output_index.get(path, 0)
    return output_index
