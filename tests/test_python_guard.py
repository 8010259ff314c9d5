"""Functions written in Python answer a call their signature cannot bind (an argument they do
not take, one too many, one missing) with LifecoreTypeError naming the call, as the bound C++
functions do; their body never runs. A TypeError from inside a body passes through as itself,
and the backend methods lifecore calls at each observation carry no guard."""

from __future__ import annotations

import asyncio
import enum
import importlib
import importlib.util
import inspect

import pytest

import lifecore
from lifecore import _python_guard
from lifecore.errors import LifecoreTypeError

MODULES = ["lifecore", "lifecore.sequence", "lifecore.capture", "lifecore.capture.interventions", "lifecore.kernels"]
TORCH_MODULES = ["lifecore.torch", "lifecore.engine"]
UNKNOWN = "not_an_argument_of_it"


def takes_any_keyword(func: object) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(func).parameters.values())


def entry_points(module_name: str) -> list[tuple[str, object, bool]]:
    """(label, callable taking keyword arguments, whether it takes any keyword) for what the
    module exports in Python."""
    module = importlib.import_module(module_name)
    found: list[tuple[str, object, bool]] = []
    for name in module.__all__:
        value = vars(module).get(name)
        if inspect.isfunction(value) and value.__module__.startswith("lifecore"):
            found.append((f"{module_name}.{name}", value, takes_any_keyword(value)))
        elif (isinstance(value, type) and value.__module__.startswith("lifecore")
              and not value.__module__.startswith("lifecore._core")
              and not issubclass(value, (BaseException, enum.Enum))):
            if "__init__" in vars(value):
                found.append((f"{module_name}.{name}", value, takes_any_keyword(vars(value)["__init__"])))
            for attr, raw in vars(value).items():
                if attr.startswith("_") or attr in _python_guard.CALLED_BY_LIFECORE or not inspect.isfunction(raw):
                    continue
                method = getattr(value, attr)
                found.append((f"{module_name}.{name}.{attr}",
                              lambda method=method, **kwargs: method(object(), **kwargs), takes_any_keyword(raw)))
    return found


@pytest.mark.parametrize("module_name", MODULES + TORCH_MODULES)
def test_every_python_entry_point_refuses_an_argument_it_does_not_take(module_name) -> None:
    if module_name in TORCH_MODULES and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    entries = entry_points(module_name)
    assert entries, f"{module_name} exports nothing written in Python"
    for label, call, takes_any_keyword in entries:
        with pytest.raises(LifecoreTypeError) as refused:
            call(**{UNKNOWN: 1})  # type: ignore[operator]
        # A function that passes keywords on (**kwargs) is refused for the argument it lacks.
        assert (UNKNOWN in str(refused.value)) != takes_any_keyword, (label, str(refused.value))
        assert refused.value.__cause__ is None, label


def test_the_message_names_the_call_and_the_argument() -> None:
    with pytest.raises(LifecoreTypeError, match=r"^lifecore.kernels.float_bits: takes 1 positional argument"):
        lifecore.float_bits(1.0, 2.0)  # type: ignore[call-arg]
    with pytest.raises(LifecoreTypeError, match=r"^lifecore.capture.limits: got an unexpected keyword argument 'nope'"):
        lifecore.capture.limits(per_step=1, nope=1)  # type: ignore[call-arg]
    with pytest.raises(LifecoreTypeError, match=r"^lifecore.sequence.preempt_for: missing"):
        lifecore.sequence.preempt_for()  # type: ignore[call-arg]


def test_a_type_error_from_the_body_passes_through_and_the_wrapper_keeps_the_function_s_face() -> None:
    ran = []

    def divide(a: int, b: int = 1) -> float:
        """Divides."""
        ran.append(True)
        return a / b

    guarded = _python_guard.guarded(divide, "divide")
    assert guarded(6, b=3) == 2 and ran == [True]
    with pytest.raises(TypeError) as raised:
        guarded("6")  # binds; the body's own TypeError
    assert not isinstance(raised.value, LifecoreTypeError) and len(ran) == 2
    with pytest.raises(LifecoreTypeError, match="divide: got an unexpected keyword argument 'c'"):
        guarded(6, c=1)  # type: ignore[call-arg]
    assert len(ran) == 2  # refused before the body ran
    assert guarded.__doc__ == "Divides." and str(inspect.signature(guarded)) == str(inspect.signature(divide))
    assert _python_guard.guarded(guarded, "again") is guarded


def test_the_methods_lifecore_calls_per_observation_carry_no_guard() -> None:
    backend = lifecore.capture.NumpyBackend
    for name in ("transform", "intervene", "shape", "dtype", "estimate"):
        assert not getattr(vars(backend)[name], "__lifecore_guarded__", False), name
    assert getattr(vars(lifecore.capture)["limits"], "__lifecore_guarded__", False)


def test_wait_async_written_in_python_on_a_core_class_refuses_what_it_does_not_take() -> None:
    """wait_async is Python attached to the core's CapacityWaitRegistration, so no module's
    export list names it: the call still answers LifecoreTypeError naming it, and nothing
    waits."""
    from lifecore.sequence import AdmissionCoordinator

    page = 4096
    c = AdmissionCoordinator(None, domains={"kv": 2 * page}, page_bytes=page, tokens_per_page=16,
                             max_active_sequences=8)
    held = c.admit("a", 32, 32)
    registration = c.register_waiter(c.admit("b", 16, 16))
    with pytest.raises(LifecoreTypeError, match=r"^CapacityWaitRegistration.wait_async: got an unexpected keyword argument 'nope'"):
        registration.wait_async(nope=1)  # type: ignore[call-arg]
    with pytest.raises(LifecoreTypeError, match=r"^CapacityWaitRegistration.wait_async: takes"):
        registration.wait_async(1.0, 2.0)  # type: ignore[misc]
    assert "timeout" in str(inspect.signature(registration.wait_async))
    # Still a coroutine function to introspection (asyncio's marker; inspect's from Python 3.12).
    assert asyncio.iscoroutinefunction(type(registration).wait_async)
    if hasattr(inspect, "markcoroutinefunction"):
        assert inspect.iscoroutinefunction(type(registration).wait_async)
    held.resources.close()


def test_a_class_without_a_constructor_of_its_own_refuses_an_argument() -> None:
    from lifecore.capture import NumpyBackend

    assert repr(NumpyBackend()) == "NumpyBackend()"
    with pytest.raises(LifecoreTypeError, match=r"^NumpyBackend: "):
        NumpyBackend(1)  # type: ignore[call-arg]


def test_the_testing_entry_points_refuse_what_they_do_not_take() -> None:
    pytest.importorskip("hypothesis", reason="lifecore.testing's machines need Hypothesis")
    from lifecore.testing import (StreamCaptureMachine, emulated_backend, offers_fault_injection, run_machine,
                                  run_stream_capture_machine)

    def device() -> lifecore.Device:
        return lifecore.Device(emulated_backend())

    refused = {
        "run_stream_capture_machine": lambda: run_stream_capture_machine(device, bogus=1),  # type: ignore[call-arg]
        "offers_fault_injection": lambda: offers_fault_injection(),  # type: ignore[call-arg]
        "emulated_backend": lambda: emulated_backend(1),  # type: ignore[call-arg]
        "run_machine": lambda: run_machine(5),  # type: ignore[arg-type]
        "StreamCaptureMachine.run: argument 'seed'": lambda: StreamCaptureMachine.run(device, seed="1"),  # type: ignore[arg-type]
        "StreamCaptureMachine.run: argument 'settings'": lambda: StreamCaptureMachine.run(device, settings=3),  # type: ignore[arg-type]
        "StreamCaptureMachine.run: argument 'factory'": lambda: StreamCaptureMachine.run(5),  # type: ignore[arg-type]
        "StreamCaptureMachine.bind: argument 'factory'": lambda: StreamCaptureMachine.bind(5),  # type: ignore[arg-type]
        "StreamCaptureMachine.bind: argument 'name'": lambda: StreamCaptureMachine.bind(device, name=5),  # type: ignore[arg-type]
    }
    runs = StreamCaptureMachine.stats.runs
    for names, call in refused.items():
        with pytest.raises(LifecoreTypeError) as error:
            call()
        assert str(error.value).startswith(names), (names, str(error.value))
    assert StreamCaptureMachine.stats.runs == runs  # refused before any machine was made
