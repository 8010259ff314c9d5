"""Every CUDA driver operation refuses a handle it did not hand out, before calling the driver.

Without a GPU, the fake driver library (tests/fake_driver/fake_libcuda.c, compiled here) stands
in for libcuda.so.1 through LIFECORE_LIBCUDA, in a subprocess (the driver loads once per
process). For each handle kind (stream, event, module, function, graph, executable graph), an
unknown and a destroyed handle get CUDA_ERROR_INVALID_HANDLE (400) naming the driver call, the
call changes nothing (the live objects still work), and the same operation with a live handle
does its work. Reaching the driver with a handle it never saw would pass it garbage. An
allocation already freed (at once or in stream order) is refused the same way.
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


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    library = tmp_path_factory.mktemp("fake_cuda_handles") / "libfakecuda.so"
    built = subprocess.run([compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-O1", "-o", str(library),
                            str(FAKE_SOURCE)], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"the fake CUDA driver did not compile: {built.stderr.strip()[:400]}")
    return library


PRELUDE = """
import json, struct, lifecore
from lifecore import _core
result = {}
driver = _core._open_vendor_driver("cuda")

def refusal(call, *args):
    try:
        call(*args)
    except lifecore.DriverError as error:
        return [error.code, error.call]
    return None

UNKNOWN = 0x5151
"""


def run_fake(library: Path, body: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment["LIFECORE_LIBCUDA"] = str(library)
    code = PRELUDE + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, f"scenario crashed ({done.returncode}): {done.stderr[-2000:]}"
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


def test_unknown_and_destroyed_handles_are_refused_by_every_operation(fake_libcuda) -> None:
    body = """
    stream = driver.stream_create()
    gone_stream = driver.stream_create()
    driver.stream_destroy(gone_stream)
    event = driver.event_create()
    gone_event = driver.event_create()
    driver.event_destroy(gone_event)
    module = driver.module_load("builtin", b"")
    function = driver.module_get_function(module, "axpy_f32")
    gone_module = driver.module_load("builtin", b"")
    driver.module_unload(gone_module)
    x = driver.mem_alloc(16)
    y = driver.mem_alloc(16)
    driver.memcpy_htod(x, struct.pack("4I", 1, 2, 3, 4))
    args = [("u32", 4), ("f32", 2.0), ("pointer", x), ("pointer", y)]
    driver.begin_capture(stream, "relaxed")
    driver.launch(function, (1, 1, 1), (4, 1, 1), stream, args, 0)
    graph = driver.end_capture(stream)
    exec_ = driver.graph_instantiate(graph)
    driver.begin_capture(stream, "relaxed")
    driver.launch(function, (1, 1, 1), (4, 1, 1), stream, args, 0)
    other_graph = driver.end_capture(stream)
    gone_exec = driver.graph_instantiate(other_graph)
    driver.graph_exec_destroy(gone_exec)
    driver.graph_destroy(other_graph)

    cases = {}
    for label, bad_stream in (("unknown", UNKNOWN), ("destroyed", gone_stream)):
        cases[f"stream_synchronize {label}"] = refusal(driver.stream_synchronize, bad_stream)
        cases[f"stream_query {label}"] = refusal(driver.stream_query, bad_stream)
        cases[f"stream_destroy {label}"] = refusal(driver.stream_destroy, bad_stream)
        cases[f"event_record {label} stream"] = refusal(driver.event_record, event, bad_stream)
        cases[f"mem_alloc_async {label}"] = refusal(driver.mem_alloc_async, 16, bad_stream)
        cases[f"mem_free_async {label}"] = refusal(driver.mem_free_async, y, bad_stream)
        cases[f"memset_d32_async {label}"] = refusal(driver.memset_d32_async, x, 9, 4, bad_stream)
        cases[f"launch {label} stream"] = refusal(driver.launch, function, (1, 1, 1), (4, 1, 1), bad_stream, args, 0)
        cases[f"begin_capture {label}"] = refusal(driver.begin_capture, bad_stream, "relaxed")
        cases[f"end_capture {label}"] = refusal(driver.end_capture, bad_stream)
        cases[f"capture_info {label}"] = refusal(driver.capture_info, bad_stream)
        cases[f"graph_launch {label} stream"] = refusal(driver.graph_launch, exec_, bad_stream)
        cases[f"graph_upload {label} stream"] = refusal(driver.graph_upload, exec_, bad_stream)
    for label, bad_event in (("unknown", UNKNOWN), ("destroyed", gone_event)):
        cases[f"event_record {label}"] = refusal(driver.event_record, bad_event, stream)
        cases[f"event_synchronize {label}"] = refusal(driver.event_synchronize, bad_event)
        cases[f"event_destroy {label}"] = refusal(driver.event_destroy, bad_event)
        cases[f"event_elapsed {label} first"] = refusal(driver.event_elapsed, bad_event, event)
        cases[f"event_elapsed {label} second"] = refusal(driver.event_elapsed, event, bad_event)
    for label, bad_module in (("unknown", UNKNOWN), ("destroyed", gone_module)):
        cases[f"module_get_function {label}"] = refusal(driver.module_get_function, bad_module, "axpy_f32")
        cases[f"module_unload {label}"] = refusal(driver.module_unload, bad_module)
    cases["launch unknown function"] = refusal(driver.launch, UNKNOWN, (1, 1, 1), (4, 1, 1), stream, args, 0)
    cases["function_param_sizes unknown"] = refusal(driver.function_param_sizes, UNKNOWN)
    for label, bad_graph in (("unknown", UNKNOWN), ("destroyed", other_graph)):
        cases[f"graph_instantiate {label}"] = refusal(driver.graph_instantiate, bad_graph)
        cases[f"graph_node_counts {label}"] = refusal(driver.graph_node_counts, bad_graph)
        cases[f"graph_destroy {label}"] = refusal(driver.graph_destroy, bad_graph)
        cases[f"graph_exec_update {label} graph"] = refusal(driver.graph_exec_update, exec_, bad_graph)
    for label, bad_exec in (("unknown", UNKNOWN), ("destroyed", gone_exec)):
        cases[f"graph_launch {label}"] = refusal(driver.graph_launch, bad_exec, stream)
        cases[f"graph_upload {label}"] = refusal(driver.graph_upload, bad_exec, stream)
        cases[f"graph_exec_update {label}"] = refusal(driver.graph_exec_update, bad_exec, graph)
        cases[f"graph_exec_destroy {label}"] = refusal(driver.graph_exec_destroy, bad_exec)
    result["cases"] = cases

    # Nothing changed: every live object still works, and does its work.
    driver.memset_d32_async(y, 7, 4, stream)
    driver.stream_synchronize(stream)
    result["memset"] = list(struct.unpack("4I", driver.memcpy_dtoh(y, 16)))
    driver.event_record(event, stream)
    driver.event_synchronize(event)
    result["capture_info"] = driver.capture_info(stream)
    result["counts"] = driver.graph_node_counts(graph)
    driver.graph_upload(exec_, stream)
    driver.graph_launch(exec_, stream)
    driver.stream_synchronize(stream)
    result["sizes"] = driver.function_param_sizes(function)
    driver.graph_exec_destroy(exec_)
    driver.graph_destroy(graph)
    driver.event_destroy(event)
    driver.module_unload(module)
    driver.stream_destroy(stream)
    result["closed"] = refusal(driver.stream_synchronize, stream)
    # An allocation freed (synchronously or in stream order) is not live any more.
    other = driver.stream_create()
    a = driver.mem_alloc(16)
    driver.mem_free_async(a, other)
    result["free_async_twice"] = refusal(driver.mem_free_async, a, other)
    result["free_after_free_async"] = refusal(driver.mem_free, a)
    b = driver.mem_alloc(16)
    driver.mem_free(b)
    result["free_async_after_free"] = refusal(driver.mem_free_async, b, other)
    result["free_unknown"] = refusal(driver.mem_free, 0x5100)
    driver.close()
    """
    result = run_fake(fake_libcuda, body)
    cases = result["cases"]
    not_refused = {name: got for name, got in cases.items() if got is None or got[0] != 400}
    assert not_refused == {}
    unnamed = {name: got for name, got in cases.items() if not got[1].startswith("cu")}
    assert unnamed == {}
    assert result["memset"] == [7, 7, 7, 7]
    assert result["capture_info"] == [0, 0]
    assert result["counts"][0] == 1
    assert result["sizes"] == [4, 4, 8, 8]
    assert result["closed"] == [400, "cuStreamSynchronize"]
    assert result["free_async_twice"] == [1, "cuMemFreeAsync"]
    assert result["free_after_free_async"][0] == 1
    assert result["free_async_after_free"] == [1, "cuMemFreeAsync"]
    assert result["free_unknown"][0] == 1
