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

from driver_scenarios import run_with_fake_cuda as run_fake


def test_unknown_and_destroyed_handles_are_refused_by_every_operation(fake_libcuda) -> None:
    body = """
    driver = _core._open_driver("cuda")
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

    # The shared cases, then the ones only this backend has.
    cases = handle_refusal_cases(driver, stream=stream, gone_stream=gone_stream, event=event, gone_event=gone_event,
                                 function=function, gone_module=gone_module, graph=graph,
                                 gone_graph=other_graph, exec_=exec_, gone_exec=gone_exec, args=args, ptr=x,
                                 async_ptr=y)
    cases["launch unknown function"] = refusal(driver.launch, UNKNOWN, (1, 1, 1), (4, 1, 1), stream, args, 0)
    cases["function_param_sizes unknown"] = refusal(driver.function_param_sizes, UNKNOWN)
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
