"""What a review of preemption and the decode table found: preempt_for on a closed coordinator
(or one whose device closed) aborted healthy sequences and said the demand was satisfied, for
an extension that could only raise ClosedError; an error of a limit's own __index__ became a
type error; a busy candidate's reason named an internal call; and DecodeTable.step over empty
rows alone raised ClosedError once its coordinator was gone, though it reads no session."""

from __future__ import annotations

import gc

import pytest

import lifecore
from lifecore.errors import ClosedError
from lifecore.sequence import AdmissionCoordinator, Admitted, BackingOutcome, SessionPhase, preempt_for

from backend_roles import EMULATED

PAGE = 4096
TPP = 16


def coordinator(pages: int, device=None) -> AdmissionCoordinator:
    return AdmissionCoordinator(device, domains={"kv": pages * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                                max_active_sequences=4)


def open_session(c, request_id, prompt, fit):
    decision = c.admit(request_id, prompt, fit)
    assert isinstance(decision, Admitted)
    with decision.resources as resources:
        return resources.open_session()


def deferred_pair(c):
    """A sequence deferred for one more page, and one whose release would serve it."""
    long, short = open_session(c, "long", TPP, 2 * TPP), open_session(c, "short", TPP, TPP)
    assert long.step(2 * TPP) == BackingOutcome.BACKING_DEFERRED
    return long, short, long.step_deferral


@pytest.mark.parametrize("close", ["coordinator", "device"])
def test_preempt_for_on_a_closed_coordinator_aborts_nobody(close):
    device = lifecore.Device(EMULATED) if close == "device" else None
    c = coordinator(2, device)
    long, short, deferral = deferred_pair(c)
    (device if device is not None else c).close()
    with pytest.raises(ClosedError, match="preempt_for"):
        preempt_for(c, deferral, [short])
    assert short.phase is not SessionPhase.ABORTED and not short.closed  # it keeps its work
    assert short.step(TPP) == BackingOutcome.CURRENT  # and steps on within the blocks it holds
    long.close()
    short.close()


class _IndexFails:
    def __index__(self):
        raise ValueError("my own __index__ failed")


def test_a_limits_own_index_error_reaches_the_caller():
    c = coordinator(2)
    long, short, deferral = deferred_pair(c)
    with pytest.raises(ValueError, match="my own __index__ failed"):  # as step() passes it on
        preempt_for(c, deferral, [short], limit=_IndexFails())
    assert not short.closed
    np = pytest.importorskip("numpy")
    report = preempt_for(c, deferral, [short], limit=np.int64(1))
    assert len(report.victims) == 1 and report.satisfied


def test_busy_candidates_are_skipped_in_preempt_fors_words():
    c = coordinator(3)
    long, busy, poisoned = (open_session(c, "long", TPP, 2 * TPP), open_session(c, "busy", TPP, TPP),
                            open_session(c, "poisoned", TPP, TPP))
    assert long.step(2 * TPP) == BackingOutcome.BACKING_DEFERRED
    frame = busy.acquire_frame()  # not quiescent
    poisoned_frame = poisoned.acquire_frame()
    flight = poisoned.prepare_flight(1)
    flight.dispatch()
    poisoned_frame.abort()  # poisoned, with a flight still out
    report = preempt_for(c, long.step_deferral, [long, busy, poisoned])
    reasons = [reason for _, reason in report.skipped]
    assert len(reasons) == 3 and not report.victims
    assert all(r.startswith("preempt_for: ") and "try_abort" not in r for r in reasons), reasons
    assert "still live" in reasons[1] and "still live" in reasons[2]
    frame.close()


def test_decode_table_step_over_empty_rows_needs_no_coordinator():
    c = coordinator(8)
    table = c.decode_table(2, 4, pad=-1)
    del c
    gc.collect()  # nothing holds the coordinator now
    assert table.step([None], [1]).tolist() == [BackingOutcome.CURRENT.value]
    assert table.step([None, None], [1, 2]).tolist() == [BackingOutcome.CURRENT.value] * 2
    assert (table.table == -1).all()
