import subprocess
import sys

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
    # lifecore.__all__ names the errors itself, so a type checker sees what a star import gives.
    exported = set(lifecore.__all__)
    assert set(lifecore.errors.__all__) <= exported
    assert {name for name in exported if name.endswith("Error")} == set(lifecore.errors.__all__)


def test_error_classes_follow_python_protocol_families():
    from lifecore import errors

    assert issubclass(errors.LifecoreOverflowError, OverflowError)
    assert issubclass(errors.LifecoreOverflowError, errors.InvalidArgumentError)
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.LifecoreTypeError, TypeError)
    assert issubclass(errors.DeviceLostError, errors.DriverError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.LifecoreError)


def test_the_core_has_one_submodule_per_lifecycle_and_the_driver_floor():
    from lifecore import _core

    areas = {"driver": "BackendInfo", "runtime": "Device", "sequence": "SequenceSession", "capture": "CaptureSession"}
    for area, name in areas.items():
        module = getattr(_core, area)
        assert module.__name__ == f"lifecore._core.{area}"
        assert getattr(module, name).__module__ == f"lifecore._core.{area}"
    # The names that were flat before the submodules stay flat: the same objects.
    for area in ("driver", "runtime", "sequence"):
        module = getattr(_core, area)
        for name in (n for n in vars(module) if not n.startswith("__")):
            assert getattr(_core, name) is getattr(module, name), f"_core.{name} is not _core.{area}.{name}"
    # The capture area was a submodule already and stays one only.
    assert not hasattr(_core, "CaptureSession")
    assert lifecore.Device is _core.runtime.Device and lifecore.backends is _core.driver.backends


def test_every_function_of_every_core_submodule_is_guarded():
    from lifecore import _call_guard, _core

    # The guard refuses a wrong type with a lifecore error in every area, flat name or not.
    for call in (_core.sequence.acquire_frames, _core.runtime.builtin_kernel, _core.builtin_kernel,
                 _core.driver._open_driver_probe):
        with pytest.raises(lifecore.LifecoreTypeError):
            call(object(), object(), object())
    assert _call_guard.install() > 0  # idempotent: guarding again changes nothing
    with pytest.raises(lifecore.LifecoreTypeError):
        _core.runtime.builtin_kernel(3)


def test_every_error_kind_of_the_core_names_a_class_of_lifecore_errors():
    # The C++ side checks at compile time that its table follows ErrorKind; this checks the
    # other end: each row names a class here, and each class here has its row.
    from lifecore import _core, errors

    names = _core._error_class_names()
    assert names[0] == "LifecoreError" and len(set(names)) == len(names)
    for name in names:
        assert issubclass(getattr(errors, name), errors.LifecoreError), name
    # EngineError alone is the reference engine's, raised in Python: no kind of the core's.
    assert set(names) == set(errors.__all__) - {"EngineError"}
    assert issubclass(errors.EngineError, errors.LifecoreError) and issubclass(errors.EngineError, RuntimeError)


@pytest.mark.parametrize("statement, part", [("import lifecore.torch", "lifecore.torch"),
                                             ("from lifecore.capture import TorchBackend", "TorchBackend"),
                                             ("import lifecore.engine", "lifecore.engine")])
def test_a_part_that_needs_torch_says_so_where_torch_is_missing(statement, part):
    # Before: a bare "No module named 'torch'" traceback, and the demo's hint named a package
    # index install (lifecore installs from its source).
    code = ("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
            f"try:\n    {statement}\nexcept ModuleNotFoundError as error:\n    print(error.name, '|', error)\n"
            "from lifecore.cli import main\nprint('demo exit', main(['demo']))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == (f"torch | {part} needs PyTorch, which is not installed: pip install torch (or, in "
                        f"lifecore's source folder, pip install \".[torch]\")"), run.stdout
    assert lines[-1] == "demo exit 1"
    assert "lifecore demo: lifecore.engine needs PyTorch, which is not installed" in run.stderr
