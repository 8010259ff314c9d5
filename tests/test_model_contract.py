"""The contract the reference models share (lifecore.models.contract: the error kinds and the one
ModelError) and the one comparison every machine makes with it (lifecore.testing.contract.both)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lifecore
from lifecore import errors
from lifecore.models import capture_session, sequence_session, stream_capture
from lifecore.models.contract import ERROR_KINDS, ModelError, error_kind
from lifecore.testing.contract import both, error_kind_of
from lifecore.testing.machine_stats import MachineStats

ERROR_HPP = Path(__file__).resolve().parents[1] / "cpp" / "include" / "lifecore" / "error.hpp"


def test_the_kinds_mirror_the_core_and_the_exception_classes() -> None:
    rows = re.findall(r'X\((\w+), "(\w+)"\)', ERROR_HPP.read_text())
    assert rows, "no ErrorKind rows found"
    # The kind names as the core spells them (case and underscores aside), with the same classes.
    assert [(k.replace("_", "").lower(), c) for k, c in rows] == [(k.lower(), c) for k, c in ERROR_KINDS.items()]
    # EngineError alone is the reference engine's, raised in Python: no kind of the core's.
    assert sorted(ERROR_KINDS.values()) == sorted(set(errors.__all__) - {"EngineError"})


def test_every_model_raises_the_one_model_error() -> None:
    for model in (stream_capture, sequence_session, capture_session):
        assert model.ModelError is ModelError


def test_model_error_takes_a_kind_or_its_class_name_and_refuses_anything_else() -> None:
    assert ModelError("CaptureState", "x").kind == ModelError("CaptureStateError", "x").kind == "CaptureState"
    e = ModelError("BudgetExceeded", budget="captures", cumulative=True)
    assert (e.error_class, e.budget, e.cumulative, e.message) == ("BudgetExceededError", "captures", True, None)
    assert repr(e) == "ModelError('BudgetExceeded', budget='captures', cumulative=True)"
    with pytest.raises(ValueError, match="unknown error kind 'Nonsense'"):
        ModelError("Nonsense")
    with pytest.raises(ValueError):
        error_kind("InvalidArgumentErr")


def test_error_kind_of_names_the_most_specific_lifecore_class() -> None:
    assert error_kind_of(errors.LifecoreOverflowError("x")) == "Overflow"
    assert error_kind_of(errors.DeviceLostError("x")) == "DeviceLost"
    with pytest.raises(TypeError):
        error_kind_of(ValueError("x"))


def _raise(error: BaseException):
    def call():
        raise error
    return call


def test_both_agree_on_success_and_on_the_kind_of_a_refusal() -> None:
    stats = MachineStats("example")
    stats.current = "rule"
    result = both(lambda: 1, lambda: 2, stats=stats)
    assert (result.expected, result.actual, result.kind) == (1, 2, None)
    expected, actual, kind = both(_raise(ModelError("Closed")), _raise(errors.ClosedError("gone")), stats=stats)
    assert (expected, actual, kind) == (None, None, "Closed")
    assert stats.outcomes[("rule", "err:Closed")] == 1
    # lifecore may raise a subclass of the model's class (an overflow is an invalid argument)
    assert both(_raise(ModelError("InvalidArgument")), _raise(errors.LifecoreOverflowError("big"))).kind \
        == "InvalidArgument"


@pytest.mark.parametrize("model_call, core_call, complaint", [
    (lambda: None, _raise(errors.ClosedError("gone")), "the model accepts it"),
    (_raise(ModelError("Closed")), lambda: None, "expected ClosedError"),
    (_raise(ModelError("Closed")), _raise(errors.SessionStateError("no")), "expected ClosedError, got SessionStateError"),
])
def test_both_refuses_a_disagreement(model_call, core_call, complaint) -> None:
    with pytest.raises(AssertionError, match=complaint):
        both(model_call, core_call, what="op")


def test_both_compares_only_the_fields_a_lifecycle_declares() -> None:
    model = _raise(ModelError("CaptureState", "exact text"))
    core = _raise(errors.CaptureStateError("other text"))
    both(model, core)  # the message is not declared: not compared
    with pytest.raises(AssertionError, match="message 'other text' != 'exact text'"):
        both(model, core, fields=("message",))
    driver = errors.DriverError("failed")
    driver.code = 901
    both(_raise(ModelError("Driver", contains="901")), _raise(driver), fields=("contains",))  # the status code
    budget = errors.BudgetExceededError("over")
    budget.budget, budget.cumulative = "captures", False
    both(_raise(ModelError("BudgetExceeded", budget="captures", cumulative=False)), _raise(budget),
         fields=("budget", "cumulative"))
    with pytest.raises(AssertionError, match="cumulative False != True"):
        both(_raise(ModelError("BudgetExceeded", budget="captures", cumulative=True)), _raise(budget),
             fields=("budget", "cumulative"))
    with pytest.raises(ValueError, match="unknown fields"):
        both(lambda: None, lambda: None, fields=("colour",))


def test_a_non_lifecore_error_of_the_implementation_is_not_swallowed() -> None:
    with pytest.raises(RuntimeError):
        both(lambda: None, _raise(RuntimeError("bug")))
    assert lifecore.LifecoreError  # the package is imported: the classes compared are its own


def test_the_note_a_failure_report_shows_says_what_each_side_did(monkeypatch) -> None:
    # The falsifying steps of a failure report carry one note per compared call. A call both sides
    # accepted read "model -> None, lifecore -> None", as if both had returned None.
    import lifecore.testing.contract as contract

    notes: list[str] = []
    monkeypatch.setattr(contract, "note", notes.append)
    both(lambda: "Admitted", lambda: "Admitted", what="admit(r2, 9, 9)")
    both(_raise(ModelError("Closed", message="gone")), _raise(errors.ClosedError("gone")), what="admit(r3, 1, 1)")
    assert notes == ["admit(r2, 9, 9): model -> accepted, lifecore -> accepted",
                     "admit(r3, 1, 1): model -> refused: ModelError('Closed', message='gone'), "
                     "lifecore -> refused: ClosedError('gone')"]


def test_a_refusal_must_be_the_models_kind_not_a_narrower_one() -> None:
    # Before: any subclass passed, so a recoverable driver failure reported as a lost device (the
    # caller then throws the device away) agreed with a model expecting DriverError.
    def refuse(kind: str):
        def call():
            raise ModelError(kind)
        return call

    def raising(error: Exception):
        def call():
            raise error
        return call

    with pytest.raises(AssertionError, match="expected DriverError, got DeviceLostError"):
        both(refuse("Driver"), raising(errors.DeviceLostError("lost")), what="sync")
    # The one narrower form the contract allows: an overflow is an invalid argument.
    both(refuse("InvalidArgument"), raising(errors.LifecoreOverflowError("too big")), what="alloc")
    both(refuse("Driver"), raising(errors.DriverError("failed")), what="sync")
