"""The runtime's exact limits, each from both sides, and its numeric inputs at 2**32, 2**63, 2**64.

The last value inside a limit is accepted (and does its work); the first one outside is refused
with a clear lifecore error that is also a ValueError, and changes nothing: memory stats and the
contents of the buffers stay as they were. Limits (the driver's, as CUDA documents them):
a block of at most 1024 threads (x, y at most 1024, z at most 64); a grid of at most
(2**31 - 1, 65535, 65535) blocks; a u32 kernel argument up to 2**32 - 1; an info word from
-2**31 to 2**32 - 1; a buffer from 1 byte to the device's memory. Per-window reservation:
a slice one stream's warmup primed is never handed to another stream's window.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

import lifecore
from lifecore import InvalidArgumentError, LifecoreError
from lifecore import kernels as K

from backend_roles import EMULATED

N = 64
HUGE = [2**32, 2**63 - 1, 2**63, 2**64, 2**64 + 1]


@pytest.fixture(params=["hardware", "software"])
def device(request):
    with lifecore.Device(EMULATED, graphs=request.param) as dev:
        yield dev


@pytest.fixture
def stream(device):
    return device.stream()


def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def upload(stream, values) -> lifecore.Buffer:
    data = np.asarray(values, dtype=np.float32)
    buf = stream.alloc(data.nbytes)
    stream.write(buf, data.tobytes())
    return buf


def floats(stream, buf) -> np.ndarray:
    return np.frombuffer(stream.read(buf), dtype=np.float32)


def refused_changing_nothing(device, stream, call, buffers, kinds=(InvalidArgumentError,)) -> LifecoreError:
    """`call` raises one of `kinds` (a LifecoreError); memory stats and buffer contents stay."""
    stream.sync()
    before = device.memory_stats()
    contents = [stream.read(b) for b in buffers]
    with pytest.raises(kinds) as raised:
        call()
    assert isinstance(raised.value, LifecoreError)
    stream.sync()  # nothing was queued that fails later either
    assert device.memory_stats() == before
    assert [stream.read(b) for b in buffers] == contents
    return raised.value


# ---- launch geometry ------------------------------------------------------------------------


ONE_DIMENSIONAL = "a built-in kernel is one-dimensional"


@pytest.mark.parametrize("block", [1024, (1024,), (1, 1024), (32, 32), (1024, 1, 1), (16, 1, 64), (1, 16, 64),
                                   (1, 1, 64), (2, 8, 64)])
def test_a_block_at_the_thread_limit_is_accepted_and_runs(device, stream, block) -> None:
    x = upload(stream, np.arange(N))
    out = upload(stream, np.zeros(N))
    if isinstance(block, int) or all(d == 1 for d in block[1:]):
        stream.launch(K.scale_f32, N, block, [N, 2.0, x, out])
        np.testing.assert_array_equal(floats(stream, out), 2.0 * np.arange(N, dtype=np.float32))
    else:
        # Within the driver's limits, so the launch gets as far as the kernel's own rule: the
        # built-in kernels index by x alone (y and z would repeat the x range on a device).
        error = refused_changing_nothing(device, stream,
                                         lambda: stream.launch(K.scale_f32, N, block, [N, 2.0, x, out]), [out])
        assert ONE_DIMENSIONAL in str(error)


@pytest.mark.parametrize("block", [1025, (1025,), (1, 1025), (32, 33), (33, 32), (17, 1, 64), (1, 17, 64),
                                   (1, 1, 65), (1024, 2), (2, 1024), (1024, 1024), (65536, 65536)])
def test_a_block_past_the_thread_limit_is_refused(device, stream, block) -> None:
    x = upload(stream, np.ones(N))
    out = upload(stream, np.zeros(N))
    error = refused_changing_nothing(device, stream, lambda: stream.launch(K.scale_f32, 1, block, [N, 2.0, x, out]),
                                     [out])
    assert "block" in str(error)


@pytest.mark.parametrize("grid", [2**31 - 1, (2**31 - 1, 1, 1), (1, 65535), (1, 1, 65535), (1, 65535, 65535),
                                  (2**31 - 1, 65535, 65535)])
def test_a_grid_at_the_dimension_limits_is_accepted_and_runs(device, stream, grid) -> None:
    x = upload(stream, np.arange(N))
    out = upload(stream, np.zeros(N))
    if isinstance(grid, int) or all(d == 1 for d in grid[1:]):
        # n = N elements over blocks of one thread (2**31 - 1 threads, within the kernels'
        # 32-bit index); every block past the first N has nothing to do.
        stream.launch(K.scale_f32, grid, 1, [N, 3.0, x, out])
        np.testing.assert_array_equal(floats(stream, out), 3.0 * np.arange(N, dtype=np.float32))
    else:
        error = refused_changing_nothing(device, stream,
                                         lambda: stream.launch(K.scale_f32, grid, 1, [N, 3.0, x, out]), [out])
        assert ONE_DIMENSIONAL in str(error)


@pytest.mark.parametrize("grid", [2**31, (2**31, 1, 1), (1, 65536), (1, 1, 65536), (2**32 - 1,), (1, 2**32),
                                  (2**63 - 1,), (2**63,), (2**64,), (1, 2**64), 0, (1, 0), (1, 1, 0), -1])
def test_a_grid_past_the_dimension_limits_is_refused(device, stream, grid) -> None:
    x = upload(stream, np.ones(N))
    out = upload(stream, np.zeros(N))
    error = refused_changing_nothing(device, stream, lambda: stream.launch(K.scale_f32, grid, N, [N, 2.0, x, out]),
                                     [out])
    assert "grid" in str(error)


@pytest.mark.parametrize("block", [(2**32,), (1, 2**32), (2**63,), (2**64,), (1, 1, 2**64), 0, -1, (1, -1)])
def test_huge_and_non_positive_block_dimensions_are_refused(device, stream, block) -> None:
    x = upload(stream, np.ones(N))
    error = refused_changing_nothing(device, stream, lambda: stream.launch(K.scale_f32, 1, block, [N, 2.0, x, x]),
                                     [x])
    assert "block" in str(error)


# ---- kernel scalars and info words ----------------------------------------------------------


def test_the_largest_u32_argument_is_accepted_and_runs(stream) -> None:
    x = upload(stream, np.arange(N))
    out = upload(stream, np.zeros(N))
    # n = 2**32 - 1: the kernel covers min(n, threads) = N elements.
    stream.launch(K.scale_f32, 1, N, [2**32 - 1, 2.0, x, out])
    np.testing.assert_array_equal(floats(stream, out), 2.0 * np.arange(N, dtype=np.float32))
    stream.launch(K.scale_f32, 1, N, [0, 5.0, x, out])  # and the smallest: nothing to do
    np.testing.assert_array_equal(floats(stream, out), 2.0 * np.arange(N, dtype=np.float32))


@pytest.mark.parametrize("n", [2**32, 2**32 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -1, -(2**31), -(2**63),
                               -(2**63) - 1, -(2**64)])
def test_a_u32_argument_outside_32_bits_is_refused(device, stream, n) -> None:
    x = upload(stream, np.ones(N))
    out = upload(stream, np.zeros(N))
    error = refused_changing_nothing(device, stream, lambda: stream.launch(K.scale_f32, 1, N, [n, 2.0, x, out]),
                                     [out])
    assert "fit" in str(error)


@pytest.mark.parametrize("word", [2**32 - 1, -(2**31), 0])
def test_info_words_at_their_limits_are_accepted(stream, word) -> None:
    x = upload(stream, np.ones(N))
    y = upload(stream, np.zeros(N))
    # The first word is n (the kernel covers min(n, threads)); the second the bits of a.
    stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, f32_bits(2.0)])
    stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[word, f32_bits(0.5)])
    expected = 2.0 + (0.5 if word != 0 else 0.0)  # -2**31 is 2**31 as a u32: N elements too
    np.testing.assert_array_equal(floats(stream, y), np.full(N, expected, np.float32))


@pytest.mark.parametrize("word", [2**32, 2**32 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**31) - 1, -(2**63),
                                  -(2**64)])
def test_info_words_outside_32_bits_are_refused(device, stream, word) -> None:
    x = upload(stream, np.ones(N))
    y = upload(stream, np.zeros(N))
    refused_changing_nothing(device, stream,
                             lambda: stream.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, word]), [y])


def test_a_refused_info_word_is_named_as_given(device, stream) -> None:
    x = upload(stream, np.ones(N))
    error = refused_changing_nothing(device, stream,
                                     lambda: stream.launch(K.axpy_info_f32, 1, N, [x, x], info=[N, 2**63]), [x])
    assert re.search(rf"(?<![-\d]){2**63}(?!\d)", str(error)), str(error)


# ---- fill values and allocation sizes -------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 2**31, 2**32 - 1])
def test_fill_values_up_to_32_bits_are_written(stream, value) -> None:
    buf = stream.alloc(4 * N)
    stream.fill(buf, value)
    assert np.frombuffer(stream.read(buf), dtype=np.uint32).tolist() == [value] * N


@pytest.mark.parametrize("value", [2**32, 2**63, 2**64, -(2**31) - 1])
def test_fill_values_outside_32_bits_are_refused(device, stream, value) -> None:
    buf = stream.alloc(4 * N)
    stream.fill(buf, 7)
    error = refused_changing_nothing(device, stream, lambda: stream.fill(buf, value), [buf],
                                     kinds=(InvalidArgumentError, OverflowError))
    assert "value" in str(error)


def test_allocation_sizes_past_32_bits(stream) -> None:
    one = stream.alloc(1)
    assert one.nbytes == 1
    four_gib = stream.alloc(2**32)  # past 32 bits: the emulated device's memory is larger
    assert four_gib.nbytes == 2**32
    four_gib.free()
    one.free()


@pytest.mark.parametrize("nbytes", [0, -1, 2**63 - 1, -(2**63)])
def test_allocation_sizes_outside_the_device_memory_are_refused(device, stream, nbytes) -> None:
    keep = upload(stream, np.ones(N))
    error = refused_changing_nothing(device, stream, lambda: stream.alloc(nbytes), [keep])
    assert "nbytes" in str(error)


def test_one_byte_past_the_device_memory_is_refused(device, stream) -> None:
    keep = upload(stream, np.ones(N))
    error = refused_changing_nothing(device, stream, lambda: stream.alloc(2**40), [keep])
    total = int(str(error).split("device's memory (")[1].split(" ")[0])
    refused_changing_nothing(device, stream, lambda: stream.alloc(total + 1), [keep])
    # The last size inside the limit is accepted (with nothing else on the device).
    keep.free()
    stream.sync()
    device.cleanup()
    whole = stream.alloc(total)
    assert whole.nbytes == total
    whole.free()


@pytest.mark.parametrize("nbytes", [2**63, 2**64, 2**64 + 1, -(2**63) - 1])
def test_allocation_sizes_outside_64_bits_are_refused(device, stream, nbytes) -> None:
    keep = upload(stream, np.ones(N))
    refused_changing_nothing(device, stream, lambda: stream.alloc(nbytes), [keep],
                             kinds=(InvalidArgumentError, OverflowError))


# ---- per-window reservation -----------------------------------------------------------------


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_slice_primed_by_one_window_is_not_handed_to_another(graphs) -> None:
    # relaxed: b may allocate on this thread while a's hardware recording is live.
    with lifecore.Device(EMULATED, graphs=graphs, capture_mode="relaxed") as device:
        a_slice_primed_by_one_window_is_not_handed_to_another(device)


def a_slice_primed_by_one_window_is_not_handed_to_another(device) -> None:
    a = device.stream()
    b = device.stream()
    x = upload(a, np.ones(N))
    a.sync()
    # a's warmup uses a temporary and frees it: the slice is primed, kept for a's recording.
    a.graph_prepare()
    tmp = a.alloc(4 * N)
    a.copy(tmp, x)
    primed = tmp.ptr
    tmp.free()
    a.begin_capture()
    allocations = device.memory_stats()["driver_allocations"]
    # Another stream's window of the same shape must not be handed a's slice.
    b.graph_prepare()
    other = b.alloc(4 * N)
    assert other.ptr != primed
    assert device.memory_stats()["driver_allocations"] == allocations + 1
    # a's recording finds its primed slice without allocating.
    again = a.alloc(4 * N)
    assert again.ptr == primed
    assert device.memory_stats()["driver_allocations"] == allocations + 1
    a.copy(again, x)
    graph = a.end_capture()
    b.abort_capture()
    graph.replay()
    np.testing.assert_array_equal(floats(a, again), np.ones(N, np.float32))
    graph.destroy()


# ---- how far a kernel writes ----------------------------------------------------------------


def _launch_builtin(stream, name, n, threads, x, y, out):
    if name == "axpy_f32":
        stream.launch(K.axpy_f32, 1, threads, [n, 2.0, x, out])
    elif name == "scale_f32":
        stream.launch(K.scale_f32, 1, threads, [n, 2.0, x, out])
    elif name == "add_f32":
        stream.launch(K.add_f32, 1, threads, [n, x, y, out])
    else:
        stream.launch(K.axpy_info_f32, 1, threads, [x, out], info=[n, f32_bits(2.0)])


@pytest.mark.parametrize("name", ["axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"])
@pytest.mark.parametrize("n, threads", [(N - 1, N), (N, N - 1), (1, N), (N, 1)])
def test_a_kernel_writes_exactly_min_of_n_and_threads_elements(stream, name, n, threads) -> None:
    x = upload(stream, np.arange(1, N + 1))
    y = upload(stream, np.full(N, 10.0))
    out = upload(stream, np.full(N, -7.0))
    _launch_builtin(stream, name, n, threads, x, y, out)
    got = floats(stream, out)
    count = min(n, threads)
    xs = np.arange(1, N + 1, dtype=np.float32)
    written = {"axpy_f32": 2 * xs - 7, "scale_f32": 2 * xs, "add_f32": xs + 10, "axpy_info_f32": 2 * xs - 7}[name]
    np.testing.assert_array_equal(got[:count], written[:count])
    np.testing.assert_array_equal(got[count:], np.full(N - count, -7.0, np.float32))  # untouched past the end


# ---- sizes and addresses a producer describes, and the driver diagnostics' own arguments ----

def test_a_host_tensor_whose_bytes_pass_2_64_is_refused_by_write_and_read_into(device, stream):
    """write and read_into took nanobind's unchecked product of the shape: 2**62 + 4 rows of 4
    bytes wrapped to 16, and a 16-byte buffer took the tensor as a 16-byte one. Its extents'
    product passes 2**63 - 1 too, where nanobind's own int64 product would overflow: refused first."""
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    buffer = stream.alloc(16)
    stream.fill(buffer, 7)
    huge = Producer(ctypes.addressof(memory), [2**62 + 4, 4], bits=8)
    before = device.memory_stats()
    for call in (lambda: stream.write(buffer, huge), lambda: stream.read_into(buffer, huge)):
        with pytest.raises(lifecore.LifecoreOverflowError, match=r"the product of its extents"):
            call()
    # 2**62 elements fit an int64, their 2**65 bits no uint64.
    bits_past = Producer(ctypes.addressof(memory), [2**60, 4], bits=8)
    for call in (lambda: stream.write(buffer, bits_past), lambda: stream.read_into(buffer, bits_past)):
        with pytest.raises(lifecore.LifecoreOverflowError, match="the bytes of its shape"):
            call()
    assert device.memory_stats() == before and stream.read(buffer) == struct.pack("<4I", 7, 7, 7, 7)
    assert memory.raw == bytes(64)


def test_a_tensor_whose_byte_offset_wraps_its_address_is_refused(stream):
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    wrapped = Producer(ctypes.addressof(memory) + 32, [4], byte_offset=2**64 - 32)  # data + offset = the start
    buffer = stream.alloc(16)
    with pytest.raises(lifecore.LifecoreOverflowError, match="its data \\+ byte_offset"):
        stream.copy(buffer, wrapped)


def test_the_driver_diagnostics_launch_refuses_a_value_its_kind_cannot_hold():
    """_Driver.launch cast each value to its kind: u32 2**32 + 2 ran as 2, -1 as 2**32 - 1, a
    negative pointer as an address near the top, 1e300 as an f32 infinity."""
    from lifecore import _core

    driver = _core._open_driver(EMULATED)
    stream = driver.stream_create()
    scale = driver.module_get_function(driver.module_load("builtin"), "scale_f32")
    x, y = driver.mem_alloc(16), driver.mem_alloc(16)
    driver.memcpy_htod(x, struct.pack("<4f", 1, 2, 3, 4))
    driver.memcpy_htod(y, bytes(16))

    def launch(n, a, px=x):
        driver.launch(scale, (1, 1, 1), (4, 1, 1), stream, [("u32", n), ("f32", a), ("ptr", px), ("ptr", y)])

    for n, a, px, error in ((2**32 + 2, 2.0, x, lifecore.LifecoreOverflowError), (-1, 2.0, x, InvalidArgumentError),
                            (4, 1e300, x, lifecore.LifecoreOverflowError), (4, 2.0, -x, InvalidArgumentError)):
        with pytest.raises(error, match=r"^_Driver.launch: argument 'args \((u32|f32|u64 or ptr)\)'"):
            launch(n, a, px)
    driver.stream_synchronize(stream)
    assert driver.memcpy_dtoh(y, 16) == bytes(16)  # nothing ran
    launch(4, float("inf"))  # an infinity given as such passes as itself
    launch(4, 2.0)
    driver.stream_synchronize(stream)
    assert struct.unpack("<4f", driver.memcpy_dtoh(y, 16)) == (2.0, 4.0, 6.0, 8.0)
    with pytest.raises(lifecore.LifecoreOverflowError, match="more than a bytes object holds"):
        driver.memcpy_dtoh(x, 2**63)


def test_the_emulated_address_space_refuses_rather_than_wraps(stream):
    """Each host tensor the mock maps takes address space; two claiming 2**63 bytes each (a
    producer lying about its size) wrapped the next address onto regions already handed out."""
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    claims = [Producer(ctypes.addressof(memory), [2**61]) for _ in range(2)]  # 2**63 bytes of float32 each
    with pytest.raises(LifecoreError, match="cannot be mapped"):
        stream.launch(K.scale_f32, 1, 4, [4, 1.0, *claims])
    x = stream.alloc(16)
    stream.write(x, struct.pack("<4f", 1, 2, 3, 4))
    stream.launch(K.scale_f32, 1, 4, [4, 3.0, x, x])  # the device works on, at addresses of its own
    assert struct.unpack("<4f", stream.read(x)) == (3.0, 6.0, 9.0, 12.0)


def test_the_sequence_benchmark_loop_refuses_counts_that_would_wrap():
    from lifecore import _core

    loop = _core._SequenceBenchLoop(0, 16, 16)
    loop.decode_steps(1, False)
    with pytest.raises(InvalidArgumentError, match="fit is used up"):  # 1 + (2**64 - 1) wrapped to 0
        loop.decode_steps(2**64 - 1, False)
    with pytest.raises(lifecore.LifecoreOverflowError, match="live must be at most 2\\*\\*32 - 17"):
        _core._SequenceBenchLoop(2**32 - 16, 16, 16)
    with pytest.raises(lifecore.LifecoreOverflowError, match="target_tokens must be below 2\\*\\*63"):
        _core._SequenceBenchLoop(1, 2**63, 16)


def test_sub_byte_elements_are_counted_as_packed_bits(stream):
    """The checked count rounded each element up to a byte: 32 four-bit elements (16 bytes)
    were taken as 32 bytes, and read_into wrote 16 bytes past the tensor."""
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    buffer = stream.alloc(32)
    stream.fill(buffer, 0xFFFFFFFF)
    packed = Producer(ctypes.addressof(memory), [32], bits=4)  # 16 bytes
    with pytest.raises(InvalidArgumentError, match="16 bytes"):
        stream.read_into(buffer, packed)
    assert memory.raw == bytes(64)
    half = stream.alloc(16)
    stream.fill(half, 0xFFFFFFFF)
    stream.read_into(half, packed)
    assert memory.raw == b"\xff" * 16 + bytes(48)  # its 16 bytes, nothing past them


def test_write_and_read_into_refuse_a_wrapped_byte_offset(stream):
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    wrapped = Producer(ctypes.addressof(memory) + 32, [4], byte_offset=2**64 - 32)
    buffer = stream.alloc(16)
    for call in (lambda: stream.write(buffer, wrapped), lambda: stream.read_into(buffer, wrapped)):
        with pytest.raises(lifecore.LifecoreOverflowError, match="its data \\+ byte_offset"):
            call()


def test_addresses_after_a_saturated_mapping_stay_aligned(stream, device):
    import ctypes

    from dlpack_producer import Producer

    memory = ctypes.create_string_buffer(64)
    x = stream.alloc(16)
    stream.write(x, struct.pack("<4f", 1, 2, 3, 4))
    # One claimed 2**63-byte host tensor: mapped for the launch (its extent saturates the charge).
    stream.launch(K.scale_f32, 1, 4, [4, 1.0, x, Producer(ctypes.addressof(memory), [2**61])])
    stream.sync()
    before = device.memory_stats()["driver_allocations"]
    after = stream.alloc(1 << 20)  # a new driver allocation, placed after the mapping's range
    assert device.memory_stats()["driver_allocations"] > before
    assert after.ptr % 256 == 0, hex(after.ptr)
