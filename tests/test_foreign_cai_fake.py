"""The CUDA array interface's device and stream, against the fake CUDA driver
(tests/fake_driver/fake_libcuda.c), each scenario in a fresh interpreter (a vendor library loads
once per process).

The interface names no device, so the driver is asked whose memory the address is
(cuPointerGetAttribute): another device's memory, or an address the driver does not know as
device memory, is refused; a driver without the entry point leaves the check out. Its `stream`
(version 3) orders the work: an event recorded on the producer's stream, waited for on the
stream the operation runs on, except where that is the producer's stream itself or while the
stream records (the recorded work runs at replay). 0 is refused, as are a mask and a version
that is not an int. The mock's memory is host memory (DLPack's CPU device), so the interface,
which is CUDA memory by definition, is refused there before any of this: only a CUDA device
reaches it, hence the fake driver.

The fake's "device memory" is host memory: a NumPy array registered with the fake
(fake_cuda_register) stands for another library's device allocation, and its counters
(fake_cuda_event_records / fake_cuda_last_record_stream, fake_cuda_stream_waits /
fake_cuda_last_wait_stream) show which stream each record and each wait went to.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import lifecore
from driver_scenarios import run_with_fake_cuda

# Defines the scenario's tools: Cai objects over NumPy arrays, the fake's counters, a device.
SETUP = """
import ctypes, os
import numpy as np
from lifecore import kernels as K

fake = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
for name in ("fake_cuda_event_records", "fake_cuda_stream_waits", "fake_cuda_live_events", "fake_cuda_timed_events"):
    getattr(fake, name).restype = ctypes.c_long
for name in ("fake_cuda_last_record_stream", "fake_cuda_last_wait_stream"):
    getattr(fake, name).restype = ctypes.c_ulonglong
fake.fake_cuda_register.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t]

PRODUCER = 0x7000  # another library's native stream (the fake never dereferences it)
SEVEN = 0x40E00000  # float32 7.0, as fill's 32-bit pattern


class Cai:
    def __init__(self, array, **keys):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": "<f4", "version": 3,
                                         "data": (array.ctypes.data, False), **keys}


def device_array(n=16, value=0.0):
    # Memory the fake driver knows as its device memory, as another library's allocation is.
    array = np.full(n, value, np.float32)
    fake.fake_cuda_register(array.ctypes.data, array.nbytes)
    return array


def counts():
    return [fake.fake_cuda_event_records(), fake.fake_cuda_stream_waits()]


def since(before):
    now = counts()
    return [now[0] - before[0], now[1] - before[1]]


dev = lifecore.Device("cuda")
s = dev.stream()
s.sync()
"""


def run_fake(library: Path, body: str, **env: str) -> dict:
    return run_with_fake_cuda(library, SETUP + textwrap.dedent(body), **env)


def test_the_operations_are_driver_operations() -> None:
    assert {"event_record_native", "pointer_device"} <= set(lifecore.driver_operations())


def test_a_producer_stream_is_recorded_on_and_waited_for_by_copy_fill_and_launch(fake_libcuda) -> None:
    body = """
    events, timed = fake.fake_cuda_live_events(), fake.fake_cuda_timed_events()
    a = device_array()
    before = counts()
    s.fill(Cai(a, stream=PRODUCER), SEVEN)
    result["fill"] = [since(before), fake.fake_cuda_last_record_stream(), fake.fake_cuda_last_wait_stream() == s.handle]
    s.sync()
    result["filled"] = a.tolist()
    buf = s.alloc(64)
    s.sync()
    before = counts()
    s.copy(buf, Cai(a, stream=PRODUCER + 16))
    result["copy"] = [since(before), fake.fake_cuda_last_record_stream(), fake.fake_cuda_last_wait_stream() == s.handle]
    result["copied"] = np.frombuffer(s.read(buf), np.float32).tolist()
    b = device_array()
    before = counts()
    s.copy(Cai(b, stream=PRODUCER), Cai(a, stream=PRODUCER))  # one producer: one record, one wait
    result["copy_one_producer"] = since(before)
    before = counts()
    s.copy(Cai(b, stream=PRODUCER), Cai(a, stream=PRODUCER + 32))
    result["copy_two_producers"] = since(before)
    before = counts()
    s.launch(K.scale_f32, 1, 16, [16, 2.0, Cai(a, stream=PRODUCER + 48), Cai(b)])
    result["launch"] = [since(before), fake.fake_cuda_last_record_stream(), fake.fake_cuda_last_wait_stream() == s.handle]
    for value in (1, 2):  # the legacy and the per-thread default stream: CUDA's own handles
        before = counts()
        s.fill(Cai(a, stream=value), 0)
        result[f"default_{value}"] = [since(before), fake.fake_cuda_last_record_stream()]
    s.sync()
    result["events_left"] = fake.fake_cuda_live_events() - events
    result["timed"] = fake.fake_cuda_timed_events() - timed
    """
    result = run_fake(fake_libcuda, body)
    assert result["timed"] == 0  # ordering events record no time
    assert result["fill"] == [[1, 1], 0x7000, True]
    assert result["filled"] == [7.0] * 16
    assert result["copy"] == [[1, 1], 0x7010, True]
    assert result["copied"] == [7.0] * 16
    assert result["copy_one_producer"] == [1, 1]
    assert result["copy_two_producers"] == [2, 2]
    assert result["launch"] == [[1, 1], 0x7030, True]
    assert result["default_1"] == [[1, 1], 1]
    assert result["default_2"] == [[1, 1], 2]
    assert result["events_left"] == 0  # each event destroyed once its wait is enqueued


def test_no_stream_or_the_streams_own_orders_nothing(fake_libcuda) -> None:
    body = """
    a = device_array()
    before = counts()
    s.fill(Cai(a), 0)  # no stream key
    s.fill(Cai(a, stream=None), 0)
    s.fill(Cai(a, stream=s.handle), 0)  # the producer's stream is this stream: stream order suffices
    buf = s.alloc(64)
    s.copy(Cai(a, stream=s.handle), buf)
    result["none"] = since(before)
    own = type("Own", (), {})()
    own.__cuda_array_interface__ = buf.view("float32").__cuda_array_interface__  # stream: s's handle
    before = counts()
    s.fill(own, 0)
    result["own_buffer"] = since(before)
    other = dev.stream()
    theirs = type("Theirs", (), {})()
    kept = other.alloc(64)  # the interface dict alone does not keep the buffer
    theirs.__cuda_array_interface__ = kept.view("float32").__cuda_array_interface__
    before = counts()
    s.fill(theirs, 0)  # a buffer of another stream: that stream's work comes first
    result["other_stream"] = [since(before), fake.fake_cuda_last_record_stream() == other.handle,
                              fake.fake_cuda_last_wait_stream() == s.handle]
    s.sync()
    """
    result = run_fake(fake_libcuda, body)
    assert result["none"] == [0, 0]
    assert result["own_buffer"] == [0, 0]
    assert result["other_stream"] == [[1, 1], True, True]


def test_a_recording_stream_does_not_wait(fake_libcuda) -> None:
    body = """
    a = device_array()
    seen = []
    def step(st):
        before = counts()
        st.fill(Cai(a, stream=PRODUCER), 0)
        seen.append([st.capture_state.variant.name, since(before)])
    graph = s.capture(step)
    result["seen"] = seen
    s.sync()
    graph.destroy()
    """
    result = run_fake(fake_libcuda, body)
    # The warmup runs eagerly and orders; the recorded pass waits for nothing (it runs at replay).
    assert result["seen"] == [["PREPARE", [1, 1]], ["CAPTURE", [0, 0]]]


def test_bad_interfaces_are_refused_before_anything_is_issued(fake_libcuda) -> None:
    body = """
    a = device_array(value=1.0)
    buf = s.alloc(32)
    s.sync()
    before = counts()
    cases = {
        "zero": (s.fill, Cai(a, stream=0), SEVEN),
        "negative": (s.fill, Cai(a, stream=-5), SEVEN),
        "text": (s.fill, Cai(a, stream="0x7000"), SEVEN),
        "bool": (s.fill, Cai(a, stream=True), SEVEN),
        "mask": (s.fill, Cai(a, stream=PRODUCER, mask=(0, False)), SEVEN),
        "version_text": (s.fill, Cai(a, stream=PRODUCER, version="3"), SEVEN),
        "launch_zero": (s.launch, K.scale_f32, 1, 16, [16, 2.0, Cai(a), Cai(a, stream=0)]),
        # A valid producer stream, but another argument is refused: no wait is left behind.
        "other_argument": (s.copy, Cai(a, stream=PRODUCER), np.zeros(16, np.float32)),
        "sizes": (s.copy, Cai(a, stream=PRODUCER), buf),
    }
    for name, (call, *args) in cases.items():
        result[name] = argument_refusal(call, *args)
    no_version = Cai(a)
    del no_version.__cuda_array_interface__["version"]
    result["no_version"] = argument_refusal(s.fill, no_version, SEVEN)
    result["issued"] = since(before)
    s.sync()
    result["array"] = a.tolist()
    """
    result = run_fake(fake_libcuda, body)
    assert "fill: argument 'buf' has a __cuda_array_interface__ stream of 0, which the interface disallows" in result["zero"]
    assert "launch: argument 'out' has a __cuda_array_interface__ stream of 0" in result["launch_zero"]
    for name in ("negative", "text", "bool"):
        assert "stream that is not None or a stream handle" in result[name], result[name]
    assert "masked arrays are not supported" in result["mask"]
    assert "without an int version" in result["version_text"]
    assert "without an int version" in result["no_version"]
    assert "copy: argument 'src' lives on cpu:0" in result["other_argument"]
    assert "must be the same size" in result["sizes"]
    assert result["issued"] == [0, 0]  # no record, no wait
    assert result["array"] == [1.0] * 16  # no fill, no copy, no kernel reached it


def test_memory_of_another_device_is_refused_naming_both(fake_libcuda) -> None:
    body = """
    a = device_array(value=1.0)
    before = counts()
    result["fill"] = argument_refusal(s.fill, Cai(a, stream=PRODUCER), SEVEN)
    result["launch"] = argument_refusal(s.launch, K.scale_f32, 1, 16, [16, 2.0, Cai(device_array()), Cai(a)])
    result["issued"] = since(before)
    s.sync()
    result["array"] = a.tolist()
    buf = s.alloc(64)  # the device's own memory is known by address: the driver is not asked
    own = type("Own", (), {})()
    own.__cuda_array_interface__ = buf.view("float32").__cuda_array_interface__
    result["own"] = argument_refusal(s.fill, own, SEVEN)
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_POINTER_ORDINAL="1")
    expected = "lives on cuda:1, but the stream's cuda device takes cuda:0 memory"
    assert result["fill"].startswith("fill: argument 'buf' " + expected), result["fill"]
    assert result["launch"].startswith("launch: argument 'x' " + expected), result["launch"]
    assert result["issued"] == [0, 0]
    assert result["array"] == [1.0] * 16
    assert result["own"] == "accepted"


def test_memory_the_driver_does_not_know_is_refused(fake_libcuda) -> None:
    body = """
    unknown = np.ones(16, np.float32)  # never registered: host memory, not the driver's
    result["fill"] = argument_refusal(s.fill, Cai(unknown), SEVEN)
    result["copy"] = argument_refusal(s.copy, Cai(device_array()), Cai(unknown))
    s.sync()
    result["array"] = unknown.tolist()
    """
    result = run_fake(fake_libcuda, body)
    assert result["fill"].startswith("fill: argument 'buf' points to 0x"), result["fill"]
    assert ("which is not device memory the cuda driver knows (cuPointerGetAttribute: CUDA_ERROR_INVALID_VALUE)"
            in result["fill"])
    assert result["copy"].startswith("copy: argument 'src' points to 0x"), result["copy"]
    assert result["array"] == [1.0] * 16


def test_a_range_that_runs_past_its_allocation_is_refused(fake_libcuda) -> None:
    body = """
    array = device_array(16)  # the driver knows 64 bytes
    longer_cai = Cai(array)  # an interface claiming 128 bytes from the same address
    longer_cai.__cuda_array_interface__["shape"] = (32,)
    before = counts()
    result["fill"] = argument_refusal(s.fill, longer_cai, SEVEN)
    result["issued"] = since(before)
    s.fill(Cai(array), SEVEN)  # the whole allocation is fine
    s.sync()
    result["array"] = array.tolist()
    """
    result = run_fake(fake_libcuda, body)
    assert "runs from 0x" in result["fill"] and "not device memory the cuda driver knows" in result["fill"], result
    assert result["issued"] == [0, 0]
    assert result["array"] == [7.0] * 16


def test_without_cupointergetattribute_the_device_is_not_checked(fake_libcuda) -> None:
    body = """
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    result["reason"] = info.reason
    unknown = np.zeros(16, np.float32)
    before = counts()
    s.fill(Cai(unknown, stream=PRODUCER), SEVEN)  # accepted: the driver cannot tell whose it is
    result["issued"] = since(before)
    s.sync()
    result["array"] = unknown.tolist()
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_HIDE="cuPointerGetAttribute", FAKE_CUDA_POINTER_ORDINAL="1")
    assert "no cuPointerGetAttribute" in result["reason"]
    assert result["issued"] == [1, 1]  # the stream is still honoured
    assert result["array"] == [7.0] * 16


def test_the_driver_operations_below_the_runtime(fake_libcuda) -> None:
    body = """
    driver = _core._open_driver("cuda")
    ptr = driver.mem_alloc(64)
    result["ordinal"] = [driver.pointer_device(ptr), driver.pointer_device(ptr + 63)]
    result["past_the_end"] = refusal(driver.pointer_device, ptr + 64)
    driver.mem_free(ptr)
    result["freed"] = refusal(driver.pointer_device, ptr)
    event = driver.event_create()
    driver.event_record_native(event, 4096)
    result["recorded_on"] = fake.fake_cuda_last_record_stream()
    driver.event_destroy(event)
    result["destroyed_event"] = refusal(driver.event_record_native, event, 4096)
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_POINTER_ORDINAL="3")
    assert result["ordinal"] == [3, 3]
    assert result["past_the_end"] == [1, "cuPointerGetAttribute"]
    assert result["freed"] == [1, "cuPointerGetAttribute"]
    assert result["recorded_on"] == 4096
    assert result["destroyed_event"][1] == "cuEventRecord"


def test_a_range_over_lifecore_memory_must_lie_within_one_buffer_or_arena(fake_libcuda) -> None:
    """The device's own memory is known by address: a range within a buffer's bytes is that
    buffer, one within a KV arena is the arena's (a coordinator's memory, live, not a freed
    buffer's); one that runs past a buffer's bytes (into the rest of its pool bucket) or an
    arena's is refused before anything is issued, as no window could retain it whole."""
    body = """
    from lifecore.sequence import AdmissionCoordinator

    c = AdmissionCoordinator(dev, domains={"kv": 8 * 4096}, page_bytes=4096, tokens_per_page=16,
                             max_active_sequences=4)
    arena = Cai(np.empty(0, np.float32))
    arena.keep = c.arena("kv")
    arena.__cuda_array_interface__ = arena.keep.view("uint32").__cuda_array_interface__
    s.fill(arena, SEVEN)
    s.sync()
    words = np.frombuffer(s.read(arena.keep), np.uint32)
    result["arena"] = [len(words), bool((words == SEVEN).all())]

    buf = s.alloc(64)
    s.fill(buf, 0)
    past = type("Past", (), {})()
    past.__cuda_array_interface__ = dict(buf.view("float32").__cuda_array_interface__, shape=(32,))
    before = counts()
    result["past_buffer"] = argument_refusal(s.fill, past, SEVEN)
    longer = dict(arena.__cuda_array_interface__)
    longer["shape"] = (8 * 1024 + 1,)
    past_arena = type("PastArena", (), {})()
    past_arena.__cuda_array_interface__ = longer
    result["past_arena"] = argument_refusal(s.fill, past_arena, SEVEN)
    result["issued"] = since(before)
    result["buf"] = np.frombuffer(s.read(buf), np.float32).tolist()
    """
    result = run_fake(fake_libcuda, body)
    assert result["arena"] == [8 * 1024, True]
    for key in ("past_buffer", "past_arena"):
        assert "runs past the bytes of one of the device's buffers or KV arenas" in result[key], result
    assert result["issued"] == [0, 0]
    assert result["buf"] == [0.0] * 16  # nothing was written



def test_an_interface_shape_list_emptied_by_its_own_items_is_read_from_a_snapshot(fake_libcuda) -> None:
    # Before: the shape list was read in place while its items' __index__ ran, and an item
    # emptying it freed what was being read (a crash).
    body = """
    a = device_array(value=1.0)
    kept = {}

    class Emptying:
        def __index__(self):
            kept["shape"].clear()
            return 16

    kept["shape"] = [Emptying()] + [object() for _ in range(100_000)]
    shaped = Cai(a)
    shaped.__cuda_array_interface__["shape"] = kept["shape"]
    result["refusal"] = argument_refusal(s.fill, shaped, SEVEN)
    listed = Cai(a)
    listed.__cuda_array_interface__["shape"] = [16]
    s.fill(listed, SEVEN)
    s.sync()
    result["array"] = a.tolist()
    """
    result = run_fake(fake_libcuda, body)
    assert "without a valid typestr, shape and data" in result["refusal"]
    assert result["array"] == [7.0] * 16  # a list shape of plain ints reads as before
