"""The extension exports its module entry point and the pooled allocator's functions, nothing else.

Symbols a module exports take part in the process's symbol resolution: an exported copy of the
core, of nanobind, or of libstdc++ (which some toolchains link statically) can have its
references bound, at load time, to another library's copy already in the process (the libstdc++
that NumPy or torch loaded, from another GCC). Code from one copy then reads the other's data:
an ``ostream`` insert that found a wrong locale facet crashed the first recording of every
stream on a machine whose libstdc++ was newer than the compiler's.
"""

import shutil
import subprocess
import sys

import pytest

from lifecore import _core

# Python's entry point, and the two functions torch's pluggable allocator finds by name.
EXPORTED = {"PyInit__core", "lifecore_pooled_alloc", "lifecore_pooled_free"}
# What an instrumented build's runtime may add beside them.
SANITIZER_PREFIXES = ("__asan", "__lsan", "__ubsan", "__sanitizer", "__tsan")

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads an ELF module's dynamic symbols"),
    pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed"),
]


def exported_symbols() -> list[str]:
    listing = subprocess.run(["nm", "-D", "--defined-only", _core.__file__], capture_output=True, text=True,
                             check=True).stdout
    return [line.split()[-1] for line in listing.splitlines() if line.strip()]


def test_only_the_entry_points_are_exported():
    exported = exported_symbols()
    assert EXPORTED <= set(exported)
    others = [name for name in exported if name not in EXPORTED and not name.startswith(SANITIZER_PREFIXES)]
    assert not others, f"{len(others)} other symbols exported, for example {others[:5]}"


def test_no_cxx_runtime_symbol_is_exported():
    # Said separately: these are the ones that crash when another copy wins.
    runtime = [name for name in exported_symbols()
               if name.startswith(("_ZNSt", "_ZNKSt", "_ZSt", "_ZNSo", "_ZNSi", "_ZTVSt", "_ZTISt", "__cxa_", "__gxx_"))]
    assert not runtime, f"C++ runtime symbols exported: {runtime[:5]}"
