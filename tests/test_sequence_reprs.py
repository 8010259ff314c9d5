"""The sequence objects print what they hold: a coordinator its id, page memory, domains and
whether it is closed; a capacity snapshot each domain's used/total bytes, the active/max
sequences and the epochs; and every repr that holds an enum names the member, never a number."""

from __future__ import annotations

import re

from lifecore.sequence import (AdmissionCoordinator, AdmissionDeferred, AdmissionRejected, Admitted, DeferralAction,
                               FlightPhase, SessionPhase, TerminalOutcome)

PAGE = 4096


def make(*, slots: int = 2) -> AdmissionCoordinator:
    return AdmissionCoordinator(domains={"kv": 4 * PAGE, "v'x": (2 * PAGE, 8 * PAGE)}, page_bytes=PAGE,
                                tokens_per_page=16, max_active_sequences=slots)


def test_coordinator_repr_names_id_page_memory_domains_and_closed():
    c = make()
    assert repr(c) == f"AdmissionCoordinator(id={c.id}, page_memory='host', domains=['kv', \"v'x\"], closed=False)"
    assert "object at 0x" not in repr(c)
    c.close()
    assert repr(c).endswith("closed=True)")


def test_capacity_snapshot_repr_names_usage_sequences_and_epochs():
    c = make()
    admitted = c.admit("a", 16, 32)
    assert isinstance(admitted, Admitted)
    snapshot = c.capacity()
    assert repr(snapshot) == (
        "CapacitySnapshot(domains={'kv': 4096/16384, \"v'x\": 4096/8192}, active_sequences=1/2, "
        f"slots_epoch={snapshot.slots_epoch}, release_epoch={snapshot.release_epoch}, "
        f"physical_epoch={snapshot.physical_epoch})")
    assert [repr(d) for d in snapshot.domains] == [
        "DomainUsage('kv', used_bytes=4096, total_bytes=16384, maximum_bytes=16384, epoch=1)",
        "DomainUsage(\"v'x\", used_bytes=4096, total_bytes=8192, maximum_bytes=32768, epoch=1)",
    ]
    # A release advances the epochs the repr shows.
    admitted.resources.close()
    after = c.capacity()
    assert "active_sequences=0/2" in repr(after) and "'kv': 0/16384" in repr(after)
    assert f"slots_epoch={snapshot.slots_epoch + 1}," in repr(after)
    assert f"release_epoch={snapshot.release_epoch + 1}," in repr(after)


def _no_bare_number_for(enum_field: str, text: str) -> bool:
    return re.search(rf"{enum_field}=\d", text) is None


def test_session_frame_flight_cancel_and_receipt_reprs_name_enum_members():
    c = make()
    session = c.admit("a", 16, 32).resources.open_session()
    assert f"phase={SessionPhase.OPEN.name}," in repr(session)
    frame = session.acquire_frame()
    flight = session.prepare_flight(7)
    assert repr(flight) == f"FlightHold(key=7, frame_id={frame.frame_id}, phase={FlightPhase.PREPARED.name})"
    flight.dispatch()
    assert repr(flight).endswith(f"phase={FlightPhase.IN_FLIGHT.name})")
    cancel = session.request_cancel()
    assert repr(cancel) == (f"CancelSnapshot(phase={SessionPhase.CANCEL_REQUESTED.name}, active_frame={frame.frame_id}, "
                            f"flights=[(7, {FlightPhase.IN_FLIGHT.name})], retired_frames=0)")
    flight.finish()
    assert repr(flight) == f"FlightHold(key=7, frame_id={frame.frame_id}, released)"
    frame.commit()
    receipt = session.try_abort()
    assert repr(receipt) == f"TerminalReceipt({TerminalOutcome.ABORTED.name}, retired_frames=1)"
    assert f"phase={SessionPhase.ABORTED.name}," in repr(session)
    for text in (repr(session), repr(flight), repr(cancel)):
        assert _no_bare_number_for("phase", text), text
    session.close()


def test_decision_reprs_quote_names_and_name_the_action():
    c = make(slots=1)
    first = c.admit("a", 16, 16)
    deferred = c.admit("it's", 16, 16)
    rejected = c.admit("b", 16, 16 * 1000)
    assert isinstance(deferred, AdmissionDeferred) and isinstance(rejected, AdmissionRejected)
    assert repr(first) == "Admitted('a')"
    assert repr(deferred) == (f"AdmissionDeferred(request_id=\"it's\", action={DeferralAction.WAIT_FOR_RELEASE.name}, "
                              "sources=[ActiveSequenceSlots])")
    assert repr(rejected).startswith("AdmissionRejected('b': fit demand of ")
    condition = deferred.wait_condition
    assert repr(condition) == f"WaitCondition(ActiveSequenceSlots@{condition.epochs[0]})"
    grown = c.admit("c", 16 * 3, 16 * 3, domains=["v'x"])  # fit above the domain's total: growth
    assert isinstance(grown, AdmissionDeferred)
    assert repr(grown) == (f"AdmissionDeferred(request_id='c', action={DeferralAction.AWAIT_BACKING_GROWTH.name}, "
                           "sources=[ActiveSequenceSlots, Domain(\"v'x\")])")
    first.resources.close()


def test_resources_a_wait_registration_and_a_decode_table_print_their_state():
    c = make(slots=1)
    admitted = c.admit("a", 16, 32)
    assert isinstance(admitted, Admitted)
    resources = admitted.resources
    assert repr(resources) == "AdmittedSequenceResources('a', prompt_tokens=16, fit_tokens=32, opened=False)"
    session = resources.open_session()
    assert repr(resources).endswith("opened=True)")
    deferred = c.admit("b", 16, 32)
    assert isinstance(deferred, AdmissionDeferred)
    registration = session.register_admission_waiter(deferred)
    assert re.fullmatch(r"CapacityWaitRegistration\(registered, sources=\d+, wake_count=0\)", repr(registration))
    registration.cancel()
    assert repr(registration).startswith("CapacityWaitRegistration(cancelled,")
    table = c.decode_table(2, 8)
    assert repr(table) == "DecodeTable(rows=2, width=8, pad=0, domain='kv')"
    resources.close()
    assert repr(resources) == "AdmittedSequenceResources(closed)"
