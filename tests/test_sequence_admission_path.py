"""The admission path as one step: the claim and the prompt's block ids are taken under one lock,
the request id's entry is made once, and a refusal at any point leaves the coordinator as it was
(a physical refusal rolls the claims back the documented way: the epochs they touched advance)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from lifecore.errors import ClosedError, InvalidArgumentError
from lifecore.sequence import (
    AdmissionCoordinator,
    AdmissionDeferred,
    AdmissionRejected,
    Admitted,
    PhysicalMemory,
)

PAGE = 4096


def make(domains: dict | None = None, slots: int = 4) -> AdmissionCoordinator:
    return AdmissionCoordinator(domains=domains or {"kv": 16 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                max_active_sequences=slots)


def accounting(c: AdmissionCoordinator):
    cap = c.capacity()
    return cap.used_bytes, cap.active_sequences, c.holders()


def test_a_physical_refusal_rolls_every_claim_back_and_advances_what_it_touched():
    c = make({"k": 16 * PAGE, "v": 16 * PAGE})
    before = c.capacity()
    c.fail_next_page_allocations(1)
    d = c.admit("r", 48, 64, domains=["v"])
    assert isinstance(d, AdmissionDeferred) and d.wait_condition.sources == [PhysicalMemory]
    assert d.immediate.bytes == {"v": 3 * PAGE}
    after = c.capacity()
    assert accounting(c) == ({"k": 0, "v": 0}, 0, [])
    # The claims were made and returned: the slot and the domain it touched advanced, the
    # untouched domain did not, and no id was handed out (physical memory did not move).
    assert after.slots_epoch > before.slots_epoch
    assert [x.epoch for x in after.domains] == [before.domains[0].epoch, before.domains[1].epoch + 1]
    assert after.physical_epoch == before.physical_epoch
    again = c.admit("r", 48, 64, domains=["v"])  # the id was let go too
    assert isinstance(again, Admitted)
    assert accounting(c)[2] == [("r", 3, ["v"], 1)]


def test_a_refused_duplicate_id_changes_nothing():
    c = make()
    adm = c.admit("r", 16, 64)
    s = adm.resources.open_session()
    before = accounting(c), c.capacity().slots_epoch, c.capacity().release_epoch
    with pytest.raises(InvalidArgumentError, match="already live"):
        c.admit("r", 16, 64)
    assert (accounting(c), c.capacity().slots_epoch, c.capacity().release_epoch) == before
    s.close()
    adm.resources.close()
    assert isinstance(c.admit("r", 16, 64), Admitted)


def test_capacity_returns_when_the_last_hold_goes_resources_first():
    c = make()
    adm = c.admit("r", 32, 64)
    resources = adm.resources
    assert resources is adm.resources  # one object per admission
    session = resources.open_session()
    ids = session.backing.block_ids("kv")
    held = np.asarray(ids).tolist()
    assert len(held) == 2 and min(held) >= 0
    resources.close()
    assert accounting(c)[1] == 1  # the session still holds it
    assert np.asarray(ids).tolist() == held
    session.close()
    assert accounting(c) == ({"kv": 0}, 0, [])
    # A view taken while the sequence was live never shows ids another sequence may hold.
    assert np.all(np.asarray(ids) == -1)


def test_the_sessions_close_spends_its_resources_however_many_handles_remain():
    c = make()
    adm = c.admit("r", 32, 64)
    resources = adm.resources
    again = None
    session = resources.open_session()
    again = session.resources  # a second handle of the same resources
    ids = session.backing.block_ids("kv")
    assert not resources.closed and resources.request_id == "r" and repr(adm) == "Admitted('r')"
    session.close()
    # The decision and both handles are still referenced: they hold nothing.
    assert accounting(c) == ({"kv": 0}, 0, [])
    assert np.all(np.asarray(ids) == -1)
    assert resources.closed and again.closed
    assert repr(resources) == "AdmittedSequenceResources(closed)" and repr(adm) == "Admitted(<closed>)"
    for name in ("request_id", "fit_pages", "opened", "sequence_authority", "initial_backing"):
        with pytest.raises(ClosedError, match="spent"):
            getattr(resources, name)
    with pytest.raises(ClosedError, match="spent"):
        again.open_session()
    resources.close()  # closing a spent handle changes nothing
    again.close()
    assert isinstance(c.admit("r", 16, 64), Admitted)  # the request id is free again


def test_a_live_frame_outlasts_the_spent_resources():
    c = make()
    adm = c.admit("r", 32, 64)
    session = adm.resources.open_session()
    frame = session.acquire_frame()
    session.close()  # the frame was live: the session fails closed, the frame still holds
    assert adm.resources.closed
    assert accounting(c)[1] == 1
    frame.close()
    assert accounting(c) == ({"kv": 0}, 0, [])


def test_rejections_and_deferrals_leave_no_entry_behind():
    c = make(slots=1)
    assert isinstance(c.admit("big", 16, 10**6), AdmissionRejected)
    held = c.admit("held", 16, 16)
    assert isinstance(c.admit("waits", 16, 16), AdmissionDeferred)  # no slot
    assert [h[0] for h in c.holders()] == ["held"]
    held.resources.close()
    del held
    gc.collect()
    for name in ("big", "waits"):
        assert isinstance(c.admit(name, 16, 16), Admitted)
        c.holders()  # the entry is there while it lives
    assert c.capacity().active_sequences == 0


def test_named_domains_are_deduplicated_and_may_name_every_domain():
    c = make({"k": 16 * PAGE, "v": 16 * PAGE})
    a = c.admit("a", 16, 16, domains=["v", "k", "v"])
    b = c.admit("b", 16, 16, domains=["v"])
    assert [(h[0], h[2]) for h in c.holders()] == [("a", ["k", "v"]), ("b", ["v"])]
    assert a.resources.initial_backing.block_ids("k").tolist() != []
    with pytest.raises(InvalidArgumentError):
        a.resources.initial_backing.block_ids("nope")
    assert b.resources.initial_backing.block_ids("v").tolist() != []


@pytest.mark.no_sanitizer  # the address space limit below is far less than ASan's shadow memory
def test_the_block_ids_of_a_prompt_the_host_cannot_hold_are_an_overflow_naming_admit():
    """A prompt of 2**31 - 1 one-byte pages needs 8 GiB of block ids; under a 3 GiB address space the
    reservation fails, and admit says so as an overflow, with nothing claimed."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from lifecore.errors import LifecoreOverflowError
        from lifecore.sequence import AdmissionCoordinator
        n = 2**31 - 1
        c = AdmissionCoordinator(domains={"kv": n}, page_bytes=1, tokens_per_page=1, max_active_sequences=1)
        before = c.capacity()
        try:
            print("ADMITTED", type(c.admit("big", n, n)).__name__)
        except LifecoreOverflowError as error:
            print("OVERFLOW", error)
        after = c.capacity()
        same = (after.used_bytes, after.active_sequences, c.holders()) == (before.used_bytes, before.active_sequences, [])
        print("UNCHANGED" if same else "CHANGED")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == [
        "OVERFLOW admit: the block ids of a prompt of 2147483647 pages are more than the host's memory holds; "
        "nothing was changed", "UNCHANGED"], (done.stdout, done.stderr[-2000:])


@pytest.mark.parametrize("prompt_pages", [4095, 4096, 4097])
def test_a_prompt_about_the_ids_reserved_ahead_gets_as_many_distinct_ids(prompt_pages):
    """The admission path reserves room for a prompt's ids ahead of the claim; prompts either side of
    that room's first size get every id, each once, each in the domain."""
    c = AdmissionCoordinator(domains={"kv": 8192 * PAGE}, page_bytes=PAGE, tokens_per_page=1, max_active_sequences=2)
    admitted = c.admit("r", prompt_pages, prompt_pages)
    assert isinstance(admitted, Admitted), admitted
    session = admitted.resources.open_session()
    admitted.resources.close()
    ids = c.block_table([session], prompt_pages)[0]
    assert len(set(ids.tolist())) == prompt_pages and ids.min() >= 0 and ids.max() < 8192
    session.close()
    assert c.capacity().used_bytes == {"kv": 0}


def test_a_deferral_names_fit_availability_only_where_the_fit_does_not_fit():
    from lifecore.sequence import BlockerKind

    c = AdmissionCoordinator(domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    first = c.admit("a", 16, 4 * 16)  # one page held, seven free
    assert isinstance(first, Admitted)
    exact = c.admit("b", 16, 7 * 16)  # a fit of exactly the free bytes: only the ceiling blocks it
    assert isinstance(exact, AdmissionDeferred)
    assert [b.kind for b in exact.blockers] == [BlockerKind.ACTIVE_SEQUENCE_CEILING]
    over = c.admit("c", 16, 8 * 16)
    assert [b.kind for b in over.blockers] == [BlockerKind.ACTIVE_SEQUENCE_CEILING, BlockerKind.FIT_AVAILABILITY]
    first.resources.close()
