"""What an audit of the array interop found: a legacy DLPack export whose producer says through
the buffer protocol that it is read-only (a JAX array) was written; the mock's memory was not
256-byte aligned as DLPack promises (JAX copied instead of viewing); on the mock, a tensor
over a buffer's memory that runs past it, or over another device's buffer, was mapped as
foreign host memory and written; a masked array was taken as a table's ``out``; errors named
the wrong call."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import ClosedError, InvalidArgumentError
from lifecore import kernels as K
from lifecore.sequence import AdmissionCoordinator

from backend_roles import EMULATED
from numpy_views import needs_writable_views


class ImmutableArray(bytes):
    """What JAX's arrays are to lifecore: a legacy capsule only (no max_version, so no read-only
    flag) and a buffer protocol that refuses writers. The capsule describes `values`."""

    values: np.ndarray

    def __dlpack__(self, stream=None):
        return self.values.__dlpack__()

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()


def immutable(n: int) -> ImmutableArray:
    array = ImmutableArray(bytes(4 * n))
    array.values = np.arange(n, dtype=np.float32)
    return array


def test_a_producer_whose_buffer_protocol_refuses_writers_is_not_written():
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        b = s.alloc(64)
        s.write(b, np.full(16, 7, np.float32))
        j = immutable(16)
        for call in (lambda: s.copy(j, b), lambda: s.fill(j, 0x3F800000),
                     lambda: s.launch(K.scale_f32, 1, 16, [16, 3.0, b, j])):
            with pytest.raises(InvalidArgumentError, match=r"argument '(dst|buf|out)' is read-only, and the operation "
                                                           r"writes it"):
                call()
        assert j.values.tolist() == list(range(16))  # nothing written
        s.copy(b, j)  # read from: taken
        out = np.empty(16, np.float32)
        s.read_into(b, out)
        assert out.tolist() == list(range(16))


@pytest.mark.parametrize("nbytes", [4, 64, 256, 4096, 1 << 20])
def test_the_mocks_memory_is_256_byte_aligned_as_dlpack_promises(nbytes):
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buffers = [s.alloc(nbytes) for _ in range(3)]
        assert all(np.from_dlpack(b).ctypes.data % 256 == 0 for b in buffers)


@needs_writable_views
def test_a_tensor_running_past_a_buffers_memory_is_refused_on_the_mock():
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        b = s.alloc(64)
        s.fill(b, 5)
        inside = np.from_dlpack(b)
        past = np.lib.stride_tricks.as_strided(inside[8:], shape=(1040,), strides=(1,))  # 1,040 bytes from byte 8
        with pytest.raises(InvalidArgumentError, match=r"^fill: argument 'buf' runs past the bytes of one of the "
                                                       r"device's buffers or KV arenas \(1040 bytes"):
            s.fill(past, 0)
        s.fill(inside[4:8], 9)  # within it: the buffer itself
        s.sync()
        assert inside.view(np.uint32).tolist() == [5] + [9] + [5] * 14


@needs_writable_views
def test_a_view_of_another_devices_buffer_is_refused_on_the_mock():
    with lifecore.Device(EMULATED) as one, lifecore.Device(EMULATED) as two:
        theirs = two.stream().alloc(64)
        mine = one.stream()
        with pytest.raises(InvalidArgumentError, match=r"^fill: argument 'buf' is memory of a buffer of another device"):
            mine.fill(np.from_dlpack(theirs), 1)
        mine.fill(np.zeros(16, np.uint32), 1)  # host memory of no device's: mapped as foreign memory


def test_a_masked_table_out_and_the_calls_errors_name():
    c = AdmissionCoordinator(None, domains={"kv": 8 * 64}, page_bytes=64, tokens_per_page=4, max_active_sequences=2)
    session = c.admit("a", 4, 8).resources.open_session()
    masked = np.ma.masked_array(np.zeros((1, 4), np.int32), mask=[[True, False, False, False]])
    with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is a NumPy masked array"):
        c.block_table([session], 4, masked)
    assert masked.data.tolist() == [[0, 0, 0, 0]]
    session.close()
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        b = s.alloc(64)
        b.free()
        with pytest.raises(ClosedError, match=r"^__dlpack__: "):
            b.__dlpack__()
        freed = s.alloc(16)
        freed.free()
        coordinator = AdmissionCoordinator(dev, domains={"kv": 8 * 64}, page_bytes=64, tokens_per_page=4,
                                           max_active_sequences=1)
        one = coordinator.admit("b", 4, 8).resources.open_session()
        with pytest.raises(ClosedError, match=r"^block_table: "):
            coordinator.block_table([one], 4, freed)
        one.close()


def test_write_read_and_read_into_take_host_tensors_and_buffer_views():
    # Before: a torch tensor and a BufferView were refused by these three alone, where copy,
    # fill and launch take both; a bfloat16 tensor had no way in short of reinterpreting it.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        b = s.alloc(32)
        view = b.view("float32", (8,))
        values = torch.arange(8, dtype=torch.float32)
        s.write(view, values)
        assert np.frombuffer(s.read(view), np.float32).tolist() == list(range(8))
        out = torch.zeros(8, dtype=torch.float32)
        s.read_into(view, out)
        assert out.tolist() == list(range(8))
        half = torch.arange(16, dtype=torch.bfloat16)  # no NumPy dtype: read through DLPack as bytes
        s.write(b, half)
        back = torch.zeros(16, dtype=torch.bfloat16)
        s.read_into(b, back)
        assert torch.equal(back, half)
        # Refused with the reason, changing nothing.
        with pytest.raises(InvalidArgumentError, match=r"^read_into: argument 'out' must be a C-contiguous, writable "
                                                       r"tensor in host memory"):
            s.read_into(b, torch.zeros(32, dtype=torch.bfloat16)[::2])
        with pytest.raises(InvalidArgumentError, match=r"^write: argument 'data' must be a C-contiguous tensor"):
            s.write(b, torch.zeros(32, dtype=torch.bfloat16)[::2])
        with pytest.raises(lifecore.LifecoreTypeError, match=r"^read: argument 'buf' must be a Buffer or a BufferView, "
                                                             r"got int"):
            s.read(3)
        s.read_into(b, back)
        assert torch.equal(back, half)


def test_a_tensor_not_aligned_to_its_elements_is_refused_everywhere():
    # Before: accepted on the mock, where a GPU's kernel faults on such loads (losing its context).
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        x = s.alloc(64)
        odd = np.frombuffer(bytearray(65), np.uint8)[1:].view(np.float32)  # 16 float32 at an odd address
        for call in (lambda: s.launch(K.scale_f32, 1, 16, [16, 2.0, odd, x]), lambda: s.copy(x, odd)):
            with pytest.raises(InvalidArgumentError, match=r"not aligned to its 4-byte elements"):
                call()
        words = np.zeros(17, np.uint8)[1:]  # bytes: aligned as bytes, not as the words fill writes
        with pytest.raises(InvalidArgumentError, match=r"^fill: argument 'buf' starts at 0x[0-9a-f]+, not 4-byte "
                                                       r"aligned"):
            s.fill(words, 7)
        assert not words.any()
        s.fill(np.zeros(16, np.uint8), 7)  # an aligned one, as before
