"""Rules of the CUDA backend that an independent mutation sample found unpinned, tested against the
fake CUDA driver (tests/fake_driver/fake_libcuda.c) in a fresh interpreter per scenario, because a
vendor library loads once per process.
"""

from __future__ import annotations

from driver_scenarios import collected_during_recording_scenario, run_with_fake_cuda as run_fake


def test_a_failing_cudevice_get_fails_the_open_with_the_call_and_code(fake_libcuda) -> None:
    # The probe still sees a device (cuDeviceGetCount), so only opening it meets the failure.
    body = """
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    result["available"] = info.available
    try:
        lifecore.Device("cuda")
        result["open"] = "opened"
    except lifecore.DriverError as error:
        result["open"] = [error.code, error.call]
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_DEVICE_GET="101")
    assert result["available"] is True
    assert result["open"] == [101, "cuDeviceGet"]


def test_a_contained_error_loses_the_device(fake_libcuda) -> None:
    # cuda.h: CUDA_ERROR_CONTAINED (226) leaves the process unable to do further CUDA work.
    body = """
    device = lifecore.Device("cuda")
    s = device.stream()
    try:
        s.sync()
        result["sync"] = "synchronized"
    except lifecore.DeviceLostError as error:
        result["sync"] = [error.code, error.status, error.call]
    result["lost"] = device.lost
    try:
        device.stream()
        result["after"] = "opened a stream"
    except lifecore.DeviceLostError as error:
        result["after"] = "lost"
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_SYNC="226")
    assert result["sync"] == [226, "CUDA_ERROR_CONTAINED", "cuStreamSynchronize"]
    assert result["lost"] is True and result["after"] == "lost"


def test_every_profile_destroys_both_of_its_events(fake_libcuda) -> None:
    body = """
    import ctypes, os
    live = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"]).fake_cuda_live_events
    live.restype = ctypes.c_long
    device = lifecore.Device("cuda")
    s = device.stream()
    s.sync()
    before = live()
    with s.profile() as p:  # stopped by the with
        pass
    result["stopped"] = p.elapsed_ms is not None
    result["after_stop"] = live() - before
    try:
        with s.profile():
            raise KeyError("work failed")  # stopped on the way out
    except KeyError:
        pass
    result["after_exception"] = live() - before
    q = s.profile()
    result["while_live"] = live() - before
    del q  # never stopped: abandoned
    import gc; gc.collect()
    result["after_abandon"] = live() - before
    s.sync()
    device.close()
    """
    result = run_fake(fake_libcuda, body)
    assert result["stopped"] is True
    assert result["while_live"] == 2  # a start and an end event
    assert result["after_stop"] == 0
    assert result["after_exception"] == 0
    assert result["after_abandon"] == 0


def test_only_a_profile_creates_events_with_timing(fake_libcuda) -> None:
    # Events that only order work (a host wait for an upload, a view's consumer stream, the
    # release queue) are created without timing: the driver records them more cheaply.
    from driver_scenarios import timed_events_scenario

    result = run_fake(fake_libcuda, timed_events_scenario("cuda", "LIFECORE_LIBCUDA", "fake_cuda_timed_events"))
    assert result["read"] == list(range(16))
    assert result["ordering"] == 0
    assert result["profile"] == [2, 0.5]  # a start and an end event, timed


def test_a_sticky_status_from_any_device_call_loses_the_device(fake_libcuda) -> None:
    # Each call fails once with CUDA_ERROR_LAUNCH_FAILED (719, sticky): the DeviceLostError says
    # every later call is refused, so the device must say it is lost and refuse the next call.
    body = """
    import os
    from lifecore import kernels as K
    ptx = '.version 8.0\\n.target sm_80\\n.address_size 64\\n.visible .entry fill_u32(.param .u32 n) { ret; }'
    def one(entry, make, act):
        device = lifecore.Device("cuda")
        subject = make(device)
        os.environ["FAKE_CUDA_FAIL"] = entry + "=719"
        try:
            act(device, subject)
            raised = "nothing"
        except lifecore.LifecoreError as error:
            raised = type(error).__name__
        finally:
            os.environ["FAKE_CUDA_FAIL"] = ""
        try:
            device.stream()
            after = "a stream opened"
        except lifecore.DeviceLostError:
            after = "refused"
        report = [raised, device.lost, after]
        device.close()
        return report
    def first_launch(device, stream):
        stream.launch(K.scale_f32, 1, 64, [64, 2.0, stream.alloc(256), stream.alloc(256)])
    result["stream"] = one("cuStreamCreate", lambda d: None, lambda d, _: d.stream())
    result["builtin module"] = one("cuModuleLoadDataEx", lambda d: d.stream(), first_launch)
    result["builtin function"] = one("cuModuleGetFunction", lambda d: d.stream(), first_launch)
    result["user module"] = one("cuModuleLoadDataEx", lambda d: None, lambda d, _: lifecore.Module.from_ptx(d, ptx))
    result["user function"] = one("cuModuleGetFunction", lambda d: lifecore.Module.from_ptx(d, ptx),
                                  lambda d, m: m.function("fill_u32"))
    result["parameter sizes"] = one("cuFuncGetParamInfo", lambda d: lifecore.Module.from_ptx(d, ptx),
                                    lambda d, m: m.function("fill_u32"))
    """
    result = run_fake(fake_libcuda, body)
    for case, report in result.items():
        assert report == ["DeviceLostError", True, "refused"], (case, report)


def test_a_driver_dropped_where_its_context_cannot_be_made_current_still_releases_it(fake_libcuda) -> None:
    # The last reference goes on a thread whose context cannot be set (the driver refuses
    # cuCtxSetCurrent there): the primary context's reference must still be given back, or the
    # driver keeps the context (and its memory) for the rest of the process.
    body = """
    import ctypes, gc, os, threading
    retains = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"]).fake_cuda_primary_retains
    retains.restype = ctypes.c_long
    driver = _core._open_driver("cuda")
    result["open"] = retains()
    os.environ["FAKE_CUDA_FAIL"] = "cuCtxSetCurrent=999"
    holder = [driver]
    del driver
    def drop():
        holder.clear()
        gc.collect()
    worker = threading.Thread(target=drop)
    worker.start()
    worker.join()
    os.environ["FAKE_CUDA_FAIL"] = ""
    result["dropped"] = retains()
    """
    result = run_fake(fake_libcuda, body)
    assert result == {"open": 1, "dropped": 0}


def test_a_call_puts_back_the_context_the_thread_had_current(fake_libcuda) -> None:
    # Another library on the thread (torch, CuPy, perhaps on another device) chose its current
    # context; lifecore makes its own current for each call and then puts that one back, none
    # included, so the other library's next call still runs where it chose.
    body = """
    import ctypes, os
    import numpy as np
    lib = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    get, put = lib.fake_cuda_current_context, lib.fake_cuda_make_current
    get.restype, put.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    def current():
        return get() or 0
    theirs = 0x5EED000
    seen = {}
    for name, mine in (("theirs", theirs), ("none", 0)):
        put(mine or None)
        dev = lifecore.Device("cuda")
        s = dev.stream()
        buf = s.alloc(64)
        s.write(buf, bytes(64))
        s.fill(buf, 7)
        graph = s.capture(lambda st: st.fill(buf, 9))
        graph.replay()
        data = s.read(buf)
        graph.destroy()
        dev.close()
        seen[name] = [current() == mine, data[:4] == bytes([9, 0, 0, 0])]
    result["seen"] = seen
    """
    result = run_fake(fake_libcuda, body)
    assert result["seen"] == {"theirs": [True, True], "none": [True, True]}


def test_a_device_collected_during_another_devices_recording_leaves_it_whole(fake_libcuda) -> None:
    # Devices on one GPU share its primary context. Seen on an H200: a global-mode recording was
    # invalidated when Python collected an earlier Device during it, because the driver's
    # teardown synchronized the whole context (illegal while any capture in it is live, in any
    # mode) and freed outside relaxed mode. The teardown waits for its own streams only, in
    # relaxed mode; a collection can run on any thread, the recording one included.
    modes = ("global", "thread_local", "relaxed")
    result = run_fake(fake_libcuda, collected_during_recording_scenario("cuda", modes))
    assert result == {f"{where}, {mode}": 1 for where in ("another thread", "the recording thread") for mode in modes}
