"""Sequence-session bookkeeping: every side interleaved in one run, medians with quartiles.

1. Full lifecycles with 10,000 other sequences live: admit -> open -> a frame per page while
   extending page by page to 2,048 tokens -> complete -> release. lifecore from Python (the
   one-call ``step`` and the primitives), the same loop in C++ (called from Python once per
   batch, timed by the same harness), the pure-Python reference model, and a plain free-list
   page allocator in Python.
2. Decode steps of one long sequence (acquire frame -> extend if needed -> commit), 16 tokens
   per page: lifecore from Python (``step`` and the primitives), in C++, the reference model.
3. Host bookkeeping bytes per live sequence and per page (resident-set growth, measured in a
   fresh process), and the records' sizes.
4. Block ids against a plain Python baseline (a free list ``free = list(range(n))``, a sequence
   as a Python list of ids, admission slicing ids off the free list, a decode step appending
   an id when the last block is full and writing it into a preallocated NumPy block table,
   release extending the free list in reverse): one decode iteration of 256 sequences
   (``step()`` each, then one ``block_table(sessions, width, out=table)``; or ``step_all``; or a
   persistent ``DecodeTable`` that writes only the ids that changed; the batched sides, which
   take their tokens as a NumPy array, also against the baseline given the same array) with
   1,000 / 10,000 / 100,000 sequences live, and the per-call iteration in parts (the loop, the steps,
   the table, a fill of a table that size, and the floor of any per-call API that rebuilds
   the table: the loop with a C call per row that does nothing, plus the fill); admit + open
   of a 2,048-token prompt; release of a 128-block sequence, in bursts of 64, 512 and 4,096
   (past the 1,024 freed records of a size each thread keeps for the next admissions), each
   side releasing in the same order, in admission order and in reverse, with the driver
   calls the same lifecycle makes on the emulated device counted.

    python -m lifecore.benchmarks.sequence [--quick]
"""

from __future__ import annotations

import argparse
import gc
import os
import tracemalloc
import subprocess
import sys
from typing import Any, Callable, Optional, Sequence, cast

import numpy as np

from lifecore import _core
from lifecore.benchmarks.harness import Run, Side, format_run, interleave
from lifecore.models import sequence_session as model
from lifecore.sequence import AdmissionCoordinator, Admitted, step_all

__all__ = ["lifecycles", "decode_steps", "bookkeeping", "decode_iteration", "decode_iteration_parts", "admission",
           "release", "arena_memory", "main"]

TPP = 16
PAGE_BYTES = 4096
TARGET = 2048
LIVE = 10_000
DECODE_FIT = 1 << 30  # the decode sequence's target: far beyond any run's steps, within the int32 block ids
HUGE_DOMAIN = 1 << 50  # bytes: accounting only, so a domain this large costs nothing


def coordinator(live: int) -> AdmissionCoordinator:
    pages = (live + 64) * (TARGET // TPP)
    return AdmissionCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                max_active_sequences=live + 64)


def admitted(outcome: Any) -> model.ModelAdmitted:
    """The reference model's admission, which the benchmark's domains always fit."""
    return cast(model.ModelAdmitted, outcome)


def model_coordinator(live: int) -> model.ModelCoordinator:
    pages = (live + 64) * (TARGET // TPP)
    return model.ModelCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                  max_active_sequences=live + 64)


def fitting(c: AdmissionCoordinator) -> Callable[[str, int, int], Admitted]:
    """``c.admit`` for the requests this benchmark sizes to fit, typed as giving ``Admitted``
    (the same bound method: nothing is added to a timed call; a deferral would fail at
    ``.resources``)."""
    return cast(Callable[[str, int, int], Admitted], c.admit)


# ---------------------------------------------------------------- lifecycles
def lifecycles(*, live: int = LIVE, rounds: int = 9, warmup: int = 1, min_batch_s: float = 0.01,
               cpp_batch: int = 10) -> Run:
    c = coordinator(live)
    kept = []
    for i in range(live):
        adm = fitting(c)(f"live-{i}", TPP, TARGET)  # one live sequence per request id
        kept.append((adm, adm.resources.open_session()))
    admit = fitting(c)

    def lifecore_lifecycle(primitives: bool) -> None:
        adm = admit("r", TPP, TARGET)
        resources = adm.resources
        s = resources.open_session()
        if primitives:
            ensure, acquire = s.try_ensure_backing_covers, s.acquire_frame
            for t in range(TPP, TARGET + 1, TPP):
                ensure(t)
                acquire().commit()
        else:
            step = s.step
            for t in range(TPP, TARGET + 1, TPP):
                step(t)
        s.try_complete()
        s.close()
        resources.close()

    mc = model_coordinator(live)
    model_kept = [admitted(mc.admit(f"live-{i}", TPP, TARGET)).resources.open_session() for i in range(live)]

    def model_lifecycle() -> None:
        adm = admitted(mc.admit("r", TPP, TARGET))
        s = adm.resources.open_session()
        for t in range(TPP, TARGET + 1, TPP):
            s.try_ensure_backing_covers(t)
            s.acquire_frame().commit()
        s.try_complete()
        s.close()
        adm.resources.close()

    pages_per = TARGET // TPP
    free = list(range((live + 64) * pages_per))
    held = [[free.pop()] for _ in range(live)]
    pop, extend = free.pop, free.extend
    free_count = len(free)

    def free_list_lifecycle() -> None:
        pages = [pop()]
        append = pages.append
        for _t in range(2 * TPP, TARGET + 1, TPP):
            append(pop())
        pages.reverse()
        extend(pages)

    loop = _core._SequenceBenchLoop(live, TARGET, TPP)
    sides = {
        "Python step()": Side(lambda: lifecore_lifecycle(False), unit="lifecycle"),
        "Python primitives": Side(lambda: lifecore_lifecycle(True), unit="lifecycle"),
        "C++ step()": Side(lambda: loop.lifecycles(cpp_batch, False), per=cpp_batch, unit="lifecycle"),
        "C++ primitives": Side(lambda: loop.lifecycles(cpp_batch, True), per=cpp_batch, unit="lifecycle"),
        "reference model": Side(model_lifecycle, unit="lifecycle"),
        "Python free list": Side(free_list_lifecycle, unit="lifecycle"),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                     title=f"lifecycles: admit -> open -> frames extending page by page to {TARGET} tokens "
                           f"({pages_per} pages) -> complete -> release, {live:,} sequences live")
    run.ratio("reference model", "Python step()")
    run.ratio("reference model", "Python primitives")
    run.ratio("Python step()", "Python free list")
    run.ratio("Python step()", "C++ step()")
    # Nothing leaked: every timed lifecycle released what it took.
    if c.capacity().active_sequences != live or mc.active != live or len(free) != free_count:
        raise RuntimeError("a timed lifecycle did not release its sequence")
    run.facts["live sequences"] = live
    del kept, model_kept, held
    return run


# ---------------------------------------------------------------- decode steps
class _Decoder:
    """One long lifecore sequence whose decode steps continue from call to call."""

    def __init__(self, batch: int, primitives: bool) -> None:
        c = AdmissionCoordinator(domains={"kv": HUGE_DOMAIN}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                 max_active_sequences=4)
        self.coordinator, self.batch, self.primitives = c, batch, primitives
        self.session = fitting(c)("r", 1, DECODE_FIT).resources.open_session()
        self.t = 0

    def __call__(self) -> None:
        s, t, end = self.session, self.t, self.t + self.batch
        if self.primitives:  # the three calls every step, as the C++ side makes them
            ensure, acquire = s.try_ensure_backing_covers, s.acquire_frame
            while t < end:
                t += 1
                ensure(t)
                acquire().commit()
        else:
            step = s.step
            while t < end:
                t += 1
                step(t)
        self.t = t


class _ModelDecoder:
    def __init__(self, batch: int) -> None:
        c = model.ModelCoordinator(domains={"kv": HUGE_DOMAIN}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                   max_active_sequences=4)
        self.coordinator, self.batch, self.t = c, batch, 0
        self.session = admitted(c.admit("r", 1, DECODE_FIT)).resources.open_session()

    def __call__(self) -> None:
        step, t, end = self.session.step, self.t, self.t + self.batch
        while t < end:
            t += 1
            step(t)
        self.t = t


def decode_steps(*, rounds: int = 9, warmup: int = 1, min_batch_s: float = 0.01, batch: int = 1000) -> Run:
    loop = _core._SequenceBenchLoop(0, TPP, TPP)
    sides = {
        "Python step() (1 call)": Side(_Decoder(batch, False), per=batch, unit="step"),
        "Python primitives (3 calls)": Side(_Decoder(batch, True), per=batch, unit="step"),
        "C++ step()": Side(lambda: loop.decode_steps(batch * 10, False), per=batch * 10, unit="step"),
        "C++ primitives": Side(lambda: loop.decode_steps(batch * 10, True), per=batch * 10, unit="step"),
        "reference model step()": Side(_ModelDecoder(batch), per=batch, unit="step"),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                     title=f"decode steps of one sequence ({TPP} tokens per page): acquire frame -> extend if "
                           "needed -> commit")
    run.ratio("reference model step()", "Python step() (1 call)")
    run.ratio("Python step() (1 call)", "C++ step()")
    return run


# ---------------------------------------------------------------- block ids vs a Python free list
BATCH = 256
WIDTH = TARGET // TPP  # table columns: a 2,048-token context
START = TARGET // 2    # batch sequences decode from here; rows are staggered so extensions spread


class _LifecoreBatch:
    """``live`` sequences live; a batch of 256 decodes in lockstep, each iteration one step()
    per sequence and one block_table() into a preallocated table."""

    def __init__(self, live: int, inner: int) -> None:
        self.c = AdmissionCoordinator(domains={"kv": (live + 2 * BATCH) * WIDTH * PAGE_BYTES}, page_bytes=PAGE_BYTES,
                                      tokens_per_page=TPP, max_active_sequences=live + 2 * BATCH)
        self.kept = []
        for i in range(live - BATCH):
            adm = fitting(self.c)(f"live-{i}", TPP, TARGET)
            self.kept.append(adm.resources.open_session())
            adm.resources.close()
        self.inner, self.round = inner, 0
        self.batch: list[Any] = []  # the batch's sessions
        self.tokens: list[int] = []
        self.table = np.zeros((BATCH, WIDTH), dtype=np.int32)
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Outside the timed span: a batch that could outgrow its context starts again."""
        if not force and max(self.tokens) + self.inner < TARGET:
            return
        for s in self.batch:
            s.close()
        self.round += 1
        self.batch, self.tokens = [], []
        for r in range(BATCH):
            start = START + r % TPP
            adm = fitting(self.c)(f"b{self.round}-{r}", start, TARGET)
            self.batch.append(adm.resources.open_session())
            adm.resources.close()
            self.tokens.append(start)

    def __call__(self) -> None:
        tokens, batch = self.tokens, self.batch
        for r in range(BATCH):
            t = tokens[r] + 1
            tokens[r] = t
            batch[r].step(t)
        self.c.block_table(batch, WIDTH, self.table)

    def batched(self) -> None:
        """The same iteration through the batch API: step_all over a NumPy token array."""
        array = self.array
        array += 1
        step_all(self.batch, array)
        self.c.block_table(self.batch, WIDTH, self.table)

    def refresh_batched(self) -> None:
        self.refresh()
        self.array = np.array(self.tokens, dtype=np.int64)

    def sync(self) -> None:
        self.tokens = self.array.tolist()

    def decode_table(self) -> None:
        """The same iteration through a persistent DecodeTable: one call steps the batch and
        writes only the ids that changed."""
        array = self.array
        array += 1
        self.table_object.step(self.batch, array)

    def refresh_decode_table(self) -> None:
        if not hasattr(self, "table_object"):
            self.table_object = self.c.decode_table(BATCH, WIDTH)
        self.refresh_batched()

    def per_call_decode_table(self) -> None:
        """Per-call step() with the DecodeTable's update in place of block_table."""
        tokens, batch = self.tokens, self.batch
        for r in range(BATCH):
            t = tokens[r] + 1
            tokens[r] = t
            batch[r].step(t)
        self.table_object.update(batch)

    def refresh_per_call(self) -> None:
        if not hasattr(self, "table_object"):
            self.table_object = self.c.decode_table(BATCH, WIDTH)
        self.refresh()


class _FreeListBatch:
    """The baseline: the same bookkeeping with Python lists and a NumPy table."""

    def __init__(self, live: int, inner: int) -> None:
        self.free = list(range((live + 2 * BATCH) * WIDTH))
        self.kept = [self.admit(TPP) for _ in range(live - BATCH)]
        self.inner = inner
        self.batch: list[list[int]] = []  # the batch's block ids
        self.tokens: list[int] = []
        self.table = np.zeros((BATCH, WIDTH), dtype=np.int32)
        self.refresh(force=True)

    def admit(self, tokens: int) -> list[Any]:
        n = -(-tokens // TPP)
        ids = self.free[-n:]
        del self.free[-n:]
        return ids

    def release(self, ids: list[Any]) -> None:
        self.free.extend(ids[::-1])

    def refresh(self, force: bool = False) -> None:
        if not force and max(self.tokens) + self.inner < TARGET:
            return
        for ids in self.batch:
            self.release(ids)
        self.batch, self.tokens = [], []
        for r in range(BATCH):
            start = START + r % TPP
            ids = self.admit(start)
            self.batch.append(ids)
            self.tokens.append(start)
            self.table[r, :len(ids)] = ids

    def __call__(self) -> None:
        tokens, batch, table, pop = self.tokens, self.batch, self.table, self.free.pop
        for r in range(BATCH):
            t = tokens[r] + 1
            tokens[r] = t
            ids = batch[r]
            if t > len(ids) * TPP:
                block = pop()
                ids.append(block)
                table[r, len(ids) - 1] = block

    def vectorized(self) -> None:
        """The same iteration with the token counts in a NumPy array, as the batched lifecore
        sides take them: one ``+= 1``, then Python only for the rows that cross a block."""
        array, covered, batch, table, pop = self.array, self.covered, self.batch, self.table, self.free.pop
        array += 1
        crossing = np.flatnonzero(array > covered)
        for r in crossing.tolist():
            block = pop()
            ids = batch[r]
            ids.append(block)
            table[r, len(ids) - 1] = block
        covered[crossing] += TPP

    def refresh_vectorized(self) -> None:
        self.refresh()
        self.array = np.array(self.tokens, dtype=np.int64)
        self.covered = np.array([len(ids) * TPP for ids in self.batch], dtype=np.int64)

    def sync(self) -> None:
        self.tokens = self.array.tolist()


def decode_iteration(live: int, *, rounds: int = 9, warmup: int = 1, inner: int = 16) -> Run:
    lc, fl = _LifecoreBatch(live, inner), _FreeListBatch(live, inner)
    sides = {
        "lifecore step() x256 + block_table": Side(lc, unit="iteration", before=lc.refresh),
        "lifecore step_all + block_table": Side(lc.batched, unit="iteration", before=lc.refresh_batched,
                                                after=lc.sync),
        "lifecore step() x256 + DecodeTable.update": Side(lc.per_call_decode_table, unit="iteration",
                                                          before=lc.refresh_per_call),
        "lifecore DecodeTable.step": Side(lc.decode_table, unit="iteration", before=lc.refresh_decode_table,
                                          after=lc.sync),
        "Python free list + NumPy table": Side(fl, unit="iteration", before=fl.refresh),
        "Python free list + NumPy table, NumPy tokens": Side(fl.vectorized, unit="iteration",
                                                             before=fl.refresh_vectorized, after=fl.sync),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, inner=inner,
                     title=f"one decode iteration of {BATCH} sequences, {live:,} live")
    # The per-call sides against the per-row baseline the target names; the batched sides,
    # which take their tokens as a NumPy array, also against the baseline given the same array.
    run.ratio("lifecore step() x256 + block_table", "Python free list + NumPy table")
    run.ratio("lifecore step() x256 + DecodeTable.update", "Python free list + NumPy table")
    run.ratio("lifecore step_all + block_table", "Python free list + NumPy table")
    run.ratio("lifecore DecodeTable.step", "Python free list + NumPy table")
    run.ratio("lifecore step_all + block_table", "Python free list + NumPy table, NumPy tokens")
    run.ratio("lifecore DecodeTable.step", "Python free list + NumPy table, NumPy tokens")
    # The table holds each row's ids, padded (after one more untimed iteration: the sides
    # share the batch, so the last side timed may not have been block_table's).
    lc.refresh()
    lc()
    for r in (0, BATCH - 1):
        ids = lc.batch[r].backing.block_ids()
        if not (np.array_equal(lc.table[r, :len(ids)], ids) and not lc.table[r, len(ids):].any()):
            raise RuntimeError("the block table does not hold a row's ids")
    # The two baselines keep one table: the vectorized one's rows hold their ids too.
    fl.refresh()
    for r in (0, BATCH - 1):
        ids = fl.batch[r]
        if not np.array_equal(fl.table[r, :len(ids)], ids):
            raise RuntimeError("the baseline's table does not hold a row's ids")
    # The decode table, updated incrementally all along, holds exactly what block_table writes.
    lc.table_object.update(lc.batch)
    if not np.array_equal(lc.table_object.table, lc.c.block_table(lc.batch, WIDTH)):
        raise RuntimeError("the decode table differs from block_table")
    run.facts["live sequences"] = live
    return run


def decode_iteration_parts(live: int = 1_000, *, rounds: int = 9, warmup: int = 1, inner: int = 16) -> Run:
    """Where the per-call iteration's time goes, against the same baseline: the Python loop
    alone (the token bookkeeping every side does), ``step()`` x256 with that loop and no table,
    ``block_table`` alone (the same 256 x 128 table in place, no row changed: the cheapest full
    table), and a NumPy fill of a table of that shape (writing every entry once, the least any
    full table costs). The headroom is what the baseline leaves for a table after the steps.

    Then the floor of any per-call API that rebuilds the table: the same loop with a C method
    call per row that does nothing (``dict.get`` on an empty dict: the interpreter's cost of one
    call with one argument to a fast-call method descriptor, the kind ``step`` is), plus that
    fill (the least a table costs; a table built from ids also reads them). What the floor
    leaves under the baseline is all a per-call API has for its own work: converting its
    argument and its answer, a lock per row, the extensions, each row's checks."""
    lc, fl = _LifecoreBatch(live, inner), _FreeListBatch(live, inner)
    # A fill, not a copy: it writes every entry once and reads nothing, and a copy's time here
    # depended on where its two arrays happened to lie (10x apart between two runs).
    filled = np.zeros((BATCH, WIDTH), dtype=np.int32)

    spare = [0] * BATCH
    probes: list[dict[int, int]] = [{} for _ in range(BATCH)]

    def loop_only() -> None:  # the same reads and writes, on a list no session follows
        tokens = lc.tokens
        for r in range(BATCH):
            t = tokens[r] + 1
            spare[r] = t

    def call_floor() -> None:  # the loop with a C call per row in place of step()
        tokens = lc.tokens
        for r in range(BATCH):
            t = tokens[r] + 1
            spare[r] = t
            probes[r].get(t)

    def floor() -> None:  # and a fill of a full table in place of block_table
        call_floor()
        filled.fill(7)

    def steps_only() -> None:
        tokens, batch = lc.tokens, lc.batch
        for r in range(BATCH):
            t = tokens[r] + 1
            tokens[r] = t
            batch[r].step(t)

    def table_only() -> None:
        lc.c.block_table(lc.batch, WIDTH, lc.table)

    sides = {
        "Python loop alone": Side(loop_only, unit="iteration"),
        "lifecore step() x256": Side(steps_only, unit="iteration", before=lc.refresh),
        "lifecore block_table alone": Side(table_only, unit="iteration", before=lc.refresh),
        f"NumPy fill of a {BATCH} x {WIDTH} int32 table": Side(lambda: filled.fill(7), unit="iteration"),
        "Python free list + NumPy table": Side(fl, unit="iteration", before=fl.refresh),
        "floor: the loop + a C call per row": Side(call_floor, unit="iteration"),
        "floor: the loop + a C call per row + the fill": Side(floor, unit="iteration"),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, inner=inner,
                     title=f"the per-call decode iteration in parts ({BATCH} sequences, {live:,} live)")
    run.ratio("lifecore step() x256", "Python free list + NumPy table")
    run.ratio("lifecore block_table alone", f"NumPy fill of a {BATCH} x {WIDTH} int32 table")
    run.ratio("floor: the loop + a C call per row + the fill", "Python free list + NumPy table")
    run.difference("step() over the call floor", "lifecore step() x256", "floor: the loop + a C call per row")
    run.difference("left for a per-call API's own work (baseline - floor)", "Python free list + NumPy table",
                   "floor: the loop + a C call per row + the fill")
    run.difference("step() over the loop", "lifecore step() x256", "Python loop alone")
    run.difference("baseline over the loop", "Python free list + NumPy table", "Python loop alone")
    run.difference("headroom for a table (baseline - steps)", "Python free list + NumPy table", "lifecore step() x256")
    run.facts["live sequences"] = live
    return run


def admission(*, rounds: int = 9, warmup: int = 1, inner: int = 64) -> Run:
    c = AdmissionCoordinator(domains={"kv": (LIVE + 2 * inner) * WIDTH * PAGE_BYTES}, page_bytes=PAGE_BYTES,
                             tokens_per_page=TPP, max_active_sequences=LIVE + 2 * inner)
    kept = []
    for i in range(LIVE):
        adm = fitting(c)(f"live-{i}", TPP, TARGET)
        kept.append(adm.resources.open_session())
        adm.resources.close()
    admitted: list[Any] = []
    # An engine admits a request whose id it already has: the ids of a batch are made before
    # the timed span (the baseline keys nothing by request id).
    batch_ids: list[Any] = []
    made = [0]
    admit = fitting(c)

    def make_ids() -> None:
        batch_ids[:] = [f"a{made[0] + i}" for i in range(inner)]
        batch_ids.reverse()
        made[0] += inner

    def lifecore_admit() -> None:
        resources = admit(batch_ids.pop(), TARGET, TARGET).resources
        admitted.append((resources, resources.open_session()))

    def lifecore_release_all() -> None:
        for resources, s in admitted:
            s.close()
            resources.close()
        admitted.clear()

    free = list(range((LIVE + 2 * inner) * WIDTH))
    del free[-LIVE:]
    taken: list[Any] = []

    def free_list_admit() -> None:
        ids = free[-WIDTH:]
        del free[-WIDTH:]
        taken.append(ids)

    def free_list_release_all() -> None:
        for ids in taken:
            free.extend(ids[::-1])
        taken.clear()

    sides = {
        "lifecore admit + open_session": Side(lifecore_admit, unit="admission", before=make_ids,
                                              after=lifecore_release_all),
        "Python free list slice": Side(free_list_admit, unit="admission", after=free_list_release_all),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, inner=inner,
                     title=f"admit + open of a {TARGET}-token prompt ({WIDTH} blocks), {LIVE:,} live")
    run.ratio("lifecore admit + open_session", "Python free list slice")
    del kept
    return run


RELEASE_ORDERS = ("admission", "reverse")


def release(*, rounds: int = 9, warmup: int = 1, inner: int = 64, order: str = "admission") -> Run:
    """A burst of ``inner`` 128-block sequences released one by one, on both sides in the same
    ``order``: ``"admission"`` (the first admitted first, as sequences of one length finish)
    or ``"reverse"`` (the last admitted first, whose records are the most recently touched)."""
    if order not in RELEASE_ORDERS:
        raise ValueError(f"order must be one of {RELEASE_ORDERS}, got {order!r}")
    c = AdmissionCoordinator(domains={"kv": (2 * inner) * WIDTH * PAGE_BYTES}, page_bytes=PAGE_BYTES,
                             tokens_per_page=TPP, max_active_sequences=2 * inner)
    ready: list[Any] = []
    counter = [0]

    def lifecore_prepare() -> None:
        while len(ready) < inner:
            counter[0] += 1
            adm = fitting(c)(f"r{counter[0]}", TARGET, TARGET)
            ready.append((adm.resources, adm.resources.open_session()))
        if order == "admission":
            ready.reverse()  # pop() takes the first admitted

    def lifecore_release() -> None:
        resources, s = ready.pop()
        s.close()
        resources.close()

    free = list(range(2 * inner * WIDTH))
    held: list[Any] = []

    def free_list_prepare() -> None:
        while len(held) < inner:
            ids = free[-WIDTH:]
            del free[-WIDTH:]
            held.append(ids)
        if order == "admission":
            held.reverse()

    def free_list_release() -> None:
        free.extend(held.pop()[::-1])  # the fastest reversed extend (reversed() iterates)

    sides = {
        "lifecore close (session + resources)": Side(lifecore_release, unit="release", before=lifecore_prepare),
        "Python free list extend": Side(free_list_release, unit="release", before=free_list_prepare),
    }
    first = "the first admitted first" if order == "admission" else "the last admitted first"
    run = interleave(sides, rounds=rounds, warmup=warmup, inner=inner,
                     title=f"release of a {WIDTH}-block sequence, in bursts of {inner}, {first} (both sides)")
    run.ratio("lifecore close (session + resources)", "Python free list extend")
    run.facts["driver calls on the emulated device (admit, open and close of a sequence)"] = device_calls()
    return run


def device_calls() -> int:
    """The driver calls an admission, its session and their release make on a coordinator
    over the emulated device's arena (the timed sides use host accounting): counted, not
    assumed."""
    import lifecore

    with lifecore.Device("mock") as device:
        c = AdmissionCoordinator(device, domains={"kv": 4 * WIDTH * PAGE_BYTES}, page_bytes=PAGE_BYTES,
                                 tokens_per_page=TPP, max_active_sequences=4)
        operations = lifecore.driver_operations()
        before = {op: device.driver_calls(op) for op in operations}
        admitted = fitting(c)("counted", TARGET, TARGET)
        session = admitted.resources.open_session()
        session.step(TARGET)
        session.close()
        admitted.resources.close()
        return sum(device.driver_calls(op) - before[op] for op in operations)


# A request id as engines make them (a prefix and a UUID: 41 characters), beside the short one.
LONG_ID = "cmpl-{:08d}-0000-4000-8000-000000000000"


def arena_memory(live: int = LIVE, id_format: str = "r{}", blocks: int = 1, traced: bool = False) -> float:
    """Bytes per live sequence holding ``blocks`` blocks, with its Python handles (the session;
    it holds the resources): resident-set growth (the C++ records and the Python objects), or
    with ``traced`` the Python objects alone (tracemalloc, whose own tables would count in the
    resident set: a run of its own). Request ids are ``id_format.format(i)``. Call it in a
    fresh process."""
    gc.collect()
    c = AdmissionCoordinator(domains={"kv": (live + 1) * WIDTH * PAGE_BYTES}, page_bytes=PAGE_BYTES,
                             tokens_per_page=TPP, max_active_sequences=live + 1)
    kept = []
    base = rss_bytes()
    if traced:
        tracemalloc.start()
    for i in range(live):
        adm = fitting(c)(id_format.format(i), blocks * TPP, TARGET)
        kept.append(adm.resources.open_session())
        adm.resources.close()
    gc.collect()
    if traced:
        grown, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    else:
        grown = rss_bytes() - base
    for s in kept:
        s.close()
    return grown / live


# ---------------------------------------------------------------- memory
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bookkeeping(live: int = LIVE, pages_each: int = 32) -> tuple[float, float]:
    """Resident-set growth per live sequence and per extra page (call it in a fresh process)."""
    gc.collect()
    c = coordinator(live)
    base = rss_bytes()
    kept = []
    for i in range(live):
        adm = fitting(c)(f"r{i}", TPP, TARGET)
        kept.append(adm.resources.open_session())
        adm.resources.close()  # keep only the session (it holds the resources)
    gc.collect()
    after_open = rss_bytes()
    for s in kept:
        for t in range(2 * TPP, (pages_each + 1) * TPP, TPP):
            s.step(t)
    gc.collect()
    after_pages = rss_bytes()
    per_sequence = (after_open - base) / live
    per_page = (after_pages - after_open) / (live * (pages_each - 1))
    for s in kept:
        s.close()
    return per_sequence, per_page


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.sequence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter batches")
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arena-memory-only", metavar="ID_FORMAT", help=argparse.SUPPRESS)
    parser.add_argument("--blocks", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--block-ids", action="store_true", help="only the block-id comparisons (section 4)")
    args = parser.parse_args(argv)
    if args.memory_only:
        per_seq, per_page = bookkeeping()
        print(f"{per_seq} {per_page}")
        return 0
    if args.arena_memory_only:
        print(arena_memory(id_format=args.arena_memory_only, blocks=args.blocks, traced=args.traced))
        return 0
    timing: dict[str, Any] = dict(rounds=3, warmup=1) if args.quick else {}

    def fresh_memory(id_format: str, blocks: int = 1, traced: bool = False) -> float:
        command = [sys.executable, "-m", "lifecore.benchmarks.sequence", "--arena-memory-only", id_format,
                   "--blocks", str(blocks)] + (["--traced"] if traced else [])
        return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)

    rss, full_rss = fresh_memory("r{}"), fresh_memory("r{}", WIDTH)
    traced, long_rss = fresh_memory("r{}", traced=True), fresh_memory(LONG_ID)
    for live in (1_000, 10_000, 100_000):
        print(format_run(decode_iteration(live, **timing)))
    print(format_run(decode_iteration_parts(**timing)))
    print(format_run(admission(**timing)))
    for order in RELEASE_ORDERS:
        print(format_run(release(**timing, order=order)))
        print(format_run(release(**timing, inner=512, order=order)))
        print(format_run(release(**timing, inner=4096, order=order)))  # past the per-thread cache of records (1,024)
    print(f"memory per live sequence ({LIVE:,} live, its session and resources included, resident-set growth in a "
          f"fresh process): holding 1 block {rss:,.0f} B, holding "
          f"{WIDTH} blocks {full_rss:,.0f} B; {traced:,.0f} B of it Python objects "
          f"(tracemalloc, in a run of its own); with {len(LONG_ID.format(0))}-character request ids "
          f"{long_rss:,.0f} B (1 block)")
    if args.block_ids:
        return 0
    # Memory first, in a fresh process, so freed memory of other runs cannot hide growth.
    fresh = subprocess.run([sys.executable, "-m", "lifecore.benchmarks.sequence", "--memory-only"],
                           capture_output=True, text=True, check=True)
    per_seq, per_page = (float(x) for x in fresh.stdout.split())
    timing = dict(rounds=3, warmup=1, min_batch_s=0.003) if args.quick else {}
    print(format_run(lifecycles(**timing)))
    print(format_run(decode_steps(**timing)))
    sizes = _core._sequence_bookkeeping_sizes()
    print(f"host bookkeeping (resident-set growth, {LIVE:,} sequences): {per_seq:,.0f} B per live sequence "
          f"(session + resources + 1 page, Python objects included), {per_page:,.1f} B per additional page")
    print(f"  records (sizeof, bytes): {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
