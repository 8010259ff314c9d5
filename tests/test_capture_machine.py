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
