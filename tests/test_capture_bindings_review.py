"""What a reading of the capture bindings found, each once a crash or a hang from Python input:
a routing decision whose list subclass iterates otherwise than its length says; a backend's
answer whose item's __index__ empties the list being read; a backend handing back a delivered
record's evidence as a new payload, which was moved out of that record; an observer made on a
session that was never initialized; a payload over a NumPy array resized with refcheck=False;
a subclass whose ``base`` is itself; a producer describing a negative extent; a number whose
__float__ raises (reported as an overflow, and an interrupt swallowed). And an intervene made
out of order, which noted what it saw before refusing, and so refused a later recompute."""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest

import dlpack_producer as dp
from lifecore import InvalidArgumentError, LifecoreTypeError
from lifecore.capture import (CapturePayload, CapturePhase, CaptureSelection, CaptureSession, CaptureTransform,
                              CaptureUsage, InterventionAction, InterventionOperation, InterventionPlan, NumpyBackend,
                              TransformKind, interventions as iv)
from lifecore.errors import CaptureSessionError
from lifecore.testing.capture_session import ROUTER, sample_discovery

from capture_builders import REQUEST, session_for

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE


def with_interventions(ops, *, estimator=None, selections=()):
    discovery = sample_discovery()
    session = session_for(*selections, discovery=discovery, request=REQUEST)
    session.enable_interventions(InterventionPlan(list(ops)).admit(discovery, session), estimator or NumpyBackend())
    return session


def routed_session() -> CaptureSession:
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3])])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    return session


def decision(rows: int = 4):
    return np.array([[0, 1]] * rows, dtype=np.int64), np.full((rows, 2), 0.5, np.float32)


def test_a_routing_decision_is_read_from_what_its_iteration_gives() -> None:
    ids, weights = decision()

    class Raising(list):
        def __iter__(self):
            raise RuntimeError("boom")

    class Empty(list):
        def __iter__(self):
            return iter([])

    with pytest.raises(RuntimeError, match="boom"):  # before: a crash
        routed_session().routing_applied(NumpyBackend(), ROUTER, None, Raising([ids, weights]))
    with pytest.raises(LifecoreTypeError, match=r"argument 'effective' must be a pair \(ids, coefficients\), got "
                                                r".*Empty of 0 items"):  # before: read past a tuple's end
        routed_session().routing_applied(NumpyBackend(), ROUTER, None, Empty([ids, weights]))


def test_a_backend_list_emptied_by_its_own_items_is_read_from_a_snapshot() -> None:
    kept: dict[str, list] = {}

    class Emptying:
        def __index__(self) -> int:
            kept["shape"].clear()  # before: the caster read the list's freed items on
            return 4

    class Backend(NumpyBackend):
        def shape(self, tensor):
            kept["shape"] = [Emptying() for _ in range(3)]
            return kept["shape"]

    with pytest.raises(InvalidArgumentError, match="not shaped"):
        routed_session().routing_applied(Backend(), ROUTER, None, decision())


def test_a_delivered_records_evidence_handed_back_stays_the_records() -> None:
    evidence = np.arange(1000, dtype=np.float32)

    class Estimator:
        def estimate(self, tensor, request):
            return CaptureUsage(1, 2**40, 2**40, 2**40)

    class Backend(NumpyBackend):
        donor = None

        def transform(self, tensor, request):
            if request.kind == TransformKind.PREVIEW:  # the intervention's evidence
                return CapturePayload.from_array(evidence.copy())
            if Backend.donor is not None and request.kind == TransformKind.FULL_TENSOR:
                return Backend.donor.interventions[0].evidence[0]  # a view into the delivered step
            return super().transform(tensor, request)

    selection = CaptureSelection("t", "blocks.1.mlp", CaptureTransform.full_tensor())
    session = with_interventions([iv.scale("s", "blocks.0.mlp", 2.0, evidence=8)], estimator=Estimator(),
                                 selections=[selection])
    backend, h = Backend(), np.ones((1, 4, 8), np.float32)
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", h)
    session.intervene(backend, "blocks.0.mlp", h)
    session.observe(backend, "blocks.1.mlp", h)
    delivered = session.take_step()
    Backend.donor = delivered
    session.begin_step(DECODE, 1)
    h = np.ones((1, 1, 8), np.float32)
    session.observe(backend, "blocks.0.mlp", h)
    session.intervene(backend, "blocks.0.mlp", h)
    with pytest.raises(CaptureSessionError):
        session.observe(backend, "blocks.1.mlp", h)  # the handed-back payload does not fit the point
    session.take_step()
    kept = delivered.interventions[0].evidence[0]
    assert kept.shape == [1000] and np.array_equal(kept.tensor, evidence)


def test_an_observer_of_a_session_never_initialized_is_refused() -> None:
    session = CaptureSession.__new__(CaptureSession)
    with pytest.raises(LifecoreTypeError, match=r"CaptureSession.observer: self must be a CaptureSession \(an "
                                                r"initialized one\)"):  # before: a division by zero (SIGFPE)
        session.observer("blocks.0.mlp", NumpyBackend())


def test_a_payload_over_a_numpy_array_resized_under_it_refuses_to_read() -> None:
    array = np.ones(1 << 16, np.float32)
    payload = CapturePayload.from_array(array)
    array.resize(1 << 18, refcheck=False)  # moves the memory whatever views it has
    assert payload.tensor is array  # the array itself, as it is now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(CaptureSessionError, match="changed its shape, dtype or place since it was captured"):
            payload.values  # before: the freed memory, read


def test_an_array_whose_base_is_itself_is_copied_not_walked_for_ever() -> None:
    class Looping(np.ndarray):
        @property
        def base(self):
            return self

    payload = CapturePayload.from_array(np.arange(8, dtype=np.float32).view(Looping))
    assert np.array_equal(payload.tensor, np.arange(8, dtype=np.float32))


def test_a_negative_extent_is_refused() -> None:
    memory = np.ones(16, np.uint8)

    class Negative(dp.Producer):
        def __dlpack__(self, stream=None, max_version=None, **kw):
            shape = (ctypes.c_int64 * 1)(-1)
            tensor = dp._Tensor(self.address, dp._Device(1, 0), 1, dp._DataType(1, 8, 1), shape, None, 0)
            managed = dp._Managed(dp._Version(1, 0), None, None, 0, tensor)
            self._keep.append((shape, managed))
            return dp._capsule_new(ctypes.addressof(managed), b"dltensor_versioned", None)

    with pytest.raises(InvalidArgumentError, match=r"has a negative extent \(-1\) at axis 0"):
        CapturePayload.from_array(Negative(memory.ctypes.data, [16]))


def test_a_number_whose_float_raises_says_so_and_an_interrupt_stays_one() -> None:
    class Refusing:
        def __float__(self):
            raise ValueError("not a number I can give")

    class Interrupting:
        def __float__(self):
            raise KeyboardInterrupt

    with pytest.raises(InvalidArgumentError, match=r"argument 'factor' could not be read as a float \(ValueError: "
                                                   r"not a number I can give\)"):  # before: "too large for a float"
        InterventionOperation("a", "blocks.0.mlp", InterventionAction.SCALE, factor=Refusing())
    with pytest.raises(KeyboardInterrupt):  # before: swallowed into an overflow error
        CaptureTransform.histogram([Interrupting(), 1.0])


def test_an_intervene_out_of_order_notes_nothing_a_recompute_reads() -> None:
    # Before: the refused call noted its tensor's shape as one the decode-only operation passed
    # by, so the recompute of a decode forward of that shape was refused as ambiguous.
    from lifecore.capture import CaptureSchedule

    operations = [iv.scale("always", "blocks.0.mlp", 2.0),
                  iv.scale("decode", "blocks.0.mlp", 3.0, schedule=CaptureSchedule(prefill=False))]
    session = with_interventions(operations)
    backend = NumpyBackend()
    prefill, decode = np.ones((1, 4, 8), np.float32), np.ones((1, 1, 8), np.float32)
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="observe must precede intervene at blocks.0.mlp"):
        session.intervene(backend, "blocks.0.mlp", decode)
    session.observe(backend, "blocks.0.mlp", prefill)
    session.intervene(backend, "blocks.0.mlp", prefill)
    session.take_step()
    session.begin_step(DECODE, 1)
    session.observe(backend, "blocks.0.mlp", decode)
    session.intervene(backend, "blocks.0.mlp", decode)
    session.take_step()
    again = session.reintervene(backend, "blocks.0.mlp", decode)
    assert again is not None and np.all(np.asarray(again) == 6.0)  # both operations, as the forward ran them
