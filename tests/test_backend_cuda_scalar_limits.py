"""Kernel scalar arguments at the exact limits of each declared kind (i32, u32, i64, u64, f32, f64).

The built-in kernels only take u32 and f32 scalars, so a user kernel declaring every kind is
loaded through the fake CUDA driver library (tests/fake_driver/fake_libcuda.c, compiled here,
in a subprocess): launches do nothing there, but every check above the driver is real. The
last value of each range is accepted, the first one outside is an InvalidArgumentError naming
the argument and its kind, and a refused launch queues nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAKE_SOURCE = Path(__file__).parent / "fake_driver" / "fake_libcuda.c"

# scalars(i: i32, u: u32, l: i64, q: u64, f: f32, d: f64, out: ptr): the fake only reads the
# entry's parameter list.
SCALARS_PTX = """
.version 7.0
.target sm_52
.address_size 64

.visible .entry scalars(.param .s32 i, .param .u32 u, .param .s64 l, .param .u64 q, .param .f32 f,
                        .param .f64 d, .param .u64 out)
{
  ret;
}
"""

KINDS = ["i: i32", "u: u32", "l: i64", "q: u64", "f: f32", "d: f64", "out: ptr"]
BASE = [0, 0, 0, 0, 0.0, 0.0]

ACCEPTED = {
    "i": [-(2**31), 2**31 - 1, -1, 0],
    "u": [0, 2**32 - 1],
    "l": [-(2**63), 2**63 - 1],
    "q": [0, 2**63, 2**64 - 1],
    "f": [2**64 - 1, -(2**63), 1.5],  # ints convert; the float range is the float's
    "d": [2**64 - 1, -(2**63), 1e308],
}
REFUSED = {
    "i": [2**31, -(2**31) - 1, 2**32 - 1, 2**63, 2**64],
    "u": [-1, 2**32, 2**63, 2**64],
    "l": [2**63, 2**64 - 1, -(2**63) - 1, 2**64],
    "q": [-1, -(2**63), 2**64, 2**70],
}


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    library = tmp_path_factory.mktemp("fake_cuda_scalars") / "libfakecuda.so"
    built = subprocess.run([compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-O1", "-o", str(library),
                            str(FAKE_SOURCE)], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"the fake CUDA driver did not compile: {built.stderr.strip()[:400]}")
    return library


def test_each_scalar_kind_at_its_exact_limits(fake_libcuda) -> None:
    body = f"""
    import json, lifecore
    result = {{"accepted": {{}}, "refused": {{}}}}
    device = lifecore.Device("cuda")
    stream = device.stream()
    out = stream.alloc(64)
    kernel = lifecore.Module.from_ptx(device, {SCALARS_PTX!r}).function("scalars", {KINDS!r})
    names = [k.split(":")[0] for k in {KINDS!r}][:-1]

    def launch(name, value):
        args = list({BASE!r})
        args[names.index(name)] = value
        stream.launch(kernel, 1, 1, args + [out])

    for name, values in {ACCEPTED!r}.items():
        for value in values:
            try:
                launch(name, value)
                result["accepted"][f"{{name}}={{value}}"] = None
            except lifecore.LifecoreError as error:
                result["accepted"][f"{{name}}={{value}}"] = [type(error).__name__, str(error)]
    for name, values in {REFUSED!r}.items():
        for value in values:
            stats = device.memory_stats()
            try:
                launch(name, value)
                result["refused"][f"{{name}}={{value}}"] = None
            except lifecore.LifecoreError as error:
                same = device.memory_stats() == stats
                result["refused"][f"{{name}}={{value}}"] = [type(error).__name__, str(error), same]
    stream.sync()
    print("RESULT=" + json.dumps(result))
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment["LIFECORE_LIBCUDA"] = str(fake_libcuda)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 0, f"scenario crashed ({done.returncode}): {done.stderr[-2000:]}"
    result = json.loads([l for l in done.stdout.splitlines() if l.startswith("RESULT=")][-1][len("RESULT="):])
    assert {k: v for k, v in result["accepted"].items() if v is not None} == {}
    # An int past 64 bits is a LifecoreOverflowError, which is an InvalidArgumentError too.
    not_refused = {k: v for k, v in result["refused"].items()
                   if v is None or v[0] not in ("InvalidArgumentError", "LifecoreOverflowError")}
    assert not_refused == {}
    for key, (_, text, unchanged) in result["refused"].items():
        name, value = key.split("=")
        assert f"'{name}'" in text and value in text, (key, text)  # the argument and value are named, also past 64 bits
        assert unchanged, key
