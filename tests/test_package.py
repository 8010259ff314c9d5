import lifecore
import pytest


def test_backends_lists_all_three_with_reasons():
    infos = lifecore.backends()
    assert [info.name for info in infos] == ["mock", "cuda", "hip"]
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


def test_every_error_kind_of_the_core_names_a_class_of_lifecore_errors():
    # The C++ side checks at compile time that its table follows ErrorKind; this checks the
    # other end: each row names a class here, and each class here has its row.
    from lifecore import _core, errors

    names = _core._error_class_names()
    assert names[0] == "LifecoreError" and len(set(names)) == len(names)
    for name in names:
        assert issubclass(getattr(errors, name), errors.LifecoreError), name
    assert set(names) == set(errors.__all__)
