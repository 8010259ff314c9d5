"""The HIP backend's driver layer, checked without an AMD GPU through a fake HIP runtime.

tests/fake_driver/fake_libamdhip64.c, compiled here with the system C compiler, exports the HIP
runtime's and hiprtc's entry points; LIFECORE_LIBHIP and LIFECORE_LIBHIPRTC point at it, in a
subprocess per scenario (the runtime loads once per process). Pinned: availability and its
reasons, the refusal of every unknown or destroyed handle (400, naming the HIP call) before the
runtime sees it, allocations freed once only, copies and memsets, launches reaching the runtime
with their geometry, capture into graphs with their node kinds, executable-graph update
verdicts, the images HIP cannot load, a failing hiprtc compile reported with its log, and the
interop operations: the device owning a pointer (hipPointerGetAttribute) and an event recorded
on a native stream.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver_scenarios import build_fake_library, collected_during_recording_scenario, run_scenario, timed_events_scenario


@pytest.fixture(scope="module")
def fake_hip(tmp_path_factory) -> Path:
    return build_fake_library(tmp_path_factory, "fake_libamdhip64.c", "fake HIP runtime")


def run_fake(library: Path, body: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_HIP")}
    environment.update(env)
    environment["LIFECORE_LIBHIP"] = str(library)
    environment["LIFECORE_LIBHIPRTC"] = str(library)
    return run_scenario(body, environment)


def test_the_fake_runtime_starts_and_describes_its_device(fake_hip) -> None:
    body = """
    info = [b for b in lifecore.backends() if b.name == "hip"][0]
    result["info"] = [info.available, info.reason, info.device_count, info.device_name, info.driver_version]
    result["probe"] = _core._open_driver_probe("hip")
    driver = _core._open_driver("hip")
    result["name"] = driver.device_name()
    result["version"] = driver.driver_version()
    result["mem_info"] = list(driver.mem_info())
    try:
        _core._open_driver("hip", 1)
    except lifecore.InvalidArgumentError as error:
        result["ordinal"] = str(error)
    driver.close()
    """
    result = run_fake(fake_hip, body)
    assert result["info"] == [True, "", 1, "fake HIP device 0", 60100000]
    assert result["probe"]["builtin_kernels"] is True and result["probe"]["hardware_graphs"] is True
    assert result["name"] == "fake HIP device 0" and result["version"] == 60100000
    assert result["mem_info"] == [2**32, 2**33]
    assert "out of range" in result["ordinal"]


def test_no_device_makes_the_backend_unavailable_with_the_reason(fake_hip) -> None:
    body = """
    info = [b for b in lifecore.backends() if b.name == "hip"][0]
    result["info"] = [info.available, info.reason, info.device_count]
    try:
        _core._open_driver_probe("hip")
    except lifecore.BackendUnavailableError as error:
        result["error"] = str(error)
    """
    result = run_fake(fake_hip, body, FAKE_HIP_DEVICES="0")
    available, reason, count = result["info"]
    assert available is False and count == 0
    assert reason.startswith("no HIP device") and "hipGetDeviceCount" in reason and "hipErrorNoDevice" in reason
    assert "hipInit" in reason  # the failed init is named as well
    assert result["error"] == "hip: " + reason


def test_unknown_and_destroyed_handles_are_refused_before_the_runtime(fake_hip) -> None:
    body = """
    driver = _core._open_driver("hip")
    stream = driver.stream_create()
    gone_stream = driver.stream_create()
    driver.stream_destroy(gone_stream)
    event = driver.event_create()
    gone_event = driver.event_create()
    driver.event_destroy(gone_event)
    module = driver.module_load("builtin", b"")
    function = driver.module_get_function(module, "axpy_f32")
    gone_module = driver.module_load("builtin", b"")
    gone_function = driver.module_get_function(gone_module, "scale_f32")
    driver.module_unload(gone_module)
    x = driver.mem_alloc(16)
    args = [("u32", 4), ("f32", 2.0), ("pointer", x), ("pointer", x)]
    driver.begin_capture(stream, "relaxed")
    driver.memset_d32_async(x, 1, 4, stream)
    graph = driver.end_capture(stream)
    exec_ = driver.graph_instantiate(graph)
    driver.begin_capture(stream, "relaxed")
    driver.memset_d32_async(x, 1, 4, stream)
    gone_graph = driver.end_capture(stream)
    gone_exec = driver.graph_instantiate(gone_graph)
    driver.graph_exec_destroy(gone_exec)
    driver.graph_destroy(gone_graph)

    # The shared cases, then the ones only this backend has.
    cases = handle_refusal_cases(driver, stream=stream, gone_stream=gone_stream, event=event, gone_event=gone_event,
                                 function=function, gone_module=gone_module, graph=graph, gone_graph=gone_graph,
                                 exec_=exec_, gone_exec=gone_exec, args=args, ptr=x, async_ptr=x)
    for label, bad in (("unknown", UNKNOWN), ("of an unloaded module", gone_function)):
        cases[f"launch {label} function"] = refusal(driver.launch, bad, (1, 1, 1), (4, 1, 1), stream, args, 0)
    result["cases"] = cases
    result["native_unknown"] = driver.stream_native_handle(UNKNOWN)
    result["native_live"] = driver.stream_native_handle(stream) == stream

    # Nothing changed: the live objects still work.
    driver.memset_d32_async(x, 7, 4, stream)
    driver.stream_synchronize(stream)
    result["memset"] = list(struct.unpack("4I", driver.memcpy_dtoh(x, 16)))
    driver.event_record(event, stream)
    driver.event_synchronize(event)
    result["counts"] = driver.graph_node_counts(graph)
    driver.graph_launch(exec_, stream)
    driver.graph_exec_destroy(exec_)
    driver.graph_destroy(graph)
    driver.event_destroy(event)
    driver.module_unload(module)
    result["function_of_unloaded"] = refusal(driver.launch, function, (1, 1, 1), (4, 1, 1), stream, args, 0)
    driver.stream_destroy(stream)
    driver.close()
    """
    result = run_fake(fake_hip, body)
    cases = result["cases"]
    assert len(cases) == 58
    not_refused = {name: got for name, got in cases.items() if got is None or got[0] != 400}
    assert not_refused == {}
    unnamed = {name: got for name, got in cases.items() if not got[1].startswith("hip")}
    assert unnamed == {}
    assert result["native_unknown"] == 0 and result["native_live"] is True
    assert result["memset"] == [7, 7, 7, 7]
    assert result["counts"] == [1, 0, 0]
    assert result["function_of_unloaded"][0] == 400


def test_memory_copies_and_frees(fake_hip) -> None:
    body = """
    driver = _core._open_driver("hip")
    stream = driver.stream_create()
    a = driver.mem_alloc(16)
    b = driver.mem_alloc(16)
    driver.memcpy_htod(a, struct.pack("4I", 1, 2, 3, 4))
    driver.memcpy_dtod(b, a, 16)
    result["dtod"] = list(struct.unpack("4I", driver.memcpy_dtoh(b, 16)))
    driver.memset_d32(a, 0xFFFFFFFF, 4)
    result["memset"] = list(struct.unpack("4I", driver.memcpy_dtoh(a, 16)))
    driver.mem_free(a)
    result["free_twice"] = refusal(driver.mem_free, a)
    result["free_async_after_free"] = refusal(driver.mem_free_async, a, stream)
    result["free_unknown"] = refusal(driver.mem_free, 0x5100)
    c = driver.mem_alloc_async(32, stream)
    driver.mem_free_async(c, stream)
    result["free_async_twice"] = refusal(driver.mem_free_async, c, stream)
    result["free_after_free_async"] = refusal(driver.mem_free, c)
    driver.mem_free(b)
    driver.close()
    """
    result = run_fake(fake_hip, body)
    assert result["dtod"] == [1, 2, 3, 4]
    assert result["memset"] == [0xFFFFFFFF] * 4
    assert result["free_twice"] == [1, "hipFree"]
    assert result["free_async_after_free"] == [1, "hipFreeAsync"]
    assert result["free_unknown"] == [1, "hipFree"]
    assert result["free_async_twice"] == [1, "hipFreeAsync"]
    assert result["free_after_free_async"] == [1, "hipFree"]


def test_launches_captures_graphs_and_updates(fake_hip, tmp_path) -> None:
    log = tmp_path / "launches.log"
    body = """
    driver = _core._open_driver("hip")
    stream = driver.stream_create()
    module = driver.module_load("builtin", b"")
    axpy = driver.module_get_function(module, "axpy_f32")
    x = driver.mem_alloc(64)
    driver.launch(axpy, (3, 1, 1), (16, 1, 1), stream, [("u32", 48), ("f32", 1.0), ("pointer", x), ("pointer", x)], 0)
    result["idle"] = driver.capture_info(stream)
    driver.begin_capture(stream, "thread_local")
    status, capture_id = driver.capture_info(stream)
    result["capturing"] = [status, capture_id > 0]
    driver.launch(axpy, (1, 1, 1), (16, 1, 1), stream, [("u32", 16), ("f32", 1.0), ("pointer", x), ("pointer", x)], 0)
    driver.memset_d32_async(x, 5, 16, stream)
    scratch = driver.mem_alloc_async(64, stream)
    driver.mem_free_async(scratch, stream)
    graph = driver.end_capture(stream)
    result["counts"] = driver.graph_node_counts(graph)
    result["after"] = driver.capture_info(stream)
    exec_ = driver.graph_instantiate(graph)
    driver.graph_upload(exec_, stream)
    driver.graph_launch(exec_, stream)
    driver.begin_capture(stream, "global")
    driver.launch(axpy, (1, 1, 1), (16, 1, 1), stream, [("u32", 16), ("f32", 3.0), ("pointer", x), ("pointer", x)], 0)
    driver.memset_d32_async(x, 6, 16, stream)
    driver.memset_d32_async(x, 6, 16, stream)
    driver.memset_d32_async(x, 6, 16, stream)
    same_shape = driver.end_capture(stream)
    driver.begin_capture(stream, "global")
    driver.memset_d32_async(x, 6, 16, stream)
    smaller = driver.end_capture(stream)
    result["update_same"] = driver.graph_exec_update(exec_, same_shape)
    result["update_smaller"] = driver.graph_exec_update(exec_, smaller)
    result["unmatched_end"] = refusal(driver.end_capture, stream)
    result["usable"] = driver.stream_query(stream)
    result["modes"] = [driver.exchange_capture_mode("relaxed"), driver.exchange_capture_mode("global")]
    result["param_sizes"] = refusal(driver.function_param_sizes, axpy)
    result["no_kernel"] = refusal(driver.module_get_function, module, "no_such_kernel")
    result["ptx"] = refusal(driver.module_load, "ptx", b"// ptx")
    result["cubin"] = refusal(driver.module_load, "cubin", b"\\x7fELF")
    result["empty"] = refusal(driver.module_load, "code_object", b"")
    other = driver.module_load("code_object", b"\\x7fELF-ish")
    driver.module_unload(other)
    for g in (graph, same_shape, smaller):
        driver.graph_destroy(g)
    driver.graph_exec_destroy(exec_)
    driver.close()
    """
    result = run_fake(fake_hip, body, FAKE_HIP_LOG=str(log))
    # Only the launch outside the capture reached the runtime, with its geometry and arguments.
    assert log.read_text().splitlines() == ["launch axpy_f32 3 16 48"]
    assert result["idle"] == [0, 0] and result["capturing"] == [1, True] and result["after"] == [0, 0]
    assert result["counts"] == [4, 1, 1]  # kernel, memset, memory alloc, memory free
    assert result["update_same"] == 0  # success
    assert result["update_smaller"] == 2  # topology changed: a verdict, not an error
    assert result["unmatched_end"] == [903, "hipStreamEndCapture"]
    assert result["usable"] is True
    assert result["modes"] == [0, 2]
    assert result["param_sizes"][1] == "hipFuncGetParamInfo"
    assert result["no_kernel"] == [500, "hipModuleGetFunction"]
    for kind in ("ptx", "cubin", "empty"):
        assert result[kind][1] == "hipModuleLoadData", kind
    assert result["ptx"][0] == result["cubin"][0] == result["empty"][0] == 200


def test_a_failing_hiprtc_compile_is_reported_with_its_log(fake_hip) -> None:
    body = """
    driver = _core._open_driver("hip")
    try:
        driver.module_load("builtin", b"")
    except lifecore.DriverError as error:
        result["error"] = [error.code, error.call, str(error)]
    driver.close()
    """
    result = run_fake(fake_hip, body, FAKE_HIPRTC_FAIL="1")
    code, call, text = result["error"]
    assert code == 200 and call == "hiprtcCompileProgram"
    assert "HIPRTC_ERROR_COMPILATION" in text and "the fake compiler refuses" in text


def test_without_a_libhiprtc_the_runtime_librarys_hiprtc_serves(fake_hip) -> None:
    # ROCm 5 has no libhiprtc: libamdhip64.so.5 exports hiprtc itself, as the fake does.
    import ctypes

    for name in ("libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        pytest.skip(f"{name} loads here, so the runtime library's hiprtc would not be used")
    body = """
    info = [b for b in lifecore.backends() if b.name == "hip"][0]
    result["reason"] = info.reason
    with lifecore.Device("hip") as dev:
        s = dev.stream()
        buf = s.alloc(64)
        s.launch(lifecore.kernels.scale_f32, 1, 16, [16, 2.0, buf, buf])
        s.sync()
        result["launched"] = True
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_HIP", "LIFECORE_LIBHIPRTC"))}
    environment["LIFECORE_LIBHIP"] = str(fake_hip)
    result = run_scenario(body, environment)
    assert "hiprtc" not in result["reason"] and result["launched"] is True


def test_the_runtime_runs_on_the_fake_hip_device(fake_hip) -> None:
    body = """
    with lifecore.Device("hip") as dev:
        s = dev.stream()
        buf = s.alloc(64)
        s.fill(buf, 0x01020304)
        result["filled"] = s.read(buf) == bytes([4, 3, 2, 1]) * 16
        graph = s.capture(lambda st: st.fill(buf, 9))
        result["graph"] = [graph.is_hardware, graph.node_count]
        graph.replay()
        s.sync()
        graph.destroy()
        result["backend"] = dev.backend
    """
    result = run_fake(fake_hip, body)
    assert result["filled"] is True
    assert result["graph"] == [True, 1]
    assert result["backend"] == "hip"


def test_the_device_of_a_pointer_and_a_record_on_a_native_stream(fake_hip) -> None:
    body = """
    driver = _core._open_driver("hip")
    ptr = driver.mem_alloc(64)
    result["ordinal"] = [driver.pointer_device(ptr), driver.pointer_device(ptr + 63)]
    driver.mem_free(ptr)
    result["freed"] = refusal(driver.pointer_device, ptr)
    event = driver.event_create()
    driver.event_record_native(event, 4096)  # another library's stream, as a native pointer
    driver.event_synchronize(event)
    driver.event_destroy(event)
    result["destroyed_event"] = refusal(driver.event_record_native, event, 4096)
    """
    result = run_fake(fake_hip, body, FAKE_HIP_POINTER_ORDINAL="2")
    assert result["ordinal"] == [2, 2]
    assert result["freed"] == [1, "hipPointerGetAttribute"]  # hipErrorInvalidValue: not device memory
    assert result["destroyed_event"] == [400, "hipEventRecord"]


def test_entry_points_are_asked_of_hip_get_proc_address_by_hips_version_number(fake_hip) -> None:
    # hipGetProcAddress counts versions as 100 * major + minor: lifecore asks for 601 (ROCm 6.1),
    # which a 6.1 runtime serves; an older one refuses it and the exports serve instead.
    body = """
    import ctypes, os
    served = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"]).fake_hip_proc_served
    served.restype = ctypes.c_long
    info = [b for b in lifecore.backends() if b.name == "hip"][0]
    result["available"] = info.available
    result["served"] = served()
    """
    current = run_fake(fake_hip, body)
    assert current["available"] is True and current["served"] > 0
    older = run_fake(fake_hip, body, FAKE_HIP_PROC_VERSION="600")
    assert older == {"available": True, "served": 0}


def test_cuda_default_stream_values_on_hip(fake_hip) -> None:
    # 1 (CUDA's legacy default stream) is HIP's null stream for a record and a wait alike; a
    # DLPack consumer on ROCm may not name 1 or 2, which the array API defines for CUDA only.
    body = """
    import ctypes, os
    fake = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"])
    for name in ("fake_hip_last_record_stream", "fake_hip_last_wait_stream"):
        getattr(fake, name).restype = ctypes.c_ulonglong
    driver = _core._open_driver("hip")
    event = driver.event_create(False)
    streams = {}
    for value in (1, 2, 4096):
        driver.event_record_native(event, value)
        driver.stream_wait_event(value, event)
        streams[value] = [fake.fake_hip_last_record_stream(), fake.fake_hip_last_wait_stream()]
    result["streams"] = streams
    driver.event_destroy(event)
    device = lifecore.Device("hip")
    s = device.stream()
    buf = s.alloc(64)
    refused = {}
    for value in (1, 2):
        try:
            buf.__dlpack__(stream=value)
            refused[value] = None
        except BufferError as error:
            refused[value] = str(error)
    result["refused"] = refused
    result["default"] = fake.fake_hip_last_wait_stream() if buf.__dlpack__(stream=None) is not None else None
    device.close()
    """
    result = run_fake(fake_hip, body)
    assert result["streams"] == {"1": [0, 0], "2": [2, 2], "4096": [4096, 4096]}
    for value in ("1", "2"):
        assert "not defined on ROCm" in result["refused"][value]
    assert result["default"] == 0


def test_only_a_profile_creates_events_with_timing_on_hip(fake_hip) -> None:
    # As on CUDA: events that only order work are created with hipEventDisableTiming.
    result = run_fake(fake_hip, timed_events_scenario("hip", "LIFECORE_LIBHIP", "fake_hip_timed_events"))
    assert result["read"] == list(range(16))
    assert result["ordering"] == 0
    assert result["profile"] == [2, 0.5]


def test_a_call_puts_back_the_device_the_thread_had_selected(fake_hip) -> None:
    # lifecore on device 1 of two; the thread had device 0 selected (another library's choice):
    # opening the device and each call select device 1 only for the call.
    body = """
    import ctypes, os
    lib = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"])
    get, put = lib.hipGetDevice, lib.hipSetDevice
    get.argtypes, put.argtypes = [ctypes.POINTER(ctypes.c_int)], [ctypes.c_int]
    def selected():
        device = ctypes.c_int(-1)
        get(ctypes.byref(device))
        return device.value
    put(0)
    dev = lifecore.Device("hip", 1)
    result["after_open"] = selected()
    s = dev.stream()
    buf = s.alloc(64)
    s.fill(buf, 7)
    s.sync()
    result["after_calls"] = selected()
    result["allocated_on"] = lib.fake_hip_malloc_devices()  # a mask of devices
    dev.close()
    result["after_close"] = selected()
    """
    result = run_fake(fake_hip, body, FAKE_HIP_DEVICES="2")
    # Memory landed on device 1 only: each call selected it for its duration.
    assert result == {"after_open": 0, "after_calls": 0, "allocated_on": 0b10, "after_close": 0}


def test_the_capture_state_of_a_native_stream(fake_hip) -> None:
    """hipStreamGetCaptureInfo on another library's stream (never one of lifecore's handles):
    none, active, invalidated, or the status the runtime returns."""
    body = """
    import ctypes, os
    fake = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"])
    fake.fake_hip_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    driver = _core._open_driver("hip")
    answers = []
    for answer in (0, 1, 2):
        fake.fake_hip_set_foreign_capture(4096, answer)
        answers.append(driver.stream_capture_status_native(4096))
    result["answers"] = answers
    result["null_stream"] = driver.stream_capture_status_native(1)
    fake.fake_hip_set_foreign_capture(4096, 906)
    result["implicit"] = refusal(driver.stream_capture_status_native, 4096)
    """
    result = run_fake(fake_hip, body)
    assert result["answers"] == [0, 1, 2]
    assert result["null_stream"] == 0
    assert result["implicit"] == [906, "hipStreamGetCaptureInfo"]


def test_a_device_collected_during_another_devices_recording_leaves_it_whole(fake_hip) -> None:
    # As on CUDA (test_backend_cuda_fake.py): the driver's teardown waits for its own streams
    # only, never for the whole device, where another Device's stream may be recording.
    modes = ("global", "relaxed")
    result = run_fake(fake_hip, collected_during_recording_scenario("hip", modes))
    assert result == {f"{where}, {mode}": 1 for where in ("another thread", "the recording thread") for mode in modes}


INVALIDATED_CAPTURE = """
import ctypes, os
fake = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"])
with lifecore.Device("hip", graphs="hardware") as dev:
    s = dev.stream()
    buf = s.alloc(64)
    s.graph_prepare()
    s.begin_capture()
    s.fill(buf, 1)
    fake.hipDeviceSynchronize()  # outside lifecore: the runtime invalidates the live capture
    try:
        s.end_capture()
        result["end"] = "sealed"
    except lifecore.CaptureRefusedError as error:
        result["end"] = [error.cause, "invalidated" in str(error)]
    result["after_end"] = [s.capture_state.variant.name, s.driver_capturing]
    status = ctypes.c_int(-1)
    ident = ctypes.c_ulonglong(0)
    fake.hipStreamGetCaptureInfo(ctypes.c_void_p(s.handle), ctypes.byref(status), ctypes.byref(ident))
    result["native"] = status.value
    if s.driver_capturing:
        try:
            s.abort_capture()
        except lifecore.DriverError as error:
            result["abort"] = "still capturing" if s.driver_capturing else "ended"
    else:
        s.fill(buf, 0x01020304)
        result["filled"] = s.read(buf) == bytes([4, 3, 2, 1]) * 16
        graph = s.capture(lambda st: st.fill(buf, 9))
        graph.replay()
        result["replayed"] = s.read(buf) == bytes([9, 0, 0, 0]) * 16
"""


@pytest.mark.parametrize("rocm", ["ends it", "leaves it invalidated"])
def test_an_invalidated_capture_leaves_the_stream_usable(fake_hip, rocm) -> None:
    # ROCm before 7.0 refuses the end of an invalidated capture without ending it (the stream
    # stays invalidated, and every call on it fails with 901); the backend ends it by hand.
    env = {} if rocm == "ends it" else {"FAKE_HIP_INVALIDATED_STAYS": "1"}
    result = run_fake(fake_hip, INVALIDATED_CAPTURE, **env)
    assert result["end"] == ["invalidated", True]
    assert result["after_end"] == ["NO_CAPTURE", False]
    assert result["native"] == 0  # the runtime agrees: out of capture
    assert result["filled"] is True and result["replayed"] is True


def test_a_stream_rocm_keeps_invalidated_is_reported_in_capture(fake_hip) -> None:
    # Where even the hand-made end cannot take the stream out of capture, the stream never says
    # NO_CAPTURE while the runtime says otherwise: it stays in CAPTURE, driver_capturing.
    result = run_fake(fake_hip, INVALIDATED_CAPTURE, FAKE_HIP_INVALIDATED_STAYS="2")
    assert result["end"][0] == "driver_still_capturing"
    assert result["after_end"] == ["CAPTURE", True]
    assert result["native"] == 2
    assert result["abort"] == "still capturing"


SYMBOL_COPIES = """
import ctypes, os
hip = ctypes.CDLL(os.environ["LIFECORE_LIBHIP"])
driver = _core._open_driver("hip")
stream = driver.stream_create()
native = ctypes.c_void_p(driver.stream_native_handle(stream))
module = driver.module_load("builtin", b"")
axpy = driver.module_get_function(module, "axpy_f32")
x, symbol = driver.mem_alloc(64), driver.mem_alloc(64)
driver.begin_capture(stream, "thread_local")
driver.launch(axpy, (1, 1, 1), (16, 1, 1), stream, [("u32", 16), ("f32", 1.0), ("pointer", x), ("pointer", x)], 0)
# another library's copies to and from a kernel's global, captured with lifecore's work
hip.hipMemcpyToSymbolAsync(ctypes.c_void_p(symbol), ctypes.c_void_p(x), ctypes.c_size_t(16), ctypes.c_size_t(0), 1, native)
hip.hipMemcpyFromSymbolAsync(ctypes.c_void_p(x), ctypes.c_void_p(symbol), ctypes.c_size_t(16), ctypes.c_size_t(0), 2, native)
driver.memset_d32_async(x, 5, 16, stream)
graph = driver.end_capture(stream)
result["counts"] = driver.graph_node_counts(graph)
driver.graph_destroy(graph)
driver.close()

device = lifecore.Device("hip")
s = device.stream()
buf = s.alloc(64)
def step(st):
    st.fill(buf, 9)
    hip.hipMemcpyToSymbolAsync(ctypes.c_void_p(int(buf.ptr)), ctypes.c_void_p(int(buf.ptr)), ctypes.c_size_t(16),
                               ctypes.c_size_t(0), 1, ctypes.c_void_p(st.handle))
graph = s.capture(step)
result["sealed"] = graph.node_count
device.close()
"""


@pytest.mark.parametrize("runtime", ["with graph memory nodes", "before graph memory nodes"])
def test_symbol_copies_are_never_read_as_memory_nodes(tmp_path_factory, fake_hip, runtime) -> None:
    # Before graph memory nodes, HIP counted node types from 1: its symbol copies were 10 and 11,
    # the numbers MemAlloc and MemFree have had since. Read with today's numbers, another
    # library's captured symbol copy made a capture refused as holding memory nodes.
    library = fake_hip if runtime == "with graph memory nodes" else build_fake_library(
        tmp_path_factory, "fake_libamdhip64.c", "fake HIP runtime", ("FAKE_HIP_BEFORE_GRAPH_MEMORY",))
    result = run_fake(library, SYMBOL_COPIES)
    assert result["counts"] == [4, 0, 0]  # kernel, two symbol copies, memset; no memory node
    assert result["sealed"] == 2


def test_the_null_streams_capture_state_on_a_runtime_that_cannot_tell_it(tmp_path_factory) -> None:
    # ROCm 5.2's hipStreamGetCaptureInfo answers hipErrorUnknown (999) for the null stream:
    # every use of the default stream as another library's (a plain __dlpack__() on ROCm) failed
    # with it. Its hipStreamIsCapturing answers for the null stream, and is asked instead.
    library = build_fake_library(tmp_path_factory, "fake_libamdhip64.c", "fake HIP runtime",
                                 ("FAKE_HIP_BEFORE_GRAPH_MEMORY",))
    body = """
    driver = _core._open_driver("hip")
    result["null_stream"] = [driver.stream_capture_status_native(0), driver.stream_capture_status_native(1)]
    stream = driver.stream_create()
    driver.begin_capture(stream, "relaxed")
    result["capturing"] = driver.stream_capture_status_native(driver.stream_native_handle(stream))
    driver.graph_destroy(driver.end_capture(stream))
    driver.close()
    """
    result = run_fake(library, body)
    assert result["null_stream"] == [0, 0]
    assert result["capturing"] == 1  # another stream is still asked through hipStreamGetCaptureInfo
