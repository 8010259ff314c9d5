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
