"""The capture-session state machine against the reference model, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from lifecore.capture import CountingBackend, NumpyBackend
from lifecore.testing import CaptureSessionMachine


def _numpy_tensor(shape, dtype, itemsize):
    return np.ones(shape, dtype={("floating", 4): np.float32, ("integer", 8): np.int64}[(dtype, itemsize)])


BACKENDS = {
    "counting": (CountingBackend, None),
    "numpy": (NumpyBackend, _numpy_tensor),
}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_capture_session_machine(name):
    backend_factory, tensor_factory = BACKENDS[name]
    run_state_machine_as_test(lambda: CaptureSessionMachine(backend_factory, tensor_factory),
                              settings=settings(settings.default))


@pytest.mark.no_sanitizer
def test_capture_session_machine_on_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from lifecore.torch import TorchBackend

    def tensor(shape, dtype, itemsize):
        return torch.ones(shape, dtype={("floating", 4): torch.float32, ("integer", 8): torch.int64}[(dtype, itemsize)])

    run_state_machine_as_test(lambda: CaptureSessionMachine(TorchBackend, tensor), settings=settings(settings.default))


class _ScalesItsInputToo(NumpyBackend):
    """Scales the hook's output in place and returns a copy: the session sees a new tensor of
    the right shape and dtype, and the model's outcomes agree; only the input tells."""

    def intervene(self, tensor, request):
        result = super().intervene(tensor, request)
        tensor[...] = result
        return result.copy()


class _WritesItsInput(NumpyBackend):
    """Zeroes the tensor it summarizes after reading it."""

    def transform(self, tensor, request):
        payload = super().transform(tensor, request)
        tensor[...] = 0
        return payload


@pytest.mark.parametrize("backend, call", [(_ScalesItsInputToo, "intervene"), (_WritesItsInput, "observe")])
def test_the_machine_finds_a_backend_that_modifies_the_tensor_it_was_given(backend, call):
    with pytest.raises(AssertionError, match=f"{call} at .*the backend modified the tensor it was given"):
        run_state_machine_as_test(lambda: CaptureSessionMachine(backend, _numpy_tensor),
                                  settings=settings(settings.default, max_examples=200, derandomize=True,
                                                    print_blob=False, database=None,
                                                    phases=[Phase.generate]))  # found, not shrunk


@pytest.mark.no_sanitizer
def test_the_machine_prices_a_torch_histograms_native_peak_as_torch_does(monkeypatch):
    # Before: the machine priced every backend's native peak with NumPy's bytes per element (24 for
    # a histogram, torch documents 40): under a 5,000-byte limit it expected a prefill histogram
    # (32 elements: 4,864 bytes by NumPy's count, 5,376 by torch's) admitted, and torch refused it.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from lifecore.testing import capture_session
    from lifecore.torch import TorchBackend

    def torch_tensor(shape, dtype_class, itemsize):
        return torch.ones(shape, dtype={("floating", 4): torch.float32, ("integer", 8): torch.int64}[(dtype_class, itemsize)])

    monkeypatch.setattr(capture_session, "note", lambda *args: None)  # outside a Hypothesis test
    machine = CaptureSessionMachine(TorchBackend, torch_tensor)
    machine.setup(chosen=[("blocks.0.mlp", "histogram", 0, 1, False)], max_predictions=2, budgets="ample",
                  on_limit="fail", scale_op=None, routing_op=None, physical=5000)
    machine.begin_next_step()
    try:
        machine.observe("blocks.0.mlp", True)  # both refuse it: over the limit by torch's count
    finally:
        machine.teardown()
