"""The pooled allocator torch pools over, called through its C ABI (the two functions a
CUDAPluggableAllocator loads) against the emulated device's streams: what a window allocates
comes from the persistent pool and is kept by the graph, the warmup primes the recording so it
allocates nothing, a free returns the slice after the stream's fence, and every refusal is a
null pointer and a counter, never an exception."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

import lifecore
from lifecore import _core
from lifecore.errors import InvalidArgumentError, LifecoreTypeError

SIZE = 1300  # exact fit (persistent pool): 1536 bytes; power-of-two bucket (dynamic pool): 2048
EXACT, BUCKET = 1536, 2048


@pytest.fixture(scope="module")
def abi():
    library = ctypes.CDLL(_core.__file__)
    alloc = getattr(library, _core.POOLED_ALLOC_SYMBOL)
    alloc.restype = ctypes.c_void_p
    alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    free = getattr(library, _core.POOLED_FREE_SYMBOL)
    free.restype = None
    free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    return alloc, free


def counters():
    return _core.pooled_allocator_stats()


def delta(before, after=None):
    after = after or counters()
    return {key: after[key] - before[key] for key in before}


@pytest.fixture(params=["software", "hardware"])
def routed(request):
    """A routed stream of an emulated device (each graphs mode); unrouted and closed after."""
    device = lifecore.Device("mock", graphs=request.param)
    stream = device.stream()
    _core.pooled_allocator_route(stream)
    yield device, stream
    _core.pooled_allocator_unroute(stream)
    device.close()


def test_the_symbols_are_exported_from_the_extension_module(abi):
    pytest.importorskip("torch", reason="lifecore.torch names the symbols; torch is not installed")
    from lifecore import torch as lifecore_torch

    assert lifecore_torch.allocator_library() == _core.__file__
    assert (lifecore_torch.ALLOC_SYMBOL, lifecore_torch.FREE_SYMBOL) == ("lifecore_pooled_alloc", "lifecore_pooled_free")


def test_an_allocation_in_the_recording_comes_from_the_persistent_pool_and_the_graph_keeps_it(abi, routed):
    alloc, free = abi
    device, stream = routed
    stream.graph_prepare()
    # A capture takes only what the warmup primed: a driver's, where a new allocation is a memory
    # node, and a software one, which refuses it the same way (else it passes here and fails there).
    free(alloc(SIZE, 0, stream.handle), SIZE, 0, stream.handle)
    stream.sync()
    stream.begin_capture()
    ptr = alloc(SIZE, 0, stream.handle)
    assert ptr
    assert device.memory_stats()["pool_bytes"] == EXACT  # exact fit: the persistent pool
    graph = stream.end_capture()
    free(ptr, SIZE, 0, stream.handle)  # torch gives its segment back while the graph lives
    stream.sync()
    stats = device.memory_stats()
    assert (stats["slices_in_use"], stats["slices_retained"], stats["slices_free"]) == (0, 1, 0)
    graph.destroy()
    assert device.memory_stats()["slices_free"] == 1  # the graph's retention was the last hold


def test_outside_a_window_an_allocation_comes_from_the_dynamic_pool(abi, routed):
    alloc, free = abi
    device, stream = routed
    ptr = alloc(SIZE, 0, stream.handle)
    assert ptr and device.memory_stats()["pool_bytes"] == BUCKET
    free(ptr, SIZE, 0, stream.handle)


def test_warmup_primes_the_recording_so_it_allocates_nothing(abi, routed):
    alloc, free = abi
    device, stream = routed
    stream.graph_prepare()
    warm = [alloc(size, 0, stream.handle) for size in (SIZE, 4000, 64)]  # the step's working set
    for ptr, size in zip(warm, (SIZE, 4000, 64)):
        free(ptr, size, 0, stream.handle)
    stream.sync()
    stream.begin_capture()
    allocations = device.memory_stats()["driver_allocations"]
    recorded = [alloc(size, 0, stream.handle) for size in (SIZE, 4000, 64)]
    assert sorted(recorded) == sorted(warm)  # the slices the warmup primed
    assert device.memory_stats()["driver_allocations"] == allocations
    graph = stream.end_capture()
    assert device.memory_stats()["slices_retained"] + device.memory_stats()["slices_in_use"] == 3
    for ptr, size in zip(recorded, (SIZE, 4000, 64)):
        free(ptr, size, 0, stream.handle)
    graph.destroy()
    stream.sync()
    assert device.memory_stats()["slices_free"] == 3


def test_memory_lent_before_the_recording_is_retained_by_the_graph(abi, routed):
    """torch's kernels reuse cached blocks in segments it already holds: the recording never
    allocates them, yet the graph must keep them."""
    alloc, free = abi
    device, stream = routed
    stream.graph_prepare()
    ptr = alloc(SIZE, 0, stream.handle)  # warmup: torch keeps the segment cached
    stream.begin_capture()
    graph = stream.end_capture()
    free(ptr, SIZE, 0, stream.handle)
    stream.sync()
    assert device.memory_stats()["slices_retained"] == 1
    graph.destroy()
    assert device.memory_stats()["slices_free"] == 1


def test_a_free_returns_the_slice_after_the_streams_fence(abi, routed):
    alloc, free = abi
    device, stream = routed
    before = counters()
    ptr = alloc(SIZE, 0, stream.handle)
    assert delta(before)["live"] == 1 and delta(before)["live_bytes"] == SIZE
    free(ptr, SIZE, 0, stream.handle)
    assert delta(before)["releases"] == 1 and delta(before)["live"] == 0
    assert device.memory_stats()["slices_in_use"] == 1  # queued behind the stream's work
    stream.sync()
    stats = device.memory_stats()
    assert (stats["slices_in_use"], stats["slices_free"]) == (0, 1)
    again = alloc(SIZE, 0, stream.handle)
    assert again == ptr and device.memory_stats()["driver_allocations"] == 1  # reused
    free(again, SIZE, 0, stream.handle)


def test_an_unknown_stream_gets_null_and_is_counted(abi):
    alloc, free = abi
    device = lifecore.Device("mock")
    stream = device.stream()
    before = counters()
    assert alloc(SIZE, 0, stream.handle) is None  # never routed
    assert alloc(SIZE, 0, 0xDEAD0000) is None
    _core.pooled_allocator_route(stream)
    assert _core.pooled_allocator_unroute(stream) and not _core.pooled_allocator_unroute(stream)
    assert alloc(SIZE, 0, stream.handle) is None  # routed no more
    assert delta(before)["unknown_stream"] == 3 and delta(before)["allocations"] == 0
    assert device.memory_stats()["driver_allocations"] == 0
    free(0x1234, SIZE, 0, stream.handle)  # not lent by us: ignored, counted
    free(None, 0, 0, None)
    _core.pooled_allocator_route(stream)
    ptr = alloc(SIZE, 0, stream.handle)
    free(ptr, SIZE, 0, stream.handle + 1)  # lent, but for another stream: not this loan
    assert delta(before)["unknown_pointer"] == 3 and delta(before)["live"] == 1
    free(ptr, SIZE, 0, stream.handle)
    _core.pooled_allocator_unroute(stream)
    device.close()


def test_streams_of_two_emulated_devices_are_routed_apart(abi):
    """Each emulated device numbered its streams from 1, so the first streams of two devices had
    one native handle and the second route was refused ("already routed"); CUDA's stream
    pointers are unique in the process, and so are the emulated device's now."""
    alloc, free = abi
    with lifecore.Device("mock") as a, lifecore.Device("mock") as b:
        streams = [a.stream(), b.stream()]
        assert streams[0].handle != streams[1].handle
        for stream in streams:
            _core.pooled_allocator_route(stream)
        try:
            for device, stream in zip((a, b), streams):
                ptr = alloc(SIZE, 0, stream.handle)
                assert ptr is not None and device.memory_stats()["slices_in_use"] == 1
                free(ptr, SIZE, 0, stream.handle)
        finally:
            for stream in streams:
                _core.pooled_allocator_unroute(stream)


@pytest.mark.parametrize("size", [0, 2**40, 2**63, 2**64 - 1])
def test_size_zero_and_huge_sizes_are_refused_without_change(abi, routed, size):
    alloc, _ = abi
    device, stream = routed
    before, memory = counters(), device.memory_stats()
    assert alloc(size, 0, stream.handle) is None
    assert delta(before)["refused"] == 1 and delta(before)["live"] == 0
    assert device.memory_stats() == memory


def test_a_pool_miss_inside_a_driver_capture_is_refused_not_allocated(abi):
    alloc, free = abi
    device = lifecore.Device("mock", graphs="hardware")
    stream = device.stream()
    _core.pooled_allocator_route(stream)
    try:
        stream.graph_prepare()
        stream.begin_capture()
        before, allocations = counters(), device.memory_stats()["driver_allocations"]
        assert alloc(SIZE, 0, stream.handle) is None  # nothing primed: a memory node is never made
        assert delta(before)["refused"] == 1
        assert device.memory_stats()["driver_allocations"] == allocations
        stream.end_capture().destroy()  # the recording itself is unharmed
    finally:
        _core.pooled_allocator_unroute(stream)
        device.close()


def test_a_closed_device_refuses_and_a_late_free_is_harmless(abi):
    alloc, free = abi
    device = lifecore.Device("mock")
    stream = device.stream()
    _core.pooled_allocator_route(stream)
    handle = stream.handle
    ptr = alloc(SIZE, 0, handle)
    device.close()
    before = counters()
    assert alloc(SIZE, 0, handle) is None
    free(ptr, SIZE, 0, handle)  # the device returned its memory already
    assert delta(before)["refused"] == 1 and delta(before)["releases"] == 1
    _core.pooled_allocator_unroute(stream)


def test_concurrent_allocations_and_frees_balance(abi, routed):
    alloc, free = abi
    device, stream = routed
    before = counters()
    errors = []

    def worker(seed):
        try:
            held = []
            for i in range(200):
                size = 256 * (1 + (seed + i) % 7)
                ptr = alloc(size, 0, stream.handle)
                assert ptr
                held.append((ptr, size))
                if i % 3 == 2:
                    for p, s in held:
                        free(p, s, 0, stream.handle)
                    held.clear()
            for p, s in held:
                free(p, s, 0, stream.handle)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    moved = delta(before)
    assert moved["allocations"] == moved["releases"] == 800 and moved["live"] == 0 and moved["live_bytes"] == 0
    stream.sync()
    assert device.memory_stats()["slices_in_use"] == 0


def test_the_torch_helpers_explain_when_torch_cannot_pool(routed):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from lifecore import torch as lifecore_torch

    _, stream = routed
    with pytest.raises(LifecoreTypeError, match="lifecore Stream"):
        lifecore_torch.mem_pool(object())
    with pytest.raises(LifecoreTypeError, match="lifecore Stream"):
        lifecore_torch.release_stream("stream")
    available, reason = lifecore_torch.pooled_allocator_available()
    if available:
        pytest.skip("this torch can load a pluggable allocator (the CUDA test covers it)")
    assert reason and torch.__version__ in reason
    with pytest.raises(lifecore.errors.BackendUnavailableError, match="pooled_allocator"):
        lifecore_torch.mem_pool(stream)
    assert lifecore_torch.allocator_stats() == counters()


def test_a_stream_whose_work_lifecore_never_sees_still_reuses_freed_memory(abi, routed):
    # Before: a free waited for the stream's next fence, which only lifecore's own operations
    # bring; with torch issuing all the work, every allocation was a new driver allocation until
    # the device ran out. A pool miss now fences the drops waiting and takes what is done.
    alloc, free = abi
    device, stream = routed
    deadline = time.monotonic() + 10
    reused = False
    while not reused and time.monotonic() < deadline:
        made = device.memory_stats()["driver_allocations"]
        ptr = alloc(SIZE, 0, stream.handle)
        assert ptr is not None
        reused = device.memory_stats()["driver_allocations"] == made
        free(ptr, SIZE, 0, stream.handle)
        time.sleep(0.001)  # the emulated device's worker passes the fence meanwhile
    assert reused  # no sync, no lifecore operation on the stream


def test_routing_names_itself_on_a_closed_device_and_its_streams_are_no_longer_counted():
    device = lifecore.Device("mock")
    stream = device.stream()
    before = counters()["streams"]
    _core.pooled_allocator_route(stream)
    assert counters()["streams"] == before + 1
    device.close()
    assert counters()["streams"] == before  # "routed now": a closed device's stream is not
    with pytest.raises(lifecore.ClosedError, match="^route: the device is closed"):
        _core.pooled_allocator_route(stream)
    _core.pooled_allocator_unroute(stream)
