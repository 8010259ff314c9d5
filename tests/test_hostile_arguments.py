"""What a randomized fuzzer of the bindings found: arguments that crashed a call, or that it
refused with Python's own exception instead of a lifecore error. Each is refused now with a
lifecore error naming the argument, and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import InvalidArgumentError, LifecoreTypeError
from lifecore import kernels as K
from lifecore.capture import (Axis, BackendCapabilities, CapturePayload, CapturePlan, CaptureTransform,
                              ObservationPoint, unlimited)
from lifecore.sequence import AdmissionCoordinator, step_all

from dlpack_producer import Producer

PAGE = 4096
SURROGATE = "\ud800"  # a lone surrogate: a str UTF-8 cannot encode


class HugeLength:
    """Says it holds 2**62 items."""

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, i: int) -> int:
        if i < 2:
            return 1
        raise IndexError(i)


@pytest.fixture
def coordinator():
    return AdmissionCoordinator(None, domains={"kv": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                max_active_sequences=4)


def test_a_dlpack_export_with_dimensions_but_no_shape_is_refused_not_read(coordinator) -> None:
    # It crashed the process (nanobind's array caster read the shape it did not have); the
    # runtime's own calls already refused it.
    host = np.zeros(256, np.float32)
    shapeless = Producer(host.ctypes.data, [256], null_shape=True)
    with pytest.raises(InvalidArgumentError, match=r"^CapturePayload\.from_array: argument 'array' has 1 "
                                                   r"dimension\(s\) but no shape"):
        CapturePayload.from_array(shapeless)
    session = coordinator.admit("a", 16, 64).resources.open_session()
    before = repr(coordinator.capacity())
    with pytest.raises(InvalidArgumentError, match=r"^step_all: argument 'tokens' has 1 dimension\(s\) but no shape"):
        step_all([session], Producer(host.ctypes.data, [1], bits=64, null_shape=True))
    assert repr(coordinator.capacity()) == before
    negative = Producer(host.ctypes.data, [256], ndim=-1)
    with pytest.raises(InvalidArgumentError, match="negative number of dimensions"):
        CapturePayload.from_array(negative)
    # A well-formed export of the same memory is taken.
    assert list(CapturePayload.from_array(Producer(host.ctypes.data, [256])).shape) == [256]


@pytest.mark.parametrize("call", ["block_table", "decode_table"])
def test_a_table_out_exported_with_dimensions_but_no_shape_is_refused_not_read(coordinator, call) -> None:
    # It crashed the process: a table's out= read the producer's shape it did not have.
    session = coordinator.admit("a", 16, 64).resources.open_session()
    host = np.full(4, 7, np.int32)
    shapeless = Producer(host.ctypes.data, [1, 4], bits=32, code=0, null_shape=True)
    with pytest.raises(InvalidArgumentError, match=rf"^{call}: argument 'out' was exported with 2 dimension\(s\) but "
                                                   r"no shape \(nothing was written\)"):
        if call == "block_table":
            coordinator.block_table([session], 4, out=shapeless)
        else:
            coordinator.decode_table(1, 4, out=shapeless)
    assert host.tolist() == [7, 7, 7, 7]
    # The same memory well described is taken.
    well_formed = Producer(host.ctypes.data, [1, 4], bits=32, code=0)
    if call == "block_table":
        coordinator.block_table([session], 4, out=well_formed)
    else:
        coordinator.decode_table(1, 4, out=well_formed).step([session], [17])
    assert host.tolist() == coordinator.block_table([session], 4).ravel().tolist()


def test_a_dlpack_export_of_bytes_at_a_null_pointer_is_refused_not_read(coordinator) -> None:
    # step_all and DecodeTable.step crashed the process (they read the counts there), and
    # from_array made a payload of 4 float64 elements and no bytes.
    nowhere = Producer(0, [2], bits=64, code=0)
    sessions = [coordinator.admit(name, 16, 64).resources.open_session() for name in "ab"]
    table = coordinator.decode_table(2, 8)
    before = repr(coordinator.capacity())
    with pytest.raises(InvalidArgumentError, match=r"^step_all: argument 'tokens' describes 16 bytes at a null "
                                                   r"data pointer"):
        step_all(sessions, nowhere)
    with pytest.raises(InvalidArgumentError, match=r"^DecodeTable\.step: argument 'tokens' describes 16 bytes"):
        table.step(sessions, nowhere)
    with pytest.raises(InvalidArgumentError, match=r"^CapturePayload\.from_array: argument 'array' describes 16 "
                                                   r"bytes at a null data pointer"):
        CapturePayload.from_array(Producer(0, [4]))
    assert repr(coordinator.capacity()) == before
    assert [s.backing.pages for s in sessions] == [1, 1]
    # An empty export needs no memory, and the sessions step on.
    assert CapturePayload.from_array(Producer(0, [0])).nbytes == 0
    step_all(sessions, np.array([20, 33]))
    assert [s.backing.pages for s in sessions] == [2, 3]


def test_a_buffer_that_leaves_out_its_strides_is_read_as_the_array_it_is(coordinator) -> None:
    # A ctypes array leaves its strides out of its buffer export, asked for them or not:
    # step_all, DecodeTable.step and from_array crashed the process reading them.
    import ctypes

    sessions = [coordinator.admit(name, 16, 64).resources.open_session() for name in "ab"]
    step_all(sessions, (ctypes.c_int64 * 2)(20, 33))
    assert [s.backing.pages for s in sessions] == [2, 3]
    table = coordinator.decode_table(2, 8)
    table.step(sessions, (ctypes.c_int32 * 2)(40, 50))
    assert [s.backing.pages for s in sessions] == [3, 4]
    assert np.array_equal(table.table, coordinator.block_table(sessions, 8))
    payload = CapturePayload.from_array((ctypes.c_float * 4)(1, 2, 3, 4))
    assert payload.dtype == "float32" and list(payload.shape) == [4]
    assert np.asarray(payload.tensor).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("call", [
    lambda c: Axis(SURROGATE, 4),
    lambda c: ObservationPoint(SURROGATE),
    lambda c: c.num_blocks(SURROGATE),
    lambda c: c.grow_domain(SURROGATE, 1 << 20),
    lambda c: AdmissionCoordinator(None, domains={SURROGATE: PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                   max_active_sequences=4),
    lambda c: lifecore.Device(SURROGATE),
    lambda c: lifecore.Device("mock").inject_fault(SURROGATE, 1),
    lambda c: lifecore.Device("mock").driver_calls(SURROGATE),
    lambda c: lifecore.Module.from_ptx(lifecore.Device("mock"), SURROGATE),
    lambda c: lifecore.Device("mock").stream().alloc(64).view(SURROGATE),
], ids=["Axis", "ObservationPoint", "num_blocks", "grow_domain", "AdmissionCoordinator", "Device", "inject_fault",
        "driver_calls", "Module.from_ptx", "Buffer.view"])
def test_a_string_utf8_cannot_encode_is_an_invalid_argument(call, coordinator) -> None:
    # It raised a bare UnicodeEncodeError; the runtime's calls, a LifecoreTypeError saying that
    # the arguments (str) matched none of their signatures.
    before = repr(coordinator.capacity())
    with pytest.raises(InvalidArgumentError, match="must be text UTF-8 can encode"):
        call(coordinator)
    assert repr(coordinator.capacity()) == before


@pytest.mark.parametrize("unreadable", [np.array(3), memoryview(bytearray(16)).cast("B", (4, 4)), HugeLength()],
                         ids=["0-d array", "2-D memoryview", "huge __len__"])
def test_a_sequence_python_cannot_read_is_a_lifecore_type_error(unreadable) -> None:
    # Each raised Python's own TypeError, NotImplementedError or MemoryError.
    with lifecore.Device("mock") as device:
        stream = device.stream()
        buffer = stream.alloc(1024)
        stream.write(buffer, bytes(range(256)) * 4)
        calls = {
            "view: argument 'shape'": lambda: buffer.view("uint8", unreadable),
            "launch: argument 'info'": lambda: stream.launch(K.axpy_info_f32, 1, 64, [buffer, buffer],
                                                             info=unreadable),
            "argument 'edges'": lambda: CaptureTransform.histogram(unreadable),
            "argument 'selections'": lambda: CapturePlan(unreadable, unlimited()),
            "argument 'axes'": lambda: ObservationPoint("p", unreadable),
        }
        for label, call in calls.items():
            with pytest.raises(LifecoreTypeError, match=f"{label} could not be read as a sequence") as raised:
                call()
            assert type(raised.value) is LifecoreTypeError, label
        assert stream.read(buffer) == bytes(range(256)) * 4  # nothing ran


def test_a_capability_list_python_cannot_read_is_a_lifecore_type_error() -> None:
    with pytest.raises(LifecoreTypeError, match="could not be read as a sequence"):
        BackendCapabilities(memoryview(bytearray(16)).cast("B", (4, 4)))


class _CountingProducer(Producer):
    """Counts its exports; from ``shapeless_from`` on, each export has no shape."""

    def __init__(self, address: int, shape, shapeless_from: int = 1 << 30) -> None:
        super().__init__(address, shape)
        self.exports, self.shapeless_from = 0, shapeless_from

    def __dlpack__(self, stream=None, max_version=None, **kw):
        self.exports += 1
        self.null_shape = self.exports >= self.shapeless_from
        return super().__dlpack__(stream, max_version, **kw)


def test_a_producer_is_exported_once_and_the_export_checked_is_the_one_read() -> None:
    # The first guard exported once to check and let the caster export again, unchecked: a
    # producer well formed the first time and shapeless the second still crashed the process.
    host = np.zeros(256, np.float32)
    once = _CountingProducer(host.ctypes.data, [256])
    assert list(CapturePayload.from_array(once).shape) == [256] and once.exports == 1
    flipping = _CountingProducer(host.ctypes.data, [256], shapeless_from=2)
    assert list(CapturePayload.from_array(flipping).shape) == [256] and flipping.exports == 1


def test_a_numpy_subclass_with_its_own_export_is_checked() -> None:
    host = np.zeros(256, np.float32)

    class Shapeless(np.ndarray):
        def __dlpack__(self, stream=None, **kw):
            return Producer(host.ctypes.data, [256], null_shape=True).__dlpack__()

    with pytest.raises(InvalidArgumentError, match="but no shape"):
        CapturePayload.from_array(host.view(Shapeless))


def test_a_ctrl_c_in_a_producers_export_is_not_swallowed() -> None:
    class Interrupted:
        def __dlpack__(self, stream=None, **kw):
            raise KeyboardInterrupt("Ctrl-C during __dlpack__")

    with pytest.raises(KeyboardInterrupt, match="during __dlpack__"):
        CapturePayload.from_array(Interrupted())


def test_an_error_of_the_callers_own_iteration_passes_unchanged() -> None:
    # Only Python's refusals to read a sequence are lifecore errors; what the caller's code
    # raised is its own, with its traceback.
    class Failing(list):
        def __iter__(self):
            raise RuntimeError("a bug in the caller's code")

    with lifecore.Device("mock") as device:
        buffer = device.stream().alloc(64)
        with pytest.raises(RuntimeError, match="a bug in the caller's code") as raised:
            buffer.view("uint8", Failing([64]))
        assert type(raised.value) is RuntimeError


def test_a_view_whose_shape_frees_its_buffer_is_refused() -> None:
    # The view was made of the buffer its shape's __index__ had freed.
    with lifecore.Device("mock") as device:
        buffer = device.stream().alloc(64)

        class FreesIt:
            def __index__(self) -> int:
                buffer.free()
                return 64

        with pytest.raises(lifecore.ClosedError, match="view: the buffer was freed"):
            buffer.view("uint8", [FreesIt()])


def test_a_demand_of_more_tokens_than_any_count_holds_is_not_unpickled() -> None:
    coordinator = AdmissionCoordinator(None, domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                       max_active_sequences=4)
    held = coordinator.admit("a", 16, 16)
    demand = coordinator.admit("b", 16, 16).fit
    state = demand.__reduce_ex__(2)[2]
    restored = type(demand).__new__(type(demand))
    with pytest.raises(lifecore.LifecoreOverflowError, match="tokens"):
        restored.__setstate__((state[0], 2**63, 1, state[3]))
    restored.__setstate__((state[0], 2**63 - 1, 1, state[3]))  # the largest count is one
    assert restored.tokens == 2**63 - 1
    del held
