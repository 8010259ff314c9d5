"""The CUDA backend below the runtime.

Without a GPU, a fake driver library (tests/fake_driver/fake_libcuda.c, compiled here with
the system C compiler) stands in for libcuda.so.1 through LIFECORE_LIBCUDA. Each scenario runs
in a subprocess because the driver is loaded once per process. With a real CUDA device, the
last tests run the built-in kernels, capture and replay on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import lifecore
from lifecore import _core

from backend_roles import unavailable

FAKE_SOURCE = Path(__file__).parent / "fake_driver" / "fake_libcuda.c"

# The ABI version each entry point must be requested at (the one cuda_abi.hpp declares).
EXPECTED_REQUESTS = {
    "cuInit": 2000,
    "cuDriverGetVersion": 2020,
    "cuMemGetInfo": 3020,
    "cuMemAlloc": 3020,
    "cuMemFree": 3020,
    "cuMemcpyHtoD": 3020,
    "cuMemsetD32": 3020,
    "cuStreamDestroy": 4000,
    "cuEventDestroy": 4000,
    "cuDevicePrimaryCtxRelease": 11000,
    "cuStreamBeginCapture": 10010,
    "cuGraphUpload": 11010,
    "cuGraphInstantiateWithFlags": 11040,
    "cuGraphExecUpdate": 12000,
    "cuFuncGetParamInfo": 12040,
    "cuMemAllocAsync": 11020,
    "cuPointerGetAttribute": 4000,
}

# builtin_kernels.hpp: u32 and f32 are 4 bytes, pointers 8.
BUILTIN_PARAM_SIZES = {
    "axpy_f32": [4, 4, 8, 8],
    "scale_f32": [4, 4, 8, 8],
    "add_f32": [4, 8, 8, 8],
    "axpy_info_f32": [8, 8, 8],
}


def _compiler() -> str | None:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory) -> dict[str, Path]:
    """The fake driver, built twice: plain (like a real libcuda) and with versioned exports."""
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    out = tmp_path_factory.mktemp("fake_cuda")
    built = {}
    for variant, flags in (("plain", []), ("versioned", ["-DFAKE_EXPORT_VERSIONED"])):
        library = out / f"libfakecuda_{variant}.so"
        command = [compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-O1", *flags, "-o", str(library), str(FAKE_SOURCE)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"the fake CUDA driver did not compile: {result.stderr.strip()[:400]}")
        built[variant] = library
    return built


_SCENARIO_PRELUDE = """
import json, lifecore
from lifecore import _core
info = [b for b in lifecore.backends() if b.name == "cuda"][0]
result = {"available": info.available, "reason": info.reason, "driver_version": info.driver_version,
          "device_count": info.device_count, "device_name": info.device_name, "library": info.library,
          "symbols": _core._probe_symbols("cuda")}
try:
    result["probe"] = _core._open_driver_probe("cuda")
except lifecore.LifecoreError as error:
    result["open_error"] = [type(error).__name__, str(error)]

def failure(call, *args):
    try:
        call(*args)
    except lifecore.DriverError as error:
        return {"code": error.code, "status": error.status, "call": error.call, "message": error.driver_message,
                "text": str(error)}
    return None
"""


def run_scenario(library: Path | str, tmp_path: Path, body: str = "", **env: str) -> dict:
    """Runs the prelude (+ body, which may add to `result`) in a fresh interpreter."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment.update(env)
    environment["LIFECORE_LIBCUDA"] = str(library)
    environment["FAKE_CUDA_LOG"] = str(tmp_path / "requests.log")
    code = _SCENARIO_PRELUDE + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(result))\n"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)
    assert completed.returncode == 0, f"scenario crashed ({completed.returncode}): {completed.stderr[-2000:]}"
    line = [l for l in completed.stdout.splitlines() if l.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


def requests(tmp_path: Path) -> list[tuple[str, int, int]]:
    log = tmp_path / "requests.log"
    if not log.exists():
        return []
    return [(name, int(version), int(flags)) for name, version, flags in (l.split() for l in log.read_text().splitlines())]


def test_fake_driver_starts_and_every_entry_is_requested_by_base_name_and_version(fake_cuda, tmp_path):
    body = """
    result["auto"] = _core._open_driver_probe("auto")["backend"]
    try:
        _core._open_driver_probe("cuda", 1)
    except lifecore.InvalidArgumentError as error:
        result["ordinal_error"] = str(error)
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body)
    assert result["auto"] == "cuda"  # auto prefers an available CUDA device
    assert result["ordinal_error"] == "cuda device ordinal 1 is out of range: 1 device(s)"
    assert result["available"], result["reason"]
    assert result["device_count"] == 1 and result["device_name"] == "Fake CUDA Device 0"
    assert result["driver_version"] == 12040
    assert Path(result["library"]).name == fake_cuda["plain"].name
    assert all(result["symbols"].values()), [k for k, v in result["symbols"].items() if not v]
    assert result["probe"]["backend"] == "cuda" and result["probe"]["hardware_graphs"]
    asked = {}
    for name, version, flags in requests(tmp_path):
        asked.setdefault(name, set()).add(version)
        assert flags == 1, f"{name} requested with flags {flags}: expected the legacy-stream flag"
        assert not name.endswith(("_v2", "_v3")), f"{name}: cuGetProcAddress takes base names"
    for name, version in EXPECTED_REQUESTS.items():
        assert asked.get(name) == {version}, f"{name} requested at {asked.get(name)}, expected {version}"
    # Both ABIs of cuStreamGetCaptureInfo are asked for, the CUDA 12.3 one and the 11.3 one.
    assert asked["cuStreamGetCaptureInfo"] == {12030, 11030}


def test_a_driver_older_than_12_0_is_unavailable_with_its_version(fake_cuda, tmp_path):
    result = run_scenario(fake_cuda["plain"], tmp_path, FAKE_CUDA_VERSION="11080")
    assert not result["available"]
    assert "too old" in result["reason"] and "11.8" in result["reason"] and "12.0" in result["reason"]
    assert result["driver_version"] == 11080
    assert result["open_error"] == ["BackendUnavailableError", "cuda: " + result["reason"]]


def test_entry_points_newer_than_the_driver_are_not_used(fake_cuda, tmp_path):
    # A 12.2 driver refuses requests for 12.3 and 12.4: the 11.3 capture-info ABI serves, and
    # parameter sizes are unknown (the exports do not name them either).
    result = run_scenario(fake_cuda["plain"], tmp_path, FAKE_CUDA_VERSION="12020")
    assert result["available"], result["reason"]
    symbols = result["symbols"]
    assert not symbols["cuStreamGetCaptureInfo_v3"] and symbols["cuStreamGetCaptureInfo_v2"]
    assert not symbols["cuFuncGetParamInfo"]
    assert result["probe"]["backend"] == "cuda"


def test_a_missing_required_entry_point_names_it(fake_cuda, tmp_path):
    result = run_scenario(fake_cuda["plain"], tmp_path, FAKE_CUDA_HIDE="cuStreamBeginCapture")
    assert not result["available"]
    assert "cuStreamBeginCapture" in result["reason"] and "required" in result["reason"]
    assert result["symbols"]["cuStreamBeginCapture"] is False
    assert result["open_error"][0] == "BackendUnavailableError"


def test_missing_optional_entry_points_only_disable_their_operations(fake_cuda, tmp_path):
    body = """
    driver = _core._open_driver("cuda")
    module = driver.module_load("builtin")
    function = driver.module_get_function(module, "axpy_f32")
    result["param_sizes"] = failure(driver.function_param_sizes, function)
    stream = driver.stream_create()
    result["alloc_async"] = failure(driver.mem_alloc_async, 64, stream)
    driver.begin_capture(stream, "global")
    graph = driver.end_capture(stream)
    exec_ = driver.graph_instantiate(graph)
    result["update"] = failure(driver.graph_exec_update, exec_, graph)
    result["pointer_device"] = failure(driver.pointer_device, driver.mem_alloc(64))
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body,
                          FAKE_CUDA_HIDE="cuFuncGetParamInfo,cuGraphExecUpdate,cuMemAllocAsync,cuPointerGetAttribute")
    assert result["available"], result["reason"]
    assert "cuFuncGetParamInfo" in result["reason"]  # a note, not a refusal
    assert "cuPointerGetAttribute" in result["reason"]
    for key, call in (("param_sizes", "cuFuncGetParamInfo"), ("update", "cuGraphExecUpdate_v2"),
                      ("alloc_async", "cuMemAllocAsync"), ("pointer_device", "cuPointerGetAttribute")):
        assert result[key]["code"] == 801 and result[key]["call"] == call, result[key]


@pytest.mark.parametrize("env, expected", [
    ({"FAKE_CUDA_DEVICES": "0"}, "cuDeviceGetCount reports 0"),
    ({"FAKE_CUDA_INIT": "100"}, "fake driver: no CUDA-capable device is detected"),
])
def test_no_device_is_unavailable_not_a_crash(fake_cuda, tmp_path, env, expected):
    result = run_scenario(fake_cuda["plain"], tmp_path, **env)
    assert not result["available"]
    assert result["reason"].startswith("no CUDA device") and expected in result["reason"]
    assert result["open_error"] == ["BackendUnavailableError", "cuda: " + result["reason"]]


def test_init_failure_other_than_no_device_names_the_call_and_code(fake_cuda, tmp_path):
    result = run_scenario(fake_cuda["plain"], tmp_path, FAKE_CUDA_INIT="3")
    assert not result["available"]
    assert "cuInit failed: CUDA_ERROR_NOT_INITIALIZED (3): fake driver: initialization error" == result["reason"]


def test_versioned_exports_serve_when_get_proc_address_knows_nothing(fake_cuda, tmp_path):
    result = run_scenario(fake_cuda["versioned"], tmp_path, FAKE_CUDA_PROC="none")
    assert result["available"], result["reason"]
    assert all(result["symbols"].values())
    assert len(requests(tmp_path)) >= len(result["symbols"])  # every entry was asked for first


def test_without_get_proc_address_answers_or_exports_the_first_required_entry_is_named(fake_cuda, tmp_path):
    result = run_scenario(fake_cuda["plain"], tmp_path, FAKE_CUDA_PROC="none")
    assert not result["available"]
    # cuInit and friends are plain exports; cuDeviceGet is the first entry only the table serves.
    assert "lacks the required entry point cuDeviceGet" in result["reason"]


def test_an_override_that_does_not_load_is_a_reason(tmp_path):
    result = run_scenario(tmp_path / "no_such_libcuda.so", tmp_path)
    assert not result["available"]
    assert "LIFECORE_LIBCUDA" in result["reason"] and "no_such_libcuda.so" in result["reason"]
    assert result["symbols"] == {}


def test_native_errors_map_to_status_with_name_call_and_driver_message(fake_cuda, tmp_path):
    body = """
    driver = _core._open_driver("cuda")
    result["oom"] = failure(driver.mem_alloc, 1024)
    result["bad_ptx"] = failure(driver.module_load, "ptx", b"this is not PTX")
    result["code_object"] = failure(driver.module_load, "code_object", b"\\x7fELF")
    module = driver.module_load("builtin")
    result["no_kernel"] = failure(driver.module_get_function, module, "no_such_kernel")
    stream = driver.stream_create()
    driver.stream_destroy(stream)
    result["stale_stream"] = failure(driver.stream_synchronize, stream)
    result["stale_handle_native"] = driver.stream_native_handle(stream)
    stream = driver.stream_create()
    driver.begin_capture(stream, "relaxed")
    result["invalidated"] = failure(driver.end_capture, stream)
    result["unmatched"] = failure(driver.end_capture, stream)
    result["stream_still_usable"] = driver.stream_query(stream)
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body, FAKE_CUDA_OOM="1", FAKE_CUDA_INVALIDATE="1")
    assert result["oom"] == {"code": 2, "status": "CUDA_ERROR_OUT_OF_MEMORY", "call": "cuMemAlloc_v2",
                             "message": "fake driver: out of memory",
                             "text": "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): fake driver: out of memory"}
    assert result["bad_ptx"]["code"] == 218 and result["bad_ptx"]["call"] == "cuModuleLoadDataEx"
    assert "fake parse error" in result["bad_ptx"]["message"]  # the JIT's log reaches the message
    assert result["code_object"]["code"] == 200 and "HIP code object" in result["code_object"]["message"]
    assert result["no_kernel"]["code"] == 500 and result["no_kernel"]["call"] == "cuModuleGetFunction"
    assert "no_such_kernel" in result["no_kernel"]["message"]
    assert result["stale_stream"]["code"] == 400 and result["stale_stream"]["call"] == "cuStreamSynchronize"
    assert result["stale_stream"]["status"] == "CUDA_ERROR_INVALID_HANDLE"
    assert result["stale_handle_native"] == 0
    assert result["invalidated"]["code"] == 901
    assert result["invalidated"]["status"] == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert result["invalidated"]["call"] == "cuStreamEndCapture"
    assert result["unmatched"]["code"] == 903
    assert result["stream_still_usable"] is True


def test_operations_through_the_fake_driver(fake_cuda, tmp_path):
    body = """
    import struct
    driver = _core._open_driver("cuda")
    module = driver.module_load("builtin")
    result["param_sizes"] = {name: driver.function_param_sizes(driver.module_get_function(module, name))
                             for name in ("axpy_f32", "scale_f32", "add_f32", "axpy_info_f32")}
    pointer = driver.mem_alloc(16)
    driver.memcpy_htod(pointer, struct.pack("4I", 1, 2, 3, 4))
    other = driver.mem_alloc(16)
    driver.memcpy_dtod(other, pointer, 16)
    result["copied"] = list(struct.unpack("4I", driver.memcpy_dtoh(other, 16)))
    driver.memset_d32(pointer, 7, 4)
    result["memset"] = list(struct.unpack("4I", driver.memcpy_dtoh(pointer, 16)))
    stream = driver.stream_create()
    result["native"] = driver.stream_native_handle(stream) == stream != 0
    driver.launch(driver.module_get_function(module, "axpy_f32"), (1, 1, 1), (4, 1, 1), stream,
                  [("u32", 4), ("f32", 2.0), ("pointer", pointer), ("pointer", other)])
    result["before_capture"] = driver.capture_info(stream)
    driver.begin_capture(stream, "thread_local")
    status, capture_id = driver.capture_info(stream)
    result["during_capture"] = [status, capture_id > 0]
    graph = driver.end_capture(stream)
    result["counts"] = driver.graph_node_counts(graph)
    exec_ = driver.graph_instantiate(graph)
    driver.graph_upload(exec_, stream)
    driver.graph_launch(exec_, stream)
    result["update"] = driver.graph_exec_update(exec_, graph)
    driver.graph_exec_destroy(exec_)
    driver.graph_destroy(graph)
    result["relaunch_destroyed"] = failure(driver.graph_launch, exec_, stream)
    result["modes"] = [driver.exchange_capture_mode("relaxed"), driver.exchange_capture_mode("global")]
    driver.mem_free(pointer)
    result["double_free"] = failure(driver.mem_free, pointer)
    driver.close()
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body, FAKE_CUDA_MEM_NODES="2")
    assert result["param_sizes"] == BUILTIN_PARAM_SIZES  # the PTX declares builtin_kernels.hpp's signatures
    assert result["copied"] == [1, 2, 3, 4] and result["memset"] == [7, 7, 7, 7]
    assert result["native"] is True
    assert result["before_capture"] == [0, 0] and result["during_capture"] == [1, True]
    assert result["counts"] == [3, 2, 0]  # one kernel node and two memory-alloc nodes
    assert result["update"] == 2  # topology changed: a refusal is a result, not an error
    assert result["relaunch_destroyed"]["code"] == 400
    assert result["modes"] == [0, 2]
    assert result["double_free"]["code"] == 1 and result["double_free"]["call"] == "cuMemFree_v2"


def test_probe_is_cached_and_thread_safe():
    seen = []

    def probe():
        info = [b for b in lifecore.backends() if b.name == "cuda"][0]
        seen.append((info.available, info.reason, info.driver_version))

    threads = [threading.Thread(target=probe) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1


def test_opening_cuda_where_it_is_unavailable_raises_with_the_probe_reason():
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    if info.available:
        pytest.skip("a CUDA device is available here")
    assert info.reason
    with pytest.raises(lifecore.BackendUnavailableError) as raised:
        _core._open_driver_probe("cuda")
    assert str(raised.value) == "cuda: " + info.reason
    with pytest.raises(lifecore.BackendUnavailableError):
        _core._open_driver("cuda")


# ---- real hardware ----

def _real_cuda():
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    if not info.available:
        unavailable("cuda", f"no CUDA device: {info.reason}")
    if "LIFECORE_LIBCUDA" in os.environ:
        pytest.skip("no CUDA device: LIFECORE_LIBCUDA names another driver library than the system's")
    return _core._open_driver("cuda")


def test_builtin_kernels_run_and_replay_in_a_graph_on_a_cuda_device():
    np = pytest.importorskip("numpy")
    driver = _real_cuda()
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    px, py = driver.mem_alloc(4 * n), driver.mem_alloc(4 * n)
    driver.memcpy_htod(px, x.tobytes())
    driver.memcpy_htod(py, y.tobytes())
    # From pageable memory a host-to-device copy returns once the data is staged, and the
    # launch below runs on a non-blocking stream, which the legacy stream does not order: read
    # both back (a device-to-host copy on the legacy stream runs after them, and returns done).
    assert driver.memcpy_dtoh(px, 4 * n) == x.tobytes() and driver.memcpy_dtoh(py, 4 * n) == y.tobytes()
    module = driver.module_load("builtin")
    axpy = driver.module_get_function(module, "axpy_f32")
    stream = driver.stream_create()
    args = [("u32", n), ("f32", 0.5), ("pointer", px), ("pointer", py)]
    driver.launch(axpy, ((n + 255) // 256, 1, 1), (256, 1, 1), stream, args)
    driver.stream_synchronize(stream)
    expected = np.float32(0.5) * x + y
    assert np.array_equal(np.frombuffer(driver.memcpy_dtoh(py, 4 * n), np.float32), expected)

    driver.begin_capture(stream, "global")
    assert driver.capture_info(stream)[0] == 1
    driver.launch(axpy, ((n + 255) // 256, 1, 1), (256, 1, 1), stream, args)
    graph = driver.end_capture(stream)
    assert driver.graph_node_counts(graph) == (1, 0, 0)
    exec_ = driver.graph_instantiate(graph)
    driver.graph_upload(exec_, stream)
    for _ in range(2):
        driver.graph_launch(exec_, stream)
        expected = np.float32(0.5) * x + expected
    driver.stream_synchronize(stream)
    assert np.array_equal(np.frombuffer(driver.memcpy_dtoh(py, 4 * n), np.float32), expected)
    assert driver.graph_exec_update(exec_, graph) == 0
    driver.graph_exec_destroy(exec_)
    driver.graph_destroy(graph)
    driver.close()


def test_bad_input_on_a_cuda_device_names_the_call_and_the_driver_message():
    driver = _real_cuda()
    with pytest.raises(lifecore.DriverError) as raised:
        driver.module_load("ptx", b".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry k( { bogus; }")
    assert raised.value.call == "cuModuleLoadDataEx" and raised.value.code in (218, 200)
    module = driver.module_load("builtin")
    with pytest.raises(lifecore.DriverError) as raised:
        driver.module_get_function(module, "no_such_kernel")
    assert raised.value.call == "cuModuleGetFunction" and raised.value.status == "CUDA_ERROR_NOT_FOUND"
    stream = driver.stream_create()
    pointer = driver.mem_alloc_async(1024, stream)  # an allocation inside a capture is a memory node
    driver.begin_capture(stream, "thread_local")
    inner = driver.mem_alloc_async(256, stream)
    driver.mem_free_async(inner, stream)
    graph = driver.end_capture(stream)
    total, allocs, frees = driver.graph_node_counts(graph)
    assert allocs == 1 and frees == 1 and total >= 2
    driver.graph_destroy(graph)
    driver.mem_free_async(pointer, stream)
    driver.stream_synchronize(stream)
    driver.close()


@pytest.mark.no_sanitizer
def test_a_lifecore_stream_is_usable_by_torch_as_an_external_stream():
    driver = _real_cuda()
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    stream = driver.stream_create()
    external = torch.cuda.ExternalStream(driver.stream_native_handle(stream))
    with torch.cuda.stream(external):
        t = torch.arange(1024, device="cuda", dtype=torch.float32) * 2
    driver.stream_synchronize(stream)
    assert float(t.sum()) == float(sum(range(1024)) * 2)
    driver.stream_destroy(stream)
    driver.close()


def test_handles_stay_consistent_when_threads_share_one_driver(fake_cuda, tmp_path):
    body = """
    import threading
    driver = _core._open_driver("cuda")
    errors = []

    def churn():
        try:
            for _ in range(200):
                stream = driver.stream_create()
                pointer = driver.mem_alloc(64)
                driver.memset_d32_async(pointer, 1, 16, stream)
                driver.stream_synchronize(stream)
                driver.mem_free(pointer)
                driver.stream_destroy(stream)
        except Exception as error:  # reported below, not swallowed
            errors.append(repr(error))

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result["errors"] = errors
    result["stale_after"] = failure(driver.stream_destroy, 12345)
    driver.close()
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body)
    assert result["errors"] == []
    assert result["stale_after"]["code"] == 400


def test_work_still_running_keeps_its_dropped_memory_and_a_timed_sync_waits_for_it(fake_cuda, tmp_path):
    # The driver answers CUDA_ERROR_NOT_READY while work runs: a timed sync polls until its
    # deadline and says False, and a buffer dropped behind that work is never handed out again
    # until its fence is done (the next allocation takes new memory instead).
    body = """
    import ctypes, os, time
    fake = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    device = lifecore.Device("cuda")
    stream = device.stream()
    started = time.monotonic()
    result["busy_sync"] = stream.sync(timeout=0.05)
    result["busy_waited"] = time.monotonic() - started
    result["stream_polls"] = fake.fake_cuda_stream_queries()
    for _ in range(100):
        buffer = stream.alloc(64)
        stream.fill(buffer, 1)
        del buffer
    stats = device.memory_stats()
    result["busy"] = [stats["slices_in_use"], stats["driver_allocations"]]
    result["event_polls"] = fake.fake_cuda_event_queries()
    fake.fake_cuda_set_busy(0)
    result["idle_sync"] = stream.sync(timeout=10)
    buffer = stream.alloc(64)
    stats = device.memory_stats()
    result["idle"] = [stats["slices_in_use"], stats["driver_allocations"]]
    del buffer
    device.close()
    """
    result = run_scenario(fake_cuda["plain"], tmp_path, body, FAKE_CUDA_BUSY="1")
    assert result["busy_sync"] is False and result["busy_waited"] >= 0.05
    assert result["stream_polls"] > 1  # polled, not one query and a give-up
    assert result["busy"] == [100, 100]  # no dropped slice served again while its work runs
    assert result["event_polls"] > 0  # the drops' fences were asked, and said not ready
    assert result["idle_sync"] is True
    assert result["idle"] == [1, 100]  # once done, a dropped slice serves the next allocation
