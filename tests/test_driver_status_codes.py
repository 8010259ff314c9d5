"""The backend registry and lifecore's own status codes, as the bindings expose them: the
registered names in order, each backend's interop facts, and DriverError.lifecore_status
beside the native code and name."""

from __future__ import annotations

import pytest

import lifecore
from lifecore import _core

IMAGE_KINDS = {"builtin", "ptx", "cubin", "fatbin", "code_object"}
DLPACK_CPU, DLPACK_CUDA, DLPACK_ROCM = 1, 2, 10


def test_the_registered_backends_are_listed_in_the_registrys_order():
    names = _core.registered_backends()
    assert [info.name for info in _core.backends()] == names
    assert len(set(names)) == len(names) and "auto" not in names


def test_each_backend_reports_its_interop_facts():
    for info in _core.backends():
        assert info.dlpack_device_type in (DLPACK_CPU, DLPACK_CUDA, DLPACK_ROCM), info.name
        assert info.torch_device in ("cpu", "cuda"), info.name
        assert "builtin" in info.code_object_kinds and set(info.code_object_kinds) <= IMAGE_KINDS, info.name
        # Host memory is torch's "cpu"; only memory of a CUDA device offers the CUDA array interface.
        assert (info.dlpack_device_type == DLPACK_CPU) == (info.torch_device == "cpu"), info.name
        if info.cuda_array_interface:
            assert info.dlpack_device_type == DLPACK_CUDA, info.name


def test_lifecores_status_codes_are_named_once():
    codes = _core.status_codes()
    assert codes[0] == "success" and len(set(codes)) == len(codes)
    assert {"invalid_handle", "illegal_state", "capture_invalidated", "illegal_address", "unknown"} <= set(codes)


@pytest.mark.parametrize(("native", "lifecore_status"), [(2, "out_of_memory"), (801, "not_supported"), (12345, "unknown")])
def test_a_driver_error_names_the_status_both_ways(mock_hardware_device, native, lifecore_status):
    stream = mock_hardware_device.stream()
    # Twice: an allocation refused for want of memory reclaims what the stream dropped and asks
    # once more (test_runtime_allocation_reclaim.py), so one refusal alone is no error.
    mock_hardware_device.inject_fault("mem_alloc", native, times=2)
    with pytest.raises(lifecore.DriverError) as raised:
        stream.alloc(64)
    assert raised.value.code == native  # the native number, as before
    assert raised.value.lifecore_status == lifecore_status
    assert raised.value.lifecore_status in _core.status_codes()


def test_one_out_of_memory_refusal_is_answered_by_reclaiming_and_asking_again(mock_hardware_device):
    stream = mock_hardware_device.stream()
    mock_hardware_device.inject_fault("mem_alloc", 2)
    before = mock_hardware_device.memory_stats()["driver_allocations"]
    assert stream.alloc(64).nbytes == 64
    assert mock_hardware_device.memory_stats()["driver_allocations"] == before + 1
    mock_hardware_device.inject_fault("mem_alloc", 801)  # another refusal is never asked again
    with pytest.raises(lifecore.DriverError, match="801"):
        stream.alloc(1 << 20)

