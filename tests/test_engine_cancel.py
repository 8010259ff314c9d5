"""Request.cancel(): a request stops where it is (a waiting one leaves the queue, a running one
gives its sequence back at once), keeps the tokens it generated, and the result lists it in
``cancelled``; the others run on as if it had never been there, their tokens equal to the
reference decoding, and every block comes back."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from engine_reference import generate as reference  # noqa: E402
from lifecore.engine import PRESETS, Engine, Request, Transformer  # noqa: E402
from lifecore.engine.scheduler import Scheduler  # noqa: E402
from test_engine import assert_released, attentive  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


def batch(count=4, new=12):
    return [Request(f"r{i}", [1 + i, 2 + i, 3 + i], new) for i in range(count)]


def test_cancelled_from_a_progress_callback():
    model = attentive()
    # Two rows and a pool that holds two sequences: r2 and r3 wait for r0's and r1's blocks.
    engine = Engine(model, dtype=torch.float64, num_blocks=8, max_batch=2, block_size=4)
    requests = batch()
    made = [0]

    def progress(count):
        made[0] += count
        if made[0] == 7:
            requests[0].cancel()  # running
            requests[3].cancel()  # still waiting
            requests[0].cancel()  # twice: nothing more

    result = engine.generate(requests, progress=progress)
    assert result.cancelled == ["r3", "r0"]  # the queue is looked at first
    assert result.tokens["r3"] == [] and requests[3].cancelled
    assert 0 < len(result.tokens["r0"]) < 12
    assert result.tokens["r0"] == reference(model, requests[0].prompt, 12)[: len(result.tokens["r0"])]
    for r in requests[1:3]:  # the others as if r0 and r3 had never been there
        assert result.tokens[r.request_id] == reference(model, r.prompt, 12) and not r.cancelled
    assert result.stats.generated == sum(len(t) for t in result.tokens.values())
    assert_released(engine)
    requests[1].cancel()  # a finished request: nothing changes
    assert result.cancelled == ["r3", "r0"]
    engine.close()


def test_a_request_cancelled_before_it_runs_generates_nothing():
    engine = Engine("tiny", num_blocks=8, max_batch=2, block_size=4)
    requests = batch(2, 3)
    requests[1].cancel()
    result = engine.generate(requests)
    assert result.cancelled == ["r1"] and result.tokens["r1"] == [] and len(result.tokens["r0"]) == 3
    assert_released(engine)
    with pytest.raises(TypeError):
        Request("x", [1], 1, cancelled=True)  # set by cancel() only
    engine.close()


def test_cancelled_from_another_thread():
    model = attentive()
    engine = Engine(model, dtype=torch.float64, num_blocks=64, max_batch=4, block_size=4)
    requests = batch(4, 60)
    started, cancelled = threading.Event(), threading.Event()

    def progress(count):
        if not started.is_set():  # once: the run goes on when the other thread has cancelled (not after it ends)
            started.set()
            assert cancelled.wait(30), "the other thread never cancelled"

    def cancel_two():
        started.wait(30)
        requests[1].cancel()
        requests[2].cancel()
        cancelled.set()

    canceller = threading.Thread(target=cancel_two)
    canceller.start()
    result = engine.generate(requests, progress=progress)
    canceller.join(30)
    assert sorted(result.cancelled) == ["r1", "r2"]
    for r in requests:
        full = reference(model, r.prompt, 60)
        got = result.tokens[r.request_id]
        assert got == (full[: len(got)] if r.cancelled else full), r.request_id
    assert_released(engine)
    engine.close()


def test_a_cancelled_deferred_head_no_longer_holds_back_the_queue():
    """The head of the queue, deferred for room, registered a waiter for its demand; cancelled,
    it left the queue but its waiter still answered for admission, so a request behind it that
    fits waited for the running one to finish (6 iterations). It is admitted at the next one."""
    model = Transformer(PRESETS["tiny"])
    engine = Engine(model, num_blocks=6, max_batch=3, block_size=4)
    head = Request("r0", list(range(1, 13)), 8)  # 3 of the 6 blocks, more as it grows
    deferred = Request("r1", list(range(1, 17)), 3)  # 4 blocks: deferred behind r0
    small = Request("r2", [7], 3)  # 1 block: fits at once, once r1 is out of its way
    admitted_at: dict[str, int] = {}
    real_admit = Scheduler._admit

    def admit(self):
        running = real_admit(self)
        for r in running:
            admitted_at[r.request.request_id] = self.stats.iterations
        return running

    Scheduler._admit = admit
    try:
        result = engine.generate([head, deferred, small], progress=lambda count: deferred.cancel())
    finally:
        Scheduler._admit = real_admit
    assert result.cancelled == ["r1"] and result.stats.deferrals >= 1
    assert admitted_at == {"r0": 1, "r2": 2}  # the iteration after r1 was cancelled
    assert result.tokens["r2"] == Engine(model, num_blocks=6, max_batch=3, block_size=4).generate(
        [Request("r2", [7], 3)]).tokens["r2"]
    assert_released(engine)
    engine.close()
