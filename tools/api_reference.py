"""Walk lifecore's public API: list what has no docstring, or write the API reference.

The public API is every name a public module exports (``__all__``, or its names without a
leading underscore), and every public method and property of each exported class. Enum members
are values, documented by their enum's docstring. A nanobind function always has a
``__doc__`` (its signature); it counts as documented only when text follows the signature.

    python tools/api_reference.py --missing     # one line per undocumented name; exit 1 if any
    python tools/api_reference.py --write       # regenerate docs/api.md from the docstrings
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
API_MD = ROOT / "docs" / "api.md"

# The modules a user imports, in the order the reference presents them.
PUBLIC_MODULES = (
    "lifecore",
    "lifecore.kernels",
    "lifecore.errors",
    "lifecore.sequence",
    "lifecore.capture",
    "lifecore.torch",
    "lifecore.engine",
    "lifecore.testing",
)


@dataclass(frozen=True)
class Entry:
    """One public name: where it lives, what it is, its signature and its docstring."""

    module: str
    qualname: str
    kind: str  # "class", "function", "method", "property", "constant"
    signature: str
    doc: str


def _is_nanobind_function(obj: Any) -> bool:
    return type(obj).__name__ in ("nb_func", "nb_method", "nb_bound_method")


def _split_nanobind_doc(obj: Any) -> tuple[str, str]:
    """(signature lines, docstring) of a nanobind function's ``__doc__``."""
    doc = obj.__doc__ or ""
    name = getattr(obj, "__name__", "")
    lines = doc.splitlines()
    signatures: list[str] = []
    while lines and lines[0].startswith(name + "("):
        signatures.append(lines.pop(0))
    return "\n".join(signatures), "\n".join(lines).strip()


def _signature(obj: Any) -> str:
    if _is_nanobind_function(obj):
        return _split_nanobind_doc(obj)[0]
    try:
        return f"{getattr(obj, '__name__', '')}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return ""


def _doc(obj: Any) -> str:
    if _is_nanobind_function(obj):
        return _split_nanobind_doc(obj)[1]
    doc = inspect.getdoc(obj) or ""
    # A class without a docstring of its own inherits object's or its base's: not documentation.
    if inspect.isclass(obj) and obj.__doc__ is None:
        return ""
    if inspect.isclass(obj) and len(obj.__mro__) > 1 and obj.__doc__ == obj.__mro__[1].__doc__:
        return ""
    return doc


def _module_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return list(names)


def _members(cls: type) -> Iterator[tuple[str, str, Any]]:
    """(name, kind, object) for the public methods and properties a class defines itself."""
    is_enum = issubclass(cls, enum.Enum)
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if is_enum and isinstance(value, cls):
            continue  # members are documented by the enum
        if isinstance(value, (staticmethod, classmethod)):
            yield name, "method", value.__func__
        elif isinstance(value, property) or type(value).__name__ == "nb_property":
            yield name, "property", value
        elif callable(value):
            yield name, "method", value


def walk() -> list[Entry]:
    """Every public name of every public module, each once (where it is first exported)."""
    entries: list[Entry] = []
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # an optional module whose dependency is missing (e.g. lifecore.torch)
        for name in _module_names(module):
            obj = getattr(module, name, None)
            if obj is None or inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                entries.append(Entry(module_name, name, "class", "", _doc(obj)))
                for member, kind, value in _members(obj):
                    doc = (value.__doc__ or "").strip() if kind == "property" else _doc(value)
                    signature = "" if kind == "property" else _signature(value)
                    entries.append(Entry(module_name, f"{name}.{member}", kind, signature, doc))
            elif callable(obj):
                entries.append(Entry(module_name, name, "function", _signature(obj), _doc(obj)))
    return entries


def missing(entries: list[Entry] | None = None) -> list[str]:
    """The public names that have no docstring, as ``module.qualname``."""
    return [f"{e.module}.{e.qualname}" for e in (entries if entries is not None else walk()) if not e.doc]


def render(entries: list[Entry]) -> str:
    """The API reference as Markdown, one section per module."""
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python tools/api_reference.py --write`; a test keeps",
        "every public name documented and listed here. The README shows how the pieces fit.",
        "",
    ]
    module = None
    for e in entries:
        if e.module != module:
            module = e.module
            out += [f"## `{module}`", ""]
        heading = "###" if e.kind in ("class", "function") else "####"
        out.append(f"{heading} `{e.qualname}`" + ("" if e.kind in ("class", "function") else f" ({e.kind})"))
        out.append("")
        if e.signature:
            out += ["```", e.signature, "```", ""]
        out += [e.doc, ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--missing", action="store_true", help="list undocumented public names")
    group.add_argument("--write", action="store_true", help=f"regenerate {API_MD.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    entries = walk()
    if args.missing:
        names = missing(entries)
        print("\n".join(names) if names else f"every one of {len(entries)} public names is documented")
        return 1 if names else 0
    API_MD.write_text(render(entries), encoding="utf-8")
    print(f"wrote {API_MD.relative_to(ROOT)}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
