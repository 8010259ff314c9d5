"""KV pages as block ids of one arena per domain: zero-copy arena views, ids that are never
shared by two live sequences, no driver call per extension or release, block_ids views that
never show another sequence's ids, and block tables built in one call (NumPy-based, so these
also run under the sanitizers)."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest

import lifecore
from lifecore.errors import (InvalidArgumentError, LifecoreTypeError, SessionStateError, StaleAuthorityError)
from lifecore.sequence import AdmissionCoordinator, Admitted, AdmissionDeferred, BackingOutcome, FrameDisposition

from backend_roles import EMULATED
from numpy_views import needs_writable_views

PAGE = 4096
TPP = 16


def make(device=None, pages: int = 8, slots: int = 8, maximum: int | None = None) -> AdmissionCoordinator:
    domain = pages * PAGE if maximum is None else (pages * PAGE, maximum * PAGE)
    return AdmissionCoordinator(device, domains={"kv": domain}, page_bytes=PAGE, tokens_per_page=TPP,
                                max_active_sequences=slots)


def open_one(c: AdmissionCoordinator, name: str = "r", prompt: int = TPP, fit: int = 4 * TPP):
    adm = c.admit(name, prompt, fit)
    assert isinstance(adm, Admitted), adm
    return adm.resources, adm.resources.open_session()


# ---- the arena on a device ----

def test_the_arena_is_one_exact_allocation_counted_by_memory_stats():
    with lifecore.Device(EMULATED) as dev:
        before = dev.memory_stats()
        # 5 pages and a bit: the arena is exactly floor(capacity / page) pages, never a bucket
        c = AdmissionCoordinator(dev, domains={"kv": 5 * PAGE + 100}, page_bytes=PAGE, tokens_per_page=TPP,
                                 max_active_sequences=2)
        stats = dev.memory_stats()
        assert c.num_blocks("kv") == 5 and stats["arena_bytes"] == 5 * PAGE and stats["arenas"] == 1
        assert stats["driver_allocations"] == before["driver_allocations"] + 1
        assert stats["pool_bytes"] == before["pool_bytes"]  # the pools are not the arena
        assert c.page_memory_stats()["free_blocks"] == {"kv": 5}
        del c
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 0  # the last holder returned it


def test_a_closed_device_took_the_arena_back_and_the_stats_say_so():
    dev = lifecore.Device(EMULATED)
    c = make(dev)
    res, s = open_one(c)
    stats = c.page_memory_stats()
    assert stats["arena_chunks"] == 1 and stats["arena_bytes"] == 8 * PAGE
    (_, _, _, address, _), = s.backing.extents
    assert address != 0
    dev.close()
    stats = c.page_memory_stats()
    assert stats["arena_chunks"] == 0 and stats["arena_bytes"] == 0  # the close returned it
    # An extent names no address the device no longer backs (0, as host accounting's).
    assert s.backing.extents == [("kv", 0, 1, 0, PAGE)]
    assert stats["live_bytes"] == PAGE and stats["free_blocks"] == {"kv": 7}  # ids stay, as accounting
    for export in (c.arena, c.arena_chunks):
        with pytest.raises(lifecore.errors.ClosedError, match="device is closed"):
            export("kv")
    # The sequence steps on within the block it holds; one that needs a new block is refused.
    assert s.step(TPP) in (BackingOutcome.CURRENT, BackingOutcome.EXTENDED)
    with pytest.raises(lifecore.errors.ClosedError, match="device of the admission coordinator is closed"):
        s.step(TPP + 1)
    assert s.backing.pages == 1 and s.try_complete() is not None
    s.close()
    res.close()
    assert c.page_memory_stats()["free_blocks"] == {"kv": 8}


@needs_writable_views
def test_writes_through_a_dlpack_view_of_the_arena_are_read_through_the_buffer():
    with lifecore.Device(EMULATED) as dev:
        c = make(dev)
        arena = c.arena("kv")
        view = np.from_dlpack(arena)  # host memory behind the mock: a CPU view, zero-copy
        assert view.nbytes == 8 * PAGE
        res, s = open_one(c)
        block = int(s.backing.block_ids()[0])
        kv = view.view(np.float32).reshape(c.num_blocks(), PAGE // 4)
        kv[block, :] = np.arange(PAGE // 4, dtype=np.float32)
        raw = np.frombuffer(dev.stream().read(arena), dtype=np.float32).reshape(c.num_blocks(), PAGE // 4)
        assert np.array_equal(raw[block], np.arange(PAGE // 4, dtype=np.float32))
        # The view keeps the arena alive after the coordinator and every sequence are gone.
        s.close()
        res.close()
        del c, arena, s, res
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 8 * PAGE
        assert kv[block, 3] == 3.0
        del kv, view, raw
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 0


def test_freeing_the_arena_buffer_drops_only_its_own_hold():
    with lifecore.Device(EMULATED) as dev:
        c = make(dev)
        buffer = c.arena()
        buffer.free()
        assert dev.memory_stats()["arena_bytes"] == 8 * PAGE  # the coordinator still holds it
        assert np.from_dlpack(c.arena()).nbytes == 8 * PAGE  # a fresh Buffer over the same arena


def test_freeing_the_last_holder_of_an_arena_returns_it_at_once():
    # Before: the freed Buffer's hold waited for a fence of its own stream, which nothing
    # issued on: the arena stayed allocated until that stream was synced or the Buffer went.
    with lifecore.Device(EMULATED) as dev:
        c = make(dev)
        buffer = c.arena()
        buffer.stream.launch(lifecore.kernels.scale_f32, 4, 64, [256, 2.0, buffer, buffer])  # queued work on its stream
        del c
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 8 * PAGE  # the Buffer holds it
        buffer.free()
        assert (dev.memory_stats()["arena_bytes"], dev.memory_stats()["arenas"]) == (0, 0)


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_freeing_an_arena_while_this_thread_records_elsewhere_returns_it_too(mode: str):
    # Before: free() skipped its wait while this thread recorded on another stream, and nothing
    # fenced the arena's own stream after: it stayed allocated until a cleanup.
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as dev:
        c = make(dev)
        buffer = c.arena()
        del c
        gc.collect()
        other = dev.stream()
        other.graph_prepare()
        other.begin_capture()
        buffer.free()
        assert dev.memory_stats()["arena_bytes"] == 0
        other.end_capture().destroy()  # the recording went on, whole


def test_no_driver_call_per_admission_extension_or_release():
    with lifecore.Device(EMULATED) as dev:
        c = make(dev, pages=64, slots=16)
        allocations = dev.memory_stats()["driver_allocations"]
        dev.inject_fault("mem_alloc", 2, times=10_000)  # any allocation would now fail
        for round_ in range(20):
            held = [open_one(c, f"r{round_}-{i}", TPP, 16 * TPP) for i in range(4)]
            for tokens in range(TPP + 1, 4 * TPP + 1):
                for _, s in held:
                    assert s.step(tokens) in (BackingOutcome.CURRENT, BackingOutcome.EXTENDED)
            for res, s in held:
                s.try_complete()
                s.close()
                res.close()
        dev.clear_faults()
        assert dev.memory_stats()["driver_allocations"] == allocations
        assert c.page_memory_stats()["allocations"] == 1


def test_a_deferral_never_allocates_device_memory():
    with lifecore.Device(EMULATED) as dev:
        c = make(dev, pages=2)
        before = dev.memory_stats()
        res, s = open_one(c, fit=2 * TPP)
        other = c.admit("q", 2 * TPP, 2 * TPP)
        assert isinstance(other, AdmissionDeferred)
        assert dev.memory_stats() == before


def test_host_accounting_has_no_arena_memory():
    c = make()
    with pytest.raises(InvalidArgumentError, match="host accounting"):
        c.arena("kv")
    with pytest.raises(InvalidArgumentError, match="unknown capacity domain"):
        c.num_blocks("nope")


def test_a_grown_domain_adds_one_chunk_and_ids_continue():
    with lifecore.Device(EMULATED) as dev:
        c = make(dev, pages=2, maximum=8)
        res, s = open_one(c, fit=2 * TPP)
        assert list(s.backing.block_ids()) == [0]
        c.grow_domain("kv", 6 * PAGE)
        assert c.num_blocks() == 6 and dev.memory_stats()["arenas"] == 2
        assert c.page_memory_stats()["allocations"] == 2  # one chunk for four blocks, not four
        chunks = c.arena_chunks("kv")
        assert [(first, blocks, b.nbytes) for first, blocks, b in chunks] == [(0, 2, 2 * PAGE), (2, 4, 4 * PAGE)]
        with pytest.raises(InvalidArgumentError, match="arena_chunks"):
            c.arena("kv")
        held = [open_one(c, f"g{i}", TPP, TPP) for i in range(5)]
        assert sorted(int(h[1].backing.block_ids()[0]) for h in held) == [1, 2, 3, 4, 5]


def test_a_growth_short_of_a_page_adds_no_block_and_wakes_nobody():
    # The bytes are counted, but no demand (whole pages) can use them: a waiter woken for them
    # found nothing that fits.
    c = make(pages=2, maximum=8)
    _, s = open_one(c, fit=2 * TPP)
    held = open_one(c, "h", TPP, TPP)
    deferred = c.admit("waits", TPP, TPP)
    assert isinstance(deferred, AdmissionDeferred)
    waiter = c.register_waiter(deferred)
    c.grow_domain("kv", 2 * PAGE + PAGE // 2)
    assert c.capacity().domains[0].total_bytes == 2 * PAGE + PAGE // 2 and c.num_blocks() == 2
    assert not waiter.should_retry() and not c.fits_now(deferred)
    c.grow_domain("kv", 3 * PAGE)
    assert c.num_blocks() == 3 and waiter.should_retry() and c.fits_now(deferred)
    del held, s


# ---- block ids ----

def test_a_domain_hands_out_at_most_the_int32_ids_and_refuses_a_fit_beyond_them():
    """Block ids are int32: a domain of more pages counts only the blocks that have an id, and a
    request whose fit needs more is rejected for good (a deferral would be retried for ever)."""
    from lifecore.sequence import AdmissionRejected
    ids = 2**31
    c = AdmissionCoordinator(None, domains={"kv": 2**32}, page_bytes=1, tokens_per_page=1, max_active_sequences=1)
    assert c.num_blocks() == ids and c.page_memory_stats()["free_blocks"] == {"kv": ids}
    rejected = c.admit("a", ids + 1, ids + 1)
    assert isinstance(rejected, AdmissionRejected) and "int32" in rejected.reason
    assert c.capacity().active_sequences == 0 and c.holders() == []
    # No memory is made for blocks without an id, at creation or when the domain grows.
    grown = AdmissionCoordinator(None, domains={"kv": (2**32, 2**34)}, page_bytes=1, tokens_per_page=1,
                                 max_active_sequences=1)
    stats = grown.page_memory_stats()
    assert stats["arena_bytes"] == ids and stats["blocks"] == {"kv": ids}
    grown.grow_domain("kv", 2**32 + 4096)
    assert grown.page_memory_stats()["arena_bytes"] == ids and grown.page_memory_stats()["arena_chunks"] == 1
    # The domain accounts only the bytes its ids can hand out, so two prompts that pass the
    # bytes always find ids (past them, a prompt waits on a release, never on ids that no
    # release can make): the reported total says so, and the reference model agrees.
    from lifecore.models.sequence_session import ModelCoordinator
    for coordinator in (c, grown):
        assert coordinator.capacity().domains[0].total_bytes == ids
    model = ModelCoordinator(domains={"kv": (2**32, 2**34)}, page_bytes=1, tokens_per_page=1, max_active_sequences=1)
    model.grow_domain("kv", 2**32 + 4096)
    assert model.total == {"kv": ids}
    pages = AdmissionCoordinator(None, domains={"kv": 2**50}, page_bytes=4096, tokens_per_page=16, max_active_sequences=1)
    assert pages.capacity().domains[0].total_bytes == ids * 4096
    # Two domains whose arena bytes sum past 64 bits: counted exactly, neither wrapped nor refused.
    huge = AdmissionCoordinator(None, domains={"a": 2**63, "b": 2**63}, page_bytes=2**62, tokens_per_page=1,
                                max_active_sequences=1)
    assert huge.page_memory_stats()["arena_bytes"] == 2**64


def test_block_ids_are_a_read_only_zero_copy_view():
    c = make()
    res, s = open_one(c, prompt=2 * TPP)
    ids = s.backing.block_ids()
    assert ids.dtype == np.int32 and list(ids) == [0, 1] and not ids.flags.writeable
    with pytest.raises(ValueError):
        ids[0] = 7
    again = s.backing.block_ids("kv")
    assert np.shares_memory(ids, again)


def test_a_prefix_view_never_moves_and_a_released_one_reads_minus_one():
    c = make(pages=8)
    res, s = open_one(c, prompt=TPP, fit=8 * TPP)
    first = s.backing.block_ids()
    snapshot = s.backing
    for tokens in range(TPP + 1, 8 * TPP + 1):
        s.step(tokens)
    assert list(first) == [0] and list(s.backing.block_ids()) == list(range(8))
    everything = s.backing.block_ids()
    s.close()
    res.close()
    assert snapshot.released
    with pytest.raises(SessionStateError, match="released"):
        snapshot.block_ids()
    assert list(first) == [-1] and list(everything) == [-1] * 8
    # The next sequence gets the ids back in the order they had (a LIFO free list).
    res2, s2 = open_one(c, "again", prompt=3 * TPP)
    assert list(s2.backing.block_ids()) == [0, 1, 2]


def test_views_taken_across_growths_keep_their_prefix_and_read_minus_one_once_released():
    c = make(pages=64)
    # Id storage for 4 pages, then 8, 16 and 32 (fixed-size classes), then 64 (a plain array).
    res, s = open_one(c, prompt=TPP, fit=64 * TPP)
    views = {}
    for pages in range(1, 65):
        s.step(pages * TPP)
        if pages in (1, 4, 5, 8, 9, 16, 17, 31, 33, 64):
            views[pages] = s.backing.block_ids()
    whole = list(s.backing.block_ids())
    assert len(set(whole)) == 64
    for pages, view in views.items():
        assert list(view) == whole[:pages]
    s.close()
    res.close()
    assert all((view == -1).all() for view in views.values())


def test_a_fit_beyond_the_first_storage_grows_and_earlier_views_stay_valid():
    room = 65536  # a prompt that fills its first id storage
    c = AdmissionCoordinator(domains={"kv": (room + 2) * PAGE}, page_bytes=PAGE, tokens_per_page=1,
                             max_active_sequences=1)
    res, s = open_one(c, prompt=room, fit=room + 2)
    before = s.backing.block_ids()
    assert s.try_ensure_backing_covers(room + 2).outcome == BackingOutcome.EXTENDED
    after = s.backing.block_ids()
    assert len(before) == room and len(after) == room + 2
    assert np.array_equal(before, after[:room]) and not np.shares_memory(before, after)
    s.close()
    res.close()
    assert (before == -1).all() and (after == -1).all()


def test_block_ids_of_a_domain_the_sequence_is_not_in_is_refused():
    c = AdmissionCoordinator(domains={"k": 4 * PAGE, "v": 4 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=2)
    adm = c.admit("r", TPP, TPP, ["v"])
    with pytest.raises(InvalidArgumentError, match="no pages in domain 'k'"):
        adm.resources.initial_backing.block_ids("k")
    assert list(adm.resources.initial_backing.block_ids()) == [0]


def _random_run(c: AdmissionCoordinator, seed: int, steps: int = 400) -> list:
    rng = random.Random(seed)
    live: dict[str, tuple] = {}
    trace = []
    for i in range(steps):
        op = rng.random()
        if op < 0.35 and len(live) < 6:
            name = f"s{i}"
            adm = c.admit(name, rng.randint(1, 3 * TPP), 6 * TPP)
            if isinstance(adm, Admitted):
                live[name] = (adm.resources, adm.resources.open_session(), [adm.resources.initial_backing.pages * TPP])
        elif op < 0.8 and live:
            name = rng.choice(sorted(live))
            res, s, tokens = live[name]
            target = min(tokens[0] + rng.randint(1, TPP), 6 * TPP)
            if s.step(target) in (BackingOutcome.CURRENT, BackingOutcome.EXTENDED):
                tokens[0] = max(tokens[0], target)
        elif live:
            name = rng.choice(sorted(live))
            res, s, _ = live.pop(name)
            s.close()
            res.close()
        # Never two live sequences on one id, and every live page has an id.
        owned = [int(b) for _, s, _ in live.values() for b in s.backing.block_ids()]
        assert len(owned) == len(set(owned)) and all(0 <= b < c.num_blocks() for b in owned)
        assert c.page_memory_stats()["free_blocks"]["kv"] == c.num_blocks() - len(owned)
        trace.append(sorted((n, tuple(int(b) for b in s.backing.block_ids())) for n, (_, s, _) in live.items()))
    return trace


@pytest.mark.parametrize("seed", range(4))
def test_ids_are_never_held_by_two_live_sequences(seed):
    _random_run(make(pages=12), seed)


def test_host_accounting_hands_out_the_same_ids_as_a_device():
    with lifecore.Device(EMULATED) as dev:
        assert _random_run(make(dev, pages=12), 7, 200) == _random_run(make(pages=12), 7, 200)


# ---- block tables ----

def _batch(c: AdmissionCoordinator):
    held = [open_one(c, f"b{i}", (i + 1) * TPP, 4 * TPP) for i in range(3)]
    return held, [s for _, s in held]


def test_block_table_from_sessions_and_frames_into_a_new_array():
    c = make(pages=8)
    held, sessions = _batch(c)
    table = c.block_table(sessions, 4, pad=-1)
    assert table.dtype == np.int32 and table.shape == (3, 4)
    assert table.tolist() == [[0, -1, -1, -1], [1, 2, -1, -1], [3, 4, 5, -1]]
    frames = lifecore.sequence.acquire_frames(sessions)
    assert np.array_equal(c.block_table(frames, 4, pad=-1), table)
    assert list(frames[1].block_ids()) == [1, 2]
    for f in frames:
        f.commit()


def test_block_table_fills_numpy_torch_and_a_buffer_in_place():
    c = make(pages=8)
    held, sessions = _batch(c)
    out = np.full((3, 5), 99, dtype=np.int32)
    assert c.block_table(sessions, 5, out) is out
    assert out.tolist() == [[0, 0, 0, 0, 0], [1, 2, 0, 0, 0], [3, 4, 5, 0, 0]]
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buffer = s.alloc(3 * 5 * 4 + 8)  # at least the table's bytes
        c.block_table(sessions, 5, buffer, pad=-2)  # written on the buffer's stream, which reads it
        got = np.frombuffer(s.read(buffer), dtype=np.int32)[:15].reshape(3, 5)
        assert got.tolist() == [[0, -2, -2, -2, -2], [1, 2, -2, -2, -2], [3, 4, 5, -2, -2]]
        with pytest.raises(InvalidArgumentError, match="smaller"):
            c.block_table(sessions, 6, buffer)


def test_block_table_fills_a_torch_cpu_tensor_in_place():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make(pages=8)
    held, sessions = _batch(c)
    out = torch.full((3, 4), 7, dtype=torch.int32)
    c.block_table(sessions, 4, out, pad=-1)
    assert out.tolist() == [[0, -1, -1, -1], [1, 2, -1, -1], [3, 4, 5, -1]]
    with pytest.raises(InvalidArgumentError, match="must hold int32 elements, got int64"):
        c.block_table(sessions, 4, torch.zeros((3, 4), dtype=torch.int64))
    with pytest.raises(InvalidArgumentError, match="must hold int32 elements, got float16"):
        c.block_table(sessions, 4, torch.zeros((3, 4), dtype=torch.float16))
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        c.block_table(sessions, 4, torch.zeros((4, 3), dtype=torch.int32).t())
    # A negative view reads its memory negated, and DLPack exports that memory without the sign:
    # ids written there had read back as -id.
    negated = torch.full((3, 4), 7, dtype=torch.int32)._neg_view()
    with pytest.raises(InvalidArgumentError, match="block_table: argument 'out' is a torch tensor with its negative bit set"):
        c.block_table(sessions, 4, negated, pad=-1)
    assert (negated == -7).all()


def test_every_block_table_error_writes_nothing():
    c = make(pages=8)
    other = make(pages=8)
    held, sessions = _batch(c)
    _, foreign = open_one(other, "f")
    out = np.full((3, 4), 42, dtype=np.int32)
    cases = [
        (lambda: c.block_table(sessions, 2, out[:, :2].copy()), InvalidArgumentError, "width"),
        (lambda: c.block_table(sessions[:2] + [foreign], 4, out), StaleAuthorityError, "another coordinator"),
        (lambda: c.block_table(sessions, 4, np.zeros((3, 4), dtype=np.int64)), InvalidArgumentError, "int32"),
        (lambda: c.block_table(sessions, 4, np.zeros((4, 3), dtype=np.int32)), InvalidArgumentError, "shape"),
        (lambda: c.block_table(sessions, 4, np.zeros((3, 8), dtype=np.int32)[:, ::2]), InvalidArgumentError,
         "contiguous"),
        (lambda: c.block_table(sessions, 4, np.zeros((3, 4), dtype=np.int32).copy(order="F")),
         InvalidArgumentError, "contiguous"),
        (lambda: c.block_table(sessions, 4, out, domain="nope"), InvalidArgumentError, "unknown"),
        (lambda: c.block_table(sessions + [object()], 4, out), LifecoreTypeError, "frames"),
        (lambda: c.block_table("abc", 4, out), LifecoreTypeError, "frames"),
        (lambda: c.block_table(sessions, 4, object()), LifecoreTypeError, "out"),
        (lambda: c.block_table(sessions, -1, out), InvalidArgumentError, "width"),
    ]
    readonly = np.zeros((3, 4), dtype=np.int32)
    readonly.flags.writeable = False
    cases.append((lambda: c.block_table(sessions, 4, readonly), InvalidArgumentError, "read-only"))
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
        assert (out == 42).all() and not readonly.any()
    frames = lifecore.sequence.acquire_frames(sessions)
    frames[0].commit()
    with pytest.raises(SessionStateError, match="finalized"):
        c.block_table(frames, 4, out)
    assert (out == 42).all()
    for f in frames[1:]:
        f.commit()
    # A live frame of another coordinator (even one with the same domain names) is refused.
    frames, foreign_frame = lifecore.sequence.acquire_frames(sessions[:2]), foreign.acquire_frame()
    with pytest.raises(StaleAuthorityError, match="row 2.*another coordinator"):
        c.block_table(frames + [foreign_frame], 4, out[:, :4])
    assert (out == 42).all()
    for f in frames + [foreign_frame]:
        f.commit()


def test_block_table_in_place_rewrites_what_differs_and_matches_a_new_table():
    # A table filled in place is compared row by row and written only where it differs: a row
    # whose ids, padding or length changed since is rewritten, the rest left alone.
    c = make(pages=16)
    held, sessions = _batch(c)
    out = c.block_table(sessions, 6, pad=-1)
    out[0, 0] = 77    # an id overwritten by the caller
    out[1, 5] = 88    # padding overwritten
    assert sessions[2].step(4 * TPP) == BackingOutcome.EXTENDED  # row 2 grows by a block
    assert c.block_table(sessions, 6, out, pad=-1) is out
    assert np.array_equal(out, c.block_table(sessions, 6, pad=-1))
    assert out[2].tolist()[:4] == list(sessions[2].backing.block_ids()) and out[2, 4] == -1
    # Another pad value rewrites every row's padding.
    c.block_table(sessions, 6, out, pad=-5)
    assert np.array_equal(out, c.block_table(sessions, 6, pad=-5))


@pytest.mark.parametrize("pad", [0, -1])
def test_a_wide_in_place_row_finds_any_changed_padding(pad):
    # Padding longer than the check's zero block (256 ids) is compared all the way.
    c = make(pages=16)
    held, sessions = _batch(c)
    reference = c.block_table(sessions, 600, pad=pad)
    for position in (5, 255, 256, 257, 511, 512, 599):
        out = reference.copy()
        out[1, position] = 9
        c.block_table(sessions, 600, out, pad=pad)
        assert np.array_equal(out, reference), position


@pytest.mark.parametrize("pad", [0, -1, 2**31 - 1])
def test_an_in_place_table_finds_a_change_at_every_position_of_every_row(pad):
    # The row check runs in vector lanes with a scalar tail: an odd width puts positions in
    # both, and a change of one bit (the sign's, the lowest) is a change.
    c = make(pages=16)
    held, sessions = _batch(c)
    reference = c.block_table(sessions, 37, pad=pad)
    for row in range(len(sessions)):
        for position in range(37):
            for changed in (reference[row, position] ^ np.int32(-2**31), reference[row, position] ^ 1):
                out = reference.copy()
                out[row, position] = changed
                c.block_table(sessions, 37, out, pad=pad)
                assert np.array_equal(out, reference), (row, position, int(changed))


def test_a_refused_row_puts_back_the_rows_written_before_it():
    c = make(pages=16)
    held, sessions = _batch(c)
    _, fourth = open_one(c, "fourth")
    out = np.full((4, 4), 9, dtype=np.int32)  # every row differs, so rows 0-2 are written first
    fourth.close()
    with pytest.raises(lifecore.errors.ClosedError, match="closed"):
        c.block_table(sessions + [fourth], 4, out)
    assert (out == 9).all()
    before = c.block_table(sessions, 4)
    out[:3] = before
    out[1, 3] = 55  # row 1 differs, rows 0 and 2 already hold their ids
    narrow = np.full((3, 2), 9, dtype=np.int32)  # rows 0 and 1 fit and are written, row 2 does not
    with pytest.raises(InvalidArgumentError, match="row 2.*width 2"):
        c.block_table(sessions, 2, narrow)
    assert (narrow == 9).all()
    snapshot = out.copy()
    with pytest.raises(StaleAuthorityError, match="row 3"):
        c.block_table(sessions + [open_one(make(), "elsewhere")[1]], 4, out)
    assert np.array_equal(out, snapshot)


def test_block_tables_follow_ids_that_outgrow_their_storage_in_every_domain():
    # Id storage starts with room for 16 blocks and doubles as a sequence grows; each domain's
    # row must show the ids of the storage the backing uses now.
    c = AdmissionCoordinator(domains={"k": 80 * PAGE, "v": 80 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=2)
    s = c.admit("a", TPP, 70 * TPP).resources.open_session()
    other = c.admit("b", TPP, 8 * TPP).resources.open_session()
    out = np.zeros((2, 70), dtype=np.int32)
    for tokens in range(TPP + 1, 70 * TPP + 1, TPP):
        assert s.step(tokens) == BackingOutcome.EXTENDED
        for domain in ("k", "v"):
            c.block_table([s, other], 70, out, domain=domain, pad=-1)
            ids = list(s.backing.block_ids(domain))
            assert len(ids) == s.backing.pages and out[0].tolist() == ids + [-1] * (70 - len(ids))
            assert out[1].tolist()[:1] == list(other.backing.block_ids(domain))


def test_step_takes_tokens_by_position_or_name_and_refuses_anything_else():
    c = make(pages=8)
    _, s = open_one(c)
    assert s.step(TPP + 1) == BackingOutcome.EXTENDED and s.step(tokens=TPP + 2) == BackingOutcome.CURRENT
    assert type(s.step(TPP + 2)) is BackingOutcome
    before = (s.next_frame_id, s.backing.generation)
    for args, kwargs, error, match in [(("17",), {}, LifecoreTypeError, "must be an int, got str"),
                                       ((True,), {}, LifecoreTypeError, "got bool"),
                                       ((2 ** 70,), {}, lifecore.errors.LifecoreOverflowError, "between"),
                                       ((0,), {}, InvalidArgumentError, "positive"),
                                       ((), {}, LifecoreTypeError, "one argument"),
                                       ((1, 2), {}, LifecoreTypeError, "one argument"),
                                       ((), {"tok": 3}, LifecoreTypeError, "one argument"),
                                       ((10 * TPP,), {}, lifecore.errors.CapacityError, "fit")]:
        with pytest.raises(error, match=match):
            s.step(*args, **kwargs)
        assert (s.next_frame_id, s.backing.generation) == before  # nothing changed

    class Tokens(int):
        pass

    assert s.step(Tokens(TPP + 3)) == BackingOutcome.CURRENT
    s.close()
    with pytest.raises(lifecore.errors.ClosedError):
        s.step(TPP + 4)


def test_block_table_refuses_a_domain_the_sequence_is_not_in():
    c = AdmissionCoordinator(domains={"k": 4 * PAGE, "v": 4 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=2)
    a = c.admit("a", TPP, TPP).resources.open_session()
    b_adm = c.admit("b", TPP, TPP, ["v"])
    b = b_adm.resources.open_session()
    out = np.full((2, 1), 5, dtype=np.int32)
    with pytest.raises(InvalidArgumentError, match="row 1.*domain 'k'"):
        c.block_table([a, b], 1, out, domain="k")
    assert (out == 5).all()
    assert c.block_table([a, b], 1, domain="v").tolist() == [[0], [1]]


def test_a_growth_the_device_refuses_changes_nothing():
    from lifecore.errors import LifecoreError

    with lifecore.Device(EMULATED) as dev:
        c = make(dev, pages=2, maximum=8)
        before, stats = c.capacity().domains[0].total_bytes, dev.memory_stats()
        dev.inject_fault("mem_alloc", 2, times=1)
        with pytest.raises(LifecoreError):
            c.grow_domain("kv", 8 * PAGE)
        dev.clear_faults()
        assert c.capacity().domains[0].total_bytes == before and c.num_blocks() == 2
        assert dev.memory_stats()["arena_bytes"] == stats["arena_bytes"]
        c.grow_domain("kv", 8 * PAGE)
        assert c.num_blocks() == 8


def test_step_all_reads_any_numpy_integer_positions_and_names_what_it_refuses():
    """An engine's positions are often int32: any one-dimensional NumPy integer array is read
    (through an int64 copy; a non-contiguous int64 one too), and what is not one is refused,
    naming what it got, before any row steps."""
    c = make(pages=8)
    held, sessions = _batch(c)
    for dtype in (np.int32, np.uint32, np.int16, np.uint8, np.uint64):
        assert lifecore.sequence.step_all(sessions, np.array([1, 2, 3], dtype=dtype)).tolist() == [0, 0, 0]
    strided = np.array([1, 0, 2, 0, 3, 0], dtype=np.int64)[::2]
    assert lifecore.sequence.step_all(sessions, strided).tolist() == [0, 0, 0]
    retired = [s.retired_frames for s in sessions]
    for bad, error, words in ((np.array([1.0, 2.0, 3.0]), LifecoreTypeError, "must hold integers, got an array of float64"),
                              (np.array([True, True, True]), LifecoreTypeError, "must hold integers, got an array of bool"),
                              (np.array([1, 2**63, 3], dtype=np.uint64), lifecore.errors.LifecoreOverflowError,
                               r"tokens' holds 9223372036854775808 at row 1, past any 64-bit signed count"),
                              (np.ones((3, 1), dtype=np.int32), InvalidArgumentError, "one-dimensional, got 2")):
        with pytest.raises(error, match=words):
            lifecore.sequence.step_all(sessions, bad)
    assert [s.retired_frames for s in sessions] == retired  # nothing stepped
    table = c.decode_table(3, 8)
    assert table.step(sessions, np.array([4, 5, 6], dtype=np.int32)).tolist() == [0, 0, 0]


def test_step_all_refuses_torch_positions_read_negated():
    """A torch tensor with its negative bit set reads its memory negated, and its DLPack export is
    that memory: [-1, -2, -3] had been read as [1, 2, 3] and stepped."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make(pages=8)
    held, sessions = _batch(c)
    retired = [s.retired_frames for s in sessions]
    negated = torch.tensor([-1, -2, -3])._neg_view()
    with pytest.raises(InvalidArgumentError, match="'tokens' is a torch tensor with its negative bit set"):
        lifecore.sequence.step_all(sessions, negated)
    assert [s.retired_frames for s in sessions] == retired  # nothing stepped
    assert lifecore.sequence.step_all(sessions, negated.resolve_neg()).tolist() == [0, 0, 0]  # reads [1, 2, 3]


def test_step_all_steps_a_batch_and_names_the_row_that_raises():
    c = make(pages=8)
    held, sessions = _batch(c)
    outcomes = lifecore.sequence.step_all(sessions, np.array([TPP + 1, 2 * TPP, 3 * TPP], dtype=np.int64))
    assert outcomes.dtype == np.uint8
    assert [BackingOutcome(v) for v in outcomes.tolist()] == [BackingOutcome.EXTENDED, BackingOutcome.CURRENT,
                                                              BackingOutcome.CURRENT]
    assert lifecore.sequence.step_all(sessions, [TPP + 2, 2 * TPP, 3 * TPP]).tolist() == [0, 0, 0]
    with pytest.raises(InvalidArgumentError, match="3 sessions"):
        lifecore.sequence.step_all(sessions, [1, 2])
    with pytest.raises(LifecoreTypeError, match="sessions"):
        lifecore.sequence.step_all(sessions + [object()], [1, 2, 3, 4])
    frame = sessions[1].acquire_frame()  # a session's own state is found at its row
    with pytest.raises(lifecore.errors.SessionStateError, match=r"row 1; the rows before it stepped\)$"):
        lifecore.sequence.step_all(sessions, [TPP + 3, 2 * TPP, 3 * TPP])
    assert sessions[0].retired_frames == 3  # the row before the refusal stepped
    with pytest.raises(lifecore.errors.SessionStateError, match=r"row 0; no row stepped\)$"):
        lifecore.sequence.step_all(sessions[1:], [2 * TPP, 3 * TPP])
    frame.commit()
    # A closed handle (a preempted victim left in the batch) is refused before any row steps.
    sessions[1].close()
    with pytest.raises(lifecore.errors.ClosedError, match=r"handle is closed \(step_all: row 1; no row stepped\)$"):
        lifecore.sequence.step_all(sessions, [TPP + 4, 2 * TPP, 3 * TPP])
    assert sessions[0].retired_frames == 3


def test_step_all_refuses_tokens_above_a_rows_fit_before_any_row_steps():
    c = make(pages=16)
    held, sessions = _batch(c)  # each fits 4 pages
    retired, pages = [s.retired_frames for s in sessions], [s.backing.pages for s in sessions]
    with pytest.raises(lifecore.errors.CapacityError,
                       match=rf"^step: the target \({4 * TPP + 1} tokens, 5 pages\) is above the request's fit limit "
                             rf"\({4 * TPP} tokens, 4 pages\) \(step_all: row 2; no row stepped\)$"):
        lifecore.sequence.step_all(sessions, [TPP + 1, 2 * TPP + 1, 4 * TPP + 1])
    assert [s.retired_frames for s in sessions] == retired and [s.backing.pages for s in sessions] == pages
    assert lifecore.sequence.step_all(sessions, [TPP + 1, 2 * TPP + 1, 4 * TPP]).tolist() == [1, 1, 1]  # the fit itself


def test_a_batch_that_names_a_session_twice_is_refused_before_any_row_steps():
    # An engine that scheduled one sequence on two rows would step it twice in one iteration.
    c = make(pages=16)
    held, sessions = _batch(c)
    retired, pages = [s.retired_frames for s in sessions], [s.backing.pages for s in sessions]
    table = c.decode_table(4, 4, pad=-1)
    table.update(sessions)
    before = table.table.copy()
    twice = [sessions[0], sessions[1], sessions[2], sessions[1]]
    tokens = [TPP + 1, 2 * TPP + 1, 3 * TPP + 1, 2 * TPP + 2]
    with pytest.raises(InvalidArgumentError,
                       match=r"^step: the session is also row 1, and a batch steps each session once "
                             r"\(step_all: row 3; no row stepped\)$"):
        lifecore.sequence.step_all(twice, tokens)
    with pytest.raises(InvalidArgumentError,
                       match=r"^DecodeTable.step: row 3: step: the session is also row 1, and a batch steps each "
                             r"session once \(nothing was stepped or written\)$"):
        table.step(twice, tokens)
    assert [s.retired_frames for s in sessions] == retired and [s.backing.pages for s in sessions] == pages
    assert np.array_equal(table.table, before)
    # Each batch is its own: a session in every batch, or at another row of the next, steps.
    for _ in range(3):
        assert lifecore.sequence.step_all(sessions, [TPP + 1, 2 * TPP + 1, 3 * TPP + 1]).size == 3
        assert table.step(sessions[::-1], [3 * TPP + 1, 2 * TPP + 1, TPP + 1]).size == 3
    assert [s.retired_frames for s in sessions] == [r + 6 for r in retired]


def test_block_table_names_the_row_of_a_closed_session_and_writes_nothing():
    c = make(pages=8)
    held, sessions = _batch(c)
    out = np.full((3, 4), 7, dtype=np.int32)
    sessions[2].close()
    with pytest.raises(lifecore.errors.ClosedError,
                       match=r"^block_table: row 2: the sequence session handle is closed \(nothing was written\)$"):
        c.block_table(sessions, 4, out=out)
    assert (out == 7).all()  # the rows before it put back


def test_a_table_out_that_is_the_arena_is_refused_and_the_kv_is_left_whole():
    # block_table(out=c.arena()) would write ids over block 0's keys and values: lost data.
    with lifecore.Device(EMULATED) as dev:
        c = make(dev, pages=2, maximum=8)
        c.grow_domain("kv", 6 * PAGE)  # a second chunk: each is the arena's memory
        held = [open_one(c, f"r{i}", TPP, TPP) for i in range(2)]
        sessions = [s for _, s in held]
        for _, _, chunk in c.arena_chunks("kv"):
            before = dev.stream().read(chunk)
            with pytest.raises(InvalidArgumentError,
                               match=r"^block_table: argument 'out' is the arena memory of domain 'kv': the table "
                                     r"would be written over its blocks \(nothing was written\)$"):
                c.block_table(sessions, 4, out=chunk)
            with pytest.raises(InvalidArgumentError, match=r"^decode_table: argument 'out' is the arena memory of domain 'kv'"):
                c.decode_table(2, 4, out=chunk)
            rows = chunk.nbytes // 16
            with pytest.raises(InvalidArgumentError, match=r"^decode_table: argument 'out' is the arena memory"):
                c.decode_table(rows, 4, out=chunk.view("int32", (rows, 4)))  # a typed view, by DLPack
            assert dev.stream().read(chunk) == before
        s = dev.stream()
        other = s.alloc(2 * 4 * 4)  # the same device's memory outside the arena is a table's
        assert c.block_table(sessions, 4, out=other) is other
        # Read on the stream the table was written on: a read waits for its own stream's work only.
        assert np.frombuffer(s.read(other), dtype=np.int32).reshape(2, 4)[:, 0].tolist() == [
            int(s.backing.block_ids()[0]) for s in sessions]


@needs_writable_views
def test_a_table_out_that_views_the_arena_is_refused_and_the_kv_is_left_whole():
    # On the mock the arena's memory is host memory: a NumPy view of it is the arena too.
    with lifecore.Device(EMULATED) as dev:
        c = make(dev)
        held = [open_one(c, f"r{i}") for i in range(2)]
        sessions = [s for _, s in held]
        kv = np.from_dlpack(c.arena("kv")).view(np.int32)
        kv[:] = 5
        inside = kv[PAGE // 4: PAGE // 4 + 8].reshape(2, 4)  # block 1's first bytes
        # A view made to run past the arena's last byte (the table's first bytes are its last).
        past = np.lib.stride_tricks.as_strided(kv[-4:], shape=(2, 4), strides=(16, 4))
        for out in (inside, past):
            with pytest.raises(InvalidArgumentError,
                               match=r"^block_table: argument 'out' is the arena memory of domain 'kv'"):
                c.block_table(sessions, 4, out=out)
            with pytest.raises(InvalidArgumentError,
                               match=r"^decode_table: argument 'out' is the arena memory of domain 'kv'"):
                c.decode_table(2, 4, out=out)
        assert (kv == 5).all()
        table = np.zeros((2, 4), dtype=np.int32)  # host memory of NumPy's own is not the arena
        c.block_table(sessions, 4, out=table)
        assert table[:, 0].tolist() == [int(s.backing.block_ids()[0]) for s in sessions]


@needs_writable_views
def test_a_table_out_that_is_another_coordinators_arena_is_refused_and_its_kv_is_left_whole():
    """Only the coordinator's own arena was refused: a table written into another
    coordinator's arena on the same device overwrote that coordinator's keys and values."""
    with lifecore.Device(EMULATED) as dev:
        c, other = make(dev), make(dev)
        held = [open_one(c, f"r{i}") for i in range(2)]
        sessions = [s for _, s in held]
        kv = np.from_dlpack(other.arena("kv")).view(np.int32)
        kv[:] = 5
        chunk = other.arena_chunks("kv")[0][2]
        for out in (chunk, kv[8:16].reshape(2, 4)):
            with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is the KV arena memory of "
                                                           r"another coordinator on this device"):
                c.block_table(sessions, 4, out=out)
            with pytest.raises(InvalidArgumentError, match=r"^decode_table: argument 'out' is the KV arena memory"):
                c.decode_table(2, 4, out=out)
        # A coordinator doing host accounting has no device of its own, but a Buffer knows its own.
        accounting = make()
        counted = [open_one(accounting, f"h{i}") for i in range(2)]
        with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is the KV arena memory of a "
                                                       r"coordinator: the table would be written over its blocks"):
            accounting.block_table([s for _, s in counted], 4, out=chunk)
        assert (kv == 5).all()
        # A NumPy view of that arena, to a coordinator doing host accounting (before: accepted).
        for out in (kv[8:16].reshape(2, 4), kv[-8:].reshape(2, 4)):
            with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is the KV arena memory of a "
                                                           r"coordinator: the table would be written over its blocks"):
                accounting.block_table([s for _, s in counted], 4, out=out)
        with lifecore.Device(EMULATED) as elsewhere:  # a coordinator's arena on another device
            far = make(elsewhere)
            far_chunk = far.arena_chunks("kv")[0][2]
            far_kv = np.from_dlpack(far.arena("kv")).view(np.int32)
            far_kv[:] = 7
            # Its Buffer, and a NumPy view of it (before: the view was accepted, and written over).
            for out in (far_chunk, far_kv[:8].reshape(2, 4)):
                with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is the KV arena memory "
                                                               r"of a coordinator on another device"):
                    c.block_table(sessions, 4, out=out)
                with pytest.raises(InvalidArgumentError, match=r"^decode_table: argument 'out' is the KV arena memory"):
                    c.decode_table(2, 4, out=out)
            assert (far_kv == 7).all()
            del far_chunk, far, far_kv
        # Once that arena is gone, its addresses are no one's arena.
        del kv, chunk, other, out
        gc.collect()
        assert dev.memory_stats()["arenas"] == 1
        table = dev.stream().alloc(2 * 4 * 4)
        assert c.block_table(sessions, 4, out=table) is table


def test_step_all_holds_its_sessions_while_tokens_are_read():
    # Reading `tokens` runs its __dlpack__, which drops the only references to the sessions:
    # the call still steps the sessions it was given, and they go once it returns.
    c = make(pages=8)
    sessions = [open_one(c, f"s{i}")[1] for i in range(3)]
    targets = np.array([TPP + 1, TPP + 1, TPP + 1], dtype=np.int64)

    class Tokens:
        def __dlpack__(self, *args, **kw):
            sessions.clear()
            return targets.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return targets.__dlpack_device__()

    outcomes = lifecore.sequence.step_all(sessions, Tokens())
    assert [BackingOutcome(v) for v in outcomes.tolist()] == [BackingOutcome.EXTENDED] * 3
    gc.collect()
    assert c.capacity().active_sequences == 0


def test_commit_frames_commits_a_batch_and_names_the_row_that_raises():
    c = make(pages=8)
    held, sessions = _batch(c)
    frames = lifecore.sequence.acquire_frames(sessions)
    table = c.block_table(frames, 4)
    dispositions = lifecore.sequence.commit_frames(frames)
    assert dispositions.dtype == np.uint8
    assert [FrameDisposition(v) for v in dispositions.tolist()] == [FrameDisposition.COMMITTED] * 3
    assert all(f.finalized for f in frames) and [s.retired_frames for s in sessions] == [1, 1, 1]
    assert table[0, 0] >= 0
    # A cancelled sequence's frame is discarded, not committed.
    frames = lifecore.sequence.acquire_frames(sessions)
    sessions[2].request_cancel()
    assert lifecore.sequence.commit_frames(tuple(frames)).tolist() == [FrameDisposition.COMMITTED.value,
                                                                        FrameDisposition.COMMITTED.value,
                                                                        FrameDisposition.DISCARDED_CANCELLED.value]
    # Wrong types are refused before any frame commits.
    frames = lifecore.sequence.acquire_frames(sessions[:2])
    with pytest.raises(LifecoreTypeError, match=r"commit_frames: argument 'frames\[2\]' must be a FrameHold"):
        lifecore.sequence.commit_frames(frames + [sessions[2]])
    with pytest.raises(LifecoreTypeError, match=r"must be a sequence \(list, tuple, ...\) of FrameHold"):
        lifecore.sequence.commit_frames(iter(frames))
    assert not any(f.finalized for f in frames)
    # A frame already committed stops the batch at its row; the rows before it committed.
    frames[1].commit()
    with pytest.raises(SessionStateError, match="row 1"):
        lifecore.sequence.commit_frames(frames)
    assert frames[0].finalized and sessions[0].retired_frames == 3
    assert lifecore.sequence.commit_frames([]).tolist() == []


def test_commit_frames_refuses_a_session_named_twice_before_any_frame_commits():
    """acquire_frames and step_all refused a repeat before doing anything; commit_frames
    committed row 0 and then raised at row 1."""
    c = make(pages=8)
    held, sessions = _batch(c)
    frames = lifecore.sequence.acquire_frames(sessions)
    with pytest.raises(InvalidArgumentError, match="row 2 is a frame of the session of row 0.*no frame was committed"):
        lifecore.sequence.commit_frames([frames[0], frames[1], frames[0]])
    assert not any(f.finalized for f in frames)
    frames[0].commit()  # a finalized frame and a new one of the same session
    again = lifecore.sequence.acquire_frames(sessions[:1])
    with pytest.raises(InvalidArgumentError, match="row 1 is a frame of the session of row 0"):
        lifecore.sequence.commit_frames([again[0], frames[0], frames[1]])
    assert not again[0].finalized and not frames[1].finalized
    assert lifecore.sequence.commit_frames([again[0], frames[1], frames[2]]).tolist() == [0, 0, 0]


def test_memory_stats_names_every_key_it_reports():
    """The README points to memory_stats()["arena_bytes"] for a coordinator's arena, but the
    docstring's list of keys stopped at windows_active: arena_bytes and arenas were missing."""
    with lifecore.Device("mock") as dev:
        doc = lifecore.Device.memory_stats.__doc__ or ""
        assert [key for key in dev.memory_stats() if key not in doc] == []


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_graph_that_reads_the_arena_keeps_it_until_the_graph_goes(graphs):
    """A graph retains what its recording touched. The arena was the exception: a decode step
    captured over the KV cache's arena Buffer, replayed after the coordinator and that Buffer
    were dropped, read memory returned to the driver (on the mock: an illegal address, the
    device lost). The graph now holds the arena until it is destroyed; the arena is still
    never retained by a window's priming, nor pooled."""
    import struct

    from lifecore import kernels

    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        stream = dev.stream()
        c = make(dev, pages=1)
        arena = c.arena("kv")
        stream.fill(arena, lifecore.float_bits(3.0))
        out = stream.alloc(4 * 256)
        stream.fill(out, 0)

        def step(s: lifecore.Stream) -> None:
            s.launch(kernels.axpy_f32, 4, 64, [256, 1.0, arena, out])  # out += arena

        graph = stream.capture(step, warmup=0)
        assert dev.memory_stats()["arenas"] == 1
        del arena, c
        gc.collect()
        assert (dev.memory_stats()["arenas"], dev.memory_stats()["arena_bytes"]) == (1, PAGE)  # the graph's
        graph.replay()
        assert struct.unpack("<2f", stream.read(out)[:8]) == (3.0, 3.0)
        graph.destroy()
        assert (dev.memory_stats()["arenas"], dev.memory_stats()["arena_bytes"]) == (0, 0)


def test_a_table_out_whose_producer_fails_is_refused_and_an_interrupt_stays_one():
    # Before: torch's ValueError for a meta tensor escaped as itself, not as a lifecore error.
    c = make()
    adm = c.admit("r", 16, 64)
    assert isinstance(adm, Admitted)
    session = adm.resources.open_session()

    class NoDevice:
        def __dlpack_device__(self):
            raise ValueError("Unknown device type meta for Dlpack")

        def __dlpack__(self, **kwargs):
            raise AssertionError("never asked once the device is unknown")

    class Interrupted:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise KeyboardInterrupt

    with pytest.raises(InvalidArgumentError, match=r"block_table: argument 'out' could not be exported \(its "
                                                   r"__dlpack_device__ raised ValueError: Unknown device type meta"):
        c.block_table([session], 8, NoDevice())
    with pytest.raises(InvalidArgumentError, match=r"decode_table: argument 'out' could not be exported"):
        c.decode_table(1, 8, NoDevice())
    with pytest.raises(KeyboardInterrupt):
        c.block_table([session], 8, Interrupted())
    assert c.block_table([session], 8).tolist() == [session.backing.block_ids().tolist() + [0] * 7]


def test_domain_names_holding_a_nul_are_whole_keys_of_every_report() -> None:
    # Before: the dict-shaped reports cut a name at its NUL, so "k\0v" overwrote "k" in them.
    c = AdmissionCoordinator(None, domains={"k": 4 * PAGE, "k\0v": 4 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=4)
    held = [c.admit("a", 2 * TPP, 2 * TPP, domains=["k"]), c.admit("b", TPP, TPP, domains=["k\0v"])]
    assert all(isinstance(a, Admitted) for a in held)
    assert c.capacity().used_bytes == {"k": 2 * PAGE, "k\0v": PAGE}
    stats = c.page_memory_stats()
    assert stats["blocks"] == {"k": 4, "k\0v": 4}
    assert stats["free_blocks"] == {"k": 2, "k\0v": 3}
    deferred = c.admit("c", 4 * TPP, 4 * TPP)  # 4 pages in each: 2 and 3 free
    assert isinstance(deferred, AdmissionDeferred)
    assert set(deferred.immediate.bytes) == {"k", "k\0v"}


def test_dropping_an_arena_buffer_lets_other_threads_run_while_it_waits():
    # A dropped arena Buffer waits for its stream's queued work: from a destructor run with the
    # interpreter lock held, the wait lets go of it (before: every other thread stalled).
    import threading
    import time
    with lifecore.Device(EMULATED) as dev:
        c = make(dev)
        buffer = c.arena()
        ticks: list[float] = []
        stop = threading.Event()

        def tick() -> None:
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.005)

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            dev._pause_streams_for(0.5)
            buffer.stream.launch(lifecore.kernels.scale_f32, 4, 64, [256, 2.0, buffer, buffer])
            del c
            start = time.monotonic()
            del buffer
            gc.collect()
            end = time.monotonic()
        finally:
            stop.set()
            ticker.join()
        assert dev.memory_stats()["arena_bytes"] == 0
        assert end - start >= 0.3  # it did wait for the paused stream
        assert sum(start < t < end for t in ticks) >= 10  # and the other thread ran meanwhile
