"""Foreign tensors in: Stream.launch, copy and fill take a BufferView or another library's
tensor (DLPack, CUDA array interface) where a Buffer goes.

On the emulated device (its memory is host memory) a NumPy array or a torch CPU tensor is
mapped into the device's address space for the call, so a kernel, a fill or a copy writes
into the array itself: the tests prove it by reading the array after the stream's work. A
view of one of the device's own buffers is that buffer (a fault injected into map_host does
not reach it), with the buffer's window touch and retention rules. A graph holds the foreign
tensors it recorded for its life; dropping the graph lets them go.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import lifecore
from lifecore import DriverError, InvalidArgumentError, LifecoreTypeError
from lifecore.errors import LifecoreOverflowError
from lifecore import kernels as K
from lifecore.capture import CapturePayload

from backend_roles import EMULATED
from dlpack_producer import Producer
from numpy_views import needs_writable_views

N = 64
ONE = 0x3F800000  # float32 1.0
SEVEN = 0x40E00000  # float32 7.0
GRAPHS = ["hardware", "software"]


@pytest.fixture
def dev():
    with lifecore.Device(EMULATED) as device:
        yield device


@pytest.fixture(params=GRAPHS)
def gdev(request):
    with lifecore.Device(EMULATED, graphs=request.param) as device:
        yield device


def f32(s, buf) -> np.ndarray:
    return np.frombuffer(s.read(buf), np.float32)


def filled(s, value: float, n: int = N):
    buf = s.alloc(4 * n)
    s.write(buf, np.full(n, value, np.float32))
    return buf


def released(ref: weakref.ref) -> bool:
    """Whether the object is gone. References let go of without the interpreter lock are
    dropped by a pending call on this thread, which runs within a few bytecodes."""
    gc.collect()
    for attempt in range(10_000):
        if ref() is None:
            return True
        if attempt % 1000 == 999:
            gc.collect()
    return False


def torch_or_skip():
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        pytest.skip("torch is not installed")
    return torch


# ---- NumPy on the emulated device: writes land in the array ------------------------------


def test_fill_writes_into_a_numpy_array(dev) -> None:
    s = dev.stream()
    a = np.zeros(N, np.float32)
    s.fill(a, SEVEN)
    s.sync()
    assert np.array_equal(a, np.full(N, 7.0, np.float32))


def test_a_kernel_writes_into_and_reads_from_numpy_arrays(dev) -> None:
    s = dev.stream()
    x = np.arange(N, dtype=np.float32)
    out = np.zeros(N, np.float32)
    s.launch(K.scale_f32, 1, N, [N, 3.0, x, out])
    s.sync()
    assert np.array_equal(out, 3.0 * np.arange(N, dtype=np.float32))
    assert np.array_equal(x, np.arange(N, dtype=np.float32))  # the input is untouched


def test_copy_between_numpy_arrays_and_buffers(dev) -> None:
    s = dev.stream()
    buf = filled(s, 5.0)
    host = np.zeros((8, 8), np.float32)  # any C-contiguous shape of the same bytes
    s.copy(host, buf)
    s.sync()
    assert np.all(host == 5.0)
    back = np.arange(N, dtype=np.float32)
    s.copy(buf, back)
    assert np.array_equal(f32(s, buf), back)
    other = np.zeros(N, np.float32)
    s.copy(other, back)
    s.sync()
    assert np.array_equal(other, back)


def test_a_view_of_a_numpy_array_lands_at_its_offset(dev) -> None:
    s = dev.stream()
    a = np.zeros(N, np.float32)
    s.fill(a[16:32], ONE)  # a contiguous slice: data + offset
    s.sync()
    assert np.array_equal(np.nonzero(a)[0], np.arange(16, 32))


def test_a_buffer_view_is_its_buffer(dev) -> None:
    s = dev.stream()
    buf = filled(s, 0.0)
    s.fill(buf.view("float32", (8, 8)), ONE)
    assert np.all(f32(s, buf) == 1.0)
    out = np.zeros(N, np.float32)
    s.launch(K.scale_f32, 1, N, [N, 2.0, buf.view("float32"), out])
    s.sync()
    assert np.all(out == 2.0)


# ---- torch CPU -------------------------------------------------------------------------


def test_torch_cpu_tensors_in_launch_copy_and_fill(dev) -> None:
    torch = torch_or_skip()
    s = dev.stream()
    t = torch.zeros(N)
    s.fill(t, SEVEN)
    s.sync()
    assert torch.equal(t, torch.full((N,), 7.0))
    out = torch.zeros(N)
    s.launch(K.scale_f32, 1, N, [N, 2.0, t, out])
    s.sync()
    assert torch.equal(out, torch.full((N,), 14.0))
    buf = s.alloc(4 * N)
    s.copy(buf, out)
    assert np.all(f32(s, buf) == 14.0)
    with pytest.raises(InvalidArgumentError, match="not C-contiguous"):
        s.fill(torch.zeros(N, 2).t(), 0)


# ---- refusals: each names the argument, and changes nothing -----------------------------


def assert_nothing_changed(dev, s, arrays, before) -> None:
    s.sync()  # nothing was queued, so nothing surfaces
    for array, copy in zip(arrays, before):
        assert np.array_equal(array, copy)
    assert dev.memory_stats() == before[-1]


def test_a_strided_array_is_refused(dev) -> None:
    s = dev.stream()
    a = np.zeros((8, 8), np.float32)
    before = [a.copy(), dev.memory_stats()]
    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' is not C-contiguous"):
        s.fill(a[:, ::2], ONE)
    with pytest.raises(InvalidArgumentError, match=r"launch: argument 'x' is not C-contiguous"):
        s.launch(K.scale_f32, 1, N, [32, 2.0, a[:, ::2], np.zeros(32, np.float32)])
    assert_nothing_changed(dev, s, [a], before)


def test_a_tensor_of_another_device_is_refused(dev) -> None:
    s = dev.stream()

    class CudaTensor:  # says it lives on CUDA device 0; must never be exported here
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kwargs):  # pragma: no cover - the refusal comes first
            raise AssertionError("exported although on another device")

    class CudaArray:  # the CUDA array interface is CUDA memory by definition
        __cuda_array_interface__ = {"shape": (N,), "typestr": "<f4", "data": (1 << 40, False), "version": 3}

    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' lives on cuda:0, but the stream's"):
        s.fill(CudaTensor(), 0)
    with pytest.raises(InvalidArgumentError, match=r"copy: argument 'src' lives on cuda"):
        s.copy(np.zeros(N, np.float32), CudaArray())
    with pytest.raises(InvalidArgumentError, match=r"launch: argument 'out' lives on cuda"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, np.zeros(N, np.float32), CudaArray()])


def test_sizes_out_of_bounds_are_refused(dev) -> None:
    s = dev.stream()
    small = np.zeros(N // 2, np.float32)
    buf = filled(s, 1.0)
    before = [small.copy(), dev.memory_stats()]
    with pytest.raises(InvalidArgumentError, match=r"copy: argument 'dst' holds 128 bytes and 'src' 256"):
        s.copy(small, buf)
    with pytest.raises(InvalidArgumentError, match=r"copy: argument 'dst' holds 256 bytes and 'src' 128"):
        s.copy(buf, small)
    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' holds 6 bytes, not a multiple of 4"):
        s.fill(np.zeros(6, np.uint8), 0)
    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' is empty"):
        s.fill(np.zeros(0, np.float32), 0)
    assert_nothing_changed(dev, s, [small], before)
    assert np.all(f32(s, buf) == 1.0)


def test_a_description_whose_size_does_not_fit_is_refused(dev) -> None:
    # A producer's shape is not trusted: a size past 64 bits is refused, never wrapped into the
    # bytes the memory really has (4 * (2**62 + 16) wraps to 64), and so are a negative ndim and
    # dimensions without a shape.
    s = dev.stream()
    host = np.zeros(16, np.float32)
    buf = filled(s, 1.0, 16)
    before = [host.copy(), dev.memory_stats()]
    for shape, bits in (([2**62 + 16], 32), ([2**32, 2**32 + 64], 8), ([2**40, 2**40, 2**40], 8)):
        with pytest.raises(LifecoreOverflowError, match="copy: argument 'dst'.*does not fit in 64 bits"):
            s.copy(Producer(host.ctypes.data, shape, bits=bits), buf)
    with pytest.raises(InvalidArgumentError, match="negative number of dimensions"):
        s.copy(Producer(host.ctypes.data, [16], ndim=-5), buf)
    with pytest.raises(InvalidArgumentError, match="no shape"):
        s.copy(Producer(host.ctypes.data, [16], null_shape=True), buf)
    assert_nothing_changed(dev, s, [host], before)
    s.copy(Producer(host.ctypes.data, [16]), buf)  # the same memory, described truly
    s.sync()
    assert np.all(host == 1.0)


def test_a_read_only_array_is_refused_as_a_destination_and_taken_where_it_is_only_read(dev) -> None:
    s = dev.stream()
    ro = np.ones(N, np.float32)
    ro.flags.writeable = False
    before = [ro.copy(), dev.memory_stats()]
    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' is read-only"):
        s.fill(ro, 0)
    with pytest.raises(InvalidArgumentError, match=r"copy: argument 'dst' is read-only"):
        s.copy(ro, np.zeros(N, np.float32))
    with pytest.raises(InvalidArgumentError, match=r"launch: argument 'out' is read-only"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, np.zeros(N, np.float32), ro])
    assert_nothing_changed(dev, s, [ro], before)
    out = np.zeros(N, np.float32)
    s.copy(out, ro)  # a read-only source is fine
    s.sync()
    assert np.all(out == 1.0)
    # So is a kernel's "const ptr", a pointer it only reads.
    assert K.scale_f32.read_only == ["x"] and K.add_f32.read_only == ["x", "y"]
    s.launch(K.scale_f32, 1, N, [N, 3.0, ro, out])
    s.sync()
    assert np.all(out == 3.0)
    s.launch(K.add_f32, 1, N, [N, ro, ro, out])
    s.sync()
    assert np.all(out == 2.0) and np.all(ro == 1.0)


def test_an_object_that_is_not_a_tensor_is_refused(dev) -> None:
    s = dev.stream()
    for bad in ("abc", [1.0, 2.0], 3, None, object()):
        with pytest.raises(LifecoreTypeError, match=r"fill: argument 'buf' must be a Buffer, a BufferView or a tensor"):
            s.fill(bad, 0)
        with pytest.raises(LifecoreTypeError, match=r"copy: argument 'src' must be a Buffer, a BufferView or a tensor"):
            s.copy(np.zeros(4, np.float32), bad)
    with pytest.raises(LifecoreTypeError, match=r"argument 'x' must be a Buffer or a tensor, got str"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, "abc", np.zeros(N, np.float32)])


def test_a_tensor_for_a_scalar_parameter_is_not_read_as_memory(dev) -> None:
    s = dev.stream()
    for tensor in (np.array(2.0, np.float32), np.ones(1, np.float32)):  # a NumPy float32 scalar is a float
        with pytest.raises(LifecoreTypeError, match=r"argument 'a' must be"):
            s.launch(K.scale_f32, 1, N, [N, tensor, np.zeros(N, np.float32), np.zeros(N, np.float32)])


def test_a_producer_that_refuses_the_export_is_named(dev) -> None:
    s = dev.stream()

    class Refuses:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise BufferError("no export today")

    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' could not be exported .*no export today"):
        s.fill(Refuses(), 0)


def test_a_fault_in_map_host_changes_nothing(dev) -> None:
    s = dev.stream()
    a = np.zeros(N, np.float32)
    dev.inject_fault("map_host", 999)
    with pytest.raises(DriverError) as caught:
        s.fill(a, ONE)
    assert caught.value.code == 999
    s.sync()
    assert not a.any()
    s.fill(a, ONE)  # the fault is spent
    s.sync()
    assert np.all(a == 1.0)


def test_map_host_and_unmap_host_are_driver_operations() -> None:
    assert {"map_host", "unmap_host"} <= set(lifecore.driver_operations())


# ---- views of the device's own buffers ---------------------------------------------------


@needs_writable_views
def test_a_numpy_view_of_a_buffer_is_that_buffer(dev) -> None:
    s = dev.stream()
    buf = filled(s, 0.0)
    view = np.from_dlpack(buf.view("float32"))
    dev.inject_fault("map_host", 999, times=10**6)  # foreign host memory cannot be mapped now
    s.fill(view, SEVEN)  # recognised as the buffer: no mapping
    s.launch(K.scale_f32, 1, N, [N, 2.0, view, buf])
    assert np.all(f32(s, buf) == 14.0)
    s.fill(view[8:16], ONE)  # a slice of the view: the buffer at an offset
    s.sync()
    assert np.array_equal(np.nonzero(view == 1.0)[0], np.arange(8, 16))
    with pytest.raises(DriverError):
        s.fill(np.zeros(N, np.float32), 0)  # a foreign array does need the mapping
    dev.clear_faults()
    del view


def test_a_read_only_numpy_view_of_a_buffer_is_that_buffer_where_it_is_only_read(dev) -> None:
    """NumPy before 2.2.5 imports every view read-only (and before 2.1 cannot export a read-only
    array through DLPack, so lifecore reads it through its array interface): such a view is
    still its buffer where the operation only reads it, and refused where it writes."""
    s = dev.stream()
    buf = filled(s, 3.0)
    view = np.from_dlpack(buf.view("float32"))
    view.flags.writeable = False  # as older NumPy imports it
    out = s.alloc(4 * N)
    dev.inject_fault("map_host", 999, times=10**6)  # foreign host memory cannot be mapped now
    s.copy(out, view)  # recognised as the buffer: no mapping
    assert np.all(f32(s, out) == 3.0)
    s.launch(K.scale_f32, 1, N, [N, 2.0, view, out])  # a const ptr
    assert np.all(f32(s, out) == 6.0)
    with pytest.raises(InvalidArgumentError, match=r"^fill: argument 'buf' is read-only"):
        s.fill(view, ONE)
    dev.clear_faults()
    with lifecore.Device(EMULATED) as two:
        theirs = np.from_dlpack(two.stream().alloc(4 * N).view("float32"))
        theirs.flags.writeable = False
        with pytest.raises(InvalidArgumentError, match=r"^copy: argument 'src' is memory of a buffer of another device"):
            s.copy(out, theirs)
        del theirs
    del view


@needs_writable_views
def test_a_view_passed_in_lets_go_of_its_buffer_when_the_call_returns(dev) -> None:
    s = dev.stream()
    buf = s.alloc(4 * N)
    view = np.from_dlpack(buf.view("float32"))
    s.fill(view, ONE)
    with pytest.raises(InvalidArgumentError):
        s.copy(view, np.zeros(1, np.float32))  # a refused call lets go too
    assert buf.views == 1
    del view
    assert buf.views == 0  # nothing of the calls still holds the view
    buf.free()


def test_a_torch_view_of_a_buffer_is_that_buffer(dev) -> None:
    torch = torch_or_skip()
    s = dev.stream()
    buf = filled(s, 3.0)
    t = torch.from_dlpack(buf.view("float32"))
    dev.inject_fault("map_host", 999, times=10**6)
    out = s.alloc(4 * N)
    s.launch(K.scale_f32, 1, N, [N, 2.0, t, out])
    assert np.all(f32(s, out) == 6.0)
    dev.clear_faults()


@needs_writable_views
def test_a_view_in_a_window_is_touched_and_retained_like_its_buffer(gdev) -> None:
    """The same capture with the Buffer and with a NumPy view of it leaves the same pool state:
    the graph retains the slice, so freeing the buffer does not hand its memory out again."""

    def capture(as_view: bool):
        s = gdev.stream()
        buf = s.alloc(4 * N)
        s.sync()
        arg = np.from_dlpack(buf.view("float32")) if as_view else buf  # views are taken outside windows
        graph = s.capture(lambda st: st.fill(arg, SEVEN))
        del arg
        buf.free()
        s.sync()
        return graph, gdev.memory_stats()

    g1, with_buffer = capture(False)
    g1.destroy()
    g2, with_view = capture(True)
    for key in ("slices_retained", "slices_in_use", "graphs_alive"):
        assert with_view[key] == with_buffer[key], key
    assert with_view["slices_retained"] >= 1
    g2.destroy()


@needs_writable_views
def test_a_retained_slice_is_not_handed_out_while_the_graph_lives(gdev) -> None:
    s = gdev.stream()
    buf = s.alloc(4 * N)
    s.sync()
    view = np.from_dlpack(buf.view("float32"))
    graph = s.capture(lambda st: st.fill(view, SEVEN))
    del view
    old = buf.ptr
    buf.free()
    s.sync()
    fresh = s.alloc(4 * N)
    assert fresh.ptr != old  # the graph retains the slice the view stood for
    s.fill(fresh, 0)
    graph.replay()
    assert not np.any(f32(s, fresh))  # the replay writes the retained slice, never the new buffer
    graph.destroy()


# ---- holds: eager work and graphs --------------------------------------------------------


def test_eager_work_holds_a_foreign_array_until_the_stream_is_done(dev) -> None:
    s = dev.stream()
    a = np.zeros(N, np.float32)
    ref = weakref.ref(a)
    s.fill(a, ONE)
    del a
    gc.collect()
    assert ref() is not None  # queued work may still write it
    s.sync()
    assert released(ref)


def test_a_graph_holds_a_recorded_foreign_array_for_its_life(gdev) -> None:
    """Recording a foreign tensor inside a window is allowed: the graph holds it, so a replay
    after the caller dropped it still writes live memory; dropping the graph lets it go."""
    s = gdev.stream()
    x = filled(s, 4.0)
    out = np.zeros(N, np.float32)
    ref = weakref.ref(out)
    graph = s.capture(lambda st: st.launch(K.scale_f32, 1, N, [N, 2.0, x, out]))
    out[:] = 0.0  # the warmup wrote it; the replay must again
    del out
    gc.collect()
    assert ref() is not None
    graph.replay()
    s.sync()
    assert np.all(ref() == 8.0)
    s.write(x, np.full(N, 1.0, np.float32))
    graph.replay()
    s.sync()
    assert np.all(ref() == 2.0)
    del graph
    assert released(ref)


def test_destroying_a_graph_releases_its_torch_tensors(gdev) -> None:
    torch = torch_or_skip()
    s = gdev.stream()
    t = torch.zeros(N)
    ref = weakref.ref(t)
    graph = s.capture(lambda st: st.fill(t, SEVEN))
    t.zero_()
    del t
    graph.replay()
    s.sync()
    assert torch.equal(ref(), torch.full((N,), 7.0))
    graph.destroy()
    assert released(ref)


def test_an_aborted_window_lets_go_of_its_foreign_tensors(gdev) -> None:
    s = gdev.stream()
    a = np.zeros(N, np.float32)
    ref = weakref.ref(a)
    s.graph_prepare()
    s.begin_capture()
    s.fill(a, ONE)
    del a
    s.abort_capture()
    s.sync()
    assert released(ref)


def test_closing_the_device_lets_go_of_a_graphs_foreign_tensors() -> None:
    dev = lifecore.Device(EMULATED)
    s = dev.stream()
    a = np.zeros(N, np.float32)
    ref = weakref.ref(a)
    graph = s.capture(lambda st: st.fill(a, ONE))
    del a
    dev.close()
    assert not graph.alive
    assert released(ref)


def test_replays_of_a_graph_write_the_array_each_time(gdev) -> None:
    s = gdev.stream()
    src = filled(s, 2.0)
    host = np.zeros(N, np.float32)
    graph = s.capture(lambda st: st.copy(host, src))
    for value in (3.0, 4.0):
        s.write(src, np.full(N, value, np.float32))
        graph.replay()
        s.sync()
        assert np.all(host == value)
    graph.destroy()


# ---- CUDA, against the fake driver (its device memory is host memory) --------------------


def test_cuda_takes_device_tensors_and_refuses_host_arrays(fake_libcuda) -> None:
    """On CUDA (the fake driver, in a fresh interpreter, where a device address is a host
    address): a CUDA-array-interface object and a DLPack producer on CUDA device 0 are used by
    address, the producer is handed the stream's handle as DLPack's `stream` (-1, no wait,
    while the stream records: the work runs at replay), a graph holds
    what it recorded, a buffer's memory reached through the array interface is recognised by
    address, and a NumPy array, another ordinal, a read-only array, a freed buffer's memory or
    an array whose typestr is not a built-in kernel's float32 are refused."""
    from driver_scenarios import run_with_fake_cuda

    body = """
    import gc, weakref
    import numpy as np

    def released(ref):
        for _ in range(10000):
            if ref() is None:
                return True
        gc.collect()
        return ref() is None

    import ctypes, os
    fake = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    fake.fake_cuda_register.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t]

    class Cai:  # its array's memory is device memory the fake driver knows (cuPointerGetAttribute)
        def __init__(self, array, read_only=False, strides=None):
            fake.fake_cuda_register(array.ctypes.data, array.nbytes)
            self.array = array
            self.__cuda_array_interface__ = {"shape": array.shape, "typestr": "<f4", "version": 3,
                                             "data": (array.ctypes.data, read_only), "strides": strides}

    class Wrap:  # a DLPack producer: the buffer's own export, and what it was asked
        def __init__(self, buf, device=None):
            self.buf, self.device, self.asked, self.streams = buf, device, {}, []
        def __dlpack_device__(self):
            return self.device or self.buf.__dlpack_device__()
        def __dlpack__(self, **kwargs):
            self.asked.update(kwargs)
            self.streams.append(kwargs.get("stream"))
            return self.buf.__dlpack__(**kwargs)

    dev = lifecore.Device("cuda")
    s = dev.stream()
    host = np.zeros(16, np.float32)
    s.fill(Cai(host), 0x40E00000)
    s.sync()
    result["fill"] = host.tolist()
    buf = s.alloc(64)
    s.write(buf, np.arange(16, dtype=np.float32))
    s.copy(Cai(host), buf)
    s.sync()
    result["copy"] = host.tolist()
    wrapped = Wrap(buf)
    s.fill(wrapped, 0)
    result["stream_asked"] = wrapped.asked.get("stream") == s.handle
    result["max_version_asked"] = list(wrapped.asked.get("max_version", ()))
    result["through_wrap"] = np.frombuffer(s.read(buf), np.float32).tolist()
    result["numpy"] = argument_refusal(s.fill, np.zeros(16, np.float32), 0)
    result["ordinal"] = argument_refusal(s.fill, Wrap(buf, (2, 1)), 0)
    result["read_only"] = argument_refusal(s.fill, Cai(host, read_only=True), 0)
    result["strided"] = argument_refusal(s.fill, Cai(np.zeros(16, np.float32)[:8], strides=(8,)), 0)
    from lifecore import kernels as K
    def scale(x):
        s.launch(K.scale_f32, 1, 16, [16, 1.0, x, Cai(host)])
    wide = Cai(np.zeros(16, np.float64))
    wide.__cuda_array_interface__["typestr"] = "<f8"
    result["typestr_f8"] = argument_refusal(scale, wide)
    swapped = Cai(np.zeros(16, np.float32))
    swapped.__cuda_array_interface__["typestr"] = ">f4"
    result["typestr_swapped"] = argument_refusal(scale, swapped)
    result["typestr_f4"] = argument_refusal(scale, Cai(np.zeros(16, np.float32)))
    for typestr, array in (("|b1", np.zeros(16, bool)), ("<c8", np.zeros(16, np.complex64)),
                           ("<u2", np.zeros(16, np.uint16)), ("<V4", np.zeros(16, np.float32))):
        other = Cai(array)
        other.__cuda_array_interface__["typestr"] = typestr
        result["typestr_" + typestr] = argument_refusal(scale, other)
    class Interface:  # an object that offers only the CUDA array interface
        def __init__(self, interface):
            self.__cuda_array_interface__ = interface

    described = {"typestr": "<f4", "data": (host.ctypes.data, False), "version": 3}
    result["wrapping_shape"] = argument_refusal(s.copy, buf, Interface({**described, "shape": (2**62 + 16,)}))
    result["huge_item"] = argument_refusal(s.copy, buf, Interface({**described, "shape": (1,),
                                                                   "typestr": "<V18446744073709551680"}))
    pooled = s.alloc(256)
    s.sync()
    by_address = Interface(pooled.view("float32").__cuda_array_interface__)  # lends no lease
    retained_before = dev.memory_stats()["slices_retained"]
    kept = s.capture(lambda st: st.fill(by_address, 0))
    pooled.free()  # not refused: the interface lends no lease
    s.sync()
    result["retained_by_graph"] = dev.memory_stats()["slices_retained"] - retained_before

    def fill_refusal(target):
        try:
            s.fill(target, 0)
            return "accepted"
        except lifecore.ClosedError as error:
            return str(error)

    result["freed_view"] = fill_refusal(by_address)
    kept.destroy()
    # Freed with no sync after it: the slice awaits its fence, and its memory is freed all the same.
    unsynced = s.alloc(256)
    s.sync()
    stale = Interface(unsynced.view("float32").__cuda_array_interface__)
    unsynced.free()
    result["freed_view_before_sync"] = fill_refusal(stale)
    s.sync()
    other = dev.stream()
    elsewhere = Wrap(other.alloc(64))  # a buffer of another stream: its views are not refused here
    s.capture(lambda st: st.fill(elsewhere, 0)).destroy()
    result["capture_streams"] = [x == s.handle if x != -1 else -1 for x in elsewhere.streams]
    target = Cai(np.zeros(16, np.float32))
    ref = weakref.ref(target)
    graph = s.capture(lambda st: st.fill(target, 0x3F800000))  # the fake's graphs run nothing
    del target
    gc.collect()
    result["held"] = ref() is not None
    graph.replay()
    s.sync()
    graph.destroy()
    result["released"] = released(ref)
    buf.free()
    dev.close()
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["fill"] == [7.0] * 16
    assert result["copy"] == [float(i) for i in range(16)]
    assert result["stream_asked"] is True and result["max_version_asked"] == [1, 0]
    assert result["through_wrap"] == [0.0] * 16
    assert "fill: argument 'buf' lives on cpu:0, but the stream's cuda device takes cuda:0 memory" in result["numpy"]
    assert "lives on cuda:1" in result["ordinal"]
    assert "is read-only" in result["read_only"]
    assert "not C-contiguous" in result["strided"]
    assert "argument 'x' holds float64 elements, but the kernel reads float32" in result["typestr_f8"]
    assert "argument 'x' holds >f4 elements, but the kernel reads float32" in result["typestr_swapped"]
    for typestr, named in (("|b1", "bool"), ("<c8", "complex64"), ("<u2", "uint16"), ("<V4", "<V4")):
        assert f"argument 'x' holds {named} elements, but the kernel reads float32" in result["typestr_" + typestr]
    assert result["typestr_f4"] == "accepted"
    assert "copy: argument 'src'" in result["wrapping_shape"] and "does not fit in 64 bits" in result["wrapping_shape"]
    assert "unknown typestr" in result["huge_item"]
    assert result["retained_by_graph"] == 1  # recognised by address: the graph retains the buffer's slice
    assert "fill: argument 'buf' points into the memory of a freed buffer" in result["freed_view"]
    assert "fill: argument 'buf' points into the memory of a freed buffer" in result["freed_view_before_sync"]
    assert result["capture_streams"] == [True, -1]  # the warmup orders; the recorded pass does not wait
    assert result["held"] is True
    assert result["released"] is True


def test_a_masked_array_is_refused_before_anything_is_issued(dev) -> None:
    # Before: its DLPack export showed the data without the mask, and a kernel wrote the masked
    # elements too.
    s = dev.stream()
    x = np.arange(N, dtype=np.float32)
    data = np.zeros(N, np.float32)
    masked = np.ma.array(data, mask=np.ones(N, bool))
    before = [data.copy(), dev.memory_stats()]
    with pytest.raises(InvalidArgumentError, match=r"launch: argument 'out' is a NumPy masked array"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, x, masked])
    with pytest.raises(InvalidArgumentError, match=r"copy: argument 'dst' is a NumPy masked array"):
        s.copy(masked, x)
    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' is a NumPy masked array"):
        s.fill(masked, 0)
    assert_nothing_changed(dev, s, [data], before)
    s.launch(K.scale_f32, 1, N, [N, 2.0, x, masked.data])  # its data, as the message says
    s.sync()
    assert np.array_equal(data, 2.0 * x)


def test_a_producer_error_is_an_invalid_argument_and_an_interrupt_stays_one(dev) -> None:
    s = dev.stream()

    class NoDevice:  # as torch answers for a meta tensor
        def __dlpack_device__(self):
            raise ValueError("Unknown device type meta for Dlpack")

        def __dlpack__(self, **kwargs):
            raise AssertionError("never asked once the device is unknown")

    with pytest.raises(InvalidArgumentError, match=r"fill: argument 'buf' could not name its device .*ValueError: "
                                                   r"Unknown device type meta") as refused:
        s.fill(NoDevice(), 0)
    assert isinstance(refused.value, lifecore.LifecoreError)

    class Interrupted:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        s.fill(Interrupted(), 0)
    s.fill(filled(s, 1.0), 0)  # the stream is usable
    s.sync()


def test_a_builtin_kernels_pointer_must_hold_its_n_elements(dev) -> None:
    # Before: the launch was issued; on the emulated device a tensor too small lost the device
    # (an illegal address), and a Buffer too small was written past its end into the pool.
    s = dev.stream()
    x = np.arange(N, dtype=np.float32)
    small = np.zeros(4, np.float32)
    small_buf = filled(s, 5.0, 4)
    neighbour = filled(s, 9.0, N)
    before = [small.copy(), dev.memory_stats()]
    with pytest.raises(InvalidArgumentError, match=r"launch: scale_f32\(.*\): argument 'out' holds 16 bytes, but the "
                                                   r"launch covers 64 elements of 4 bytes \(min\(n = 64, grid.x \* "
                                                   r"block.x\)\): 256 \(nothing was issued\)"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, x, small])
    with pytest.raises(InvalidArgumentError, match=r"argument 'out' holds 16 bytes"):
        s.launch(K.scale_f32, 1, N, [N, 2.0, x, small_buf])
    with pytest.raises(InvalidArgumentError, match=r"argument 'x' holds 16 bytes"):
        s.launch(K.add_f32, 1, N, [N, small, x, x])
    with pytest.raises(InvalidArgumentError, match=r"axpy_info_f32\(.*\): argument 'y' holds 16 bytes, but the "
                                                   r"launch covers 64"):
        s.launch(K.axpy_info_f32, 1, N, [x, small], info=[N, K.float_bits(1.0)])
    assert_nothing_changed(dev, s, [small], before)
    assert not dev.lost
    assert np.all(f32(s, small_buf) == 5.0) and np.all(f32(s, neighbour) == 9.0)
    s.launch(K.scale_f32, 1, 4, [4, 2.0, x, small])  # n = 4 fits
    s.launch(K.scale_f32, 1, 1, [0, 2.0, small, small])  # nothing to do: no bytes needed
    s.launch(K.scale_f32, 1, 4, [N, 1.0, small, small])  # n = 64 over 4 threads: 4 elements
    s.sync()
    assert np.array_equal(small, 2.0 * x[:4])


@pytest.mark.parametrize("grid, block", [((1, 3), 8), (1, (8, 2)), ((1, 1, 2), 8), (1, (8, 1, 2))])
def test_a_builtin_kernel_refuses_y_and_z(dev, grid, block) -> None:
    # Before: the emulated device ran x once whatever y and z were, where a device's built-in
    # kernel, indexed by x alone, repeats the x range in every block along y and z: y = a*x + y
    # landed once in CI and three times on a GPU.
    s = dev.stream()
    x, y = filled(s, 1.0, 8), filled(s, 1.0, 8)
    before = dev.memory_stats()
    with pytest.raises(InvalidArgumentError, match=r"launch: axpy_f32\(.*\): a built-in kernel is one-dimensional, "
                                                   r"but grid is \(.*\) and block is \(.*\): on a device every block "
                                                   r"along y or z would repeat the x range; give y = z = 1 "
                                                   r"\(nothing was issued\)"):
        s.launch(K.axpy_f32, grid, block, [8, 1.0, x, y])
    assert dev.memory_stats() == before
    s.launch(K.axpy_f32, (1, 1, 1), (8, 1, 1), [8, 1.0, x, y])  # y = z = 1 written out is one-dimensional
    assert np.all(f32(s, y) == 2.0)


def test_a_builtin_kernel_refuses_more_than_two_to_the_32_threads(dev) -> None:
    # Its element index is 32 bits: on a device a thread past 2^32 wraps onto an element another
    # thread does (y = a*x + y twice); the emulated device ran each element once.
    s = dev.stream()
    x, y = filled(s, 1.0, 8), filled(s, 1.0, 8)
    with pytest.raises(InvalidArgumentError, match=r"grid.x \* block.x = 4294968320 threads, above 2\^32: a "
                                                   r"built-in kernel's element index is 32 bits"):
        s.launch(K.axpy_f32, 2**22 + 1, 1024, [8, 1.0, x, y])
    s.launch(K.axpy_f32, 2**22, 1024, [8, 1.0, x, y])  # exactly 2^32 threads: no index wraps
    assert np.all(f32(s, y) == 2.0)


def test_a_builtin_kernel_refuses_a_tensor_of_another_element_type(dev) -> None:
    # Before: a float64 array given to scale_f32 was read as float32, and its output was
    # numbers, wrong ones. A tensor or a typed view names its type, so the launch compares it;
    # a Buffer is bytes and names none, and copy and fill move bytes of any type.
    s = dev.stream()
    x = np.arange(N, dtype=np.float32)
    out = np.full(N, 3.0, np.float32)
    buf = filled(s, 5.0)
    read_only = np.arange(N, dtype=np.float64)
    read_only.flags.writeable = False  # NumPy before 2.2.5 gives it through its array interface
    before = [out.copy(), dev.memory_stats()]

    def refused(name: str, held: str) -> str:
        return (rf"^launch: scale_f32\(n: u32, a: f32, x: const ptr, out: ptr\): argument '{name}' holds {held} "
                rf"elements, but the kernel reads float32 \(out\[i\] = a \* x\[i\]\); pass a float32 tensor, or a "
                rf"Buffer \(nothing was issued\)$")

    for wrong, held in ((np.arange(N, dtype=np.float64), "float64"), (np.arange(N, dtype=np.int32), "int32"),
                        (x.view(np.uint8), "uint8"), (read_only, "float64"),
                        (np.from_dlpack(buf.view("uint8")), "uint8"), (buf.view("int32"), "int32")):
        with pytest.raises(InvalidArgumentError, match=refused("x", held)):
            s.launch(K.scale_f32, 1, N, [N, 2.0, wrong, out])
    with pytest.raises(InvalidArgumentError, match=refused("out", "float64")):
        s.launch(K.scale_f32, 1, N, [N, 2.0, x, np.zeros(N, np.float64)])
    with pytest.raises(InvalidArgumentError, match=refused("out", "float64")):
        s.launch(K.scale_f32, 1, N // 2, [N // 2, 2.0, x, buf.view("float64")])
    with pytest.raises(InvalidArgumentError, match=r"^launch: axpy_info_f32\(.*\): argument 'y' holds int64 elements"):
        s.launch(K.axpy_info_f32, 1, N, [x, np.zeros(N, np.int64)], info=[N, K.float_bits(1.0)])
    assert_nothing_changed(dev, s, [out], before)
    s.launch(K.scale_f32, 1, N, [N, 2.0, x, out])  # float32, and an untyped Buffer, are taken
    s.launch(K.scale_f32, 1, N, [N, 2.0, np.from_dlpack(buf.view("float32")), buf])
    s.launch(K.scale_f32, 1, N, [N, 1.0, buf, buf.view("float32", (N // 2, 2))])  # a typed view of float32
    wide = np.zeros(N // 2, np.float64)
    s.fill(wide, ONE)  # fill writes 32-bit words into memory of any type
    s.sync()
    assert np.array_equal(out, 2.0 * x) and np.all(f32(s, buf) == 10.0)
    assert np.array_equal(wide.view(np.float32), np.ones(N, np.float32))


def test_a_builtin_kernel_refuses_a_torch_tensor_of_another_element_type(dev) -> None:
    torch = torch_or_skip()
    s = dev.stream()
    out = torch.full((N,), 3.0)
    for dtype, held in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.bool, "bool"),
                        (torch.complex64, "complex64")):
        wrong = torch.zeros(N, dtype=dtype)
        with pytest.raises(InvalidArgumentError, match=rf"argument 'x' holds {held} elements, but the kernel reads "
                                                       rf"float32"):
            s.launch(K.scale_f32, 1, N, [N, 2.0, wrong, out])
    s.sync()
    assert torch.equal(out, torch.full((N,), 3.0))
    s.launch(K.scale_f32, 1, N, [N, 2.0, torch.ones(N), out])
    s.sync()
    assert torch.equal(out, torch.full((N,), 2.0))


ELEMENT_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
                 "float64", "bfloat16", "bool")


def test_an_element_type_has_one_name_in_views_payloads_and_refusals(dev) -> None:
    """The name Buffer.view takes is the name a view (and a NumPy or torch tensor of it) is
    refused under and the name a payload built from such an array reports, for every type a view
    can take (NumPy has no bfloat16; torch, when installed, has them all)."""
    try:
        import torch
    except ImportError:
        torch = None
    s = dev.stream()
    buf = s.alloc(4 * N)
    out = np.zeros(N, np.float32)
    for name in ELEMENT_TYPES:
        view = buf.view(name)
        assert view.dtype == name and repr(view).startswith(f"BufferView(dtype={name},")
        tensors = [view]
        if name != "bfloat16":
            tensors.append(np.from_dlpack(view))
        if torch is not None:
            tensors.append(torch.from_dlpack(view))
        for tensor in tensors[1:]:
            assert CapturePayload.from_array(tensor).dtype == name
        if name == "float32":
            continue
        for given in tensors:
            with pytest.raises(InvalidArgumentError, match=rf"argument 'x' holds {name} elements, but the kernel"):
                s.launch(K.scale_f32, 1, N, [N, 2.0, given, out])
        del tensors
    s.sync()
    assert np.array_equal(out, np.zeros(N, np.float32))
    with pytest.raises(InvalidArgumentError, match=r"unsupported dtype complex64 \(supported: "
                                                   + ", ".join(ELEMENT_TYPES) + r"\)"):
        buf.view("complex64")


def test_an_f32_argument_past_the_float32_range_is_refused(dev) -> None:
    # Before: it reached the kernel as an infinity (float_bits refused the same value).
    s = dev.stream()
    x = np.ones(N, np.float32)
    y = np.zeros(N, np.float32)
    for value in (1e300, -1e39, 3.5e38):
        with pytest.raises(LifecoreOverflowError, match=r"axpy_f32\(.*\): argument 'a' = .* is outside the float32 "
                                                        r"range"):
            s.launch(K.axpy_f32, 1, N, [N, value, x, y])
    s.sync()
    assert not y.any()
    s.launch(K.axpy_f32, 1, N, [N, float("inf"), x, y])  # an infinity given as one is itself
    s.launch(K.scale_f32, 1, N, [N, 3.4028234663852886e38, x, x])  # the largest float32
    s.sync()
    assert np.all(np.isinf(y)) and np.all(x == np.float32(3.4028234663852886e38))


def _every_use(s, buf, tensor):
    """(argument label, call) for each operation that takes ``tensor`` where ``buf`` goes."""
    return [
        ("write: argument 'data'", lambda: s.write(buf, tensor)),
        ("read_into: argument 'out'", lambda: s.read_into(buf, tensor)),
        ("copy: argument 'src'", lambda: s.copy(buf, tensor)),
        ("copy: argument 'dst'", lambda: s.copy(tensor, buf)),
        ("fill: argument 'buf'", lambda: s.fill(tensor, 0)),
        ("launch: argument 'x'", lambda: s.launch(K.scale_f32, 1, 16, [16, 2.0, tensor, buf])),
    ]


def test_a_description_whose_bytes_run_past_the_top_of_the_address_space_is_refused(dev) -> None:
    # Before: data + byte_offset was checked, the end of the bytes after it was not; a copy ran
    # there and the process crashed (a segmentation fault).
    s = dev.stream()
    buf = filled(s, 1.0, 16)
    before = dev.memory_stats()
    past = Producer(2**64 - 32, [16])  # 64 bytes from 32 below the top
    for label, call in _every_use(s, buf, past):
        with pytest.raises(LifecoreOverflowError, match=rf"^{label}: its data \+ byte_offset \+ its bytes"):
            call()
    assert np.frombuffer(s.read(buf), np.float32).tolist() == [1.0] * 16
    assert dev.memory_stats() == before


def test_a_block_table_out_whose_entries_run_past_the_top_of_the_address_space_is_refused() -> None:
    from lifecore.sequence import AdmissionCoordinator

    c = AdmissionCoordinator(domains={"kv": 4 * 4096}, page_bytes=4096, tokens_per_page=16, max_active_sequences=2)
    sessions = [c.admit(f"r{i}", 16, 32).resources.open_session() for i in range(2)]
    with pytest.raises(LifecoreOverflowError, match=r"^block_table: argument 'out': its data \+ byte_offset \+ its bytes"):
        c.block_table(sessions, 4, Producer(2**64 - 16, [2, 4], code=0))


def test_a_description_of_bytes_at_a_null_pointer_is_refused(dev) -> None:
    # Before: write() copied from address 0 (the process crashed); copy, launch and fill failed
    # in the driver (DriverError) without naming the argument.
    s = dev.stream()
    buf = filled(s, 1.0, 16)
    before = [dev.memory_stats()]
    null = Producer(0, [16])
    offset = Producer(0, [16], byte_offset=4096)  # data + byte_offset is not null: data is
    calls = [
        ("write: argument 'data'", lambda: s.write(buf, offset)),
        ("copy: argument 'src'", lambda: s.copy(buf, offset)),
        *_every_use(s, buf, null),
    ]
    for label, call in calls:
        with pytest.raises(InvalidArgumentError, match=rf"^{label} describes 64 bytes at a null data pointer$"):
            call()
    assert_nothing_changed(dev, s, [], before)
    assert np.all(f32(s, buf) == 1.0)
