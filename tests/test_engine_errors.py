"""The reference engine's error paths: a failure inside ``generate`` gives back every sequence
and frame it held, and the engine serves the next call as if the failed one never ran."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from engine_reference import generate as reference_generate  # noqa: E402

from lifecore import (EngineError, InvalidArgumentError, LifecoreError, LifecoreOverflowError,  # noqa: E402
                      LifecoreTypeError)
from lifecore.engine import PRESETS, CaptureOptions, Engine, Request, Transformer  # noqa: E402
from lifecore.engine.scheduler import Scheduler  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


def assert_released(engine):
    capacity = engine.coordinator.capacity()
    assert capacity.used_bytes == {"kv": 0}
    assert capacity.active_sequences == 0
    assert engine.coordinator.holders() == []
    assert engine.memory.frames == []


class Failing(Exception):
    pass


def fail_on_call(engine, method, call):
    """Makes ``engine.<method>`` raise ``Failing`` on its ``call``-th call (from 1)."""
    original = getattr(engine, method)
    calls = [0]

    def wrapped(*args):
        calls[0] += 1
        if calls[0] == call:
            raise Failing(f"{method} failed")
        return original(*args)

    setattr(engine, method, wrapped)
    return lambda: setattr(engine, method, original)


@pytest.mark.parametrize("method, call", [("prefill", 1), ("prefill", 2), ("decode", 1), ("decode", 5)])
def test_a_model_failure_gives_back_every_sequence_and_frame(method, call):
    """Prefill fails with its sequences admitted and their frames live; decode with the batch
    extended and framed. Nothing stays held, and the same request ids run again."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=4, max_batch=2)
    batch = [Request("a", [1, 2, 3], 6), Request("b", [4, 5], 6), Request("c", [6, 7, 8, 9], 4)]
    restore = fail_on_call(engine, method, call)
    with pytest.raises(Failing) as caught:  # kept: its traceback holds the failed call's frames
        engine.generate(batch)
    restore()
    assert_released(engine)
    assert str(caught.value) == f"{method} failed"
    again = engine.generate([Request(r.request_id, list(r.prompt), r.max_new_tokens) for r in batch])
    for request in batch:
        assert again.tokens[request.request_id] == reference_generate(engine.model, request.prompt,
                                                                      request.max_new_tokens)
    assert_released(engine)


def test_a_failure_between_preemptions_gives_back_the_survivors(monkeypatch):
    """A decode that fails after preemptions: the preempted are already gone, the survivors
    are released too."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=3, max_batch=3)
    batch = [Request(f"r{i}", [i + 1] * 12, 20) for i in range(3)]
    scheduler_runs = []
    original = Scheduler._extend

    def extend(self):
        original(self)
        scheduler_runs.append(self.stats.preemptions)
        if self.stats.preemptions:
            raise Failing("after a preemption")

    monkeypatch.setattr(Scheduler, "_extend", extend)
    with pytest.raises(Failing) as caught:  # kept: its traceback holds the failed call's frames
        engine.generate(batch)
    assert scheduler_runs[-1] > 0
    assert_released(engine)
    assert caught.type is Failing


def test_a_model_failure_under_capture_is_not_masked_and_capture_goes_on():
    """With an intervention, the failed forward's step is drained without checking the
    intervention (it never completed): the model's error is what is raised, and the next
    generate captures as before."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=8, max_batch=2,
                    capture=CaptureOptions(budget_bytes=1 << 30, scale=(0, 2.0)))
    original = engine.model.layers[1].forward
    engine.model.layers[1].forward = lambda *args: (_ for _ in ()).throw(Failing("layer 1"))
    with pytest.raises(Failing) as caught:  # kept: its traceback holds the failed call's frames
        engine.generate([Request("a", [1, 2, 3], 3)])
    engine.model.layers[1].forward = original
    assert_released(engine)
    assert str(caught.value) == "layer 1"  # not the capture session's complaint
    before = engine.capture.captured
    result = engine.generate([Request("a", [1, 2, 3], 3)])
    assert result.tokens["a"] == reference_generate(engine.model, [1, 2, 3], 3,
                                                    hook=lambda i, x: x * 2.0 if i == 0 else None)
    assert engine.capture.captured == before + 3 * 2  # a prefill and two decode steps, two layers each
    engine.close()


def test_an_interrupt_inside_generate_gives_back_everything():
    engine = Engine("tiny", num_blocks=8, max_batch=2)

    def progress(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        engine.generate([Request("a", [1, 2, 3], 3), Request("b", [1, 2], 3)], progress=progress)
    assert_released(engine)
    assert caught.type is KeyboardInterrupt


@pytest.mark.parametrize("interrupts", [1, 3])
def test_a_second_interrupt_inside_the_cleanup_still_gives_back_everything(monkeypatch, interrupts):
    """A Ctrl-C that lands while a failed run gives its sequences back (after the frames, after
    one session) does not cut the cleanup short: it runs again to the end, the last interrupt
    is raised (the run's own error its context), and the engine serves the same ids again."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=8, max_batch=2)
    original = type(engine.memory).abandon
    calls = []

    def abandon(memory, handles):
        calls.append(len(handles))
        if len(calls) <= interrupts:
            for frame in memory.frames:
                frame.close()
            if handles:
                handles[0].close()
            raise KeyboardInterrupt(f"inside the cleanup ({len(calls)})")
        original(memory, handles)

    monkeypatch.setattr(type(engine.memory), "abandon", abandon)
    batch = [Request("a", [1, 2, 3], 4), Request("b", [1, 2], 4)]

    def progress(n):
        raise KeyboardInterrupt("the first")

    with pytest.raises(KeyboardInterrupt) as caught:
        engine.generate(batch, progress=progress)
    assert calls == [2] * (interrupts + 1)  # the same handles each run, the last run to the end
    assert_released(engine)
    assert str(caught.value) == f"inside the cleanup ({interrupts})"  # the last, raised once a run completed
    assert str(caught.value.__context__) == "the first"  # what the run was stopped by, kept
    monkeypatch.undo()
    again = engine.generate([Request(r.request_id, list(r.prompt), r.max_new_tokens) for r in batch])
    assert sorted(again.tokens) == ["a", "b"]
    assert_released(engine)


def test_an_interrupt_as_an_admission_returns_gives_it_back_at_once(monkeypatch):
    """A Ctrl-C landing as the coordinator's admission returns (the first check of the decision)
    gives the admission back before the error goes on: while the error is kept (an interactive
    session keeps the last one), the same request id is admitted again."""
    import lifecore.engine.scheduler as scheduler

    engine = Engine("tiny", dtype=torch.float64, num_blocks=8, max_batch=2)
    admitted = scheduler.Admitted

    class InterruptedOnce(type):
        fired = False

        def __instancecheck__(cls, obj):
            if not InterruptedOnce.fired:
                InterruptedOnce.fired = True
                raise KeyboardInterrupt("as the admission returned")
            return isinstance(obj, admitted)

    monkeypatch.setattr(scheduler, "Admitted", InterruptedOnce("Admitted", (), {}))
    with pytest.raises(KeyboardInterrupt) as caught:  # kept: its traceback holds the failed call's frames
        engine.generate([Request("a", [1, 2, 3], 4)])
    assert InterruptedOnce.fired
    monkeypatch.undo()
    assert_released(engine)
    assert sorted(engine.generate([Request("a", [1, 2, 3], 4)]).tokens) == ["a"]
    assert caught.type is KeyboardInterrupt


def used_request():
    request = Request("used", [1, 2, 3], 2)
    request.generated = [5, 6]
    return request


# Requests are made by each test, not held by the parametrize marks: a mark's values live
# until the interpreter's last collection, past lifecore's module teardown.
@pytest.mark.parametrize("bad, error, match", [
    (("zero", [1, 2, 3], 0), ValueError, "'zero': max_new_tokens must be a positive int, got 0"),
    (("minus", [1, 2, 3], -1), ValueError, "'minus': max_new_tokens must be a positive int"),
    # A wrong type is a TypeError, as the docs say (before: these three were ValueErrors).
    (("half", [1, 2, 3], 2.5), TypeError, "'half': max_new_tokens must be a positive int, got float"),
    (("bool-token", [True, 2], 3), TypeError, "'bool-token': token True at 0 is a bool, not a token id"),
    (("empty", [], 3), ValueError, "'empty': the prompt must be a non-empty list of token ids"),
    (("tuple", (1, 2), 3), TypeError, "'tuple': the prompt must be a list of token ids, got tuple"),
    (("vocab", [1, 97], 3), ValueError, r"'vocab': token 97 at 1 is not a token id of the model \(0\.\.96\)"),
    (("minus-token", [-1, 2], 3), ValueError, "'minus-token': token -1 at 0 is not a token id"),
    (("float-token", [1.0, 2], 3), TypeError, "'float-token': token 1.0 at 0 is a float, not a token id"),
    (("ok", [4, 5], 3), ValueError, "'ok' appears twice"),
    (used_request, ValueError, "'used' has already run"),
    # Before: passed the checks, then a bare TypeError once the others had run.
    (lambda: Request("gen-tuple", [4, 5], 3, generated=()), TypeError,
     r"'gen-tuple': generated must be a list \(the engine appends the tokens to it\), got tuple"),
    (lambda: Request("rejected-int", [4, 5], 3, rejected=0), TypeError, "'rejected-int': rejected must be None or a str"),
    (("lifecore-engine-padding", [1], 1), ValueError, "the engine's own"),
    ("not a request", TypeError, "expected a Request, got str"),
    ((7, [1], 1), TypeError, "a request id must be a str, got 7"),
])
def test_a_bad_request_is_refused_before_any_request_runs(bad, error, match):
    """Each of these once ran partway (an error from deep inside, sequences left held) or ran
    wrongly (max_new_tokens=0 gave a token, a used request grew past max_new_tokens)."""
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    good = Request("ok", [1, 2, 3], 3)
    bad = Request(*bad) if isinstance(bad, tuple) else bad() if callable(bad) else bad
    with pytest.raises(error, match=match):
        engine.generate([good, bad])
    assert good.generated == [] and good.rejected is None  # refused before anything ran
    assert_released(engine)
    assert engine.generate([good]).tokens["ok"] == reference_generate(engine.model, [1, 2, 3], 3)


@pytest.mark.parametrize("requests", ["a Request", None, 5])
def test_requests_that_are_no_list_of_requests_are_a_lifecore_type_error(requests):
    """generate(request), the natural slip for one request, raised Python's bare "'Request'
    object is not iterable" from inside generate, naming neither the call nor what it takes."""
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    if requests == "a Request":
        requests = Request("one", [1, 2, 3], 3)
    with pytest.raises(LifecoreTypeError, match="Engine.generate: requests must be a list of Request"):
        engine.generate(requests)
    assert_released(engine)
    one = Request("one", [1, 2, 3], 3)
    assert engine.generate([one]).tokens["one"] == reference_generate(engine.model, [1, 2, 3], 3)


def test_token_ids_of_numpy_integer_types_are_accepted():
    import numpy as np

    engine = Engine("tiny", num_blocks=8, max_batch=2)
    prompt = list(np.array([1, 2, 3], dtype=np.int64))
    assert engine.generate([Request("np", prompt, 3)]).tokens["np"] == reference_generate(engine.model, [1, 2, 3], 3)


class Bounded(Scheduler):
    """Fails a run that spins: without the fixes below the run never ended."""

    def iteration(self):
        if self.stats.iterations > 1000:
            raise AssertionError(f"the run does not end: {self.stats}")
        super().iteration()


def test_a_request_that_needs_the_padding_block_is_rejected_not_run_forever(monkeypatch):
    """On the graph path the coordinator's pool holds one block more than ``num_blocks``: the
    padding block, held by the engine for good. A request that needs every block of that pool
    passed the coordinator's check, yet could never finish: it preempted itself, then waited
    for the padding block forever. It is rejected, and the rest complete. (The padding block
    is held here by hand, on a CPU engine, as the graph path holds it.)"""
    import lifecore.engine.engine as engine_module

    monkeypatch.setattr(engine_module, "Scheduler", Bounded)
    engine = Engine("tiny", dtype=torch.float64, num_blocks=4, max_batch=3)
    engine._hold_padding_block()
    big, small = Request("big", [1] * 40, 20), Request("small", [1, 2, 3], 4)  # big: 4 blocks, 3 free
    result = engine.generate([big, small])
    assert result.tokens["big"] == [] and big.rejected == "needs 4 blocks of 16 tokens; the engine has 3"
    assert result.tokens["small"] == reference_generate(engine.model, [1, 2, 3], 4)
    assert small.rejected is None
    engine.close()
    assert_released(engine)


def test_a_scheduler_whose_head_waits_on_capacity_it_does_not_hold_raises():
    """Nothing running and the head deferred: no release of this run can wake it, so the run
    says so instead of spinning."""
    from lifecore.sequence import Admitted

    engine = Engine("tiny", num_blocks=2, max_batch=2)
    outside = engine.coordinator.admit("outside", 32, 32)  # both blocks, held by another owner
    assert isinstance(outside, Admitted)
    scheduler = Bounded(engine.memory, engine, block_size=16, max_batch=2, max_blocks=engine.max_blocks)
    scheduler.add(Request("a", [1, 2, 3], 3))
    with pytest.raises(EngineError, match="'a' waits for capacity that no sequence of this run holds"):
        scheduler.run()
    outside.resources.close()
    assert_released(engine)


def test_generate_after_close_is_refused_and_close_twice_is_harmless():
    """Closing detaches the capture hooks (and, on CUDA, destroys the graphs and gives back the
    padding block): a generate after it used to run without capturing anything."""
    from lifecore import ClosedError

    engine = Engine("tiny", num_blocks=8, max_batch=2, capture=CaptureOptions())
    engine.generate([Request("a", [1, 2, 3], 2)])
    captured = engine.capture.captured
    engine.close()
    engine.close()
    request = Request("b", [1, 2, 3], 2)
    with pytest.raises(ClosedError, match="Engine.generate: the engine is closed"):
        engine.generate([request])
    assert request.generated == [] and engine.capture.captured == captured
    assert_released(engine)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(block_size=0), ValueError, "Engine: block_size must be a positive int, got 0"),
    (dict(block_size=-16), ValueError, "Engine: block_size must be a positive int, got -16"),
    (dict(num_blocks=0), ValueError, "Engine: num_blocks must be a positive int, got 0"),
    (dict(max_batch=2.0), TypeError, "Engine: max_batch must be a positive int, got float"),
    (dict(num_blocks=True), TypeError, "Engine: num_blocks must be a positive int, got bool"),
    (dict(model=42), TypeError, "Engine: model must be a preset name, a ModelConfig or a Transformer, got int"),
    (dict(model=Transformer(PRESETS["tiny"], device="meta")), ValueError,
     "Engine: the model is on meta, the engine's device is cpu"),
])
def test_bad_engine_arguments_are_refused_clearly(kwargs, error, match):
    with pytest.raises(error, match=match):
        Engine(**kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    # Each once reached torch or the capture session: an error of theirs that named neither the
    # engine nor the argument (or, for "meta", an engine that could never generate).
    (dict(seed="0"), LifecoreTypeError, "Engine: argument 'seed' must be an int, got str"),
    (dict(seed=2**64), LifecoreOverflowError, r"Engine: argument 'seed' must be between -2\*\*63 and 2\*\*64 - 1"),
    # Accepted, then NumPy's MemoryError for 128 GiB of block table at the first generate.
    (dict(max_batch=2**31), LifecoreOverflowError, r"Engine: max_batch 2,147,483,648 needs a block table of "
                                                   r"[\d,]+ bytes, more than the host's memory"),
    (dict(dtype="float32"), LifecoreTypeError, "Engine: argument 'dtype' must be a torch.dtype"),
    (dict(dtype=torch.int32), InvalidArgumentError, "Engine: argument 'dtype' must be a floating-point torch.dtype"),
    (dict(device="gpu0"), InvalidArgumentError, "Engine: device 'gpu0' is not a torch device"),
    (dict(device="meta"), InvalidArgumentError, "Engine: device must be a CPU or a CUDA device, got 'meta'"),
    (dict(device=0), LifecoreTypeError, "Engine: device must be a str or a torch.device, got int"),
    (dict(graphs="yes"), LifecoreTypeError, "Engine: graphs must be True, False or None"),
    (dict(capture={"budget_bytes": 1}), LifecoreTypeError, "Engine: capture must be a CaptureOptions or None"),
    (dict(capture=CaptureOptions(budget_bytes=-1)), InvalidArgumentError, "CaptureOptions: budget_bytes must be"),
    (dict(capture=CaptureOptions(budget_bytes="1")), LifecoreTypeError, "CaptureOptions: budget_bytes must be an int"),
    (dict(capture=CaptureOptions(scale=(2, 0.5))), InvalidArgumentError,
     r"CaptureOptions: scale's layer must be between 0 and 1 \(the model's layers\), got 2"),
    (dict(capture=CaptureOptions(scale=(0, float("nan")))), InvalidArgumentError,
     "CaptureOptions: scale's factor must be finite"),
    # Before: accepted, then every generate failed its intervention (inf in the model's dtype),
    # and an int past a float's range was Python's bare OverflowError.
    (dict(capture=CaptureOptions(scale=(0, 1e300))), InvalidArgumentError,
     r"CaptureOptions: scale's factor 1e\+300 is past what torch.float32 \(the model's dtype\) holds"),
    (dict(dtype=torch.float16, capture=CaptureOptions(scale=(0, 1e6))), InvalidArgumentError,
     r"scale's factor 1000000.0 is past what torch.float16"),
    (dict(capture=CaptureOptions(scale=(0, 10**400))), InvalidArgumentError,
     "CaptureOptions: scale's factor must be finite, got an int of 1329 bits"),
    # Once accepted with the graphs silently off: the replay would skip the capture hooks.
    (dict(graphs=True, capture=CaptureOptions()), InvalidArgumentError,
     "Engine: graphs=True and capture cannot be had together"),
    # Once the coordinator's refusals, naming its arguments (domains['kv'], tokens_per_page).
    (dict(num_blocks=2**62), LifecoreOverflowError, r"Engine: argument 'num_blocks' must be at most 2,147,483,647: "
                                                    r"a domain holds at most 2,147,483,648 blocks \(its ids are int32\), "
                                                    r"got 4,611,686,018,427,387,904"),
    (dict(num_blocks=2**31), LifecoreOverflowError, r"Engine: argument 'num_blocks' must be at most 2,147,483,647"),
    # Before: quoted the coordinator's capped pool beside the one asked for (two byte counts).
    (dict(num_blocks=2**31 - 1, block_size=2**31), LifecoreOverflowError,
     r"Engine: argument 'num_blocks' asks for a KV pool of 2,147,483,647 blocks of [\d,]+ bytes, past 2\*\*63"),
    (dict(block_size=2**40), LifecoreOverflowError, r"Engine: argument 'block_size' must be at most 4,294,967,295"),
])
def test_every_engine_argument_is_checked_before_anything_is_made(kwargs, error, match):
    with pytest.raises(error, match=match) as caught:
        Engine(**kwargs)
    assert isinstance(caught.value, LifecoreError)


@pytest.mark.parametrize("args, kwargs, error, match", [
    # Before: a bool or str seed was taken as a number, and the rest were torch's own errors.
    ((PRESETS["tiny"],), dict(seed=True), LifecoreTypeError, "Transformer: argument 'seed' must be an int, got bool"),
    ((PRESETS["tiny"],), dict(seed="1"), LifecoreTypeError, "Transformer: argument 'seed' must be an int, got str"),
    ((PRESETS["tiny"],), dict(seed=2**64), LifecoreOverflowError, "Transformer: argument 'seed' must be between"),
    (("tiny",), {}, LifecoreTypeError, "Transformer: argument 'config' must be a ModelConfig"),
    ((PRESETS["tiny"],), dict(dtype="float32"), LifecoreTypeError, "Transformer: argument 'dtype' must be a torch.dtype"),
    ((PRESETS["tiny"],), dict(dtype=torch.int64), InvalidArgumentError, "Transformer: argument 'dtype' must be a "
                                                                         "floating-point"),
    ((PRESETS["tiny"],), dict(device=0), LifecoreTypeError, "Transformer: argument 'device' must be a str"),
    ((PRESETS["tiny"],), dict(device="gpu0"), InvalidArgumentError, "Transformer: argument 'device' 'gpu0' is not"),
])
def test_transformer_arguments_are_refused_naming_them(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        Transformer(*args, **kwargs)


def test_a_pool_the_device_cannot_allocate_names_num_blocks_and_keeps_nothing():
    # Before: a DriverError from the coordinator, which the engine's errors do not list.
    with pytest.raises(InvalidArgumentError, match=r"^Engine: argument 'num_blocks' asks for a KV pool of "
                                                   r"2,147,483,647 blocks .* more than the mock device can "
                                                   r"allocate .*nothing was kept$"):
        Engine(num_blocks=2**31 - 1)
    engine = Engine(num_blocks=8)  # and the next engine is made as usual
    engine.close()


def test_engine_refusals_are_lifecore_errors_of_the_builtin_kinds():
    with pytest.raises(InvalidArgumentError) as caught:
        Engine(num_blocks=0)
    assert isinstance(caught.value, ValueError)
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    with pytest.raises(LifecoreTypeError) as typed:
        engine.generate(["not a request"])
    assert isinstance(typed.value, TypeError)


def test_a_progress_that_is_not_callable_is_refused_before_any_request_runs():
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    request = Request("a", [1, 2, 3], 3)
    with pytest.raises(LifecoreTypeError, match="Engine.generate: progress must be a callable"):
        engine.generate([request], progress=5)  # type: ignore[arg-type]
    assert request.generated == [] and request.rejected is None
    assert_released(engine)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_a_cuda_engine_without_cuda_is_refused_clearly():
    with pytest.raises(ValueError, match="Engine: device 'cuda', but this torch has no CUDA device"):
        Engine("tiny", device="cuda")


def test_stats_count_what_their_docstring_says():
    """``deferrals`` counts deferred admissions only (a deferred extension shows as
    preemptions), and ``iterations`` counts scheduler iterations, decode step or not."""
    engine = Engine("tiny", num_blocks=3, max_batch=3)
    counts = {"admission": 0, "extension": 0}
    admit, extend_all = engine.memory.admit, engine.memory.extend_all

    def counted_admit(*args):
        outcome = admit(*args)
        counts["admission"] += outcome[0] == "deferred"
        return outcome

    def counted_extend_all(*args):
        deferred = extend_all(*args)
        counts["extension"] += len(deferred)
        return deferred

    engine.memory.admit, engine.memory.extend_all = counted_admit, counted_extend_all
    stats = engine.generate([Request(f"r{i}", [i + 1] * 12, 20) for i in range(3)]).stats
    assert counts["extension"] > 0 and stats.preemptions > 0
    assert stats.deferrals == counts["admission"]
    assert Engine("tiny", num_blocks=2).generate([Request("one", [1], 1)]).stats.iterations == 1  # no decode step


def test_a_second_generate_while_one_runs_is_refused_and_the_first_completes():
    """The engine's memory keeps the running step's frames: a generate started while another
    runs (another thread, or a callback inside the running one) replaced them, so the first
    run's sessions were poisoned (SessionStateError on its next step) while the second ran. A
    second generate, or a close, while one runs is refused; the first run completes."""
    import threading

    engine = Engine("tiny", dtype=torch.float64, num_blocks=16, max_batch=4)
    seen = {}

    def inside_forward(module, args):
        if seen:
            return
        seen["entered"] = True  # once: the other calls' forwards pass through here too
        # A forward of the first run is in flight: its frames are live.
        def other():
            try:
                engine.generate([Request("other", [7, 8, 9], 3)])
                seen["generate"] = "ran"
            except EngineError as error:  # a lifecore error, and still the RuntimeError it was
                seen["generate"] = str(error) if isinstance(error, RuntimeError) else "not a RuntimeError"
            try:
                engine.close()
                seen["close"] = "closed"
            except EngineError as error:
                seen["close"] = str(error)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        try:
            engine.generate([Request("nested", [4, 5], 2)])
            seen["nested"] = "ran"
        except EngineError as error:
            seen["nested"] = str(error)

    batch = [Request(f"r{i}", [i + 1] * 5, 6) for i in range(3)]
    hook = engine.model.layers[0].register_forward_pre_hook(inside_forward)
    try:
        result = engine.generate(batch)
    finally:
        hook.remove()
    assert seen["generate"].startswith("Engine.generate: another generate is running on this engine")
    assert seen["nested"].startswith("Engine.generate: another generate is running on this engine")
    assert seen["close"].startswith("Engine.close: a generate is running on this engine")
    for request in batch:
        assert result.tokens[request.request_id] == reference_generate(engine.model, request.prompt,
                                                                      request.max_new_tokens)
    assert_released(engine)
    assert not engine.closed
    assert engine.generate([Request("after", [1, 2, 3], 2)]).tokens["after"] == reference_generate(
        engine.model, [1, 2, 3], 2)
    engine.close()


def test_a_scheduler_runs_at_most_its_max_batch_sequences():
    """A Scheduler sized for fewer rows than its memory has slots (the engine's memory with a
    scheduler of one's own, as the benchmark builds them): admission went on while the memory
    said yes, so a batch had more rows than the scheduler's block table and the run died in
    NumPy ('could not broadcast input array from shape (3,1) into shape (2,1)'). The scheduler
    admits up to ``max_batch`` running sequences; the rest wait for a slot of its own."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=16, max_batch=4)
    widths = []
    decode = engine.decode

    def counted(running, table):
        widths.append(len(running))
        return decode(running, table)

    engine.decode = counted
    scheduler = Bounded(engine.memory, engine, block_size=16, max_batch=2, max_blocks=engine.max_blocks)
    batch = [Request(f"r{i}", [i + 1, 2, 3], 4 + i) for i in range(3)]
    for request in batch:
        scheduler.add(request)
    scheduler.run()
    assert max(widths) == 2
    for request in batch:
        assert request.generated == reference_generate(engine.model, request.prompt, request.max_new_tokens)
    assert_released(engine)


def test_a_step_that_must_be_retried_is_never_taken_for_room():
    """RETRY_REQUIRED extends nothing (another thread took a frame of the sequence while the step
    ran): decoding on would write past the sequence's blocks, so the engine's memory raises
    instead of granting room."""
    from lifecore.sequence import BackingOutcome

    class Racing:  # what a session answers when a frame went live while its pages were prepared
        def step(self, tokens):
            return BackingOutcome.RETRY_REQUIRED

    engine = Engine("tiny", num_blocks=8, max_batch=2)
    with pytest.raises(EngineError, match="RETRY_REQUIRED .another thread took a frame"):
        engine.memory.extend(Racing(), 17)
    engine.close()


def test_an_engine_prints_its_shape_and_state():
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    assert repr(engine) == ("Engine(2 layers, d_model=32, device='cpu', 16-token blocks, max_batch=2, graphs=False, "
                            "capture=False)")
    engine.close()
    assert repr(engine) == "Engine(2 layers, d_model=32, device='cpu', closed, graphs=False, capture=False)"


def test_a_scale_factor_is_checked_in_the_dtype_of_the_model_given():
    model = Transformer(PRESETS["tiny"], dtype=torch.float16)
    with pytest.raises(InvalidArgumentError, match=r"scale's factor 70000 is past what torch.float16"):
        Engine(model, capture=CaptureOptions(scale=(0, 70000)))
    engine = Engine(model, num_blocks=8, max_batch=2, capture=CaptureOptions(scale=(0, 60000)))  # within float16
    engine.close()
    # Before: checked through torch's cast, which rounds into float16 through float32, twice:
    # 65519.999 became 65520, then inf, though the backend rounds it once, to 65504, and applies it.
    CaptureOptions(scale=(0, 65519.999)).check(2, torch.float16)
    with pytest.raises(InvalidArgumentError, match=r"scale's factor 65520.0 is past what torch.float16"):
        CaptureOptions(scale=(0, 65520.0)).check(2, torch.float16)


def test_a_forward_that_raises_skips_no_point_of_the_budget():
    # Before: the points a raising forward never reached were counted as skipped on the budget.
    engine = Engine("tiny", num_blocks=8, max_batch=2, capture=CaptureOptions(budget_bytes=1 << 30))
    hook = engine.model.layers[0].register_forward_hook(lambda *_: (_ for _ in ()).throw(RuntimeError("model bug")))
    with pytest.raises(RuntimeError, match="model bug"):
        engine.generate([Request("a", [1, 2, 3], 4)])
    hook.remove()
    assert engine.capture.skipped == 0
    engine.generate([Request("b", [1, 2, 3], 4)])
    assert engine.capture.skipped == 0 and engine.capture.captured == len(engine.capture.records) > 0
    engine.close()


def test_capture_options_check_refuses_a_dtype_that_is_no_floating_torch_dtype():
    # Before: "float16" was read by torch as a device string (a bare RuntimeError), and
    # torch.int32 was taken.
    options = CaptureOptions(scale=(0, 2.0))
    with pytest.raises(LifecoreTypeError, match=r"^CaptureOptions.check: argument 'dtype' must be a torch.dtype"):
        options.check(2, "float16")
    with pytest.raises(InvalidArgumentError, match=r"^CaptureOptions.check: argument 'dtype' must be a floating-point"):
        options.check(2, torch.int32)
    options.check(2, torch.bfloat16)
    options.check(2)


def test_capture_options_check_checks_its_arguments_without_a_scale_too():
    # Before: without a scale, any dtype and layers were taken; with one, layers "x" was a bare TypeError.
    with pytest.raises(LifecoreTypeError, match=r"^CaptureOptions.check: argument 'dtype' must be a torch.dtype"):
        CaptureOptions().check(2, "float16")
    with pytest.raises(LifecoreTypeError, match=r"^CaptureOptions.check: argument 'layers' must be an int, got str"):
        CaptureOptions(scale=(0, 2.0)).check("x")
    with pytest.raises(InvalidArgumentError, match=r"^CaptureOptions.check: argument 'layers' must be at least 1"):
        CaptureOptions(scale=(0, 2.0)).check(0)
