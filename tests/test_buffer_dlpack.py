"""Buffers as tensors: DLPack export (numpy, torch), typed views, read_into and write from any
buffer-protocol object, and what happens to a view when its buffer is freed, its device
closes or its stream opens a capture window.

The mock's memory is host memory, exported as CPU memory: every view here is a zero-copy view
of the mock device's bytes, which the tests prove by writing through one side and reading
through the other.
"""

from __future__ import annotations

import gc
import re
import threading
import time
import warnings

import numpy as np
import pytest

import lifecore
from lifecore import CaptureStateError, ClosedError, DriverError, InvalidArgumentError, LifecoreError
from lifecore import kernels as K
from lifecore.models.stream_capture import VIEW_DRIVER_OPERATIONS

from backend_roles import EMULATED
from numpy_views import BOOL_VIEWS, WRITABLE_VIEWS, needs_writable_views

N = 16
DLPACK_CPU = 1


@pytest.fixture
def dev():
    with lifecore.Device(EMULATED) as device:
        yield device


def arange(s, n: int = N):
    buf = s.alloc(4 * n)
    s.write(buf, np.arange(n, dtype=np.float32))
    return buf


def f32(s, buf) -> np.ndarray:
    return np.frombuffer(s.read(buf), np.float32)


# ---- DLPack -----------------------------------------------------------------------------


def test_the_mock_exports_cpu_memory_as_the_registry_says(dev) -> None:
    buf = dev.stream().alloc(64)
    assert lifecore.backend_info(EMULATED).dlpack_device_type == DLPACK_CPU
    assert buf.__dlpack_device__() == (DLPACK_CPU, 0)
    assert buf.view("float32").__dlpack_device__() == (DLPACK_CPU, 0)
    with lifecore.Device(EMULATED, ordinal=1) as other:  # the host is CPU device 0 whatever the ordinal
        assert other.stream().alloc(8).__dlpack_device__() == (DLPACK_CPU, 0)


@needs_writable_views
def test_numpy_view_is_zero_copy_both_ways(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    a = np.from_dlpack(buf.view("float32", (4, 4)))
    assert a.shape == (4, 4) and a.dtype == np.float32
    assert a.flags.writeable  # a versioned capsule without the read-only flag
    np.testing.assert_array_equal(a.ravel(), np.arange(N, dtype=np.float32))
    a[1, 2] = 42.0  # through the view ...
    assert f32(s, buf)[6] == 42.0  # ... read through the buffer
    s.write(buf, np.full(N, 3.0, np.float32))  # through the buffer ...
    s.sync()
    assert (a == 3.0).all()  # ... read through the view
    s.fill(buf, 0)
    s.sync()
    assert (a == 0).all()


def test_torch_view_is_zero_copy_both_ways(dev) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    s = dev.stream()
    buf = arange(s)
    t = torch.from_dlpack(buf.view(torch.float32))
    assert t.device.type == "cpu" and t.dtype == torch.float32 and tuple(t.shape) == (N,)
    assert t.data_ptr() == np.from_dlpack(buf).ctypes.data  # the same bytes, no copy
    t[0] = -1.0
    assert f32(s, buf)[0] == -1.0
    s.launch(K.scale_f32, 1, 64, [N, 2.0, buf, buf])
    s.sync()
    assert t[1].item() == 2.0 and t[0].item() == -2.0


def test_a_whole_buffer_exports_bytes(dev) -> None:
    s = dev.stream()
    buf = s.alloc(8)
    s.write(buf, bytes(range(8)))
    a = np.from_dlpack(buf)
    assert a.dtype == np.uint8 and a.shape == (8,)
    assert bytes(a) == bytes(range(8))


def test_export_waits_for_the_buffers_stream(dev) -> None:
    s = dev.stream()
    buf = s.alloc(4 * N)
    dev._pause_streams_for(0.2)  # the fill stays queued for a while
    s.fill(buf, 0x40400000)  # 3.0f
    a = np.from_dlpack(buf.view("float32"))  # a CPU export is host-ready: the stream was waited for
    assert (a == 3.0).all()


@pytest.mark.parametrize(
    "dtype, bits",
    [("uint8", 8), ("int8", 8), ("int16", 16), ("uint16", 16), ("int32", 32), ("uint32", 32),
     ("int64", 64), ("uint64", 64), ("float16", 16), ("float32", 32), ("float64", 64), ("bool", 8)],
)
def test_typed_views_by_name_and_by_numpy_dtype(dev, dtype: str, bits: int) -> None:
    buf = dev.stream().alloc(64)
    for spec in (dtype, np.dtype(dtype), np.dtype(dtype).type):
        view = buf.view(spec)
        assert view.dtype == dtype
        assert view.shape == (64 * 8 // bits,)
        if dtype != "bool" or BOOL_VIEWS:  # NumPy before 1.25 imports no DLPack bool
            assert np.from_dlpack(view).dtype == np.dtype(dtype)


def test_bfloat16_and_torch_dtypes(dev) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    buf = dev.stream().alloc(16)
    assert torch.from_dlpack(buf.view(torch.bfloat16)).dtype == torch.bfloat16
    assert torch.from_dlpack(buf.view(torch.int64, (2, 1))).shape == (2, 1)


def test_versioned_and_legacy_capsules(dev) -> None:
    buf = dev.stream().alloc(16)
    assert "dltensor_versioned" in repr(buf.__dlpack__(max_version=(1, 0)))
    assert '"dltensor"' in repr(buf.__dlpack__())
    assert '"dltensor"' in repr(buf.__dlpack__(max_version=(0, 8)))
    gc.collect()
    assert buf.views == 0  # an unconsumed capsule deletes its tensor (and its lease) once


def test_dlpack_refusals(dev) -> None:
    buf = dev.stream().alloc(16)
    with pytest.raises(BufferError, match="copy"):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="another device"):
        buf.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream must be None"):
        buf.__dlpack__(stream=5)
    buf.__dlpack__(copy=False, dl_device=(DLPACK_CPU, 0), stream=-1)
    gc.collect()
    assert buf.views == 0


def test_a_stream_beyond_64_bits_or_a_copy_flag_that_is_not_a_bool_is_a_clear_refusal(dev) -> None:
    # An int that does not fit 64 bits once passed the CPU export's "None or -1" check as -1
    # with Python's OverflowError still set, and the call ended in a SystemError.
    s = dev.stream()
    buf = arange(s)
    for stream in (2**64, 2**63, -(2**70)):
        with pytest.raises(BufferError, match="stream must be None"):
            buf.__dlpack__(stream=stream)

    class NoTruth:
        def __bool__(self) -> bool:
            raise ValueError("no truth value")

    # The protocol's copy is True, False or None: anything else is refused without asking it
    # for a truth value (an array's raised NumPy's "truth value is ambiguous").
    for copy in (NoTruth(), np.zeros(3), 1):
        with pytest.raises(BufferError, match="copy must be True, False or None"):
            buf.__dlpack__(copy=copy)
    gc.collect()
    assert buf.views == 0
    np.testing.assert_array_equal(np.from_dlpack(buf.view("float32")), np.arange(N, dtype=np.float32))


def test_the_cuda_array_interface_is_only_where_the_registry_offers_it(dev) -> None:
    buf = dev.stream().alloc(16)
    assert not lifecore.backend_info(EMULATED).cuda_array_interface
    assert not hasattr(buf, "__cuda_array_interface__")
    assert not hasattr(buf.view("float32"), "__cuda_array_interface__")


# ---- bad views --------------------------------------------------------------------------


def test_bad_views_are_refused(dev) -> None:
    buf = dev.stream().alloc(12)
    with pytest.raises(InvalidArgumentError, match="unsupported dtype"):
        buf.view("complex64")
    with pytest.raises(InvalidArgumentError, match="whole number"):
        buf.view("float64")  # 12 bytes
    with pytest.raises(InvalidArgumentError, match="covers 8 bytes"):
        buf.view("float32", (2,))
    with pytest.raises(InvalidArgumentError, match="negative"):
        buf.view("float32", (-1, -3))
    with pytest.raises(InvalidArgumentError, match="more than"):
        buf.view("uint8", (2**40, 2**40))
    assert buf.view("float32", (3, 1)).shape == (3, 1)
    assert buf.views == 0  # a view object takes its lease only at export


def test_a_views_repr_is_balanced(dev) -> None:
    buf = dev.stream().alloc(16)
    assert repr(buf.view("float32")) == "BufferView(dtype=float32, shape=(4,))"
    assert repr(buf.view("float32", (2, 2))) == "BufferView(dtype=float32, shape=(2, 2))"


def test_a_byte_swapped_numpy_dtype_is_refused(dev) -> None:
    # numpy names '>f4' float32 too: the view was exported as native float32, so every value
    # read through it came out byte-swapped, without an error.
    s = dev.stream()
    buf = arange(s)
    with pytest.raises(InvalidArgumentError, match="byte order"):
        buf.view(np.dtype(">f4"))
    with pytest.raises(InvalidArgumentError, match="byte order"):
        buf.view(np.dtype(">i2"), (2 * N,))
    assert buf.view(np.dtype("<f4")).dtype == "float32"
    assert buf.view(np.dtype(">u1")).dtype == "uint8"  # one byte has no order
    np.testing.assert_array_equal(np.from_dlpack(buf.view(np.dtype("=f4"))), np.arange(N, dtype=np.float32))


# ---- lifetime ---------------------------------------------------------------------------


def test_a_view_keeps_its_buffer_alive(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    a = np.from_dlpack(buf.view("float32"))
    before = dev.memory_stats()["slices_in_use"]
    del buf
    gc.collect()
    assert dev.memory_stats()["slices_in_use"] == before  # the view holds the slice
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float32))
    if WRITABLE_VIEWS:  # and writable, where NumPy imports views writable
        a[:] = 9.0
    del a
    gc.collect()
    s.sync()
    assert dev.memory_stats()["slices_in_use"] == before - 1


def test_free_is_refused_while_views_live(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    a = np.from_dlpack(buf.view("float32"))
    assert buf.views == 1
    with pytest.raises(LifecoreError, match="view"):
        buf.free()
    assert buf.alive and f32(s, buf)[3] == 3.0  # nothing changed
    del a
    gc.collect()
    assert buf.views == 0
    buf.free()
    assert not buf.alive
    with pytest.raises(ClosedError):
        buf.__dlpack__()
    with pytest.raises(ClosedError):
        buf.__dlpack_device__()


def test_an_export_counts_as_a_view_while_it_waits_for_the_stream(dev) -> None:
    # The export takes its view in the same step as its check that the buffer is live, before
    # it waits for the buffer's stream (without the interpreter lock): a free() in that wait is
    # refused, instead of passing its check and returning the memory under the coming view.
    s = dev.stream()
    buf = s.alloc(4 * N)
    dev._pause_streams_for(0.5)
    s.fill(buf, 0x40400000)  # 3.0f, queued through the pause: the export waits for it
    exported = {}
    export = threading.Thread(target=lambda: exported.setdefault("view", np.from_dlpack(buf.view("float32"))))
    export.start()
    while buf.views == 0 and export.is_alive():
        time.sleep(0.001)
    assert export.is_alive() and buf.views == 1
    with pytest.raises(LifecoreError, match="view"):
        buf.free()
    export.join()
    assert (exported["view"] == 3.0).all() and buf.alive
    del exported["view"]
    gc.collect()
    buf.free()
    assert buf.views == 0 and not buf.alive


def test_a_view_survives_its_device_closing(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    a = np.from_dlpack(buf.view("float32"))
    dev.close()
    # The mock's host storage stays with the view (it is nobody else's now); on CUDA / HIP a
    # view must not outlive its device (see README).
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float32))
    if WRITABLE_VIEWS:  # and writable, where NumPy imports views writable
        a[:] = 1.0
    with pytest.raises(ClosedError):
        buf.__dlpack__()
    # Not freed: its view lives, and free() waits for it as on an open device.
    assert not buf.alive and repr(buf) == f"Buffer(nbytes={4 * N}, device closed)"
    with pytest.raises(lifecore.LifecoreError, match="view.* of the buffer are alive"):
        buf.free()
    del a
    gc.collect()
    buf.free()  # taken once its views are gone, after its device closed (as documented)
    assert repr(buf) == f"Buffer(nbytes={4 * N}, freed)"


def test_views_are_refused_inside_a_capture_window(mock_device) -> None:
    s = mock_device.stream()
    x = arange(s)
    refused: list[Exception] = []

    def step(st) -> None:
        tmp = st.alloc(4 * N)
        for target in (x, tmp):
            try:
                np.from_dlpack(target)
            except CaptureStateError as e:
                refused.append(e)
        st.launch(K.scale_f32, 1, 64, [N, 2.0, x, tmp])
        tmp.free()

    graph = s.capture(step)
    assert len(refused) == 4  # warmup (PREPARE) and the recording, for both buffers
    assert x.views == 0
    graph.replay()
    a = np.from_dlpack(x.view("float32"))  # outside the window again
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float32))
    graph.destroy()


def test_a_view_taken_before_a_capture_sees_the_replays(mock_hardware_device) -> None:
    s = mock_hardware_device.stream()
    x = arange(s)
    y = s.alloc(4 * N)
    s.fill(y, 0)
    view = np.from_dlpack(y.view("float32"))
    graph = s.capture(lambda st: st.launch(K.scale_f32, 1, 64, [N, 2.0, x, y]), warmup=0)
    assert (view == 0).all()  # recorded, not run
    graph.replay()
    s.sync()  # a view reads memory the stream writes: wait for the stream first
    np.testing.assert_array_equal(view, 2 * np.arange(N, dtype=np.float32))
    graph.destroy()


def test_a_fault_in_host_view_changes_nothing(dev) -> None:
    buf = arange(dev.stream())
    dev.inject_fault("host_view", 999)
    with pytest.raises(DriverError) as raised:
        np.from_dlpack(buf)
    assert raised.value.code == 999
    assert buf.views == 0
    buf.free()


@pytest.mark.parametrize("op", VIEW_DRIVER_OPERATIONS["cpu"])
def test_a_fault_in_each_view_operation_takes_no_view(op: str) -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buf = arange(s)
        dev.inject_fault(op, 999)
        with pytest.raises(DriverError) as raised:
            np.from_dlpack(buf.view("float32"))
        assert raised.value.code == 999 and raised.value.call.startswith(EMULATED)
        assert buf.views == 0
        dev.clear_faults()
        np.testing.assert_array_equal(np.from_dlpack(buf.view("float32")), np.arange(N, dtype=np.float32))


def test_the_new_driver_operations_are_named() -> None:
    assert {"host_view", "stream_wait_event"} <= set(lifecore.driver_operations())


# ---- read_into and write ----------------------------------------------------------------


def test_read_into_numpy_bytearray_memoryview(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    out = np.zeros(N, np.float32)
    s.read_into(buf, out)
    np.testing.assert_array_equal(out, np.arange(N, dtype=np.float32))
    raw = bytearray(4 * N)
    s.read_into(buf, raw)
    assert bytes(raw) == s.read(buf)
    target = bytearray(4 * N + 4)
    s.read_into(buf, memoryview(target)[4:])
    assert bytes(target[4:]) == s.read(buf)
    grid = np.zeros((4, 4), np.float32)
    s.read_into(buf, grid)
    assert grid[3, 3] == 15.0


def test_read_into_refusals(dev) -> None:
    s = dev.stream()
    buf = arange(s)
    with pytest.raises(InvalidArgumentError, match="holds 60 bytes"):
        s.read_into(buf, np.zeros(N - 1, np.float32))
    with pytest.raises(InvalidArgumentError, match="read-only"):
        s.read_into(buf, bytes(4 * N))
    ro = np.zeros(N, np.float32)
    ro.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        s.read_into(buf, ro)
    strided = np.zeros(2 * N, np.float32)[::2]
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        s.read_into(buf, strided)
    assert (strided == 0).all()
    with pytest.raises(TypeError):
        s.read_into(buf, [0.0] * N)
    buf.free()
    with pytest.raises(ClosedError):
        s.read_into(buf, np.zeros(N, np.float32))


def test_read_into_refuses_a_fortran_ordered_target(dev) -> None:
    # A Fortran-ordered array is contiguous but its bytes run column by column: filled in the
    # buffer's byte order it read back transposed, while write() refuses the same array.
    s = dev.stream()
    buf = arange(s)
    out = np.zeros((4, 4), np.float32, order="F")
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        s.read_into(buf, out)
    assert (out == 0).all()  # nothing written
    s.read_into(buf, out.T)  # its transpose is C-contiguous: read in element order
    np.testing.assert_array_equal(out.T, np.arange(N, dtype=np.float32).reshape(4, 4))


def test_write_from_any_buffer_protocol_object(dev) -> None:
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.write(buf, np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(f32(s, buf), np.arange(N, dtype=np.float32))
    s.write(buf, bytearray(b"\x01" * (4 * N)))
    assert s.read(buf) == b"\x01" * (4 * N)
    s.write(buf, memoryview(np.full((4, 4), 5.0, np.float32)))
    assert (f32(s, buf) == 5.0).all()
    s.write(buf, np.full(N, 6.0, np.float32).view(np.uint8))
    assert (f32(s, buf) == 6.0).all()


def test_write_refusals(dev) -> None:
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.fill(buf, 0)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        s.write(buf, np.ones(2 * N, np.float32)[::2])
    with pytest.raises(InvalidArgumentError):
        s.write(buf, np.ones(N + 1, np.float32))  # larger than the buffer
    with pytest.raises(TypeError):
        s.write(buf, [1.0] * N)
    assert (f32(s, buf) == 0).all()  # nothing changed


# ---- CUDA, against the fake driver ------------------------------------------------------


def test_a_cuda_export_orders_the_consumers_stream(fake_libcuda) -> None:
    """On CUDA (the fake driver, in a fresh interpreter) a buffer exports DLPack's CUDA device and
    the CUDA array interface, and the consumer's stream waits on an event (cuStreamWaitEvent):
    None names the legacy default stream (1), -1 asks for no device-side ordering, 0 is refused."""
    from driver_scenarios import run_with_fake_cuda

    body = """
    import ctypes, gc, os
    lib = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    lib.fake_cuda_stream_waits.restype = ctypes.c_long
    lib.fake_cuda_last_wait_stream.restype = ctypes.c_ulonglong
    live = lib.fake_cuda_live_events
    live.restype = ctypes.c_long
    dev = lifecore.Device("cuda")
    s = dev.stream()
    buf = s.alloc(64)
    result["device"] = list(buf.__dlpack_device__())
    cai = buf.view("float32", (4, 4)).__cuda_array_interface__
    result["cai"] = [list(cai["shape"]), cai["typestr"], cai["data"][0] == buf.ptr, cai["data"][1], cai["version"],
                     cai["stream"] == s.handle]
    events = live()
    waits = lib.fake_cuda_stream_waits()
    kept = [buf.__dlpack__()]
    result["none"] = [lib.fake_cuda_stream_waits() - waits, lib.fake_cuda_last_wait_stream()]
    kept.append(buf.view("int32").__dlpack__(stream=4096, max_version=(1, 0)))
    result["pointer"] = [lib.fake_cuda_stream_waits() - waits, lib.fake_cuda_last_wait_stream()]
    lib.fake_cuda_stream_syncs.restype = ctypes.c_long
    syncs = lib.fake_cuda_stream_syncs()
    kept.append(buf.__dlpack__(stream=-1))
    result["no_order"] = [lib.fake_cuda_stream_waits() - waits, lib.fake_cuda_stream_syncs() - syncs]
    try:
        buf.__dlpack__(stream=0)
        result["zero"] = "accepted"
    except BufferError:
        result["zero"] = "refused"
    result["events_left"] = live() - events
    result["views"] = buf.views
    del kept
    gc.collect()
    result["views_after"] = buf.views
    buf.free()
    dev.close()
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["device"] == [2, 0]
    assert result["cai"] == [[4, 4], "<f4", True, False, 3, True]
    assert result["none"] == [1, 1]  # the legacy default stream
    assert result["pointer"] == [2, 4096]
    assert result["no_order"] == [2, 0]  # -1: the producer must not synchronize: no wait of either kind
    assert result["zero"] == "refused"
    assert result["events_left"] == 0  # each export's event is destroyed once the wait is queued
    assert result["views"] == 3 and result["views_after"] == 0

def test_an_export_to_a_consumer_stream_another_library_captures_is_refused(fake_libcuda) -> None:
    """A captured stream may not wait for work outside its capture: the driver would invalidate
    the consumer's capture (torch.from_dlpack inside torch.cuda.graph, say). The export is
    refused with CaptureStateError before any event is recorded or waited for, and the buffer
    is exported as before once that capture has ended."""
    from driver_scenarios import run_with_fake_cuda

    body = """
    import ctypes, os
    lib = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    lib.fake_cuda_stream_waits.restype = ctypes.c_long
    lib.fake_cuda_event_records.restype = ctypes.c_long
    lib.fake_cuda_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    dev = lifecore.Device("cuda")
    s = dev.stream()
    buf = s.alloc(64)
    s.sync()
    lib.fake_cuda_set_foreign_capture(4096, 1)
    before = [lib.fake_cuda_event_records(), lib.fake_cuda_stream_waits()]
    try:
        buf.__dlpack__(stream=4096)
        result["capturing"] = "accepted"
    except lifecore.CaptureStateError as error:
        result["capturing"] = str(error)
    result["issued"] = [lib.fake_cuda_event_records() - before[0], lib.fake_cuda_stream_waits() - before[1]]
    result["views"] = buf.views
    lib.fake_cuda_set_foreign_capture(4096, 0)
    capsule = buf.__dlpack__(stream=4096)
    result["after"] = [lib.fake_cuda_event_records() - before[0], lib.fake_cuda_stream_waits() - before[1]]
    del capsule
    buf.free()
    dev.close()
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["capturing"].startswith("__dlpack__: the consumer's stream, native stream 0x1000, is being captured")
    assert "take the view before the capture begins" in result["capturing"]
    assert result["issued"] == [0, 0] and result["views"] == 0
    assert result["after"] == [1, 1]


def test_the_cuda_array_interface_is_refused_inside_a_capture_window(fake_libcuda) -> None:
    """DLPack's rule for the CUDA array interface too: while the buffer's stream has a window
    prepared or recording, the export raises CaptureStateError (a buffer allocated inside has
    no memory before the replay); outside a window it is offered again."""
    from driver_scenarios import run_with_fake_cuda

    body = """
    from lifecore import CaptureStateError
    dev = lifecore.Device("cuda")
    s = dev.stream()
    before = s.alloc(64)
    refused = []
    def attempt(what, export):
        try:
            export()
            refused.append((what, "offered"))
        except CaptureStateError:
            refused.append((what, "refused"))
    s.graph_prepare()
    attempt("prepare", lambda: before.__cuda_array_interface__)
    attempt("prepare view", lambda: before.view("float32").__cuda_array_interface__)
    s.begin_capture()
    inside = s.alloc(4096)
    attempt("capture", lambda: inside.__cuda_array_interface__)
    attempt("capture dlpack", lambda: inside.__dlpack__(stream=1))
    s.abort_capture()
    result["refused"] = refused
    result["after"] = before.__cuda_array_interface__["data"][0] == before.ptr
    dev.close()
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["refused"] == [["prepare", "refused"], ["prepare view", "refused"], ["capture", "refused"],
                                 ["capture dlpack", "refused"]]
    assert result["after"] is True


def test_write_names_fortran_order_as_read_into_does(dev) -> None:
    # Before: "data must be contiguous (copy a strided array first)", though a Fortran-ordered
    # array is contiguous and np.copy keeps its order, so the advice was refused again.
    s = dev.stream()
    buf = arange(s)
    fortran = np.asfortranarray(np.arange(N, dtype=np.float32).reshape(4, 4) + 100)
    for data in (fortran, np.copy(fortran)):
        with pytest.raises(InvalidArgumentError, match=r"^write: data must be C-contiguous; a Fortran-ordered"):
            s.write(buf, data)
    np.testing.assert_array_equal(f32(s, buf), np.arange(N, dtype=np.float32))  # nothing written
    s.write(buf, np.ascontiguousarray(fortran))
    np.testing.assert_array_equal(f32(s, buf), np.ascontiguousarray(fortran).ravel())


@pytest.mark.parametrize("code, name", [("f", "float32"), ("?", "bool"), ("i", "int32"), ("d", "float64"),
                                        ("double", "float64"), ("B", "uint8")])
def test_numpys_other_spellings_of_a_dtype_name_the_same_view(dev, code: str, name: str) -> None:
    # Before: "f4" and "b1" were taken but NumPy's one-letter codes were "unsupported".
    buf = dev.stream().alloc(64)
    assert np.from_dlpack(buf.view(code)).dtype == np.dtype(name)


@pytest.mark.parametrize("kind, name", [(float, "float64"), (bool, "bool"), (int, np.dtype(int).name)])
def test_pythons_own_types_name_the_view_numpy_gives_them(dev, kind: type, name: str) -> None:
    # Before: float was refused by its __name__ while "float" and numpy.dtype(float) were taken.
    buf = dev.stream().alloc(64)
    assert np.from_dlpack(buf.view(kind)).dtype == np.dtype(name) == np.dtype(kind)


@pytest.mark.parametrize("code", ["\x00", "\x01", "f\n"])
def test_text_with_control_characters_is_no_dtype(dev, code: str) -> None:
    # Before: NumPy read "\x00" as bool, and the view was one.
    buf = dev.stream().alloc(64)
    with pytest.raises(InvalidArgumentError, match=r"^view: unsupported dtype "):
        buf.view(code)
    with pytest.raises(InvalidArgumentError, match=r"^view: unsupported dtype complex"):
        buf.view(complex)  # NumPy's complex128, which no view exports


@pytest.mark.parametrize("code", ["a", "a4", "=a2", "|a1", "S", "U4"])
def test_a_bytes_or_text_code_is_refused_without_numpys_advice(dev, code: str) -> None:
    # Before: "a" reached numpy.dtype, whose DeprecationWarning told the caller to use "S",
    # which the view then refused as well.
    buf = dev.stream().alloc(64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InvalidArgumentError, match=rf"^view: unsupported dtype {re.escape(code)} \(supported: "):
            buf.view(code)
    assert [str(w.message) for w in caught] == []


def test_numpy_scalars_are_taken_for_copy_and_stream(dev) -> None:
    buf = dev.stream().alloc(64)
    buf.__dlpack__(copy=np.False_)  # NumPy's bool is the bool it is
    with pytest.raises(BufferError, match="copy=True is not offered"):
        buf.__dlpack__(copy=np.True_)
    buf.__dlpack__(stream=np.int64(-1))  # an integer of another library, as every other int argument
    for bad in (True, np.True_, np.int64(3)):
        with pytest.raises(BufferError, match="stream must be None or -1"):
            buf.__dlpack__(stream=bad)
