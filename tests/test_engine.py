"""The reference engine: the same tokens as a plain non-paged implementation, through
deferrals and preemptions; capture summaries equal to direct ones; everything released."""

from __future__ import annotations

import random

import numpy as np

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from engine_reference import generate as reference_generate  # noqa: E402

import lifecore  # noqa: E402
from lifecore.capture import CapturePhase  # noqa: E402
from lifecore.engine import CaptureOptions, Engine, Request  # noqa: E402
from lifecore.engine.model import PRESETS, Transformer  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


def requests(count=32, seed=0):
    rng = random.Random(seed)
    return [Request(f"r{i}", [rng.randrange(97) for _ in range(rng.randint(3, 40))], rng.randint(1, 30))
            for i in range(count)]


def fresh(batch):
    return [Request(r.request_id, list(r.prompt), r.max_new_tokens) for r in batch]


def assert_released(engine):
    capacity = engine.coordinator.capacity()
    assert capacity.used_bytes == {"kv": 0}
    assert capacity.active_sequences == 0
    assert engine.coordinator.holders() == []
    stats = engine.coordinator.page_memory_stats()
    assert stats["free_blocks"] == stats["blocks"] == {"kv": engine.kv.num_blocks}  # every block id is free again


def attentive() -> Transformer:
    """The tiny preset in float64 with its attention weights 10x GPT-2's initial scale. At that
    scale (the preset's own) a token barely depends on the KV cache: zeroing the whole cache
    after every token changed 26 of the 517 tokens of the tight batch's 31 requests of more than
    one token, so equal tokens proved little about paged attention or its block table. Here
    attention decides them (416 of 517; the next test checks it)."""
    model = Transformer(PRESETS["tiny"], dtype=torch.float64)
    with torch.no_grad():
        for layer in model.layers:
            layer.qkv.weight.mul_(10.0)
            layer.proj.weight.mul_(10.0)
    return model


@pytest.fixture(scope="module")
def tight():
    """32 requests through 24 blocks of 16 tokens and 16 slots, float64, on the attentive model."""
    engine = Engine(attentive(), dtype=torch.float64, num_blocks=24, max_batch=16)
    batch = requests()
    result = engine.generate(batch)
    return engine, batch, result


def test_tokens_equal_the_plain_reference_through_deferrals_and_preemptions(tight):
    engine, batch, result = tight
    assert result.stats.deferrals >= 5 and result.stats.preemptions >= 3, result.stats
    assert len(result.tokens) == 32
    for request in batch:
        expected = reference_generate(engine.model, request.prompt, request.max_new_tokens)
        assert result.tokens[request.request_id] == expected, request.request_id
    assert result.stats.generated >= sum(r.max_new_tokens for r in batch)  # recompute regenerates nothing
    assert_released(engine)


def test_the_tokens_compared_depend_on_the_kv_cache(tight):
    """What the equality above can catch: a cache zeroed after every token, or block tables
    that read one block too far along the arena, change most requests' tokens."""
    engine, batch, result = tight
    several = [r for r in batch if r.max_new_tokens > 1]  # a first token comes from the prefill alone
    zeroed = Engine(attentive(), dtype=torch.float64, num_blocks=24, max_batch=16)
    wrong = zeroed.generate(fresh(several), progress=lambda n: zeroed.kv.tensor.zero_())
    changed = [r for r in several if wrong.tokens[r.request_id] != result.tokens[r.request_id]]
    assert len(changed) >= 0.8 * len(several), (len(changed), len(several))
    rolled = Engine(attentive(), dtype=torch.float64, num_blocks=24, max_batch=16)
    rolled.generate(fresh(several[:1]))  # warm: the cache tensor exists
    wrong = rolled.generate(fresh(several), progress=lambda n: rolled.kv.tensor.copy_(rolled.kv.tensor.roll(1, 0)))
    changed = [r for r in several if wrong.tokens[r.request_id] != result.tokens[r.request_id]]
    assert len(changed) >= 0.8 * len(several), (len(changed), len(several))


def test_a_roomy_pool_gives_the_same_tokens_without_preempting(tight):
    engine, batch, result = tight
    roomy = Engine(attentive(), dtype=torch.float64, num_blocks=512, max_batch=32)
    again = roomy.generate(fresh(batch))
    assert again.stats.preemptions == 0 and again.stats.deferrals == 0
    assert again.tokens == result.tokens
    assert again.stats.iterations < result.stats.iterations
    assert_released(roomy)


def layer_outputs(engine):
    """Every layer's output per forward, recorded by plain forward hooks."""
    seen = []
    handles = [layer.register_forward_hook(lambda m, a, out, i=i: seen.append((f"layers.{i}", out.detach().clone())))
               for i, layer in enumerate(engine.model.layers)]
    return seen, handles


def test_captured_summaries_equal_summaries_computed_directly():
    engine = Engine("tiny", dtype=torch.float64, num_blocks=12, max_batch=8,
                    capture=CaptureOptions(budget_bytes=1 << 40))
    seen, handles = layer_outputs(engine)
    try:
        result = engine.generate(requests(12, seed=1))
    finally:
        for h in handles:
            h.remove()
    records = engine.capture.records
    assert engine.capture.skipped == 0 and len(records) == len(seen) > 0
    # Before: (selection id, payload) pairs, where the docs promise phase and prediction too.
    assert {phase for phase, _, _, _ in records} == {CapturePhase.PREFILL, CapturePhase.DECODE}
    assert all(prediction == 0 for phase, prediction, _, _ in records if phase == CapturePhase.PREFILL)
    assert any(prediction > 0 for phase, prediction, _, _ in records if phase == CapturePhase.DECODE)
    for (_, _, selection, payload), (path, tensor) in zip(records, seen):
        assert selection == path
        assert payload.count == tensor.numel()
        assert payload.mean == pytest.approx(tensor.mean().item(), rel=1e-12, abs=1e-12)
        assert payload.min == tensor.min().item() and payload.max == tensor.max().item()
        assert payload.std == pytest.approx(tensor.std(unbiased=False).item(), rel=1e-9)
    assert result.stats.preemptions > 0  # capture went through preemptions too
    engine.close()
    assert_released(engine)


def test_a_byte_budget_skips_and_changes_no_token(tight):
    engine, batch, result = tight
    budget = 2000
    captured = Engine(attentive(), dtype=torch.float64, num_blocks=24, max_batch=16,
                      capture=CaptureOptions(budget_bytes=budget))
    again = captured.generate(fresh(batch))
    capture = captured.capture
    assert capture.captured > 0 and capture.skipped > 0
    assert 0 < capture.used_bytes <= budget
    assert again.tokens == result.tokens
    # The budget is the engine's, not a run's: a second run draws on what the first left.
    used, captured_points, skipped = capture.used_bytes, capture.captured, capture.skipped
    assert captured.generate(fresh(batch)).tokens == result.tokens
    assert used <= capture.used_bytes <= budget and capture.captured >= captured_points
    assert capture.skipped > skipped
    # Skipped points are counted, not kept: the records are the captures, bounded by the budget.
    assert len(capture.records) == capture.captured
    assert all(payload is not None for _, _, _, payload in capture.records)
    kept = len(capture.records)
    captured.generate(fresh(batch))
    assert len(capture.records) == kept == capture.captured and capture.skipped > skipped
    captured.close()


def test_scaling_one_layer_changes_the_tokens_as_the_reference_predicts(tight):
    engine, batch, result = tight
    scaled = Engine(attentive(), dtype=torch.float64, num_blocks=24, max_batch=16,
                    capture=CaptureOptions(budget_bytes=0, scale=(0, 3.0)))
    again = scaled.generate(fresh(batch))
    assert again.tokens != result.tokens
    changed = [r for r in batch if again.tokens[r.request_id] != result.tokens[r.request_id]]
    assert len(changed) >= 4
    for request in batch[:8]:
        expected = reference_generate(engine.model, request.prompt, request.max_new_tokens,
                                      hook=lambda i, x: x * 3.0 if i == 0 else None)
        assert again.tokens[request.request_id] == expected
    scaled.close()
    assert_released(scaled)


def test_bad_input_is_refused_and_changes_nothing():
    with pytest.raises(ValueError, match="unknown preset"):
        Engine("huge")
    engine = Engine("tiny", num_blocks=8, max_batch=2)
    with pytest.raises(ValueError, match="positions"):
        engine.generate([Request("ok", [1, 2], 2), Request("long", [1] * 250, 10)])
    assert_released(engine)
    with pytest.raises(ValueError, match="graphs need a CUDA device"):
        Engine("tiny", graphs=True)


def test_a_request_larger_than_the_pool_is_rejected_and_the_rest_complete():
    engine = Engine("tiny", dtype=torch.float64, num_blocks=2, max_batch=2)
    result = engine.generate([Request("small", [1, 2, 3], 4), Request("big", list(range(40)), 10)])
    assert result.tokens["big"] == []
    # Why, in the result itself (before: only on the caller's Request, the result's empty list
    # alike for a rejection and an empty generation).
    assert result.rejected == {"big": "needs 4 blocks of 16 tokens; the engine has 2"}
    assert result.tokens["small"] == reference_generate(engine.model, [1, 2, 3], 4)
    assert_released(engine)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_graphs_on_cuda_match_the_reference_where_the_margin_is_clear():
    """In the model's own dtype (float32): every token whose reference top-2 logit margin
    exceeds MARGIN is equal; the first token under it may differ, and the request's later
    tokens are then not comparable."""
    margin_threshold = 1e-3
    engine = Engine("tiny", device="cuda", num_blocks=24, max_batch=16)
    assert engine.graphs_enabled
    batch = requests()
    result = engine.generate(batch)
    assert result.graph_captures > 0 and result.graph_replays > result.graph_captures
    assert result.graph_pool == "lifecore", engine.decode_graphs.pool_fallback  # torch pooled over lifecore
    assert engine.decode_graphs.recorded_allocations == 0  # the warmups primed every recorded pass
    for request in batch:
        margins = []
        expected = reference_generate(engine.model, request.prompt, request.max_new_tokens, margins=margins)
        for got, want, margin in zip(result.tokens[request.request_id], expected, margins):
            if got != want:
                assert margin < margin_threshold, (request.request_id, margin)
                break
    engine.close()
    assert_released(engine)


def test_the_graph_paths_padding_block_is_held_apart_and_given_back():
    """The block that padded batch rows write into is a sequence of its own (never a request's
    block); closing the engine completes it and every block comes back."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=4, max_batch=2)
    pad = engine._hold_padding_block()
    assert engine.coordinator.holders()[0][:2] == ("lifecore-engine-padding", 1)
    result = engine.generate([Request("a", [1, 2, 3], 40), Request("b", [4, 5], 20)])
    assert len(result.tokens["a"]) == 40
    assert engine.coordinator.page_memory_stats()["free_blocks"]["kv"] < engine.kv.num_blocks  # the padding block is held
    assert engine.coordinator.holders()[0][0] == "lifecore-engine-padding"
    engine.close()
    assert_released(engine)
    with pytest.raises(lifecore.ClosedError, match=r"^Engine.__enter__: the engine is closed"):
        with engine:
            pass


def test_a_kv_cache_whose_arena_cannot_be_its_tensor_says_so():
    """KVCache fell back to a tensor of its own, silently, whenever the arena's export failed: a
    grown domain (two chunks) or pages on another device left the arena allocated and unused."""
    from lifecore.engine.kv_cache import KVCache, page_bytes
    from lifecore.sequence import AdmissionCoordinator

    page = page_bytes(2, 2, 16, 16, torch.float32)
    with lifecore.Device("mock") as device:
        grown = AdmissionCoordinator(device, domains={"kv": (4 * page, 8 * page)}, page_bytes=page,
                                     tokens_per_page=16, max_active_sequences=2)
        grown.grow_domain("kv", 8 * page)
        with pytest.raises(ValueError, match=r"arena cannot be the cache tensor \(.*grew into 2 chunks"):
            KVCache(grown, 2, 2, 16, 16, torch.float32, "cpu")
        one = AdmissionCoordinator(device, domains={"kv": 4 * page}, page_bytes=page, tokens_per_page=16,
                                   max_active_sequences=2)
        with pytest.raises(ValueError, match="pages are on cpu, the cache is asked for on meta"):
            KVCache(one, 2, 2, 16, 16, torch.float32, "meta")
        assert KVCache(one, 2, 2, 16, 16, torch.float32, "cpu").on_arena
        assert KVCache(one, 2, 2, 16, 16, torch.float32, "cpu:0").on_arena  # a CPU is one device
    engine = Engine("tiny", dtype=torch.float64, num_blocks=8, max_batch=2, device="cpu:0")
    assert engine.kv.on_arena
    engine.close()
    host = AdmissionCoordinator(domains={"kv": 4 * page}, page_bytes=page, tokens_per_page=16, max_active_sequences=2)
    cache = KVCache(host, 2, 2, 16, 16, torch.float32, "cpu")  # host accounting: the engine allocates
    assert not cache.on_arena and cache.tensor.shape[0] == 4


def test_the_kv_cache_lives_on_the_coordinators_arena():
    """The cache tensor is a zero-copy view of lifecore's arena (the emulated device's on a CPU):
    a value written through the tensor reads back through the arena's own DLPack export."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=4, max_batch=2)
    try:
        assert engine.kv.on_arena
        stats = engine.lifecore_device.memory_stats()
        assert stats["arena_bytes"] == engine.kv.tensor.numel() * engine.kv.tensor.element_size()
        engine.kv.tensor.view(-1)[5] = 42.5
        arena = np.from_dlpack(engine.coordinator.arena("kv")).view(np.float64)
        assert arena[5] == 42.5
    finally:
        engine.close()


def test_the_cpu_engine_says_no_graph_pool_was_used():
    engine = Engine("tiny", dtype=torch.float64, num_blocks=4, max_batch=2)
    try:
        assert engine.decode_graphs is None
        assert engine.generate([Request("a", [1, 2], 3)]).graph_pool == "none"
    finally:
        engine.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_torchs_memory_in_a_graph_window_comes_from_lifecores_pool():
    """A torch step warmed up and recorded in a lifecore window, allocating in
    lifecore.torch.mem_pool: its segments are lent by lifecore (counted), the recorded pass
    allocates nothing, the graph replays to the eager value, and every segment comes back."""
    import gc

    import lifecore
    from lifecore import torch as lifecore_torch

    device = lifecore.Device("cuda", 0)
    stream = device.stream()
    torch_stream = torch.cuda.ExternalStream(stream.handle, device="cuda:0")
    x = torch.linspace(0, 1, 1 << 16, device="cuda:0")  # before the window: the caller's to keep alive
    torch.cuda.synchronize()
    expected = ((x * 2).sin() + 1).sum().item()
    # Segments an earlier test's pool left cached in torch go back first (the emptying below
    # would return them too): the count after is compared with what nothing here holds.
    gc.collect()
    torch.cuda.empty_cache()
    before = lifecore_torch.allocator_stats()
    pool = lifecore_torch.mem_pool(stream)
    try:
        with torch.cuda.stream(torch_stream), torch.cuda.use_mem_pool(pool), torch.no_grad():
            stream.graph_prepare()
            ((x * 2).sin() + 1).sum()  # warmup: primes lifecore's pool with torch's segments
            stream.sync()
            warm = lifecore_torch.allocator_stats()
            assert warm["allocations"] > before["allocations"] and warm["live"] > before["live"]
            allocations = device.memory_stats()["driver_allocations"]
            stream.begin_capture()
            try:
                out = ((x * 2).sin() + 1).sum()  # recorded, not run
            except BaseException:
                stream.abort_capture()
                raise
            graph = stream.end_capture()
        assert device.memory_stats()["driver_allocations"] == allocations
        assert lifecore_torch.allocator_stats()["refused"] == before["refused"]
        out.zero_()
        torch.cuda.synchronize()
        graph.replay(stream)
        stream.sync()
        assert out.item() == pytest.approx(expected, rel=1e-4)
        graph.destroy()
        del out, graph
        del pool
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        assert lifecore_torch.allocator_stats()["live"] == before["live"]  # torch gave every segment back
    finally:
        lifecore_torch.release_stream(stream)
        device.close()


def test_a_request_that_fills_the_pool_exactly_runs():
    """The last generated token is never fed back, so a request's cache holds its prompt and
    all its tokens but the last: prompt + max_new_tokens - 1. Counting the last one too, a
    request that filled its blocks exactly was rejected ("needs 2 blocks of 16 tokens; the
    engine has 1"), and one whose last fed-back token sat at the model's last position was
    refused as exceeding the positions."""
    engine = Engine("tiny", dtype=torch.float64, num_blocks=1, max_batch=2)
    batch = [Request("prefill-only", [2] * 16, 1), Request("one-step", [1] * 15, 2)]
    result = engine.generate(batch)
    for request in batch:
        assert request.rejected is None, request.rejected
        assert result.tokens[request.request_id] == reference_generate(engine.model, request.prompt,
                                                                        request.max_new_tokens)
    assert_released(engine)
    longest = Engine("tiny", dtype=torch.float64, num_blocks=16, max_batch=1)
    request = Request("last-position", [3] * 250, 7)  # fed back at positions up to 255, the model's last
    assert longest.generate([request]).tokens["last-position"] == reference_generate(longest.model, [3] * 250, 7)
    with pytest.raises(ValueError, match=r"prompt and output \(250 \+ 8\) need 257 positions"):
        longest.generate([Request("past", [3] * 250, 8)])
    too_big = Request("too-big", [1] * 16, 2)  # 17 tokens in the cache: 2 blocks
    engine.generate([too_big])
    assert too_big.rejected == "needs 2 blocks of 16 tokens; the engine has 1"
    assert_released(engine)
