"""Concurrency: admissions, openers, cancel vs frames, releases vs registrations."""

from __future__ import annotations

import threading

from lifecore.errors import SessionStateError
from lifecore.sequence import (AdmissionCoordinator, AdmissionDeferred, Admitted, BackingOutcome,
                               FrameDisposition, SessionPhase)

PAGE = 4096


def run_all(target, count: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()


def test_concurrent_admissions_never_exceed_the_ceiling():
    ceiling = 5
    c = AdmissionCoordinator(domains={"kv": 1 << 30}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=ceiling)
    barrier = threading.Barrier(8)
    admitted, peak, lock = [], [0], threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        for j in range(200):
            d = c.admit(f"{i}-{j}", 16, 64)
            active = c.capacity().active_sequences
            assert active <= ceiling
            with lock:
                peak[0] = max(peak[0], active)
            if isinstance(d, Admitted):
                with lock:
                    admitted.append(d)
                    if len(admitted) > 3:
                        admitted.pop(0).resources.close()
            else:
                assert isinstance(d, AdmissionDeferred)

    run_all(worker, 8)
    assert peak[0] <= ceiling
    for d in admitted:
        d.resources.close()
    cap = c.capacity()
    assert cap.active_sequences == 0 and cap.used_bytes == {"kv": 0}


def test_cancel_racing_frame_acquisition_leaves_a_consistent_session():
    c = AdmissionCoordinator(domains={"kv": 1 << 30}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=64)
    for round_ in range(30):
        adm = c.admit(f"r{round_}", 16, 64)
        s = adm.resources.open_session()
        barrier = threading.Barrier(2)
        frames, outcome = [], {}

        def acquirer(_: int) -> None:
            barrier.wait()
            for _ in range(50):
                try:
                    f = s.acquire_frame()
                except SessionStateError:
                    return
                outcome.setdefault("dispositions", []).append(f.commit())

        def canceller(_: int) -> None:
            barrier.wait()
            outcome["snapshot"] = s.request_cancel()

        threads = [threading.Thread(target=acquirer, args=(0,)), threading.Thread(target=canceller, args=(0,))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert s.phase == SessionPhase.CANCEL_REQUESTED and s.active_frame is None and s.flight_count == 0
        dispositions = outcome.get("dispositions", [])
        # Every commit before the cancel is COMMITTED; at most one straddling frame is discarded.
        assert dispositions.count(FrameDisposition.DISCARDED_CANCELLED) <= 1
        assert s.retired_frames == len(dispositions)
        receipt = s.try_abort()
        assert receipt.retired_frames == len(dispositions)
        s.close()
        adm.resources.close()
    assert c.capacity().active_sequences == 0


def test_a_waiter_is_never_lost_when_release_and_registration_race():
    for round_ in range(100):
        c = AdmissionCoordinator(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=4)
        held = c.admit("held", 16, 16)
        d = c.admit("want", 16, 16)
        assert isinstance(d, AdmissionDeferred)
        barrier = threading.Barrier(2)
        result = {}

        def registrant(_: int) -> None:
            barrier.wait()
            reg = c.register_waiter(d)
            result["retry"] = reg.wait(5.0)

        def releaser(_: int) -> None:
            barrier.wait()
            held.resources.close()

        threads = [threading.Thread(target=registrant, args=(0,)), threading.Thread(target=releaser, args=(0,))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert result["retry"] is True, round_
        assert isinstance(c.admit("want", 16, 16), Admitted)


def test_concurrent_extensions_of_many_sessions_account_exactly():
    c = AdmissionCoordinator(domains={"kv": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=8)
    sessions = [c.admit(f"s{i}", 16, 16 * 32) for i in range(8)]
    opened = [d.resources.open_session() for d in sessions]

    def worker(i: int) -> None:
        s = opened[i]
        for t in range(32, 16 * 32 + 1, 16):
            if s.step(t) == BackingOutcome.BACKING_DEFERRED:
                break

    run_all(worker, 8)
    total_pages = sum(s.backing.pages for s in opened)
    assert total_pages <= 64
    assert c.capacity().used_bytes == {"kv": total_pages * PAGE}
    for s, d in zip(opened, sessions):
        s.close()
        d.resources.close()
    assert c.capacity().used_bytes == {"kv": 0} and c.page_memory_stats()["live_bytes"] == 0
