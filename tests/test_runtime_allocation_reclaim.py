"""An allocation that finds the device full of memory its stream dropped waits for that memory
instead of failing: dropped slices go back to the pool only after the work queued before the
drop (the stream's next fence), so a program that allocates and drops without syncing once ran
out of memory with nothing alive. Before it fails, an allocation waits for the stream's work,
gives the pool's free slices back to the driver and asks once more; a device that is really
full still refuses, and nothing alive is touched."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import DriverError

from backend_roles import EMULATED

GIB = 1 << 30


@pytest.fixture
def dev():
    with lifecore.Device(EMULATED) as device:
        yield device


def total_bytes(dev) -> int:
    s = dev.stream()
    with pytest.raises(lifecore.InvalidArgumentError, match=r"device's memory \((\d+) bytes\)") as caught:
        s.alloc(1 << 62)
    return int(caught.value.args[0].split("device's memory (")[1].split(" ")[0])


def test_dropping_a_buffer_with_no_sync_never_runs_the_device_out_of_memory(dev):
    s = dev.stream()
    rounds = total_bytes(dev) // GIB * 3  # three times what the device holds, one GiB alive at a time
    for _ in range(rounds):
        buf = s.alloc(GIB)
        del buf
    stats = dev.memory_stats()
    assert stats["pool_bytes"] <= total_bytes(dev)
    s.sync()
    assert dev.memory_stats()["slices_in_use"] == 0


def test_temporaries_filled_and_dropped_are_reclaimed_whatever_their_size(dev):
    s = dev.stream()
    sizes = [GIB, 3 * GIB // 2, GIB // 2]  # other sizes than the pool holds free: it gives them back
    for i in range(3 * total_bytes(dev) // GIB):
        t = s.alloc(sizes[i % 3])
        s.write(t, np.arange(4, dtype=np.int32))  # work queued on it before the drop
        del t
    s.sync()
    assert dev.memory_stats()["slices_in_use"] == 0


def test_a_device_really_full_still_refuses_and_what_is_alive_is_intact(dev):
    s = dev.stream()
    kept = []
    with pytest.raises(DriverError, match="OUT_OF_MEMORY"):
        for i in range(total_bytes(dev) // GIB + 1):
            buf = s.alloc(GIB)
            s.write(buf, np.full(4, i, dtype=np.int32))
            kept.append(buf)
    assert len(kept) == total_bytes(dev) // GIB
    s.sync()
    for i, buf in enumerate(kept):  # a zero-copy host view on the mock: nothing is read but the words
        assert np.from_dlpack(buf.view("int32"))[:4].tolist() == [i] * 4
    del kept
    buf = s.alloc(GIB)  # usable again: what was dropped is reclaimed
    assert buf.nbytes == GIB


def test_a_large_buffer_takes_its_size_rounded_to_two_mebibytes_not_a_power_of_two(dev):
    """Before: every request was rounded up to a power of two, so 5 GiB on an 8 GiB device took
    the whole device and a 2 GiB request after it ran out of memory with 7 GiB asked for."""
    s = dev.stream()
    total = total_bytes(dev)
    first = (total // 2 + GIB) // GIB * GIB + 1  # past half the device, by a byte
    big = s.alloc(first)
    assert dev.memory_stats()["pool_bytes"] == first - 1 + (2 << 20)
    rest = s.alloc((total - first) // (2 << 20) * (2 << 20) - (2 << 20))  # what is left, less one granule
    s.write(rest, np.arange(4, dtype=np.int32))
    s.sync()
    assert dev.memory_stats()["slices_in_use"] == 2 and dev.memory_stats()["pool_bytes"] <= total
    assert big.alive and rest.alive
