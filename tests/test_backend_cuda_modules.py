"""User modules on the CUDA backend: against the fake driver library (tests/fake_driver/fake_libcuda.c,
compiled here, in a subprocess, since the driver loads once per process) and on a real CUDA device
where there is one. The backend-neutral module rules are in test_runtime_modules.py.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lifecore
from lifecore import ClosedError, DriverError, InvalidArgumentError

from backend_roles import unavailable

from test_runtime_modules import FILL_PTX

FAKE_SOURCE = Path(__file__).parent / "fake_driver" / "fake_libcuda.c"


# ---- the CUDA path against the fake driver library ----

def _compiler() -> str | None:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    library = tmp_path_factory.mktemp("fake_cuda_modules") / "libfakecuda.so"
    result = subprocess.run([compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-O1", "-o", str(library),
                             str(FAKE_SOURCE)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"the fake CUDA driver did not compile: {result.stderr.strip()[:400]}")
    return library


def _run_fake(library: Path, body: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment.update(env)
    environment["LIFECORE_LIBCUDA"] = str(library)
    prelude = textwrap.dedent("""
        import json, lifecore
        result = {}
        def outcome(call):
            try:
                value = call()
            except lifecore.LifecoreError as error:
                return {"error": type(error).__name__, "text": str(error),
                        "code": getattr(error, "code", None), "call": getattr(error, "call", None)}
            return {"ok": repr(value)}
    """)
    code = prelude + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(result))\n"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                               timeout=120)
    assert completed.returncode == 0, f"scenario crashed ({completed.returncode}): {completed.stderr[-2000:]}"
    line = [l for l in completed.stdout.splitlines() if l.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


FAKE_BODY = """
ptx = %r
device = lifecore.Device("cuda")
stream = device.stream()
buf = stream.alloc(64)
module = lifecore.Module.from_ptx(device, ptx)
result["kind"] = module.kind
fill = module.function("fill_u32", ["n: u32", "value: u32", "out: ptr"])
result["signature"] = fill.signature
result["builtin"] = fill.is_builtin
inferred = module.function("fill_u32")
result["inferred"] = inferred.params
result["launch"] = outcome(lambda: stream.launch(fill, 1, 16, [16, 7, buf]))
result["wrong_count"] = outcome(lambda: stream.launch(fill, 1, 16, [16, buf]))
result["wrong_kind"] = outcome(lambda: stream.launch(fill, 1, 16, [16, 1.5, buf]))
result["sizes_mismatch"] = outcome(lambda: module.function("fill_u32", ["u32", "u64", "ptr"]))
result["count_mismatch"] = outcome(lambda: module.function("fill_u32", ["u32", "ptr"]))
result["bad_kind"] = outcome(lambda: module.function("fill_u32", ["u32", "float", "ptr"]))
reader = module.function("fill_u32", ["n: u32", "value: u32", "out:\tconst  ptr"])
result["const"] = [reader.signature, reader.read_only, reader.params]
result["const_scalar"] = outcome(lambda: module.function("fill_u32", ["u32", "const u32", "ptr"]))
result["const_name"] = outcome(lambda: module.function("fill_u32", ["u32", "u32", "const out: ptr"]))
result["missing"] = outcome(lambda: module.function("no_such_kernel", ["u32"]))
result["bad_ptx"] = outcome(lambda: lifecore.Module.from_ptx(device, "not ptx at all"))
result["hip_image"] = outcome(lambda: lifecore.Module.from_image(device, b"__CLANG_OFFLOAD_BUNDLE__" + bytes(32)))
result["cubin"] = outcome(lambda: lifecore.Module.from_image(device, b"\x7fELF" + bytes(60)))
graph = stream.capture(lambda s: s.launch(fill, 1, 16, [16, 9, buf]))
result["graph_nodes"] = graph.node_count
result["replay"] = outcome(lambda: (graph.replay(), stream.sync()))
with lifecore.Device("cuda") as other:
    result["other_device"] = outcome(lambda: other.stream().launch(fill, 1, 16, [16, 7, other.stream().alloc(64)]))
module.unload()
result["alive_after_unload"] = module.alive
result["after_unload"] = outcome(lambda: stream.launch(fill, 1, 16, [16, 7, buf]))
result["function_after_unload"] = outcome(lambda: module.function("fill_u32", ["u32", "u32", "ptr"]))
graph.destroy()
with lifecore.Module.from_ptx(device, ptx) as scoped:
    k = scoped.function("fill_u32", ["u32", "u32", "ptr"])
    stream.launch(k, 1, 16, [16, 1, buf])
result["scoped_alive"] = scoped.alive
last = lifecore.Module.from_ptx(device, ptx).function("fill_u32", ["u32", "u32", "ptr"])
stream.launch(last, 1, 16, [16, 2, buf])
stream.sync()
del last  # the module goes with its last kernel
device.close()
result["after_close"] = outcome(lambda: lifecore.Module.from_ptx(device, ptx))
"""


def test_user_kernels_through_the_cuda_driver_library(fake_libcuda) -> None:
    r = _run_fake(fake_libcuda, FAKE_BODY % FILL_PTX)
    assert r["kind"] == "ptx"
    assert r["signature"] == "fill_u32(n: u32, value: u32, out: ptr)" and r["builtin"] is False
    assert r["inferred"] == ["u32", "u32", "ptr"]  # from the driver's parameter sizes
    assert "ok" in r["launch"], r["launch"]
    wrong = r["wrong_count"]
    assert wrong["error"] == "LifecoreTypeError" and "fill_u32" in wrong["text"]
    assert "takes 3 argument(s)" in wrong["text"] and "got 2" in wrong["text"]
    assert r["wrong_kind"]["error"] == "LifecoreTypeError" and "value" in r["wrong_kind"]["text"]
    for key in ("sizes_mismatch", "count_mismatch"):
        assert r[key]["error"] == "InvalidArgumentError" and "driver says" in r[key]["text"], r[key]
    assert r["bad_kind"]["error"] == "InvalidArgumentError" and "'float'" in r["bad_kind"]["text"]
    # "const ptr": a pointer the kernel only reads (a read-only tensor may be passed there).
    assert r["const"] == ["fill_u32(n: u32, value: u32, out: const ptr)", ["out"], ["u32", "u32", "ptr"]]
    assert r["const_scalar"]["error"] == "InvalidArgumentError" and "'const u32'" in r["const_scalar"]["text"]
    assert r["const_name"]["error"] == "InvalidArgumentError" and "'const out: ptr'" in r["const_name"]["text"]
    missing = r["missing"]
    assert missing["error"] == "DriverError" and missing["code"] == 500 and "no_such_kernel" in missing["text"]
    assert missing["call"] == "cuModuleGetFunction"
    bad = r["bad_ptx"]
    assert bad["error"] == "DriverError" and bad["call"] == "cuModuleLoadDataEx" and bad["code"] == 218
    assert "Module.from_ptx" in bad["text"] and "fake parse error" in bad["text"]  # the JIT log
    assert r["hip_image"]["error"] == "InvalidArgumentError"  # HIP's bundle is not a CUDA image
    assert "unrecognised image" in r["hip_image"]["text"]
    assert r["cubin"]["error"] == "DriverError" and "Module.from_image" in r["cubin"]["text"]
    assert r["graph_nodes"] >= 0 and "ok" in r["replay"], r["replay"]
    assert r["other_device"]["error"] == "InvalidArgumentError" and "another device" in r["other_device"]["text"]
    assert r["alive_after_unload"] is False
    assert r["after_unload"]["error"] == "ClosedError" and "unloaded" in r["after_unload"]["text"]
    assert r["function_after_unload"]["error"] == "ClosedError"
    assert r["scoped_alive"] is False
    assert r["after_close"]["error"] == "ClosedError"


def test_without_parameter_sizes_params_are_required(fake_libcuda) -> None:
    body = """
    device = lifecore.Device("cuda")
    module = lifecore.Module.from_ptx(device, %r)
    result["no_params"] = outcome(lambda: module.function("fill_u32"))
    result["with_params"] = module.function("fill_u32", ["u32", "u32", "ptr"]).params
    device.close()
    """ % FILL_PTX
    r = _run_fake(fake_libcuda, body, FAKE_CUDA_HIDE="cuFuncGetParamInfo")
    assert r["no_params"]["error"] == "InvalidArgumentError" and "pass params" in r["no_params"]["text"]
    assert r["with_params"] == ["u32", "u32", "ptr"]


def test_module_loads_stay_outside_captures(fake_libcuda) -> None:
    # The driver refuses cuModuleLoadDataEx while a stream captures (the fake does too), and
    # invalidates the capture: lifecore refuses the load first, and the capture still seals.
    body = """
    import struct
    from lifecore import kernels as K
    device = lifecore.Device("cuda", graphs="hardware")
    stream = device.stream()
    buf = stream.alloc(64)
    stream.graph_prepare()
    stream.begin_capture()  # no warmup: the built-in module loads before the capture begins
    result["builtin_launch"] = outcome(lambda: stream.launch(K.scale_f32, 1, 16, [16, 2.0, buf, buf]))
    result["end"] = outcome(lambda: stream.end_capture().node_count)
    stream.graph_prepare()
    stream.begin_capture()
    result["user_load"] = outcome(lambda: lifecore.Module.from_ptx(device, %r))
    result["end_after_load"] = outcome(lambda: stream.end_capture())
    result["after"] = outcome(lambda: stream.capture(lambda s: s.fill(buf, 3), warmup=0).node_count)
    result["load_after"] = outcome(lambda: lifecore.Module.from_ptx(device, %r).kind)
    device.close()
    """ % (FILL_PTX, FILL_PTX)
    r = _run_fake(fake_libcuda, body)
    assert "ok" in r["builtin_launch"] and "ok" in r["end"], r
    load = r["user_load"]
    assert load["error"] == "CaptureStateError" and "is recording a graph capture on this thread" in load["text"]
    assert "this call loads a module" in load["text"]
    assert "ok" in r["end_after_load"], r  # the load never reached the driver: nothing was invalidated
    assert "ok" in r["after"] and r["load_after"] == {"ok": "'ptx'"}, r


# ---- a real CUDA device ----

def _real_cuda_device() -> lifecore.Device:
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    if not info.available:
        unavailable("cuda", f"no CUDA device: {info.reason}")
    if "LIFECORE_LIBCUDA" in os.environ:
        pytest.skip("no CUDA device: LIFECORE_LIBCUDA names another driver library than the system's")
    return lifecore.Device("cuda")


def test_a_ptx_kernel_runs_eagerly_and_in_a_graph_on_a_cuda_device() -> None:
    n = 1000
    with _real_cuda_device() as device:
        stream = device.stream()
        buf = stream.alloc(4 * n)
        with lifecore.Module.from_ptx(device, FILL_PTX) as module:
            fill = module.function("fill_u32", ["n: u32", "value: u32", "out: ptr"])
            try:  # inferred from cuFuncGetParamInfo (drivers from CUDA 12.4 on)
                assert module.function("fill_u32").params == ["u32", "u32", "ptr"]
            except InvalidArgumentError as error:
                assert "pass params" in str(error)
            stream.launch(fill, (n + 255) // 256, 256, [n, 7, buf])
            assert stream.read(buf) == struct.pack(f"<{n}I", *[7] * n)
            graph = stream.capture(lambda s: s.launch(fill, (n + 255) // 256, 256, [n, 11, buf]), warmup=0)
            stream.fill(buf, 0)
            graph.replay()
            assert stream.read(buf) == struct.pack(f"<{n}I", *[11] * n)
            with pytest.raises(lifecore.LifecoreTypeError, match="fill_u32.*takes 3 argument"):
                stream.launch(fill, 1, 32, [n, buf])
            with pytest.raises(DriverError) as raised:
                module.function("no_such_kernel", ["u32"])
            assert raised.value.code == 500 and "no_such_kernel" in str(raised.value)
            graph.destroy()
        with pytest.raises(ClosedError, match="unloaded"):
            stream.launch(fill, 1, 32, [n, 1, buf])
        with pytest.raises(DriverError) as raised:
            lifecore.Module.from_ptx(device, ".version 7.0\n.target sm_52\n.address_size 64\n"
                                             ".visible .entry k( { bogus; }")
        assert raised.value.call == "cuModuleLoadDataEx" and raised.value.code in (218, 200)
        # The device is still usable.
        stream.launch(lifecore.kernels.scale_f32, 1, 32, [4, 1.0, buf, buf])
        stream.sync()


def test_unload_racing_launches_gives_closed_errors_never_a_crash(fake_libcuda) -> None:
    body = """
    import threading
    device = lifecore.Device("cuda")
    module = lifecore.Module.from_ptx(device, %r)
    fill = module.function("fill_u32", ["u32", "u32", "ptr"])
    seen = {"ok": 0, "closed": 0, "other": []}
    lock = threading.Lock()
    def worker():
        stream = device.stream()
        buf = stream.alloc(64)
        for _ in range(300):
            try:
                stream.launch(fill, 1, 16, [16, 3, buf])
                kind = "ok"
            except lifecore.ClosedError:
                kind = "closed"
            except Exception as error:
                with lock:
                    seen["other"].append(repr(error))
                continue
            with lock:
                seen[kind] += 1
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    module.unload()
    for t in threads:
        t.join()
    result.update(seen)
    result["alive"] = module.alive
    device.close()
    """ % FILL_PTX
    r = _run_fake(fake_libcuda, body)
    assert r["other"] == [] and r["alive"] is False
    assert r["ok"] + r["closed"] == 1200


def test_a_retired_module_stays_loaded_while_a_stream_cannot_be_waited_for(fake_libcuda) -> None:
    # Its launches may still be queued: unloading would free the code they run.
    body = """
    import ctypes, os
    unloads = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"]).fake_cuda_module_unloads
    device = lifecore.Device("cuda")
    stream = device.stream()
    buf = stream.alloc(64)
    module = lifecore.Module.from_ptx(device, %r)
    fill = module.function("fill_u32", ["u32", "u32", "ptr"])
    stream.launch(fill, 1, 16, [16, 3, buf])
    os.environ["FAKE_CUDA_SYNC"] = "1"  # the stream's wait fails (not sticky)
    before = unloads()
    module.unload()
    result["unloaded_while_unwaited"] = unloads() - before
    result["alive"] = module.alive
    os.environ["FAKE_CUDA_SYNC"] = "0"
    device.cleanup()  # the next wait succeeds: the retired module goes
    result["unloaded_after"] = unloads() - before
    device.close()
    """ % FILL_PTX
    r = _run_fake(fake_libcuda, body)
    assert r == {"unloaded_while_unwaited": 0, "alive": False, "unloaded_after": 1}
