"""Pages from a device through the driver floor (skipped where no such backend runs)."""

from __future__ import annotations

import pytest

from lifecore.errors import LifecoreTypeError
from lifecore.sequence import AdmissionCoordinator, Admitted

from backend_roles import EMULATED

PAGE = 4096


def test_pages_come_from_the_device(backend_name):
    c = AdmissionCoordinator(backend_name, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=2)
    assert c.page_memory_kind == "driver"
    adm = c.admit("r", 32, 64)
    assert isinstance(adm, Admitted)
    extents = adm.resources.initial_backing.extents
    assert extents and all(address != 0 and size == 2 * PAGE for _, _, _, address, size in extents)
    s = adm.resources.open_session()
    assert s.try_ensure_backing_covers(64).snapshot.pages == 4
    s.close()
    adm.resources.close()
    assert c.capacity().used_bytes == {"kv": 0}


def test_pages_come_from_a_lifecore_device(backend_name):
    import lifecore

    with lifecore.Device(backend_name) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
        assert c.page_memory_kind == "driver"
        adm = c.admit("r", 32, 64)
        assert isinstance(adm, Admitted)
        assert all(address != 0 for _, _, _, address, _ in adm.resources.initial_backing.extents)
        s = adm.resources.open_session()
        assert s.try_ensure_backing_covers(64).snapshot.pages == 4
        assert c.capacity().used_bytes == {"kv": 4 * PAGE}
        s.close()
        adm.resources.close()
        assert c.capacity().used_bytes == {"kv": 0}


def test_the_arena_is_allocated_once_and_admission_never_reaches_the_driver():
    import lifecore
    from lifecore.errors import LifecoreError

    with lifecore.Device(EMULATED) as dev:
        dev.inject_fault("mem_alloc", 2, times=1)  # out of memory, once: the arena cannot be had
        with pytest.raises(LifecoreError):
            AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
        assert dev.memory_stats()["arena_bytes"] == 0  # the refusal left nothing behind
        c = AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
        dev.inject_fault("mem_alloc", 2, times=1)  # would fail the next driver allocation
        adm = c.admit("r", 32, 64)
        assert isinstance(adm, Admitted)  # the pages are block ids of the arena: no driver call
        dev.clear_faults()
        adm.resources.close()
        assert c.capacity().used_bytes == {"kv": 0}


def test_sequences_own_no_stream_so_one_lane_serves_many():
    """A coordinator and its sessions own no device stream (the scheduler's lanes serve them): with
    every stream creation failing, admission, steps, one table for the batch and release all work."""
    import lifecore
    from lifecore.errors import DriverError

    with lifecore.Device(EMULATED) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 32 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=4)
        dev.inject_fault("stream_create", 999, times=1000)
        with pytest.raises(DriverError):
            dev.stream()  # the fault is live
        held = []
        for i in range(3):
            adm = c.admit(f"r{i}", 16, 64)
            assert isinstance(adm, Admitted)
            session = adm.resources.open_session()
            assert str(session.step(40)) == "BackingOutcome.EXTENDED" and session.backing.pages == 3
            held.append((adm, session))
        table = c.block_table([s for _, s in held], 4, pad=-1)
        assert sorted(table[:, :3].ravel().tolist()) == list(range(9)) and (table[:, 3] == -1).all()
        for adm, session in held:
            session.try_complete()
            session.close()
            adm.resources.close()
        dev.clear_faults()
        assert c.capacity().used_bytes == {"kv": 0}


def test_an_object_that_is_not_a_device_is_refused():
    with pytest.raises(LifecoreTypeError, match="lifecore.Device"):
        AdmissionCoordinator(object(), domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=1)


def test_no_device_is_host_page_memory():
    c = AdmissionCoordinator(None, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=2)
    assert c.page_memory_kind == "host"
    adm = c.admit("r", 32, 64)
    assert isinstance(adm, Admitted)
    adm.resources.close()


def test_a_backend_name_opens_a_device_the_coordinator_keeps():
    import gc

    # Nothing outside holds the device opened for the name: the coordinator must, or it would
    # see that device closed (ClosedError) as soon as the name was resolved.
    c = AdmissionCoordinator(EMULATED, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=2)
    gc.collect()
    adm = c.admit("r", 32, 64)
    assert isinstance(adm, Admitted) and c.page_memory_kind == "driver"
    s = adm.resources.open_session()
    assert s.try_ensure_backing_covers(64).snapshot.pages == 4
    s.close()
    adm.resources.close()
    assert c.page_memory_stats()["live_extents"] == 0


def test_a_coordinator_keeps_its_device_open_and_the_devices_close_closes_it():
    import gc

    import lifecore

    # Nothing but the coordinator holds the Device: it must not find it closed (it once did,
    # at once: the Device object was gone after the constructor's call).
    c = AdmissionCoordinator(lifecore.Device(EMULATED), domains={"kv": 8 * PAGE}, page_bytes=PAGE,
                             tokens_per_page=16, max_active_sequences=2)
    gc.collect()
    assert not c.closed
    adm = c.admit("r", 32, 64)
    assert isinstance(adm, Admitted) and c.page_memory_kind == "driver"
    adm.resources.close()
    dev = lifecore.Device(EMULATED)
    c = AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=2)
    dev.close()  # an explicit close still closes the coordinator
    assert c.closed
    with pytest.raises(lifecore.errors.ClosedError, match="closed"):
        c.admit("r", 32, 64)


def test_an_unknown_backend_name_is_refused_as_a_device_refuses_it():
    import lifecore

    with pytest.raises(Exception) as by_device:
        lifecore.Device("no-such-backend")
    with pytest.raises(type(by_device.value)) as by_coordinator:
        AdmissionCoordinator("no-such-backend", domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=1)
    # The same refusal, each naming the call that refused.
    assert str(by_device.value).startswith("Device: unknown backend 'no-such-backend'")
    assert str(by_coordinator.value) == str(by_device.value).replace("Device: ", "AdmissionCoordinator: ", 1)


def test_what_is_left_in_python_after_a_request_does_not_keep_the_arena():
    # A receipt, a snapshot, a decision, a finished frame and a closed session handle kept
    # after the coordinator is dropped hold no capacity, and not the arena's memory either.
    import gc

    import lifecore

    with lifecore.Device(EMULATED) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
        assert dev.memory_stats()["arena_bytes"] == 8 * PAGE
        adm = c.admit("r", 16, 64)
        session = adm.resources.open_session()
        adm.resources.close()
        frame = session.acquire_frame()
        frame.commit()
        decision = session.try_ensure_backing_covers(64)
        snapshot = decision.snapshot
        receipt = session.try_complete()
        session.close()
        fingerprint = receipt.fingerprint
        del c, adm
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 0  # the arena went back with the coordinator
        # What was kept still answers what it recorded.
        assert receipt.fingerprint == fingerprint and session.fingerprint == fingerprint
        assert snapshot.released and snapshot.domains == ["kv"] and snapshot.pages == 4
        assert decision.outcome.name == "EXTENDED"
        with pytest.raises(lifecore.errors.SessionStateError, match="released"):
            snapshot.block_ids()
        with pytest.raises(lifecore.errors.SessionStateError, match="released"):
            snapshot.block_ids("kv")
        with pytest.raises(lifecore.errors.InvalidArgumentError, match="unknown capacity domain"):
            snapshot.block_ids("nope")
        with pytest.raises(lifecore.errors.ClosedError):
            session.step(80)
        del frame


def test_a_table_is_never_written_over_the_arena_on_any_device(backend_name):
    # The arena's Buffer as a table's `out` is refused on every backend (device addresses are
    # compared, so it holds on a GPU as on the mock), and the KV bytes are left as they were.
    import numpy as np

    import lifecore

    with lifecore.Device(backend_name) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
        adm = c.admit("r", 32, 64)
        assert isinstance(adm, Admitted)
        session = adm.resources.open_session()
        arena = c.arena("kv")
        s = dev.stream()  # a read waits for its own stream's work only: one stream writes and reads
        s.fill(arena, 0x5A)
        before = s.read(arena)
        with pytest.raises(lifecore.errors.InvalidArgumentError,
                           match=r"^block_table: argument 'out' is the arena memory of domain 'kv'"):
            c.block_table([session], 4, out=arena)
        with pytest.raises(lifecore.errors.InvalidArgumentError,
                           match=r"^decode_table: argument 'out' is the arena memory of domain 'kv'"):
            c.decode_table(1, 4, out=arena)
        assert s.read(arena) == before
        table = s.alloc(4 * 4)  # the device's memory outside the arena takes the table
        c.block_table([session], 4, out=table, pad=-1)
        ids = np.frombuffer(s.read(table), dtype=np.int32)
        assert ids[:2].tolist() == session.backing.block_ids().tolist() and ids[2:].tolist() == [-1, -1]
