import lifecore
import pytest


def test_backends_lists_every_registered_backend_with_reasons():
    infos = lifecore.backends()
    names = [info.name for info in infos]
    assert names and len(names) == len(set(names)) and "auto" not in names
    assert any(info.available for info in infos), "no backend can open a device"
    for info in infos:
        assert info.available or info.reason, f"{info.name} unavailable without a reason"


def test_driver_operations_are_named():
    names = lifecore.driver_operations()
    assert "launch_kernel" in names and "stream_end_capture" in names
    assert len(names) == len(set(names))


def test_error_hierarchy():
    assert issubclass(lifecore.InvalidArgumentError, ValueError)
    assert issubclass(lifecore.LifecoreTypeError, TypeError)
    for name in lifecore.errors.__all__:
        assert issubclass(getattr(lifecore, name), lifecore.LifecoreError)


def test_error_classes_follow_python_protocol_families():
    from lifecore import errors

    assert issubclass(errors.LifecoreOverflowError, OverflowError)
    assert issubclass(errors.LifecoreOverflowError, errors.InvalidArgumentError)
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.LifecoreTypeError, TypeError)
    assert issubclass(errors.DeviceLostError, errors.DriverError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.LifecoreError)
