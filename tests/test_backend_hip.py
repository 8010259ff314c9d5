"""The HIP backend below the runtime.

Where a HIP runtime library is installed but no AMD GPU is present (Debian's libamdhip64-5
on CI), the loader must resolve its whole symbol table and report "no device" cleanly. With a
real HIP device, the last test runs copies, capture and (with hiprtc) the built-in kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

import lifecore
from lifecore import _core

from backend_roles import EMULATED, unavailable

# Entry points the backend can run without (each disables one operation or is a no-op).
OPTIONAL = {"hipRuntimeGetVersion", "hipMallocAsync", "hipFreeAsync", "hipGraphInstantiateWithFlags",
            "hipGraphUpload", "hipGraphExecUpdate", "hipPointerGetAttribute", "hipGraphAddMemAllocNode",
            "hipStreamIsCapturing"}


def hip_info():
    return [b for b in lifecore.backends() if b.name == "hip"][0]


@pytest.fixture(scope="module")
def hip_library():
    info = hip_info()
    if not info.library:
        pytest.skip(f"no HIP runtime library here: {info.reason}")
    return info


def test_the_hip_runtime_resolves_every_required_entry_point(hip_library):
    symbols = _core._probe_symbols("hip")
    assert len(symbols) >= 50
    missing_required = sorted(name for name, resolved in symbols.items() if not resolved and name not in OPTIONAL)
    assert missing_required == []
    # The graph API the capture lifecycle needs resolves even on ROCm 5.2.
    for name in ("hipStreamBeginCapture", "hipStreamEndCapture", "hipGraphGetNodes", "hipGraphNodeGetType",
                 "hipGraphInstantiate", "hipGraphLaunch", "hipGraphExecDestroy", "hipThreadExchangeStreamCaptureMode"):
        assert symbols[name], name


def test_no_device_is_reported_cleanly(hip_library):
    info = hip_library
    if info.available:
        pytest.skip(f"a HIP device is present: {info.device_name}")
    assert info.reason.startswith("no HIP device"), info.reason
    assert "hipGetDeviceCount" in info.reason and "hipErrorNoDevice" in info.reason
    assert info.device_count == 0
    assert info.driver_version > 0  # hipDriverGetVersion works without a device
    with pytest.raises(lifecore.BackendUnavailableError) as raised:
        _core._open_driver_probe("hip")
    assert str(raised.value) == "hip: " + info.reason


def test_probing_is_cached_and_thread_safe(hip_library):
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(repr(hip_info()))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and len(seen) == 8


def test_a_hip_override_that_does_not_load_is_a_reason(tmp_path):
    code = ("import lifecore; from lifecore import _core; i=[b for b in lifecore.backends() if b.name=='hip'][0];"
            "print(i.available, '|', i.reason, '|', len(_core._probe_symbols('hip')))")
    env = dict(os.environ, LIFECORE_LIBHIP=str(tmp_path / "libamdhip64_missing.so"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    available, reason, count = (part.strip() for part in out.stdout.split("|"))
    assert available == "False" and "LIFECORE_LIBHIP" in reason and "libamdhip64_missing.so" in reason
    assert count == "0"


def test_the_symbol_table_introspection_rejects_other_backends():
    with pytest.raises(lifecore.InvalidArgumentError):
        _core._probe_symbols(EMULATED)


def test_hip_on_a_device():
    info = hip_info()
    if not info.available:
        unavailable("hip", f"no HIP device: {info.reason}")
    import struct

    driver = _core._open_driver("hip")
    stream = driver.stream_create()
    assert driver.stream_native_handle(stream) == stream
    pointer = driver.mem_alloc(64)
    driver.memset_d32(pointer, 5, 16)
    assert struct.unpack("16I", driver.memcpy_dtoh(pointer, 64)) == (5,) * 16
    with pytest.raises(lifecore.DriverError) as raised:
        driver.module_load("ptx", b".version 7.0")
    assert raised.value.status == "hipErrorInvalidImage"
    available, reason = driver.builtin_kernels_available()
    if available:
        module = driver.module_load("builtin")
        axpy = driver.module_get_function(module, "axpy_f32")
        other = driver.mem_alloc(64)
        driver.memset_d32(other, 0x3F800000, 16)  # 1.0f
        driver.begin_capture(stream, "global")
        driver.launch(axpy, (1, 1, 1), (16, 1, 1), stream, [("u32", 16), ("f32", 2.0), ("pointer", other), ("pointer", other)])
        graph = driver.end_capture(stream)
        assert driver.graph_node_counts(graph)[1:] == (0, 0)
        exec_ = driver.graph_instantiate(graph)
        driver.graph_launch(exec_, stream)
        driver.stream_synchronize(stream)
        assert struct.unpack("16f", driver.memcpy_dtoh(other, 64)) == (3.0,) * 16
        driver.graph_exec_destroy(exec_)
        driver.graph_destroy(graph)
    else:
        assert "hiprtc" in reason
    driver.close()
