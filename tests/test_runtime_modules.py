"""User kernels: lifecore.Module.from_ptx / from_image, module.function(name, params).

On the emulated device, loading anything but the built-ins is refused with a clear DriverError. The CUDA
path (against the fake driver library, and on a real CUDA device) is the cuda backend's own
test, test_backend_cuda_modules.py.
"""

from __future__ import annotations

import struct

import pytest

import lifecore
from lifecore import ClosedError, DriverError, InvalidArgumentError

from backend_roles import EMULATED


# fill_u32(n: u32, value: u32, out: ptr): out[i] = value for i < n.
FILL_PTX = """
.version 7.0
.target sm_52
.address_size 64

.visible .entry fill_u32(.param .u32 n, .param .u32 value, .param .u64 out)
{
  .reg .pred %p<2>;
  .reg .b32 %r<7>;
  .reg .b64 %rd<4>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra done;
  ld.param.u32 %r6, [value];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r5, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r6;
done:
  ret;
}
"""

FATBIN_HEADER = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 0)


# ---- the emulated device: built-in kernels only ----

@pytest.mark.parametrize("load", [
    lambda d: lifecore.Module.from_ptx(d, FILL_PTX),
    lambda d: lifecore.Module.from_image(d, b"\x7fELF" + b"\0" * 60),
    lambda d: lifecore.Module.from_image(d, FATBIN_HEADER + b"\0" * 16),
], ids=["ptx", "elf", "fatbin"])
def test_the_emulated_device_refuses_user_images_clearly_and_stays_usable(load) -> None:
    with lifecore.Device(EMULATED) as device:
        with pytest.raises(DriverError, match="runs built-in kernels only") as raised:
            load(device)
        assert raised.value.code == 801 and raised.value.status == "CUDA_ERROR_NOT_SUPPORTED"
        assert str(raised.value).startswith("Module.from_")
        stream = device.stream()
        buf = stream.alloc(16)
        stream.fill(buf, 7)
        stream.launch(lifecore.kernels.scale_f32, 1, 4, [4, 1.0, buf, buf])
        assert stream.read(buf) == struct.pack("<4I", *[7] * 4)


@pytest.mark.parametrize("data, match", [
    (b"", "empty"),
    (b"hello world", "unrecognised image"),
    (FILL_PTX.encode(), "use Module.from_ptx"),
])
def test_bad_images_are_invalid_arguments(data, match) -> None:
    with lifecore.Device(EMULATED) as device:
        with pytest.raises(InvalidArgumentError, match=match):
            lifecore.Module.from_image(device, data)


def test_empty_or_nul_ptx_is_an_invalid_argument() -> None:
    with lifecore.Device(EMULATED) as device:
        for text in ("", "abc\0def"):
            with pytest.raises(InvalidArgumentError):
                lifecore.Module.from_ptx(device, text)


def test_a_closed_device_refuses_modules_and_its_handles() -> None:
    device = lifecore.Device(EMULATED)
    stream = device.stream()
    buf = stream.alloc(64)
    graph = stream.capture(lambda s: s.fill(buf, 1))
    device.close()
    with pytest.raises(ClosedError, match="closed"):
        lifecore.Module.from_ptx(device, FILL_PTX)
    with pytest.raises(ClosedError, match="closed"):
        lifecore.Module.from_image(device, b"\x7fELF" + b"\0" * 60)
    with pytest.raises(ClosedError):
        graph.replay()
    with pytest.raises(ClosedError):
        buf.ptr
    with lifecore.Device(EMULATED) as other:
        # A handle of the closed device is refused on a live one, never used.
        s = other.stream()
        with pytest.raises((ClosedError, InvalidArgumentError)):
            s.fill(buf, 0)
        with pytest.raises((ClosedError, InvalidArgumentError)):
            graph.replay(s)
        assert other.memory_stats()["graphs_alive"] == 0


def test_builtin_kernels_say_so() -> None:
    assert lifecore.kernels.axpy_f32.is_builtin
    assert isinstance(lifecore.kernels.axpy_f32, lifecore.Kernel)
