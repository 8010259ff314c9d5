"""What a review of the sequence API at its edges found: a masked token array stepped the rows
under its mask; wait_async answered a NumPy timedelta with a bare TypeError and a close with
"wait:"; commit_frames refused at row 0 said the rows before it committed and carried no row;
step() past int64 and DecodeTable.clear past any row stated ranges that are not the valid ones;
a wait's type errors named types it does not stop at."""

from __future__ import annotations

import asyncio
import numbers
import threading

import numpy as np
import pytest

from lifecore.errors import (ClosedError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError,
                             SessionStateError)
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, acquire_frames, commit_frames, step_all


def coordinator(pages: int = 64) -> AdmissionCoordinator:
    return AdmissionCoordinator(None, domains={"kv": pages * 4096}, page_bytes=4096, tokens_per_page=4,
                                max_active_sequences=8)


def test_masked_token_counts_are_refused_before_any_row_steps() -> None:
    c = coordinator()
    sessions = [c.admit(f"s{i}", 4, 64).resources.open_session() for i in range(2)]
    table = c.decode_table(2, 16)
    before = table.table.copy()
    # Before: the masked row stepped to the value beneath its mask and took new pages.
    for call in (lambda: step_all(sessions, np.ma.array([9, 30], mask=[False, True])),
                 lambda: table.step(sessions, np.ma.array([10, 40], mask=[False, True]))):
        with pytest.raises(InvalidArgumentError, match=r"argument 'tokens' is a NumPy masked array"):
            call()
        assert [s.backing.tokens for s in sessions] == [4, 4]
        assert np.array_equal(table.table, before)
    assert step_all(sessions, np.ma.array([9, 9]).data).tolist() == [1, 1]  # its data steps
    for s in sessions:
        s.close()


def test_a_refusal_at_the_first_frame_says_none_committed_and_names_the_row() -> None:
    c = coordinator()
    sessions = [c.admit(f"r{i}", 4, 64).resources.open_session() for i in range(2)]
    frames = acquire_frames(sessions)
    commit_frames(frames)
    with pytest.raises(SessionStateError, match=r"\(commit_frames: row 0; no frame was committed\)$") as raised:
        commit_frames(frames)
    assert (raised.value.row, raised.value.rows_stepped) == (0, 0)
    frames = acquire_frames(sessions)
    frames[1].commit()
    with pytest.raises(SessionStateError, match=r"\(commit_frames: row 1; the rows before it committed\)$") as raised:
        commit_frames(frames)
    assert (raised.value.row, raised.value.rows_stepped) == (1, 1)
    for s in sessions:
        s.close()


def test_a_token_count_or_a_row_past_its_type_says_what_it_may_be() -> None:
    c = coordinator()
    session = c.admit("a", 4, 64).resources.open_session()
    for tokens in (2**63, np.uint64(2**63)):
        with pytest.raises(LifecoreOverflowError, match=r"^step: argument 'tokens' must be between 1 and 2\*\*63 - 1"):
            session.step(tokens)
    with pytest.raises(InvalidArgumentError, match=r"^step: argument 'tokens' must be between 1 and 2\*\*63 - 1"):
        session.step(-(2**70))
    assert session.backing.tokens == 4
    table = c.decode_table(3, 16)
    for row in (2**64, 2**40, -(2**70)):
        with pytest.raises(InvalidArgumentError, match=rf"^DecodeTable.clear: row {row} is out of range for 3 rows$"):
            table.clear(row)
    session.close()


def _deferred_waiter(c: AdmissionCoordinator):
    held = c.admit("held", 16, 16).resources.open_session()
    deferred = c.admit("b", 4, 4)
    assert isinstance(deferred, AdmissionDeferred)
    return held, c.register_waiter(deferred)


def test_wait_and_wait_async_refuse_a_timedelta_alike() -> None:
    c = coordinator(pages=4)
    held, registration = _deferred_waiter(c)
    with pytest.raises(LifecoreTypeError, match=r"timeout' could not be read as a float"):
        registration.wait(np.timedelta64(1, "ms"))
    # Before: a bare TypeError from float().
    with pytest.raises(LifecoreTypeError, match=r"^wait_async: argument 'timeout' could not be read as a float"):
        asyncio.run(registration.wait_async(np.timedelta64(1, "ms")))
    held.close()


def test_a_waits_type_errors_say_it_takes_a_number() -> None:
    c = coordinator(pages=4)
    held, registration = _deferred_waiter(c)
    # Before: "must be float | None, got bool" and, for a 0-d float array, "must be an int".
    with pytest.raises(LifecoreTypeError, match=r"argument 'timeout' must be a number or None, got bool"):
        registration.wait(True)
    with pytest.raises(LifecoreTypeError, match=r"^wait: argument 'timeout' must be a number, got ndarray"):
        registration.wait(np.array(0.01))
    assert registration.wait(np.array(0)) is False  # a 0-d integer array is an int, as before
    held.close()


def test_a_close_during_wait_async_names_wait_async() -> None:
    c = coordinator(pages=4)
    held, registration = _deferred_waiter(c)

    async def main() -> None:
        task = asyncio.ensure_future(registration.wait_async())
        await asyncio.sleep(0.05)
        closer = threading.Thread(target=c.close)
        closer.start()
        try:
            await asyncio.wait_for(task, 5)
        finally:
            closer.join()

    # Before: "wait: the admission coordinator ...", a call the caller never made.
    with pytest.raises(ClosedError, match=r"^wait_async: the admission coordinator \(or its device\) was closed"):
        asyncio.run(main())
    with pytest.raises(ClosedError, match=r"^wait: the admission coordinator"):
        registration.wait(0)


def test_an_extensions_demand_of_more_pages_than_tokens_copies_and_pickles() -> None:
    # A check of the fixes above first refused this real report on read-back: an extension may
    # ask for more pages than its tokens need.
    import copy
    import pickle

    pb = 4096
    c = AdmissionCoordinator(None, domains={"kv": 20 * pb, "v": 20 * pb}, page_bytes=pb, tokens_per_page=4,
                             max_active_sequences=4)
    held = c.admit("held", 68, 68).resources.open_session()
    s = c.admit("s", 1, 16).resources.open_session()
    decision = s.try_ensure_backing_covers(1, 4)
    demand = decision.deferred.immediate
    assert (demand.tokens, demand.pages) == (1, 3)
    assert copy.copy(demand) == demand == pickle.loads(pickle.dumps(demand))
    assert copy.deepcopy(decision.deferred.fit) == decision.deferred.fit
    for session in (s, held):
        session.close()


def test_an_extensions_counts_say_their_range_and_a_masked_count_is_refused() -> None:
    c = coordinator()
    s = c.admit("a", 4, 64).resources.open_session()
    with pytest.raises(LifecoreOverflowError,
                       match=r"^try_ensure_backing_covers: argument 'tokens' must be between 1 and 2\*\*63 - 1"):
        s.try_ensure_backing_covers(2**63)
    with pytest.raises(LifecoreOverflowError,
                       match=r"^try_ensure_backing_covers: argument 'pages' must be between 1 and 2\*\*63 - 1"):
        s.try_ensure_backing_covers(4, -(2**70))
    with pytest.raises(InvalidArgumentError, match=r"^try_ensure_backing_covers: tokens must be positive, got 0$"):
        s.try_ensure_backing_covers(0)  # the core's own words below 1, as before
    # Before: stepped to the value beneath the mask.
    with pytest.raises(InvalidArgumentError, match=r"^step: argument 'tokens' is a NumPy masked array"):
        s.step(np.ma.array(7, mask=True))
    assert s.backing.tokens == 4 and s.step(np.int64(5)).name == "EXTENDED"
    s.close()


class _FloatRaises:
    """A real number (by registration) whose __float__ raises what its own code raised."""

    def __float__(self) -> float:
        raise ValueError("no float here")


numbers.Real.register(_FloatRaises)


def test_wait_and_wait_async_read_a_timeout_alike() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = coordinator(pages=4)
    held, registration = _deferred_waiter(c)
    for timeout in (np.array(0), torch.tensor(0), np.int8(0)):  # before: refused by wait_async alone
        assert registration.wait(timeout) is False
        assert asyncio.run(registration.wait_async(timeout)) is False
    for timeout in (np.array(0.0), np.bool_(False), "1"):
        with pytest.raises(LifecoreTypeError, match=r"argument 'timeout' must be a number"):
            registration.wait(timeout)
        with pytest.raises(LifecoreTypeError, match=r"^wait_async: argument 'timeout' must be a number"):
            asyncio.run(registration.wait_async(timeout))
    with pytest.raises(InvalidArgumentError, match=r"could not be read as a float \(ValueError: no float here\)"):
        registration.wait(_FloatRaises())
    with pytest.raises(InvalidArgumentError, match=r"^wait_async: argument 'timeout' could not be read as a float "
                                                   r"\(ValueError: no float here\)"):
        asyncio.run(registration.wait_async(_FloatRaises()))
    held.close()


def test_commit_frames_refusals_before_any_commit_carry_the_row() -> None:
    c = coordinator()
    sessions = [c.admit(f"r{i}", 4, 64).resources.open_session() for i in range(2)]
    frames = acquire_frames(sessions)
    with pytest.raises(InvalidArgumentError, match="row 1 is a frame of the session of row 0") as raised:
        commit_frames([frames[0], frames[0]])
    assert (raised.value.row, raised.value.rows_stepped) == (1, 0)
    assert not any(f.finalized for f in frames)
    commit_frames(frames)
    for s in sessions:
        s.close()
