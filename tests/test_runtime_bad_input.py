"""Bad input to Device / Stream / Buffer / Graph / launch: a clear exception, nothing changed."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import (
    BackendUnavailableError,
    ClosedError,
    InvalidArgumentError,
    LifecoreTypeError,
)
from lifecore import kernels as K
from lifecore.testing import offers_fault_injection

from backend_roles import EMULATED

N = 64


@pytest.fixture(params=["hardware", "software"])
def device(request):
    with lifecore.Device(EMULATED, graphs=request.param) as dev:
        yield dev


@pytest.fixture
def stream(device):
    return device.stream()


def unchanged(device, before) -> None:
    assert device.memory_stats() == before


@pytest.mark.parametrize("kwargs, named", [
    ({"backend": "tpu"}, "Device: unknown backend 'tpu'"),
    ({"backend": EMULATED, "graphs": "firmware"}, "Device: "),
    ({"backend": EMULATED, "capture_mode": "loose"}, "Device: "),
    ({"backend": EMULATED, "ordinal": -1}, "Device: device ordinal must be >= 0"),
    ({"backend": EMULATED, "ordinal": 99}, r"Device: device ordinal 99 is out of range \(the mock has \d+ devices"),
])
def test_device_arguments(kwargs, named) -> None:
    # The message starts with the call (an ordinal past the devices once started with the
    # backend's name, unlike a negative one).
    with pytest.raises(InvalidArgumentError, match="^" + named):
        lifecore.Device(**kwargs)


def test_unavailable_backend_says_why() -> None:
    missing = [info.name for info in lifecore.backends() if not info.available]
    if not missing:
        pytest.skip("every registered backend is available on this machine")
    for name in missing:
        with pytest.raises(BackendUnavailableError, match=name):
            lifecore.Device(name)


def test_capture_modes_are_accepted() -> None:
    for mode in ("thread_local", "global", "relaxed"):
        with lifecore.Device(EMULATED, capture_mode=mode) as dev:
            assert dev.capture_mode == mode
            s = dev.stream()
            x = s.alloc(16)
            s.fill(x, 1)
            assert s.capture(lambda st: st.fill(x, 2)).node_count == 1


@pytest.mark.parametrize("nbytes", [0, -1, -(2**40), 2**62])
def test_alloc_sizes(device, stream, nbytes) -> None:
    before = device.memory_stats()
    with pytest.raises(InvalidArgumentError, match="alloc"):
        stream.alloc(nbytes)
    unchanged(device, before)


def test_alloc_more_than_the_device_has_fails_cleanly(device, stream) -> None:
    before = device.memory_stats()
    with pytest.raises(lifecore.LifecoreError):
        stream.alloc(2**60)
    unchanged(device, before)


@pytest.mark.parametrize("nbytes", [1.5, "16", None])
def test_alloc_types(stream, nbytes) -> None:
    with pytest.raises(TypeError):
        stream.alloc(nbytes)


def test_buffer_of_another_device(device, stream) -> None:
    with lifecore.Device(EMULATED, graphs=device.graphs) as other:
        foreign = other.stream().alloc(4 * N)
        mine = stream.alloc(4 * N)
        before = device.memory_stats()
        for call in (
            lambda: stream.write(foreign, b"\0" * 16),
            lambda: stream.read(foreign),
            lambda: stream.fill(foreign, 0),
            lambda: stream.copy(mine, foreign),
            lambda: stream.copy(foreign, mine),
            lambda: stream.launch(K.scale_f32, 1, N, [N, 1.0, foreign, mine]),
        ):
            with pytest.raises(InvalidArgumentError, match="another device"):
                call()
        unchanged(device, before)


def test_freed_buffer(device, stream) -> None:
    buf = stream.alloc(4 * N)
    other = stream.alloc(4 * N)
    assert buf.alive and buf.nbytes == 4 * N and buf.ptr != 0 and buf.device is device
    buf.free()
    assert not buf.alive and "freed" in repr(buf)
    with pytest.raises(ClosedError):
        buf.free()
    with pytest.raises(ClosedError):
        buf.ptr
    for call in (
        lambda: stream.write(buf, b"\0" * 16),
        lambda: stream.read(buf),
        lambda: stream.fill(buf, 0),
        lambda: stream.copy(other, buf),
        lambda: stream.launch(K.scale_f32, 1, N, [N, 1.0, buf, other]),
    ):
        with pytest.raises(ClosedError, match="freed"):
            call()


def test_write_fill_copy_sizes(device, stream) -> None:
    buf = stream.alloc(4 * N)
    odd = stream.alloc(6)
    other = stream.alloc(8 * N)
    before = device.memory_stats()
    with pytest.raises(InvalidArgumentError):
        stream.write(buf, b"")
    with pytest.raises(InvalidArgumentError):
        stream.write(buf, b"\0" * (4 * N + 1))
    with pytest.raises(LifecoreTypeError):
        stream.write(buf, "text")
    with pytest.raises(InvalidArgumentError, match="multiple of 4"):
        stream.fill(odd, 0)
    with pytest.raises(InvalidArgumentError, match="same size"):
        stream.copy(buf, other)
    with pytest.raises(OverflowError, match="'value'"):  # a 32-bit pattern: -2**31 to 2**32 - 1
        stream.fill(buf, 2**32)
    unchanged(device, before)
    stream.write(buf, bytearray(8))  # any bytes-like, up to the buffer's size
    stream.write(buf, memoryview(np.zeros(N, np.float32)))
    assert stream.read(buf) == bytes(4 * N)


def axpy_operands(device, stream):
    """x and a zeroed y for axpy_f32 (synced), and the memory stats a refused launch leaves."""
    x = stream.alloc(4 * N)
    y = stream.alloc(4 * N)
    stream.fill(y, 0)
    stream.sync()
    return x, y, device.memory_stats()


def test_launch_argument_checks(device, stream) -> None:
    x, y, before = axpy_operands(device, stream)
    type_errors = [
        [N, 1.0, x],                     # too few
        [N, 1.0, x, y, y],               # too many
        [1.5, 1.0, x, y],                # float for u32
        [N, "a", x, y],                  # str for f32
        [N, 1.0, 3, y],                  # int for a pointer
        [N, 1.0, x, None],               # None for a pointer
        [x, 1.0, x, y],                  # Buffer for u32
    ]
    for args in type_errors:
        with pytest.raises(LifecoreTypeError):
            stream.launch(K.axpy_f32, 1, N, args)
    for args in ([-1, 1.0, x, y], [2**32, 1.0, x, y], [2**70, 1.0, x, y]):
        with pytest.raises(InvalidArgumentError):
            stream.launch(K.axpy_f32, 1, N, args)
    with pytest.raises(LifecoreTypeError):
        stream.launch(K.axpy_f32, 1, N, "args")
    with pytest.raises(TypeError):
        stream.launch("axpy_f32", 1, N, [N, 1.0, x, y])
    unchanged(device, before)
    assert stream.read(y) == bytes(4 * N)  # nothing ran
    stream.launch(K.axpy_f32, 1, N, (N, 1, x, y))  # an int for a float is fine


def test_launch_refuses_a_bool_for_a_number(device, stream) -> None:
    """True is not a count: a bool grid, block, info word or scalar argument ran (as 1)."""
    x, y, before = axpy_operands(device, stream)
    for grid, block, args in ((True, N, [N, 1.0, x, y]), ((1, True), N, [N, 1.0, x, y]), (1, True, [N, 1.0, x, y]),
                              (1, (N, True), [N, 1.0, x, y]), (1, N, [True, 1.0, x, y]), (1, N, [N, True, x, y])):
        with pytest.raises(LifecoreTypeError, match="bool"):
            stream.launch(K.axpy_f32, grid, block, args)
    with pytest.raises(LifecoreTypeError, match="bool"):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[True, K.float_bits(1.0)])
    unchanged(device, before)
    assert stream.read(y) == bytes(4 * N)  # nothing ran


def test_a_torch_bool_tensor_is_no_count(device, stream) -> None:
    """torch.tensor(True) reads as 1 through __index__: alloc made a 1-byte buffer of it and
    Device took it as ordinal 0. It is refused where a number is wanted, with what it is named;
    a bool tensor as memory (a copy's source) is still memory."""
    torch = pytest.importorskip("torch")
    before = device.memory_stats()
    for flag in (torch.tensor(True), torch.tensor([True])):
        with pytest.raises(LifecoreTypeError, match="nbytes.*torch bool tensor"):
            stream.alloc(flag)
    unchanged(device, before)
    with pytest.raises(LifecoreTypeError, match="ordinal.*torch bool tensor"):
        lifecore.Device(EMULATED, torch.tensor(False))
    assert stream.alloc(torch.tensor(8)).nbytes == 8  # an integer tensor is a count
    b = stream.alloc(4)
    stream.copy(b, torch.tensor([True, False, True, True]))
    assert stream.read(b) == bytes([1, 0, 1, 1])


def test_launch_and_view_take_numpy_scalars_as_the_other_counts_do(device, stream) -> None:
    """alloc, admit and the other counts take a NumPy integer (anything with __index__); launch
    refused one for its grid, block, info words and scalar arguments (a NumPy float too), and
    view for its shape."""
    host = np.arange(N, dtype=np.float32)
    x = stream.alloc(4 * N)
    y = stream.alloc(4 * N)
    stream.write(x, host)
    stream.fill(y, 0)
    stream.launch(K.axpy_f32, np.int64(1), (np.int32(N),), [np.uint32(N), np.float32(2.0), x, y])
    stream.launch(K.axpy_info_f32, (np.int64(1),), np.int16(N), [x, y],
                  info=[np.int64(N), np.uint32(K.float_bits(1.0))])
    assert np.frombuffer(stream.read(y), np.float32).tolist() == (3 * host).tolist()
    assert y.view("float32", (np.int64(2), np.int32(N // 2))).shape == (2, N // 2)
    for args in ([np.array([N]), 1.0, x, y], [N, np.array(1.0), x, y], [np.float32(N), 1.0, x, y]):
        with pytest.raises(LifecoreTypeError):  # an array is not a scalar, a float not a count
            stream.launch(K.axpy_f32, 1, N, args)
    for shape in ((np.float64(N),), (np.bool_(True),)):
        with pytest.raises(LifecoreTypeError):
            y.view("float32", shape)


def test_launch_reads_a_snapshot_of_its_arguments(device, stream) -> None:
    # A list subclass's __iter__ answers for the list: more items than it holds are counted.
    class Longer(list):
        def __iter__(self):
            return iter([1.0] * 200)

    x = stream.alloc(4 * N)
    with pytest.raises(LifecoreTypeError, match="got 200"):
        stream.launch(K.scale_f32, 1, N, Longer([N, 2.0, x, x]))

    # Python code run while an argument is converted (a tensor's __dlpack_device__) grows the
    # list, or drops the last reference to a Buffer already converted: the launch goes with
    # the items it was given, and the Buffer lives until it returns.
    host = np.arange(N, dtype=np.float32)
    for change in ("grow", "drop"):
        args = [N, 2.0, stream.alloc(4 * N), None]
        stream.write(args[2], host.tobytes())
        out = np.zeros(N, np.float32)

        class Meddler:
            def __dlpack_device__(self):
                if change == "grow":
                    args.extend([1.5] * 200)
                else:
                    args[2] = None
                return out.__dlpack_device__()

            def __dlpack__(self, **kw):
                return out.__dlpack__(**kw)

        args[3] = Meddler()
        stream.launch(K.scale_f32, 1, N, args)
        stream.sync()
        assert out.tolist() == (2 * host).tolist(), change


@pytest.mark.parametrize("dims", [0, -1, (), (1, 1, 1, 1), (1, 0), (2**31,), (1, 65536)])
def test_grid_values(stream, dims) -> None:
    x = stream.alloc(4 * N)
    with pytest.raises(InvalidArgumentError):
        stream.launch(K.scale_f32, dims, N, [N, 1.0, x, x])


@pytest.mark.parametrize("dims", [0, 1025, (32, 33), (1, 1, 65)])
def test_block_values(stream, dims) -> None:
    x = stream.alloc(4 * N)
    with pytest.raises(InvalidArgumentError):
        stream.launch(K.scale_f32, 1, dims, [N, 1.0, x, x])


@pytest.mark.parametrize("dims", ["1", 1.0, None, (1.0,), [1, "2"]])
def test_dim_types(stream, dims) -> None:
    x = stream.alloc(4 * N)
    with pytest.raises(LifecoreTypeError):
        stream.launch(K.scale_f32, dims, N, [N, 1.0, x, x])


def test_info_checks(device, stream) -> None:
    x = stream.alloc(4 * N)
    y = stream.alloc(4 * N)
    before = device.memory_stats()
    with pytest.raises(LifecoreTypeError, match="info"):
        stream.launch(K.axpy_f32, 1, N, [x, y], info=[N])  # no metadata parameter first
    with pytest.raises(LifecoreTypeError):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, 1.5])
    with pytest.raises(LifecoreTypeError):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=5)
    with pytest.raises(InvalidArgumentError):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, 2**32])
    with pytest.raises(InvalidArgumentError):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[])
    with pytest.raises(LifecoreTypeError):
        stream.launch(K.axpy_info_f32, 1, N, [x], info=[N, 0])
    unchanged(device, before)


def test_a_metadata_buffer_of_the_callers_own_is_refused(device, stream) -> None:
    """axpy_info_f32 reads n from its metadata buffer: given as a pointer argument (a Buffer, a
    one-word array, a float32 array whose bits would be read as n), that n escaped every extent
    check, and the kernel wrote past a 4-element y. Only info= words are taken; nothing is
    issued, and a launch with info= after it works."""
    info = stream.alloc(8)
    stream.write(info, np.array([N, K.float_bits(5.0)], np.uint32))
    x = stream.alloc(4 * N)
    stream.write(x, np.ones(N, np.float32))
    y = stream.alloc(4 * N)
    stream.fill(y, 0)
    whole_y = np.from_dlpack(y.view("float32"))
    short_y = whole_y[:4]  # passed back in: the first 16 bytes of y
    before = device.memory_stats()
    for given in (info, np.zeros(1, np.float32), np.zeros(2, np.uint32)):
        with pytest.raises(InvalidArgumentError, match=r"^launch: axpy_info_f32\(.*\) reads its metadata buffer "
                                                       r"\('info'\) from info="):
            stream.launch(K.axpy_info_f32, 1, N, [given, x, short_y])
    stream.sync()
    assert not whole_y.any()  # nothing written, inside the 4 elements or past them
    del whole_y, short_y
    unchanged(device, before)
    stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, K.float_bits(5.0)])
    assert np.frombuffer(stream.read(y), np.float32).tolist() == [5.0] * N


def test_destroyed_graph(stream) -> None:
    x = stream.alloc(16)
    graph = stream.capture(lambda st: st.fill(x, 1))
    graph.destroy()
    with pytest.raises(ClosedError, match="^replay: the graph was destroyed$"):
        graph.replay()
    with pytest.raises(TypeError):
        graph.replay("stream")


def test_kernels_module() -> None:
    assert [k.name for k in K.all_kernels()] == ["axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"]
    assert K.axpy_f32.params == ["u32", "f32", "ptr", "ptr"]
    assert K.axpy_info_f32.param_names == ["info", "x", "y"]
    assert K.float_bits(1.0) == 0x3F800000
    with pytest.raises(InvalidArgumentError, match="axpy_f32"):
        lifecore._core.builtin_kernel("nope")


def test_closed_device_rejects_everything() -> None:
    dev = lifecore.Device(EMULATED)
    s = dev.stream()
    buf = s.alloc(16)
    dev.close()
    assert "closed" in repr(dev)
    for call in (
        lambda: s.alloc(16),
        lambda: s.fill(buf, 0),
        lambda: s.graph_prepare(),
        lambda: s.begin_capture(),
        lambda: s.end_capture(),
        lambda: dev.stream(),
        lambda: dev.cleanup(),
        lambda: dev.inject_fault("launch_kernel", 1),
        lambda: s.handle,
    ):
        with pytest.raises(ClosedError):
            call()
    s.abort_capture()  # never fails
    buf.free()  # the memory went with the device; freeing is harmless


def test_memory_stats_keys(device) -> None:
    assert set(device.memory_stats()) == {
        "pool_bytes", "slices", "slices_in_use", "slices_retained", "slices_free", "slices_free_for_capture",
        "driver_allocations",
        "graphs_alive", "info_entries", "info_pinned", "windows_active", "arena_bytes", "arenas",
    }
    assert all(isinstance(v, int) for v in device.memory_stats().values())


def test_fault_injection_works_where_offered_and_is_refused_elsewhere(backend_name) -> None:
    with lifecore.Device(backend_name) as dev:
        if offers_fault_injection(dev):
            s = dev.stream()
            dev.inject_fault("memset_d32_async", 999)
            with pytest.raises(lifecore.DriverError) as failed:
                s.fill(s.alloc(16), 0)
                s.sync()
            assert failed.value.code == 999
            dev.clear_faults()
            s.fill(s.alloc(16), 0)
            s.sync()
        else:
            refusal = f"the {backend_name} backend does not offer it"
            with pytest.raises(lifecore.LifecoreError, match=refusal):
                dev.inject_fault("launch_kernel", 719)
            with pytest.raises(lifecore.LifecoreError, match=refusal):
                dev.clear_faults()


def test_review_of_launch_and_buffers_bad_input() -> None:
    """A third review's findings: each raised nothing, lost the device, or named nothing."""
    import numpy as np

    from lifecore import kernels as K
    from lifecore.errors import ClosedError, InvalidArgumentError, LifecoreOverflowError

    with lifecore.Device("mock") as device:
        s = device.stream()
        x, y = s.alloc(1024), s.alloc(1024)
        # One info word where the kernel reads two: the device was lost (an illegal address).
        with pytest.raises(InvalidArgumentError, match=r"info holds 1 word\(s\), but the kernel reads 2"):
            s.launch(K.axpy_info_f32, 4, 64, [x, y], info=[256])
        s.sync()
        assert not device.lost
        # Past 64 bits: out of range like any dimension past the limit, with its value (it was
        # an overflow, and a value from 2**63 on read "dimension too large"); an argument
        # overflows, naming the call and the argument; a float parameter takes it.
        for grid, words in ((2**64, "0 is 18446744073709551616, past any launch's limit"),
                            (2**63, "0 is 9223372036854775808, past any launch's limit"),
                            ((1, -(2**64)), "1 is -18446744073709551616, below 1")):
            with pytest.raises(InvalidArgumentError, match=rf"^launch: grid dimension {words}$"):
                s.launch(K.scale_f32, grid, 64, [256, 1.0, x, y])
        with pytest.raises(InvalidArgumentError, match=r"^launch: block dimension 0 must be between 1 and \d+, got 2147483648$"):
            s.launch(K.scale_f32, 1, 2**31, [256, 1.0, x, y])
        with pytest.raises(LifecoreOverflowError, match=r"argument 'n' = 18446744073709551616 does not fit in 64 bits"):
            s.launch(K.scale_f32, 4, 64, [2**64, 1.0, x, y])
        s.launch(K.scale_f32, 1, 1, [1, 2**64, x, y])  # 2**64 is a float32
        s.sync()
        assert np.frombuffer(s.read(y), np.float32)[0] == np.float32(2.0**64) * np.frombuffer(s.read(x), np.float32)[0]
        # Masked arrays: their masked elements were written, or overwritten.
        masked = np.ma.masked_array(np.arange(4, dtype=np.uint32), mask=[True, False, False, False])
        small = s.alloc(16)
        with pytest.raises(InvalidArgumentError, match=r"^write: argument 'data' is a NumPy masked array"):
            s.write(small, masked)
        with pytest.raises(InvalidArgumentError, match=r"^read_into: argument 'out' is a NumPy masked array"):
            s.read_into(small, masked)
        assert masked.data.tolist() == [0, 1, 2, 3]
        # A view of a freed buffer: it was made, and failed only at its first use.
        small.free()
        with pytest.raises(ClosedError, match=r"^view: the buffer was freed"):
            small.view("float32")


def test_an_array_of_python_objects_is_neither_written_nor_read_into(stream):
    # An object array's bytes are the addresses of its objects: written, they leaked addresses
    # to the device; read into, the bytes became "objects" and the next read crashed.
    buf = stream.alloc(16)
    stream.fill(buf, 0x41414141)
    before = stream.read(buf)
    objects = np.array([object(), "secret"], dtype=object)
    with pytest.raises(lifecore.LifecoreTypeError, match=r"^write: data holds Python objects \(buffer format 'O'\)"):
        stream.write(buf, objects)
    assert stream.read(buf) == before
    target = np.array([1, "x"], dtype=object)
    with pytest.raises(lifecore.LifecoreTypeError, match=r"^read_into: the target holds Python objects"):
        stream.read_into(buf, target)
    assert target.tolist() == [1, "x"]
    # A field that holds objects is refused too; a field merely named O holds data.
    records = np.zeros(2, dtype=[("a", "<i4"), ("b", "O")])
    with pytest.raises(lifecore.LifecoreTypeError, match="holds Python objects"):
        stream.write(buf, records)
    named = np.array([(7,), (9,)], dtype=[("O", "<i4")])
    stream.write(buf, named)
    assert np.frombuffer(stream.read(buf), "<i4")[:2].tolist() == [7, 9]
    out = np.zeros(4, dtype=[("O", "<i4")])
    stream.read_into(buf, out)
    assert out["O"][:2].tolist() == [7, 9]


@pytest.mark.parametrize("value", [2**128, 2**200, 2**1100, -(2**129), 1e39])
def test_float_bits_answers_every_number_past_float32_with_an_overflow_error(value):
    with pytest.raises(lifecore.LifecoreOverflowError, match="^float_bits: argument 'value' is outside the float32 range"):
        K.float_bits(value)


def test_a_view_takes_a_dtype_by_its_typestr(stream):
    import sys

    buf = stream.alloc(16)
    native, other = ("<", ">") if sys.byteorder == "little" else (">", "<")
    for spelling in (native + "f4", "=f4", "f4", "float32"):
        assert buf.view(spelling).dtype == "float32"
    assert buf.view("|u1").dtype == "uint8" and buf.view("i8").dtype == "int64"
    with pytest.raises(InvalidArgumentError, match=f"^view: dtype {other}f4 is not in the host's byte order"):
        buf.view(other + "f4")
    for unknown in ("<U4", "f3", "x"):
        with pytest.raises(InvalidArgumentError, match="^view: unsupported dtype"):
            buf.view(unknown)
    assert buf.views == 0


def test_a_view_dimension_past_63_bits_is_an_overflow_naming_the_shape(stream):
    buf = stream.alloc(16)
    for dimension in (2**63, 2**64):
        with pytest.raises(lifecore.LifecoreOverflowError, match="^view: argument 'shape' holds a dimension past"):
            buf.view("uint8", (dimension,))
    with pytest.raises(InvalidArgumentError, match="^view: a dimension is negative"):
        buf.view("uint8", (-(2**64),))
    assert buf.views == 0


def test_a_view_shape_with_a_zero_says_it_covers_no_bytes_whatever_its_other_dimensions(stream):
    # Before: (2**62, 0) was refused as holding more than the buffer's bytes (the check ran
    # dimension by dimension, before the zero).
    buf = stream.alloc(64)
    for shape in ((2**62, 0), (0, 2**62), (0, 16), (3, 2**40, 0)):
        with pytest.raises(InvalidArgumentError, match="^view: the shape covers 0 bytes, the buffer holds 64"):
            buf.view("int16", shape)
    with pytest.raises(InvalidArgumentError, match="^view: the shape holds more than the buffer's bytes"):
        buf.view("int16", (2**62, 1))
    assert buf.views == 0


@pytest.mark.parametrize("pair", [(True, False), (1, True), [True, 0], [1, np.True_], "torch"])
def test_dlpack_pairs_refuse_bools(stream, pair):
    # A list was once read as a pair of ints, so [True, 0] was taken as (1, 0).
    if pair == "torch":
        torch = pytest.importorskip("torch", reason="torch is not installed")
        pair = (torch.tensor(True), 0)  # its __index__ reads it as 1
    buf = stream.alloc(16)
    for name in ("max_version", "dl_device"):
        with pytest.raises(LifecoreTypeError, match=f"__dlpack__: {name} must be a pair of ints or None"):
            buf.__dlpack__(**{name: pair})
    assert buf.views == 0


def test_dlpack_pairs_out_of_range_say_so(stream):
    # Once "must be a pair of ints" (a LifecoreTypeError) for a pair of ints too large: an
    # overflow, as an int out of range is elsewhere, NumPy's too.
    buf = stream.alloc(16)
    for name in ("max_version", "dl_device"):
        for pair in ((2**70, 0), (1, -(2**31) - 1), (np.int64(2**40), 0), [2**40, 0], [0, np.int64(-(2**40))]):
            with pytest.raises(lifecore.LifecoreOverflowError,
                               match=rf"__dlpack__: {name} must be a pair of ints from -2\*\*31"):
                buf.__dlpack__(**{name: pair})
    assert buf.views == 0


def test_dlpack_pairs_take_any_sequence_of_two_ints_and_refuse_the_rest(stream):
    buf = stream.alloc(16)
    for pair in ((1, 0), [1, 0], np.array([1, 0]), (np.int64(1), np.int32(0))):
        capsule = buf.__dlpack__(max_version=pair)
        assert "versioned" in repr(capsule)
        del capsule
    for pair in ("10", b"10", (1, 0, 0), (1,), (1.0, 0), (1, None), {1: 0, 2: 0}):
        with pytest.raises(LifecoreTypeError, match="__dlpack__: max_version must be a pair of ints or None"):
            buf.__dlpack__(max_version=pair)

    class Refuses:
        def __index__(self):
            raise ValueError("no index here")

    with pytest.raises(ValueError, match="no index here"):  # the caller's own error, as it raised
        buf.__dlpack__(max_version=(Refuses(), 0))
    assert buf.views == 0


def test_a_numpy_integer_out_of_range_is_an_overflow_like_a_python_int(stream):
    # Once a LifecoreTypeError ("must be int, got int64"), though an in-range NumPy integer is taken.
    buf = stream.alloc(16)
    with pytest.raises(lifecore.LifecoreOverflowError, match="is out of the range it can hold"):
        stream.alloc(np.uint64(2**64 - 1))
    for value in (np.int64(-(2**31) - 1), np.int64(2**32)):
        with pytest.raises(lifecore.LifecoreOverflowError, match=r"^fill: argument 'value' must be between"):
            stream.fill(buf, value)
    stream.fill(buf, np.int64(7))
    stream.sync()
    assert np.frombuffer(stream.read(buf), dtype=np.uint32).tolist() == [7] * 4


def test_the_call_guard_lets_numpy_integers_through_only_where_an_int_is_taken():
    import ast

    from lifecore import _call_guard

    def annotation(text):
        return ast.parse(text, mode="eval").body

    assert _call_guard._takes_int(annotation("int")) and _call_guard._takes_int(annotation("int | None"))
    for text in ("tuple[int, int, int]", "Sequence[int]", "PointPosition", "CaptureCheckpoint"):
        assert not _call_guard._takes_int(annotation(text)), text
    assert _call_guard._integer(np.int64(-3)) == -3 and _call_guard._integer(np.bool_(True)) is None
    assert _call_guard._integer(True) is None and _call_guard._integer(2.0) is None



class _IndexRaises:
    """An integer-like object whose own __index__ fails with an error of its own."""

    def __index__(self) -> int:
        raise ZeroDivisionError("the caller's own __index__ failed")


@pytest.mark.parametrize("call", ["alloc", "fill", "graph_prepare", "capture", "Device"])
def test_an_error_raised_by_an_arguments_own_index_reaches_the_caller(device, stream, call) -> None:
    """Where the bindings convert an int (alloc's size, fill's value, an owner, a warmup count,
    a device ordinal), an error raised by the argument's own __index__ is the caller's and
    passes through as it is, as it does where lifecore reads the int itself (a step's tokens):
    not a LifecoreTypeError saying the argument is no int."""
    buffer = stream.alloc(16)
    before = device.memory_stats()
    calls = {
        "alloc": lambda: stream.alloc(_IndexRaises()),
        "fill": lambda: stream.fill(buffer, _IndexRaises()),
        "graph_prepare": lambda: stream.graph_prepare(owner=_IndexRaises()),
        "capture": lambda: stream.capture(lambda s: None, warmup=_IndexRaises()),
        "Device": lambda: lifecore.Device(EMULATED, _IndexRaises()),
    }
    with pytest.raises(ZeroDivisionError, match="the caller's own __index__ failed"):
        calls[call]()
    assert stream.capture_state.variant == lifecore.CaptureVariant.NO_CAPTURE  # nothing was armed
    unchanged(device, before)


@pytest.mark.parametrize("kind, value", [("n", 2**32), ("n", -1)])
def test_a_scalar_outside_its_kernels_type_is_an_overflow_either_way(stream, kind, value) -> None:
    """A value the kernel's parameter type cannot hold, above it or below it, is an overflow
    (also an InvalidArgumentError), as a value past 64 bits is; an info word likewise."""
    x, y = stream.alloc(4 * N), stream.alloc(4 * N)
    with pytest.raises(lifecore.LifecoreOverflowError, match=f"argument 'n' = {value} does not fit u32"):
        stream.launch(K.axpy_f32, 1, N, [value, 2.0, x, y])
    with pytest.raises(lifecore.LifecoreOverflowError, match=f"info word {2**32} does not fit 32 bits"):
        stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, 2**32])


def test_launch_takes_any_sequence_where_its_stub_says_sequence(stream) -> None:
    """grid, block and args are typed Sequence: a deque or a range is taken as a list is; a
    str or an iterator is still refused by name."""
    import collections

    x, y = stream.alloc(4 * N), stream.alloc(4 * N)
    stream.write(x, np.arange(N, dtype=np.float32))
    stream.fill(y, 0)
    stream.launch(K.axpy_f32, collections.deque([1]), range(N, N + 1), collections.deque([N, 2.0, x, y]))
    assert np.frombuffer(stream.read(y), np.float32).tolist() == (2 * np.arange(N, dtype=np.float32)).tolist()
    with pytest.raises(LifecoreTypeError, match=r"launch: args must be a sequence \(list, tuple, ...\), got str"):
        stream.launch(K.axpy_f32, 1, N, "args")
    with pytest.raises(LifecoreTypeError, match="launch: grid must be an int or a tuple of up to 3 ints"):
        stream.launch(K.axpy_f32, iter([1]), N, [N, 2.0, x, y])


def test_fill_takes_a_words_bits_signed_or_unsigned(device, stream) -> None:
    # Before: -1 (the pad a block table uses) was an overflow; 0xFFFFFFFF, the same bits, was not.
    buf = stream.alloc(16)
    stream.fill(buf, -1)
    assert np.frombuffer(stream.read(buf), np.uint32).tolist() == [0xFFFFFFFF] * 4
    stream.fill(buf, -(2**31))
    assert np.frombuffer(stream.read(buf), np.int32).tolist() == [-(2**31)] * 4
    for value in (-(2**31) - 1, 2**32):
        with pytest.raises(lifecore.LifecoreOverflowError, match=r"^fill: argument 'value' must be between "
                                                                r"-2\*\*31 and 2\*\*32 - 1"):
            stream.fill(buf, value)
    with pytest.raises(lifecore.LifecoreTypeError):
        stream.fill(buf, 1.0)
    assert np.frombuffer(stream.read(buf), np.int32).tolist() == [-(2**31)] * 4


def test_a_copy_between_overlapping_ranges_is_refused_and_changes_nothing(device, stream) -> None:
    # Before: the emulated device copied as memmove does, where a driver's copy is undefined.
    words = np.arange(16, dtype=np.uint32)
    buf = stream.alloc(64)
    stream.write(buf, words.tobytes())
    host = np.arange(8, dtype=np.float32)
    for dst, src in ((buf, buf), (buf.view("uint32"), buf), (host[:4], host[2:6])):
        with pytest.raises(InvalidArgumentError, match=r"^copy: argument 'dst' and 'src' share memory .* a device "
                                                       r"copy between overlapping ranges is undefined"):
            stream.copy(dst, src)
    assert np.frombuffer(stream.read(buf), np.uint32).tolist() == words.tolist()
    assert host.tolist() == list(range(8))
    other = stream.alloc(64)
    stream.copy(other, buf)  # disjoint ranges, as before
    assert np.frombuffer(stream.read(other), np.uint32).tolist() == words.tolist()
