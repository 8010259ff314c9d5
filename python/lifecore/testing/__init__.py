"""Hypothesis state machines that check lifecore's lifecycles against their reference models.

They ship with the package so you can run them against your own backends and GPUs; each
takes a factory for the thing under test. Each machine lives in its own submodule and is
imported on first use, so importing ``lifecore.testing`` does not require Hypothesis.

- :class:`StreamCaptureMachine`, :func:`run_stream_capture_machine`: graph capture on a stream.
- :class:`SequenceSessionMachine`: sequence sessions, KV backing and admission.
- :class:`CaptureSessionMachine`: capture sessions, budgets, checkpoints and interventions.

All three have one shape (:mod:`lifecore.testing.machine`): a factory of the thing under test,
``Machine.bind(factory)`` and ``Machine.run(factory, settings=..., seed=...)``, one
:class:`MachineStats` per lifecycle (``Machine.stats``; ``STATS`` is graph capture's), and one
comparison with the reference model (:func:`lifecore.testing.contract.both`).
:func:`offers_fault_injection` asks a device whether ``inject_fault`` works on it, and
:func:`emulated_backend` names the registry's emulated backend (the device with fault injection
and the test hooks).

Not machines, imported by their module path: :mod:`lifecore.testing.conformance` (a pytest
suite every backend must pass; subclass it for your own backend) and
:mod:`lifecore.testing.differential` (the same seeded steps on two devices, compared). The
benchmarks live in :mod:`lifecore.benchmarks` (:mod:`lifecore.testing.stream_benchmarks` and
:mod:`lifecore.testing.gpu_replay_benchmarks` remain as the older import paths).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each name is imported on first use
    from .capture_session import CaptureSessionMachine as CaptureSessionMachine
    from .emulated import emulated_backend as emulated_backend
    from .fault_injection import offers_fault_injection as offers_fault_injection
    from .machine import LifecycleMachine as LifecycleMachine, run_machine as run_machine
    from .machine_stats import MachineStats as MachineStats
    from .sequence_session import SequenceSessionMachine as SequenceSessionMachine
    from .stream_capture import (STATS as STATS, StreamCaptureMachine as StreamCaptureMachine,
                                 run_stream_capture_machine as run_stream_capture_machine)

_EXPORTS = {
    "StreamCaptureMachine": ".stream_capture",
    "run_stream_capture_machine": ".stream_capture",
    "STATS": ".stream_capture",
    "SequenceSessionMachine": ".sequence_session",
    "CaptureSessionMachine": ".capture_session",
    "offers_fault_injection": ".fault_injection",
    "emulated_backend": ".emulated",
    "LifecycleMachine": ".machine",
    "run_machine": ".machine",
    "MachineStats": ".machine_stats",
}

__all__ = sorted(_EXPORTS)


if not TYPE_CHECKING:  # a checker reads the imports above: a misspelled name is missing, not Any
    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'lifecore.testing' has no attribute {name!r}")
        return getattr(importlib.import_module(module, __name__), name)
