"""The persistent decode table: under random admissions, steps, releases and row changes it
always holds exactly what block_table writes for the same rows, while writing only what
changed; every error writes nothing; it holds no capacity (NumPy-based, so these also run
under the sanitizers)."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest

import lifecore
from lifecore.errors import (CapacityError, ClosedError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError,
                             SessionStateError, StaleAuthorityError)
from lifecore.sequence import AdmissionCoordinator, Admitted, BackingOutcome, DecodeTable

from backend_roles import EMULATED
from numpy_views import needs_writable_views

PAGE = 4096
TPP = 16


def make(pages: int = 64, slots: int = 16, domains=None) -> AdmissionCoordinator:
    return AdmissionCoordinator(domains=domains or {"kv": pages * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                                max_active_sequences=slots)


def open_one(c: AdmissionCoordinator, name: str, prompt: int = TPP, fit: int = 8 * TPP, domains=None):
    adm = c.admit(name, prompt, fit) if domains is None else c.admit(name, prompt, fit, domains)
    assert isinstance(adm, Admitted), adm
    s = adm.resources.open_session()
    adm.resources.close()  # the session keeps them
    return s


def expected(c: AdmissionCoordinator, rows: list, n: int, width: int, pad: int) -> np.ndarray:
    """What block_table writes for the rows that show a session, pad elsewhere."""
    out = np.full((n, width), pad, dtype=np.int32)
    for r, s in enumerate(rows):
        if s is not None:
            out[r] = c.block_table([s], width, pad=pad)[0]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_table_matches_block_table_under_random_admit_step_release(seed):
    rnd = random.Random(seed)
    n, width, pad = 5, 8, -1
    c = make(pages=24, slots=8)
    table = c.decode_table(n, width, pad=pad)
    assert isinstance(table, DecodeTable) and table.table.shape == (n, width)
    assert (table.table == pad).all()
    rows: list = [None] * n
    tokens = [0] * n
    counter = 0
    for _ in range(300):
        op = rnd.random()
        r = rnd.randrange(n)
        if op < 0.25 and rows[r] is None:
            counter += 1
            prompt = rnd.randrange(1, 3 * TPP)
            adm = c.admit(f"s{counter}", prompt, width * TPP)
            if isinstance(adm, Admitted):
                rows[r] = adm.resources.open_session()
                adm.resources.close()
                tokens[r] = prompt
        elif op < 0.4 and rows[r] is not None:
            rows[r].close()  # released (or preempted): the row must not keep showing its ids
            rows[r] = None
        elif op < 0.5:
            # Rows change places: a row's sequence changes, the table rewrites it in full.
            i, j = rnd.randrange(n), rnd.randrange(n)
            rows[i], rows[j] = rows[j], rows[i]
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif rows[r] is not None and tokens[r] < width * TPP:
            tokens[r] += 1
            rows[r].step(tokens[r])  # may be deferred when the domain is full: nothing changes
        before = table.table.copy()
        if rnd.random() < 0.5:
            live = [i for i in range(n) if rows[i] is not None]
            if live and rows[live[-1]] is not None and all(rows[i] is not None for i in range(live[-1] + 1)):
                # step() for a batch with no gaps: every row steps, then the table updates
                batch = rows[:live[-1] + 1]
                targets = [min(t + 1, width * TPP) for t in tokens[:len(batch)]]
                outcomes = table.step(batch, targets)
                assert len(outcomes) == len(batch) and set(outcomes.tolist()) <= {0, 1, 2, 3}
                for i, o in enumerate(outcomes.tolist()):
                    if o in (0, 1):
                        tokens[i] = targets[i]
                rows_given = batch
            else:
                table.update(rows)
                rows_given = rows
        else:
            table.update(rows)
            rows_given = rows
        want = expected(c, rows_given, n, width, pad)
        assert np.array_equal(table.table, want), (seed, table.table, want)
        # Everything that changed was written (an id reused at the same place is written too).
        assert table.last_written >= int((before != want).sum())
        table.update(rows_given)
        assert table.last_written == 0  # nothing changed since
    for s in rows:
        if s is not None:
            s.close()


def test_an_update_writes_only_the_new_ids():
    c = make()
    sessions = [open_one(c, f"r{i}", (i + 1) * TPP) for i in range(3)]
    table = c.decode_table(4, 8, pad=-1)
    table.update(sessions)
    assert table.last_written == 1 + 2 + 3
    assert table.table.tolist()[:3] == [[0] + [-1] * 7, [1, 2] + [-1] * 6, [3, 4, 5] + [-1] * 5]
    sessions[0].step(TPP)  # the same page
    table.update(sessions)
    assert table.last_written == 0
    assert sessions[0].step(TPP + 1) == BackingOutcome.EXTENDED
    table.update(sessions)
    assert table.last_written == 1 and table.table[0, :2].tolist() == [0, 6]
    # Another sequence in row 0: the whole row is rewritten, the old ids padded over.
    table.update([sessions[2], sessions[1], None])
    assert table.last_written == 3 + 3  # 3 ids in row 0 (2 over old ones, 1 over pad), row 2 back to pad
    assert table.table.tolist()[:3] == [[3, 4, 5] + [-1] * 5, [1, 2] + [-1] * 6, [-1] * 8]
    table.update([sessions[2], sessions[1]])
    assert table.last_written == 0
    for s in sessions:
        s.close()


def test_a_row_current_with_its_session_is_skipped_until_the_session_changes_or_closes():
    # update() skips a row whose session published nothing since the row was written (one
    # load of its table stamp); a closed handle, a grown sequence or another session in the
    # row still takes the checked path.
    c = make()
    a, b = open_one(c, "a", TPP), open_one(c, "b", 2 * TPP)
    table = c.decode_table(2, 8)
    table.update([a, b])
    for _ in range(3):
        table.update([a, b])
        assert table.last_written == 0
    assert a.step(TPP + 1) == BackingOutcome.EXTENDED  # a new publish: the row is rewritten
    table.update([a, b])
    assert table.last_written == 1 and np.array_equal(table.table, c.block_table([a, b], 8))
    before = table.table.copy()
    b.close()
    with pytest.raises(ClosedError, match="row 1"):
        table.update([a, b])
    assert np.array_equal(table.table, before)
    # A new session in the row, even one made where the old one lived, is never taken as current.
    del b
    gc.collect()
    fresh = open_one(c, "fresh", 3 * TPP)
    table.update([a, fresh])
    assert np.array_equal(table.table, c.block_table([a, fresh], 8))
    a.close()
    fresh.close()


def test_step_steps_each_row_then_writes_its_new_ids():
    c = make()
    sessions = [open_one(c, f"r{i}", TPP) for i in range(3)]
    table = c.decode_table(3, 4)
    outcomes = table.step(sessions, np.array([TPP, TPP + 1, 2 * TPP + 1], dtype=np.int64))
    assert outcomes.dtype == np.uint8
    assert outcomes.tolist() == [BackingOutcome.CURRENT.value, BackingOutcome.EXTENDED.value,
                                 BackingOutcome.EXTENDED.value]
    assert np.array_equal(table.table, c.block_table(sessions, 4))
    assert [s.retired_frames for s in sessions] == [1, 1, 1]
    # A step that raises names the row; the rows before it stepped and the table shows what
    # they hold now (an engine that goes on must not attend over fewer blocks than a row holds).
    frame = sessions[1].acquire_frame()
    before = table.table.copy()
    with pytest.raises(SessionStateError, match=r"row 1; the rows before it stepped and the table shows them\)$"):
        table.step(sessions, [2 * TPP + 1, TPP + 2, 2 * TPP + 2])
    assert sessions[0].retired_frames == 2 and sessions[0].backing.pages == 3
    assert np.array_equal(table.table[0], c.block_table(sessions[:1], 4)[0])  # its new block shown
    assert np.array_equal(table.table[1:], before[1:]) and not np.array_equal(table.table[0], before[0])
    frame.commit()
    # A closed handle (a preempted victim left in the batch) is refused before any row steps.
    sessions[1].close()
    before = table.table.copy()
    with pytest.raises(ClosedError, match=r"row 1: step: the sequence session handle is closed "
                                          r"\(nothing was stepped or written\)$"):
        table.step(sessions, [2 * TPP + 2, TPP + 2, 2 * TPP + 2])
    assert sessions[0].retired_frames == 2 and np.array_equal(table.table, before)
    # So is a token count above a row's fit.
    with pytest.raises(CapacityError, match=r"row 2: step: the target \(1000 tokens, \d+ pages\) is above the "
                                            r"request's fit limit .* \(nothing was stepped or written\)$"):
        table.step([sessions[0], sessions[2], sessions[0]], [2 * TPP + 2, 2 * TPP + 2, 1000])
    assert sessions[0].retired_frames == 2 and np.array_equal(table.table, before)
    with pytest.raises(InvalidArgumentError, match="tokens"):
        table.step([sessions[0]], [1, 2])
    with pytest.raises(LifecoreTypeError, match="sessions"):
        table.step([sessions[0], "s"], [1, 2])  # a row holds a session or None
    sessions[0].close()
    sessions[2].close()


def test_every_error_writes_nothing():
    c = AdmissionCoordinator(domains={"k": 64 * PAGE, "v": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=8)
    other = make()
    a = open_one(c, "a", TPP)
    wide = open_one(c, "wide", 5 * TPP)
    only_v = open_one(c, "v", TPP, domains=["v"])
    foreign = open_one(other, "f")
    closed = open_one(c, "closed")
    closed.close()
    table = c.decode_table(3, 4, pad=7, domain="k")
    assert table.domain == "k" and (table.rows, table.width, table.pad) == (3, 4, 7)
    table.update([a])
    before = table.table.copy()
    cases = [
        (lambda: table.update([None, wide]), InvalidArgumentError, "row 1: 5 blocks do not fit in width 4"),
        (lambda: table.update([a, foreign]), StaleAuthorityError, "row 1.*another coordinator"),
        (lambda: table.update([a, None, only_v]), InvalidArgumentError, "row 2.*domain 'k'"),
        (lambda: table.update([None, closed]), ClosedError,
         r"^DecodeTable.update: row 1: the sequence session handle is closed \(nothing was written\)$"),
        (lambda: table.update([a, a, a, a]), InvalidArgumentError, "4 sessions for a table of 3 rows"),
        (lambda: table.update([a, object()]), LifecoreTypeError, r"sessions\[1\]"),
        (lambda: table.update("abc"), LifecoreTypeError, "sessions"),
        (lambda: table.assign(3, a), InvalidArgumentError, "out of range"),
        (lambda: table.assign(1, wide), InvalidArgumentError, "width"),
        (lambda: table.assign(1, None), LifecoreTypeError, "session"),
        (lambda: table.clear(3), InvalidArgumentError, "out of range"),
        # Before: "must be between 0 and 2**32 - 1", whatever the table's rows.
        (lambda: table.clear(-1), InvalidArgumentError, r"^DecodeTable.clear: row -1 is out of range for 3 rows$"),
        (lambda: table.assign(-1, a), InvalidArgumentError, r"^DecodeTable.assign: row -1 is out of range for 3 rows$"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
        assert np.array_equal(table.table, before)
    for s in (a, wide, only_v, foreign):
        s.close()


def test_device_memory_as_tokens_is_refused_before_it_is_read():
    """A lifecore Buffer (or a view of one) is device memory, never host token counts: refused
    before anything reads it, so a stream's pending frees stay pending (no export collected
    them) and no row stepped."""
    with lifecore.Device(EMULATED) as device:
        c = make()
        sessions = [open_one(c, f"r{i}", TPP) for i in range(2)]
        table = c.decode_table(2, 4)
        stream = device.stream()
        tokens = stream.alloc(16)
        stream.write(tokens, np.array([TPP, TPP], dtype=np.int64))
        pending = stream.alloc(64)
        del pending  # its slice goes back at the stream's next collection
        stats = device.memory_stats()
        for given in (tokens, tokens.view("int64", (2,))):
            for call in (lambda: table.step(sessions, given), lambda: lifecore.sequence.step_all(sessions, given)):
                with pytest.raises(LifecoreTypeError, match="tokens.*device memory"):
                    call()
        assert device.memory_stats() == stats
        assert [s.retired_frames for s in sessions] == [0, 0]
        for s in sessions:
            s.close()


def test_a_bad_out_or_size_is_refused_at_creation():
    c = make()
    readonly = np.zeros((2, 4), dtype=np.int32)
    readonly.flags.writeable = False
    cases = [
        (lambda: c.decode_table(2, 4, np.zeros((2, 4), dtype=np.int64)), InvalidArgumentError, "int32"),
        (lambda: c.decode_table(2, 4, np.zeros((4, 2), dtype=np.int32)), InvalidArgumentError, "shape"),
        (lambda: c.decode_table(2, 4, np.zeros((2, 8), dtype=np.int32)[:, ::2]), InvalidArgumentError, "contiguous"),
        (lambda: c.decode_table(2, 4, readonly), InvalidArgumentError, "read-only"),
        (lambda: c.decode_table(2, 4, object()), LifecoreTypeError, "out"),
        (lambda: c.decode_table(2, 4, domain="nope"), InvalidArgumentError, "unknown"),
        (lambda: c.decode_table(-1, 4), InvalidArgumentError, "rows"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    assert not readonly.any()


def test_a_live_tables_memory_is_refused_to_any_other_table_writer():
    """Two tables over one array were accepted, and each wrote only what changed since its
    own last call: a row came to show one sequence's first ids and another's last."""
    c = make()
    a, b = open_one(c, "a", 6 * TPP), open_one(c, "b", 3 * TPP)
    out = np.zeros((2, 8), dtype=np.int32)
    first = c.decode_table(2, 8, out, pad=-1)
    own = c.decode_table(2, 8, pad=-1)
    for taken in (out, out[1:], own.table):
        with pytest.raises(InvalidArgumentError, match=r"^decode_table: argument 'out' is the memory of a live "
                                                       r"DecodeTable"):
            c.decode_table(taken.shape[0], 8, taken, pad=-1)
        with pytest.raises(InvalidArgumentError, match=r"^block_table: argument 'out' is the memory of a live "
                                                       r"DecodeTable.*\(nothing was written\)$"):
            c.block_table([a, b][:taken.shape[0]], 8, out=taken)
    first.update([a, b])
    assert (out == c.block_table([a, b], 8, pad=-1)).all()
    # Memory beside it is free, and once the table goes, so is its own.
    beside = np.zeros((3, 8), dtype=np.int32)
    c.block_table([a, b, a], 8, out=beside)
    del first
    gc.collect()
    second = c.decode_table(2, 8, out, pad=-1)
    second.update([b])
    assert (out[0] == c.block_table([b], 8, pad=-1)[0]).all()
    with lifecore.Device(EMULATED) as dev:
        d = AdmissionCoordinator(dev, domains={"kv": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                                 max_active_sequences=4)
        s = open_one(d, "s")
        buffer = dev.stream().alloc(2 * 8 * 4)
        on_buffer = d.decode_table(2, 8, buffer)
        with pytest.raises(InvalidArgumentError, match="is the memory of a live DecodeTable"):
            d.decode_table(2, 8, buffer)
        with pytest.raises(InvalidArgumentError, match="is the memory of a live DecodeTable"):
            d.block_table([s], 8, out=buffer)
        del on_buffer
        gc.collect()
        assert d.block_table([s], 8, out=buffer) is buffer
        # A freed Buffer claims nothing: its address may come back to another.
        kept = d.decode_table(2, 8, buffer)
        buffer.free()
        again = dev.stream().alloc(2 * 8 * 4)
        assert d.block_table([s], 8, out=again) is again
        assert kept.rows == 2


@needs_writable_views
def test_a_claim_follows_the_memory_a_host_view_of_a_buffer_and_a_moved_array():
    """The claim of a table on a Buffer missed a NumPy view of that Buffer (the mock's memory is
    host memory: the same bytes), so block_table wrote over the table through the view; and
    the claim of a table on an array stayed on memory the array let go when it was resized,
    refusing whatever came to live there."""
    with lifecore.Device(EMULATED) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                                 max_active_sequences=4)
        a, b = open_one(c, "a", 2 * TPP), open_one(c, "b", 3 * TPP)
        buffer = dev.stream().alloc(2 * 8 * 4)
        table = c.decode_table(2, 8, buffer, pad=-1)
        table.update([a, b])
        view = np.from_dlpack(buffer).view(np.int32).reshape(2, 8)
        with pytest.raises(InvalidArgumentError, match="is the memory of a live DecodeTable"):
            c.block_table([b, a], 8, out=view, pad=-1)
        with pytest.raises(InvalidArgumentError, match="is the memory of a live DecodeTable"):
            c.decode_table(2, 8, view, pad=-1)
        del table
        gc.collect()
        on_view = c.decode_table(2, 8, view, pad=-1)  # and the other way round
        with pytest.raises(InvalidArgumentError, match="is the memory of a live DecodeTable"):
            c.block_table([a], 8, out=buffer)
        del on_view, view
        gc.collect()
    c = make()
    s = open_one(c, "s")
    array = np.zeros((64, 64), dtype=np.int32)
    moved = c.decode_table(64, 64, array)
    array.resize((256, 64), refcheck=False)  # the table's memory goes back to the allocator
    fresh = [np.zeros((64, 64), dtype=np.int32) for _ in range(8)]  # may lie where it was
    for out in fresh:
        assert c.block_table([s] * 64, 64, out=out) is out
    assert c.decode_table(64, 64).rows == 64
    with pytest.raises(InvalidArgumentError, match="nothing was written"):  # its own next call says why
        moved.update([s])


def test_assign_and_clear_change_one_row():
    c = make()
    a, b = open_one(c, "a", 2 * TPP), open_one(c, "b", TPP)
    table = c.decode_table(2, 3, pad=-1)
    table.assign(1, a)
    assert table.table.tolist() == [[-1, -1, -1], [0, 1, -1]] and table.last_written == 2
    table.assign(0, b)
    assert table.table.tolist() == [[2, -1, -1], [0, 1, -1]]
    table.clear(1)
    assert table.table.tolist() == [[2, -1, -1], [-1, -1, -1]] and table.last_written == 2
    table.clear()
    assert (table.table == -1).all()
    a.close()
    b.close()


def test_the_table_fills_a_given_array_a_torch_tensor_and_a_buffer():
    c = make()
    sessions = [open_one(c, f"r{i}", (i + 1) * TPP) for i in range(2)]
    out = np.full((2, 3), 9, dtype=np.int32)
    table = c.decode_table(2, 3, out, pad=-1)
    assert table.table is out and (out == -1).all()  # padded at creation
    table.update(sessions)
    assert out.tolist() == [[0, -1, -1], [1, 2, -1]]
    torch = pytest.importorskip("torch", reason="torch is not installed")
    tensor = torch.zeros((2, 3), dtype=torch.int32)
    t2 = c.decode_table(2, 3, tensor)
    t2.update(sessions)
    assert tensor.tolist() == [[0, 0, 0], [1, 2, 0]]
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buffer = s.alloc(2 * 3 * 4)
        t3 = c.decode_table(2, 3, buffer, pad=-2)
        assert t3.table is buffer
        t3.update(sessions)  # written on the buffer's stream, which reads it
        got = np.frombuffer(s.read(buffer), dtype=np.int32).reshape(2, 3)
        assert got.tolist() == [[0, -2, -2], [1, 2, -2]]
        sessions[0].step(TPP + 1)
        t3.update(sessions)
        got = np.frombuffer(s.read(buffer), dtype=np.int32).reshape(2, 3)
        assert got.tolist() == [[0, 3, -2], [1, 2, -2]]
        with pytest.raises(InvalidArgumentError, match="smaller"):
            c.decode_table(2, 4, buffer)
        del t3
    for s in sessions:
        s.close()


def test_the_table_holds_no_capacity():
    c = make(slots=2)
    s = open_one(c, "a", 2 * TPP)
    table = c.decode_table(1, 4)
    table.update([s])
    s.close()
    del s
    gc.collect()
    assert c.holders() == [] and c.capacity().active_sequences == 0
    # The row still shows the old ids until it is updated: an update without it pads it.
    table.update([])
    assert (table.table == 0).all() and table.last_written == 2


def test_a_table_kept_after_its_coordinator_holds_neither_it_nor_its_arena():
    """A table kept in a variable held its coordinator: once the engine dropped the coordinator
    and its sequences, the arena stayed allocated and the coordinator's waiters never woke
    (a wait(None) blocked for ever). The table holds neither; a call that reads a session then
    says the coordinator is gone."""
    import weakref
    with lifecore.Device(EMULATED) as dev:
        c = AdmissionCoordinator(dev, domains={"kv": 4 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                                 max_active_sequences=2)
        s = open_one(c, "a", 4 * TPP, 4 * TPP)
        table = c.decode_table(2, 4)
        table.update([s])
        deferred = c.admit("b", TPP, TPP)
        registration = c.register_waiter(deferred)
        before = table.table.copy()
        gone = weakref.ref(c)
        s.close()
        del c, s, deferred
        gc.collect()
        assert gone() is None
        assert dev.memory_stats()["arena_bytes"] == 0
        assert registration.closed
        with pytest.raises(ClosedError):
            registration.wait(None)
        # What needs no session still works; a call that reads one cannot.
        assert (table.table == before).all()
        table.update([])
        assert (table.table == 0).all()
        other = make()
        foreign = open_one(other, "x")
        with pytest.raises(ClosedError, match="the table's coordinator is gone"):
            table.update([foreign])
        with pytest.raises(ClosedError, match="the table's coordinator is gone"):
            table.assign(0, foreign)
        with pytest.raises(ClosedError, match="the table's coordinator is gone"):
            table.step([foreign], [TPP])
        assert foreign.step(TPP + 1) == BackingOutcome.EXTENDED  # refused before it stepped
        assert (table.table == 0).all()


@pytest.mark.parametrize("fail", ["update", "step"])
def test_a_failed_call_keeps_no_capacity(fail):
    """The rows a failed call had read reference their sequences only for the call: once every
    session closed, nothing holds their pages or slots (and their request ids may come back)."""
    c = make(slots=4)
    a, b = open_one(c, "a"), open_one(c, "b")
    table = c.decode_table(2, 4)
    table.update([a, b])
    a.step(TPP + 1)  # row 0 must be rewritten: its source is pending when row 1 fails
    if fail == "update":
        b.close()
        with pytest.raises(ClosedError, match="row 1"):
            table.update([a, b])
    else:
        with pytest.raises(InvalidArgumentError, match="row 1"):
            table.step([a, b], [TPP + 1, -1])
    a.close()
    b.close()
    del a, b
    gc.collect()
    assert c.holders() == [] and c.capacity().active_sequences == 0
    assert isinstance(c.admit("a", TPP, TPP), Admitted)


def test_step_checks_every_row_before_any_steps():
    """A row that could not be written once stepped (too wide, another coordinator's, not in
    the domain) is refused before any row steps, as a bad token count is: nothing changes, and
    a caller that retries steps no row twice. (Before, the rows above it had stepped: the width
    and the domain are known from the tokens and the sequence before anything steps.)"""
    c = AdmissionCoordinator(domains={"k": 64 * PAGE, "v": 64 * PAGE}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=8)
    other = make()
    a, b = open_one(c, "a"), open_one(c, "b")
    only_v, foreign = open_one(c, "v", domains=["v"]), open_one(other, "f")
    table = c.decode_table(2, 1, domain="k")
    # What the caller got wrong is refused before any row steps.
    for sessions, tokens, error, match in [([a, b], [TPP, TPP + 1], InvalidArgumentError,
                                            "row 1: 2 blocks do not fit in width 1"),
                                           ([a, only_v], [TPP, TPP], InvalidArgumentError, "row 1.*domain 'k'"),
                                           ([a, foreign], [TPP, TPP], StaleAuthorityError, "row 1.*another coordinator"),
                                           ([a, b], [TPP, 0], InvalidArgumentError, "row 1: step: tokens must be "
                                                                                    "positive, got 0"),
                                           ([a, b], [TPP, -1], InvalidArgumentError, "row 1: .* got -1")]:
        before = [s.retired_frames for s in sessions]
        pages = [s.backing.pages for s in sessions]
        with pytest.raises(error, match=match + r".*\(nothing was stepped or written\)$"):
            table.step(sessions, tokens)
        assert [s.retired_frames for s in sessions] == before and (table.table == 0).all()
        assert [s.backing.pages for s in sessions] == pages
    for tokens in ([TPP, 0], [TPP, -1]):
        before = [a.retired_frames, b.retired_frames]
        with pytest.raises(InvalidArgumentError, match=r"^step: tokens must be positive, got -?\d \(step_all: row 1; "
                                                       r"no row stepped\)$"):
            lifecore.sequence.step_all([a, b], tokens)
        assert [a.retired_frames, b.retired_frames] == before
    # Rows the table already shows as they are are checked without their locks: a step past
    # the width is still refused before any row steps.
    assert table.step([a, b], [TPP, TPP]).tolist() == [0, 0]
    before = [a.retired_frames, b.retired_frames]
    with pytest.raises(InvalidArgumentError, match=r"row 1: 2 blocks do not fit in width 1 \(nothing was stepped"):
        table.step([a, b], [TPP, TPP + 1])
    assert [a.retired_frames, b.retired_frames] == before and b.backing.pages == 1
    for s in (a, b, only_v, foreign):
        s.close()


def test_a_row_shown_before_is_checked_again_once_its_session_published():
    """A row the table showed is checked without its lock only while its session published
    nothing since: pages reserved ahead of the tokens since, past the width, are refused
    before any row steps, as is a row stepped to exactly its fit past the width."""
    c = make()
    a, b = open_one(c, "a"), open_one(c, "b")
    table = c.decode_table(2, 2)
    assert table.step([a, b], [TPP, TPP]).tolist() == [0, 0]  # both shown now
    assert b.try_ensure_backing_covers(TPP, 3).outcome == BackingOutcome.EXTENDED  # 3 pages, 16 tokens
    before = [a.retired_frames, b.retired_frames]
    with pytest.raises(InvalidArgumentError, match=r"row 1: 3 blocks do not fit in width 2 \(nothing was stepped"):
        table.step([a, b], [TPP + 1, TPP + 1])
    assert [a.retired_frames, b.retired_frames] == before and a.backing.pages == 1
    fits = open_one(c, "fits", TPP, 3 * TPP)  # its fit is three pages: stepped to it, past a width of 2
    other = c.decode_table(2, 2)
    with pytest.raises(InvalidArgumentError, match=r"row 1: 3 blocks do not fit in width 2 \(nothing was stepped"):
        other.step([a, fits], [TPP + 1, 3 * TPP])
    assert a.retired_frames == before[0] and fits.backing.pages == 1
    for s in (a, b, fits):
        s.close()


def test_a_buffer_table_is_right_again_after_a_failed_copy():
    """A host-to-device copy that failed on the device is not known to have landed: the next
    call copies the whole table again, whether or not an id changed."""
    c = make()
    a, b = open_one(c, "a"), open_one(c, "b", 2 * TPP)
    with lifecore.Device(EMULATED) as dev:
        stream = dev.stream()
        buffer = stream.alloc(2 * 4 * 4)
        table = c.decode_table(2, 4, buffer, pad=-1)
        stream.sync()
        dev.inject_fault("memcpy_htod_async", 1, times=1)
        table.update([b, a])
        with pytest.raises(lifecore.DriverError, match="injected"):
            stream.sync()
        table.update([b, a])
        assert table.last_written == 0  # nothing changed in the table itself
        got = np.frombuffer(stream.read(buffer), dtype=np.int32).reshape(2, 4)
        assert np.array_equal(got, c.block_table([b, a], 4, pad=-1))
    a.close()
    b.close()


def test_a_torch_table_whose_memory_moved_is_refused():
    """A DLPack table can be given new memory behind its export (resize_, set_): the table
    refuses to write into memory it no longer knows, and writes nothing."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make()
    a = open_one(c, "a")
    tensor = torch.full((2, 4), 5, dtype=torch.int32)
    table = c.decode_table(2, 4, tensor)
    table.update([a])
    assert tensor.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0]]
    tensor.set_(torch.full((2, 4), 5, dtype=torch.int32))  # same shape, new memory
    for call in (lambda: table.update([a]), lambda: table.step([a], [TPP]), lambda: table.assign(0, a),
                 lambda: table.clear()):
        with pytest.raises(InvalidArgumentError, match="memory moved"):
            call()
    assert (tensor == 5).all()
    tensor.resize_(4096, 4096)
    with pytest.raises(InvalidArgumentError, match="shape"):
        table.update([a])
    a.close()


def test_a_torch_table_whose_layout_or_dtype_changed_in_place_is_refused():
    """Each call compared only data_ptr and shape: after t.t_() (a square table, the same shape
    transposed) the table wrote row-major ids into memory the tensor reads by columns (row 0
    then showed another sequence's block), and after t.data = a float32 view it wrote int bits
    into floats. A negative view (reads its memory negated) is refused when the table is made."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make()
    rows = [open_one(c, name, prompt=3 * TPP, fit=8 * TPP) for name in "abc"]
    tensor = torch.full((3, 3), 5, dtype=torch.int32)
    table = c.decode_table(3, 3, tensor, pad=-1)
    table.update(rows)
    assert tensor.tolist() == c.block_table(rows, 3, pad=-1).tolist()
    tensor.t_()
    before = tensor.clone()
    for call in (lambda: table.update(rows), lambda: table.step(rows, [3 * TPP] * 3), lambda: table.assign(0, rows[0]),
                 lambda: table.clear()):
        with pytest.raises(InvalidArgumentError, match="dtype, strides or negative bit changed since decode_table"):
            call()
    assert torch.equal(tensor, before) and table.last_written == 0
    floats = torch.full((3, 3), 5, dtype=torch.int32)
    other = c.decode_table(3, 3, floats, pad=-1)
    floats.data = floats.view(torch.float32)
    with pytest.raises(InvalidArgumentError, match="dtype, strides or negative bit changed"):
        other.update(rows)
    assert (floats.view(torch.int32) == -1).all()  # the pad the table wrote when made, nothing since
    with pytest.raises(InvalidArgumentError, match="negative bit set"):
        c.decode_table(3, 3, torch.zeros((3, 3), dtype=torch.int32)._neg_view())
    negated = torch.full((3, 3), 5, dtype=torch.int32)
    third = c.decode_table(3, 3, negated, pad=-1)
    negated.data = negated._neg_view()  # the same memory, dtype and strides, read negated
    with pytest.raises(InvalidArgumentError, match="negative bit changed"):
        third.update(rows)
    assert (negated == 1).all()  # the pad (-1) written when the table was made, read negated
    for s in rows:
        s.close()


def test_a_refused_call_writes_nothing_and_says_so():
    """last_written kept the previous call's count after a refused update, step, assign or
    clear; a refused step still counted as a write of a torch table (its version moved, which
    can make autograd refuse a backward through it)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make()
    a, b = open_one(c, "a", fit=2 * TPP), open_one(c, "b", fit=2 * TPP)
    tensor = torch.zeros((2, 3), dtype=torch.int32)
    table = c.decode_table(2, 3, tensor, pad=-1)
    refusals = (
        (CapacityError, lambda: table.step([a, b], [1, 99])),  # above b's fit: refused before any row steps
        (InvalidArgumentError, lambda: table.update([a, b, a])),  # more rows than the table
        (InvalidArgumentError, lambda: table.assign(7, a)),
        (InvalidArgumentError, lambda: table.clear(7)),
        (LifecoreTypeError, lambda: table.update(5)),
    )
    for error, call in refusals:
        table.update([a, b])
        table.clear()
        assert table.last_written != 0
        version = tensor._version
        with pytest.raises(error):
            call()
        assert table.last_written == 0, call
        assert tensor._version == version, call
    a.close()
    b.close()


def test_a_numpy_table_whose_memory_moved_is_refused():
    """A buffer-protocol table can be given new memory too (ndarray.resize with refcheck=False
    reallocates): the table refuses, and writes nothing into the memory it no longer knows."""
    c = make()
    a = open_one(c, "a")
    array = np.full((2, 4), 5, dtype=np.int32)
    table = c.decode_table(2, 4, array)
    table.update([a])
    first = array.ctypes.data
    array.resize((4, 4), refcheck=False)  # new memory, the old freed
    array[:] = 5
    with pytest.raises(InvalidArgumentError, match="shape"):
        table.update([a])
    array.resize((2, 4), refcheck=False)  # the table's shape again, in memory the allocator chose
    array[:] = 5
    if array.ctypes.data != first:  # moved (the usual case): refused, nothing written
        for call in (lambda: table.update([a]), lambda: table.step([a], [TPP]), lambda: table.clear()):
            with pytest.raises(InvalidArgumentError, match="memory moved"):
                call()
        assert (array == 5).all()
    else:  # the allocator gave the same memory back: the table's own, written as ever (an update
        # writes only what changed, here nothing; a clear writes pad over a's ids)
        table.update([a])
        table.clear()
        assert array[0, 0] != 5
    a.close()


def test_a_buffer_table_copies_only_what_changed_or_what_may_have_failed():
    """An update that changed nothing sends nothing to the device (a decode step pays no copy
    for rows that stayed); one that follows an error on the stream sends the table again."""
    c = make()
    a = open_one(c, "a")
    with lifecore.Device(EMULATED) as dev:
        stream = dev.stream()
        table = c.decode_table(1, 4, stream.alloc(16), pad=-1)
        table.update([a])
        stream.sync()
        dev.inject_fault("memcpy_htod_async", 1, times=1)  # any copy now fails, and says so at sync
        table.update([a])
        assert table.last_written == 0
        stream.sync()  # no copy was made: nothing failed
        a.step(TPP + 1)
        table.update([a])  # a new id: copied, and the copy fails
        with pytest.raises(lifecore.DriverError, match="injected"):
            stream.sync()
        table.update([a])  # nothing changed in the table, but the stream failed since: copied again
        got = np.frombuffer(stream.read(table.table), dtype=np.int32).reshape(1, 4)
        assert np.array_equal(got, c.block_table([a], 4, pad=-1))
    a.close()


def test_clear_converts_its_row_before_it_checks_the_table():
    """An index's __index__ runs Python code, which may move a torch table's memory: the row is
    read first, so the table is checked after it and nothing is written into freed memory."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make()
    a = open_one(c, "a")
    tensor = torch.full((64, 64), 5, dtype=torch.int32)
    table = c.decode_table(64, 64, tensor, pad=-1)
    table.update([a])

    class Row:
        def __index__(self) -> int:
            tensor.set_(torch.full((64, 64), 5, dtype=torch.int32))  # new memory, the old freed
            return 0

    with pytest.raises(InvalidArgumentError, match="memory moved"):
        table.clear(Row())
    assert (tensor == 5).all()
    a.close()


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_table_on_a_buffer_whose_stream_records_is_refused_and_nothing_changes(graphs):
    """A table is the host's state now: recorded into a graph, every replay would write the ids of
    the capture's moment again, whatever the sequences hold by then, and attention would read
    stale pages. While the Buffer's stream records, block_table, decode_table and every
    DecodeTable call refuse with CaptureStateError before anything changes; outside the
    capture the same calls work."""
    c = make()
    a = open_one(c, "a")
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        stream = dev.stream()
        buffer = stream.alloc(4 * 4)
        table = c.decode_table(1, 4, buffer, pad=-1)
        table.update([a])
        stream.graph_prepare()
        stream.begin_capture()
        before = (a.backing.tokens, a.backing.generation, a.next_frame_id)
        for call in (lambda: c.block_table([a], 4, buffer),
                     lambda: c.decode_table(1, 4, buffer),
                     lambda: table.update([a]),
                     lambda: table.step([a], np.array([TPP + 1])),
                     lambda: table.assign(0, a),
                     lambda: table.clear()):
            with pytest.raises(lifecore.CaptureStateError, match="recording a capture.*Nothing was changed"):
                call()
        assert (a.backing.tokens, a.backing.generation, a.next_frame_id) == before  # not stepped
        stream.end_capture().destroy()
        got = np.frombuffer(stream.read(buffer), dtype=np.int32).reshape(1, 4)
        assert got.tolist() == [[0, -1, -1, -1]]  # what the table held before the capture
        table.step([a], np.array([TPP + 1]))  # outside the capture: it works
        assert np.frombuffer(stream.read(buffer), dtype=np.int32).tolist() == [0, 1, -1, -1]
        del table  # a live table's memory is its own
        assert c.block_table([a], 4, buffer) is buffer
    a.close()


def test_a_table_on_a_freed_buffer_is_refused_before_anything_changes():
    """A DecodeTable holds its Buffer, but ``buffer.free()`` still frees it. Every later call then
    refuses with ClosedError before it changes anything: ``step`` steps no session (it stepped
    the whole batch, then failed the copy with a message that named neither the table nor the
    stepped rows)."""
    c = make()
    a = open_one(c, "a")
    with lifecore.Device(EMULATED) as dev:
        buffer = dev.stream().alloc(4 * 4)
        table = c.decode_table(1, 4, buffer, pad=-1)
        table.update([a])
        buffer.free()
        before = (a.backing.tokens, a.backing.generation, a.next_frame_id)
        for name, call in (("update", lambda: table.update([a])),
                           ("step", lambda: table.step([a], np.array([TPP + 1]))),
                           ("assign", lambda: table.assign(0, a)),
                           ("clear", lambda: table.clear())):
            with pytest.raises(ClosedError, match=f"DecodeTable.{name}: .*freed.*nothing was changed"):
                call()
        assert (a.backing.tokens, a.backing.generation, a.next_frame_id) == before  # not stepped
        assert table.table is buffer
    a.close()


@pytest.mark.time_limit(60)
@pytest.mark.parametrize("writer", ["block_table", "decode_table"])
def test_a_capture_begun_by_another_thread_during_a_table_call_never_records_its_copy(writer):
    """A table call checks that the Buffer's stream does not record, builds the table, then copies
    it. Another thread may begin a capture on the stream in between (its begin_capture runs
    without the GIL): the copy must then be refused, never recorded into that capture, where
    every replay would write these ids again. The capturing thread records nothing of its own,
    so a sealed graph with a node holds a table's copy. A bounded race: without the check and
    the copy in one hold of the stream it shows within the time given (a graph with a node);
    with it, no graph ever has one."""
    import threading
    import time

    rows, width = 32, 256
    c = make(pages=rows * 8, slots=rows)
    sessions = [open_one(c, f"s{i}", prompt=8 * TPP, fit=8 * TPP) for i in range(rows)]
    recorded: list[int] = []
    with lifecore.Device(EMULATED, capture_mode="relaxed") as dev:
        stream = dev.stream()
        buffer = stream.alloc(4 * rows * width)
        table = c.decode_table(rows, width, buffer, pad=-1) if writer != "block_table" else None
        deadline = time.monotonic() + 4.0
        start = threading.Barrier(2, timeout=30)

        def capture() -> None:
            start.wait()
            while time.monotonic() < deadline and not recorded:
                try:
                    stream.graph_prepare()
                    stream.begin_capture()
                    graph = stream.end_capture()
                except lifecore.LifecoreError:
                    if stream.capture_state.variant != lifecore.CaptureVariant.NO_CAPTURE:
                        stream.abort_capture()  # an end that failed leaves the window: the race goes on
                    continue
                if graph.node_count:
                    recorded.append(graph.node_count)
                graph.destroy()

        capturing = threading.Thread(target=capture)
        capturing.start()
        start.wait()
        while time.monotonic() < deadline and not recorded:
            try:
                if writer == "block_table":
                    c.block_table(sessions, width, buffer, pad=-1)
                else:
                    assert table is not None
                    table.update(sessions)
                    table.clear()
            except lifecore.CaptureStateError:
                pass  # refused: the capture began first (or during the call)
        capturing.join(timeout=30)
        assert not capturing.is_alive()
        assert not recorded, f"a table's copy was recorded into another thread's capture ({recorded[0]} node)"
        stream.sync()
    for s in sessions:
        s.close()


def test_a_table_too_large_to_allocate_is_an_overflow_naming_the_call():
    # rows and width are each within their bounds (2**30), their product is not: once a plain
    # MemoryError from the allocation.
    c = make()
    a = open_one(c, "a")
    with pytest.raises(LifecoreOverflowError, match="^decode_table: a table of 1152921504606846976 int32 entries .* "
                                                    "more than the host's memory"):
        c.decode_table(2**30, 2**30)
    with pytest.raises(LifecoreOverflowError, match="^block_table: a table of .* int32 entries"):
        c.block_table([a] * 4096, 2**30)
    # No entries, and a record per row: 2**30 rows of width 0 made ~100 GiB of records (a
    # MemoryError, or memory taken for nothing).
    import os
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if host < 2**30 * 64:  # records are well over 64 bytes a row
        with pytest.raises(LifecoreOverflowError, match=r"^decode_table: a table of 1073741824 rows keeps \d+ bytes of "
                                                        r"row records beside its entries, more than the host's memory"):
            c.decode_table(2**30, 0)
    assert c.decode_table(4, 0).table.shape == (4, 0)
    with pytest.raises(LifecoreTypeError, match=r"argument 'tokens\[1\]'"):  # once 'tokens[i]'
        lifecore.sequence.step_all([a, a], [TPP, "x"])
    a.close()



def test_a_step_past_the_fit_names_the_fit_not_the_width():
    """A row asked for more tokens than its request's fit is refused for that (CapacityError, as
    step() refuses it), not because its blocks would not fit the table; row 0 says no row stepped."""
    c = make()
    a = open_one(c, "a")
    table = c.decode_table(1, 1)
    before = a.retired_frames
    with pytest.raises(CapacityError, match=r"^DecodeTable.step: row 0: step: the target .* is above the request's "
                                            r"fit limit .* \(nothing was stepped or written\)$"):
        table.step([a], [10**6])
    assert a.retired_frames == before and (table.table == 0).all()
    with pytest.raises(InvalidArgumentError, match=r"row 0: 2 blocks do not fit in width 1 \(nothing was stepped"):
        table.step([a], [TPP + 1])
    assert a.retired_frames == before
    a.close()


def test_a_buffer_table_shows_the_rows_that_stepped_before_a_refusal():
    """A step refused at a row after the rows before it stepped: the Buffer gets their new ids
    too (a decode kernel reading it must not attend over fewer blocks than a row holds)."""
    c = make()
    a, b = open_one(c, "a"), open_one(c, "b")
    with lifecore.Device(EMULATED) as dev:
        stream = dev.stream()
        buffer = stream.alloc(2 * 4 * 4)
        table = c.decode_table(2, 4, buffer, pad=-1)
        table.update([a, b])
        frame = b.acquire_frame()
        with pytest.raises(SessionStateError, match="row 1; the rows before it stepped and the table shows them"):
            table.step([a, b], [2 * TPP + 1, TPP + 1])
        assert a.backing.pages == 3
        got = np.frombuffer(stream.read(buffer), dtype=np.int32).reshape(2, 4)
        assert np.array_equal(got[0], c.block_table([a], 4, pad=-1)[0])
        frame.commit()
    a.close()
    b.close()


def test_step_reads_a_torch_tensor_of_any_integer_type_or_stride():
    """Token counts as a torch tensor of another integer type, or strided, are read as a NumPy
    array of that type is (they were refused as 'got torch.Tensor'); what is not integer is
    refused before any row steps."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    c = make()
    sessions = [open_one(c, f"r{i}", TPP) for i in range(3)]
    table = c.decode_table(3, 4)
    positions = torch.tensor([TPP + 1, TPP + 1, TPP + 2], dtype=torch.int32)
    assert lifecore.sequence.step_all(sessions, positions).tolist() == [1, 1, 1]
    strided = torch.tensor([TPP + 2, 0, TPP + 2, 0, TPP + 3, 0], dtype=torch.int64)[::2]
    assert not strided.is_contiguous()
    assert table.step(sessions, strided).tolist() == [0, 0, 0]
    assert np.array_equal(table.table, c.block_table(sessions, 4))
    retired = [s.retired_frames for s in sessions]
    for bad, error, words in ((torch.ones(3, dtype=torch.bool), LifecoreTypeError, "must hold integers"),
                              (torch.ones(3, dtype=torch.float32), LifecoreTypeError, "must hold integers"),
                              (torch.ones((3, 1), dtype=torch.int32), InvalidArgumentError, "one-dimensional"),
                              (torch.ones(3, dtype=torch.int16, device="meta"), LifecoreTypeError,
                               "NumPy could not read this torch.Tensor")):
        with pytest.raises(error, match=words):
            lifecore.sequence.step_all(sessions, bad)
        with pytest.raises(error, match=words):
            table.step(sessions, bad)
    assert [s.retired_frames for s in sessions] == retired
    for s in sessions:
        s.close()


def test_step_refuses_more_sessions_than_rows_before_any_row_steps():
    c = make()
    sessions = [open_one(c, f"r{i}", TPP) for i in range(4)]
    table = c.decode_table(3, 4, pad=7)
    table.update(sessions[:3])
    before = table.table.copy()
    with pytest.raises(InvalidArgumentError, match=r"^DecodeTable.step: 4 sessions for a table of 3 rows "
                                                   r"\(nothing was stepped or written\)$"):
        table.step(sessions, np.full(4, 2 * TPP + 1, dtype=np.int64))
    assert [s.retired_frames for s in sessions] == [0, 0, 0, 0]
    assert [s.backing.pages for s in sessions] == [1, 1, 1, 1]
    assert np.array_equal(table.table, before)
    for s in sessions:
        s.close()


def test_an_update_clears_rows_past_its_batch_however_far_down_they_were_assigned():
    """An update clears the rows past its batch up to the last one assigned (its cost follows
    the rows in use, not the table's height): a row assigned far down, then cleared, then
    another assigned above it, are each cleared by the next short update."""
    c = make()
    a, b = open_one(c, "a"), open_one(c, "b")
    table = c.decode_table(4096, 8, pad=-1)
    table.assign(4000, a)
    table.update([b])  # row 4000 is past the batch of one
    assert np.array_equal(table.table, expected(c, [b] + [None] * 4095, 4096, 8, -1))
    table.assign(3000, a)
    table.assign(100, a)
    table.clear(3000)
    table.update([b, None])
    assert np.array_equal(table.table, expected(c, [b] + [None] * 4095, 4096, 8, -1))
    table.assign(5, a)
    table.update([b, a])
    assert np.array_equal(table.table, expected(c, [b, a] + [None] * 4094, 4096, 8, -1))


@pytest.mark.parametrize("seed", range(4))
def test_a_table_on_a_buffer_copies_the_rows_that_changed_and_matches_its_host_twin(seed):
    """A Buffer gets only the rows a call changed (first to last): under random updates, steps,
    assigns, clears and closes it always holds what a host table given the same calls holds."""
    rng = random.Random(seed)
    c = make(pages=256, slots=32)
    sessions = [open_one(c, f"r{i}", rng.randint(1, 3) * TPP) for i in range(12)]
    rows, width = 40, 8
    with lifecore.Device(EMULATED) as dev:
        stream = dev.stream()
        buffer = stream.alloc(rows * width * 4)
        on_buffer = c.decode_table(rows, width, buffer, pad=-1)
        host = c.decode_table(rows, width, pad=-1)
        for _ in range(60):
            live = [s for s in sessions if s.phase == lifecore.sequence.SessionPhase.OPEN]
            pick = rng.random()
            if pick < 0.4 and live:
                batch = [rng.choice(live + [None]) for _ in range(rng.randint(0, rows))]
                for table in (on_buffer, host):
                    table.update(batch)
            elif pick < 0.6 and live:
                s = rng.choice(live)
                try:
                    s.step(min(s.backing.block_ids().size * TPP + 1, 8 * TPP))
                except lifecore.LifecoreError:
                    pass
            elif pick < 0.75 and live:
                row, s = rng.randrange(rows), rng.choice(live)
                for table in (on_buffer, host):
                    table.assign(row, s)
            elif pick < 0.9:
                row = rng.randrange(rows)
                for table in (on_buffer, host):
                    table.clear(row)
            elif live:
                rng.choice(live).close()
            got = np.frombuffer(stream.read(buffer), dtype=np.int32).reshape(rows, width)
            assert np.array_equal(got, host.table)
        del on_buffer
    for s in sessions:
        s.close()


def test_a_batch_error_carries_its_row_and_how_many_rows_stepped():
    # Before: only the message said which row stopped the batch and whether rows before it stepped.
    from lifecore.sequence import step_all

    c = make()
    a, b, d = open_one(c, "a", prompt=4, fit=64), open_one(c, "b", prompt=4, fit=64), open_one(c, "d", prompt=4, fit=64)
    frame = b.acquire_frame()  # b cannot step while its frame is live: the batch stops there
    with pytest.raises(SessionStateError) as info:
        step_all([a, b, d], [5, 5, 5])
    assert (info.value.row, info.value.rows_stepped) == (1, 1)
    with pytest.raises(CapacityError) as info:
        step_all([a, d], [6, 10**6])  # past d's fit: refused before any row steps
    assert (info.value.row, info.value.rows_stepped) == (1, 0)
    table = c.decode_table(3, 8)
    with pytest.raises(SessionStateError) as info:
        table.step([a, b, d], [7, 7, 7])
    assert (info.value.row, info.value.rows_stepped) == (1, 1)
    frame.close()


def test_preemption_takes_a_poisoned_session_as_a_victim():
    # Before: skipped ("try_abort_if_quiescent: the session is poisoned; use try_abort"), though
    # it holds capacity and can never step again.
    from lifecore.sequence import AdmissionDeferred, preempt_for

    c = make(pages=2, slots=4)
    victim = open_one(c, "v", prompt=2 * TPP, fit=2 * TPP)
    victim.acquire_frame().close()  # closed uncommitted: the session is poisoned
    assert victim.phase.name == "POISONED"
    deferred = c.admit("new", TPP, TPP)
    assert isinstance(deferred, AdmissionDeferred)
    report = preempt_for(c, deferred, [victim])
    assert report.satisfied and len(report.victims) == 1 and report.skipped == []
    assert isinstance(c.admit("new", TPP, TPP), Admitted)


def test_grow_domain_refusals_name_the_bytes():
    c = AdmissionCoordinator(domains={"kv": (2 * PAGE, 4 * PAGE)}, page_bytes=PAGE, tokens_per_page=TPP,
                             max_active_sequences=2)
    with pytest.raises(InvalidArgumentError, match=r"^grow_domain: 4096 bytes is below the total of domain 'kv' "
                                                   r"\(8192 bytes\): a domain's capacity never shrinks$"):
        c.grow_domain("kv", PAGE)
    with pytest.raises(InvalidArgumentError, match=r"^grow_domain: 20480 bytes exceeds the maximum of domain 'kv' "
                                                   r"\(16384 bytes\)$"):
        c.grow_domain("kv", 5 * PAGE)


def test_step_keeps_an_empty_slot_as_update_does():
    # Before: None, which update takes for an empty row, was a LifecoreTypeError in step.
    c = make()
    a, b = open_one(c, "a", prompt=4, fit=64), open_one(c, "b", prompt=4, fit=64)
    table = c.decode_table(3, 8, pad=-1)
    table.update([a, None, b])
    outcomes = table.step([a, None, b], [5, 0, 5])
    assert [BackingOutcome(v) for v in outcomes.tolist()][1] == BackingOutcome.CURRENT
    assert np.array_equal(table.table, expected(c, [a, None, b], 3, 8, -1))
    table.step([None, None, b], [0, 0, 6])  # a's row empties, b's stays where it was
    assert np.array_equal(table.table, expected(c, [None, None, b], 3, 8, -1))


def test_a_failed_step_clears_the_empty_rows_it_counts_as_stepped():
    c = make()
    a, b = open_one(c, "a", prompt=4, fit=64), open_one(c, "b", prompt=4, fit=64)
    table = c.decode_table(3, 8, pad=-1)
    table.update([a, None, b])
    frame = b.acquire_frame()
    with pytest.raises(SessionStateError) as info:
        table.step([None, None, b], [1, 1, 20])
    assert (info.value.row, info.value.rows_stepped) == (2, 2)
    assert (table.table[:2] == -1).all()  # before: row 0 still showed a's ids
    frame.close()
