"""Walk lifecore's public API: list what has no docstring, or write the API reference.

The public API is every name a public module exports (``__all__``, or its names without a
leading underscore), and every public method, property and annotated attribute of each exported
class. Enum members are values, documented by their enum's docstring. A method that overrides a
documented one without a docstring of its own reads the base's (``inspect.getdoc``).

What does not count as documentation: the signature nanobind puts first in a function's
``__doc__`` (only text after it counts; a nanobind property's getter carries the same), the
``Name(field, ...)`` line a dataclass or named tuple gets when it has no docstring, and a class
docstring inherited from a base. An attribute is documented by a string right below it (an
attribute docstring), by ``#:`` comments right above it, or by its class docstring naming it
in double backquotes (the paragraph or list item that does is its text).

    python tools/api_reference.py --missing     # one line per undocumented name; exit 1 if any
    python tools/api_reference.py --write       # regenerate docs/api.md from the docstrings
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import inspect
import re
import sys
import textwrap
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
    kind: str  # "class", "function", "method", "property", "attribute"
    signature: str
    doc: str


def _is_nanobind_function(obj: Any) -> bool:
    """A nanobind function, or a plain C method written the same way: its ``__doc__`` starts
    with its typed signature (SequenceSession.step, a hand-written CPython entry for speed)."""
    if type(obj).__name__ in ("nb_func", "nb_method", "nb_bound_method"):
        return True
    return type(obj).__name__ == "method_descriptor" and (obj.__doc__ or "").startswith(obj.__name__ + "(")


def _split_nanobind_doc(obj: Any) -> tuple[str, str]:
    """(signature lines, docstring) of a nanobind function's ``__doc__``."""
    return _split_signatures(obj.__doc__ or "", getattr(obj, "__name__", ""))


def _split_signatures(doc: str, name: str) -> tuple[str, str]:
    """The leading signature lines of a nanobind ``__doc__`` (one per overload: ``name(...)``,
    or ``(...)`` for an unnamed getter), and the text after them."""
    lines = doc.splitlines()
    signatures: list[str] = []
    while lines and (lines[0].startswith(name + "(") if name else lines[0].startswith("(")):
        signatures.append(lines.pop(0))
    return "\n".join(signatures), "\n".join(lines).strip()


def _signature(obj: Any) -> str:
    if _is_nanobind_function(obj):
        return _split_nanobind_doc(obj)[0]
    # An async method reads as one (on 3.11 a guarded one is marked for asyncio's check only).
    asynchronous = inspect.iscoroutinefunction(inspect.unwrap(obj))
    try:
        return f"{'async ' if asynchronous else ''}{getattr(obj, '__name__', '')}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return ""


def _generated_class_doc(cls: type, doc: str) -> bool:
    """Whether ``doc`` is the one line a dataclass or named tuple gets without a docstring."""
    return "\n" not in doc.strip() and doc.strip().startswith(cls.__name__ + "(")


def _doc(obj: Any) -> str:
    if _is_nanobind_function(obj):
        return _split_nanobind_doc(obj)[1]
    doc = inspect.getdoc(obj) or ""
    # A class without a docstring of its own inherits object's or its base's: not documentation.
    if inspect.isclass(obj) and obj.__doc__ is None:
        return ""
    if inspect.isclass(obj) and len(obj.__mro__) > 1 and obj.__doc__ == obj.__mro__[1].__doc__:
        return ""
    if inspect.isclass(obj) and _generated_class_doc(obj, doc):
        return ""
    return doc


def _property_doc(prop: Any) -> str:
    """A property's docstring; for a nanobind property whose getter has none, nanobind gives the
    getter's signature (``(self) -> int``), which is not documentation."""
    doc = prop.__doc__ or ""
    getter = getattr(prop, "fget", None)
    if getter is not None and _is_nanobind_function(getter):
        return _split_signatures(doc, getattr(getter, "__name__", ""))[1]
    return inspect.cleandoc(doc)


def _attribute_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings (a string right below the assignment) and ``#:`` comments (right
    above it) in the class body's source; empty for a class without Python source."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent("".join(lines))
    try:
        body = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return {}
    if not isinstance(body, ast.ClassDef):
        return {}
    return _assignment_docs(body.body, source.splitlines())


def _assignment_docs(statements: list[ast.stmt], source_lines: list[str]) -> dict[str, str]:
    """Name -> the attribute docstring or ``#:`` comments of each plain assignment among
    ``statements`` (a class body, or a module's top level)."""
    docs: dict[str, str] = {}
    for statement, following in zip(statements, statements[1:] + [None]):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            name = statement.targets[0].id
        else:
            continue
        if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[name] = inspect.cleandoc(following.value.value)
            continue
        comments: list[str] = []
        row = statement.lineno - 2  # the line above, 0-based
        while row >= 0 and source_lines[row].strip().startswith("#:"):
            comments.insert(0, source_lines[row].strip()[2:].strip())
            row -= 1
        if comments:
            docs[name] = " ".join(comments)
    return docs


def _class_doc_naming(cls: type, name: str) -> str:
    """The paragraph or list item of the class's own docstring that names ``name`` (in double
    backquotes, as reStructuredText marks code)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    blocks = re.split(r"\n\s*\n|\n(?=\s*- )", doc)
    for block in blocks:
        if f"``{name}``" in block:
            return " ".join(line.strip() for line in block.splitlines()).removeprefix("- ")
    return ""


def _attributes(cls: type) -> Iterator[tuple[str, str, str]]:
    """(name, annotation, docstring) for the public attributes a class annotates itself."""
    annotations = inspect.get_annotations(cls)  # the class's own, as written
    if not annotations:
        return
    sourced = _attribute_docs(cls)
    for name, annotation in annotations.items():
        if name.startswith("_"):
            continue
        if not isinstance(annotation, str):
            annotation = getattr(annotation, "__name__", repr(annotation))
        yield name, annotation, sourced.get(name) or _class_doc_naming(cls, name)


def _constant_doc(module: Any, name: str, value: Any) -> str:
    """A module constant's text: the attribute docstring or ``#:`` comments of its assignment in
    the lifecore module that defines it (the first whose namespace holds this very object and
    whose source assigns the name), else the item of the exporting module's docstring that names
    it in double backquotes (``name`` or ``name(...)``)."""
    defining = [module] + [m for key, m in sorted(sys.modules.items())
                           if key.startswith("lifecore") and m is not module and m is not None]
    for candidate in defining:
        if vars(candidate).get(name) is not value:
            continue
        try:
            source = inspect.getsource(candidate)
        except (OSError, TypeError):
            continue
        doc = _assignment_docs(ast.parse(source).body, source.splitlines()).get(name)
        if doc:
            return doc
    for item in re.split(r"\n\s*\n|\n(?=- )", inspect.cleandoc(module.__doc__ or "")):
        if re.search(rf"``{re.escape(name)}(\(|``)", item):
            return " ".join(item.removeprefix("- ").split())
    return ""


def _constant_signature(name: str, value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60 or "\n" in shown:
        shown = "..."
    return f"{name}: {type(value).__name__} = {shown}"


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
        elif inspect.isclass(value):
            continue  # a nested class is reached through the module that exports it, if any
        elif callable(value):
            yield name, "method", value


def _import(module_name: str) -> Any:
    """The module, or None when it does not exist in this build or needs a package that is not
    installed (e.g. lifecore.torch without torch). A lifecore import that breaks is raised."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name or not (error.name or "").startswith("lifecore"):
            return None
        raise


def unimportable() -> list[str]:
    """The public modules this environment cannot import (a package they need is missing)."""
    return [name for name in PUBLIC_MODULES if _import(name) is None]


def walk() -> list[Entry]:
    """Every public name of every public module, each once (where it is first exported)."""
    entries: list[Entry] = []
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = _import(module_name)
        if module is None:
            continue
        for name in _module_names(module):
            obj = getattr(module, name, None)
            if obj is None or inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                entries.append(Entry(module_name, name, "class", "", _doc(obj)))
                for attribute, annotation, doc in _attributes(obj):
                    entries.append(Entry(module_name, f"{name}.{attribute}", "attribute",
                                         f"{attribute}: {annotation}", doc))
                for member, kind, value in _members(obj):
                    doc = _property_doc(value) if kind == "property" else _doc(value)
                    signature = "" if kind == "property" else _signature(value)
                    entries.append(Entry(module_name, f"{name}.{member}", kind, signature, doc))
            elif callable(obj):
                entries.append(Entry(module_name, name, "function", _signature(obj), _doc(obj)))
            else:  # a constant: its value's type, and the text its source gives it
                entries.append(Entry(module_name, name, "constant", _constant_signature(name, obj),
                                     _constant_doc(module, name, obj)))
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
    shown: dict[str, str] = {}  # each class's docstring as printed
    for e in entries:
        if e.module != module:
            module = e.module
            out += [f"## `{module}`", ""]
        top = e.kind in ("class", "function", "constant")
        heading = "###" if top else "####"
        out.append(f"{heading} `{e.qualname}`" + ("" if e.kind in ("class", "function") else f" ({e.kind})"))
        out.append("")
        if e.signature:
            out += ["```", e.signature, "```", ""]
        owner = e.qualname.rpartition(".")[0]
        if e.kind == "class":
            shown[e.qualname] = " ".join(e.doc.split())
        if e.kind == "attribute" and owner in shown and " ".join(e.doc.split()) in shown[owner]:
            # Documented by its class's paragraph naming it: printed once, with the class.
            out += [f"Described with `{owner}` above.", ""]
        else:
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
    if skipped := unimportable():
        # The reference would lose their sections: refused rather than written short.
        print(f"api_reference: cannot import {', '.join(skipped)} here (is torch installed?); {API_MD.name} would "
              f"lose their sections, so it is not written", file=sys.stderr)
        return 2
    API_MD.write_text(render(entries), encoding="utf-8")
    print(f"wrote {API_MD.relative_to(ROOT)}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
