"""A sequence's lifecycle on host pages: admit, decode, complete; a deferred request awaits the release."""

from __future__ import annotations

import asyncio

from lifecore.sequence import (AdmissionCoordinator, AdmissionDeferred, Admitted, BackingOutcome,
                               TerminalOutcome)

PAGE = 4096


async def main() -> None:
    coordinator = AdmissionCoordinator(None, domains={"kv": 4 * PAGE}, page_bytes=PAGE,
                                       tokens_per_page=16, max_active_sequences=4)
    first = coordinator.admit("first", prompt_tokens=32, fit_tokens=64)   # all 4 pages at most
    assert isinstance(first, Admitted)
    waiting = coordinator.admit("second", prompt_tokens=48, fit_tokens=48)
    assert isinstance(waiting, AdmissionDeferred)
    registration = coordinator.register_waiter(waiting)

    with first.resources, first.resources.open_session() as session:
        assert session.step(48) == BackingOutcome.EXTENDED       # a third page
        receipt = session.try_complete()
        assert receipt.outcome == TerminalOutcome.COMPLETED       # a receipt kept holds no pages

    assert await registration.wait_async(timeout=5.0)            # the release woke it
    second = coordinator.admit("second", prompt_tokens=48, fit_tokens=48)
    assert isinstance(second, Admitted)
    second.resources.close()
    print(coordinator.capacity().used_bytes)                     # {'kv': 0}


if __name__ == "__main__":
    asyncio.run(main())
